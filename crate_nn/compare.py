"""``crate-compare``: several runs side by side — their final metrics in one table, their curves in one figure.

    crate-compare runs/digits runs/tost_digits
    crate-compare runs/digits runs/digits_vit --out digits_vs_vit.png

Each RUN_DIR is a run directory of ``crate-train`` (its metrics.jsonl is read; its summary.json, when the run
finished, gives the steps and the wall time). The table prints one row per metric and one column per run (the last
value each run logged; integers as integers, "-" where a run has no such metric); the figure (``--out``, default
compare.png) draws every run's loss, learning rate and evaluation metrics against the optimizer step, one colour
per run (`crate_nn.engine.report.plot_curves`). Errors are one line naming the argument or file, exit status 2.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import cli
from .engine.report import SUMMARY, final_metrics, format_value, plot_curves
from .engine.run_dir import read_metrics
from .files import read_json, writing


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="crate-compare", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories written by crate-train")
    parser.add_argument("--out", default="compare.png", help="the figure of all runs' curves (PNG)")
    return parser.parse_args(argv)


def run_names(paths: Sequence[Path]) -> list[str]:
    """Column names: each run directory's name, or its whole path where two runs share a name."""
    names = [p.name or str(p) for p in paths]
    return [str(p) if names.count(n) > 1 else n for p, n in zip(paths, names)]


def read_run(path: Path) -> tuple[list[dict], dict]:
    """(metrics.jsonl records, summary.json or {}) of the run directory ``path``; ValueError naming ``path`` when
    it holds no metrics.jsonl."""
    log = path / "metrics.jsonl"
    if not log.is_file():
        what = "does not exist" if not path.exists() else "holds no metrics.jsonl (not a crate-train run directory)"
        raise ValueError(f"RUN_DIR: {str(path)!r} {what}")
    summary = path / SUMMARY
    return read_metrics(log, repair=True), read_json(summary, "RUN_DIR") if summary.is_file() else {}


def table(runs: Mapping[str, Sequence[Mapping]], summaries: Mapping[str, Mapping]) -> str:
    """The final metrics of ``runs`` (name → records) side by side, after the steps and the wall time from
    ``summaries`` (name → summary.json, possibly empty)."""
    finals = {name: final_metrics(records) for name, records in runs.items()}
    rows: dict[str, dict] = {
        "steps": {n: s["steps"] for n, s in summaries.items() if "steps" in s},
        "seconds": {n: s["seconds"] for n, s in summaries.items() if "seconds" in s},
    }
    for name, final in finals.items():
        for key, value in final.items():
            rows.setdefault(key, {})[name] = value
    rows = {k: v for k, v in rows.items() if v}
    cells = [["metric", *runs]] + [[key, *(format_value(row[n]) if n in row else "-" for n in runs)]
                                   for key, row in rows.items()]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
                     .rstrip() for line in cells)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crate-compare`` and ``python -m crate_nn.compare``."""
    args = parse_args(argv)
    paths = [Path(p) for p in args.runs]
    try:
        read = [read_run(p) for p in paths]
        names = run_names(paths)
        runs = {n: records for n, (records, _) in zip(names, read)}
        print(table(runs, {n: summary for n, (_, summary) in zip(names, read)}))
        with writing("out", args.out):
            out = plot_curves(runs, Path(args.out))
    except cli.EXPECTED as err:
        return cli.fail("crate-compare", err, 2)
    print(f"curves: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
