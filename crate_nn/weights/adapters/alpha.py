"""CRATE-α's PyTorch checkpoints (UCSC-VLAA/CRATE-alpha, ``torch_inference/model/crate_alpha.py``; the published
``torch/crate_alpha_B16.pth``, ``torch/crate_alpha_L14.pth`` and the ImageNet-21K files under
``torch/in21k_Pretrain/``, some without a suffix).

Their model is the CRATE classifier with CRATE-α's options (`crate_nn.models.classifier._ALPHA`): ``conv1`` a
Conv2d patch embedding, ``transformer.layers.{i}.0`` LayerNorm (ε 1e-6) + MSSA with a bias-free ``to_out``,
``transformer.layers.{i}.1`` LayerNorm + the over-complete ISTA block (``D`` (d, 4d) encodes, ``D1`` (d, 4d)
decodes) with a skip, ``mlp_head`` LayerNorm (ε 1e-5) + Linear on the class token. `to_ours` translates the keys,
infers the sizes the tensors determine and checks every key and shape; like the authors' CRATE files, the tensors
fix K·p but not K, so it needs ``name=`` (e.g. ``"crate_alpha_b16"``) or ``heads=``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import nn

from ...models.classifier import _ALPHA, CRATEClassifier, CRATEConfig
from ...models.registry import model_config
from ..adapter import Adapter, heads_needed
from ..build import build_loaded, build_owning, check_matches, expected_state
from ..keys import KeyMap, layer_count, state_dict_of

SOURCE = "CRATE-α"
_ATTN, _ISTA = "transformer.layers.{i}.0.", "transformer.layers.{i}.1."
KEYS = KeyMap([
    ("conv1.weight", "patch_embed.proj.weight"),
    ("conv1.bias", "patch_embed.proj.bias"),
    ("pos_embedding", "pos_embed"),
    ("cls_token", "cls_token"),
    (_ATTN + "norm.weight", "encoder.layers.{i}.norm1.weight"),
    (_ATTN + "norm.bias", "encoder.layers.{i}.norm1.bias"),
    (_ATTN + "fn.qkv.weight", "encoder.layers.{i}.mssa.qkv.weight"),
    (_ATTN + "fn.to_out.0.weight", "encoder.layers.{i}.mssa.out.weight"),
    (_ISTA + "norm.weight", "encoder.layers.{i}.norm2.weight"),
    (_ISTA + "norm.bias", "encoder.layers.{i}.norm2.bias"),
    (_ISTA + "fn.D", "encoder.layers.{i}.ista.weight"),
    (_ISTA + "fn.D1", "encoder.layers.{i}.ista.out_weight"),
    ("mlp_head.0.weight", "head.norm.weight"),
    ("mlp_head.0.bias", "head.norm.bias"),
    ("mlp_head.1.weight", "head.fc.weight"),
    ("mlp_head.1.bias", "head.fc.bias"),
])


def crate_alpha_to_crate_nn(state_dict) -> dict[str, torch.Tensor]:
    """Rename a CRATE-α state dict to our names; keys without a counterpart raise ValueError naming them."""
    return KEYS.to_ours(state_dict, SOURCE)


def crate_nn_to_crate_alpha(state_dict) -> dict[str, torch.Tensor]:
    """Our state dict (a ``crate_alpha_*`` model) under CRATE-α's names, e.g. to run it with their code."""
    return KEYS.to_theirs(state_dict, SOURCE)


def to_ours(payload: Mapping, name: str | None = None, **overrides) -> tuple[CRATEConfig, dict[str, torch.Tensor]]:
    """(config, state under our names) of a CRATE-α file (`load_crate_alpha`'s arguments)."""
    state = state_dict_of(payload)
    needed = ["conv1.weight", "pos_embedding", "mlp_head.1.weight", _ATTN.format(i=0) + "fn.qkv.weight"]
    missing = [k for k in needed if k not in state]
    if missing:
        raise ValueError(f"missing keys in the {SOURCE} checkpoint: {missing}")
    dim, channels, patch, _ = state["conv1.weight"].shape
    side = math.isqrt(state["pos_embedding"].shape[1] - 1)
    if side * side != state["pos_embedding"].shape[1] - 1:
        raise ValueError(f"pos_embedding holds {state['pos_embedding'].shape[1] - 1} patch positions, not a square")
    inferred = dict(dim=dim, in_channels=channels, patch_size=patch, image_size=side * patch,
                    num_classes=state["mlp_head.1.weight"].shape[0],
                    depth=layer_count(state, r"transformer\.layers\.(\d+)\."))
    base = model_config(name) if name is not None else CRATEConfig(**_ALPHA)
    clash = {k: (getattr(base, k), v) for k, v in inferred.items() if name is not None and k in ("dim", "depth")
             and getattr(base, k) != v}
    if clash:
        raise ValueError(f"the checkpoint contradicts {name}: {clash} (registered, checkpoint)")
    if name is None and "heads" not in overrides:
        raise heads_needed("crate_alpha_b16: 12, crate_alpha_l14: 16")
    config = base.replace(**{**inferred, **overrides})
    check_matches(state, crate_nn_to_crate_alpha(expected_state(CRATEClassifier, config, len(state))), SOURCE)
    return config, crate_alpha_to_crate_nn(state)


def load_crate_alpha(source, name: str | None = None, **overrides) -> CRATEClassifier:
    """A `CRATEClassifier` with CRATE-α's options holding a CRATE-α checkpoint (a path, read with
    ``weights_only=True``, or a dict; ``module.`` prefixes removed). ``name``: a registered ``crate_alpha_*`` size
    (it gives the heads K, which the tensors do not fix); else ``heads=``. Width, depth, patch and image size and
    classes come from the tensors; missing or unexpected keys and wrong shapes raise ValueError naming them."""
    payload = state_dict_of(source)
    build = build_owning if isinstance(source, Mapping) else build_loaded
    return build(CRATEClassifier, *to_ours(payload, name, **overrides))


def to_theirs(model: nn.Module) -> dict[str, torch.Tensor]:
    """A CRATE-α classifier's state dict under their names."""
    return crate_nn_to_crate_alpha(model.state_dict())


ADAPTER = Adapter(
    name="CRATE-α", family="classifier", export="crate-alpha",
    claims=lambda s: "conv1.weight" in s and any(k.endswith(".1.fn.D1") for k in s),
    to_ours=to_ours, to_theirs=to_theirs,
)
