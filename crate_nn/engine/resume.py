"""What a resumed run must share with the run it continues: its config (but for the ``resume_free`` fields) and its
training data. Every checkpoint stores the config and `data_identity` of the training set; ``--run.resume`` with another
config (`check_resumable`) or on other data (`check_same_data`) is refused with one line saying what differs, and a
checkpoint without a run's state (`read_run_state`: a model-only file) likewise."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from ..weights import ours
from .config import TrainConfig

RUN_STATE = ("train_config", "optimizer", "position", "rng")
"""What a training run's checkpoint holds beside the model, and ``--run.resume`` needs."""


def read_run_state(path: Path) -> dict:
    """The checkpoint a resumed run continues from (`crate_nn.weights.ours.read`, on the CPU); ValueError naming it
    when it holds a model only (``crate_nn.save``, ``crate-export``), without the run's state."""
    state = ours.read(path, map_location="cpu")
    missing = [key for key in RUN_STATE if key not in state]
    if missing:
        raise ValueError(f"resume: {path} holds no training run's state ({', '.join(missing)} missing: a model-only "
                         "checkpoint, as crate_nn.save and crate-export write); --run.resume continues a run from the "
                         "last.pt it wrote itself")
    return state


def check_resumable(saved: dict, config: TrainConfig) -> None:
    """Refuse to resume with a config that changes the run (anything but its ``resume_free`` fields; an option
    added since the checkpoint was written passes at its default, `TrainConfig.differences`)."""
    changed = config.differences(saved, ignore=config.resume_free_fields())
    if changed:
        current = json.loads(json.dumps(config.to_dict(), default=str))
        details = "; ".join(f"{k}: saved {saved.get(k, '(none)')!r}, now {current.get(k, '(none)')!r}"
                            for k in changed)
        raise ValueError(f"resume: the config differs from the checkpoint's in {details}")


def data_identity(dataset) -> dict:
    """What identifies the training data of a run: the number of samples and, where the dataset exposes them, a
    SHA-256 of its labels (``labels``: a tensor or array) or of its samples' file names and labels (``samples``:
    (path, label) pairs; the folder itself may move, hence names only)."""
    identity: dict = {"samples": len(dataset)}
    digest = hashlib.sha256()
    labels, samples = getattr(dataset, "labels", None), getattr(dataset, "samples", None)
    if isinstance(labels, (torch.Tensor, np.ndarray)):
        digest.update(np.ascontiguousarray(torch.as_tensor(labels).cpu().numpy()).tobytes())
    elif isinstance(samples, (list, tuple)) and all(isinstance(s, (list, tuple)) and len(s) == 2 for s in samples):
        for path, label in samples:
            digest.update(f"{Path(str(path)).name}\t{label}\n".encode())
    else:
        return identity
    identity["fingerprint"] = digest.hexdigest()[:16]
    return identity


def check_same_data(saved: dict | None, current: dict) -> None:
    """Refuse to resume on other training data than the checkpoint's (``saved`` None: a checkpoint written before
    the data were recorded, accepted as it is)."""
    if saved is not None and saved != current:
        def describe(identity: dict) -> str:
            tail = f", fingerprint {identity['fingerprint']}" if "fingerprint" in identity else ""
            return f"{identity['samples']} samples{tail}"

        raise ValueError(f"resume: the training data differ from the checkpoint's ({describe(saved)} then, "
                         f"{describe(current)} now); resume with the data the run started on, or start a new run")
