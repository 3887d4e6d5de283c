"""How long a user waits: every command whose time the README and docs quote, each timed as a full run — the first
``make setup`` (a fresh virtual environment), the quick audit from a cold and from a warm cache, every built-in
preset (``crate-train --preset NAME``, as the docs print it), ``make test-fast`` and ``make test`` as CI runs it — in
wall and CPU time, with the machine, the threads and the load beside every row. The docs' times are written from
this script's JSON (`benchmarks.presets_docs`), never typed by hand.

One command measures everything, resumably, and rewrites the docs::

    python -m benchmarks.presets                       (every row; hours: docs/training.md's table, summed)
    python -m benchmarks.presets --only setup audit-cold audit-warm digits
    python -m benchmarks.presets --docs                (rewrite the docs' times from the committed JSON only)

Rows. ``setup``: ``make setup VENV=<a new folder>`` (``python3 -m venv``, pip, the Makefile's PyTorch pin
``torch==2.13.0`` from wherever pip finds it — pip's configuration is recorded — and ``pip install -e ".[dev]"``).
``audit-cold``: ``python -m verify --no-progress`` with an empty ``CRATE_WHITEBOX_CACHE`` (it trains the small models
it measures); ``audit-warm``: the same again on the cache the cold run filled (filled untimed first when the cold row
is not run now). One row per preset in `PRESETS`, each ``python -m crate_nn.train --preset NAME --no-progress`` in a
fresh process, as a full run (the steps run and planned are recorded from its ``summary.json`` and
``config.json``); ``digits-epochs15`` is ``crate-train --preset digits --schedule.epochs 15``, which docs/training.md offers
as the shorter run. ``test-fast`` and ``test``: ``make test-fast`` / ``make test`` (the latter with ``CI=true``, as
``.ci/run`` runs it), each on the virtual environment of ``setup`` (set up untimed first if needed) and an empty audit
cache, as on a fresh clone; the recipe ``make -n`` prints is recorded, and pytest's last line. A run that completes
counts whatever it found: the audit's exit status 1 (a verdict outside its expectation; the row counts them) and a
failing test (pytest's line says so) are results, not failures; any other non-zero status marks the row failed.

Per row: wall time; CPU time (user + system of the command and every process it waited for, from
``getrusage(RUSAGE_CHILDREN)``); the processor (``/proc/cpuinfo``'s model name, else the platform's), the CPUs, the
torch threads each process runs (``OMP_NUM_THREADS``, else torch's default; the audit sets one itself) and pytest's
workers; the 1-minute load average before and after; torch, Python and the commit. A row is **quiet** when the load
before it was at most `QUIET_LOAD_PER_CPU` per CPU; before each run the script waits up to ``--settle`` seconds for
the load to fall that far (its own previous run decays from the 1-minute average as e^(−t/60 s)), then runs and marks
the row busy, or with ``--quiet-only`` leaves it for a later run. Each command runs ``--repeats`` times (default 1;
the figure is the median).

Resuming: the JSON (``--out``, default `DEFAULT_OUT`) is rewritten atomically after every row; a later run skips the
rows it holds, but for a failed one and those an ``--again`` run marked stale (it marks every row it selects at
once, so that the plain command resumes it). The work folder (``--work``: the training runs ``pairs_stdlib`` starts
from, the audit's cache, the virtual environment) survives an interruption and is removed once every selected row
is done. Measuring into `DEFAULT_OUT` rewrites the docs' times with the JSON
each time (``make test``, a row itself, then finds them in agreement).

``--tiny`` (the tests' smoke run, seconds): ``digits`` as ``--epochs 1``, the audit as ``--only mm``, and the ``make``
rows as ``make -n`` (the recipe printed, nothing run); its JSON says ``tiny`` and never feeds the docs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks import common, presets_docs

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "cpu" / "presets.json"

PRESETS = ("digits", "tost_digits", "mnist5k", "mae_digits", "mae_digits_finetune", "dino_digits", "simdino_digits",
           "objects_crate", "objects_crate_mlp", "objects_crate_mhsa", "objects_vit", "synthetic", "gpt_stdlib",
           "tost_stdlib", "bert_stdlib", "pairs_stdlib")
"""The presets that train on built-in data, in the order they run (``pairs_stdlib`` after ``bert_stdlib``, whose
run it starts from)."""

QUIET_LOAD_PER_CPU = 0.5
"""The most 1-minute load per CPU before a run that still counts the machine as quiet: other work then held at most
half of it on average, so a run's wall time is not mostly someone else's (a load of 10 on 2 CPUs leaves a run about a
fifth of the machine; docs/training.md)."""

SETTLE_POLL_S = 5  # how often the load is read while waiting for it to fall
AUDIT_THREADS = 1  # verify.runner.single_threaded: the audit sets one torch thread itself, whatever it is given
TINY_AUDIT = "mm"  # --tiny: the MM step's claims (App. A.2), seconds
TINY_EPOCHS = 1  # --tiny: digits for one epoch (a full run of 20 steps)


@dataclass(frozen=True)
class Command:
    """One row: its ``key`` (``--only``), the command as the docs print it (``shown``), its kind (``preset``,
    ``audit`` or ``make``) and what tells it from another row of the same command (``note``)."""

    key: str
    shown: str
    kind: str
    note: str = ""


def catalogue() -> list[Command]:
    """Every row, in the order they run."""
    rows = [Command("setup", "make setup", "make", "a fresh virtual environment"),
            Command("audit-cold", "python -m verify", "audit", "cold cache"),
            Command("audit-warm", "python -m verify", "audit", "warm cache")]
    for name in PRESETS:
        rows.append(Command(name, f"crate-train --preset {name}", "preset"))
        if name == "digits":  # the shorter run docs/training.md offers
            rows.append(Command("digits-epochs15", "crate-train --preset digits --schedule.epochs 15", "preset"))
    return rows + [Command("test-fast", "make test-fast", "make", "an empty audit cache"),
                   Command("test", "make test", "make", "as CI runs it, an empty audit cache")]


COMMANDS = {command.key: command for command in catalogue()}
TINY_KEYS = ("setup", "audit-cold", "audit-warm", "digits", "test-fast", "test")
"""The rows ``--tiny`` runs (as stand-ins: module docstring)."""


# ----------------------------------------------------------------------------------------------- the machine
def processor() -> str:
    """The processor's model name (``/proc/cpuinfo``, what ``lscpu`` prints), else the platform's name for it."""
    return common.cpu_model() or platform.processor() or platform.machine()


def quiet_threshold() -> float:
    """The 1-minute load at or under which this machine counts as quiet (`QUIET_LOAD_PER_CPU` per CPU)."""
    return QUIET_LOAD_PER_CPU * (os.cpu_count() or 1)


def settle(seconds: float) -> float:
    """Wait up to ``seconds`` for the 1-minute load to fall to `quiet_threshold`; the load when the wait ends."""
    deadline = time.monotonic() + seconds
    while (load := os.getloadavg()[0]) > quiet_threshold() and time.monotonic() < deadline:
        time.sleep(min(SETTLE_POLL_S, max(0.0, deadline - time.monotonic())))
    return load


def _cpu_seconds() -> float:
    """User + system CPU seconds of the children this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Failed(RuntimeError):
    """A command exited with a status that leaves its time meaningless (the message: the command, the status, its
    log's last lines)."""


def failure(argv: list[str], status: int, log: Path) -> Failed:
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
    return Failed(f"{' '.join(argv)} exited with status {status}:\n{tail}")


def run_logged(argv: list[str], cwd: Path, env: dict[str, str], log: Path, allowed: tuple[int, ...] | None = (0,)) -> int:
    """Run ``argv`` with its output in ``log``; its exit status, `Failed` when not one of ``allowed`` (None: any)."""
    with open(log, "w") as out:
        status = subprocess.run(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    if allowed is not None and status not in allowed:
        raise failure(argv, status, log)
    return status


def timed(argv: list[str], cwd: Path, env: dict[str, str], log: Path, settle_s: float,
          allowed: tuple[int, ...] | None = (0,)) -> dict[str, Any]:
    """Run ``argv`` once after `settle`: its wall and CPU seconds, exit status and the 1-minute load before and
    after (`run_logged`)."""
    load_before = settle(settle_s)
    cpu, start = _cpu_seconds(), time.perf_counter()
    status = run_logged(argv, cwd, env, log, allowed)
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    return {"wall_s": wall, "cpu_s": cpu, "exit_status": status, "load_1min_before": load_before,
            "load_1min_after": os.getloadavg()[0]}


# ----------------------------------------------------------------------------------------------- the rows
@dataclass
class Bench:
    """What every row's run shares: the work folder, the environment, the options."""

    work: Path
    env: dict[str, str]
    args: argparse.Namespace

    @property
    def venv(self) -> Path:
        return self.work / "venv"

    @property
    def audit_cache(self) -> Path:
        return self.work / "audit-cache"

    def make(self, target: str) -> list[str]:
        return ["make", "-C", str(ROOT), *(["-n"] if self.args.tiny else []), target, f"VENV={self.venv}"]

    def train(self, command: Command) -> list[str]:
        """``crate-train`` as ``command`` prints it (``--tiny``: one epoch), in its own output folder."""
        extra = command.shown.split()[3:]  # after "crate-train --preset NAME"
        if self.args.tiny:
            extra = ["--schedule.epochs", str(TINY_EPOCHS)]
        preset = command.shown.split()[2]
        argv = [sys.executable, "-m", "crate_nn.train", "--preset", preset, *extra, "--run.no-progress", "--run.overwrite",
                "--run.output-dir", f"runs/{command.key}"]
        return argv + (["--run.device", self.args.device] if self.args.device != "auto" else [])

    def audit(self) -> list[str]:
        return [sys.executable, "-m", "verify", "--no-progress", "--output-dir", str(self.work / "verify-report"),
                *(["--only", TINY_AUDIT] if self.args.tiny else [])]

    def repeated(self, argv: list[str], log: Path, env: dict[str, str] | None = None,
                 before: Callable[[], None] = lambda: None, allowed: tuple[int, ...] | None = (0,)) -> dict[str, Any]:
        """``--repeats`` runs of ``argv`` (``before`` each, untimed; exit statuses ``allowed``): the median wall and
        CPU time, the last exit status, the loads, whether every run started quiet, and each run's own figures when
        there are several."""
        runs = []
        for _ in range(self.args.repeats):
            before()
            runs.append(timed(argv, self.work, env or self.env, log, self.args.settle, allowed))
        out = {"wall_s": statistics.median(r["wall_s"] for r in runs),
               "cpu_s": statistics.median(r["cpu_s"] for r in runs), "exit_status": runs[-1]["exit_status"],
               "load_1min_before": max(r["load_1min_before"] for r in runs),
               "load_1min_after": runs[-1]["load_1min_after"],
               "quiet": all(r["load_1min_before"] <= quiet_threshold() for r in runs)}
        return {**out, "runs": runs} if len(runs) > 1 else out

    # each kind of row: (what ran, with its own fields)
    def preset(self, command: Command) -> dict[str, Any]:
        argv = self.train(command)
        measured = self.repeated(argv, self.work / f"{command.key}.log", before=lambda: self._pairs_needs(command))
        run = self.work / "runs" / command.key
        summary, config = (json.loads((run / name).read_text()) for name in ("summary.json", "config.json"))
        return {"argv": argv[1:], **measured, "threads": torch.get_num_threads(), "steps": summary["steps"],
                "planned_steps": config["total_steps"]}

    def _pairs_needs(self, command: Command) -> None:
        """pairs_stdlib starts from the bert_stdlib run (its preset's ``init_from``): trained untimed if absent."""
        if command.key == "pairs_stdlib" and not self.args.tiny:
            checkpoint = self.work / "runs" / "bert_stdlib" / "checkpoints" / "last.pt"
            if not checkpoint.exists():
                print("pairs_stdlib: training bert_stdlib first (untimed: pairs_stdlib starts from it)", flush=True)
                run_logged(self.train(COMMANDS["bert_stdlib"]), self.work, self.env, self.work / "bert_stdlib.log")

    def audit_row(self, command: Command) -> dict[str, Any]:
        argv, done = self.audit(), self.work / "audit-cache.done"
        env = {**self.env, "CRATE_WHITEBOX_CACHE": str(self.audit_cache)}
        log = self.work / f"{command.key}.log"

        def empty_cache() -> None:
            shutil.rmtree(self.audit_cache, ignore_errors=True)
            done.unlink(missing_ok=True)

        def filled_cache() -> None:
            if not done.exists():
                print("audit-warm: filling the cache first (an untimed cold audit)", flush=True)
                empty_cache()
                run_logged(argv, self.work, env, log)
                done.touch()

        # exit status 1: a verdict left its expectation (the run is complete: its time counts, the row says so)
        measured = self.repeated(argv, log, env, before=empty_cache if command.key == "audit-cold" else filled_cache,
                                 allowed=(0, 1))
        if command.key == "audit-cold":
            done.touch()
        summary = json.loads((self.work / "verify-report" / "report.json").read_text())["summary"]
        return {"argv": argv[1:], **measured, "threads": AUDIT_THREADS, "claims": summary["claims"],
                "unexpected": len(summary["mismatches"])}

    def recipe(self, target: str) -> list[str]:
        """What ``make target`` runs now (``make -n``: printed, nothing run; without make's "Entering directory" lines,
        which a ``make -C`` around this process turns on through MAKEFLAGS)."""
        printed = subprocess.run(["make", "-C", str(ROOT), "-n", "-s", "--no-print-directory", target,
                                  f"VENV={self.venv}"], env=self.env,
                                 capture_output=True, text=True)
        return printed.stdout.strip().splitlines()

    def make_row(self, command: Command) -> dict[str, Any]:
        """``make setup`` into a fresh virtual environment, or ``make test``/``test-fast`` on a set-up one with an
        empty audit cache (``test`` with CI=true, as .ci/run): the recipe, pytest's workers, threads and last line."""
        target, log = command.shown.split()[1], self.work / f"{command.key}.log"
        if target == "setup":
            def fresh() -> None:
                shutil.rmtree(self.venv, ignore_errors=True)

            fresh()
            recipe = self.recipe(target)
            pip = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
            return {"argv": self.make(target), **self.repeated(self.make(target), log, before=fresh),
                    "recipe": recipe, "pip_config": pip.stdout.strip().splitlines()}
        env = {**self.env, "CRATE_WHITEBOX_CACHE": str(self.work / f"{target}-cache"),
               **({"CI": "true"} if target == "test" else {})}

        def set_up() -> None:  # the venv (untimed; a no-op once done) and an empty audit cache, as on a fresh clone
            if not self.args.tiny:
                run_logged(self.make("setup"), self.work, self.env, self.work / "setup-untimed.log")
            shutil.rmtree(env["CRATE_WHITEBOX_CACHE"], ignore_errors=True)

        # any exit status: a failing test still ran the suite through (pytest's last line says how it ended); none
        # printed means pytest never finished
        measured = self.repeated(self.make(target), log, env, before=set_up, allowed=None)
        summary = [line for line in log.read_text(errors="replace").splitlines() if re.match(r"=+ .* in [\d.]+s", line)]
        if not summary and not self.args.tiny:
            raise failure(self.make(target), measured["exit_status"], log)
        recipe = self.recipe(target)
        threads = re.search(r"OMP_NUM_THREADS=(\d+)", recipe[-1] if recipe else "")
        workers = re.search(r"pytest.* -n (\d+)", recipe[-1] if recipe else "")
        return {"argv": self.make(target), **measured, "recipe": recipe,
                **({"threads": int(threads.group(1))} if threads else {}),
                **({"workers": int(workers.group(1))} if workers else {}),
                **({"pytest": summary[-1].strip("= ")} if summary else {})}

    def row(self, command: Command) -> dict[str, Any]:
        """Time ``command``: its row (the figures, the machine, the load), or its failure."""
        measure = {"preset": self.preset, "audit": self.audit_row, "make": self.make_row}[command.kind]
        machine = {"processor": processor(), "cpus": os.cpu_count(), "torch": torch.__version__,
                   "python": platform.python_version(), "git_commit": common.git_commit()}
        try:
            figures = measure(command)
        except Failed as err:
            figures = {"failed": self.portable(str(err))}
        for field in ("argv", "recipe"):
            if field in figures:
                figures[field] = [self.portable(part) for part in figures[field]]
        return {"key": command.key, "command": command.shown, **figures, **machine,
                "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def portable(self, text: str) -> str:
        """``text`` with this machine's folders as names: the work folder ``$WORK``, the repository ``.``, Python
        ``python``."""
        return text.replace(str(self.work), "$WORK").replace(sys.executable, "python").replace(str(ROOT), ".")


# ----------------------------------------------------------------------------------------------- the JSON
def load_rows(path: Path, tiny: bool) -> dict[str, dict[str, Any]]:
    """The rows a JSON at ``path`` holds already, by key (none if it does not exist)."""
    if not path.exists():
        return {}
    try:
        payload = json.loads(path.read_text())
        rows = {row["key"]: row for row in payload["rows"]}
    except (ValueError, KeyError, TypeError) as err:
        raise SystemExit(f"presets: --out {path}: expected this script's JSON to resume from ({err!r})") from None
    if payload.get("tiny", False) != tiny:
        raise SystemExit(f"presets: --out {path} holds a {'--tiny' if payload.get('tiny') else 'full'} run; pass "
                         "another file for this one")
    return rows


def write_rows(path: Path, rows: dict[str, dict[str, Any]], tiny: bool) -> dict[str, Any]:
    """Write ``rows`` (in `catalogue` order) to ``path`` atomically: a whole file or the previous one, never half.
    The payload also lists every command of the catalogue (the docs list the rows not measured yet)."""
    payload = {"benchmark": "presets", "tiny": tiny, "quiet_load_per_cpu": QUIET_LOAD_PER_CPU,
               "commands": [{"key": c.key, "command": c.shown, "note": c.note} for c in COMMANDS.values()],
               "rows": [rows[key] for key in COMMANDS if key in rows]}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(payload, indent=2) + "\n")
    os.replace(partial, path)
    return payload


def describe(row: dict[str, Any]) -> str:
    if "failed" in row:
        return f"{row['key']}: failed: {row['failed'].splitlines()[0]}"
    quiet = "" if row["quiet"] else f" (busy: above {QUIET_LOAD_PER_CPU} per CPU)"
    return (f"{row['key']}: {row['wall_s']:.0f} s wall, {row['cpu_s']:.0f} s CPU, load {row['load_1min_before']:.1f} → "
            f"{row['load_1min_after']:.1f}{quiet}")


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Time the selected rows the JSON lacks (all of them with ``--again``), writing it after each; the payload."""
    out = args.out or DEFAULT_OUT
    if args.tiny and out.resolve() == DEFAULT_OUT.resolve():
        raise SystemExit(f"presets: --tiny needs an --out other than {DEFAULT_OUT.relative_to(ROOT)} (the docs' JSON)")
    selected = [key for key in COMMANDS if key in (args.only or (TINY_KEYS if args.tiny else COMMANDS))]
    if args.tiny and set(selected) - set(TINY_KEYS):
        raise SystemExit(f"presets: --tiny runs only {', '.join(TINY_KEYS)}")
    rows = load_rows(out, args.tiny)
    if args.again:  # marked in the file, so that an interrupted --again run resumes with the rows it has not redone
        rows.update({key: {**rows[key], "stale": True} for key in selected if key in rows})

    def done(key: str) -> bool:
        return key in rows and "failed" not in rows[key] and not rows[key].get("stale")

    def write() -> dict[str, Any]:  # the JSON, and the docs' times when it is theirs (so they never disagree)
        payload = write_rows(out, rows, args.tiny)
        if out.resolve() == DEFAULT_OUT.resolve():
            presets_docs.update(payload)
        return payload

    todo = [key for key in selected if not done(key)]
    skipped = [key for key in selected if key not in todo]
    if skipped:
        print(f"already in {out} (--again runs them anew): {', '.join(skipped)}", flush=True)
    common.setup(args)
    env = {**os.environ, "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    if args.threads is not None:
        env["OMP_NUM_THREADS"] = str(args.threads)
    work = args.work or Path(tempfile.gettempdir()) / f"crate-presets-{out.stem}"  # kept until the rows are done
    work.mkdir(parents=True, exist_ok=True)
    env["CRATE_WHITEBOX_CACHE"] = str(work / "cache")  # what a preset might cache stays out of the user's
    bench = Bench(work, env, args)
    payload = write()
    for key in todo:
        if args.quiet_only and settle(args.settle) > quiet_threshold():
            print(f"{key}: left for a later run (1-minute load {os.getloadavg()[0]:.1f} > {quiet_threshold():.1f})",
                  flush=True)
            continue
        rows[key] = bench.row(COMMANDS[key])
        print(describe(rows[key]), flush=True)
        payload = write()
    if args.work is None and all(done(key) for key in selected):
        shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {out}" + (" and the docs' times" if out.resolve() == DEFAULT_OUT.resolve() else ""), flush=True)
    return payload


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.presets", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=list(COMMANDS), metavar="ROW",
                        help=f"rows to time (default: all, in this order: {', '.join(COMMANDS)})")
    parser.add_argument("--again", action="store_true",
                        help="time the selected rows anew even if the JSON holds them (marked stale there at once, so "
                        "that a resumed run redoes the rest)")
    parser.add_argument("--settle", type=float, default=300.0, metavar="S",
                        help="wait up to S seconds before each run for the load to fall to "
                        f"{QUIET_LOAD_PER_CPU} per CPU (default 300)")
    parser.add_argument("--quiet-only", action="store_true",
                        help="leave a row for a later run when the load is still above that after --settle")
    parser.add_argument("--work", type=Path, default=None,
                        help="the work folder (runs, caches, the venv; default: one in the temporary folder, removed "
                        "once every selected row is done)")
    parser.add_argument("--docs", type=Path, nargs="?", const=DEFAULT_OUT, default=None, metavar="JSON",
                        help="rewrite the docs' times from JSON (default: the committed one) and exit")
    common.add_common_args(parser, repeats=1, warmup=0)
    parser.set_defaults(out=None)
    args = parser.parse_args(argv)
    if args.docs is not None:
        return presets_docs.main_update(args.docs)
    if args.settle < 0:
        raise SystemExit(f"presets: --settle expects seconds ≥ 0, got {args.settle}")
    return measure(args)


if __name__ == "__main__":
    main()
