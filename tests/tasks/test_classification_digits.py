"""End to end on scikit-learn's digits with the preset the audit uses: ≥ 95% test accuracy, and the trained model's
per-layer R^c under the authors' protocol below its random initialisation's. Prints the numbers."""
import json
from pathlib import Path

import pytest

from crate_nn.engine import train
from crate_nn.evaluate import main as crate_eval
from crate_nn.tasks import get_preset


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    output = tmp_path_factory.mktemp("digits")
    return train(get_preset("digits", output_dir=str(output), progress=False))


def test_digits_reaches_95_percent_and_compresses(digits_run):
    metrics = digits_run.metrics
    print(f"\ndigits preset: {digits_run.steps} steps in {digits_run.seconds:.1f} s; "
          f"val top-1 {metrics['val_top1']:.4f}, test top-1 {metrics['test_top1']:.4f}")
    assert metrics["test_top1"] >= 0.95
    root = digits_run.output_dir
    init = json.loads(open(f"{root}/measurements/epoch_0000.json").read())
    trained = json.loads(open(f"{root}/measurements/epoch_0030.json").read())
    for protocol in ("paper", "official"):
        for kind in ("compression", "sparsity"):
            before = [round(s["mean"], 3) for s in init[protocol][kind]]
            after = [round(s["mean"], 3) for s in trained[protocol][kind]]
            print(f"{protocol:8s} {kind:11s} random init {before}  trained {after}")
    # The authors' protocol (per-head unit-norm codes) is scale-free; the paper protocol's R^c follows ‖U‖ and hence
    # the weight decay, and its trained-vs-init ordering is not a property of training (audit claims
    # fig15-digits-paper, fig15-digits-weight-decay), so only the former is asserted.
    official_init = [s["mean"] for s in init["official"]["compression"]]
    official_trained = [s["mean"] for s in trained["official"]["compression"]]
    assert all(t < i for t, i in zip(official_trained, official_init)), (official_init, official_trained)
    for protocol in ("paper", "official"):
        assert Path(root, "measurements", f"layers_{protocol}.png").stat().st_size > 0


def test_crate_eval_reproduces_the_test_accuracy(digits_run, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert crate_eval([digits_run.checkpoint, "--split", "test", "--num-workers", "0", "--device", "cpu",
                       "--output", str(out)]) == 0
    metrics = json.loads(out.read_text())
    assert metrics["images"] == 360
    assert metrics["top1"] == pytest.approx(digits_run.metrics["test_top1"], abs=1e-12)  # same images, same model


def test_a_vit_baseline_trains_with_the_presets_measure_epochs_and_is_not_measured(tmp_path):
    """The documented ViT baseline of the digits preset keeps its layer-wise measure epochs: a model without MSSA
    layers (no U^ℓ to define R^c) is skipped, as the language tasks skip the GPT baseline, not a crash after the
    epoch-0 evaluation."""
    config = get_preset("digits", model="vit_tiny", model_args=dict(patch_size=4, dim=96, depth=3, heads=4),
                        epochs=1, warmup_epochs=0.0, measure_epochs=(0, 1), test_split=None,
                        output_dir=str(tmp_path), progress=False)
    result = train(config)
    assert "val_top1" in result.metrics and not (tmp_path / "measurements").exists()


@pytest.mark.parametrize("model", ["vit_tiny", "crate_mlp_s8", "crate_mhsa_s8", "tost_tiny"])
def test_baselines_train_on_digits_with_the_same_recipe(tmp_path, model):
    """ViT, CRATE-MLP, CRATE-MHSA and ToST (the tost_digits preset) at the digits preset's size (patch 4, d = 96,
    3 layers, 4 heads) and recipe, 5 of its 30 epochs: measured 97.2% / 90.3% / 95.8% / 90.3% validation top-1
    (chance is 10%, so 85% can only fail when a block does not learn)."""
    result = train(get_preset("digits", model=model, model_args=dict(patch_size=4, dim=96, depth=3, heads=4),
                              epochs=5, warmup_epochs=1.0, measure_epochs=(), test_split=None,
                              output_dir=str(tmp_path), progress=False))
    assert result.metrics["val_top1"] >= 0.85, result.metrics
