"""How long a user waits: every built-in preset's run (``crate-train --preset NAME``, as the docs print it) and the
quick audit (``python -m verify``) from a cold and from a warm cache, in wall and CPU time, with the machine and its
load. Every time the docs quote for these commands comes from this script's JSON.

Each preset runs in a fresh process (``python -m crate_nn.train --preset NAME --run.no-progress``) in one temporary
folder, in the order of `PRESETS`, so ``pairs_stdlib`` starts from the ``bert_stdlib`` run as docs/language.md's command
does. Per run it records the optimizer steps and the run's planned steps (the run's ``summary.json`` and
``config.json``), the wall time, the CPU time of the process and everything it waited for (user + system, from
``getrusage(RUSAGE_CHILDREN)``) and the 1-minute load average before and after. ``--max-steps NAME=N`` times a
preset whose full run is too long for the machine's time in two short runs instead, of 1 and of N steps, and
projects its P planned steps on the line through them: ``t(P) = t(1) + (t(N) − t(1))·(P − 1)/(N − 1)`` (the 1-step
run holds the start-up, the data, the final evaluation and checkpoint, which a longer run pays once; the
evaluations during training come with the steps). The row says so (``projected``); the others are complete runs. The audit runs as ``python -m verify
--no-progress`` with an empty temporary ``CRATE_WHITEBOX_CACHE`` (cold: it trains the small models it measures),
then again with the same cache (warm). The presets that need your data (ImageNet, OpenWebText, GLUE, …) are not
run.

Each command runs once (``--repeats`` runs it again; the figure is the median): these are minutes-long runs, and
the load the machine carried meanwhile is written beside every row — on a shared machine it is part of the
result. Load average counts the runnable processes of the whole machine, so a load of 2 on 2 cores means this run
shared them about equally with another job.

    python -m benchmarks.presets --out benchmarks/results/cpu/presets.json                    (everything; ~1–2 h)
    python -m benchmarks.presets --only digits gpt_stdlib --no-audit
    python -m benchmarks.presets --only mnist5k --max-steps mnist5k=300      (1 and 300 steps, projected)
    python -m benchmarks.presets --table-from benchmarks/results/cpu/presets.json   (docs/training.md's table)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import common

ROOT = Path(__file__).resolve().parents[1]

PRESETS = ("digits", "tost_digits", "mnist5k", "mae_digits", "mae_digits_finetune", "dino_digits", "simdino_digits",
           "objects_crate", "objects_crate_mlp", "objects_crate_mhsa", "objects_vit", "synthetic", "gpt_stdlib",
           "tost_stdlib", "bert_stdlib", "pairs_stdlib")
"""The presets that train on built-in data, in the order they run (``pairs_stdlib`` after ``bert_stdlib``)."""

TINY_STEPS = 3  # --tiny: digits' first 3 steps (and 1 step, to project) and a one-claim audit (the CI smoke run)
TINY_AUDIT = "mm"  # the MM step's claims (App. A.2): seconds


def _cpu_seconds() -> float:
    """User + system CPU seconds of the children this process has waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> dict[str, Any]:
    """Run ``command`` once; its wall and CPU seconds, exit status and the 1-minute load before and after. Its
    output goes to ``log``; a failure raises RuntimeError with the log's last lines."""
    load_before, cpu, start = os.getloadavg()[0], _cpu_seconds(), time.perf_counter()
    with open(log, "w") as out:
        status = subprocess.run(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT).returncode
    wall, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    if status != 0:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise RuntimeError(f"{' '.join(command)} exited with status {status}:\n{tail}")
    return {"wall_s": wall, "cpu_s": cpu, "load_1min_before": load_before, "load_1min_after": os.getloadavg()[0]}


def repeated(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median wall and CPU time of ``runs`` (each from `timed`), their loads and every run's own figures."""
    return {"wall_s": statistics.median(r["wall_s"] for r in runs), "cpu_s": statistics.median(r["cpu_s"] for r in runs),
            "load_1min_before": runs[0]["load_1min_before"], "load_1min_after": runs[-1]["load_1min_after"],
            "runs": runs}


def _train(name: str, folder: Path, env: dict[str, str], args: argparse.Namespace,
           max_steps: int | None) -> tuple[dict[str, Any], int, int]:
    """`repeated` runs of ``crate-train --preset name`` (in its default output directory unless ``max_steps`` is 1),
    with the steps run and planned."""
    command = [sys.executable, "-m", "crate_nn.train", "--preset", name, "--run.no-progress", "--run.overwrite"]
    output = f"runs/{name}" if max_steps != 1 else f"runs/{name}-1step"
    command += ["--run.output-dir", output] + (["--schedule.max-steps", str(max_steps)] if max_steps is not None else [])
    if args.device != "auto":
        command += ["--run.device", args.device]
    runs = [timed(command, folder, env, folder / f"{Path(output).name}.log") for _ in range(args.repeats)]
    summary = json.loads((folder / output / "summary.json").read_text())
    return repeated(runs), summary["steps"], json.loads((folder / output / "config.json").read_text())["total_steps"]


def time_preset(name: str, folder: Path, env: dict[str, str], args: argparse.Namespace,
                max_steps: int | None) -> dict[str, Any]:
    """A preset's full run; with ``max_steps`` N, its runs of 1 and N steps and the projection of its planned steps
    (module docstring)."""
    measured, steps, planned = _train(name, folder, env, args, max_steps)
    row = {"preset": name, "steps": steps, "planned_steps": planned, **measured, "projected": steps < planned}
    if row["projected"]:
        if steps < 2:
            raise RuntimeError(f"{name}: --max-steps must be at least 2 to project from 1 and N steps")
        one, _, _ = _train(name, folder, env, args, 1)
        fraction = (planned - 1) / (steps - 1)
        row.update({f"{key}_s": one[f"{key}_s"] + (row[f"{key}_s"] - one[f"{key}_s"]) * fraction for key in ("wall", "cpu")},
                   one_step=one, measured_wall_s=row["wall_s"], measured_cpu_s=row["cpu_s"],
                   load_1min_after=one["load_1min_after"])
    print(f"{name}: {row['steps']} of {planned} steps, {row['wall_s']:.0f} s wall, {row['cpu_s']:.0f} s CPU"
          f"{' (projected)' if row['projected'] else ''}, load {row['load_1min_before']:.1f} → "
          f"{row['load_1min_after']:.1f}", flush=True)
    return row


def time_audit(folder: Path, env: dict[str, str], args: argparse.Namespace) -> list[dict[str, Any]]:
    """The quick audit with an empty cache, then with the cache that run filled."""
    cache = folder / "audit-cache"
    command = [sys.executable, "-m", "verify", "--no-progress", "--output-dir", str(folder / "verify-report")]
    if args.tiny:
        command += ["--only", TINY_AUDIT]
    rows = []
    for state in ("cold", "warm"):
        if state == "cold":  # every repeat of the cold audit starts from an empty cache
            runs = []
            for i in range(args.repeats):
                runs.append(timed(command, folder, {**env, "CRATE_WHITEBOX_CACHE": str(cache / str(i))},
                                  folder / "audit-cold.log"))
        else:
            runs = [timed(command, folder, {**env, "CRATE_WHITEBOX_CACHE": str(cache / "0")}, folder / "audit-warm.log")
                    for _ in range(args.repeats)]
        row = {"preset": f"audit ({state} cache)", "steps": None, "planned_steps": None, **repeated(runs),
               "projected": False}
        print(f"audit, {state} cache: {row['wall_s']:.0f} s wall, {row['cpu_s']:.0f} s CPU, load "
              f"{row['load_1min_before']:.1f} → {row['load_1min_after']:.1f}", flush=True)
        rows.append(row)
    return rows


def duration(seconds: float) -> str:
    """``42 s``, ``3.5 min`` or ``1.2 h``: how the docs quote a time."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def readme_table(*payloads: dict[str, Any]) -> str:
    """docs/training.md's table of results JSONs (``--table-from``): per command its steps, wall and CPU time and the
    load, then each file's machine and load; a later file's row replaces an earlier one of the same command."""
    lines = ["| command | steps | wall time | CPU time | 1-min load before → after |", "|---|---|---|---|---|"]
    source = {row["preset"]: i for i, payload in enumerate(payloads) for row in payload["rows"]}  # the last wins
    rows = {row["preset"]: row for payload in payloads for row in payload["rows"]}
    for row in rows.values():
        command = (f"`crate-train --preset {row['preset']}`" if row.get("steps") is not None or "failed" in row
                   else f"`python -m verify`, {row['preset'][7:-1]}")
        if "failed" in row:
            lines.append(f"| {command} | failed: {row['failed'].splitlines()[-1]} | | | |")
            continue
        steps = "–" if row["steps"] is None else (
            f"{row['planned_steps']:,} (projected from {row['steps']:,})" if row["projected"] else f"{row['steps']:,}")
        lines.append(f"| {command} | {steps} | {duration(row['wall_s'])} | {duration(row['cpu_s'])} | "
                     f"{row['load_1min_before']:.1f} → {row['load_1min_after']:.1f} |")
    lines.append("")
    for i, payload in enumerate(payloads):
        env = payload["environment"]
        names = "all rows" if len(payloads) == 1 else ", ".join(name for name, j in source.items() if j == i)
        lines.append(f"- {names}: {env['cpu_model']}, {env['cpu_count']} CPUs, torch {env['torch']} "
                     f"({env['torch_threads']} threads), finished {env['utc'][:16].replace('T', ' ')} UTC; 1-minute load "
                     f"average {payload['load_start_1_5_15'][0]:.1f} at the start and {payload['load_end_1_5_15'][0]:.1f} "
                     "at the end")
    return "\n".join(lines)


def _step_limits(items: list[str]) -> dict[str, int]:
    limits = {}
    for item in items:
        name, _, steps = item.partition("=")
        if name not in PRESETS or not steps.isdigit() or int(steps) < 1:
            raise SystemExit(f"presets: --max-steps expects NAME=N with NAME one of {', '.join(PRESETS)} and N ≥ 1, "
                             f"got {item!r}")
        limits[name] = int(steps)
    return limits


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", default=list(PRESETS), choices=PRESETS, metavar="PRESET",
                        help=f"presets to run (default: all, in this order: {', '.join(PRESETS)})")
    parser.add_argument("--no-audit", action="store_true", help="leave out the cold and warm audit")
    parser.add_argument("--max-steps", nargs="+", default=[], metavar="PRESET=N",
                        help="time the first N steps of PRESET and project its full run")
    parser.add_argument("--table-from", type=Path, nargs="+", default=None, metavar="JSON",
                        help="print docs/training.md's table of results files (a later file's row of a command replaces "
                        "an earlier one) and exit")
    common.add_common_args(parser, repeats=1, warmup=0)
    args = parser.parse_args(argv)
    if args.table_from is not None:
        payloads = [json.loads(path.read_text()) for path in args.table_from]
        print(readme_table(*payloads))
        return {"payloads": payloads}
    limits = _step_limits(args.max_steps)
    if args.tiny:
        args.only, limits, args.repeats = ["digits"], {"digits": TINY_STEPS}, 1
    device = common.setup(args)
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    if args.threads is not None:
        env["OMP_NUM_THREADS"] = str(args.threads)
    start_load = list(os.getloadavg())
    rows = []
    with tempfile.TemporaryDirectory(prefix="crate-presets-") as tmp:
        folder = Path(tmp)
        env["CRATE_WHITEBOX_CACHE"] = str(folder / "cache")  # what a preset might cache stays out of the user's
        for name in [p for p in PRESETS if p in args.only]:
            try:
                rows.append(time_preset(name, folder, env, args, limits.get(name)))
            except RuntimeError as err:  # e.g. an extra not installed: recorded, and the others still run
                print(f"{name}: failed: {err}", flush=True)
                rows.append({"preset": name, "failed": str(err), "projected": False})
        if not args.no_audit:
            rows += time_audit(folder, env, args)
    columns = [("preset", "command", "s"), ("steps", "steps", ",d"), ("planned_steps", "of planned", ",d"),
               ("wall_s", "wall (s)", ".0f"),
               ("cpu_s", "CPU (s)", ".0f"), ("load_1min_before", "load before", ".1f"),
               ("load_1min_after", "load after", ".1f")]
    projected = [r["preset"] for r in rows if r["projected"]]
    notes = [f"machine: {common.cpu_model()}, {os.cpu_count()} CPUs; 1-minute load average {start_load[0]:.1f} at the "
             f"start, {os.getloadavg()[0]:.1f} at the end; each command run {args.repeats}× (median)"]
    if projected:
        notes.append(f"projected from runs of 1 and N steps (the line through them, at the planned steps): "
                     f"{', '.join(projected)}")
    return common.report("presets", device, args, rows, columns, notes=notes,
                         extra={"load_start_1_5_15": start_load, "load_end_1_5_15": list(os.getloadavg())})


if __name__ == "__main__":
    main()
