"""``python -m verify.panel``: the quick audit at several base seeds, plain and with perturbed training, and the band
of verdicts each claim gives over them — where a claim's expectation (`verify.registry.Band`) comes from.

    python -m verify.panel                            # base seeds 0–4, each plain and perturbed: 10 quick audits
    python -m verify.panel --seeds 0 --perturb 2 3 4  # base seed 0 perturbed three other ways: three "processors"
    python -m verify.panel --seeds 0 1 2 --jobs 1     # fewer, one at a time
    python -m verify.panel --seeds 21 23              # a check at seeds the bands were not recorded at

Each audit runs as ``python -m verify --quick --seed S [--perturb K]`` in a process of its own (``--jobs`` at once,
one CPU thread each) into ``OUTPUT_DIR/seed-S[-perturbed-K]/``, sharing the audit's cache. *Perturbed* trains every
run from its initialisation moved by K units in the last place (`verify.experiments.perturbed`): CPU training is not
bitwise reproducible across processors, so an expectation that holds on one machine's trajectory only would fail on
another; the perturbed runs draw such trajectories here, each K another. The claims decided from stored runs are measured at the base
seed they were recorded at only (`verify.runner`) and give one verdict.

Then, per claim, the verdicts (and labels) seen over the audits are compared with its expectation, and
``OUTPUT_DIR/panel.json`` and ``panel.md`` list them. A claim is

* ``as expected`` when every verdict seen lies in its band;
* ``outside`` when one does not (the panel's exit status is 1): its band misses a verdict the panel gave, or it
  moves between ``fails`` and ``holds``, which no band may hold (`verify.registry.Band`) — the claim is then made
  decisive (more seeds, a larger effect), or its band widened when the verdicts lie on one side of the boundary;
* ``wider than seen`` when its band holds a verdict no audit gave (reported, exit status unchanged: a band recorded
  on other seeds or processors may be wider than one panel shows).

Exit status: 0 when every claim is as expected or wider than seen, 1 otherwise (or when an audit raised), 2 on bad
arguments, 128 + the signal when SIGTERM/SIGINT stops it (the audits running are stopped too; finished runs stay
cached).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from verify import stopping

SEEDS = (0, 1, 2, 3, 4)
"""The default panel of base seeds."""
JOBS = 2
"""Audits at once by default (each uses one CPU thread)."""


PERTURBATIONS = (0, 1)
"""The default perturbations: plain training (0) and initial weights moved by one unit in the last place."""


def audits(seeds: Sequence[int], perturbations: Sequence[int]) -> list[tuple[int, int]]:
    """The panel's audits: (base seed, units in the last place; 0: plain) for each seed and each perturbation."""
    return [(seed, ulps) for seed in seeds for ulps in perturbations]


def folder(out: Path, seed: int, ulps: int) -> Path:
    """Where the audit at ``seed`` perturbed by ``ulps`` (0: plain) writes its report."""
    return out / (f"seed-{seed}" + (f"-perturbed-{ulps}" if ulps else ""))


def _command(seed: int, ulps: int, out: Path, only: Sequence[str] | None) -> list[str]:
    return [sys.executable, "-m", "verify", "--quick", "--no-progress", "--seed", str(seed),
            "--output-dir", str(folder(out, seed, ulps)), *(["--perturb", str(ulps)] if ulps else []),
            *(["--only", *only] if only else [])]


def run(plan: list[tuple[int, int]], out: Path, jobs: int, only: Sequence[str] | None = None) -> dict:
    """Run the audits of ``plan`` (``jobs`` at once) and return each one's exit status by its folder's name; a
    signal stops the running audits (each stops cleanly) and is raised again."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "MPLBACKEND": "Agg"}
    pending, running, status = list(plan), {}, {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                seed, ulps = pending.pop(0)
                where = folder(out, seed, ulps)
                where.mkdir(parents=True, exist_ok=True)
                log = open(where / "audit.log", "w", encoding="utf-8")  # noqa: SIM115 - closed when the audit ends
                child = subprocess.Popen(_command(seed, ulps, out, only), stdout=log, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
                running[where.name] = (child, log)
                print(f"started {where.name}", file=sys.stderr, flush=True)
            for name, (child, log) in list(running.items()):
                if child.poll() is not None:
                    log.close()
                    status[name] = child.returncode
                    del running[name]
                    print(f"finished {name}: exit status {child.returncode} ({len(status)}/{len(plan)})",
                          file=sys.stderr, flush=True)
            time.sleep(0.2)
    except stopping.Interrupted as stop:
        for child, _ in running.values():
            child.send_signal(stop.signum)
        for child, log in running.values():
            child.wait()
            log.close()
        raise
    return status


def collect(out: Path, plan: list[tuple[int, int]]) -> dict[str, dict]:
    """Per claim id: its expected band, the verdicts and labels each audit of ``plan`` gave (by folder name), and
    its standing (module docstring). An audit whose report is missing raises ValueError naming it."""
    claims: dict[str, dict] = {}
    for seed, ulps in plan:
        where = folder(out, seed, ulps)
        try:
            report = json.loads((where / "report.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as err:
            raise ValueError(f"{where}: no readable report.json ({err}); see {where / 'audit.log'}") from None
        for entry in report["claims"]:
            if entry["skipped"]:
                continue
            c = claims.setdefault(entry["id"], {"band": entry["expected_band"], "labels_expected": None, "seen": {}})
            c["seen"][where.name] = {"verdict": "error" if entry["error"] else entry["verdict"],
                                     "labels": entry.get("labels"), "matches": entry["matches_expectation"]}
    for c in claims.values():
        verdicts = {s["verdict"] for s in c["seen"].values()}
        c["verdicts_seen"] = sorted(verdicts)
        c["standing"] = ("outside" if not all(s["matches"] for s in c["seen"].values())
                         else "wider than seen" if set(c["band"]) - verdicts else "as expected")
    return claims


LAYER_LABEL = re.compile(r"layer (\d+) ([^,]+)")
"""One layer's label in `verify.joint.layer_labels`' form (``layer 2 collapse``)."""


def labels_seen(c: dict) -> str:
    """The labels the audits gave: per layer, where every audit gave `verify.joint.layer_labels`' form for the same
    layers (``layer 1 undecided, layer 2 (collapse|compression)``, the form of a claim's ``expected_labels``), else
    the distinct label strings."""
    runs = sorted({s["labels"] for s in c["seen"].values() if s["labels"]})
    layers = [LAYER_LABEL.findall(r) for r in runs]
    if len(runs) < 2 or not all(layers) or len({tuple(n for n, _ in found) for found in layers}) != 1:
        return " / ".join(runs)
    per_layer = zip(*([label for _, label in found] for found in layers))
    return ", ".join(f"layer {n} " + (seen[0] if len(seen) == 1 else f"({'|'.join(seen)})")
                     for (n, _), seen in zip(layers[0], (sorted(set(p)) for p in per_layer)))


def write(out: Path, claims: dict[str, dict], plan: list[tuple[int, int]], status: dict) -> None:
    """``panel.json`` (every claim's band, verdicts and labels per audit) and ``panel.md`` (the claims seed-sensitive
    in the panel or outside their band)."""
    doc = {"audits": [{"seed": s, "perturbed": p, "folder": folder(out, s, p).name,
                       "exit_status": status.get(folder(out, s, p).name)} for s, p in plan], "claims": claims}
    (out / "panel.json").write_text(json.dumps(doc, indent=1), encoding="utf-8")
    lines = ["# Verdicts over a panel of quick audits", "",
             "Audits: " + ", ".join(f"`{a['folder']}` (exit {a['exit_status']})" for a in doc["audits"]) + ".", "",
             "| claim | expected | verdicts seen | standing | labels seen |", "|---|---|---|---|---|"]
    for cid, c in claims.items():
        if len(c["verdicts_seen"]) > 1 or c["standing"] != "as expected" or len(c["band"]) > 1:
            lines.append(f"| `{cid}` | {' or '.join(c['band'])} | {', '.join(c['verdicts_seen'])} | {c['standing']} "
                         f"| {labels_seen(c).replace('|', '&#124;')} |")
    (out / "panel.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def summary(claims: dict[str, dict], plan: list[tuple[int, int]]) -> list[str]:
    """The console's lines: the panel's size, then every claim outside its band or whose verdict moved."""
    moved = {cid: c for cid, c in claims.items() if len(c["verdicts_seen"]) > 1}
    outside = {cid: c for cid, c in claims.items() if c["standing"] == "outside"}
    lines = [f"{len(plan)} quick audits (base seeds {sorted({s for s, _ in plan})}, "
             f"perturbed by {sorted({p for _, p in plan})} units in the last place, 0 plain); "
             f"{len(claims)} claims measured, {len(moved)} gave more than one verdict, {len(outside)} outside their "
             "expectation"]
    for cid, c in sorted({**moved, **outside}.items()):
        lines.append(f"  {c['standing']:16s} {cid}: expected {' or '.join(c['band'])}; seen "
                     + ", ".join(f"{name} {s['verdict']}" for name, s in c["seen"].items()))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verify.panel", description="The quick audit at several base "
                                     "seeds, plain and with perturbed training, and each claim's verdicts over them.")
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS), metavar="S",
                        help=f"base seeds (default {' '.join(map(str, SEEDS))})")
    parser.add_argument("--perturb", type=int, nargs="+", default=list(PERTURBATIONS), metavar="K",
                        help="the perturbations of each seed's training, in units in the last place, 0 for plain "
                             f"training (default {' '.join(map(str, PERTURBATIONS))})")
    parser.add_argument("--jobs", type=int, default=JOBS, help=f"audits at once, one CPU thread each (default {JOBS})")
    parser.add_argument("--only", nargs="+", metavar="ID_OR_TAG", default=None, help="as python -m verify --only")
    parser.add_argument("--output-dir", type=Path, default=Path("verify-report/panel"),
                        help="where each audit's report, panel.json and panel.md go (default verify-report/panel)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs: expected at least 1, got {args.jobs}")
    if len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        parser.error(f"--seeds: expected distinct base seeds >= 0, got {args.seeds}")
    if len(set(args.perturb)) != len(args.perturb) or min(args.perturb) < 0:
        parser.error(f"--perturb: expected distinct units in the last place >= 0, got {args.perturb}")
    plan = audits(args.seeds, args.perturb)
    out = args.output_dir
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"error: --output-dir {out}: {err.strerror}", file=sys.stderr)
        return 2
    with stopping.on_signals():
        try:
            status = run(plan, out, args.jobs, args.only)
        except (stopping.Interrupted, KeyboardInterrupt) as stop:
            print("\n" + stopping.message("python -m verify.panel", stop, "the audit's cache"), file=sys.stderr)
            return stopping.status(stop)
    try:
        claims = collect(out, plan)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    write(out, claims, plan, status)
    print("\n".join(summary(claims, plan)))
    print(f"panel written to {out}/panel.md and panel.json")
    raised = [name for name, code in status.items() if code not in (0, 1)]
    return 1 if raised or any(c["standing"] == "outside" for c in claims.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
