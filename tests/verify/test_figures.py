"""The measurements of the Figs. 15/21/26 claims (verify.claims.figures): CRATE's layer measures are
crate_nn.measure_layers', a ViT's R^c reads its value map, and the depth-effectiveness arithmetic."""
import numpy as np
import pytest
import torch

import crate_nn
from crate_nn.analysis.diagnostics import THRESHOLDS, subspace_weight
from verify import digits
from verify.claims import figures
from verify.context import Context
from verify.registry import Result, all_claims, deciding
from verify.statistics import compare


def _model(name: str):
    torch.manual_seed(0)
    return crate_nn.create_model(name, image_size=8, patch_size=4, dim=32, depth=3, heads=4, num_classes=10,
                                 in_channels=1).eval()


def test_crate_layer_measures_are_measure_layers():
    model, images = _model("crate_tiny"), torch.randn(6, 1, 8, 8)
    ours = figures.layer_measures(model, images)
    for protocol in ("paper", "official"):
        theirs = crate_nn.measure_layers(model, images, protocol=protocol, thresholds=THRESHOLDS)
        np.testing.assert_allclose(ours[protocol], [s.mean for s in theirs.compression], rtol=1e-12)
        np.testing.assert_allclose(ours["sparsity"], [s.mean for s in theirs.sparsity], rtol=1e-12)
        for tau in THRESHOLDS:
            np.testing.assert_allclose(ours["above"][str(tau)], [s.mean for s in theirs.thresholded[tau]], rtol=1e-12)


def test_a_vit_is_measured_against_its_value_map():
    model, x = _model("vit_tiny"), torch.randn(2, 5, 32)
    layer = model.encoder.layers[0]
    _, _, v = layer.attn.qkv_heads(x)  # (batch, K, n, p), with the bias
    weight = subspace_weight(layer)
    codes = (x @ weight.T).unflatten(-1, (4, 8)).transpose(1, 2)
    bias = layer.attn.qkv.bias.chunk(3)[2].view(4, 1, 8)
    torch.testing.assert_close(codes + bias, v)
    measured = figures.layer_measures(model, torch.randn(3, 1, 8, 8))
    assert len(measured["official"]) == 3 and all(np.isfinite(measured["official"]))
    assert measured["sparsity"] == pytest.approx([1.0] * 3)  # a residual stream is dense


def test_the_fall_beyond_initialisation_subtracts_the_initialisations_fall():
    runs = [{"trained": {"m": [10.0, 8.0, 5.0]}, "init": {"m": [10.0, 10.0, 9.0]}},
            {"trained": {"m": [4.0, 4.0, 4.0]}, "init": {"m": [4.0, 4.0, 5.0]}}]
    np.testing.assert_allclose(figures.relative_fall(digits.per_seed(runs, "trained", ("m",))), [0.5, 0.0])
    np.testing.assert_allclose(figures.fall_beyond_init(runs, "m"), [0.5 - 0.1, 0.0 + 0.25])


def test_the_deciding_comparison_is_the_first_failure_else_the_first_undecided_else_the_nearest():
    holds, near, fails = (compare(v, direction="above") for v in ([3.0, 3.1, 3.2], [0.5, 0.6, 0.55], [-1, -1.1, -1.2]))
    undecided = compare([-1.0, 1.0, 0.1], direction="above")
    assert deciding([holds, undecided, fails]) == 2
    assert deciding([holds, undecided]) == 1
    assert deciding([holds, near]) == 1


# ------------------------------------------------------------------------------------------------ verdicts
CLAIMS = {c.id: c for c in all_claims()}
SEEDS, LAYERS = 5, 3
WOBBLE = np.array([1.0, -1.0, 1.0, -1.0, 1.5])  # per-seed signs whose mean the seeds cannot tell from 0


def verdict(claim_id: str, tmp_path) -> Result:
    return CLAIMS[claim_id].measure(Context("full", 0, claim_id, tmp_path))


def records(by_epoch: dict) -> list[dict]:
    """Recorded progressions, one per seed: ``by_epoch`` maps an epoch to (seeds, layers) sparsities."""
    flat = [{"mean": 60.0}] * LAYERS
    return [{e: {"official": {"compression": flat}, "paper": {"compression": flat, "sparsity": [
        {"mean": float(v)} for v in values[s]]}} for e, values in by_epoch.items()} for s in range(SEEDS)]


@pytest.mark.parametrize("transition", list(figures.TRANSITIONS))
def test_fig15_sparsity_claims_exempt_the_last_layer(monkeypatch, tmp_path, transition):
    early, late = figures.TRANSITIONS[transition]
    before = np.tile([0.5, 0.4, 0.35], (SEEDS, 1))

    def install(after):
        by_epoch = {e: before for e in figures.PROGRESSION_EPOCHS} | {late: after}
        monkeypatch.setattr(figures, "_progression", lambda seed: (records(by_epoch), 1.0))

    claim_id = f"fig15-digits-{transition}-sparsity"
    install(before + [-0.05, -0.05, +0.1])  # sparser at layers 1–2; the last layer denser (footnote 17)
    result = verdict(claim_id, tmp_path)
    assert result.verdict == "holds" and "footnote 17" in result.measured
    install(before + [-0.05, +0.05, -0.1])
    assert verdict(claim_id, tmp_path).verdict == "fails"
    install(before + np.outer(WOBBLE, [0.02, -0.05, -0.1]) + [0, -0.05, 0])  # layer 1 undecided
    assert verdict(claim_id, tmp_path).verdict == "inconclusive"


def test_fig21_sparsity_claim_ends_at_the_last_layer_but_one(monkeypatch, tmp_path):
    """The relative fall of the non-zero fraction is taken from layer 1 to layer L − 1 (footnote 17)."""
    def install(fall):  # depth → the trained curve's relative fall to layer L − 1, beyond a flat initialisation
        def measured_runs(name, seed):
            depth = int(name.split()[1])
            runs = []
            for s in range(SEEDS):
                trained = 0.5 * (1 - (fall(depth) + 0.002 * WOBBLE[s]) * np.linspace(0, 1, depth - 1))
                runs.append({"trained": {"sparsity": [*trained, 0.9]},  # the last layer dense: it must not count
                             "init": {"sparsity": [0.5] * depth}})
            return runs, 1.0
        monkeypatch.setattr(figures, "measured_runs", measured_runs)

    install(lambda depth: 0.02 * depth)
    assert verdict("fig21-digits-depth-sparsity", tmp_path).verdict == "holds"
    install(lambda depth: 0.3 - 0.02 * depth)
    assert verdict("fig21-digits-depth-sparsity", tmp_path).verdict == "fails"
    install(lambda depth: 0.1)
    assert verdict("fig21-digits-depth-sparsity", tmp_path).verdict == "inconclusive"
