"""CRATE-α's JAX checkpoints (UCSC-VLAA/CRATE-alpha, ``models/crate.py`` and ``models/common.py``, saved by
``helpers/utils.py``'s ``save_checkpoint``): the ``.npz`` files of the Hub repository's ``jax/`` folder,
``crate_alpha_{B16,B8,L14,L8}_in1k.npz`` — the ImageNet-1K B/8 (83.2%) and L/8 (85.1%) exist only in this format.

A file is ``np.savez`` of the training state's tree with ``/``-joined names: the parameters under ``params/`` (the
optimizer's ``opt/…`` and ``chrono/…`` arrays beside them are never read), or the parameters alone. Layer i is
``Transformer/encoderblock_{i}/``; flax names a layer's parameters ``kernel``/``bias`` (Dense, Conv) and
``scale``/``bias`` (LayerNorm). Their key, its shape (JAX's (in, out) order) and ours:

    embedding/kernel          (P, P, C, d)   patch_embed.proj.weight (d, C, P, P): nn.Conv on NHWC images, a
    embedding/bias            (d,)           patch_embed.proj.bias    cross-correlation like torch's; kernel
                                                                      permuted (3, 2, 0, 1)
    cls                       (1, 1, d)      cls_token
    pos_embedding             (1, N+1, d)    pos_embed (added after the class token is prepended)
    …/LayerNorm_0/{scale,bias}               encoder.layers.{i}.norm1.{weight,bias}
    …/MultiHeadDotProductSubspaceAttention_0/proj/kernel (d, K, p)
                                             encoder.layers.{i}.mssa.qkv.weight (K·p, d): reshaped (d, K·p), transposed
    …/MultiHeadDotProductSubspaceAttention_0/out/kernel  (K, p, d)
                                             encoder.layers.{i}.mssa.out.weight (d, K·p): reshaped (K·p, d), transposed
    …/LayerNorm_1/{scale,bias}               encoder.layers.{i}.norm2.{weight,bias}
    …/OvercompleteISTABlock_0/D   (d, 4d)    encoder.layers.{i}.ista.weight      (as stored: their einsum
    …/OvercompleteISTABlock_0/D1  (d, 4d)    encoder.layers.{i}.ista.out_weight   "p d, n l p" is y D)
    encoder_norm/{scale,bias}                head.norm.{weight,bias}
    head/kernel (d, C), head/bias (C,)       head.fc.weight (C, d) transposed, head.fc.bias

Their computation is our CRATE-α classifier's (`crate_nn.models.classifier._ALPHA`): the attention has no biases
(``use_bias=False``), one projection serves as query, key and value, scaled by p^(-1/2) on the query; the ISTA block
is the over-complete one with a skip; the class token's output is read after ``encoder_norm``. Unlike the PyTorch port
(`crate_nn.weights.adapters.alpha`), whose head LayerNorm has PyTorch's ε 1e-5, every LayerNorm here is flax's,
ε 1e-6 (the head's too: ``head_norm_eps=1e-6``). The file fixes the heads K (the projection is (d, K, p)), so no
``heads=`` is needed. Images: RGB scaled by ImageNet's mean and standard deviation (their ``vgg_value_range``),
224² after resizing the short side to 256 and a central crop; their model takes NHWC images, ours NCHW.

Arrays the model does not have (``ls1``/``ls2`` LayerScale of ``init_values``, a sine-cosine ``posemb`` with no
``pos_embedding``) are refused naming the keys. ``crate-export --format crate-alpha-jax`` writes the parameters under
``params/`` as their ``load_params`` reads them (bfloat16 as 2-byte void, as JAX stores it).
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import nn

from ...models.classifier import _ALPHA, CRATEClassifier, CRATEConfig
from ...models.registry import model_config
from .. import storage
from ..adapter import Adapter
from ..build import check_matches, expected_state
from ..keys import KeyMap, layer_count, state_dict_of

SOURCE = "CRATE-α JAX"
HEAD_NORM_EPS = 1e-6
"""flax's LayerNorm ε, the JAX model's in every LayerNorm (the PyTorch port's head has 1e-5)."""
_BLOCK = "Transformer/encoderblock_{i}/"
_ATTN, _ISTA = _BLOCK + "MultiHeadDotProductSubspaceAttention_0/", _BLOCK + "OvercompleteISTABlock_0/"
_LAYER = "encoder.layers.{i}."
KEYS = KeyMap([
    ("embedding/kernel", "patch_embed.proj.weight"),
    ("embedding/bias", "patch_embed.proj.bias"),
    ("cls", "cls_token"),
    ("pos_embedding", "pos_embed"),
    (_BLOCK + "LayerNorm_0/scale", _LAYER + "norm1.weight"),
    (_BLOCK + "LayerNorm_0/bias", _LAYER + "norm1.bias"),
    (_ATTN + "proj/kernel", _LAYER + "mssa.qkv.weight"),
    (_ATTN + "out/kernel", _LAYER + "mssa.out.weight"),
    (_BLOCK + "LayerNorm_1/scale", _LAYER + "norm2.weight"),
    (_BLOCK + "LayerNorm_1/bias", _LAYER + "norm2.bias"),
    (_ISTA + "D", _LAYER + "ista.weight"),
    (_ISTA + "D1", _LAYER + "ista.out_weight"),
    ("encoder_norm/scale", "head.norm.weight"),
    ("encoder_norm/bias", "head.norm.bias"),
    ("head/kernel", "head.fc.weight"),
    ("head/bias", "head.fc.bias"),
])


def _layout_to_ours(key: str, tensor: torch.Tensor) -> torch.Tensor:
    """One of their arrays (under our name ``key``) in our layout."""
    if key == "patch_embed.proj.weight":
        return tensor.permute(3, 2, 0, 1).contiguous()  # (P, P, C, d) → (d, C, P, P)
    if key.endswith("mssa.qkv.weight"):
        return tensor.flatten(1).T.contiguous()  # (d, K, p) → (K·p, d)
    if key.endswith("mssa.out.weight"):
        return tensor.flatten(0, 1).T.contiguous()  # (K, p, d) → (d, K·p)
    if key == "head.fc.weight":
        return tensor.T.contiguous()  # (d, C) → (C, d)
    return tensor


def _layout_to_theirs(key: str, tensor: torch.Tensor, heads: int) -> torch.Tensor:
    """Our tensor ``key`` in their layout (the inverse of `_layout_to_ours`)."""
    if key == "patch_embed.proj.weight":
        return tensor.permute(2, 3, 1, 0).contiguous()
    if key.endswith("mssa.qkv.weight"):
        return tensor.T.unflatten(1, (heads, -1)).contiguous()
    if key.endswith("mssa.out.weight"):
        return tensor.T.unflatten(0, (heads, -1)).contiguous()
    if key == "head.fc.weight":
        return tensor.T.contiguous()
    return tensor


def crate_nn_to_crate_alpha_jax(state_dict: Mapping[str, torch.Tensor], heads: int) -> dict[str, torch.Tensor]:
    """Our state dict (a ``crate_alpha_*`` model with K = ``heads``) under their names and in their layout, without
    the ``params/`` prefix."""
    return {theirs: _layout_to_theirs(ours, state_dict[ours], heads)
            for ours, theirs in zip(state_dict, KEYS.to_theirs(state_dict, SOURCE))}


def crate_alpha_jax_to_crate_nn(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Their parameters (names without ``params/``) under our names and in our layout; keys without a counterpart
    raise ValueError naming them."""
    return {ours: _layout_to_ours(ours, state[theirs]) for theirs, ours in zip(state, KEYS.to_ours(state, SOURCE))}


def _shape(state: Mapping[str, torch.Tensor], key: str, rank: int) -> tuple[int, ...]:
    shape = tuple(state[key].shape)
    if len(shape) != rank:
        raise ValueError(f"{key} has shape {shape}, not {rank} axes")
    return shape


def _inferred(state: Mapping[str, torch.Tensor]) -> dict:
    """The config options the arrays fix."""
    needed = ["embedding/kernel", "pos_embedding", "head/kernel", _ATTN.format(i=0) + "proj/kernel",
              _ISTA.format(i=0) + "D"]
    missing = [k for k in needed if k not in state]
    if missing:
        raise ValueError(f"missing keys in the {SOURCE} checkpoint: {missing}")
    patch, patch_w, channels, dim = _shape(state, "embedding/kernel", 4)
    if patch != patch_w:
        raise ValueError(f"embedding/kernel has shape {tuple(state['embedding/kernel'].shape)}: patches of "
                         f"{patch}×{patch_w}, not square")
    _, heads, head_dim = _shape(state, _ATTN.format(i=0) + "proj/kernel", 3)
    positions = _shape(state, "pos_embedding", 3)[1] - 1
    side = math.isqrt(max(positions, 0))
    if side * side != positions:
        raise ValueError(f"pos_embedding holds {positions} patch positions, not a square grid")
    atoms = _shape(state, _ISTA.format(i=0) + "D", 2)[1]
    return dict(dim=dim, heads=heads, dim_head=None if heads * head_dim == dim else head_dim, in_channels=channels,
                patch_size=patch, image_size=side * patch, num_classes=_shape(state, "head/kernel", 2)[1],
                depth=layer_count(state, r"Transformer/encoderblock_(\d+)/"),
                dict_width=None if atoms == 4 * dim else atoms)


def to_ours(payload: Mapping, name: str | None = None, **overrides) -> tuple[CRATEConfig, dict[str, torch.Tensor]]:
    """(config, state under our names) of a CRATE-α JAX file: every size from the arrays (K included), the rest
    CRATE-α's (``name``: a registered ``crate_alpha_*`` size, checked against the arrays); ``overrides``: other
    `CRATEConfig` options — ``head_norm_eps=1e-5`` gives the PyTorch port's head (`crate_nn.weights.adapters.alpha`).
    Missing, unexpected and misshapen arrays raise ValueError naming them."""
    state = state_dict_of(payload)
    inferred = _inferred(state)
    given = {k: v for k, v in overrides.items() if k in inferred and v != inferred[k]}
    if given:
        raise ValueError(f"the checkpoint's arrays contradict {given} (given): they give "
                         f"{ {k: inferred[k] for k in given} }")
    base = model_config(name) if name is not None else CRATEConfig(**_ALPHA)
    clash = {k: (getattr(base, k), v) for k, v in inferred.items() if name is not None and k in ("dim", "depth", "heads")
             and getattr(base, k) != v}
    if clash:
        raise ValueError(f"the checkpoint contradicts {name}: {clash} (registered, checkpoint)")
    config = base.replace(**{**inferred, "head_norm_eps": HEAD_NORM_EPS, **overrides})
    expected = expected_state(CRATEClassifier, config, len(state))
    check_matches(state, crate_nn_to_crate_alpha_jax(expected, config.heads), SOURCE)
    return config, crate_alpha_jax_to_crate_nn(state)


def to_theirs(model: nn.Module) -> dict[str, torch.Tensor]:
    """A CRATE-α classifier's parameters as their ``.npz`` holds them (``params/…``); ValueError naming what their
    model cannot hold (m ≠ 4d, K·p ≠ d: their code derives both from d)."""
    config = model.config
    theirs = crate_nn_to_crate_alpha_jax(model.state_dict(), config.heads)
    if config.atoms != 4 * config.dim or config.heads * config.head_dim != config.dim:
        raise ValueError(f"CRATE-α's JAX model has m = 4d and K·p = d; this one has m = {config.atoms}, "
                         f"K·p = {config.heads * config.head_dim} for d = {config.dim}")
    return {"params/" + k: v for k, v in theirs.items()}


ADAPTER = Adapter(
    name="CRATE-α (JAX)", family="classifier", export="crate-alpha-jax",
    claims=lambda s: "embedding/kernel" in s and any(k.endswith("/OvercompleteISTABlock_0/D1") for k in s),
    to_ours=to_ours, to_theirs=to_theirs, hints=(), write=storage.write_npz,
)
