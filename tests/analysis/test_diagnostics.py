"""crate_nn.analysis (diagnostics and plots): tracing without side effects, batching, coherence, figures."""
import json

import matplotlib
import pytest
import torch
from matplotlib.figure import Figure

import crate_nn
from crate_nn import coherence, measure_layers, trace
from crate_nn.analysis import plots

matplotlib.use("Agg")


def model_and_images(**overrides):
    torch.manual_seed(0)
    options = dict(image_size=16, patch_size=4, num_classes=3, dim=16, depth=3, heads=4)
    model = crate_nn.create_model("crate_tiny", **{**options, **overrides}).double().eval()
    return model, torch.randn(5, 3, 16, 16, dtype=torch.float64)


def test_trace_matches_forward_and_leaves_the_model_untouched():
    model, images = model_and_images(attn_dropout=0.1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    traces = trace(model, images, return_attention=True)
    assert len(traces) == 3
    # with attention maps the explicit softmax path runs: equal to the fused forward up to float64 rounding
    torch.testing.assert_close(traces[-1].output, model.forward_features(images), rtol=0, atol=1e-13)
    torch.testing.assert_close(trace(model, images)[-1].output, model.forward_features(images), rtol=0, atol=0)
    torch.testing.assert_close(traces[0].input, model.embed(images), rtol=0, atol=0)
    for a, b in zip(traces, traces[1:]):
        assert a.output is b.input
    assert traces[0].attention.shape == (5, 4, 17, 17)
    assert not model.training and all(m.fused_attn for m in model.modules() if isinstance(m, crate_nn.MSSA))
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not traces[0].half.requires_grad  # diagnostics build no autograd graph


def test_measure_layers_is_independent_of_batching_and_accepts_loaders():
    model, images = model_and_images()
    whole = measure_layers(model, images, batch_size=64)
    loader = [(images[:2], torch.zeros(2)), (images[2:], torch.zeros(3))]
    split = measure_layers(model, loader, thresholds=(1.0, 0.1))
    for a, b in zip(whole.compression + whole.sparsity, split.compression + split.sparsity):
        # the same per-image float64 numbers, computed in different batch groupings (SVD per image)
        torch.testing.assert_close(a.values, b.values, rtol=1e-13, atol=0)
    assert set(split.thresholded) == {1.0, 0.1}
    for low, high in zip(split.thresholded[0.1], split.thresholded[1.0]):
        assert (low.values >= high.values).all()  # a larger threshold keeps fewer entries


def test_measure_layers_casts_to_the_model_and_rejects_bad_arguments():
    model, images = model_and_images()
    as_float32 = measure_layers(model, images.float())
    assert len(as_float32.compression) == 3
    with pytest.raises(ValueError, match="protocol must be one of"):
        measure_layers(model, images, protocol="hooks")
    with pytest.raises(ValueError, match="eps must be positive"):
        measure_layers(model, images, eps=0.0)
    with pytest.raises(TypeError, match="CRATE model with an encoder"):
        measure_layers(torch.nn.Linear(2, 2), images)


def test_measurements_print_as_a_per_layer_table_and_convert(capsys):
    """A result printed (or shown at the prompt) is one table row per layer, not the per-image tensors; to_dict()
    is JSON-ready and to_dataframe() indexed by layer."""
    model, images = model_and_images()
    stats = measure_layers(model, images, protocol="official", thresholds=(0.5,))
    print(stats)
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == "per-layer measurements (protocol official, ε = 0.1, 5 images): mean ± std over the images"
    assert lines[1].split() == ["layer", "R^c", "‖Z‖₀/dn", "|Z|≥0.5"]
    assert len(lines) == 2 + 3 and "tensor" not in repr(stats) and repr(stats) == str(stats)
    for layer, line in enumerate(lines[2:]):
        words = line.split()
        assert words[0] == str(layer + 1)
        assert words[1:4] == [f"{stats.compression[layer].mean:.4g}", "±", f"{stats.compression[layer].std:.2g}"]
    table = stats.to_dict()
    assert json.loads(json.dumps(table)) == table
    assert (table["protocol"], table["eps"], table["images"]) == ("official", 0.1, 5)
    row = table["layers"][2]
    assert row["layer"] == 3 and row["compression_mean"] == stats.compression[2].mean
    assert row["sparsity_std"] == stats.sparsity[2].std and row["above_0.5_mean"] == stats.thresholded[0.5][2].mean
    frame = stats.to_dataframe()
    assert list(frame.index) == [1, 2, 3] and frame.loc[2, "compression_mean"] == stats.compression[1].mean


def test_coherence_of_orthonormal_bases_is_identity():
    q, _ = torch.linalg.qr(torch.randn(12, 12, dtype=torch.float64))
    weight = 3.0 * q.T[:8]  # 8 orthogonal directions (K·p = 8), scaled: columns are normalised first
    torch.testing.assert_close(coherence(weight), torch.eye(8, dtype=torch.float64), rtol=0, atol=1e-14)
    model, _ = model_and_images()
    per_layer = coherence(model)
    assert per_layer.shape == (3, 16, 16)
    torch.testing.assert_close(per_layer.diagonal(dim1=-2, dim2=-1), torch.ones(3, 16, dtype=torch.float64))
    # u uᵀ in float64: symmetric up to rounding (BLAS kernels may compute entries (i, j) and (j, i) differently)
    torch.testing.assert_close(per_layer, per_layer.transpose(-1, -2), rtol=0, atol=1e-15)
    assert per_layer.abs().max() <= 1 + 1e-12  # Cauchy–Schwarz for unit vectors


def test_figures_are_built_for_every_style():
    model, images = model_and_images()
    paper = measure_layers(model, images, thresholds=(1.0, 0.5, 0.1))
    official = measure_layers(model, images, protocol="official")
    figures = [
        plots.plot_layer_curves({"paper": paper, "official": official}),
        plots.plot_thresholded_sparsity(paper, label="CRATE"),
        plots.plot_token_heatmaps(trace(model, images)),
        plots.plot_coherence(coherence(model), heads=4),
    ]
    assert all(isinstance(f, Figure) for f in figures)
    left, right = figures[0].axes[:2]
    assert len(left.lines) == 2 and list(left.lines[0].get_xdata()) == [1, 2, 3]
    assert list(left.lines[0].get_ydata()) == [s.mean for s in paper.compression]
    assert len(figures[1].axes[0].lines) == 3
    with pytest.raises(ValueError, match="no thresholded sparsity"):
        plots.plot_thresholded_sparsity(official)
