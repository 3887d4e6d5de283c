"""``python -m verify.errata``: the errors of the papers as a dataset, each with its witness run.

A ``paper`` claim expected to fail is an error of the papers (`verify.registry`): it records its kind — an
*erratum* (a typo, a printed number or formula, a caption, an off-by-one, a count) or a *substantive* error (a step
of an argument or a claimed behaviour) — the corrected statement, and a witness: a function that checks the printed
statement and the corrected one in seconds (`verify.registry.Check`). This command runs the witnesses and writes
``errata.json`` and ``errata.csv`` into the output folder::

    python -m verify.errata                          # every error, into ./verify-report/errata
    python -m verify.errata --only eq436 thm16       # a few, by id, id prefix or tag
    python -m verify.errata --output-dir out/errata

One record per error: ``id``, ``paper`` (the work, as `verify.registry.SOURCES` cites it), ``version`` (the versions
its location names), ``location``, ``quote``, ``kind``, ``correction``, ``command`` (the witness's, this command with
``--only ID``), whether the witness holds on the printed and on the corrected statement with its numbers, and its
seconds (each witness runs on one thread, as the quick audit does). ``errata.json`` holds the records and the
counts per kind; ``errata.csv`` one row per record, the numbers as JSON. The exit status is 0 when every witness
fails on the printed statement and holds on the corrected one, 1 otherwise (the files are written regardless), 2 on
a bad argument (one line naming it).
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

from verify.context import versions
from verify.registry import ERROR_KINDS, SOURCES, Claim, all_claims, errors_of_kind, select
from verify.runner import single_threaded

OUTPUT_DIR = Path("verify-report/errata")
"""Where the dataset goes unless ``--output-dir`` says otherwise."""
FIELDS = ("id", "paper", "version", "location", "quote", "kind", "correction", "command", "printed_holds",
          "corrected_holds", "printed_numbers", "corrected_numbers", "seconds")
"""The dataset's columns, in order (``errata.csv``'s header; the keys of each record of ``errata.json``)."""


def errors(claims: list[Claim] | None = None) -> list[Claim]:
    """The registered errors of the papers (the claims with an error kind), in the papers' order."""
    return [c for c in (all_claims() if claims is None else claims) if c.error_kind is not None]


def command(claim_id: str) -> str:
    """The command that runs one error's witness."""
    return f"python -m verify.errata --only {claim_id}"


def versions_named(location: str) -> list[str]:
    """The labels of `verify.registry.SOURCES` a location names, in the order it names them."""
    return sorted((label for label in SOURCES if label in location), key=location.index)


def witness(claim: Claim) -> dict[str, Any]:
    """One error's record: its metadata and its witness run on the printed and the corrected statement."""
    start = time.perf_counter()
    with single_threaded("quick"):
        printed, corrected = claim.witness(False), claim.witness(True)
    named = versions_named(claim.location)
    return {"id": claim.id, "paper": SOURCES[named[0]] if named else "", "version": "; ".join(named),
            "location": claim.location, "quote": claim.quote, "kind": claim.error_kind,
            "correction": claim.correction, "command": command(claim.id), "printed_holds": printed.holds,
            "corrected_holds": corrected.holds, "printed_numbers": printed.numbers,
            "corrected_numbers": corrected.numbers, "seconds": round(time.perf_counter() - start, 3)}


def behaves(record: dict[str, Any]) -> bool:
    """A witness fails on the printed statement and holds on the corrected one."""
    return not record["printed_holds"] and record["corrected_holds"]


def write(records: list[dict[str, Any]], output_dir: Path) -> tuple[Path, Path]:
    """``errata.json`` (the records, the counts per kind and the versions of the software) and ``errata.csv`` (one
    row per record, the numbers as JSON) in ``output_dir``; returns their paths."""
    output_dir.mkdir(parents=True, exist_ok=True)
    counts = {kind: sum(r["kind"] == kind for r in records) for kind in ERROR_KINDS}
    doc = {"errata": records, "counts": counts, "versions": versions()}
    json_path, csv_path = output_dir / "errata.json", output_dir / "errata.csv"
    json_path.write_text(json.dumps(doc, indent=2, ensure_ascii=False, default=_plain) + "\n", encoding="utf-8")
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        for r in records:
            writer.writerow({k: json.dumps(r[k], ensure_ascii=False, default=_plain) if k.endswith("_numbers")
                             else r[k] for k in FIELDS})
    return json_path, csv_path


def _plain(value: Any) -> Any:
    """numpy scalars and arrays → Python numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"errata: cannot serialise {type(value).__name__}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m verify.errata",
                                description="Run the witness of each error of the papers and write them as a dataset "
                                            "(errata.json, errata.csv).")
    p.add_argument("--only", nargs="+", metavar="ID_OR_TAG", default=None,
                   help="error ids, id prefixes or tags (default: every error of the papers)")
    p.add_argument("--output-dir", type=Path, default=OUTPUT_DIR,
                   help=f"where errata.json and errata.csv go (default ./{OUTPUT_DIR})")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    found = errors()
    try:
        chosen = select(found, [s.strip() for item in args.only or [] for s in item.split(",")])
    except ValueError as err:
        print(f"error: {str(err).replace('no claim id', 'no error id')}", file=sys.stderr)
        return 2
    if args.output_dir.exists() and not args.output_dir.is_dir():
        print(f"error: --output-dir {args.output_dir}: expected a folder, found a file", file=sys.stderr)
        return 2
    records = [witness(c) for c in chosen]
    try:
        paths = write(records, args.output_dir)
    except OSError as err:
        print(f"error: --output-dir {args.output_dir}: {err.strerror or err}", file=sys.stderr)
        return 2
    for r in records:
        state = "ok" if behaves(r) else "MISBEHAVES"
        print(f"{r['id']:32s} {r['kind']:12s} printed {'holds' if r['printed_holds'] else 'fails'}, corrected "
              f"{'holds' if r['corrected_holds'] else 'fails'} ({r['seconds']:.2f} s) {state}")
    kinds = ", ".join(errors_of_kind(k, sum(r["kind"] == k for r in records)) for k in ERROR_KINDS)
    print(f"{len(records)} errors of the papers ({kinds}); written to {paths[0]} and {paths[1]}")
    return 0 if all(behaves(r) for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
