"""The authors' CRATE-MAE format: a random state dict in their layout, reconstructed by an independent float64
forward pass written here from the documented behaviour of their code (github.com/Ma-Lab-Berkeley/CRATE:
gather-and-unshuffle masking, the class token, one table added after the mask tokens, encoder and decoder blocks,
the masked-patch loss), against `load_official_mae`; FAIR-MAE files on disk; errors naming what is wrong."""
import argparse

import pytest
import torch
from test_checkpoint import _layer_norm  # tests/: the LayerNorm written out, as for the classifier's import

from crate_nn import checkpoint
from crate_nn.models import create_model
from crate_nn.models.embedding import sincos_pos_embed_2d
from crate_nn.models.mae import random_mask
from crate_nn.official import crate_nn_to_official_mae, load_official_mae, official_mae_to_crate_nn


def _attention(sd, pre, y, heads):
    """Their Attention: w = y Uᵀ split by head, softmax(w wᵀ p^-1/2) w, heads concatenated, to_out (with bias)."""
    w = y @ sd[pre + "fn.qkv.weight"].T
    p = w.shape[-1] // heads
    outs = []
    for k in range(heads):
        wk = w[..., k * p:(k + 1) * p]
        logits = wk @ wk.transpose(1, 2) * p**-0.5
        e = torch.exp(logits - logits.max(-1, keepdim=True).values)
        outs.append((e / e.sum(-1, keepdim=True)) @ wk)
    return torch.cat(outs, -1) @ sd[pre + "fn.to_out.0.weight"].T + sd[pre + "fn.to_out.0.bias"]


def authors_mae(sd, img, noise, heads, ratio=0.75, eta=0.1, lam=0.5, norm_pix=False):
    """(loss, pred (B, N, P²C), mask (B, N) with 1 = removed) as their model computes them, for the noise they draw."""
    b = img.shape[0]
    conv = sd["patch_embed.proj.weight"]
    d, c, size, _ = conv.shape
    rows, cols = img.shape[2] // size, img.shape[3] // size
    crops = [img[:, :, i * size:(i + 1) * size, j * size:(j + 1) * size] for i in range(rows) for j in range(cols)]
    x = torch.stack([torch.einsum("bcpq,ocpq->bo", crop, conv) for crop in crops], 1) + sd["patch_embed.proj.bias"]
    n = x.shape[1]
    # masking: sort the noise, keep the first int(N(1 − ratio)), append mask tokens, unshuffle
    keep = int(n * (1 - ratio))
    shuffle = noise.argsort(dim=1)
    restore = shuffle.argsort(dim=1)
    kept = torch.gather(x, 1, shuffle[:, :keep, None].expand(-1, -1, d))
    removed = torch.ones(b, n, dtype=img.dtype)
    removed[:, :keep] = 0
    removed = torch.gather(removed, 1, restore)
    full = torch.cat([kept, sd["mask_token"].expand(b, n - keep, d)], 1)
    full = torch.gather(full, 1, restore[..., None].expand(-1, -1, d))
    x = torch.cat([sd["cls_token"].expand(b, 1, d), full], 1) + sd["decoder_pos_embed"]
    depth = 1 + max(int(k.split(".")[1]) for k in sd if k.startswith("blocks."))
    for i in range(depth):  # encoder: x + MSSA(LN x), then ISTA(LN ·) with three products, no skip
        pre = f"blocks.{i}.layers.0."
        x = x + _attention(sd, pre + "0.", _layer_norm(x, sd[pre + "0.norm.weight"], sd[pre + "0.norm.bias"], 1e-5),
                           heads)
        y = _layer_norm(x, sd[pre + "1.norm.weight"], sd[pre + "1.norm.bias"], 1e-5)
        D = sd[pre + "1.fn.weight"]
        x = torch.relu(y + eta * (y @ D - (y @ D.T) @ D) - eta * lam)
    x = _layer_norm(x, sd["norm.weight"], sd["norm.bias"], 1e-6)
    for i in range(depth):  # decoder: h = LN(x) Eᵀ, x = h − MSSA(LN h)
        pre = f"decoder_blocks.{i}.layers.0."
        h = _layer_norm(x, sd[pre + "0.norm.weight"], sd[pre + "0.norm.bias"], 1e-5) @ sd[pre + "0.fn.weight"].T
        x = h - _attention(sd, pre + "1.", _layer_norm(h, sd[pre + "1.norm.weight"], sd[pre + "1.norm.bias"], 1e-5),
                           heads)
    x = _layer_norm(x, sd["decoder_norm.weight"], sd["decoder_norm.bias"], 1e-6)
    pred = (x @ sd["decoder_pred.weight"].T + sd["decoder_pred.bias"])[:, 1:]
    target = torch.stack([crop.permute(0, 2, 3, 1).reshape(b, -1) for crop in crops], 1)  # (p, q, c) order
    if norm_pix:
        target = (target - target.mean(-1, keepdim=True)) / (target.var(-1, keepdim=True) + 1e-6) ** 0.5
    per_patch = ((pred - target) ** 2).mean(-1)
    return (per_patch * removed).sum() / removed.sum(), pred, removed


def authors_state_dict(dim=12, depth=2, patch=2, channels=3, grid=3, seed=0):
    """A random state dict in their layout (LayerNorm affines and biases randomised so that swaps would show)."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape, scale=1.0):
        return scale * torch.randn(*shape, generator=g, dtype=torch.float64)

    pd = patch * patch * channels
    table = sincos_pos_embed_2d(dim, (grid, grid))
    sd = {"cls_token": r(1, 1, dim), "mask_token": r(1, 1, dim), "pos_embed": table.clone(),
          "decoder_pos_embed": table, "patch_embed.proj.weight": r(dim, channels, patch, patch, scale=pd**-0.5),
          "patch_embed.proj.bias": 0.1 * r(dim), "norm.weight": 1 + 0.1 * r(dim), "norm.bias": 0.1 * r(dim),
          "decoder_embed.weight": r(dim, dim), "decoder_embed.bias": r(dim),
          "decoder_norm.weight": 1 + 0.1 * r(dim), "decoder_norm.bias": 0.1 * r(dim),
          "decoder_pred.weight": r(pd, dim, scale=dim**-0.5), "decoder_pred.bias": 0.1 * r(pd)}
    for i in range(depth):
        for pre, attention, other in ((f"blocks.{i}.layers.0.", "0.", "1."), (f"decoder_blocks.{i}.layers.0.", "1.", "0.")):
            sd.update({pre + attention + "norm.weight": 1 + 0.1 * r(dim), pre + attention + "norm.bias": 0.1 * r(dim),
                       pre + attention + "fn.qkv.weight": r(dim, dim, scale=dim**-0.5),
                       pre + attention + "fn.to_out.0.weight": r(dim, dim, scale=dim**-0.5),
                       pre + attention + "fn.to_out.0.bias": 0.1 * r(dim),
                       pre + other + "norm.weight": 1 + 0.1 * r(dim), pre + other + "norm.bias": 0.1 * r(dim),
                       pre + other + "fn.weight": r(dim, dim, scale=(6 / dim) ** 0.5)})
    return sd


def inputs(batch=3, channels=3, size=6, seed=5):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, channels, size, size, generator=g, dtype=torch.float64),
            torch.rand(batch, (size // 2) ** 2, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("norm_pix", [False, True])
def test_reconstructions_equal_an_independent_forward_in_float64(norm_pix):
    sd = authors_state_dict()
    img, noise = inputs()
    model = load_official_mae(sd, heads=3, norm_pix_loss=norm_pix)
    cfg = model.config
    assert (cfg.dim, cfg.depth, cfg.heads, cfg.patch_size, cfg.image_size, cfg.in_channels, cfg.lam) == (
        12, 2, 3, 2, 6, 3, 0.5)
    assert model.pos_embed.dtype == torch.float64
    ours = model(img, random_mask(noise, 0.75))
    loss, pred, removed = authors_mae(sd, img, noise, heads=3, norm_pix=norm_pix)
    assert torch.equal(ours.mask, removed.bool())  # the same masks from the same noise
    # float64 through 2 + 2 layers in another order: observed ~1e-15; 1e-10 is the bar of the other imports
    assert (ours.pred - pred).abs().max() < 1e-10 and (ours.loss - loss).abs() < 1e-10
    assert pred.abs().max() > 0.1 and loss > 0.1  # a non-degenerate comparison


def test_a_fair_mae_file_loads_with_weights_only_and_its_args(tmp_path):
    """{"model", "optimizer", "epoch", "args": Namespace} from disk: heads from args.model, the loss from
    args.norm_pix_loss, a DDP prefix, float32 (a realistic width: the name must match the tensors)."""
    sd = {"module." + k: v.float() for k, v in authors_state_dict(dim=384, depth=1, patch=16, grid=2).items()}
    args = argparse.Namespace(model="mae_crate_tiny", norm_pix_loss=True, mask_ratio=0.75, blr=1.5e-4)
    path = tmp_path / "checkpoint-799.pth"
    torch.save({"model": sd, "optimizer": {}, "epoch": 799, "args": args}, path)
    with pytest.raises(ValueError, match=r"holds Python objects beyond tensors and plain values \(argparse.Namespace\)"):
        checkpoint.read(path)  # the plain weights-only reader refuses the Namespace ...
    model = load_official_mae(path)  # ... which this loader allows, and nothing else
    cfg = model.config
    assert (cfg.dim, cfg.heads, cfg.depth, cfg.image_size, cfg.norm_pix_loss) == (384, 6, 1, 32, True)
    assert model.pos_embed.dtype == torch.float32


class Stranger:
    """Not an allowed global: unpickling it would run code."""


def test_other_pickled_objects_are_refused(tmp_path):
    path = tmp_path / "evil.pth"
    torch.save({"model": authors_state_dict(), "args": Stranger()}, path)
    with pytest.raises(ValueError, match=r"holds Python objects beyond tensors and plain values "
                                         r"\(test_official_mae.Stranger\), which are never unpickled"):
        load_official_mae(path, heads=3)


def test_export_round_trips_and_adds_the_unused_tensors():
    torch.manual_seed(0)
    model = create_model("crate_mae_tiny", image_size=8, patch_size=2, dim=16, depth=2, heads=4).double()
    theirs = crate_nn_to_official_mae(model.state_dict())
    assert torch.equal(theirs["pos_embed"], theirs["decoder_pos_embed"])
    assert {"decoder_embed.weight", "decoder_embed.bias"} <= set(theirs)
    again = load_official_mae(theirs, heads=4)
    for key, value in model.state_dict().items():
        assert torch.equal(again.state_dict()[key], value), key
    assert official_mae_to_crate_nn(theirs).keys() == model.state_dict().keys()


def test_missing_unexpected_and_mismatched_tensors_are_named():
    sd = authors_state_dict()
    broken = {k: v for k, v in sd.items() if k != "decoder_blocks.1.layers.0.0.fn.weight"}
    with pytest.raises(ValueError, match=r"missing keys \['decoder_blocks.1.layers.0.0.fn.weight'\]"):
        load_official_mae(broken, heads=3)
    with pytest.raises(ValueError, match=r"missing keys \[\], unexpected keys \['head.weight'\]"):
        load_official_mae({**sd, "head.weight": torch.zeros(1)}, heads=3)
    with pytest.raises(ValueError, match="shape mismatch: decoder_pred.bias"):
        load_official_mae({**sd, "decoder_pred.bias": torch.zeros(5, dtype=torch.float64)}, heads=3)
    shallow = {k: v for k, v in sd.items() if not k.startswith("decoder_blocks.1.")}
    with pytest.raises(ValueError, match="decoder has 1 layers and its encoder 2"):
        load_official_mae(shallow, heads=3)
    with pytest.raises(ValueError, match="heads cannot be inferred"):
        load_official_mae(sd)
    with pytest.raises(ValueError, match="heads=5 does not divide"):
        load_official_mae(sd, heads=5)
    with pytest.raises(ValueError, match="wiring: the authors' checkpoints have the official wiring"):
        load_official_mae(sd, heads=3, wiring="paper")
    odd = {**sd, "decoder_pos_embed": torch.zeros(1, 9, 12, dtype=torch.float64)}
    with pytest.raises(ValueError, match="8 patch positions, not a square grid"):
        load_official_mae(odd, heads=3)
