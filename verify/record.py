"""``python -m verify.record NAME …``: measure a replication's claims under --full and commit what they read.

For each replication ``NAME`` (the ``committed=`` of its claims, `verify.committed`), in a process of its own (so
that the runs stored are exactly those its claims read): the claims are measured under ``--full`` with base seed 0
(the quick audit's), training what the audit's cache lacks, and ``results/NAME/`` receives the report (report.md,
report.json, figures/) and ``runs.json``. Exit status 0 when every claim came out as expected.
"""
from __future__ import annotations

import argparse
import subprocess
import sys

from verify import committed
from verify.__main__ import audit
from verify.context import RESULTS
from verify.registry import all_claims


def replications() -> dict[str, list[str]]:
    """Replication name → the ids of its claims."""
    out: dict[str, list[str]] = {}
    for c in all_claims():
        if c.committed:
            out.setdefault(c.committed, []).append(c.id)
    return out


def record(name: str, progress: bool = True) -> int:
    """Measure replication ``name``'s claims under --full (seed 0) into ``results/NAME`` and store their runs."""
    claims = [c for c in all_claims() if c.committed == name]
    status = audit(claims, mode="full", seed=0, output_dir=RESULTS / name, progress=progress,
                   command=f"python -m verify.record {name}", figures=True)
    print(f"stored {len(committed.entries())} runs in {committed.write(name)}")
    return status


def main(argv: list[str] | None = None) -> int:
    known = replications()
    parser = argparse.ArgumentParser(prog="python -m verify.record", description="Measure each replication's claims "
                                     "under --full and commit what they read into results/NAME (verify.committed).")
    parser.add_argument("names", nargs="+", choices=sorted(known), metavar="NAME",
                        help=f"replications to record: {', '.join(sorted(known))}")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if len(args.names) == 1:
        return record(args.names[0], progress=not args.no_progress)
    flags = ["--no-progress"] if args.no_progress else []
    return max(subprocess.run([sys.executable, "-m", "verify.record", name, *flags]).returncode for name in args.names)


if __name__ == "__main__":
    sys.exit(main())
