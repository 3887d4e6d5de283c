"""What the command lines load: the checkpoint a command names → its model and the training config it records
(``crate-eval``, ``crate-segment``). The formats themselves are read by `crate_nn.checkpoint` (ours, and any format
`crate_nn.load` tells apart) and `crate_nn.official` (the authors')."""
from __future__ import annotations

from pathlib import Path

from . import checkpoint, hub
from .official.classifier import load_official_checkpoint


def load_model(path: str, official: bool = False, name: str | None = None) -> tuple:
    """(model, its training config or {}) of a crate_nn checkpoint — a file, or ``hf-hub:ORG/NAME[@revision]`` in
    the local Hugging Face cache (`crate_nn.hub`) —, or of the authors' file when ``official`` (``name``: the
    registered size giving its heads); ValueError when the file is missing."""
    if hub.is_hub(path):
        path = hub.resolve(path)
    if not Path(path).is_file():
        raise ValueError(f"checkpoint: {path!r} does not exist")
    if official:
        return load_official_checkpoint(path, name=name), {}
    return checkpoint.load(path), checkpoint.training_config(path)
