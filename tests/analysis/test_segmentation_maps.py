"""Class-token attention maps (eq. 437/438), patch codes and the MSSA affinity against independent NumPy float64
formulas and the network's explicit attention path; DINO's mass threshold; PCA images; figures; bad input."""
import matplotlib
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from matplotlib.figure import Figure

import crate_nn
from crate_nn import trace
from crate_nn.analysis.segmentation import (
    attention_masks,
    cls_attention,
    mass_mask,
    mssa_affinity,
    patch_codes,
    patch_grid,
    pca_images,
    plot_attention_maps,
    plot_masks,
    plot_pca,
    plot_rows,
    upsample,
)

matplotlib.use("Agg")


def model_and_images(attention="mssa", **overrides):
    torch.manual_seed(0)
    options = dict(image_size=16, patch_size=4, num_classes=3, dim=16, depth=3, heads=4, attention=attention)
    model = crate_nn.create_model("crate_tiny", **{**options, **overrides}).double().eval()
    with torch.no_grad():  # a random class token and position embedding of std 1, as at initialisation
        model.pos_embed.normal_()
    return model, torch.randn(2, 3, 16, 16, dtype=torch.float64)


def layer_norm(x, norm):
    """LayerNorm by hand (NumPy), with the module's weight, bias and ε."""
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + norm.eps) * norm.weight.detach().numpy() + norm.bias.detach().numpy()


def reference_maps(model, images, scale):
    """Eq. (437) / (438) in NumPy float64: softmax over patches i of scale·⟨K_k* z_i, Q_k* z_cls⟩, z = LN1(Z^ℓ);
    for MSSA Q_k = K_k = U_k (the rows of the bias-free qkv weight), for MHSA the qkv rows are [Q; K; V] + bias."""
    maps = []
    for layer, t in zip(model.encoder.layers, trace(model, images)):
        z = layer_norm(t.input.numpy(), layer.norm1)
        attn = layer.attn
        weight = attn.qkv.weight.detach().numpy()
        bias = attn.qkv.bias.detach().numpy() if attn.qkv.bias is not None else np.zeros(weight.shape[0])
        out = z @ weight.T + bias  # (B, n, K·p) for MSSA, (B, n, 3·K·p) for MHSA
        kp = attn.heads * attn.dim_head
        q, k = (out, out) if weight.shape[0] == kp else (out[..., :kp], out[..., kp:2 * kp])
        q = q.reshape(*q.shape[:2], attn.heads, attn.dim_head)
        k = k.reshape(*k.shape[:2], attn.heads, attn.dim_head)
        logits = scale(attn) * np.einsum("bikp,bkp->bki", k[:, 1:], q[:, 0])
        e = np.exp(logits - logits.max(-1, keepdims=True))
        maps.append(e / e.sum(-1, keepdims=True))
    return np.stack(maps)


@pytest.mark.parametrize("attention", ["mssa", "mhsa"])
def test_eq437_matches_numpy_and_the_explicit_attention_row(attention):
    model, images = model_and_images(attention)
    maps = cls_attention(model, images)
    assert maps.shape == (3, 2, 4, 16) and maps.dtype == torch.float64
    # float64 throughout; the two sides round differently (LayerNorm, matmul order): 1e-12 is ~1e4 ulps
    for scale in (None, 1.0):
        expected = reference_maps(model, images, (lambda a: a.scale) if scale is None else (lambda a: 1.0))
        np.testing.assert_allclose(cls_attention(model, images, scale=scale).numpy(), expected, rtol=0, atol=1e-12)
    # the explicit path's class-token row over the patches, renormalised (the class token's self-weight dropped)
    rows = torch.stack([t.attention[:, :, 0, 1:] for t in trace(model, images, return_attention=True)])
    torch.testing.assert_close(maps, rows / rows.sum(-1, keepdim=True), rtol=0, atol=1e-12)
    # eq. (437) as printed (no 1/√p) is a different map: erratum 15 matters
    assert not torch.allclose(cls_attention(model, images, scale=1.0), maps, atol=1e-3)


def test_layers_select_and_count_from_the_end():
    model, images = model_and_images()
    every = cls_attention(model, images)
    torch.testing.assert_close(cls_attention(model, images, [-1, 0]), every[[2, 0]], rtol=0, atol=0)
    torch.testing.assert_close(cls_attention(model, images, -2)[0], every[1], rtol=0, atol=0)


def test_patch_codes_and_the_mssa_affinity():
    model, images = model_and_images()
    codes = patch_codes(model, images)
    assert codes.shape == (3, 2, 16, 16)
    for layer, t, c in zip(model.encoder.layers, trace(model, images), codes):
        z = layer_norm(t.input.numpy()[:, 1:], layer.norm1)
        weight = layer.attn.qkv.weight.detach().numpy()  # [U_1 … U_K]*, (K·p, d)
        np.testing.assert_allclose(c.numpy(), z @ weight.T, rtol=0, atol=1e-12)  # float64, different rounding
        per_head = sum((z @ u.T) @ (z @ u.T).transpose(0, 2, 1) for u in weight.reshape(4, 4, 16))
        np.testing.assert_allclose(mssa_affinity(c).numpy(), per_head, rtol=0, atol=1e-11)


@given(st.integers(0, 2**31 - 1), st.floats(0.05, 1.0))
def test_mass_mask_matches_a_greedy_loop(seed, mass):
    maps = torch.from_numpy(np.random.default_rng(seed).random((3, 10)))
    keep = mass_mask(maps, mass)
    for m, k in zip(maps.numpy(), keep.numpy()):
        order, total, expected = np.argsort(-m), 0.0, np.zeros(10, dtype=bool)
        for i in order:
            if total >= mass * m.sum():
                break
            expected[i], total = True, total + m[i]
        assert np.array_equal(k, expected)


def test_attention_masks_average_or_threshold_each_head():
    attention = torch.softmax(torch.randn(2, 4, 16), dim=-1)
    assert attention_masks(attention, heads="each").shape == (2, 4, 16)
    torch.testing.assert_close(attention_masks(attention), mass_mask(attention.mean(1)), rtol=0, atol=0)
    with pytest.raises(ValueError, match="heads"):
        attention_masks(attention, heads="max")
    with pytest.raises(ValueError, match="mass"):
        mass_mask(attention, 1.5)


def test_upsample_fills_each_patch():
    grid = torch.arange(6.0).reshape(2, 3)
    big = upsample(grid, (4, 6))
    assert torch.equal(big, grid.repeat_interleave(2, 0).repeat_interleave(2, 1))
    assert upsample(grid > 2, 4).dtype == torch.bool


def test_pca_images_shape_range_sign_and_offset_invariance():
    rng = np.random.default_rng(0)
    features = torch.from_numpy(rng.normal(size=(3, 12, 10)) * np.linspace(3, 0.1, 10))
    images = pca_images(features, (3, 4))
    assert images.shape == (3, 3, 4, 3) and images.min() >= 0 and images.max() <= 1
    # float64 SVDs of ±features (or shifted features) agree to ~1e-12; the output is float32
    torch.testing.assert_close(pca_images(-features, (3, 4)), images, rtol=0, atol=1e-6)
    torch.testing.assert_close(pca_images(features + 5.0, (3, 4)), images, rtol=0, atol=1e-6)
    # the components are scikit-learn's principal components (up to sign and the per-image min-max scaling)
    from sklearn.decomposition import PCA

    scores = PCA(3).fit_transform(features.reshape(-1, 10).numpy()).reshape(3, 12, 3)
    for i in range(3):
        for c in range(3):
            corr = np.corrcoef(scores[i, :, c], images[i].reshape(12, 3)[:, c].numpy())[0, 1]
            assert abs(abs(corr) - 1) < 1e-6


def test_figures_are_built_without_pyplot(tmp_path):
    image = torch.rand(3, 16, 16)
    maps = torch.rand(4, 16, 16)
    masks = torch.zeros(2, 16, 16, dtype=torch.bool)
    masks[0, 2:6, 3:9] = True
    figures = [plot_attention_maps(image, maps, "a"), plot_masks(image, masks, torch.tensor([[3, 2, 9, 6], [0] * 4])),
               plot_pca(image[None].repeat(2, 1, 1, 1), torch.rand(2, 4, 4, 3)),
               plot_rows(image[None].repeat(2, 1, 1, 1), {"x": maps[:2]}),
               plot_rows(image[None].repeat(2, 1, 1, 1), {"x": masks}, kind="mask")]
    for i, fig in enumerate(figures):
        assert isinstance(fig, Figure)
        fig.savefig(tmp_path / f"{i}.png")
        assert (tmp_path / f"{i}.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_input_is_refused():
    model, images = model_and_images()
    with pytest.raises(ValueError, match="not divisible by the model's patch size 4"):
        patch_grid(model, torch.randn(1, 3, 18, 18, dtype=torch.float64))
    encoder = crate_nn.CRATEEncoder(crate_nn.BlockConfig(dim=16, heads=4), depth=2)
    with pytest.raises(ValueError, match="class token"):
        cls_attention(encoder, torch.randn(1, 17, 16))
    with pytest.raises(ValueError, match="layers"):
        cls_attention(model, images, 3)
    with pytest.raises(ValueError, match="features"):
        pca_images(torch.randn(2, 10, 4), (3, 4))
