"""A mistyped argument of ``python -m verify.network``, ``crate-eval`` or ``crate-export`` is one line on stderr,
exit status 2, told before torch is imported (it used to take the 7–13 s of importing torch first): each command
runs in a subprocess under ``-X importtime``, which lists every module the interpreter imported."""
import subprocess
import sys

import pytest
from _train_cases import ROOT

import crate_nn
from crate_nn import cli

COMMANDS = {
    "verify.network": ("python -m verify.network", ["model.pt", "--dataset", "digits", "--n", "0"],
                       "argument --n: expected a positive integer, got 0"),
    "crate_nn.evaluate": ("crate-eval", ["model.pt", "--batch-size", "0"],
                          "argument --batch-size: expected a positive integer, got 0"),
    "crate_nn.export": ("crate-export", ["in.pt", "out.pt", "--heads", "-1"],
                        "argument --heads: expected a positive integer, got -1"),
}


def run_module(module: str, argv: list[str]) -> tuple[int, list[str], set[str]]:
    """(exit status, stderr's lines but importtime's, the modules imported) of ``python -X importtime -m module``."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", module, *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    lines = done.stderr.splitlines()
    imported = {line.rsplit("|", 1)[-1].strip() for line in lines if line.startswith("import time:")}
    return done.returncode, [line for line in lines if not line.startswith("import time:")], imported


@pytest.mark.parametrize("module", COMMANDS)
def test_an_argument_error_is_one_line_before_torch_is_imported(module):
    prog, argv, message = COMMANDS[module]
    status, err, imported = run_module(module, argv)
    assert status == 2 and err == [f"{prog}: {message}"], err
    # verify.network imports numpy and scipy (verify's statistics) before it parses; the crate_nn commands neither
    heavy = {"torch"} if module == "verify.network" else {"torch", "numpy"}
    assert not heavy & imported, sorted(heavy & imported)


def test_a_missing_argument_and_an_unknown_choice_are_one_line_too():
    status, err, imported = run_module("crate_nn.export", [])
    assert status == 2 and err == ["crate-export: the following arguments are required: input, output"]
    assert "torch" not in imported
    # a registry's names (the formats, the datasets) are read when a value must be checked against them
    status, err, _ = run_module("crate_nn.export", ["in.pt", "out.pt", "--format", "onnx"])
    assert status == 2 and len(err) == 1 and err[0].startswith("crate-export: argument --format: invalid choice: "
                                                               "'onnx' (choose from 'safetensors', 'ours', ")


def test_importing_crate_nn_imports_torch_only_when_a_name_is_used():
    done = subprocess.run([sys.executable, "-c", "import sys, crate_nn, crate_nn.cli, crate_nn.preprocessing; "
                           "print('torch' in sys.modules); crate_nn.load; print('torch' in sys.modules)"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["False", "True"], done.stderr
    assert {"load", "create_model", "CRATEConfig", "weights"} <= set(dir(crate_nn))
    with pytest.raises(AttributeError, match="module 'crate_nn' has no attribute 'nope'"):
        crate_nn.nope  # noqa: B018 - the attribute access is the test


def test_choices_are_read_once_and_only_when_needed():
    calls = []

    def names():
        calls.append(1)
        return ("a", "b")

    choices = cli.Choices(names)
    assert calls == []
    assert "a" in choices and "c" not in choices and list(choices) == ["a", "b"] and len(choices) == 2
    assert calls == [1]
