"""Our checkpoint format — moved to `crate_nn.weights` (`read_state`, `load`, `save`, `sniff`, `init_from`); this
module keeps the names it had for one release."""
from __future__ import annotations

import os

import torch
from torch import nn

from .models.registry import unwrap_model
from .preprocessing import Preprocessing
from .weights.build import build_loaded, build_then_copy
from .weights.ours import FORMAT, RESERVED, checkpoint, payload_digest, read, recorded_preprocessing, save
from .weights.reading import load, sniff, training_config
from .weights.reading import read_state as _read_state
from .weights.storage import atomic_save


def read_state(path: str | os.PathLike, map_location="cpu", verify: bool = True,
               **overrides) -> tuple[dict[str, torch.Tensor], Preprocessing | None]:
    """(the tensors under our names, the recorded preprocessing) of any file `load` reads
    (`crate_nn.weights.read_state`, which also gives the family and config)."""
    stored = _read_state(path, map_location, verify, **overrides)
    return stored.state, stored.preprocessing


def model_from_payload(payload: dict, source: str = "checkpoint") -> nn.Module:
    """The model described by a checkpoint dictionary of our format (`read`), with its preprocessing."""
    return checkpoint(payload, source).build()


__all__ = ["FORMAT", "RESERVED", "atomic_save", "build_loaded", "build_then_copy", "load", "model_from_payload",
           "payload_digest", "read", "read_state", "recorded_preprocessing", "save", "sniff", "training_config",
           "unwrap_model"]
