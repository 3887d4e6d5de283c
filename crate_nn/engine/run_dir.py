"""The run directory and the random state a run must save to resume exactly.

    <output_dir>/config.json            the resolved config (engine, task, model)
    <output_dir>/metrics.jsonl          one JSON line per log window, evaluation and end-of-run result
    <output_dir>/checkpoints/           step_XXXXXXX.pt and last.pt (crate_nn.load reads the model of either)
    <output_dir>/summary.json, figures/curves.png   the end-of-run summary and curves (`crate_nn.engine.report`)
    <output_dir>/measurements/, figures/, tensorboard/   what tasks and options add

A run directory belongs to one run: starting a run where another one lives is refused unless ``resume`` (continue
it) or ``overwrite`` (delete what the engine and tasks wrote there, then start over) is given. The check happens in
every process before any process group forms. While a run trains, its main process holds `RunLock` on
``<output_dir>/.lock``: a second run started on the same directory at the same time is refused with one line naming
the first one's process (the lock is the operating system's, so it ends with its process, however that ends).

The data a run trains on is part of its identity: every checkpoint stores `data_identity` of the training set, and a
``resume`` on other data is refused.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import socket
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from ..files import writing
from ..weights import ours

OWNED = ("checkpoints", "metrics.jsonl", "config.json", "summary.json", "measurements", "figures",
         "tensorboard")


def check_output_dir(output_dir: str, resume: bool, overwrite: bool) -> None:
    """Refuse an unusable run directory before any work: a file in its place, a run already there (without
    ``resume``/``overwrite``), nothing to resume, or no permission to write."""
    root = Path(output_dir)
    if root.exists() and not root.is_dir():
        raise ValueError(f"output_dir: {output_dir!r} exists and is not a directory")
    last = root / "checkpoints" / "last.pt"
    existing = [name for name in OWNED if (root / name).exists()]
    if resume:
        if not last.is_file():
            started = (f"; the run there stopped before its first checkpoint ({', '.join(existing)}): start it again "
                       "with --overwrite") if existing else ""
            raise ValueError(f"resume: no checkpoint {last} to resume from{started}")
        return
    if existing and not overwrite:
        unsaved = " and stopped before its first checkpoint" if not last.is_file() else ""
        raise ValueError(
            f"output_dir: {output_dir!r} already holds a run ({', '.join(existing)}){unsaved}; pass --resume to "
            "continue it, --overwrite to delete it and start over, or choose another --output-dir"
        )
    parent = root if root.exists() else next((p for p in root.absolute().parents if p.exists()), Path("/"))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"output_dir: cannot write to {str(parent)!r}")


class RunLock:
    """An exclusive lock on ``<output_dir>/.lock`` (POSIX ``flock``) for as long as a run trains, taken by the main
    process only (``enabled``): a second process asking for it gets ValueError naming the holder's process and host.
    The operating system drops the lock with its process, so a killed run never leaves a stale lock."""

    def __init__(self, output_dir: str, enabled: bool = True) -> None:
        self.path = Path(output_dir) / ".lock"
        self.enabled = enabled
        self._file = None

    def __enter__(self) -> RunLock:
        if not self.enabled:
            return self
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock (the read-only checks still apply)
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise ValueError(f"output_dir: {str(self.path.parent)!r} is in use by a run that is training now "
                             f"({holder}); wait for it to end or choose another --output-dir") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} on {socket.gethostname()}: {' '.join(sys.argv)[:200]}\n")
        handle.flush()
        self._file = handle
        return self

    def __exit__(self, *exc) -> None:
        if self._file is not None:
            self._file.close()  # closing the file releases the lock
            self._file = None


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


RUN_STATE = ("train_config", "optimizer", "position", "rng")
"""What a training run's checkpoint holds beside the model, and ``--resume`` needs."""


def read_run_state(path: Path) -> dict:
    """The checkpoint a resumed run continues from (`crate_nn.weights.ours.read`, on the CPU); ValueError naming it
    when it holds a model only (``crate_nn.save``, ``crate-export``), without the run's state."""
    state = ours.read(path, map_location="cpu")
    missing = [key for key in RUN_STATE if key not in state]
    if missing:
        raise ValueError(f"resume: {path} holds no training run's state ({', '.join(missing)} missing: a model-only "
                         "checkpoint, as crate_nn.save and crate-export write); --resume continues a run from the "
                         "last.pt it wrote itself")
    return state


def check_same_data(saved: dict | None, current: dict) -> None:
    """Refuse to resume on other training data than the checkpoint's (``saved`` None: a checkpoint written before
    the data were recorded, accepted as it is)."""
    if saved is not None and saved != current:
        def describe(identity: dict) -> str:
            tail = f", fingerprint {identity['fingerprint']}" if "fingerprint" in identity else ""
            return f"{identity['samples']} samples{tail}"

        raise ValueError(f"resume: the training data differ from the checkpoint's ({describe(saved)} then, "
                         f"{describe(current)} now); resume with the data the run started on, or start a new run")


def clear_run(output_dir: str) -> None:
    """Delete what a previous run wrote to ``output_dir`` (only the entries in ``OWNED``)."""
    root = Path(output_dir)
    for name in OWNED:
        path = root / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def read_metrics(path: Path, repair: bool = False) -> list[dict]:
    """The records of a metrics.jsonl. An unreadable LAST line is what an interrupted append leaves (a full disk, a
    kill mid-write): with ``repair`` it is dropped with one line on stderr saying so; any other unreadable line is a
    ValueError naming the file and the line."""
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if repair and number == len(lines):
                print(f"crate-train: dropped the unfinished last line of {path} (an interrupted write): "
                      f"{line[:60]!r}", file=sys.stderr)
                break
            raise ValueError(f"{path}: line {number} is not a JSON record: {line[:60]!r}") from None
    return records


class RunFiles:
    """The run directory: config.json, metrics.jsonl, checkpoints/ (written by the main process only)."""

    def __init__(self, output_dir: str, enabled: bool, keep: int, tensorboard: bool):
        self.root = Path(output_dir)
        self.checkpoints = self.root / "checkpoints"
        self.last = self.checkpoints / "last.pt"
        self.enabled, self.keep = enabled, keep
        self.writer = None
        if enabled:
            if tensorboard:  # before any folder is made: a missing package must not leave a run behind
                from ..extras import install_hint
                try:
                    from torch.utils.tensorboard import SummaryWriter
                except ImportError as err:
                    raise ValueError(f"tensorboard: --tensorboard needs the tensorboard package: "
                                     f"{install_hint('tensorboard')}") from err
            self.checkpoints.mkdir(parents=True, exist_ok=True)
            if tensorboard:
                self.writer = SummaryWriter(str(self.root / "tensorboard"))

    def forget_after(self, step: int) -> None:
        """Drop the metrics.jsonl lines a resumed run writes again: those of steps after ``step`` and the
        end-of-run lines (``"final"``) of the interrupted run."""
        path = self.root / "metrics.jsonl"
        if self.enabled and path.is_file():
            kept = [r for r in read_metrics(path, repair=True) if r["step"] <= step and not r.get("final")]
            path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    def write_config(self, resolved: dict) -> None:
        if self.enabled:
            (self.root / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")

    def log(self, record: dict) -> None:
        if not self.enabled:
            return
        with open(self.root / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.writer is not None:
            for key, value in record.items():
                if key not in ("epoch", "step") and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.writer.add_scalar(key, value, record["step"])

    def save(self, model: nn.Module, step: int, extra: dict) -> None:
        """``step_XXXXXXX.pt`` then an atomic copy to ``last.pt``; keeps the newest ``keep`` step files."""
        if not self.enabled:
            return
        path = self.checkpoints / f"step_{step:07d}.pt"
        ours.save(path, model, extra)
        tmp = self.checkpoints / ".last.pt.tmp"
        with writing("checkpoint", self.last):
            shutil.copyfile(path, tmp)
            os.replace(tmp, self.last)
        if self.keep > 0:
            for old in sorted(self.checkpoints.glob("step_*.pt"))[:-self.keep]:
                old.unlink()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def rng_state() -> dict:
    """Python, NumPy, torch and CUDA generator states in weights_only-safe types (numpy's array as a tensor)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": list(random.getstate()[1]) + [random.getstate()[2]],
        "python_version": random.getstate()[0],
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    """Inverse of ``rng_state``."""
    python = state["python"]
    random.setstate((state["python_version"], tuple(python[:-1]), python[-1]))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
