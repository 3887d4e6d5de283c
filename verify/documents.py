"""``python -m verify.documents``: the parts of the repository's documents that are written from the audit's report.

README.md's headline (the verdicts per scope, naming the errors of the papers, errata and substantive apart) and its
answer to "do CRATE layers compress?", and docs/papers.md's list of the errors of the papers (by kind, each with its
location, measurement, correction and witness), its index of every object of the papers the audit checks and its
table of former claim ids. Each part lies between two markers, which the command keeps::

    <!-- generated: NAME (python -m verify.documents) -->
    …
    <!-- end: NAME -->

``python -m verify.documents [REPORT]`` rewrites every part from a report (default ``verify-report/report.json``: a
quick audit at base seed 0, what ``python -m verify`` writes); ``--check`` only says which parts differ (exit 1).
tests/verify/test_documents.py regenerates them from the test run's own quick audit and fails when a file says
something else (`same_text`: the words exactly, each number within the tolerance stated there), so no number in
these parts is typed by hand.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from verify.context import ROOT
from verify.errata import command as errata_command
from verify.registry import ERROR_KINDS, SCOPES, SOURCES, Claim, all_claims, errors_of_kind
from verify.report import (
    COUNTED,
    FAILS_READ,
    LAYERS_COMPRESS,
    PAPERS_SCALE,
    PLURAL,
    PROTOCOLS,
    SEED_SENSITIVE,
    STALE,
    UNCLASSIFIED,
    delta_r,
    kinds_text,
    layers_tally,
    md_escape,
)

COMMAND = "python -m verify.documents"
BEGIN = "<!-- generated: {name} ({command}) -->"
END = "<!-- end: {name} -->"
"""A generated part's markers: its name and the command that writes it (another module's parts name theirs, e.g.
``python -m benchmarks.presets --docs``, and use `read_part`/`write_part` with it)."""


def _entries(report: dict) -> dict[str, dict]:
    """Report entries by claim id and by each former id."""
    out = {}
    for entry in report["claims"]:
        out[entry["id"]] = entry
        for old in entry.get("formerly") or ():
            out.setdefault(old, entry)
    return out


def _headline_text(entry: dict) -> str:
    """The claim's headline (``label: value [low, high]``), else its measured line."""
    h = entry.get("headline")
    if not h:
        return entry["measured"] or "raised"
    if h.get("low") is None or h.get("high") is None:
        return f"{h['label']}: {h['value']:.3g}"
    return f"{h['label']}: {h['value']:+.2g} [{h['low']:.2g}, {h['high']:.2g}]"


def _verdict(entry: dict) -> str:
    """What a document says of a claim's verdict: the verdict, or for a seed-sensitive claim inside its band the band
    (``holds or inconclusive``), which every processor and base seed reproduces where one verdict of it would not;
    marked when it is stale (its replication's last re-check failed)."""
    if entry.get("stale"):
        return f"{entry['verdict']} ({STALE})"
    if entry.get("seed_sensitive") and entry.get("matches_expectation"):
        return " or ".join(entry["expected_band"])
    return entry["verdict"]


def _errors(report: dict) -> dict[str, list[dict]]:
    """The report's entries of the papers' statements (scope ``paper``) that fail — the errors of the papers — by kind
    (`verify.registry.ERROR_KINDS`, then `verify.report.UNCLASSIFIED` for one whose claim names none), each kind
    present only when it has an entry."""
    failing = [e for e in report["claims"]  # a stale stored verdict (`verify.runner.Outcome.stale`) is no finding
               if e.get("scope") == "paper" and e["verdict"] == "fails" and not e.get("stale")]
    by_kind = {kind: [e for e in failing if e.get("error_kind") == kind] for kind in ERROR_KINDS}
    by_kind[UNCLASSIFIED] = [e for e in failing if e.get("error_kind") not in ERROR_KINDS]
    return {kind: found for kind, found in by_kind.items() if found}


def _description(kind: str) -> str:
    """What an error kind is."""
    return ERROR_KINDS[kind][2] if kind in ERROR_KINDS else "a paper claim expected to hold: it names no kind"


def headline(report: dict, claims: list[Claim]) -> str:
    """The audit's verdicts per scope, and each of the papers' statements that fails (an error of the papers), errata
    and substantive errors apart."""
    by_scope = report["summary"]["by_scope"]
    errors = _errors(report)
    counted = (*COUNTED, SEED_SENSITIVE)
    rows = ["| what the claims test | claims | " + " | ".join(PLURAL[v] for v in counted) + " |",
            "|---|---|" + "---|" * len(counted)]
    for scope, (name, _) in SCOPES.items():
        k = by_scope[scope]
        kinds = f": {kinds_text(errors)}" if scope == "paper" and errors else ""
        cells = [f"{k[v]} ({FAILS_READ[scope]}{kinds})" if v == "fails" and k[v] else str(k.get(v, 0))
                 for v in counted]
        rows.append(f"| {name} | {k['claims']} | " + " | ".join(cells) + " |")
    meta = report["meta"]
    lines = [f"The audit's {meta['mode']} mode at base seed {meta['seed']}: {report['summary']['claims']} claims, "
             f"{report['summary']['claims'] - len(report['summary']['mismatches'])} as expected.", "", *rows, ""]
    if errors:
        total = sum(len(found) for found in errors.values())
        lines += [f"The {total} errors of the papers (their statements that fail, as printed; each with its location, "
                  "correction and witness in [docs/papers.md](docs/papers.md#the-errors-of-the-papers)) — "
                  + "; ".join(f"{errors_of_kind(kind, len(found))} ({_description(kind)}): "
                              + ", ".join(f"`{e['id']}`" for e in found) for kind, found in errors.items()) + "."]
    return "\n".join(lines).rstrip("\n")


def papers_errors(report: dict, claims: list[Claim]) -> str:
    """Each of the papers' statements that fails, by kind of error, with its location, the statement, what was
    measured, the correction and the command of its witness."""
    errors = _errors(report)
    if not errors:
        return "None: no statement of the papers fails in this report."
    lines = []
    for kind, found in errors.items():
        heading = ERROR_KINDS[kind][1] if kind in ERROR_KINDS else kind
        lines += [f"**{heading[0].upper() + heading[1:]}** ({len(found)}: {_description(kind)}):", ""]
        lines += [f"- `{e['id']}` ({md_escape(e['location'])}): {md_escape(e['statement'])} — measured: {md_escape(e['measured'])}"
                  + (f" — corrected: {md_escape(e['correction'])}" if e.get("correction") else "")
                  + f" (witness: `{errata_command(e['id'])}`)" for e in found]
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def layers_compress(report: dict, claims: list[Claim]) -> str:
    """The central question under each protocol, for each model the report measured (`verify.report.LAYERS_COMPRESS`):
    each cell with the scope of the claim that decides it and the number that decides it, and for the joint rule ΔR;
    the verdicts counted per scope; what the built-in runs do not measure."""
    entries = _entries(report)
    rows = ["| model | " + " | ".join(PROTOCOLS) + " | ΔR, last layer (joint) | scale |", "|---|---|---|---|---|---|"]
    decided = []
    for model, ids in LAYERS_COMPRESS:
        found = [entries.get(i) if i else None for i in ids]
        if not any(found):
            continue
        cells = []
        for protocol, e in zip(PROTOCOLS, found):
            if e is None:
                cells.append("—")
                continue
            counted = STALE if e.get("stale") else SEED_SENSITIVE if _verdict(e) != e["verdict"] else e["verdict"]
            if counted != STALE:
                decided.append((protocol, e.get("scope"), counted))
            cells.append(f"**{_verdict(e)}** ({e.get('scope') or '—'}; {md_escape(_headline_text(e))}; `{e['id']}`)")
        first, joint = next(e for e in found if e), found[2]
        rows.append(f"| {model} | " + " | ".join(cells) + f" | {delta_r(joint.get('data')) if joint else '—'} | "
                    f"{md_escape(first.get('setting') or '—')} |")
    return "\n".join([f"Each cell: the verdict, the scope of the claim that decides it and the number that decides it "
                      f"(named by what it compares). Counted by scope — {layers_tally(decided)}.", "", *rows, "",
                      PAPERS_SCALE])


def _source(location: str) -> str:
    return next((label for label in SOURCES if location.startswith(label)), "other")


def claims_index(report: dict, claims: list[Claim]) -> str:
    """Every claim by source, in the papers' order: its location (in each version where both print the object),
    id, scope, verdict in the report and what it found."""
    entries = _entries(report)
    lines = []
    for label, work in {**SOURCES, "other": "other sources"}.items():
        group = [c for c in claims if _source(c.location) == label]
        if not group:
            continue
        lines += [f"### {label}", "", f"{work}.", "", "| location | claim | scope | verdict | what the audit found |",
                  "|---|---|---|---|---|"]
        for c in group:
            e = entries.get(c.id)
            verdict, found = (_verdict(e), _headline_text(e)) if e else (f"{c.expected_verdict} (expected)", "—")
            lines.append(f"| {md_escape(c.location)} | `{c.id}` | {c.scope or '—'} | {verdict} | {md_escape(found)} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def former_ids(report: dict, claims: list[Claim]) -> str:
    """Former claim id → today's (``python -m verify --only`` accepts either)."""
    pairs = sorted((old, c.id) for c in claims for old in c.formerly if old != c.id)
    return "\n".join(["| former id | claim |", "|---|---|", *(f"| `{old}` | `{new}` |" for old, new in pairs)])


def answer(report: dict, claims: list[Claim]) -> str:
    """The audit's answer in three sentences (`verify.report.answer`)."""
    return " ".join(report["summary"]["answer"])


PARTS: dict[str, tuple[str, Callable[[dict, list[Claim]], str]]] = {
    "audit-answer": ("README.md", answer),
    "audit-headline": ("README.md", headline),
    "layers-compress": ("README.md", layers_compress),
    "papers-errors": ("docs/papers.md", papers_errors),
    "claims-index": ("docs/papers.md", claims_index),
    "former-ids": ("docs/papers.md", former_ids),
}
"""Part name → (the document holding it, relative to the repository, and what writes it)."""


def _span(text: str, name: str, path: Path, command: str) -> tuple[int, int]:
    begin, end = BEGIN.format(name=name, command=command), END.format(name=name)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{path}: expected one '{begin}' followed by one '{end}'")
    return text.index(begin) + len(begin), text.index(end)


def read_part(path: Path, name: str, command: str = COMMAND) -> str:
    """The text of part ``name`` as the document at ``path`` holds it now, between its markers."""
    text = path.read_text(encoding="utf-8")
    start, stop = _span(text, name, path, command)
    return text[start:stop].strip("\n")


def write_part(path: Path, name: str, text: str, command: str = COMMAND, check: bool = False) -> bool:
    """Put ``text`` between part ``name``'s markers in the document at ``path`` (with ``check``, leave it); whether
    the document said something else."""
    old = path.read_text(encoding="utf-8")
    start, stop = _span(old, name, path, command)
    if old[start:stop].strip("\n") == text.strip("\n"):
        return False
    if not check:
        path.write_text(old[:start] + "\n" + text.strip("\n") + "\n" + old[stop:], encoding="utf-8")
    return True


def current(name: str, root: Path = ROOT) -> str:
    """The text of part ``name`` as the document holds it now."""
    return read_part(root / PARTS[name][0], name)


def render(report: dict, claims: list[Claim] | None = None) -> dict[str, str]:
    """Every part, written from ``report`` (a parsed report.json) and the registered claims."""
    claims = all_claims() if claims is None else claims
    return {name: write(report, claims).strip("\n") for name, (_, write) in PARTS.items()}


def update(report: dict, root: Path = ROOT, check: bool = False) -> list[str]:
    """Rewrite every part in its document (or, with ``check``, leave them); return the names of the parts that
    differed."""
    return [name for name, text in render(report).items() if write_part(root / PARTS[name][0], name, text, check=check)]


NUMBER = re.compile(r"[+−-]?\d+(?:[.,]\d+)*(?:e[+−-]?\d+)?")


INTERVAL = re.compile(rf"({NUMBER.pattern}) \[({NUMBER.pattern}), ({NUMBER.pattern})\]")
"""A number with its 95% interval, ``m [low, high]``, as the parts print a comparison over seeds."""


def _value(text: str) -> float:
    return float(text.replace("−", "-").replace(",", ""))


def _tolerances(text: str, rel: float, floor: float) -> list[float | None]:
    """For each number of ``text`` (`NUMBER`), how far another run may move it: half the width of its interval for
    the three numbers of an ``m [low, high]`` (a trained model's numbers are a draw of its training's rounding, which
    another processor draws anew, and the seeds' interval says how far such draws move them), else None (``rel`` /
    ``floor`` apply)."""
    spans = {}
    for m in INTERVAL.finditer(text):
        half = abs(_value(m.group(3)) - _value(m.group(2))) / 2
        for i in (1, 2, 3):
            spans[m.start(i)] = max(half, floor)
    return [spans.get(m.start()) for m in NUMBER.finditer(text)]


def same_text(committed: str, regenerated: str, rel: float, floor: float) -> list[str]:
    """Where ``committed`` and ``regenerated`` differ: their words must be equal and each number must agree within
    ``rel`` of the larger or ``floor`` absolute — a number printed with its 95% interval (``m [low, high]``) within
    half the interval's width, or that, whichever is larger (`_tolerances`: a trained model's numbers move with the
    processor's rounding). Returns one line per difference, empty when they agree."""
    words = [NUMBER.split(t) for t in (committed, regenerated)]
    if words[0] != words[1]:
        a, b = committed.splitlines(), regenerated.splitlines()
        line = next((i for i, (x, y) in enumerate(zip(a, b)) if NUMBER.split(x) != NUMBER.split(y)), min(len(a), len(b)))
        return [f"line {line + 1}: {a[line] if line < len(a) else '(none)'!r} ≠ "
                f"{b[line] if line < len(b) else '(none)'!r}"]
    out = []
    numbers = zip(NUMBER.findall(committed), NUMBER.findall(regenerated), _tolerances(committed, rel, floor))
    for x, y, within in numbers:
        if x.count(".") > 1 or y.count(".") > 1:  # a section number (Sec. 4.1.1): a label, equal or not
            if x != y:
                out.append(f"{x} ≠ {y}")
            continue
        u, v = _value(x), _value(y)
        if abs(u - v) > max(floor, rel * max(abs(u), abs(v)), within or 0.0):
            out.append(f"{x} ≠ {y}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verify.documents", description="Rewrite the parts of README.md "
                                     "and docs/papers.md that are written from the audit's report.")
    parser.add_argument("report", nargs="?", type=Path, default=Path("verify-report/report.json"),
                        help="a report.json of a quick audit at base seed 0 (default: verify-report/report.json)")
    parser.add_argument("--check", action="store_true", help="only say which parts differ (exit status 1 if any)")
    args = parser.parse_args(argv)
    try:
        report: dict[str, Any] = json.loads(args.report.read_text(encoding="utf-8"))
        if report["meta"]["mode"] != "quick" or report["meta"]["seed"] != 0 or report["summary"]["mismatches"]:
            raise ValueError("expected a quick audit at base seed 0 with every verdict as expected (python -m verify)")
        changed = update(report, check=args.check)
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {args.report}: {err}", file=sys.stderr)
        return 2
    verb = "differ" if args.check else "rewritten"
    print(f"{verb}: {', '.join(changed)}" if changed else "every part is up to date")
    return 1 if changed and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
