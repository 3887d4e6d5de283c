"""The audit's trained models: every claim that trains a model for a comparison gets its runs from `run`.

A run is one training config (its ``seed`` included) trained once per *code*: the entry's key is a hash of the
config and of the code that trains it (`CODE`), so a changed training loop, model, task or data pipeline
retrains instead of serving a model the current code would not produce. An entry, under `root` ::

    sealed-runs/<task>-<config hash>-<code hash>/
        init.pt        the model the run starts from (`crate_nn.engine.initial_model`: the engine's own seeding
                       and task construction, the one place a run's initialisation comes from)
        trained.pt     the model at the end of training (the weights only; no optimizer state) and the task's
                       state then (``"task"``: e.g. DINO's centre, `Run.task_state`)
        metrics.json   the engine's final metrics (its ``TrainResult.metrics``)
        measurements/  the layer-wise measurements the task recorded during training (classification's
                       ``measure_epochs``: one ``epoch_XXXX.json`` per epoch), when the config asks for them
        run.json       the config, the code hash, the wall time of the training and the SHA-256 of each model file
        derived/       numbers measured on the run and cached by `Run.derived`

Every JSON file of an entry is sealed with its SHA-256 (`verify.integrity`) and the model files' checksums are in
``run.json``: a run is checked when this process first uses it, and a damaged one (a flipped bit, a truncated
file) is deleted and trained again, a damaged derived number measured again, each with one line on stderr.

An entry is built in a temporary folder beside it and renamed into place complete, so an interrupted training
never leaves an entry that reads as finished; a file lock per entry (keyed by config and code) lets concurrent
audits (pytest-xdist workers) train a run once. Entries of the same config left by other code are deleted once
they have not been used for `STALE_AFTER` (each use marks an entry's folder, under its lock): two checkouts of
different code auditing on one cache at once never delete each other's entries, and the cache still holds about
one version of each run. Training runs on the CPU, with its output silenced, and leaves the global random
generators as it found them: a claim measures the same numbers on a warm cache and a cold one.

**Perturbed training** (`perturbed`, ``python -m verify --perturb [K]``): every run starts from its initialisation
with each weight moved by K units in the last place (`nudge`; K = 1 by default), and is cached apart
(``perturbed-runs-K/``). CPU training is
not bitwise reproducible across processors — another SIMD kernel rounds differently — and a chaotic training grows
such a last-bit difference into another trajectory; the perturbation draws one such trajectory on any machine, so
that an expectation can be checked against what another processor would train (`verify.panel`).

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
import math
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any

import torch
from torch import nn

import crate_nn
from crate_nn import checkpoint
from crate_nn.engine import Preempted, TrainConfig, initial_model, loop, train
from crate_nn.engine.rng import rng_state, set_rng_state
from crate_nn.files import FileLock
from verify import integrity
from verify.context import cache_dir
from verify.stopping import Interrupted

CODE_ROOT = Path(crate_nn.__file__).resolve().parent
"""The package whose source `code_hash` covers: all of ``crate_nn``."""

NOT_IN_KEY = ("output_dir", "progress", "tensorboard", "keep_checkpoints", "resume", "overwrite", "device", "preset")
"""Config fields left out of a run's key: where the run is written, how it is displayed, the preset's name, and
the device (the runner always trains on the CPU). Every other field can change the numbers and is in the key."""

MODELS = ("init", "trained")
RUNS = "sealed-runs"
"""The folder of `root` that holds the entries. Named for their layout: an audit that wrote entries without
checksums kept them in ``runs/``, which it may still be reading on a shared cache and which this one never opens."""
PERTURBED_RUNS = "perturbed-runs-{ulps}"
"""The folder of `root` that holds the entries trained within `perturbed` (by the units in the last place)."""
STALE_AFTER = 24 * 3600.0
"""Seconds an entry of the same config by other code must have gone unused before training a run deletes it: an
audit of that code that is running has used its entries more recently (`run` marks each use)."""


def root() -> Path:
    """The audit's folder in the cache: ``cache_dir()/verify``."""
    return cache_dir() / "verify"


def code_files(package: Path = CODE_ROOT) -> dict[str, bytes]:
    """Every ``.py`` file of ``package`` (default: ``crate_nn``) by its path relative to it: what `code_hash` covers."""
    return {str(PurePosixPath(*p.relative_to(package).parts)): p.read_bytes() for p in package.rglob("*.py")}


def hash_code(files: Mapping[str, bytes], torch_version: str = torch.__version__) -> str:
    """The code hash (`code_hash`) of ``files`` (relative path → bytes, `code_files`) under torch ``torch_version``:
    so that a replication's seal can name the code of a past commit too (`verify.committed`)."""
    digest = hashlib.sha256(torch_version.encode())
    for name in sorted(files, key=PurePosixPath):
        digest.update(name.encode() + b"\0" + files[name] + b"\0")
    return digest.hexdigest()[:16]


def code_hash(package: Path = CODE_ROOT) -> str:
    """A hash of every ``.py`` file of ``package`` (default: ``crate_nn``; path and bytes) and of torch's version.

    Why all of crate_nn: a run depends on the engine, the task, the model, the data pipeline and whatever they
    import (the tasks' in-training evaluation reads crate_nn.analysis and crate_nn.evaluation), and these import
    each other freely. Any narrower list would have to follow those imports by hand, and a file missed would serve
    a stale model without a sign — the failure this cache exists to prevent. The price is that any edit of
    crate_nn (a docstring too) retrains the audit's models once (a cold quick audit). torch computes the steps, so
    its version is part of the code.
    """
    return hash_code(code_files(package))


CODE = code_hash()
"""The code hash of this process's runs, taken once when the audit starts (crate_nn is imported by then): an edit
made while an audit runs never labels a run trained by the code loaded before it."""


def config_hash(config: TrainConfig) -> str:
    """A hash of the config's task and of every field not in `NOT_IN_KEY` (the seed included)."""
    return fields_hash(config.task, config.to_dict())


def fields_hash(task: str, fields: dict) -> str:
    """`config_hash` of a task and its config's fields (a dict as ``to_dict`` gives, or a stored recipe with its
    seed): the fields not in `NOT_IN_KEY`."""
    kept = {k: v for k, v in fields.items() if k not in NOT_IN_KEY}
    return hashlib.sha256(json.dumps([task, kept], sort_keys=True, default=str).encode()).hexdigest()[:16]


@functools.cache
def _source_hash(module: ModuleType) -> str:
    """A hash of ``module``'s source as it is when first used in this process (edits after that are not seen)."""
    return hashlib.sha256(inspect.getsource(module).encode()).hexdigest()[:16]


def _derived_key(module: ModuleType, params: dict) -> str:
    text = _source_hash(module) + json.dumps(params, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Run:
    """A complete entry of the cache: a trained run of ``config`` in ``folder``. Every file is checked against its
    checksum when read (`verify.integrity.Damaged` otherwise)."""

    config: TrainConfig
    folder: Path

    @functools.cached_property
    def _record(self) -> dict:
        """``run.json``: the config, the code hash, the training's wall time and the model files' checksums."""
        return integrity.read(self.folder / "run.json")

    def _checked(self, name: str) -> Path:
        """The path of the model file ``name`` after checking its bytes against ``run.json``."""
        path = self.folder / name
        if integrity.file_digest(path) != self._record["files"][name]:
            raise integrity.Damaged(path, "its bytes do not match the SHA-256 recorded in run.json (damaged)")
        return path

    def check(self) -> None:
        """Read every file of the entry against its checksum (`verify.integrity.Damaged` at the first that fails)."""
        for name in self._record["files"]:
            self._checked(name)
        integrity.read(self.folder / "metrics.json")
        self.measurements()

    def model(self, which: str) -> nn.Module:
        """The ``"init"`` or ``"trained"`` model, loaded afresh (in eval mode)."""
        if which not in MODELS:
            raise ValueError(f"which: expected one of {MODELS}, got {which!r}")
        return crate_nn.load(self._checked(f"{which}.pt")).eval()

    def task_state(self) -> dict:
        """The task's state at the end of training (`crate_nn.engine.task.Task.state_dict`: e.g. DINO's centre)."""
        return checkpoint.read(self._checked("trained.pt")).get("task", {})

    @property
    def metrics(self) -> dict:
        """The engine's final metrics of the run."""
        return integrity.read(self.folder / "metrics.json")

    def measurements(self) -> dict[int, dict]:
        """The layer-wise measurements recorded during training (`crate_nn.analysis.snapshots.record_layers`), by
        epoch (0: the initialisation); empty when the config recorded none."""
        records = (integrity.read(p) for p in sorted((self.folder / "measurements").glob("epoch_*.json")))
        return {r["epoch"]: r for r in records}

    @property
    def seconds(self) -> float:
        """Wall time of the training."""
        return self._record["seconds"]

    def derived(self, name: str, compute: Callable[[Run], Any], code: ModuleType, **params) -> Any:
        """``compute(self)`` (JSON-serialisable), cached in the entry under ``name``, the source of ``code`` (the
        module that defines the measurement) and ``params`` (what else it depends on, e.g. how many images): a
        changed measurement is measured again, as a changed training is trained again; so is a damaged one (one
        line on stderr)."""
        path = self.folder / "derived" / f"{name}-{_derived_key(code, params)}.json"
        value = _MISSING
        if path.is_file():
            try:
                value = integrity.read(path)["value"]
            except integrity.Damaged as err:
                _warn(f"{err}; measuring it again")
                path.unlink(missing_ok=True)
        if value is _MISSING:
            value = json.loads(json.dumps(compute(self)))  # as read back
            path.parent.mkdir(exist_ok=True)
            integrity.write(path, {"value": value})
        _TOUCHED.setdefault(self.folder, (self, {}))[1][name, json.dumps(params, sort_keys=True, default=str)] = (
            params, value)
        return value


_MISSING = object()


def _warn(message: str) -> None:
    print(f"verify: {message}", file=sys.stderr, flush=True)


def location(config: TrainConfig) -> Path:
    """The cache entry of ``config``'s run with the current code: ``root()/sealed-runs/<task>-<config hash>-<code
    hash>`` (``perturbed-runs-K/`` within `perturbed`, unless `answered_by` stored runs, which train nothing)."""
    folder = PERTURBED_RUNS.format(ulps=_PERTURBED[-1]) if _PERTURBED and not _ANSWER else RUNS
    return root() / folder / f"{config.task}-{config_hash(config)}-{CODE}"


_PERTURBED: list[int] = []


def nudge(model: nn.Module, ulps: int = 1) -> nn.Module:
    """``model`` with every floating-point parameter moved in place by ``ulps`` units in the last place, towards +∞
    (`torch.nextafter`): a rounding difference of the size another processor's kernels make; each ``ulps`` draws
    another such difference."""
    if ulps < 1:
        raise ValueError(f"ulps: expected at least 1 unit in the last place, got {ulps}")
    with torch.no_grad():
        for p in model.parameters():
            if p.is_floating_point():
                for _ in range(ulps):
                    p.copy_(torch.nextafter(p, torch.full_like(p, math.inf)))
    return model


@contextlib.contextmanager
def perturbed(ulps: int = 1):
    """Within the block every run `run` trains starts from its initialisation `nudge`d by ``ulps``, and is cached apart
    (`PERTURBED_RUNS`; module docstring). The engine builds a run's task, model included, in
    `crate_nn.engine.loop.start_task`, which `train` and `initial_model` both call: the block wraps it, so the
    stored initialisation is the nudged model the training started from. The claims memoise what they read of their
    runs per mode and base seed within a process: measure perturbed claims in a process of their own, as
    ``python -m verify --perturb`` does."""
    building = loop.start_task

    if ulps < 1:
        raise ValueError(f"ulps: expected at least 1 unit in the last place, got {ulps}")

    def start_task(*args, **kwargs):
        task = building(*args, **kwargs)
        nudge(task.model, ulps)
        return task

    loop.start_task = start_task
    _PERTURBED.append(ulps)
    try:
        yield
    finally:
        _PERTURBED.pop()
        loop.start_task = building


class _Busy(Exception):
    """Another process holds an entry's lock (`_lock` with ``blocking=False``)."""


def _lock(entry: Path, blocking: bool = True) -> FileLock:
    """The lock of one entry (`crate_nn.files.FileLock`): keyed by its config and its code, so that audits of other
    code never wait on it; ``blocking=False`` raises `_Busy` while another process holds it."""
    return FileLock(entry.parent / f".{entry.name}.lock", blocking=blocking, refuse=lambda holder: _Busy(holder))


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
    """The run of ``config`` with the current code (`trained`); within `answered_by`, the stand-in's answer
    instead."""
    return _ANSWER[-1](config) if _ANSWER else trained(config)


def trained(config: TrainConfig) -> Run:
    """The run of ``config`` with the current code, whatever stand-in answers `run`: read from the cache (checked
    against its checksums the first time this process uses it; a damaged entry is trained again), or trained now
    (once) and stored."""
    folder = location(config)
    known = _TOUCHED.get(folder)
    found = known[0] if known else Run(config, folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _lock(folder):
        if folder.is_dir() and known is None:
            try:
                found.check()
            except (integrity.Damaged, OSError, KeyError) as err:  # a file damaged, missing or unlisted
                _warn(f"{err}; deleting the cached run {folder.name} and training it again")
                _discard(folder)
                found = Run(config, folder)
        trained = not folder.is_dir()
        if trained:
            _train_into(config, folder, CODE)
            found = Run(config, folder)
        os.utime(folder)  # marks the entry used (`STALE_AFTER`)
    if trained:
        _clean_other_code(folder)
    _TOUCHED[folder] = (found, known[1] if known else {})
    return found


def _discard(entry: Path) -> None:
    """Delete ``entry`` (its lock held): renamed aside first, so that no process finds half of it."""
    aside = entry.parent / f".{entry.name}-deleted-{uuid.uuid4().hex[:8]}"
    os.rename(entry, aside)
    shutil.rmtree(aside, ignore_errors=True)


def _clean_other_code(entry: Path) -> None:
    """Delete the entries of ``entry``'s config left by other code and unused for `STALE_AFTER` seconds, each under
    its own lock (skipped while another process holds it)."""
    prefix = entry.name.rsplit("-", 1)[0]
    for other in entry.parent.glob(f"{prefix}-*"):
        if other == entry or not other.is_dir():
            continue
        try:
            with _lock(other, blocking=False):
                if other.is_dir() and time.time() - other.stat().st_mtime > STALE_AFTER:
                    _discard(other)
        except (_Busy, OSError):  # in use now, or deleted meanwhile: left alone
            continue


def runs(config: TrainConfig, seeds: Sequence[int]) -> list[Run]:
    """`run` of ``config`` for each of ``seeds``."""
    return [run(config.replace(seed=seed)) for seed in seeds]


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
    the code hash of the entry's key, recorded in run.json. A SIGTERM/SIGINT during training (the engine's
    `crate_nn.engine.Preempted`) stops the audit (`verify.stopping.Interrupted`), its temporary folder removed."""
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{folder.name}-") as tmp:
        work = Path(tmp) / "entry"
        work.mkdir()
        options = dict(output_dir=str(Path(tmp) / "run"), device="cpu", progress=False, curves=False, resume=False,
                       overwrite=False)  # no curves: the audit draws its own figures, and a plot costs ≈ 0.5 s a run
        with _rng_kept(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            started = time.perf_counter()
            try:
                result = train(config.replace(**options))
            except Preempted as stop:
                raise Interrupted(stop.signum) from None
            seconds = time.perf_counter() - started
            crate_nn.save(work / "init.pt", initial_model(config.replace(**options)))
            task_state = checkpoint.read(result.checkpoint).get("task") or {}
            crate_nn.save(work / "trained.pt", crate_nn.load(result.checkpoint),  # building a model draws weights
                          extra={"task": task_state})
        integrity.write(work / "metrics.json", result.metrics)
        recorded = sorted((Path(options["output_dir"]) / "measurements").glob("epoch_*.json"))
        if recorded:
            (work / "measurements").mkdir()
            for path in recorded:
                integrity.write(work / "measurements" / path.name, json.loads(path.read_text()))
        integrity.write(work / "run.json", {
            "config": config.to_dict(), "task": config.task, "code": code, "seconds": seconds,
            "files": {name: integrity.file_digest(work / name) for name in ("init.pt", "trained.pt")}}, indent=1)
        os.rename(work, folder)
