"""Committed runs: the numbers a trained ``--full`` claim reads from its runs, kept in the repository, so that quick
mode decides those claims too, without training.

A claim declared with ``committed="NAME"`` (`verify.registry.claim`) belongs to the replication ``NAME``. Its
folder ``results/NAME/`` holds::

    runs.json      every run the replication's claims read, each with what the claims read from it: its recipe
                   (`verify.experiments.recipe`) and seed, its final metrics, its training time, the layer-wise
                   measurements recorded during training, and the derived numbers (`Run.derived`) the claims
                   computed from its models; and the replication's seal
    report.md      the replication's claims measured under --full (`verify.report`): statement, numbers, verdict
    report.json    the same, with every number
    figures/       the claims' figures

(Table 17's replication, ``segmentation``, keeps the experiment's ``results.json`` instead of ``runs.json``: the
per-seed numbers of `crate_nn.tasks.segmentation.run_experiment`, sealed the same way.)

**The seal.** The file carries ``sha256``, the SHA-256 of the rest of it (`verify.integrity`), and ``seal``: the
base seed it was recorded at, the date, the command, and the identity of the code that trained it (`identity`:
the code hash the audit's cache uses, `verify.experiments.CODE`; the git commit; the SHA-256 of each crate_nn
file the hash covers, so that which files differ today is known without git). Reading checks the checksum: an
edited or damaged file is refused in one line naming it (`verify.integrity.Damaged`). Files recorded before seals
existed are sealed once as committed (`seal_as_committed`: the code of the commit that committed the file).

``python -m verify.record NAME`` writes the folder: it measures the replication's claims under ``--full`` (training
what the audit's cache lacks, `verify.experiments`) and stores every run they read (`write`). A quick audit then
measures the same claims with `reading`: `verify.experiments.run` answers from ``runs.json`` (a `StoredRun`)
instead of the cache, after checking that the stored recipe is the one the claim builds now
(`verify.experiments.recipe_differences`, so options added since default to what the run did); the verdicts are
computed again from the stored numbers, by the audit's rule as it is now. A claim that asks for something the file
lacks (another recipe, a model's weights, a derived number not stored) stops with one line saying how to re-record
it; at another base seed than the recorded one the audit does not measure the claim (`verify.runner`).

Paths into the audit's cache (a fine-tuning's ``init_from`` naming a pre-trained run's weights; a derived number's
parameters naming a run) are stored without the cache's location and the code hash (`portable`): they name the run
by its config, which is what the key of the stored run says.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import re
import subprocess
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from crate_nn.engine import TrainConfig
from verify import experiments, integrity
from verify.context import RESULTS, TABLE17, stored_file
from verify.integrity import Damaged, StoredDataError

CACHE = "<cache>"
"""What `portable` writes in place of the audit's cache folder."""
REPOSITORY = RESULTS.parent


def path(name: str) -> Path:
    """The file of replication ``name``: ``results/NAME/runs.json`` (Table 17's: ``results.json``)."""
    return stored_file(name, RESULTS)


def shown(file: Path) -> str:
    """``file`` as a message names it: relative to the repository when inside it."""
    try:
        return str(file.resolve().relative_to(REPOSITORY))
    except ValueError:
        return str(file)


def record_command(name: str, seed: int = 0) -> str:
    """The command that records replication ``name`` at base seed ``seed``."""
    return f"python -m verify.record {name}" + (f" --seed {seed}" if seed else "")


def _cache_runs() -> str:
    return str(experiments.root() / experiments.RUNS)


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


class NotStored(StoredDataError, LookupError):
    """A claim asks a committed replication for something it does not hold (the message names the command that
    records it)."""


class StoredRun:
    """A run of a committed replication: what `verify.experiments.Run` gives, read from ``runs.json``; no weights."""

    def __init__(self, config: TrainConfig, entry: dict, name: str, store: Store):
        self.config, self.entry, self._name, self._store = config, entry, name, store
        """``entry``: its entry of ``runs.json`` as read."""
        self.folder = experiments.location(config)  # where the run would be cached: a run names another by this path

    def _missing(self, what: str) -> NotStored:
        return NotStored(f"{shown(path(self._name))}: {what} of the {self.config.task} run (seed "
                         f"{self.config.run.seed}) is not stored; re-record it: {record_command(self._name)}")

    def model(self, which: str) -> None:
        raise self._missing(f"the {which} model (a committed run keeps numbers, not weights)")

    def task_state(self) -> None:
        raise self._missing("the task's state (a committed run keeps numbers, not tensors)")

    @property
    def metrics(self) -> dict:
        return self.entry["metrics"]

    @property
    def seconds(self) -> float:
        return self.entry["seconds"]

    def measurements(self) -> dict[int, dict]:
        return {int(epoch): record for epoch, record in self.entry.get("measurements", {}).items()}

    def derived(self, name: str, compute, code, **params) -> Any:
        key = _params(params)
        for item in self.entry.get("derived", []):
            if item["name"] == name and self._store.today(item["params"]) == key:
                return item["value"]
        raise self._missing(f"the derived number {name!r} ({key})")


RUN_FIELDS = ("task", "seed", "recipe", "metrics", "seconds")
"""What every run of a ``runs.json`` holds."""


@dataclasses.dataclass(frozen=True)
class Replication:
    """A committed replication as read from its file, checksum checked: its ``content`` (the file without its
    checksum and seal) and its ``seal``."""

    name: str
    file: Path
    sha256: str
    seal: dict
    content: dict

    @property
    def base_seed(self) -> int:
        """The audit's base seed (``--seed``) the replication was recorded at."""
        return self.seal["base_seed"]

    @property
    def runs(self) -> list[dict]:
        """Its runs (``runs.json``), or the Table 17 experiment's per-seed rows."""
        return self.content["runs"]

    def code_differences(self) -> list[str]:
        """What differs between the code that recorded it and today's: crate_nn files changed, added or removed
        (relative paths; `identity`), and torch's version (``torch A → B``)."""
        return differences_today(self.seal["code"])

    def check(self) -> dict:
        """Its last re-check (`verify.check`, ``results/NAME/check.json``) as the audit shows it: ``state``
        ``passed`` or ``failed`` — with when, by which code (and in how many crate_nn files that code differs from
        today's), what it re-trained and compared, and what moved —, ``never`` (no check file, or one of an
        earlier recording of the file: ``note``), or ``refused`` (the check file damaged, edited or malformed:
        ``error``, one line)."""
        file = check_path(self.name)
        if not file.is_file():
            return {"state": "never"}
        try:
            doc = _read_check(file)
            if doc["stored"]["sha256"] != self.sha256:
                return {"state": "never", "note": f"its last check ({doc['checked']}) was of an earlier recording"}
            code = doc["code"]
            return {"state": "passed" if doc["passed"] else "failed", "checked": doc["checked"],
                    "commit": code["commit"], "code_hash": code["hash"],
                    "files_differing": sum(" → " not in f for f in differences_today(code)),
                    "runs": len(doc["runs"]), "quantities": doc["rule"]["quantities"], "counts": doc["counts"],
                    "moved": doc["moved"], "cpu_seconds": doc["cpu_seconds"]}
        except Damaged as err:
            return {"state": "refused", "error": str(err)}
        except (KeyError, TypeError) as err:
            return {"state": "refused", "error": f"{shown(file)}: malformed (lacks {err})"}

    @property
    def stale(self) -> str | None:
        """Why its verdicts are stale (its last check failed: today's code no longer trains what it stores), or
        None."""
        found = self.check()
        if found["state"] != "failed":
            return None
        return (f"the last check of {self.name} ({found['checked']}) failed: {len(found['moved'])} quantities moved "
                f"(python -m verify.record --check {self.name})")

    def summary(self) -> dict:
        """What the report says of it (`verify.report`): file, checksum, recording, code, how many crate_nn files
        differ today, and its last check (`check`)."""
        code, differences = self.seal["code"], self.code_differences()
        return {"name": self.name, "file": shown(self.file), "sha256": self.sha256, "runs": len(self.runs),
                "base_seed": self.base_seed, "recorded": self.seal["recorded"], "code_hash": code["hash"],
                "commit": code["commit"], "sealed_after_recording": self.seal.get("sealed_after_recording"),
                "today_differs": code["hash"] != experiments.CODE or bool(differences),
                "files_differing": differences, "files": len(set(code["files"]) | set(experiments.code_files())),
                "check": self.check()}


def differences_today(code: dict) -> list[str]:
    """What differs between the code a seal names (``code``: `identity`'s ``files`` and ``torch``) and today's:
    crate_nn files changed, added or removed (relative paths), and torch's version (``torch A → B``)."""
    today = _file_hashes(experiments.code_files())
    changed = sorted(f for f in set(code["files"]) | set(today) if code["files"].get(f) != today.get(f))
    if code["torch"] != torch.__version__:
        changed.append(f"torch {code['torch']} → {torch.__version__}")
    return changed


CHECK = "check.json"
"""The file of a replication's last re-check (`verify.check`), beside its stored runs."""


def check_path(name: str) -> Path:
    """``results/NAME/check.json``: replication ``name``'s last re-check (`verify.check`)."""
    return RESULTS / name / CHECK


_CHECKS: dict[tuple, dict] = {}
"""Check files read in this process, by (file, modification time, size)."""


def _read_check(file: Path) -> dict:
    """A check file's content, its checksum checked (`verify.integrity.Damaged`, one line, otherwise)."""
    stat = file.stat()
    key = (str(file), stat.st_mtime_ns, stat.st_size)
    if key not in _CHECKS:
        try:
            _CHECKS[key] = integrity.read(file)
        except Damaged as err:
            raise Damaged(shown(file), err.reason, f"restore it (git checkout -- {shown(file)}) or check again: "
                          f"python -m verify.record --check {file.parent.name}") from None
    return _CHECKS[key]


def _remedy(name: str) -> str:
    return f"restore it (git checkout -- {shown(path(name))}) or re-record it: {record_command(name)}"


_READ: dict[tuple, Replication] = {}
"""Replications read in this process, by (file, modification time, size)."""


def replication(name: str) -> Replication:
    """Replication ``name`` read from its file, its checksum checked (read once per process while the file is
    unchanged). Raises `verify.integrity.StoredDataError`, one line naming the file and what to do: missing,
    damaged, edited, unsealed or malformed."""
    file = path(name)
    if not file.is_file():
        raise NotStored(f"{shown(file)} is missing: record it with {record_command(name)}")
    stat = file.stat()
    key = (str(file), stat.st_mtime_ns, stat.st_size)
    if key not in _READ:
        try:
            doc = integrity.parse(file)
            sha = doc.get(integrity.KEY) if isinstance(doc, dict) else None
            content = integrity.opened(doc, file)
        except Damaged as err:
            unsealed = "carries no SHA-256" in err.reason
            raise Damaged(shown(file), err.reason, f"seal the committed file: python -m verify.record --seal {name}; "
                          f"or re-record it: {record_command(name)}" if unsealed else _remedy(name)) from None
        seal = content.pop("seal", None)
        problem = _malformed(seal, content)
        if problem:
            raise Damaged(shown(file), f"malformed: {problem}", _remedy(name))
        _READ[key] = Replication(name, file, sha, seal, content)
    return _READ[key]


def _malformed(seal: Any, content: dict) -> str | None:
    """What is wrong with a checked file's structure, or None."""
    if not isinstance(seal, dict):
        return "no seal"
    missing = [k for k in ("base_seed", "recorded", "code") if k not in seal]
    missing += [f"code.{k}" for k in ("hash", "torch", "commit", "files") if k not in seal.get("code", {})]
    if missing:
        return f"the seal lacks {', '.join(missing)}"
    if not isinstance(content.get("runs"), list):
        return "no list of runs"
    for i, run in enumerate(content["runs"]):
        if "replication" in content and not all(k in run for k in RUN_FIELDS):
            return f"run {i} lacks {', '.join(k for k in RUN_FIELDS if k not in run)}"
    return None


class Store:
    """The runs of ``results/NAME/runs.json``, looked up by config (`verify.experiments.run`'s stand-in)."""

    def __init__(self, name: str):
        self.name, self.runs = name, replication(name).runs
        self.names: dict[str, str] = {}
        """A stored run's name when it was recorded (``<task>-<config hash>``) → its name for today's config of
        it: an option added since changes a config's hash, and a run names another (a fine-tuning's ``init_from``,
        a derived number's parameters) by it."""

    def today(self, value: Any) -> Any:
        """``value`` (a recipe, or a derived number's parameters as stored) with the names of the stored runs looked
        up so far as today's config names them."""
        text = json.dumps(value)
        for recorded, now in self.names.items():
            text = text.replace(recorded, now)
        return json.loads(text)

    def run(self, config: TrainConfig) -> StoredRun:
        for entry in self.runs:
            if (entry["task"] == config.task and entry["seed"] == config.run.seed
                    and not experiments.recipe_differences(self.today(local(entry["recipe"])), config)):
                recorded = experiments.fields_hash(entry["task"], {**entry["recipe"], "seed": entry["seed"]})
                self.names[f"{entry['task']}-{recorded}"] = f"{config.task}-{experiments.config_hash(config)}"
                return StoredRun(config, entry, self.name, self)
        seeds = sorted({e["seed"] for e in self.runs if e["task"] == config.task})
        raise NotStored(f"{shown(path(self.name))} holds no {config.task} run of this recipe with seed "
                        f"{config.run.seed} (its {config.task} seeds: {seeds}); the recipe or the base seed changed since it was "
                        f"recorded: {record_command(self.name)}")


_READING: list[Replication] = []


@contextlib.contextmanager
def reading(name: str):
    """Within the block, claims read replication ``name``'s committed numbers: `verify.experiments.run` answers
    from its runs (Table 17's claims read it through `being_read`)."""
    stored = replication(name)
    _READING.append(stored)
    try:
        with experiments.answered_by(Store(name).run) if name != TABLE17 else contextlib.nullcontext():
            yield
    finally:
        _READING.pop()


def being_read(name: str) -> Replication | None:
    """Replication ``name`` when the current claim reads it (within `reading`), else None (it measures afresh)."""
    return next((r for r in reversed(_READING) if r.name == name), None)


def entries() -> list[dict]:
    """Every run this process read through `verify.experiments` (`verify.experiments.touched`), as ``runs.json``
    entries."""
    return [entry(run, derived) for run, derived in experiments.touched()]


def entry(run: experiments.Run, derived: dict) -> dict:
    """``run`` as a ``runs.json`` entry, with the ``derived`` numbers read from it (`verify.experiments.touched`)."""
    out = {"task": run.config.task, "seed": run.config.run.seed, "recipe": portable(experiments.recipe(run.config)),
           "metrics": run.metrics, "seconds": run.seconds}
    measurements = run.measurements()
    if measurements:
        out["measurements"] = {str(epoch): record for epoch, record in measurements.items()}
    out["derived"] = [{"name": name, "params": _params(params), "value": value}
                      for (name, _), (params, value) in sorted(derived.items())]
    return out


_KEPT: dict[str, tuple[dict, Callable[[dict, Path], None]]] = {}
"""Table 17's results measured in this process, with the writer of their report files (`keep`)."""


def keep(name: str, content: dict, report: Callable[[dict, Path], None]) -> None:
    """Keep ``content``, what replication ``name`` (Table 17's) measured under --full, for `write`; ``report(content,
    folder)`` writes its table and figures beside it."""
    _KEPT[name] = (content, report)


def _file_hashes(files: dict[str, bytes]) -> dict[str, str]:
    return {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}


def _git_bytes(*args: str) -> bytes | None:
    """What ``git ARGS`` prints in the repository, or None where git or the repository is missing or it fails."""
    try:
        done = subprocess.run(["git", "-C", str(REPOSITORY), *args], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _git(*args: str) -> str | None:
    out = _git_bytes(*args)
    return None if out is None else out.decode()


def identity() -> dict:
    """The code of this process's runs: its code hash (`verify.experiments.CODE`), torch's version, the git commit
    (None outside a git checkout) with the crate_nn files changed since it (``uncommitted``), and the SHA-256 of
    every file the hash covers. Raises ``RuntimeError`` when crate_nn changed since the process started (its runs
    were trained by the code loaded then)."""
    files = experiments.code_files()
    if experiments.hash_code(files) != experiments.CODE:
        raise RuntimeError(f"crate_nn changed while this process ran (code hash {experiments.CODE} at the start, "
                           f"{experiments.hash_code(files)} now): record again")
    commit = (_git("rev-parse", "HEAD") or "").strip() or None
    status = _git("status", "--porcelain", "--", str(experiments.CODE_ROOT)) if commit else None
    return {"hash": experiments.CODE, "torch": torch.__version__, "commit": commit,
            "uncommitted": None if status is None else sorted(line[3:] for line in status.splitlines()),
            "files": _file_hashes(files)}


def write(name: str, seed: int, folder: Path | None = None) -> tuple[Path, int]:
    """Write replication ``name``'s file, sealed, into ``folder`` (default ``results/NAME``): for a replication of
    runs, every run this process read (`entries`); for Table 17, its kept results and their report (`keep`).
    Returns the file and its number of runs. Refuses (`verify.integrity.StoredDataError`, nothing written) to
    write no run, or fewer runs than the committed file holds."""
    file = path(name)
    target = (folder or file.parent) / file.name
    seal = {"base_seed": seed, "recorded": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "command": record_command(name, seed), "code": identity()}
    if name == TABLE17:
        if name not in _KEPT:
            raise StoredDataError(f"{shown(file)}: no Table 17 results were measured in this process: not written")
        content, report = _KEPT[name]
        runs = len(content["runs"])
    else:
        runs_read = entries()
        content, report, runs = {"replication": name, "recorded_by": seal["command"], "runs": runs_read}, None, len(runs_read)
    before = _committed_runs(name)
    if runs == 0 or (before is not None and runs < before):
        raise StoredDataError(f"{shown(file)} holds {before} runs and this recording read {runs}: not written (a "
                              "recording never shrinks a replication; delete the file first to replace it)")
    target.parent.mkdir(parents=True, exist_ok=True)
    if report is not None:
        report(content, target.parent)
    doc = {"seal": seal, **content} if name == TABLE17 else {**{k: content[k] for k in ("replication", "recorded_by")},
                                                            "seal": seal, "runs": content["runs"]}
    return integrity.write(target, doc, indent=1), runs


def _committed_runs(name: str) -> int | None:
    """How many runs replication ``name``'s current file holds, or None when it is missing or unreadable."""
    file = path(name)
    try:
        runs = integrity.parse(file).get("runs")
    except (OSError, Damaged, AttributeError):
        return None
    return len(runs) if isinstance(runs, list) else None


def seal_as_committed(name: str, today: str | None = None) -> Path:
    """Seal replication ``name``'s file as its last commit holds it, for a file recorded before seals existed:
    the seal names that commit and its code (crate_nn as committed there; torch's version from the replication's
    report.json of that commit, else today's) and says it was sealed after recording. Refuses (``ValueError``, one
    line) a file already sealed, not committed, or differing from its last commit."""
    file = path(name)
    rel = shown(file)
    commit = (_git("log", "-1", "--format=%H", "--", rel) or "").strip()
    if not commit:
        raise ValueError(f"{rel}: not committed (seal only a committed file; record it: {record_command(name)})")
    blob = _git_bytes("show", f"{commit}:{rel}")
    if blob is None or not file.is_file() or blob != file.read_bytes():
        raise ValueError(f"{rel} differs from its last commit {commit[:12]}: seal only a file as committed")
    content = json.loads(blob)
    if integrity.KEY in content or "seal" in content:
        raise ValueError(f"{rel} is already sealed")
    names = [n for n in (_git("ls-tree", "-r", "--name-only", commit, "--", "crate_nn") or "").splitlines()
             if n.endswith(".py")]
    files = {n.removeprefix("crate_nn/"): _git_bytes("show", f"{commit}:{n}") for n in names}
    report = _git_bytes("show", f"{commit}:{shown(file.parent / 'report.json')}")
    torch_version = json.loads(report)["meta"]["versions"]["torch"] if report else torch.__version__
    source = "its report.json" if report else "assumed: the version installed when sealed"
    when = (_git("log", "-1", "--format=%cI", commit) or "").strip()
    seal = {"base_seed": _base_seed(name, content), "recorded": when, "command": content.get("recorded_by", ""),
            "code": {"hash": experiments.hash_code(files, torch_version), "torch": torch_version, "commit": commit,
                     "uncommitted": None, "files": _file_hashes(files)},
            "sealed_after_recording": f"sealed {today or datetime.now(timezone.utc).strftime('%Y-%m-%d')} from "
                                      f"commit {commit[:12]}, the commit that committed the file: the code named is "
                                      f"that commit's crate_nn, torch {torch_version} ({source})"}
    if name == TABLE17:
        doc = {"seal": seal, **content}
    else:
        doc = {k: v for k, v in content.items() if k != "runs"} | {"seal": seal, "runs": content["runs"]}
    return integrity.write(file, doc, indent=1)


def _base_seed(name: str, content: dict) -> int:
    """The base seed a file recorded before seals was recorded at: 0 for a ``runs.json`` (``verify.record`` had no
    other); for Table 17 the base seed whose seeds (`verify.experiments.seeds`) the file holds."""
    if name != TABLE17:
        return 0
    seeds = content["seeds"]
    base, within = divmod(seeds[0], len(seeds))
    if within or seeds != experiments.seeds(base, len(seeds)):
        raise ValueError(f"{shown(path(name))}: its seeds {seeds} are not a base seed's: record it with "
                         f"{record_command(name)}")
    return base
