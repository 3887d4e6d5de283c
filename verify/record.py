"""``python -m verify.record NAME …``: measure a replication's claims under --full and commit what they read.

For each replication ``NAME`` (the ``committed=`` of its claims, `verify.committed`), in a process of its own (so
that the runs stored are exactly those its claims read): the claims are measured under ``--full`` at base seed
``--seed`` (default 0, the quick audit's), training what the audit's cache lacks, into a temporary folder beside
``results/NAME``. Only when every claim was measured (none raised) does ``results/NAME/`` receive the report
(report.md, report.json, figures/) and the replication's file, sealed (``runs.json``; Table 17's
``results.json`` with its table and figures); each file is replaced atomically, and a recording that read fewer
runs than the committed file holds is refused. A failed or interrupted recording (SIGTERM/SIGINT: exit status
128 + the signal) leaves ``results/NAME`` as it was. Exit status 0 when every claim came out as expected.

``python -m verify.record --check NAME …`` re-trains a stated sample of each replication with today's code (the lowest
seed of each configuration) and compares it with the stored seeds, writing ``results/NAME/check.json`` and never
touching the stored runs (`verify.check`; ``--help`` lists each replication's sample and its CPU time). ``python -m
verify.record --seal NAME …`` seals files recorded before seals existed, as their last commit holds them
(`verify.committed.seal_as_committed`). ``python -m verify.record --report NAME …`` rewrites a replication's
report (report.md, report.json, figures/) from its stored runs, by today's claims and rules — after a claim or a
rule changed — training nothing and leaving the sealed file as it is.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from verify import check, committed, experiments, stopping
from verify.__main__ import audit
from verify.context import RESULTS
from verify.integrity import StoredDataError
from verify.registry import all_claims


def replications() -> dict[str, list[str]]:
    """Replication name → the ids of its claims."""
    out: dict[str, list[str]] = {}
    for c in all_claims():
        if c.committed:
            out.setdefault(c.committed, []).append(c.id)
    return out


def record(name: str, seed: int = 0, progress: bool = True) -> int:
    """Measure replication ``name``'s claims under --full at base seed ``seed`` and, when every claim measured,
    replace ``results/NAME``'s report and sealed file with what they gave (module docstring)."""
    claims = [c for c in all_claims() if c.committed == name]
    folder = RESULTS / name
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{name}-recording-") as tmp:
        work = Path(tmp)
        status = audit(claims, mode="full", seed=seed, output_dir=work, progress=progress,
                       command=committed.record_command(name, seed), figures=True)
        raised = [c["id"] for c in json.loads((work / "report.json").read_text())["claims"] if c["error"]]
        if raised:
            print(f"verify.record: {len(raised)} of {len(claims)} claims of {name} raised ({', '.join(raised)}): "
                  f"nothing written, {committed.shown(folder)} is unchanged", file=sys.stderr)
            return 1
        try:
            file, runs = committed.write(name, seed, work)
        except (StoredDataError, RuntimeError) as err:
            print(f"verify.record: {err}", file=sys.stderr)
            return 1
        _move_into(work, folder)
    print(f"stored {runs} runs in {committed.shown(folder / file.name)} (sha256 {committed.replication(name).sha256})")
    return status


def _move_into(work: Path, folder: Path) -> None:
    """Move every file and folder of ``work`` into ``folder``, each replacing its namesake (a folder is swapped:
    renamed aside, the new one renamed in, the old one deleted)."""
    for item in sorted(work.iterdir()):
        target = folder / item.name
        if item.is_dir():
            aside = folder / f".{item.name}-replaced"
            if target.exists():
                shutil.rmtree(aside, ignore_errors=True)
                os.rename(target, aside)
            os.rename(item, target)
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.replace(item, target)


def report(name: str, progress: bool = True) -> int:
    """Rewrite ``results/NAME``'s report from its stored runs (module docstring): its claims measured as a quick
    audit measures them (reading the sealed file, at the base seed it was recorded at)."""
    claims = [c for c in all_claims() if c.committed == name]
    folder = RESULTS / name
    seed = committed.replication(name).base_seed
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{name}-report-") as tmp:
        work = Path(tmp)
        status = audit(claims, mode="quick", seed=seed, output_dir=work, progress=progress,
                       command=f"python -m verify.record --report {name}", figures=True)
        raised = [c["id"] for c in json.loads((work / "report.json").read_text())["claims"] if c["error"]]
        if raised:
            print(f"verify.record: {len(raised)} of {len(claims)} claims of {name} raised ({', '.join(raised)}): "
                  f"nothing written, {committed.shown(folder)} is unchanged", file=sys.stderr)
            return 1
        _move_into(work, folder)
    print(f"rewrote the report of {committed.shown(folder)} from its stored runs")
    return status


def seal(names: list[str]) -> int:
    """Seal each replication's committed file as its last commit holds it (`verify.committed.seal_as_committed`)."""
    for name in names:
        try:
            file = committed.seal_as_committed(name)
        except ValueError as err:
            print(f"verify.record: {err}", file=sys.stderr)
            return 1
        stored = committed.replication(name)
        print(f"sealed {committed.shown(file)}: sha256 {stored.sha256}, commit {stored.seal['code']['commit']}, "
              f"code hash {stored.seal['code']['hash']}")
    return 0


def plans(names: list[str]) -> str:
    """What ``--check`` re-trains of each replication and how long it takes: the sampled runs' training time as
    stored, and the CPU time of its last check."""
    lines = ["what --check re-trains of each replication, and how long it takes (one thread):"]
    for name in names:
        try:
            what, seconds = check.plan(name)
            last = committed.replication(name).check()
        except StoredDataError as err:
            lines.append(f"  {name}: {err}")
            continue
        said = [what] + ([f"they trained in {seconds / 60:.1f} min when recorded"] if seconds else [])
        if last.get("cpu_seconds") is not None:
            said.append(f"its last check took {last['cpu_seconds'] / 60:.1f} min of CPU ({last['checked'][:10]})")
        lines.append(f"  {name}: " + "; ".join(said))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    known = replications()
    argv = sys.argv[1:] if argv is None else argv
    helping = bool({"-h", "--help"} & set(argv))  # the plans read every stored file: only when asked for
    parser = argparse.ArgumentParser(prog="python -m verify.record", description="Measure each replication's claims "
                                     "under --full and commit what they read into results/NAME (verify.committed).",
                                     epilog=plans(sorted(known)) if helping else None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="+", choices=sorted(known), metavar="NAME",
                        help=f"replications to record: {', '.join(sorted(known))}")
    parser.add_argument("--seed", type=int, default=0, help="the audit's base seed to record at (default 0)")
    parser.add_argument("--seal", action="store_true", help="seal files recorded before seals existed, as their "
                        "last commit holds them (the seal names that commit's code); trains nothing")
    parser.add_argument("--report", action="store_true", help="rewrite each replication's report from its stored "
                        "runs by today's claims and rules; trains nothing, leaves the sealed file as it is")
    parser.add_argument("--check", action="store_true", help="re-train a sample of each replication with today's "
                        f"code ({check.SAMPLE}; Table 17: the lowest seed of each architecture) and compare it with "
                        "the stored seeds: each number within their prediction interval, Bonferroni over the "
                        "check's numbers (verify.check); writes results/NAME/check.json, never the stored runs; exit "
                        "status 1 when a number moved")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.seal:
        return seal(args.names)
    if args.report:
        return max(report(name, progress=not args.no_progress) for name in args.names)
    progress = not args.no_progress
    if args.check and len(args.names) == 1:
        return check.main(args.names[0], progress=progress)
    flags = (["--check"] if args.check else [f"--seed={args.seed}"]) + ([] if progress else ["--no-progress"])
    command = "python -m verify.record" + (" --check" if args.check else "")
    with stopping.on_signals():
        try:
            if len(args.names) == 1:
                return record(args.names[0], seed=args.seed, progress=progress)
            return _each(args.names, flags)
        except (stopping.Interrupted, KeyboardInterrupt) as stop:
            print("\n" + stopping.message(command, stop, str(experiments.root())), file=sys.stderr)
            return stopping.status(stop)


def _each(names: list[str], flags: list[str]) -> int:
    """Record (or check) each replication in a process of its own; a signal is passed on to the one running, which
    stops cleanly, and stops the rest."""
    status = 0
    for name in names:
        child = subprocess.Popen([sys.executable, "-m", "verify.record", name, *flags], start_new_session=True)
        try:
            status = max(status, child.wait())
        except stopping.Interrupted as stop:
            child.send_signal(stop.signum)
            child.wait()
            raise
    return status


if __name__ == "__main__":
    sys.exit(main())
