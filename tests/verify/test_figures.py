"""The measurements of the Figs. 15/21/26 claims (verify.claims.figures): CRATE's layer measures are
crate_nn.measure_layers', a ViT's R^c reads its value map, and the depth-effectiveness arithmetic."""
import numpy as np
import pytest
import torch

import crate_nn
from verify import digits
from verify.claims import figures
from verify.registry import deciding
from verify.statistics import compare


def _model(name: str):
    torch.manual_seed(0)
    return crate_nn.create_model(name, image_size=8, patch_size=4, dim=32, depth=3, heads=4, num_classes=10,
                                 in_channels=1).eval()


def test_crate_layer_measures_are_measure_layers():
    model, images = _model("crate_tiny"), torch.randn(6, 1, 8, 8)
    ours = figures.layer_measures(model, images)
    for protocol in ("paper", "official"):
        theirs = crate_nn.measure_layers(model, images, protocol=protocol, thresholds=figures.THRESHOLDS)
        np.testing.assert_allclose(ours[protocol], [s.mean for s in theirs.compression], rtol=1e-12)
        np.testing.assert_allclose(ours["sparsity"], [s.mean for s in theirs.sparsity], rtol=1e-12)
        for tau in figures.THRESHOLDS:
            np.testing.assert_allclose(ours["above"][str(tau)], [s.mean for s in theirs.thresholded[tau]], rtol=1e-12)


def test_a_vit_is_measured_against_its_value_map():
    model, x = _model("vit_tiny"), torch.randn(2, 5, 32)
    layer = model.encoder.layers[0]
    _, _, v = layer.attn.qkv_heads(x)  # (batch, K, n, p), with the bias
    weight = figures.subspace_weight(layer)
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
