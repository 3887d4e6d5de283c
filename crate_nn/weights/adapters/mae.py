"""The authors' CRATE-MAE (Ma-Lab-Berkeley/CRATE ``model/crate_ae/``, trained with FAIR's MAE scripts).

Their state dict names our tensors differently (``blocks.{i}.layers.0.0.fn.qkv.weight``, ``decoder_blocks.{i}.layers
.0.0.fn.weight`` = E, …) and holds three tensors the forward pass never reads: ``pos_embed`` (a copy of the
sine-cosine table; the forward adds ``decoder_pos_embed``) and the ``decoder_embed`` Linear. `to_ours` translates the
rest, infers the sizes the tensors determine and checks every key and shape. FAIR-MAE checkpoint files are
``{"model", "optimizer", "epoch", "scaler", "args"}`` with an ``argparse.Namespace`` under ``args``: they are read
with ``weights_only=True`` and that one type allowed, never by a full unpickling; ``args.model`` then supplies the
number of heads and ``args.norm_pix_loss`` the loss.
"""
from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping

import torch
from torch import nn

from ...models.mae import CRATEMAE, CRATEMAEConfig
from ...models.registry import model_config
from .. import ours
from ..adapter import Adapter, heads_needed, prefixed
from ..build import build_loaded, build_owning, check_matches, expected_state
from ..keys import KeyMap, layer_count, state_dict_of

SOURCE = "authors' CRATE-MAE"
UNUSED = ("pos_embed", "decoder_embed.weight", "decoder_embed.bias")
"""Tensors of the authors' structure that their forward pass never reads (dropped on import, rebuilt on export)."""

_ENC, _DEC = "blocks.{i}.layers.0.", "decoder_blocks.{i}.layers.0."
KEYS = KeyMap([
    ("cls_token", "cls_token"),
    ("mask_token", "mask_token"),
    ("decoder_pos_embed", "pos_embed"),
    ("patch_embed.proj.weight", "patch_embed.proj.weight"),
    ("patch_embed.proj.bias", "patch_embed.proj.bias"),
    (_ENC + "0.norm.weight", "encoder.layers.{i}.norm1.weight"),
    (_ENC + "0.norm.bias", "encoder.layers.{i}.norm1.bias"),
    (_ENC + "0.fn.qkv.weight", "encoder.layers.{i}.mssa.qkv.weight"),
    (_ENC + "0.fn.to_out.0.weight", "encoder.layers.{i}.mssa.out.weight"),
    (_ENC + "0.fn.to_out.0.bias", "encoder.layers.{i}.mssa.out.bias"),
    (_ENC + "1.norm.weight", "encoder.layers.{i}.norm2.weight"),
    (_ENC + "1.norm.bias", "encoder.layers.{i}.norm2.bias"),
    (_ENC + "1.fn.weight", "encoder.layers.{i}.ista.weight"),
    ("norm.weight", "norm.weight"),
    ("norm.bias", "norm.bias"),
    (_DEC + "0.norm.weight", "decoder.layers.{i}.norm1.weight"),
    (_DEC + "0.norm.bias", "decoder.layers.{i}.norm1.bias"),
    (_DEC + "0.fn.weight", "decoder.layers.{i}.linear.weight"),
    (_DEC + "1.norm.weight", "decoder.layers.{i}.norm2.weight"),
    (_DEC + "1.norm.bias", "decoder.layers.{i}.norm2.bias"),
    (_DEC + "1.fn.qkv.weight", "decoder.layers.{i}.mssa.qkv.weight"),
    (_DEC + "1.fn.to_out.0.weight", "decoder.layers.{i}.mssa.out.weight"),
    (_DEC + "1.fn.to_out.0.bias", "decoder.layers.{i}.mssa.out.bias"),
    ("decoder_norm.weight", "decoder_norm.weight"),
    ("decoder_norm.bias", "decoder_norm.bias"),
    ("decoder_pred.weight", "decoder_pred.weight"),
    ("decoder_pred.bias", "decoder_pred.bias"),
])


def official_mae_to_crate_nn(state_dict) -> dict[str, torch.Tensor]:
    """Rename an authors'-format state dict to our names (the `UNUSED` tensors dropped); other keys without a
    counterpart raise ValueError naming them."""
    return KEYS.to_ours({k: v for k, v in state_dict.items() if k not in UNUSED}, SOURCE)


def crate_nn_to_official_mae(state_dict) -> dict[str, torch.Tensor]:
    """Our state dict (official wiring) under the authors' names, with the tensors their structure holds but never
    reads: ``pos_embed`` = the same table, ``decoder_embed`` = the identity map (any value gives the same output)."""
    theirs = KEYS.to_theirs(state_dict, SOURCE)
    table = theirs["decoder_pos_embed"]
    d = table.shape[-1]
    theirs.update({"pos_embed": table.clone(), "decoder_embed.weight": torch.eye(d, dtype=table.dtype),
                   "decoder_embed.bias": torch.zeros(d, dtype=table.dtype)})
    return theirs


def read_official_mae(path: str | os.PathLike) -> dict:
    """A FAIR-MAE checkpoint file, read with ``weights_only=True`` and ``argparse.Namespace`` allowed."""
    return ours.read(path, allowed=(argparse.Namespace,))


def _name_from_args(args) -> str | None:
    """``args.model`` of the authors' training script (``mae_crate_base`` …) → our name (``crate_mae_base``)."""
    arch = getattr(args, "model", None)
    if isinstance(arch, str) and arch.startswith("mae_crate_"):
        return "crate_mae_" + arch.removeprefix("mae_crate_")
    return None


def _infer_config(state: dict[str, torch.Tensor], name: str | None, overrides: dict) -> CRATEMAEConfig:
    needed = ["patch_embed.proj.weight", "decoder_pos_embed", "decoder_pred.weight", _ENC.format(i=0) + "0.fn.qkv.weight"]
    missing = [k for k in needed if k not in state]
    if missing:
        raise ValueError(f"missing keys in the {SOURCE} checkpoint: {missing}")
    if overrides.get("wiring", "official") != "official":
        raise ValueError(f"wiring: the authors' checkpoints have the official wiring, got {overrides['wiring']!r}")
    dim, in_channels, patch_size, _ = state["patch_embed.proj.weight"].shape
    num_patches = state["decoder_pos_embed"].shape[1] - 1
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise ValueError(f"decoder_pos_embed holds {num_patches} patch positions, not a square grid")
    depth = layer_count(state, r"blocks\.(\d+)\.")
    decoder_depth = layer_count(state, r"decoder_blocks\.(\d+)\.")
    if decoder_depth != depth:
        raise ValueError(f"the checkpoint's decoder has {decoder_depth} layers and its encoder {depth}; CRATE-MAE "
                         "needs the same depth")
    inferred = dict(dim=dim, in_channels=in_channels, patch_size=patch_size, image_size=side * patch_size, depth=depth)
    for key, value in inferred.items():
        if key in overrides and overrides[key] != value:
            raise ValueError(f"{key}={overrides[key]} contradicts the checkpoint, whose tensors give {key}={value}")
    base = model_config(name) if name is not None else CRATEMAEConfig()
    if name is not None and base.dim != dim:
        raise ValueError(f"the checkpoint has dim={dim} but {name} has dim={base.dim}")
    if name is None and "heads" not in overrides:
        raise heads_needed()
    inner = state[_ENC.format(i=0) + "0.fn.qkv.weight"].shape[0]
    heads = overrides.get("heads", base.heads)
    if inner % heads:
        raise ValueError(f"heads={heads} does not divide the projection width K·p={inner}")
    return base.replace(**{**inferred, **overrides, "heads": heads, "dim_head": inner // heads, "wiring": "official"})


def to_ours(payload: Mapping, name: str | None = None, **overrides) -> tuple[CRATEMAEConfig, dict[str, torch.Tensor]]:
    """(config, state under our names) of an authors' CRATE-MAE file (`load_official_mae`'s arguments)."""
    args = payload.get("args") if isinstance(payload, Mapping) else None
    name = name or _name_from_args(args)
    if args is not None and "norm_pix_loss" not in overrides and hasattr(args, "norm_pix_loss"):
        overrides["norm_pix_loss"] = bool(args.norm_pix_loss)
    state = state_dict_of(payload)
    config = _infer_config(state, name, overrides)
    check_matches(state, crate_nn_to_official_mae(expected_state(CRATEMAE, config, len(state))), SOURCE,
                  optional=UNUSED)
    return config, official_mae_to_crate_nn(state)


def load_official_mae(source, name: str | None = None, **overrides) -> CRATEMAE:
    """Build a `CRATEMAE` (official wiring) from a checkpoint of the authors' CRATE-MAE.

    Args:
        source: a path to a FAIR-MAE checkpoint file (``{"model": …, "args": Namespace}``, read with
            ``weights_only=True``), or an in-memory dict: a bare state dict or one under ``"model"``/``"state_dict"``,
            with or without the ``module.`` prefix.
        name: a registered size (``"crate_mae_base"`` …) giving the number of heads K, which the tensors do not
            determine (they fix K·p only; a wrong K loads silently and reconstructs wrongly). Default: from the
            file's ``args.model``, else ``heads=`` must be given.
        overrides: `CRATEMAEConfig` options, e.g. ``heads``, ``norm_pix_loss`` (default: the file's
            ``args.norm_pix_loss``, else False), ``lam`` (default 0.5, the authors').

    Width, depth (the authors' ``mae_crate_large`` has 24 layers), patch size, channels and image size come from
    the tensor shapes; the model gets the dtype of the checkpoint's tensors; the position table is the file's
    ``decoder_pos_embed`` (the one their forward adds). Missing or unexpected keys and shape mismatches raise
    ValueError naming them.
    """
    if isinstance(source, (str, os.PathLike)):
        return build_loaded(CRATEMAE, *to_ours(read_official_mae(source), name, **overrides))
    return build_owning(CRATEMAE, *to_ours(source, name, **overrides))


def to_theirs(model: nn.Module) -> dict:
    """A FAIR-MAE checkpoint's ``model`` and the ``args`` entry its loader reads the loss from (and the model's
    ``preprocessing``, when it records one)."""
    return {"model": crate_nn_to_official_mae(model.state_dict()),
            "args": argparse.Namespace(norm_pix_loss=model.config.norm_pix_loss), **ours.preprocessing_entry(model)}


ADAPTER = Adapter(
    name="authors' CRATE-MAE", family="mae", export="official-mae",
    claims=lambda s: "decoder_pred.weight" in s and prefixed(s, "blocks."),
    to_ours=to_ours, to_theirs=to_theirs, allowed=(argparse.Namespace,),
)
