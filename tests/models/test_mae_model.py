"""crate_nn.models.mae: registered sizes and parameter counts, the sine-cosine table, masking, what the encoder
sees, the decoder against crate_theory in float64, the loss, the transfer to a classifier, bad input."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_models_vs_theory import bases, cols, randomise

from crate_nn import CRATEConfig, create_model, list_models, measure_layers
from crate_nn.analysis.reconstruction import reconstruct, reconstruction_figure, round_trip_errors, show_reconstructions
from crate_nn.models import CRATEClassifier, CRATEMAEConfig
from crate_nn.models.embedding import patchify, sincos_pos_embed_2d, unpatchify
from crate_nn.models.mae import random_mask
from crate_nn.official import crate_nn_to_official_mae
from crate_theory.decoder import DecoderLayerParams, decoder_layer

# Ours: every tensor the forward pass uses. The authors' structure adds an unused decoder_embed Linear(d, d) and the
# sine-cosine table twice as frozen parameters (the authors' code: small 25,405,824, base 44,638,464,
# tiny 11,555,328; its depth-24 large 154,274,560). Table 9 prints 25.4M / 44.6M / 78.5M (large with L = 12).
EXPECTED = {  # name: (ours, the authors' structure at the same size)
    "crate_mae_tiny": (11_256_192, 11_555_328),
    "crate_mae_small": (24_846_528, 25_405_824),
    "crate_mae_base": (43_745_280, 44_638_464),
    "crate_mae_large": (77_201_152, 78_654_208),
}
TOY = dict(image_size=8, patch_size=2, in_channels=1, dim=12, depth=2, heads=3)


def toy(seed=0, **overrides):
    torch.manual_seed(seed)
    return create_model("crate_mae_tiny", **{**TOY, **overrides}).double()


def images(batch=3, size=8, channels=1, seed=1):
    return torch.randn(batch, channels, size, size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def noise(batch=3, n=16, seed=2):
    return torch.rand(batch, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def count(state) -> int:
    return sum(v.numel() for v in state.values())


@pytest.mark.parametrize("name", list_models(family="mae"))
def test_registered_sizes_count_as_documented(name):
    ours, authors = EXPECTED[name]
    with torch.device("meta"):
        model = create_model(name)
    assert sum(p.numel() for p in model.parameters()) == ours
    assert count(crate_nn_to_official_mae(model.state_dict())) == authors
    cfg = model.config
    assert (cfg.depth, cfg.lam, cfg.image_size, cfg.patch_size, cfg.head_dim * cfg.heads) == (12, 0.5, 224, 16, cfg.dim)


def test_the_authors_depth_24_large_has_the_documented_count():
    with torch.device("meta"):
        model = create_model("crate_mae_large", depth=24)
    assert count(crate_nn_to_official_mae(model.state_dict())) == 154_274_560


@pytest.mark.parametrize("wiring", ["official", "paper"])
def test_forward_and_backward_at_full_width(wiring):
    """A registered width at 224² with one layer: finite loss, and every parameter receives a gradient."""
    torch.manual_seed(0)
    model = create_model("crate_mae_small", depth=1, wiring=wiring)
    out = model(torch.randn(2, 3, 224, 224))
    assert out.pred.shape == (2, 196, 768) and out.mask.sum(1).tolist() == [147, 147] and torch.isfinite(out.loss)
    out.loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


def test_a_vit_mae_has_vit_layers_in_encoder_and_decoder_and_learns():
    """Table 2's baseline: ``decoder="encoder"`` with MHSA + MLP layers stacks ViT layers in the decoder too (the
    white-box decoder's E^ℓ and MSSA are gone); everything outside the layers is shared with CRATE-MAE."""
    vit, crate = toy(attention="mhsa", feedforward="mlp", decoder="encoder"), toy()
    assert [type(layer).__name__ for layer in vit.decoder.layers] == \
        [type(layer).__name__ for layer in vit.encoder.layers]
    assert not any(".linear." in name for name, _ in vit.decoder.named_parameters())
    outside = {k: v.shape for k, v in crate.state_dict().items() if not k.startswith(("encoder.", "decoder."))}
    assert {k: v.shape for k, v in vit.state_dict().items() if not k.startswith(("encoder.", "decoder."))} == outside
    optimizer = torch.optim.AdamW(vit.parameters(), lr=1e-2)
    x, mask = images(), random_mask(noise(), 0.75)
    losses = []
    for _ in range(5):  # the same batch: the loss must fall
        out = vit(x, mask)
        losses.append(out.loss.item())
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    assert losses[-1] < losses[0]
    with pytest.raises(ValueError, match="decoder"):
        toy(decoder="vit")


def test_sine_cosine_table_is_the_documented_formula():
    d, rows, cols_ = 8, 3, 5
    table = sincos_pos_embed_2d(d, (rows, cols_)).numpy()[0]
    assert table.shape == (1 + rows * cols_, d) and not table[0].any()  # the class token's row is zero
    omega = 10000.0 ** (-4 * np.arange(d // 4) / d)
    for r in range(rows):
        for c in range(cols_):
            expected = np.concatenate([np.sin(c * omega), np.cos(c * omega), np.sin(r * omega), np.cos(r * omega)])
            np.testing.assert_allclose(table[1 + r * cols_ + c], expected, rtol=0, atol=1e-15)  # same float64 ops
    with pytest.raises(ValueError, match="dim: the 2-D sine-cosine table needs a multiple of 4"):
        sincos_pos_embed_2d(6, (2, 2))


def test_unpatchify_inverts_patchify():
    x = images(batch=2, size=12, channels=3)
    assert torch.equal(unpatchify(patchify(x, 4), 4, (3, 3), 3), x)


@given(batch=st.integers(1, 4), n=st.integers(1, 40), ratio=st.floats(0.01, 0.99), seed=st.integers(0, 2**16))
def test_masks_hide_an_exact_count_and_keep_the_smallest_noise(batch, n, ratio, seed):
    keep = int(n * (1 - ratio))
    if keep == n:
        with pytest.raises(ValueError, match="masks no patch"):
            random_mask(torch.rand(batch, n), ratio)
        return
    u = noise(batch, n, seed)
    mask = random_mask(u, ratio)
    assert mask.dtype == torch.bool and (mask.sum(1) == n - keep).all()
    for row, m in zip(u, mask):  # the visible patches are the `keep` smallest noise values
        assert set(torch.nonzero(~m).flatten().tolist()) == set(row.argsort()[:keep].tolist())
    assert torch.equal(random_mask(u.clone(), ratio), mask)  # a function of the noise alone


@pytest.mark.parametrize("ratio", [0.0, 1.0, -0.5, 1.5, float("nan"), True])
def test_mask_ratio_outside_the_open_interval_is_refused(ratio):
    with pytest.raises(ValueError, match="mask_ratio: expected a number in"):
        random_mask(torch.rand(2, 16), ratio)
    with pytest.raises(ValueError, match="mask_ratio"):
        toy()(images(), mask_ratio=ratio)


def test_the_same_generator_gives_the_same_masks():
    model = toy()
    a = model(images(), generator=torch.Generator().manual_seed(7)).mask
    b = model(images(), generator=torch.Generator().manual_seed(7)).mask
    c = model(images(), generator=torch.Generator().manual_seed(8)).mask
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_example_inputs_fix_the_mask_whatever_the_global_seed():
    """The GPU checks compare a model's outputs across devices and torch.compile, whose random streams differ: the
    MAE's example inputs carry their mask, so the forward pass draws nothing."""
    model = toy().float()
    images_, mask = model.example_inputs(5)
    assert images_.shape == (5, 1, 8, 8) and mask.shape == (5, 16) and mask.dtype == torch.bool
    assert (mask.sum(1) == 16 - int(16 * 0.25)).all()
    again = model.example_inputs(5)
    assert torch.equal(again[0], images_) and torch.equal(again[1], mask)
    torch.manual_seed(1)
    first = model(images_, mask)
    torch.manual_seed(2)
    second = model(images_, mask)
    assert torch.equal(first.mask, mask) and torch.equal(first.pred, second.pred)


@pytest.mark.parametrize("wiring", ["official", "paper"])
def test_masked_pixels_do_not_reach_the_prediction(wiring):
    """The visible and masked sets are disjoint in effect: changing the pixels of masked patches changes the target,
    not a single predicted value; changing a visible patch changes the prediction."""
    model = toy(wiring=wiring)
    x = images()
    mask = random_mask(noise(), 0.75)
    hidden = unpatchify(mask[..., None].expand(-1, -1, 4).double(), 2, (4, 4), 1).bool()
    other = torch.where(hidden, images(seed=9), x)
    first, second = model(x, mask), model(other, mask)
    assert torch.equal(first.pred, second.pred) and first.loss != second.loss
    visible = torch.where(hidden, x, images(seed=9))
    assert not torch.allclose(model(visible, mask).pred, first.pred)


def test_official_tokens_are_class_token_mask_tokens_and_patches_plus_the_table():
    model = toy()
    x, mask = images(), random_mask(noise(), 0.75)
    z = model.embed(x, mask)
    table = model.pos_embed[0]
    patches = model.patch_embed(x)
    assert z.shape == (3, 17, 12)
    assert torch.equal(z[:, 0], model.cls_token[0].expand(3, -1) + table[0])
    assert torch.equal(z[:, 1:][mask], (model.mask_token[0] + table[1:]).expand(3, -1, -1)[mask])
    assert torch.equal(z[:, 1:][~mask], (patches + table[1:])[~mask])


def test_paper_wiring_has_n_equal_N_and_a_pixel_space_mask_token():
    model = toy(wiring="paper")
    assert model.cls_token is None and model.mask_token.shape == (1, 1, 4) and model.pos_embed.shape == (1, 16, 12)
    x, mask = images(), random_mask(noise(), 0.75)
    with torch.no_grad():
        model.mask_token.copy_(torch.arange(4.0).view(1, 1, 4))
    masked_image = torch.where(mask[..., None], model.mask_token, patchify(x, 2))
    expected = model.patch_embed(unpatchify(masked_image, 2, (4, 4), 1)) + model.pos_embed
    assert torch.equal(model.embed(x, mask), expected)


@given(seed=st.integers(0, 2**16), skip=st.sampled_from(["input", "normed"]), depth=st.integers(1, 3))
def test_each_decoder_layer_equals_crate_theory_in_float64(seed, skip, depth):
    """Decoder layer g^ℓ of the MAE (eq. 64 with the LayerNorms; E bias-free, MSSA with its free output map) vs
    crate_theory.decoder.decoder_layer, tokens as columns. float64 arithmetic of O(1) numbers through one layer in
    another order: observed ~1e-15; the bar is 1e-10 as in test_models_vs_theory."""
    model = randomise(toy(seed=seed, skip=skip, depth=depth), seed)
    z = model.encode(images(seed=seed), random_mask(noise(seed=seed), 0.75))
    for layer in model.decoder.layers:
        params = DecoderLayerParams(
            E=layer.linear.weight.detach().numpy(), V=bases(layer.mssa), W=layer.mssa.out.weight.detach().numpy(),
            b=layer.mssa.out.bias.detach().numpy(),
            ln1_weight=layer.norm1.weight.detach().numpy(), ln1_bias=layer.norm1.bias.detach().numpy(),
            ln2_weight=layer.norm2.weight.detach().numpy(), ln2_bias=layer.norm2.bias.detach().numpy())
        half, out = decoder_layer(cols(z), params, temperature=1 / layer.mssa.scale, skip=skip)
        trace = layer.forward_intermediates(z)
        assert np.abs(cols(trace.half) - half).max() < 1e-10
        assert np.abs(cols(trace.output) - out).max() < 1e-10
        z = trace.output


def _identity(model):
    """Make ``model`` the identity from patches to predictions: tokens = the patch's pixels (d = P²C), every encoder
    and decoder layer and LayerNorm the identity, the table removed (official) or cancelled by eq. (70) (paper)."""
    d = model.config.dim
    model.encoder.layers = torch.nn.ModuleList()
    model.decoder.layers = torch.nn.ModuleList()
    model.norm = model.decoder_norm = torch.nn.Identity()
    with torch.no_grad():
        model.patch_embed.proj.weight.copy_(torch.eye(d).view(d, 1, 2, 2))  # (c p q) = (p q c) with one channel
        model.patch_embed.proj.bias.zero_()
        model.decoder_pred.weight.copy_(torch.eye(d))
        model.decoder_pred.bias.zero_()
        if model.cls_token is not None:
            model.pos_embed.zero_()
    return model


@pytest.mark.parametrize("wiring", ["official", "paper"])
def test_the_identity_model_has_zero_loss_where_it_sees_the_pixels(wiring):
    """With P²C = d and every map the identity, the prediction is the masked input itself: the loss is zero without a
    mask (paper; the official loss needs masked patches, and the prediction is then the image); with one, it is the
    closed form over the masked patches (official) or over all patches (paper, eq. 71),
    and zero again on images whose every patch equals the mask token."""
    model = _identity(toy(wiring=wiring, dim=4, heads=1))
    x = images()
    unmasked = torch.zeros(3, 16, dtype=torch.bool)
    if wiring == "paper":
        assert model(x, unmasked).loss < 1e-30  # (a + E_pos) − E_pos: squared rounding errors of ~1e-16
    else:
        with pytest.raises(ValueError, match="mask: the official wiring's loss is over the masked patches"):
            model(x, unmasked)
        assert torch.equal(model.decode(model.encode(x)), patchify(x, 2))
    mask = random_mask(noise(), 0.75)
    token = model.mask_token.detach().view(1, 1, 4)  # d = P²C: a pixel patch in either wiring
    per_patch = (token - patchify(x, 2)).square().mean(-1)  # (B, N), the error at a masked patch
    expected = per_patch[mask].mean() if wiring == "official" else (per_patch * mask).sum() / mask.numel()
    torch.testing.assert_close(model(x, mask).loss, expected, rtol=1e-12, atol=0)  # float64 sums in another order
    constant = unpatchify(token.expand(3, 16, 4), 2, (4, 4), 1)
    assert model(constant, mask).loss.abs() < 1e-30


def test_norm_pix_targets_are_standardised_per_patch():
    model = toy(norm_pix_loss=True)
    target = model.targets(images())
    torch.testing.assert_close(target.mean(-1), torch.zeros(3, 16, dtype=torch.float64), rtol=0, atol=1e-12)
    var = patchify(images(), 2).var(-1)  # unbiased, as FAIR's MAE: the targets' variance is var / (var + 1e-6)
    torch.testing.assert_close(target.var(-1), var / (var + 1e-6), rtol=1e-12, atol=0)  # float64, a few operations


def test_the_encoder_becomes_a_classifier_with_the_same_features():
    model = randomise(toy(), 3)
    config = CRATEConfig(**{k: v for k, v in TOY.items()}, num_classes=5, patch_embed="conv", lam=0.5, pool="mean")
    classifier = CRATEClassifier(config).double()
    state = model.classifier_state_dict(config)
    missing = set(classifier.state_dict()) - set(state)
    assert missing == {"head.fc.weight", "head.fc.bias"}
    classifier.load_state_dict(state, strict=False)
    x = images()
    assert torch.equal(classifier.forward_features(x), model.forward_intermediates(x)[0])
    with pytest.raises(ValueError, match=r"lam=0.5 \(classifier 0.1\).*--model-args lam=0.5"):
        model.classifier_state_dict(CRATEConfig(**TOY, num_classes=5, patch_embed="conv"))
    with pytest.raises(ValueError, match="patch_embed='conv' \\(classifier 'linear'\\)"):
        model.classifier_state_dict(CRATEConfig(**TOY, num_classes=5, lam=0.5))


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(image_size=9), "image_size=9 is not divisible by patch_size=2"),
        (dict(dim=6, heads=3), "dim=6 must be divisible by 4"),
        (dict(wiring="fair"), "wiring must be one of"),
        (dict(final_norm_eps=0.0), "final_norm_eps must be a positive number"),
        (dict(depth=0), "depth must be a positive integer"),
    ],
)
def test_config_rejects_bad_values_by_name(changes, message):
    with pytest.raises(ValueError, match=message):
        CRATEMAEConfig(**{**TOY, **changes})


@pytest.mark.parametrize(
    "bad, mask, error, message",
    [
        (images(size=9), None, ValueError, "9x9 is not divisible by patch_size=2"),
        (images(channels=3), None, ValueError, "3 channels, the model expects in_channels=1"),
        (images(size=10), None, ValueError, "differs from image_size=8"),
        (images().float(), None, TypeError, "dtype torch.float32"),
        (images(), torch.zeros(3, 15, dtype=torch.bool), ValueError, r"mask: expected a bool tensor of shape \(3, 16\)"),
        (images(), torch.zeros(3, 16), ValueError, "mask: expected a bool tensor"),
    ],
)
def test_bad_input_raises_errors_naming_it(bad, mask, error, message):
    with pytest.raises(error, match=message):
        toy()(bad, mask)


def test_white_box_measurements_reach_encoder_and_decoder():
    model = toy().eval()
    x = images(batch=4)
    encoder = measure_layers(model, x, protocol="official")
    z = model.encode(x)
    decoder = measure_layers(model.decoder, z, protocol="paper")
    assert len(encoder.compression) == len(decoder.compression) == 2
    trip = round_trip_errors(model, x)
    with torch.no_grad():
        _, traces = model.forward_intermediates(x)
        manual = [(model.decoder.layers[1 - i](t.output) - t.input).flatten(1).norm(dim=1) / t.input.flatten(1).norm(dim=1)
                  for i, t in enumerate(traces)]
    for stat, values in zip(trip.layers, manual):
        torch.testing.assert_close(stat.values, values, rtol=1e-12, atol=0)  # the same float64 operations
    assert math.isfinite(trip.stack.mean)


def test_reconstructions_paste_the_visible_patches_and_draw(tmp_path):
    model = toy()
    x = images()
    rec = reconstruct(model, x, random_mask(noise(), 0.75))
    hidden = rec.masked.isnan()
    assert hidden.float().mean() == 0.75 and torch.equal(rec.pasted[~hidden], x[~hidden])
    assert torch.equal(rec.pasted[hidden], rec.reconstruction[hidden])
    reconstruction_figure(rec, (0.3,), (0.4,), title="toy").savefig(tmp_path / "rec.png")
    own = torch.randint(0, 256, (2, 1, 16, 16), dtype=torch.uint8)  # another size: resized to 8×8
    assert len(show_reconstructions(model, own, (0.3,), (0.4,)).axes) == 8
