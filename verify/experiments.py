"""The audit's trained models: every claim that trains a model for a comparison gets its runs from `run`.

A run is one training config (its ``seed`` included) trained once per *code*: the entry's key is a hash of the
config and of the code that trains it (`CODE`), so a changed training loop, model, task or data pipeline
retrains instead of serving a model the current code would not produce. An entry, under `root` ::

    runs/<task>-<config hash>-<code hash>/
        init.pt        the model the run starts from (`crate_nn.engine.initial_model`: the engine's own seeding
                       and task construction, the one place a run's initialisation comes from)
        trained.pt     the model at the end of training (the weights only; no optimizer state) and the task's
                       state then (``"task"``: e.g. DINO's centre, `Run.task_state`)
        metrics.json   the engine's final metrics (its ``TrainResult.metrics``)
        measurements/  the layer-wise measurements the task recorded during training (classification's
                       ``measure_epochs``: one ``epoch_XXXX.json`` per epoch), when the config asks for them
        run.json       the config, the code hash and the wall time of the training
        derived/       numbers measured on the run and cached by `Run.derived`

is built in a temporary folder beside it and renamed into place complete, so an interrupted training never leaves
an entry that reads as finished; a file lock per key lets concurrent audits (pytest-xdist workers) train a run
once. Training a run deletes the entries of the same config left by other code (stale by construction), so the
cache holds one version of each run. Training runs on the CPU, with its output silenced, and leaves the global
random generators as it found them: a claim measures the same numbers on a warm cache and a cold one.

The cache lives in ``verify.context.cache_dir()/verify`` (``$CRATE_WHITEBOX_CACHE/verify`` when the variable is
set); ``make clean`` deletes that folder. A quick audit fills it with about 20 MB.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import io
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from filelock import FileLock  # a dependency of torch, always installed with it
from torch import nn

import crate_nn
from crate_nn import checkpoint
from crate_nn.engine import TrainConfig, initial_model, train
from crate_nn.engine.rng import rng_state, set_rng_state
from verify.context import cache_dir

CODE_ROOT = Path(crate_nn.__file__).resolve().parent
"""The package whose source `code_hash` covers: all of ``crate_nn``."""

NOT_IN_KEY = ("output_dir", "progress", "tensorboard", "keep_checkpoints", "resume", "overwrite", "device", "preset")
"""Config fields left out of a run's key: where the run is written, how it is displayed, the preset's name, and
the device (the runner always trains on the CPU). Every other field can change the numbers and is in the key."""

MODELS = ("init", "trained")


def root() -> Path:
    """The audit's folder in the cache: ``cache_dir()/verify``."""
    return cache_dir() / "verify"


def code_hash(package: Path = CODE_ROOT) -> str:
    """A hash of every ``.py`` file of ``package`` (default: ``crate_nn``; path and bytes) and of torch's version.

    Why all of crate_nn: a run depends on the engine, the task, the model, the data pipeline and whatever they
    import (the tasks' in-training evaluation reads crate_nn.analysis and crate_nn.evaluation), and these import
    each other freely. Any narrower list would have to follow those imports by hand, and a file missed would serve
    a stale model without a sign — the failure this cache exists to prevent. The price is that any edit of
    crate_nn (a docstring too) retrains the audit's models once (a cold quick audit). torch computes the steps, so
    its version is part of the code.
    """
    digest = hashlib.sha256(torch.__version__.encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


CODE = code_hash()
"""The code hash of this process's runs, taken once when the audit starts (crate_nn is imported by then): an edit
made while an audit runs never labels a run trained by the code loaded before it."""


def config_hash(config: TrainConfig) -> str:
    """A hash of the config's task and of every field not in `NOT_IN_KEY` (the seed included)."""
    fields = {k: v for k, v in config.to_dict().items() if k not in NOT_IN_KEY}
    text = json.dumps([config.task, fields], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def _source_hash(module: ModuleType) -> str:
    """A hash of ``module``'s source as it is when first used in this process (edits after that are not seen)."""
    return hashlib.sha256(inspect.getsource(module).encode()).hexdigest()[:16]


def _derived_key(module: ModuleType, params: dict) -> str:
    text = _source_hash(module) + json.dumps(params, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Run:
    """A complete entry of the cache: a trained run of ``config`` in ``folder``."""

    config: TrainConfig
    folder: Path

    def model(self, which: str) -> nn.Module:
        """The ``"init"`` or ``"trained"`` model, loaded afresh (in eval mode)."""
        if which not in MODELS:
            raise ValueError(f"which: expected one of {MODELS}, got {which!r}")
        return crate_nn.load(self.folder / f"{which}.pt").eval()

    def task_state(self) -> dict:
        """The task's state at the end of training (`crate_nn.engine.task.Task.state_dict`: e.g. DINO's centre)."""
        return checkpoint.read(self.folder / "trained.pt").get("task", {})

    @property
    def metrics(self) -> dict:
        """The engine's final metrics of the run."""
        return json.loads((self.folder / "metrics.json").read_text())

    def measurements(self) -> dict[int, dict]:
        """The layer-wise measurements recorded during training (`crate_nn.analysis.snapshots.record_layers`), by
        epoch (0: the initialisation); empty when the config recorded none."""
        records = (json.loads(p.read_text()) for p in sorted((self.folder / "measurements").glob("epoch_*.json")))
        return {r["epoch"]: r for r in records}

    @property
    def seconds(self) -> float:
        """Wall time of the training."""
        return json.loads((self.folder / "run.json").read_text())["seconds"]

    def derived(self, name: str, compute: Callable[[Run], Any], code: ModuleType, **params) -> Any:
        """``compute(self)`` (JSON-serialisable), cached in the entry under ``name``, the source of ``code`` (the
        module that defines the measurement) and ``params`` (what else it depends on, e.g. how many images): a
        changed measurement is measured again, as a changed training is trained again."""
        path = self.folder / "derived" / f"{name}-{_derived_key(code, params)}.json"
        if not path.is_file():
            value = compute(self)
            path.parent.mkdir(exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(value, f)
            os.replace(tmp, path)
        value = json.loads(path.read_text())
        _TOUCHED.setdefault(self.folder, (self, {}))[1][name, json.dumps(params, sort_keys=True, default=str)] = (
            params, value)
        return value


def location(config: TrainConfig) -> Path:
    """The cache entry of ``config``'s run with the current code: ``root()/runs/<task>-<config hash>-<code hash>``."""
    return root() / "runs" / f"{config.task}-{config_hash(config)}-{CODE}"


_ANSWER: list[Callable[[TrainConfig], Any]] = []
"""The stand-in `run` answers with while `answered_by` is active (`verify.committed.reading`)."""
_TOUCHED: dict[Path, tuple[Run, dict]] = {}
"""Every run `run` returned in this process, with the derived numbers read from it: (name, params text) →
(params, value). `verify.committed` stores them."""


@contextlib.contextmanager
def answered_by(answer: Callable[[TrainConfig], Any]):
    """Within the block `run` returns ``answer(config)`` (a run with `Run`'s reading interface) and trains nothing."""
    _ANSWER.append(answer)
    try:
        yield
    finally:
        _ANSWER.pop()


def touched() -> list[tuple[Run, dict]]:
    """The runs `run` returned in this process, each with the derived numbers read from it (`_TOUCHED`)."""
    return list(_TOUCHED.values())


def run(config: TrainConfig) -> Run:
    """The run of ``config`` with the current code: read from the cache, or trained now (once) and stored; within
    `answered_by`, the stand-in's answer instead."""
    if _ANSWER:
        return _ANSWER[-1](config)
    prefix, code, folder = f"{config.task}-{config_hash(config)}", CODE, location(config)
    if not folder.is_dir():
        folder.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(folder.parent / f".{prefix}.lock")):
            if not folder.is_dir():
                _train_into(config, folder, code)
                for stale in folder.parent.glob(f"{prefix}-*"):
                    if stale.is_dir() and stale != folder:
                        shutil.rmtree(stale, ignore_errors=True)
    return _TOUCHED.setdefault(folder, (Run(config, folder), {}))[0]


def runs(config: TrainConfig, seeds: Sequence[int]) -> list[Run]:
    """`run` of ``config`` for each of ``seeds``."""
    return [run(dataclasses.replace(config, seed=seed)) for seed in seeds]


RUN_ONLY = ("seed", "output_dir", "progress")
"""Config fields that name where or how visibly a run happens, not what it trains: left out of a recipe."""


def recipe(config: TrainConfig) -> dict:
    """``config`` as JSON without `RUN_ONLY`: what a committed run (results/*/results.json) records it was
    trained with."""
    return {k: v for k, v in json.loads(json.dumps(config.to_dict(), default=str)).items() if k not in RUN_ONLY}


def recipe_differences(saved: dict, config: TrainConfig) -> list[str]:
    """The fields on which ``config`` differs from a committed run's ``saved`` recipe (`recipe`). A field the saved
    recipe lacks counts only when ``config`` holds another value than the field's default: options added since
    the run was made default to what the run did or change nothing it trained (e.g. ``curves``, a figure)."""
    return config.differences(saved, ignore=RUN_ONLY)


def seeds(base: int, count: int) -> list[int]:
    """The ``count`` run seeds of the audit's base seed ``base`` (``--seed``): count·base, …, count·base + count − 1,
    disjoint for different base seeds."""
    if count < 1:
        raise ValueError(f"count: expected at least 1 seed, got {count}")
    return [count * base + i for i in range(count)]


@contextlib.contextmanager
def _rng_kept():
    """Restore Python's, NumPy's and torch's global generators on exit (training and `initial_model` seed them)."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def _train_into(config: TrainConfig, folder: Path, code: str) -> None:
    """Train ``config`` and write its complete entry at ``folder`` (built beside it, renamed into place); ``code``:
    the code hash of the entry's key, recorded in run.json."""
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-") as tmp:
        work = Path(tmp) / "entry"
        work.mkdir()
        options = dict(output_dir=str(Path(tmp) / "run"), device="cpu", progress=False, curves=False, resume=False,
                       overwrite=False)  # no curves: the audit draws its own figures, and a plot costs ≈ 0.5 s a run
        with _rng_kept(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            started = time.perf_counter()
            result = train(dataclasses.replace(config, **options))
            seconds = time.perf_counter() - started
            crate_nn.save(work / "init.pt", initial_model(dataclasses.replace(config, **options)))
            task_state = checkpoint.read(result.checkpoint).get("task") or {}
            crate_nn.save(work / "trained.pt", crate_nn.load(result.checkpoint),  # building a model draws weights
                          extra={"task": task_state})
        (work / "metrics.json").write_text(json.dumps(result.metrics))
        recorded = sorted((Path(options["output_dir"]) / "measurements").glob("epoch_*.json"))
        if recorded:
            (work / "measurements").mkdir()
            for path in recorded:
                shutil.copy(path, work / "measurements" / path.name)
        (work / "run.json").write_text(json.dumps({"config": config.to_dict(), "task": config.task,
                                                   "code": code, "seconds": seconds}, default=str, indent=1))
        os.rename(work, folder)
