"""Our format: the model's family and config beside its weights, with a checksum; and `Checkpoint`, what any weights
file becomes under our names.

A torch file is a ``torch.save`` dictionary read back with ``weights_only=True``::

    {"format": "crate_nn", "family": "classifier", "config": dataclasses.asdict(model.config),
     "model": state_dict, "preprocessing": model.preprocessing.to_dict() (when set), **extra,
     "checksum": SHA-256 of all of the above}

(``extra``: a training run's state — ``train_config``, optimizer, position, random state …). A ``.safetensors`` file
holds the weights alone (tied ones once) with, in its header's metadata, the format, family, config, the tied names
and the preprocessing as JSON, and the checksum of the metadata and the tensors. The checksum (`payload_digest`:
every tensor's dtype, shape and bytes and every other value, in a fixed order) is verified on reading: a flipped
bit in a weight is an error naming the file, not a silently different model (``verify=False`` reads such a file
anyway, for forensic use; files written before checksums existed have none and are read as they are). Both are
written atomically (`crate_nn.weights.storage`). Files written before families existed have no ``family`` and are
classifiers; before preprocessing was recorded, the training config's fixes it (`crate_nn.preprocessing`).

Every malformed entry — a family nobody registered, a config that is not JSON or does not fit its family, tied names
of absent tensors, tensors that do not fit the config — is a ValueError naming the file.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..models.registry import get_family, unwrap_model
from ..preprocessing import Preprocessing, from_training
from . import storage
from .build import build_loaded, shared_parameters

FORMAT = "crate_nn"
SAFETENSORS_FORMAT = f"{FORMAT} (safetensors)"
RESERVED = ("format", "family", "config", "model", "preprocessing", "checksum")


def is_ours(payload) -> bool:
    """Whether a file's dictionary (a torch file's, or a safetensors header's metadata) is of our format: the one
    test of it in the package."""
    return isinstance(payload, Mapping) and payload.get("format") == FORMAT


@dataclass
class Checkpoint:
    """What a weights file holds, under our names: its format (as `crate_nn.weights.sniff` names it), the family and
    config of its model, its tensors (``state``, our keys), the preprocessing it records (ours only) and, for a
    training run's file, the rest of the run's state (``extra``: ``train_config``, optimizer, position …)."""

    path: str
    format: str
    family: str
    config: Any
    state: dict[str, torch.Tensor]
    preprocessing: Preprocessing | None = None
    extra: dict = field(default_factory=dict)
    what: str = "checkpoint"

    @property
    def ours(self) -> bool:
        return self.format in (FORMAT, SAFETENSORS_FORMAT)

    @property
    def train_config(self) -> dict:
        """The training config the file records (`crate_nn.engine.config.TrainConfig.to_dict`), or {}."""
        recorded = self.extra.get("train_config")
        return recorded if isinstance(recorded, dict) else {}

    def build(self) -> nn.Module:
        """The model: built on the meta device and given the tensors (`crate_nn.weights.build.build_loaded`), with
        the recorded preprocessing; ValueError naming the file when the tensors do not fit the config."""
        family = get_family(self.family)
        try:
            model = build_loaded(family.model_class, self.config, self.state)
        except (TypeError, ValueError) as err:  # a TypeError: a config value of another type than its option's
            raise ValueError(f"{self.what}: {self.path!r} does not hold the model its config describes: {err}") from None
        model.preprocessing = self.preprocessing
        return model


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
    if storage.writes_safetensors(path):
        if extra:
            raise ValueError(f"extra: a .safetensors file holds weights only; keep run state ({sorted(extra)}) in a "
                             "torch checkpoint (.pt)")
        return _save_safetensors(path, model, family, config)
    extra = dict(extra or {})
    clash = sorted(set(RESERVED) & set(extra))
    if clash:
        raise ValueError(f"extra must not contain the reserved keys {clash}")
    payload = {"format": FORMAT, "family": family, "config": dataclasses.asdict(config),
               "model": model.state_dict(), **preprocessing_entry(model), **extra}
    storage.atomic_save({**payload, "checksum": payload_digest(payload)}, path)


def preprocessing_entry(model: nn.Module) -> dict:
    """``{"preprocessing": its dict}`` when the model records its preprocessing, else nothing: our files' entry, and
    the one another codebase's file holds beside its weights where its layout has room (``crate-export``)."""
    recorded = getattr(model, "preprocessing", None)
    return {} if recorded is None else {"preprocessing": recorded.to_dict()}


def _save_safetensors(path, model: nn.Module, family: str, config) -> None:
    """The model's tensors (each tied parameter once, its other names recorded) and, in the header's metadata, the
    format, family, config, preprocessing and the checksum of the metadata and the tensors."""
    state = model.state_dict()
    tied = {name: names[0] for names in shared_parameters(model) for name in names[1:]}
    tensors = {k: v.detach().contiguous() for k, v in state.items() if k not in tied}
    metadata = {"format": FORMAT, "family": family, "config": json.dumps(dataclasses.asdict(config)),
                "tied": json.dumps(tied), **{k: json.dumps(v) for k, v in preprocessing_entry(model).items()}}
    storage.write_safetensors(path, tensors, {**metadata, "checksum": _safetensors_digest(metadata, tensors)})


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


def _safetensors_digest(metadata: Mapping[str, str], tensors: Mapping[str, torch.Tensor]) -> str:
    """The checksum of a safetensors file of ours: its metadata (but the checksum) and its tensors as stored."""
    return payload_digest({"metadata": {k: v for k, v in metadata.items() if k != "checksum"}, "tensors": tensors})


def _corrupted(path: str, what: str) -> ValueError:
    return ValueError(f"{what}: {path!r} does not match the checksum written with it (the file is corrupted); "
                      "crate_nn.load(path, verify=False) reads it anyway, for forensic use")


def read(path: str | os.PathLike, map_location="cpu", verify: bool = True, allowed: Iterable[type] = (),
         what: str = "checkpoint"):
    """What a torch file holds, read with ``weights_only=True`` (and the types ``allowed``). A missing, empty,
    truncated or foreign file raises ValueError naming it (not torch's internal errors); so does a file of ours whose
    contents do not match the checksum written with them, unless ``verify`` is False. Ours comes without its
    checksum."""
    path = os.fspath(path)
    payload = storage.read_torch(path, map_location, allowed, what)
    recorded = payload.pop("checksum", None) if is_ours(payload) else None
    if verify and recorded is not None and payload_digest(payload) != recorded:
        raise _corrupted(path, what)
    return payload


def read_safetensors(path: str, map_location="cpu", verify: bool = True, what: str = "checkpoint") -> dict:
    """A safetensors file as a dictionary: ours (``format``, ``family``, ``config``, ``model`` with the tied names
    restored, ``preprocessing`` when recorded; its checksum verified unless ``verify`` is False) when its header has
    our metadata, else its bare tensors (another codebase's weights)."""
    state, metadata = storage.read_safetensors(path, map_location, what)
    if not is_ours(metadata):
        return state
    recorded = metadata.get("checksum")
    if verify and recorded is not None and _safetensors_digest(metadata, state) != recorded:
        raise _corrupted(path, what)
    if "family" not in metadata or "config" not in metadata:
        raise ValueError(f"{what}: {path!r}: its metadata has no {'family' if 'family' not in metadata else 'config'} "
                         "(crate_nn.save writes the format, family and config)")
    entries = {name: _json(metadata, name, path, what) for name in ("config", "tied", "preprocessing")
               if name in metadata}
    tied = entries.pop("tied", {})
    if not isinstance(tied, dict) or not all(isinstance(v, str) for v in tied.values()):
        raise ValueError(f"{what}: {path!r}: its metadata's tied is not a dictionary of tensor names")
    absent = sorted(set(tied.values()) - set(state))
    if absent:
        raise ValueError(f"{what}: {path!r}: its metadata's tied names map to tensors the file does not hold: "
                         f"{absent[:5]}")
    state.update({alias: state[source] for alias, source in tied.items()})
    return {"format": FORMAT, "family": metadata["family"], "model": state, **entries}


def _json(metadata: Mapping[str, str], name: str, path: str, what: str):
    try:
        return json.loads(metadata[name])
    except json.JSONDecodeError as err:
        raise ValueError(f"{what}: {path!r}: its metadata's {name} is not JSON ({err})") from None


def checkpoint(payload: Mapping, path: str, format: str = FORMAT, what: str = "checkpoint") -> Checkpoint:
    """Our dictionary (`read`, `read_safetensors`) as a `Checkpoint`; ValueError naming the file for a family
    nobody registered, a config its family does not accept, a missing or non-tensor state."""
    name = payload.get("family", "classifier")  # files written before families existed are classifiers
    try:
        family = get_family(name)
    except ValueError as err:
        raise ValueError(f"{what}: {path!r}: {err}") from None
    if not isinstance(payload.get("config"), Mapping):
        raise ValueError(f"{what}: {path!r}: its config is {type(payload.get('config')).__name__}, not a dictionary "
                         f"of {family.config_class.__name__} options")
    try:
        config = family.config_class(**payload["config"])
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what}: {path!r}: its config is not a {name} config: {err}") from None
    state = payload.get("model")
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{what}: {path!r}: its model entry is not a state dict of tensors")
    try:
        preprocessing = recorded_preprocessing(payload, config, path)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{what}: {path!r}: its preprocessing is malformed: {err}") from None
    extra = {k: v for k, v in payload.items() if k not in RESERVED}
    return Checkpoint(path, format, name, config, dict(state), preprocessing, extra, what)


def recorded_preprocessing(payload: Mapping, config, source: str = "checkpoint") -> Preprocessing | None:
    """The preprocessing a checkpoint dictionary of ours records; for a file written before they recorded it, the
    one its training config fixes (`crate_nn.preprocessing.from_training`); None for a file with neither."""
    if "preprocessing" in payload:
        if not isinstance(payload["preprocessing"], Mapping):
            raise ValueError(f"{source}: preprocessing is a {type(payload['preprocessing']).__name__}, not a "
                             "dictionary")
        return Preprocessing.from_dict(payload["preprocessing"], source)
    if isinstance(payload.get("train_config"), dict):
        return from_training(payload["train_config"], config)
    return None
