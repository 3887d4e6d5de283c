"""The authors' CRATE classifier (Ma-Lab-Berkeley/CRATE, ``model/crate.py``): their training scripts' files and the
Colab's ``crate-demo.pth``.

Their state dict names our tensors differently (``to_patch_embedding.2.weight``, ``transformer.layers.{i}.0.fn.qkv
.weight``, …); `to_ours` translates it, infers the sizes the tensors determine and checks every key and shape. The
tensors fix K·p but not the number of heads K (``name=`` or ``heads=`` gives it), and the patch dimension P²·C but
not C: the channels are the ones of P²·3 or P²·1 that fits (no patch dimension fits both), so RGB and gray models
load without being told; other channel counts need ``in_channels=``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import nn

from ...models.classifier import CRATEClassifier, CRATEConfig
from ...models.embedding import resample_pos_embed
from ...models.registry import model_config
from ..adapter import Adapter, heads_needed, option, prefixed
from ..build import build_loaded, build_owning, check_matches, expected_state
from ..keys import KeyMap, layer_count, state_dict_of
from ..ours import preprocessing_entry

SOURCE = "authors'"
CHANNELS = (3, 1)
"""The image channels told from the patch dimension P²·C (RGB, gray): at most one of them fits any P²·C."""

KEYS = KeyMap([
    ("pos_embedding", "pos_embed"),
    ("cls_token", "cls_token"),
    ("to_patch_embedding.1.weight", "patch_embed.norm_in.weight"),
    ("to_patch_embedding.1.bias", "patch_embed.norm_in.bias"),
    ("to_patch_embedding.2.weight", "patch_embed.proj.weight"),
    ("to_patch_embedding.2.bias", "patch_embed.proj.bias"),
    ("to_patch_embedding.3.weight", "patch_embed.norm_out.weight"),
    ("to_patch_embedding.3.bias", "patch_embed.norm_out.bias"),
    ("transformer.layers.{i}.0.norm.weight", "encoder.layers.{i}.norm1.weight"),
    ("transformer.layers.{i}.0.norm.bias", "encoder.layers.{i}.norm1.bias"),
    ("transformer.layers.{i}.0.fn.qkv.weight", "encoder.layers.{i}.mssa.qkv.weight"),
    ("transformer.layers.{i}.0.fn.to_out.0.weight", "encoder.layers.{i}.mssa.out.weight"),
    ("transformer.layers.{i}.0.fn.to_out.0.bias", "encoder.layers.{i}.mssa.out.bias"),
    ("transformer.layers.{i}.1.norm.weight", "encoder.layers.{i}.norm2.weight"),
    ("transformer.layers.{i}.1.norm.bias", "encoder.layers.{i}.norm2.bias"),
    ("transformer.layers.{i}.1.fn.weight", "encoder.layers.{i}.ista.weight"),
    ("mlp_head.0.weight", "head.norm.weight"),
    ("mlp_head.0.bias", "head.norm.bias"),
    ("mlp_head.1.weight", "head.fc.weight"),
    ("mlp_head.1.bias", "head.fc.bias"),
])


def official_to_crate_nn(state_dict) -> dict[str, torch.Tensor]:
    """Rename an authors'-format state dict to our names; keys without a counterpart raise ValueError naming them."""
    return KEYS.to_ours(state_dict, SOURCE)


def crate_nn_to_official(state_dict) -> dict[str, torch.Tensor]:
    """Our state dict (default variant) under the authors' names, e.g. to run it with their code."""
    return KEYS.to_theirs(state_dict, SOURCE)


def _patch(patch_dim: int, in_channels: int | None) -> tuple[int, int]:
    """(P, C) with P²·C = ``patch_dim``: C given, else the one of `CHANNELS` that fits."""
    for channels in CHANNELS if in_channels is None else (in_channels,):
        size = math.isqrt(patch_dim // channels)
        if size * size * channels == patch_dim:
            return size, channels
    if in_channels is None:
        raise ValueError(f"in_channels: the patch dimension {patch_dim} (P²·C) fits neither 3 nor 1 image channels; "
                         f"pass the channels as {option('in_channels')}")
    raise ValueError(f"in_channels={in_channels} does not fit the patch dimension {patch_dim} (P²·C); pass the "
                     f"images' channels as {option('in_channels')} (or leave it out: 3 and 1 are told from the tensors)")


def _infer_config(state: dict[str, torch.Tensor], name: str | None, overrides: dict) -> tuple[CRATEConfig, int]:
    """The config the tensors determine (plus ``name``/``overrides``) and the checkpoint's own image size."""
    needed = ["pos_embedding", "to_patch_embedding.2.weight", "mlp_head.1.weight", "transformer.layers.0.0.fn.qkv.weight"]
    missing = [k for k in needed if k not in state]
    if missing:
        raise ValueError(f"missing keys in the authors' checkpoint: {missing}")
    dim, patch_dim = state["to_patch_embedding.2.weight"].shape
    patch_size, in_channels = _patch(patch_dim, overrides.get("in_channels"))
    num_patches = state["pos_embedding"].shape[1] - 1
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise ValueError(f"pos_embedding holds {num_patches} patch positions, not a square grid")
    inferred = dict(
        dim=dim,
        patch_size=patch_size,
        in_channels=in_channels,
        image_size=side * patch_size,
        num_classes=state["mlp_head.1.weight"].shape[0],
        depth=layer_count(state, r"transformer\.layers\.(\d+)\."),
    )
    for key, value in inferred.items():
        if key in overrides and key != "image_size" and overrides[key] != value:
            raise ValueError(f"{key}={overrides[key]} contradicts the checkpoint, whose tensors give {key}={value}")
    base = model_config(name) if name is not None else CRATEConfig()
    for key in ("dim", "depth"):
        if name is not None and getattr(base, key) != inferred[key]:
            raise ValueError(f"the checkpoint has {key}={inferred[key]} but {name} has {key}={getattr(base, key)}")
    options = {**inferred, **overrides}
    if name is None and "heads" not in overrides:
        raise heads_needed()
    inner = state["transformer.layers.0.0.fn.qkv.weight"].shape[0]
    heads = options.get("heads", base.heads)
    if inner % heads:
        raise ValueError(f"heads={heads} does not divide the projection width K·p={inner}")
    options.update(heads=heads, dim_head=inner // heads)
    return base.replace(**options), side * patch_size


def to_ours(payload: Mapping, name: str | None = None, **overrides) -> tuple[CRATEConfig, dict[str, torch.Tensor]]:
    """(config, state under our names) of an authors'-format file (`load_official_checkpoint`'s arguments); an
    ``image_size`` other than the file's resamples the position embedding (bicubic, class token kept)."""
    state = state_dict_of(payload)
    config, own_size = _infer_config(state, name, overrides)
    expected = expected_state(CRATEClassifier, config.replace(image_size=own_size), len(state))
    check_matches(state, crate_nn_to_official(expected), SOURCE)
    ours = official_to_crate_nn(state)
    if config.image_size != own_size:
        side = config.image_size // config.patch_size
        ours["pos_embed"] = resample_pos_embed(ours["pos_embed"], (side, side))
    return config, ours


def load_official_checkpoint(source, name: str | None = None, **overrides) -> CRATEClassifier:
    """Build a `CRATEClassifier` from a checkpoint in the authors' format.

    Args:
        source: a path to a ``torch.save`` file (read with ``weights_only=True``) or an in-memory dict: a bare
            state dict, or one wrapped under ``"state_dict"`` (their training script) or ``"model"``, with or
            without the ``module.`` prefix of DistributedDataParallel.
        name: a registered size (``"crate_small"`` …) giving what the tensors do not determine: the number of
            heads K. **Prefer ``name``.** The tensors only fix the projection width K·p, so a wrong ``heads``
            cannot be detected: it loads without complaint and gives wrong logits (the attention is computed
            over other head splits).
        overrides: `CRATEConfig` options. ``heads`` (required without ``name``), ``in_channels`` (told from the
            tensors when 3 or 1), variant options such as ``pool`` or ``lam``; ``image_size`` different from the
            checkpoint's resamples the position embedding (bicubic, class token kept).

    Width, depth, patch size, image size and classes are inferred from the tensor shapes. The model gets the
    dtype of the checkpoint's tensors. Missing or unexpected keys and shape mismatches raise ValueError naming
    them.
    """
    payload = state_dict_of(source)
    build = build_owning if isinstance(source, Mapping) else build_loaded
    return build(CRATEClassifier, *to_ours(payload, name, **overrides))


def to_theirs(model: nn.Module) -> dict:
    """A classifier's state dict under the authors' names (what their code's ``load_state_dict`` takes); with the
    model's preprocessing, their training script's layout: ``{"state_dict": …, "preprocessing": …}`` (their files
    hold ``epoch``, ``arch``, ``optimizer`` … beside ``state_dict``)."""
    state, entry = crate_nn_to_official(model.state_dict()), preprocessing_entry(model)
    return {"state_dict": state, **entry} if entry else state


ADAPTER = Adapter(
    name="authors' CRATE classifier", family="classifier", export="official-classifier",
    claims=lambda s: "to_patch_embedding.2.weight" in s and prefixed(s, "transformer.layers."),
    to_ours=to_ours, to_theirs=to_theirs,
)
