"""Committed runs: the numbers a trained ``--full`` claim reads from its runs, kept in the repository, so that quick
mode decides those claims too, without training.

A claim declared with ``committed="NAME"`` (`verify.registry.claim`) belongs to the replication ``NAME``. Its
folder ``results/NAME/`` holds::

    runs.json      every run the replication's claims read, each with what the claims read from it: its recipe
                   (`verify.experiments.recipe`) and seed, its final metrics, its training time, the layer-wise
                   measurements recorded during training, and the derived numbers (`Run.derived`) the claims
                   computed from its models
    report.md      the replication's claims measured under --full (`verify.report`): statement, numbers, verdict
    report.json    the same, with every number
    figures/       the claims' figures

``python -m verify.record NAME`` writes the folder: it measures the replication's claims under ``--full`` (training
what the audit's cache lacks, `verify.experiments`) and stores every run they read. A quick audit then measures the
same claims with `reading`: `verify.experiments.run` answers from ``runs.json`` (a `StoredRun`) instead of the
cache, after checking that the stored recipe is the one the claim builds now (`verify.experiments.recipe_differences`,
so options added since default to what the run did); the verdicts are computed again from the stored numbers, by
the audit's rule as it is now. A claim that asks for something the file lacks (another recipe, another base
seed, a model's weights, a derived number not stored) stops with one line saying how to re-record it.

Paths into the audit's cache (a fine-tuning's ``init_from`` naming a pre-trained run's weights; a derived number's
parameters naming a run) are stored without the cache's location and the code hash (`portable`): they name the run
by its config, which is what the key of the stored run says.
"""
from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

from crate_nn.engine import TrainConfig
from verify import experiments
from verify.context import RESULTS

CACHE = "<cache>"
"""What `portable` writes in place of the audit's cache folder."""


def path(name: str) -> Path:
    """``results/NAME/runs.json``."""
    return RESULTS / name / "runs.json"


def _cache_runs() -> str:
    return str(experiments.root() / "runs")


ENTRY = r"([\w]+-[0-9a-f]{16})-[0-9a-f]{16}"
"""A cache entry's name, ``<task>-<config hash>-<code hash>`` (`verify.experiments.location`); group 1 without the
code hash."""


def portable(value: Any) -> Any:
    """``value`` (JSON) with every path into the audit's cache runs written as ``<cache>/runs/<task>-<config hash>``,
    and a string that is an entry's name alone as ``<task>-<config hash>``: without the cache's location and the code
    hash, which say where and by which code a run was trained, not what."""
    if isinstance(value, str):
        whole = re.fullmatch(ENTRY, value)
        return whole.group(1) if whole else re.sub(re.escape(_cache_runs()) + "/" + ENTRY, CACHE + r"/runs/\1", value)
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [portable(v) for v in value]
    return value


def local(value: Any) -> Any:
    """The inverse of `portable` for this process: ``<cache>/runs/<key>`` → the path of that run in this cache with
    this code (`verify.experiments.CODE`)."""
    if isinstance(value, str):
        return re.sub(re.escape(CACHE) + r"/runs/([\w]+-[0-9a-f]{16})",
                      lambda m: f"{_cache_runs()}/{m.group(1)}-{experiments.CODE}", value)
    if isinstance(value, dict):
        return {k: local(v) for k, v in value.items()}
    if isinstance(value, list):
        return [local(v) for v in value]
    return value


def _params(params: dict) -> str:
    return json.dumps(portable(json.loads(json.dumps(params, default=str))), sort_keys=True)


class StoredRun:
    """A run of a committed replication: what `verify.experiments.Run` gives, read from ``runs.json``; no weights."""

    def __init__(self, config: TrainConfig, entry: dict, name: str):
        self.config, self._entry, self._name = config, entry, name
        self.folder = experiments.location(config)  # where the run would be cached: a run names another by this path

    def _missing(self, what: str) -> RuntimeError:
        return RuntimeError(f"{path(self._name)}: {what} of the {self.config.task} run (seed {self.config.seed}) is not "
                            f"stored; re-record it: python -m verify.record {self._name}")

    def model(self, which: str) -> None:
        raise self._missing(f"the {which} model (a committed run keeps numbers, not weights)")

    def task_state(self) -> None:
        raise self._missing("the task's state (a committed run keeps numbers, not tensors)")

    @property
    def metrics(self) -> dict:
        return self._entry["metrics"]

    @property
    def seconds(self) -> float:
        return self._entry["seconds"]

    def measurements(self) -> dict[int, dict]:
        return {int(epoch): record for epoch, record in self._entry.get("measurements", {}).items()}

    def derived(self, name: str, compute, code, **params) -> Any:
        key = _params(params)
        for item in self._entry.get("derived", []):
            if item["name"] == name and item["params"] == key:
                return item["value"]
        raise self._missing(f"the derived number {name!r} ({key})")


class Store:
    """The runs of ``results/NAME/runs.json``, looked up by config (`verify.experiments.run`'s stand-in)."""

    def __init__(self, name: str):
        file = path(name)
        if not file.is_file():
            raise FileNotFoundError(f"{file} is missing: record it with python -m verify.record {name}")
        self.name, self.runs = name, json.loads(file.read_text())["runs"]

    def run(self, config: TrainConfig) -> StoredRun:
        for entry in self.runs:
            if (entry["task"] == config.task and entry["seed"] == config.seed
                    and not experiments.recipe_differences(local(entry["recipe"]), config)):
                return StoredRun(config, entry, self.name)
        seeds = sorted({e["seed"] for e in self.runs if e["task"] == config.task})
        raise LookupError(f"{path(self.name)} holds no {config.task} run of this recipe with seed {config.seed} (its "
                          f"{config.task} seeds: {seeds}); the recipe or the base seed changed since it was recorded: "
                          f"python -m verify.record {self.name}")


@contextlib.contextmanager
def reading(name: str):
    """Within the block, `verify.experiments.run` answers from replication ``name``'s committed runs."""
    with experiments.answered_by(Store(name).run):
        yield


def entries() -> list[dict]:
    """Every run this process read through `verify.experiments` (`verify.experiments.touched`), as ``runs.json``
    entries."""
    out = []
    for run, derived in experiments.touched():
        entry = {"task": run.config.task, "seed": run.config.seed,
                 "recipe": portable(experiments.recipe(run.config)), "metrics": run.metrics, "seconds": run.seconds}
        measurements = run.measurements()
        if measurements:
            entry["measurements"] = {str(epoch): record for epoch, record in measurements.items()}
        entry["derived"] = [{"name": name, "params": _params(params), "value": value}
                            for (name, _), (params, value) in sorted(derived.items())]
        out.append(entry)
    return out


def write(name: str) -> Path:
    """Write ``results/NAME/runs.json`` from `entries`."""
    file = path(name)
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps({"replication": name, "recorded_by": f"python -m verify.record {name}",
                                "runs": entries()}, indent=1, ensure_ascii=False) + "\n")
    return file
