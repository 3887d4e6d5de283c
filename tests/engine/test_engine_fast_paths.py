"""The engine's options for a fast GPU step, checked on the CPU: ``--compile-mode`` (CUDA graphs on GPUs),
``--activations bf16`` and ``--loader threads`` parse and validate, reach the run, and leave the default run as it
was (`benchmarks.identity` checks bit identity of every preset across revisions)."""
from __future__ import annotations

import json

import pytest
import torch
from _train_cases import TINY_MODEL, tiny

import crate_nn
from crate_nn.engine import train
from crate_nn.engine.config import COMPILE_MODES, LOADERS
from crate_nn.engine.loop import compile_model
from crate_nn.engine.precision import ACTIVATIONS, keep_activations
from crate_nn.tasks import get_preset
from crate_nn.train import parse_args


def test_the_options_parse_and_refuse_what_they_do_not_know(capsys):
    config = parse_args(["--preset", "imagenet", "--compile", "--compile-mode", "reduce-overhead", "--activations",
                         "bf16", "--loader", "threads", "--num-workers", "6"])
    config.validate()
    run = config.run
    assert (run.compile, run.compile_mode, run.activations, run.loader, run.num_workers) == (
        True, "reduce-overhead", "bf16", "threads", 6)
    default = get_preset("imagenet")
    assert (default.run.compile_mode, default.run.activations, default.run.loader) == ("default", "fp32", "processes")
    for flag, value in (("--compile-mode", "fastest"), ("--activations", "fp8"), ("--loader", "fibres")):
        with pytest.raises(SystemExit):
            parse_args(["--preset", "imagenet", flag, value])
        assert flag.lstrip("-").replace("-", "_") in capsys.readouterr().err.replace("-", "_")
    assert set(COMPILE_MODES) >= {"default", "reduce-overhead", "max-autotune"} and set(LOADERS) == {
        "processes", "threads"} and set(ACTIVATIONS) == {"fp32", "bf16"}


def test_a_model_compiled_for_cuda_graphs_computes_what_the_eager_one_does():
    """On a CPU reduce-overhead compiles without CUDA graphs; the function is the eager one: float32, fused kernels
    may reorder sums (a few ulps of O(1) logits, as tests/models/test_models.py allows)."""
    torch.manual_seed(0)
    model = crate_nn.create_model("crate_tiny", **TINY_MODEL, image_size=8, num_classes=10).eval()
    x = torch.randn(3, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(compile_model(model, "reduce-overhead")(x), model(x), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="compile_mode"):
        compile_model(model, "fastest")


def test_the_engine_compiles_in_the_mode_asked(tmp_path, monkeypatch):
    modes = []

    def record(model, mode=None):
        modes.append(mode)
        return model

    monkeypatch.setattr(torch, "compile", record)
    train(tiny(tmp_path / "run", compile=True, compile_mode="max-autotune", max_steps=1))
    train(tiny(tmp_path / "default", compile=True, max_steps=1))
    assert modes == ["max-autotune", None]


def test_bf16_activations_train_and_are_refused_by_a_model_that_cannot_keep_them(tmp_path):
    run = train(tiny(tmp_path / "bf16", precision="bf16", activations="bf16", max_steps=3))
    saved = torch.load(run.checkpoint, weights_only=False)
    assert {t.dtype for t in saved["model"].values() if t.is_floating_point()} == {torch.float32}
    assert json.loads((tmp_path / "bf16" / "config.json").read_text())["activations"] == "bf16"
    with pytest.raises(ValueError, match="activations: .* cannot keep its activations"):
        keep_activations(torch.nn.Linear(2, 2), "bf16")
    with pytest.raises(ValueError, match="activations: expected"):
        keep_activations(torch.nn.Linear(2, 2), "fp8")


def test_bf16_activations_without_bf16_autocast_say_they_change_nothing(tmp_path, capsys):
    fp32 = train(tiny(tmp_path / "fp32", max_steps=2))
    kept = train(tiny(tmp_path / "kept", activations="bf16", max_steps=2))
    assert "--run.activations bf16 changes nothing here" in capsys.readouterr().err
    before, after = (torch.load(r.checkpoint, weights_only=False)["model"] for r in (fp32, kept))
    assert all(torch.equal(before[k], after[k]) for k in before)
