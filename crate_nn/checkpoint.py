"""Our checkpoint format: the model's family and config beside its weights, written atomically.

A ``torch.save`` dictionary read back with ``weights_only=True`` (no arbitrary unpickling)::

    {"format": "crate_nn", "family": "classifier", "config": dataclasses.asdict(model.config),
     "model": state_dict, "preprocessing": model.preprocessing.to_dict() (when set), **extra,
     "checksum": SHA-256 of all of the above}

written atomically (temporary file in the same directory, fsync, then ``os.replace``), so a crash never leaves a
half-written checkpoint under the final name. The checksum (`payload_digest`: every tensor's dtype, shape and bytes
and every other value, in a fixed order) is verified by `read` and `load`: a flipped byte in a weight is an error
naming the file, not a silently different model (``verify=False`` reads such a file anyway, for forensic use; files
written before checksums existed have none and are read as they are). `load` rebuilds the architecture the file names through the model
registry (files written before families existed have no ``family`` and are classifiers) and restores the model's
``preprocessing`` (`crate_nn.preprocessing`: mean, std, image and patch size, tokenizer). The authors' formats are
read by `crate_nn.official`; `load` tells the formats apart (`sniff`) and reads them all, from a path or from the
local Hugging Face cache (``hf-hub:ORG/NAME[@revision]``, `crate_nn.hub`). A ``.safetensors`` path holds the
weights alone (tied ones once), with the format, family, config and preprocessing in the header's metadata; a
``.safetensors`` file of another codebase is read by its keys like its torch files.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pickle
import tempfile
from collections.abc import Mapping

import torch
from torch import nn

from . import hub
from .files import writing
from .models.registry import get_family, unwrap_model
from .preprocessing import Preprocessing, from_training

FORMAT = "crate_nn"
RESERVED = ("format", "family", "config", "model", "preprocessing", "checksum")


def save(path: str | os.PathLike, model: nn.Module, extra: Mapping | None = None) -> None:
    """Write ``{"format", "family", "config", "model", "preprocessing", **extra}`` to ``path`` atomically (a
    ``.safetensors`` path: the weights, tied ones once, with the format, family, config and preprocessing as the
    header's metadata; no ``extra``). ``"preprocessing"`` is ``model.preprocessing`` when it is set.

    ``model`` must be a registered family's model (it carries ``.family`` and a dataclass ``.config``); wrappers
    (DDP, ``torch.compile``) are removed. ``extra`` (optimizer state, epoch, metrics …) must hold only
    ``weights_only``-safe values: tensors, dicts, lists, numbers, strings, None; its keys must not be reserved.
    """
    model = unwrap_model(model)
    family, config = getattr(model, "family", None), getattr(model, "config", None)
    if family is None or not dataclasses.is_dataclass(config):
        raise TypeError(f"model must be a registered crate_nn model carrying a dataclass config in .config (e.g. a "
                        f"CRATEConfig in .config), got {type(model).__name__}")
    if _is_safetensors(path):
        if extra:
            raise ValueError(f"extra: a .safetensors file holds weights only; keep run state ({sorted(extra)}) in a "
                             "torch checkpoint (.pt)")
        return _save_safetensors(path, model, family, config)
    extra = dict(extra or {})
    clash = sorted(set(RESERVED) & set(extra))
    if clash:
        raise ValueError(f"extra must not contain the reserved keys {clash}")
    payload = {"format": FORMAT, "family": family, "config": dataclasses.asdict(config),
               "model": model.state_dict(), **_preprocessing_entry(model), **extra}
    atomic_save({**payload, "checksum": payload_digest(payload)}, path)


def _preprocessing_entry(model: nn.Module) -> dict:
    """``{"preprocessing": its dict}`` when the model records its preprocessing, else nothing."""
    recorded = getattr(model, "preprocessing", None)
    return {} if recorded is None else {"preprocessing": recorded.to_dict()}


def payload_digest(payload) -> str:
    """SHA-256 of a checkpoint dictionary: a walk in a fixed order (dict keys sorted by their repr) hashing each
    tensor's dtype, shape and bytes (on the CPU) and the repr of every other value, so that it does not depend on
    the device the tensors were saved from or are read to."""
    digest = hashlib.sha256()

    def walk(value) -> None:
        if isinstance(value, torch.Tensor):
            t = value.detach().to("cpu").contiguous()
            digest.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, Mapping):
            digest.update(b"{")
            for key in sorted(value, key=repr):
                digest.update(repr(key).encode())
                walk(value[key])
            digest.update(b"}")
        elif isinstance(value, (list, tuple)):
            digest.update(b"[")
            for item in value:
                walk(item)
            digest.update(b"]")
        else:
            digest.update(repr(value).encode())

    walk(payload)
    return digest.hexdigest()


def atomic_save(payload, path: str | os.PathLike) -> None:
    """``torch.save(payload)`` to a temporary file beside ``path``, fsync, then rename it to ``path``. A write the
    operating system refuses (a full disk) raises `crate_nn.files.WriteError` naming ``path``."""
    _atomic_write(path, lambda f: torch.save(payload, f))


def _atomic_write(path: str | os.PathLike, write) -> None:
    """``write(file)`` into a temporary file beside ``path``, fsync, then rename it to ``path`` (`atomic_save`)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    with writing("checkpoint", path):
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=directory)
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; a checkpoint gets the mode any new file gets
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once at import (os.umask can only be read by setting it)


def read(path: str | os.PathLike, map_location="cpu", verify: bool = True) -> dict:
    """The raw dictionary of a checkpoint file, read with ``weights_only=True`` (no arbitrary unpickling).

    A missing, empty, truncated or foreign file raises ValueError naming it (not torch's internal errors); so does a
    file of ours whose contents do not match the checksum written with them, unless ``verify`` is False.
    """
    if not os.path.isfile(path):
        raise ValueError(f"checkpoint: {os.fspath(path)!r} does not exist or is not a file")
    try:
        payload = torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, KeyError, ValueError, pickle.UnpicklingError, UnicodeDecodeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"checkpoint: {os.fspath(path)!r} is not a readable torch checkpoint (empty, truncated or "
                         f"another kind of file): {type(err).__name__}: {reason[:300]}") from err
    recorded = payload.pop("checksum", None) if isinstance(payload, dict) and payload.get("format") == FORMAT else None
    if verify and recorded is not None and payload_digest(payload) != recorded:
        raise ValueError(f"checkpoint: {os.fspath(path)!r} does not match the checksum written with it (the file "
                         "is corrupted); crate_nn.load(path, verify=False) reads it anyway, for forensic use")
    return payload


def load(path: str | os.PathLike, map_location="cpu", verify: bool = True, **overrides) -> nn.Module:
    """The model of any checkpoint this package reads, its format told from the file (`sniff`).

    ``path``: a file, or ``hf-hub:ORG/NAME[@revision]`` — the weights of that repository in the local Hugging Face
    cache (`crate_nn.hub`; nothing is downloaded). Ours (`save`, a torch or a ``.safetensors`` file): its family, its
    config, its weights (strictly) and their dtype, after checking them against the file's checksum (``verify``,
    see `read`), and its ``preprocessing`` (`crate_nn.preprocessing.Preprocessing`, None when the file records none);
    ``overrides`` are refused (the file holds the whole config). Another codebase's (`crate_nn.official.formats`:
    the authors' CRATE classifier and CRATE-MAE, CRATE-α, crate-lm, nanoGPT; a torch or a ``.safetensors`` file):
    built by that format's loader with ``overrides`` — e.g. ``heads=6`` or ``name="crate_small"`` for the authors'
    classifier, whose tensors do not fix the number of heads (the error says so when it is missing) — with
    ``preprocessing`` None.
    """
    path = _local(path)
    payload = _read_payload(path, map_location, verify)
    if payload.get("format") == FORMAT:
        if overrides:
            raise ValueError(f"{path}: a crate_nn checkpoint holds its whole config; got overrides {sorted(overrides)}")
        return model_from_payload(payload, path)
    from .official.formats import load_foreign

    return load_foreign(payload, path, **overrides)


def training_config(path: str | os.PathLike) -> dict:
    """The training config (`crate_nn.engine.config.TrainConfig.to_dict`) a torch checkpoint of ours records; {} for
    a file without one (a ``.safetensors`` file, one saved outside a training run, another codebase's)."""
    if _is_safetensors(path):
        return {}
    payload = read(path, verify=False)
    ours = isinstance(payload, dict) and payload.get("format") == FORMAT
    return (payload.get("train_config") or {}) if ours else {}


def sniff(path: str | os.PathLike) -> str:
    """The name of the format of the checkpoint at ``path`` (a file or ``hf-hub:…``, as for `load`): ``crate_nn``,
    ``crate_nn (safetensors)`` or one of `crate_nn.official.formats.FORMATS` (ValueError naming the file when it is
    none, or several, of them)."""
    path = _local(path)
    payload = _read_payload(path, "cpu", verify=False)
    if payload.get("format") == FORMAT:
        return f"{FORMAT} (safetensors)" if _is_safetensors(path) else FORMAT
    from .official.formats import sniff as sniff_foreign

    return sniff_foreign(payload, path).name


def read_state(path: str | os.PathLike, map_location="cpu", verify: bool = True,
               **overrides) -> tuple[dict[str, torch.Tensor], Preprocessing | None]:
    """The tensors of any checkpoint `load` reads, under our names, and the preprocessing it records: ours as
    stored (no model is built, ``overrides`` are not needed); another codebase's through its format's loader, given
    the ``overrides`` that are not None (e.g. ``heads``), with no preprocessing."""
    path = _local(path)
    payload = _read_payload(path, map_location, verify)
    if payload.get("format") == FORMAT:
        config = get_family(payload.get("family", "classifier")).config_class(**payload["config"])
        return payload["model"], recorded_preprocessing(payload, config, path)
    from .official.formats import load_foreign

    given = {k: v for k, v in overrides.items() if v is not None}
    return load_foreign(payload, path, **given).state_dict(), None


def _local(path: str | os.PathLike) -> str:
    """``path`` as a string; an ``hf-hub:`` name resolved to its file in the local Hub cache."""
    return hub.resolve(path) if hub.is_hub(path) else os.fspath(path)


def _read_payload(path: str, map_location, verify: bool) -> dict:
    """A checkpoint file's dictionary: ours (from a torch file, or rebuilt from a ``.safetensors`` file's tensors and
    header), or another codebase's (a ``.safetensors`` file's tensors); a torch file holding no dictionary is refused
    naming the file."""
    payload = _read_safetensors(path, map_location) if _is_safetensors(path) else _read_any(path, map_location, verify)
    if not isinstance(payload, dict):
        raise ValueError(f"{path}: not a state dict of a known format (the file holds a {type(payload).__name__})")
    return payload


# ------------------------------------------------------------------------------------------------ safetensors
def _is_safetensors(path) -> bool:
    return os.fspath(path).endswith(".safetensors")


def _safetensors():
    from .extras import require

    require("safetensors", "path", "a .safetensors file")
    import safetensors.torch

    return safetensors.torch


def _save_safetensors(path, model: nn.Module, family: str, config) -> None:
    """The model's tensors (each tied parameter once, its other names recorded) and, in the header's metadata, the
    format, family, config and preprocessing as JSON; written atomically like `atomic_save`."""
    state = model.state_dict()
    tied = {name: names[0] for names in _shared_parameters(model) for name in names[1:]}
    tensors = {k: v.detach().contiguous() for k, v in state.items() if k not in tied}
    metadata = {"format": FORMAT, "family": family, "config": json.dumps(dataclasses.asdict(config)),
                "tied": json.dumps(tied), **{k: json.dumps(v) for k, v in _preprocessing_entry(model).items()}}
    data = _safetensors().save(tensors, metadata=metadata)
    _atomic_write(path, lambda f: f.write(data))


def _read_safetensors(path: str, map_location) -> dict:
    """A ``.safetensors`` file as a checkpoint dictionary: ours (``format``, ``family``, ``config``, ``model`` with
    the tied names restored, ``preprocessing`` when recorded) when its header has crate_nn's metadata, else its bare
    tensors (another codebase's weights). ValueError naming the file when it is missing or not safetensors."""
    if not os.path.isfile(path):
        raise ValueError(f"checkpoint: {path!r} does not exist or is not a file")
    safetensors_torch = _safetensors()
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="pt") as f:
            metadata = f.metadata() or {}
        state = safetensors_torch.load_file(path, device=str(map_location))
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"checkpoint: {path!r} is not a readable safetensors file: {err}") from None
    if metadata.get("format") != FORMAT:
        return state
    for alias, source in json.loads(metadata.get("tied", "{}")).items():
        state[alias] = state[source]
    payload = {"format": FORMAT, "family": metadata["family"], "config": json.loads(metadata["config"]),
               "model": state}
    if "preprocessing" in metadata:
        payload["preprocessing"] = json.loads(metadata["preprocessing"])
    return payload


def _read_any(path, map_location, verify: bool):
    """`read`, with the one extra type FAIR-MAE files hold (``args``, an argparse.Namespace) allowed."""
    import argparse

    with torch.serialization.safe_globals([argparse.Namespace]):
        return read(path, map_location=map_location, verify=verify)


def model_from_payload(payload: dict, source: str = "checkpoint") -> nn.Module:
    """The model described by a checkpoint dictionary of our format: built on the meta device and given the file's
    tensors (`build_loaded`), so no random initialisation is computed only to be overwritten, with its
    ``preprocessing`` (`recorded_preprocessing`; ``source`` names the file in errors)."""
    family = get_family(payload.get("family", "classifier"))
    model = build_loaded(family.model_class, family.config_class(**payload["config"]), payload["model"])
    model.preprocessing = recorded_preprocessing(payload, model.config, source)
    return model


def recorded_preprocessing(payload: dict, config, source: str = "checkpoint") -> Preprocessing | None:
    """The preprocessing a checkpoint dictionary of ours records; for a file written before they recorded it, the
    one its training config fixes (`crate_nn.preprocessing.from_training`); None for a file with neither."""
    if "preprocessing" in payload:
        return Preprocessing.from_dict(payload["preprocessing"], source)
    if isinstance(payload.get("train_config"), dict):
        return from_training(payload["train_config"], config)
    return None


def build_loaded(model_class, config, state: Mapping[str, torch.Tensor]) -> nn.Module:
    """``model_class(config)`` holding ``state`` (strictly: every key and shape), in the dtype of its first floating
    tensor. The model is built on the meta device and the tensors assigned (``assign=True``); parameters shared under
    several names (GPT's tied ``wte``/``lm_head``) are tied again, and a model with a tensor the state does not hold
    (a non-persistent buffer) is built the ordinary way instead (`build_then_copy`), so nothing is left on meta."""
    with torch.device("meta"):
        model = model_class(config)
    tied = _shared_parameters(model)
    model.load_state_dict(state, strict=True, assign=True)
    for names in tied:
        first = model.get_parameter(names[0])
        for name in names[1:]:
            owner, _, attribute = name.rpartition(".")
            setattr(model.get_submodule(owner), attribute, first)
    if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
        return build_then_copy(model_class, config, state)
    first = next(v for v in state.values() if v.is_floating_point())
    return model.to(device=first.device, dtype=first.dtype)


def build_then_copy(model_class, config, state: Mapping[str, torch.Tensor]) -> nn.Module:
    """``model_class(config)`` built (and randomly initialised) on the CPU, moved to the state's device and dtype,
    then given the state by copying: what `build_loaded` falls back to."""
    model = model_class(config)
    first = next(v for v in state.values() if v.is_floating_point())
    model.to(device=first.device, dtype=first.dtype)
    model.load_state_dict(state, strict=True)
    return model


def _shared_parameters(model: nn.Module) -> list[list[str]]:
    """Groups of names (≥ 2) under which one Parameter object appears."""
    groups: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(parameter), []).append(name)
    return [names for names in groups.values() if len(names) > 1]
