"""What a weights file is, decided once: `read_state`; and what is built from it (`load`, `create_model`).

`read_state` resolves an ``hf-hub:`` name (`crate_nn.weights.hub`), reads the file — safetensors, NumPy's ``.npz``
(JAX's checkpoints, each array read when an adapter asks for it) or torch, told from its bytes — and decides: ours (`crate_nn.weights.ours`: the header's or the dictionary's ``format``), else the
one adapter of `crate_nn.weights.adapters.ADAPTERS` whose sniff claims its state dict (none or several: refused
naming the keys); what the adapter refuses is a ValueError naming the file. Every reader of weights goes through it: `load`, `create_model` with a checkpoint,
`crate_nn.weights.init_from` (every task's ``init_from``), the command lines.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import torch
from torch import nn

from ..models.registry import build_model, family_of, model_config
from . import hub, ours, storage
from .adapter import Adapter
from .adapters import ADAPTERS
from .build import build_loaded
from .keys import state_dict_of
from .ours import Checkpoint

ALLOWED = tuple({t for adapter in ADAPTERS for t in adapter.allowed})
"""The types beside tensors any known format's torch files hold (``weights_only=True`` allows them only)."""


def local_path(path: str | os.PathLike) -> str:
    """``path`` as a string; an ``hf-hub:`` name resolved to its file in the local Hub cache."""
    return hub.resolve(path) if hub.is_hub(path) else os.fspath(path)


def _open(path: str, map_location, verify: bool, what: str) -> tuple[dict, Adapter | None]:
    """A file's dictionary and its adapter (None: ours); ValueError naming the file for a torch file holding no
    dictionary, for one no adapter claims and for one several claim."""
    if storage.is_safetensors(path):
        payload = ours.read_safetensors(path, map_location, verify, what)
    elif storage.is_npz(path):
        payload = storage.NpzArrays(path, what)
    else:
        payload = ours.read(path, map_location, verify, ALLOWED, what)
    if not isinstance(payload, Mapping):
        raise ValueError(f"{path}: not a state dict of a known format (the file holds a {type(payload).__name__})")
    if ours.is_ours(payload):
        return payload, None
    return payload, find_adapter(payload, path)


def find_adapter(payload: Mapping, source: str = "checkpoint") -> Adapter:
    """The one adapter whose sniff claims the payload's state dict; ValueError naming ``source`` and what it saw
    when none or several do."""
    try:
        state = state_dict_of(payload)
    except storage.ArrayError:
        raise  # names the file and the array already
    except (TypeError, ValueError) as err:
        raise ValueError(f"{source}: not a state dict of a known format ({err})") from None
    found = [adapter for adapter in ADAPTERS if adapter.claims(state)]
    if len(found) > 1:
        raise ValueError(f"{source}: ambiguous, its keys fit {' and '.join(a.name for a in found)}")
    if not found:
        raise ValueError(f"{source}: no known checkpoint format ({ours.FORMAT}, "
                         f"{', '.join(a.name for a in ADAPTERS)}); its keys begin {sorted(state)[:6]}")
    return found[0]


def read_state(path: str | os.PathLike, map_location="cpu", verify: bool = True, what: str = "checkpoint",
               families: Mapping[str, str] | None = None, **options) -> Checkpoint:
    """What the weights file ``path`` holds, under our names (`crate_nn.weights.ours.Checkpoint`).

    ``path``: a file (torch or safetensors, with or without a suffix) or ``hf-hub:ORG/NAME[@revision][:path]``.
    Ours: its family, config, tensors, preprocessing and a training run's state, the checksum verified unless
    ``verify`` is False; ``options`` are not needed and not used. Another codebase's: the adapter's config and
    tensors, given the ``options`` that are not None (``heads=``, ``name=``, … the options its files do not fix).
    ``families`` (family → what it is to the caller): a file holding another family is refused naming both, before
    anything is converted. ``what`` names the argument in errors (``init_from``: …). Another codebase's file that
    holds a ``"preprocessing"`` entry beside its weights (``crate-export`` writes one where the layout has room)
    gives it back.
    """
    path = local_path(path)
    payload, adapter = _open(path, map_location, verify, what)
    family = adapter.family if adapter is not None else payload.get("family", "classifier")
    if families is not None and family not in families:
        wanted = " or ".join(f"{description} ({name})" for name, description in families.items())
        found = adapter.name if adapter is not None else ours.FORMAT
        raise ValueError(f"{what}: {path!r} holds a {family!r} model ({found}), not {wanted}")
    if adapter is None:
        return ours.checkpoint(payload, path, ours.SAFETENSORS_FORMAT if storage.is_safetensors(path) else ours.FORMAT,
                               what)
    try:
        config, state = adapter.to_ours(payload, **{k: v for k, v in options.items() if v is not None})
    except ValueError as err:
        raise ValueError(f"{what}: {path!r} ({adapter.name}): {err}") from None
    if isinstance(payload, storage.NpzArrays) and isinstance(map_location, (str, torch.device)):
        state = {k: v.to(map_location) for k, v in state.items()}  # NumPy's arrays are read to the CPU
    try:  # what crate-export keeps beside the weights, where their layout has room (ours.preprocessing_entry)
        preprocessing = ours.recorded_preprocessing(payload, config, path) if "preprocessing" in payload else None
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what}: {path!r}: its preprocessing is malformed: {err}") from None
    return Checkpoint(path, adapter.name, adapter.family, config, state, preprocessing, what=what)


def sniff(path: str | os.PathLike) -> str:
    """The name of the format of the weights file ``path`` (a file or ``hf-hub:…``): ``crate_nn``, ``crate_nn
    (safetensors)`` or an adapter's name (ValueError naming the file when no format, or several, claim it)."""
    path = local_path(path)
    payload, adapter = _open(path, "cpu", False, "checkpoint")
    if adapter is not None:
        return adapter.name
    return ours.SAFETENSORS_FORMAT if storage.is_safetensors(path) else ours.FORMAT


def load(path: str | os.PathLike, map_location="cpu", verify: bool = True, **overrides) -> nn.Module:
    """The model of any weights file this package reads, its format told from the file (`read_state`).

    ``path``: a file, or ``hf-hub:ORG/NAME[@revision][:path]`` — a file of that repository in the local Hugging Face
    cache (`crate_nn.weights.hub`; nothing is downloaded). Ours (`crate_nn.save`, a torch or a ``.safetensors``
    file): its family, its config, its weights (strictly) and their dtype, after checking them against the file's
    checksum (``verify``), and its ``preprocessing`` (`crate_nn.preprocessing.Preprocessing`, None when the file
    records none); ``overrides`` are refused (the file holds the whole config). Another codebase's (an adapter of
    `crate_nn.weights.adapters`: the authors' CRATE classifier and CRATE-MAE, CRATE-α, crate-lm, nanoGPT; a torch
    or a ``.safetensors`` file): built from the adapter's config with ``overrides`` — e.g. ``heads=6`` or
    ``name="crate_small"`` for the authors' classifier, whose tensors do not fix the number of heads (the error says
    so when it is missing) — with ``preprocessing`` None, unless the file holds the entry ``crate-export`` keeps
    beside the weights where the format has room.
    """
    stored = read_state(path, map_location, verify, **overrides)
    if stored.ours and overrides:
        raise ValueError(f"{stored.path}: a crate_nn checkpoint holds its whole config; got overrides "
                         f"{sorted(overrides)}")
    return stored.build()


def training_config(path: str | os.PathLike) -> dict:
    """The training config (`crate_nn.engine.config.TrainConfig.to_dict`) a torch checkpoint of ours records; {} for
    a file without one (a ``.safetensors`` or ``.npz`` file, one saved outside a training run, another codebase's)."""
    path = local_path(path)
    if storage.is_safetensors(path) or storage.is_npz(path):
        return {}
    payload = ours.read(path, "cpu", False, ALLOWED)
    recorded = payload.get("train_config") if ours.is_ours(payload) else None
    return recorded if isinstance(recorded, dict) else {}


def _contradictions(config, theirs) -> dict:
    """Fields (name → (ours, theirs)) on which another codebase's file's config differs from ``config``, the head
    dimension compared as resolved (None is d/K): a field the tensors' shapes do not show (a LayerNorm's ε, say)
    would otherwise load into a model that computes something else."""
    if type(theirs) is not type(config):
        return {}

    def value(c, name: str):
        resolved = getattr(c, name)
        return c.dim // c.heads if name == "dim_head" and resolved is None else resolved

    return {f.name: (value(config, f.name), value(theirs, f.name)) for f in dataclasses.fields(config)
            if value(config, f.name) != value(theirs, f.name)}


def create_model(name: str, checkpoint: str | os.PathLike | None = None, **overrides) -> nn.Module:
    """Build the registered model ``name`` (e.g. ``"crate_tiny"``) with keyword overrides of its config; with
    ``checkpoint``, holding that file's weights.

    ``checkpoint``: any file (or ``hf-hub:`` name) `load` reads, ours or another codebase's (whose adapter is given
    this config's ``heads``). Its tensors must fit this config exactly — every key and shape (strictly; ValueError
    naming the file and the keys otherwise) — and so must what another codebase's file fixes beyond the shapes (the
    JAX CRATE-α's head LayerNorm ε 1e-6, timm's ε 1e-6: ValueError naming the fields, to be passed as overrides); the model is built on the meta device and takes the file's tensors
    and their dtype, and the preprocessing the file records.
    """
    config = model_config(name, **overrides)
    if checkpoint is None:
        return build_model(config)
    stored = read_state(checkpoint, heads=getattr(config, "heads", None))
    if not stored.ours:
        fixed = _contradictions(config, stored.config)
        if fixed:
            raise ValueError(f"checkpoint: {os.fspath(checkpoint)} ({stored.format}) fixes "
                             + ", ".join(f"{k}={theirs!r}" for k, (_, theirs) in fixed.items())
                             + f" where {name!r} has " + ", ".join(f"{k}={ours!r}" for k, (ours, _) in fixed.items())
                             + "; pass them to create_model, or read the file with crate_nn.load")
    try:
        model = build_loaded(family_of(config).model_class, config, stored.state)
    except ValueError as err:
        raise ValueError(f"checkpoint: {os.fspath(checkpoint)} does not fit {name!r}: {err}") from None
    model.preprocessing = stored.preprocessing
    return model
