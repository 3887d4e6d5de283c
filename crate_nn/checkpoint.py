"""Checkpoints: our own format (config beside the weights) and the authors' state-dict format.

Our format is a ``torch.save`` dictionary read back with ``weights_only=True``::

    {"format": "crate_nn", "config": dataclasses.asdict(model.config), "model": state_dict, **extra}

written atomically (temporary file in the same directory, then ``os.replace``), so a crash never leaves a
half-written checkpoint under the final name.

The authors' format (``../shared/docs/official-implementation.md``) names the same tensors differently
(``to_patch_embedding.2.weight``, ``transformer.layers.{i}.0.fn.qkv.weight``, …); `load_official_checkpoint`
translates it, infers the sizes the tensors determine and checks every key and shape.
"""
from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
from collections.abc import Mapping

import torch
from torch import nn

from .classifier import CRATEClassifier, resample_pos_embed
from .config import CRATEConfig
from .registry import model_config

FORMAT = "crate_nn"

# (authors' key, our key); "{i}" is a layer index.
_OFFICIAL_KEYS = [
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
]


def _template_regex(template: str) -> re.Pattern:
    return re.compile("^" + re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)") + "$")


_TO_OURS = [(_template_regex(a), b) for a, b in _OFFICIAL_KEYS]
_TO_OFFICIAL = [(_template_regex(b), a) for a, b in _OFFICIAL_KEYS]


def _rename(key: str, rules) -> str | None:
    for pattern, target in rules:
        match = pattern.match(key)
        if match:
            return target.replace("{i}", match.groupdict().get("i") or "")
    return None


def official_to_crate_nn(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename an authors'-format state dict to our names; keys without a counterpart raise ValueError naming them."""
    renamed, unknown = {}, []
    for key, value in state_dict.items():
        ours = _rename(key, _TO_OURS)
        if ours is None:
            unknown.append(key)
        else:
            renamed[ours] = value
    if unknown:
        raise ValueError(f"unexpected keys in the authors' checkpoint: {sorted(unknown)}")
    return renamed


def crate_nn_to_official(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict (default variant) under the authors' names, e.g. to run it with their code."""
    renamed = {_rename(k, _TO_OFFICIAL): v for k, v in state_dict.items()}
    if None in renamed:
        missing = sorted(k for k in state_dict if _rename(k, _TO_OFFICIAL) is None)
        raise ValueError(f"these parameters have no counterpart in the authors' format: {missing}")
    return renamed


def unwrap_model(model: nn.Module) -> nn.Module:
    """The underlying CRATE module of a ``torch.compile``d and/or DistributedDataParallel-wrapped model."""
    while True:
        for attribute in ("_orig_mod", "module"):
            inner = getattr(model, attribute, None)
            if isinstance(inner, nn.Module):
                model = inner
                break
        else:
            return model


def save(path: str | os.PathLike, model: nn.Module, extra: Mapping | None = None) -> None:
    """Write ``{"format", "config", "model", **extra}`` to ``path`` atomically (temp file + ``os.replace``).

    ``extra`` (optimizer state, epoch, metrics …) must hold only ``weights_only``-safe values: tensors, dicts,
    lists, numbers, strings, None; its keys must not be "format", "config" or "model".
    """
    model = unwrap_model(model)
    config = getattr(model, "config", None)
    if not isinstance(config, CRATEConfig):
        raise TypeError(f"model must carry a CRATEConfig in .config, got {type(config).__name__}")
    extra = dict(extra or {})
    clash = sorted({"format", "config", "model"} & set(extra))
    if clash:
        raise ValueError(f"extra must not contain the reserved keys {clash}")
    payload = {"format": FORMAT, "config": dataclasses.asdict(config), "model": model.state_dict(), **extra}
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".pt", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def read(path: str | os.PathLike, map_location="cpu") -> dict:
    """The raw dictionary of a checkpoint file, read with ``weights_only=True`` (no arbitrary unpickling)."""
    return torch.load(path, map_location=map_location, weights_only=True)


def load(path: str | os.PathLike, map_location="cpu") -> CRATEClassifier:
    """Rebuild the model saved by `save`: its config, its weights (strictly) and their dtype."""
    payload = read(path, map_location=map_location)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(
            f"{os.fspath(path)} is not a crate_nn checkpoint (no format={FORMAT!r}); "
            "for the authors' files use crate_nn.load_official_checkpoint"
        )
    model = CRATEClassifier(CRATEConfig(**payload["config"]))
    state = payload["model"]
    model.to(device=state["pos_embed"].device, dtype=state["pos_embed"].dtype)
    model.load_state_dict(state, strict=True)
    return model


def _official_state_dict(source) -> dict[str, torch.Tensor]:
    """Unwrap a path or dict in the authors' format to a flat state dict without the DDP ``module.`` prefix."""
    if isinstance(source, (str, os.PathLike)):
        source = torch.load(source, map_location="cpu", weights_only=True)
    if not isinstance(source, Mapping):
        raise TypeError(f"source must be a path or a dict, got {type(source).__name__}")
    if source.get("format") == FORMAT:
        raise ValueError("source is a crate_nn checkpoint; load it with crate_nn.load")
    for wrapper in ("state_dict", "model"):
        if isinstance(source.get(wrapper), Mapping):
            source = source[wrapper]
            break
    state = dict(source)
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    not_tensors = sorted(k for k, v in state.items() if not isinstance(v, torch.Tensor))
    if not_tensors:
        raise ValueError(f"not a state dict: entries {not_tensors[:5]} are not tensors")
    return state


def _infer_config(state: dict[str, torch.Tensor], name: str | None, overrides: dict) -> tuple[CRATEConfig, int]:
    """The config the tensors determine (plus ``name``/``overrides``) and the checkpoint's own image size."""
    needed = ["pos_embedding", "to_patch_embedding.2.weight", "mlp_head.1.weight", "transformer.layers.0.0.fn.qkv.weight"]
    missing = [k for k in needed if k not in state]
    if missing:
        raise ValueError(f"missing keys in the authors' checkpoint: {missing}")
    in_channels = overrides.get("in_channels", 3)
    dim, patch_dim = state["to_patch_embedding.2.weight"].shape
    patch_size = math.isqrt(patch_dim // in_channels)
    if patch_size * patch_size * in_channels != patch_dim:
        raise ValueError(f"patch dimension {patch_dim} is not P²·in_channels for in_channels={in_channels}")
    num_patches = state["pos_embedding"].shape[1] - 1
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise ValueError(f"pos_embedding holds {num_patches} patch positions, not a square grid")
    layer_ids = {int(m.group(1)) for k in state for m in [re.match(r"transformer\.layers\.(\d+)\.", k)] if m}
    inferred = dict(
        dim=dim,
        patch_size=patch_size,
        in_channels=in_channels,
        image_size=side * patch_size,
        num_classes=state["mlp_head.1.weight"].shape[0],
        depth=max(layer_ids) + 1,
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
        raise ValueError("heads cannot be inferred from the tensors; pass heads=… or a registered name=…")
    inner = state["transformer.layers.0.0.fn.qkv.weight"].shape[0]
    heads = options.get("heads", base.heads)
    if inner % heads:
        raise ValueError(f"heads={heads} does not divide the projection width K·p={inner}")
    options.update(heads=heads, dim_head=inner // heads)
    return base.replace(**options), side * patch_size


def load_official_checkpoint(source, name: str | None = None, **overrides) -> CRATEClassifier:
    """Build a `CRATEClassifier` from a checkpoint in the authors' format.

    Args:
        source: a path to a ``torch.save`` file (read with ``weights_only=True``) or an in-memory dict: a bare
            state dict, or one wrapped under ``"state_dict"`` (their training script) or ``"model"``, with or
            without the ``module.`` prefix of DistributedDataParallel.
        name: a registered size (``"crate_small"`` …) giving what the tensors do not determine (the heads).
        overrides: `CRATEConfig` options. ``heads`` (required without ``name``), ``in_channels`` (default 3),
            variant options such as ``pool`` or ``lam``; ``image_size`` different from the checkpoint's resamples
            the position embedding (bicubic, class token kept).

    Width, depth, patch size, image size and classes are inferred from the tensor shapes. The model gets the
    dtype of the checkpoint's tensors. Missing or unexpected keys and shape mismatches raise ValueError naming
    them.
    """
    state = _official_state_dict(source)
    config, ckpt_image_size = _infer_config(state, name, overrides)
    model = CRATEClassifier(config.replace(image_size=ckpt_image_size))
    expected = crate_nn_to_official(model.state_dict())
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(f"authors' checkpoint does not match the model: missing keys {missing}, unexpected keys {unexpected}")
    wrong = [f"{k}: checkpoint {tuple(state[k].shape)} vs model {tuple(v.shape)}" for k, v in expected.items() if state[k].shape != v.shape]
    if wrong:
        raise ValueError("shape mismatch: " + "; ".join(wrong))
    dtype = state["pos_embedding"].dtype
    model.to(dtype=dtype if dtype.is_floating_point else torch.float32)
    model.load_state_dict(official_to_crate_nn(state), strict=True)
    if config.image_size != ckpt_image_size:
        side = config.image_size // config.patch_size
        pos = resample_pos_embed(model.pos_embed.detach(), (side, side))
        model.pos_embed = nn.Parameter(pos)
        model.config = config
    return model
