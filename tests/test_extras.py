"""Optional packages (`crate_nn.extras`): a missing one is one line naming its pip extra, said before any run
directory or output folder exists, so the same command works once the package is installed (before, a missing
tensorboard left a run folder that then refused the same command: "already holds a run")."""
import sys
from pathlib import Path

import pytest
from _train_cases import ROOT, TINY_MODEL, tiny

from crate_nn import extras
from crate_nn.engine import train
from crate_nn.engine.run_dir import check_output_dir
from crate_nn.prepare_text import main as prepare_text_main
from crate_nn.segment import main as segment_main
from crate_nn.train import main as train_main

TRAIN = ["--preset", "synthetic", "--image-size", "8", "--model-args", *[f"{k}={v}" for k, v in TINY_MODEL.items()],
         "--batch-size", "8", "--synthetic-samples", "16", "--epochs", "1", "--no-progress", "--device", "cpu",
         "--augment", "none"]


def missing(monkeypatch, *packages):
    """Make ``packages`` look uninstalled: an import fails and find_spec finds nothing."""
    for package in packages:
        monkeypatch.setitem(sys.modules, package, None)


def test_every_extra_named_exists_in_pyproject():
    tomllib = pytest.importorskip("tomllib")  # Python ≥ 3.11
    extras_of = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for package, extra in extras.EXTRAS.items():
        assert any(req.split(">")[0].split("=")[0].strip() == package for req in extras_of[extra]), (package, extra)


def test_crate_train_tensorboard_missing_leaves_no_run_directory(monkeypatch, tmp_path, capsys):
    missing(monkeypatch, "tensorboard", "torch.utils.tensorboard")
    out = tmp_path / "run"
    for _ in range(2):  # the same command again gets the same answer, not "already holds a run"
        assert train_main([*TRAIN, "--run.tensorboard", "--run.output-dir", str(out)]) == 1
        assert capsys.readouterr().err == (
            "crate-train: tensorboard: --run.tensorboard needs the tensorboard package: pip install "
            "'crate-whitebox[tensorboard]' (or pip install tensorboard)\n")
        assert not out.exists()


def test_the_engine_checks_tensorboard_before_making_the_run_folders(monkeypatch, tmp_path):
    """`engine.train` called directly (no command line check): the run's own folders are not made either."""
    missing(monkeypatch, "tensorboard", "torch.utils.tensorboard")
    config = tiny(tmp_path / "run", tensorboard=True)
    with pytest.raises(ValueError, match=r"tensorboard: .*crate-whitebox\[tensorboard\]"):
        train(config)
    check_output_dir(config.run.output_dir, resume=False, overwrite=False)  # no run there to refuse


@pytest.mark.parametrize("spec, package", [("tiktoken:gpt2", "tiktoken"), ("hf:roberta-base", "tokenizers")])
def test_tokenizer_packages_are_checked_first(monkeypatch, tmp_path, capsys, spec, package):
    missing(monkeypatch, package)
    from crate_nn.data.tokenizers import get_tokenizer

    get_tokenizer.cache_clear()
    hint = f"pip install 'crate-whitebox[text]' (or pip install {package})"
    out = tmp_path / "run"
    assert train_main(["--preset", "pairs_stdlib", "--tokenizer", spec, "--output-dir", str(out)]) == 1
    assert capsys.readouterr().err == f"crate-train: tokenizer: the tokenizer {spec!r} needs the {package} package: {hint}\n"
    assert not out.exists()
    corpus = tmp_path / "a.txt"
    corpus.write_text("some text")
    assert prepare_text_main(["--input", str(corpus), "--tokenizer", spec, "--output-dir", str(out)]) == 1
    assert capsys.readouterr().err.endswith(f"needs the {package} package: {hint}\n")
    assert not out.exists()
    get_tokenizer.cache_clear()


def test_crate_segment_coco_checks_pycocotools_before_reading_anything(monkeypatch, tmp_path, capsys):
    missing(monkeypatch, "pycocotools")
    assert segment_main(["coco", str(tmp_path / "none.pt"), "--coco-dir", str(tmp_path / "coco"),
                         "--output", str(tmp_path / "coco.json")]) == 2
    assert capsys.readouterr().err == ("crate-segment: coco: COCO AP needs the pycocotools package: pip install "
                                       "'crate-whitebox[seg]' (or pip install pycocotools)\n")
    assert not Path(tmp_path / "coco.json").exists()


def test_available_and_tokenizer_package():
    assert extras.available("json") and not extras.available("no_such_package_crate")
    assert extras.tokenizer_package("tiktoken:gpt2") == "tiktoken"
    assert extras.tokenizer_package("hf:roberta-base") == "tokenizers"
    assert extras.tokenizer_package("bytes") is None and extras.tokenizer_package(None) is None


def test_the_notebooks_extra_holds_what_running_the_notebooks_imports():
    """Every third-party module that running the notebooks imports (``python -m notebooks.run``, and
    tests/notebooks through it) is in the ``notebooks`` extra, which ``dev`` includes."""
    import ast

    tomllib = pytest.importorskip("tomllib")  # Python ≥ 3.11
    extras_of = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {req.split(">")[0].split("=")[0].strip().replace("-", "_") for req in extras_of["notebooks"]}
    imported = set()
    for path in (ROOT / "notebooks" / "run.py", ROOT / "tests" / "notebooks" / "test_notebooks.py"):
        tree = ast.parse(path.read_text())
        imported |= {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    third_party = imported - set(sys.stdlib_module_names) - {"pytest", "crate_nn", "crate_theory", "verify",
                                                              "notebooks"}
    assert third_party and third_party <= names, third_party - names
    assert "crate-whitebox[notebooks]" in extras_of["dev"]
