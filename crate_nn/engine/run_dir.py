"""The run directory: its checks before a run starts, its lock while it trains, and the files the engine writes in it.

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

The random state and the data identity a checkpoint also stores are `crate_nn.engine.rng`'s and
`crate_nn.engine.resume`'s.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from torch import nn

from ..files import FileLock, atomic_write, write_json
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
                       "with --run.overwrite") if existing else ""
            raise ValueError(f"resume: no checkpoint {last} to resume from{started}")
        return
    if existing and not overwrite:
        unsaved = " and stopped before its first checkpoint" if not last.is_file() else ""
        raise ValueError(
            f"output_dir: {output_dir!r} already holds a run ({', '.join(existing)}){unsaved}; pass --run.resume "
            "to continue it, --run.overwrite to delete it and start over, or choose another --run.output-dir"
        )
    parent = root if root.exists() else next((p for p in root.absolute().parents if p.exists()), Path("/"))
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"output_dir: cannot write to {str(parent)!r}")


class RunLock(FileLock):
    """The lock on ``<output_dir>/.lock`` (`crate_nn.files.FileLock`) for as long as a run trains, taken by the main
    process only (``enabled``): a second process asking for it gets ValueError naming the holder's process and host."""

    def __init__(self, output_dir: str, enabled: bool = True) -> None:
        super().__init__(Path(output_dir) / ".lock", enabled=enabled, refuse=lambda holder: ValueError(
            f"output_dir: {str(Path(output_dir))!r} is in use by a run that is training now ({holder}); wait for it to "
            "end or choose another --run.output-dir"))


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
                    raise ValueError(f"tensorboard: --run.tensorboard needs the tensorboard package: "
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
            with atomic_write(path, "metrics") as f:
                f.write("".join(json.dumps(r) + "\n" for r in kept).encode())

    def write_config(self, resolved: dict) -> None:
        if self.enabled:
            write_json(self.root / "config.json", resolved, "config", indent=2)

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
        with atomic_write(self.last, "checkpoint") as copy, open(path, "rb") as source:
            shutil.copyfileobj(source, copy)
        if self.keep > 0:
            for old in sorted(self.checkpoints.glob("step_*.pt"))[:-self.keep]:
                old.unlink()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
