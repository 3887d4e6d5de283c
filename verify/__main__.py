"""``python -m verify`` / ``crate-verify``: run the derivation audit and write its report.

    python -m verify                      # quick mode (the default): every claim at reduced sizes, ≤ 60 s on 2 cores
    python -m verify --full               # CRATE-Base sizes, more samples
    python -m verify --only eq115 lemma11  # ids, id prefixes or tags
    python -m verify --list               # the registered claims
    python -m verify --table              # also print the full table (wide) after the summary
    python -m verify --figures            # also draw the figures (always under --full)
    python -m verify --perturb            # every training from initial weights moved by one unit in the last place
    python -m verify --perturb 3          # … by three units: another draw of another processor's rounding

Writes ``report.md``, ``report.json`` (and with ``--figures``, or under ``--full``, ``figures/*.png``) into
``--output-dir`` (default ``./verify-report``; with ``--only``, ``./verify-report/only``, so that a partial audit
never replaces the full report) and prints the headline and the summary (≤ 40 lines, ≤ 120 columns). In quick mode
the claims of the committed replications are decided from their stored numbers (`verify.committed`, marked † in
every view); at a ``--seed`` other than the one a replication was recorded at they are not re-measured, and say so,
and a replication whose last re-check failed (``python -m verify.record --check NAME``) gives stale verdicts, shown
but not counted.

The exit status is 1 when any measured verdict lies outside the verdicts its claim expects — its one verdict, or
the band of verdicts it gave over a panel of base seeds and perturbed trainings (`verify.registry.Band`,
`verify.panel`) — when its labels differ from the expected ones, or when a measurement raises (the report is
written regardless), 2 on bad arguments, 128 + the signal's number when SIGTERM or SIGINT
stops the audit (within seconds, leaving no temporary file; the runs trained so far stay cached, so the same
command continues), 0 otherwise.
"""
from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from verify import committed, experiments, stopping
from verify.context import versions
from verify.integrity import StoredDataError
from verify.registry import Claim, all_claims, select
from verify.report import format_console, format_table, write_json, write_markdown
from verify.runner import Outcome, run_claims

ONLY_DIR = Path("verify-report/only")
"""Where ``--only`` writes its report unless ``--output-dir`` is given."""


def audit(
    claims: list[Claim],
    *,
    mode: str = "quick",
    seed: int = 0,
    output_dir: Path | str = "verify-report",
    progress: bool = True,
    command: str = "python -m verify",
    echo: bool = True,
    table: bool = False,
    figures: bool | None = None,
    perturb: int = 0,
) -> int:
    """Measure ``claims``, write the report and print its headline and summary (and the full table with
    ``table``); return the exit status (0 when all as expected).

    Claims not measured in ``mode`` (``Claim.modes``) are skipped and named in the report. ``figures``: draw the
    claims' figures into ``output_dir/figures``; None: under ``--full`` only (in a warm quick audit drawing took
    about a third of the time). ``perturb``: train within `verify.experiments.perturbed` (every run from its
    initialisation moved by ``perturb`` units in the last place, cached apart: a stand-in for another processor; 0:
    plain training).
    """
    figures = mode == "full" if figures is None else figures
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    wall = time.perf_counter()
    with experiments.perturbed(perturb) if perturb else contextlib.nullcontext():
        outcomes = run_claims([c for c in claims if mode in c.modes], mode=mode, seed=seed, output_dir=output_dir,
                              progress=progress, figures=figures)
    meta = {
        "mode": mode,
        "seed": seed,
        "perturbed": perturb,
        "command": command,
        "started": started,
        "wall_seconds": round(time.perf_counter() - wall, 2),
        "versions": versions(),
        "not_run_in_this_mode": [c.id for c in claims if mode not in c.modes],
        "replications": replications(outcomes),
    }
    write_json(output_dir / "report.json", outcomes, meta)
    write_markdown(output_dir / "report.md", outcomes, meta)
    if echo:
        if table:
            print(format_table(outcomes), end="\n\n")
        print(format_console(outcomes))
        print(f"wall time {meta['wall_seconds']:.1f} s; report written to {output_dir}/report.md and report.json")
        for line in dict.fromkeys(o.error for o in outcomes if o.error and "\n" not in o.error.strip()):
            print(f"error: {line}", file=sys.stderr)  # a refused stored file, once
    return 1 if any(o.unexpected for o in outcomes) else 0


def replications(outcomes: list[Outcome]) -> list[dict]:
    """The committed replications whose stored numbers decided verdicts in this run, each with its seal and
    whether today's code differs from the code that recorded it (`verify.committed.Replication.summary`); one that
    could not be read says why (``error``)."""
    out = []
    for name in dict.fromkeys(o.stored for o in outcomes if o.stored):
        try:
            out.append(committed.replication(name).summary())
        except StoredDataError as err:
            out.append({"name": name, "file": committed.shown(committed.path(name)), "error": str(err)})
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m verify",
        description="The CRATE derivation audit: every checkable claim of the papers, measured, with a verdict.",
    )
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="reduced sizes, ≤ 60 s on 2 CPU cores (the default)")
    size.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="CRATE-Base sizes (d 768, n 196, K 12, p 64) and more samples")
    p.set_defaults(mode="quick")
    p.add_argument("--only", nargs="+", metavar="ID_OR_TAG", default=None,
                   help="claim ids, id prefixes (e.g. 2.11) or tags; comma-separated lists are accepted")
    p.add_argument("--seed", type=int, default=0, help="base seed; each claim derives its own stream (default 0)")
    p.add_argument("--output-dir", type=Path, default=None,
                   help=f"where report.md, report.json and figures/ go (default ./verify-report; with --only "
                        f"./{ONLY_DIR})")
    p.add_argument("--list", action="store_true", help="list the registered claims and exit")
    p.add_argument("--table", action="store_true", help="also print the full table of every claim (wide)")
    p.add_argument("--figures", action=argparse.BooleanOptionalAction, default=None,
                   help="draw the claims' figures into OUTPUT_DIR/figures (default: under --full only)")
    p.add_argument("--perturb", type=int, nargs="?", const=1, default=0, metavar="K",
                   help="train every run from its initial weights moved by K units in the last place (default 1), "
                        "cached apart: what another processor's rounding does to the trained claims (docs/audit.md, "
                        "Reproducibility)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    """Console entry point (``crate-verify``); returns the exit status."""
    args = _parser().parse_args(argv)
    with stopping.on_signals():
        try:
            return _main(args, sys.argv[1:] if argv is None else argv)
        except (stopping.Interrupted, KeyboardInterrupt) as stop:
            print("\n" + stopping.message("python -m verify", stop, str(experiments.root())), file=sys.stderr)
            return stopping.status(stop)


def _main(args: argparse.Namespace, argv: list[str]) -> int:
    claims = all_claims()
    only = [s.strip() for item in args.only or [] for s in item.split(",")]
    try:
        claims = select(claims, only)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.perturb < 0:
        print(f"error: --perturb: expected K >= 1 units in the last place, got {args.perturb}", file=sys.stderr)
        return 2
    if args.list:
        for c in claims:
            modes = "both" if len(c.modes) > 1 else c.modes[0]
            expected = "|".join(c.expected_verdict.verdicts) + ("/" + "|".join(c.full_verdict.verdicts)
                                                                   if c.full_verdict else "")
            stored = f"†{c.committed}" if c.committed and "quick" in c.modes else ""
            line = f"{c.id:36s} {expected:6s} {c.kind:8s} {c.provenance:11s} {modes:5s} {stored:13s} {c.location}"
            print(line if len(line) <= 120 else line[:119] + "…")
        print("† decided in quick mode from the stored runs of results/NAME (python -m verify.record NAME)")
        return 0
    command = "python -m verify " + " ".join(shlex.quote(a) for a in argv)
    output_dir = args.output_dir or (ONLY_DIR if args.only else Path("verify-report"))
    return audit(claims, mode=args.mode, seed=args.seed, output_dir=output_dir, progress=not args.no_progress,
                 command=command.strip(), table=args.table, figures=args.figures, perturb=args.perturb)


if __name__ == "__main__":
    sys.exit(main())
