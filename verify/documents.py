"""``python -m verify.documents``: the parts of the repository's documents that are written from the audit's report.

README.md's headline (the verdicts per scope, naming the errors of the papers) and its answer to "do CRATE layers
compress?", and docs/papers.md's list of the errors of the papers (each with its location and measurement), its index
of every object of the papers the audit checks and its table of former claim ids. Each part lies between two markers, which the command keeps::

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
from verify.registry import SCOPES, SOURCES, Claim, all_claims
from verify.report import COUNTED, FAILS_READ, LAYERS_COMPRESS, PLURAL, PROTOCOLS, STALE, delta_r

BEGIN = "<!-- generated: {name} (python -m verify.documents) -->"
END = "<!-- end: {name} -->"


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


def _md(text: str) -> str:
    return " ".join(str(text).replace("|", "\\|").split())


def _errors(report: dict) -> list[dict]:
    """The report's entries of the papers' statements (scope ``paper``) that fail: the errors of the papers (a stale
    stored verdict, `verify.runner.Outcome.stale`, is no finding)."""
    return [e for e in report["claims"] if e.get("scope") == "paper" and e["verdict"] == "fails" and not e.get("stale")]


def _verdict(entry: dict) -> str:
    """An entry's verdict, marked when it is stale (its replication's last re-check failed)."""
    return entry["verdict"] + (f" ({STALE})" if entry.get("stale") else "")


def headline(report: dict, claims: list[Claim]) -> str:
    """The audit's verdicts per scope, and each of the papers' statements that fails (an error of the papers)."""
    by_scope = report["summary"]["by_scope"]
    rows = ["| what the claims test | claims | " + " | ".join(PLURAL[v] for v in COUNTED) + " |",
            "|---|---|" + "---|" * len(COUNTED)]
    for scope, (name, _) in SCOPES.items():
        k = by_scope[scope]
        cells = [f"{k[v]} ({FAILS_READ[scope]})" if v == "fails" and k[v] else str(k[v]) for v in COUNTED]
        rows.append(f"| {name} | {k['claims']} | " + " | ".join(cells) + " |")
    meta = report["meta"]
    lines = [f"The audit's {meta['mode']} mode at base seed {meta['seed']}: {report['summary']['claims']} claims, "
             f"{report['summary']['claims'] - len(report['summary']['mismatches'])} as expected.", "", *rows, ""]
    errors = _errors(report)
    if errors:
        lines += [f"The {len(errors)} errors of the papers (their statements that fail, as printed; each with its "
                  "location and measurement in [docs/papers.md](docs/papers.md#the-errors-of-the-papers)): "
                  + ", ".join(f"`{e['id']}`" for e in errors) + "."]
    return "\n".join(lines).rstrip("\n")


def papers_errors(report: dict, claims: list[Claim]) -> str:
    """Each of the papers' statements that fails, with its location, the statement and what was measured."""
    errors = _errors(report)
    if not errors:
        return "None: no statement of the papers fails in this report."
    return "\n".join(f"- `{e['id']}` ({_md(e['location'])}): {_md(e['statement'])} — measured: {_md(e['measured'])}"
                     for e in errors)


def layers_compress(report: dict, claims: list[Claim]) -> str:
    """The central question under each protocol, for each model the report measured (`verify.report.LAYERS_COMPRESS`),
    with the deciding layer's number and, for the joint rule, ΔR."""
    entries = _entries(report)
    rows = ["| model | scope, scale | " + " | ".join(PROTOCOLS) + " | ΔR, last layer (joint) |", "|---|---|---|---|---|---|"]
    tally = {p: {} for p in PROTOCOLS}
    for model, ids in LAYERS_COMPRESS:
        found = [entries.get(i) if i else None for i in ids]
        if not any(found):
            continue
        first = next(e for e in found if e)
        scope = SCOPES[first["scope"]][0] if first.get("scope") in SCOPES else "—"
        cells = []
        for protocol, e in zip(PROTOCOLS, found):
            if e is None:
                cells.append("—")
                continue
            if not e.get("stale"):
                tally[protocol][e["verdict"]] = tally[protocol].get(e["verdict"], 0) + 1
            cells.append(f"**{_verdict(e)}** ({_md(_headline_text(e))}; `{e['id']}`)")
        joint = found[2]
        rows.append(f"| {model} | {scope}" + (f": {_md(first['setting'])}" if first.get("setting") else "")
                    + " | " + " | ".join(cells) + f" | {delta_r(joint.get('data')) if joint else '—'} |")
    said = "; ".join(f"{protocol}: " + ", ".join(f"{n} {PLURAL[v]}" for v, n in sorted(counts.items()))
                     for protocol, counts in tally.items() if counts)
    return "\n".join([f"Each cell: the verdict, and the number that decides it (named by what it compares). In this "
                      f"report — {said}.", "", *rows])


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
            lines.append(f"| {_md(c.location)} | `{c.id}` | {c.scope or '—'} | {verdict} | {_md(found)} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def former_ids(report: dict, claims: list[Claim]) -> str:
    """Former claim id → today's (``python -m verify --only`` accepts either)."""
    pairs = sorted((old, c.id) for c in claims for old in c.formerly if old != c.id)
    return "\n".join(["| former id | claim |", "|---|---|", *(f"| `{old}` | `{new}` |" for old, new in pairs)])


PARTS: dict[str, tuple[str, Callable[[dict, list[Claim]], str]]] = {
    "audit-headline": ("README.md", headline),
    "layers-compress": ("README.md", layers_compress),
    "papers-errors": ("docs/papers.md", papers_errors),
    "claims-index": ("docs/papers.md", claims_index),
    "former-ids": ("docs/papers.md", former_ids),
}
"""Part name → (the document holding it, relative to the repository, and what writes it)."""


def _span(text: str, name: str, path: Path) -> tuple[int, int]:
    begin, end = BEGIN.format(name=name), END.format(name=name)
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{path}: expected one '{begin}' followed by one '{end}'")
    return text.index(begin) + len(begin), text.index(end)


def current(name: str, root: Path = ROOT) -> str:
    """The text of part ``name`` as the document holds it now."""
    path = root / PARTS[name][0]
    text = path.read_text(encoding="utf-8")
    start, stop = _span(text, name, path)
    return text[start:stop].strip("\n")


def render(report: dict, claims: list[Claim] | None = None) -> dict[str, str]:
    """Every part, written from ``report`` (a parsed report.json) and the registered claims."""
    claims = all_claims() if claims is None else claims
    return {name: write(report, claims).strip("\n") for name, (_, write) in PARTS.items()}


def update(report: dict, root: Path = ROOT, check: bool = False) -> list[str]:
    """Rewrite every part in its document (or, with ``check``, leave them); return the names of the parts that
    differed."""
    changed = []
    for name, text in render(report).items():
        path = root / PARTS[name][0]
        old = path.read_text(encoding="utf-8")
        start, stop = _span(old, name, path)
        if old[start:stop].strip("\n") != text:
            changed.append(name)
            if not check:
                path.write_text(old[:start] + "\n" + text + "\n" + old[stop:], encoding="utf-8")
    return changed


NUMBER = re.compile(r"[+−-]?\d+(?:[.,]\d+)*(?:e[+−-]?\d+)?")


def same_text(committed: str, regenerated: str, rel: float, floor: float) -> list[str]:
    """Where ``committed`` and ``regenerated`` differ: their words must be equal and each number must agree within
    ``rel`` of the larger or ``floor`` absolute (the numbers of trained models move in their last printed digits
    across CPU models' BLAS kernels). Returns one line per difference, empty when they agree."""
    words = [NUMBER.split(t) for t in (committed, regenerated)]
    if words[0] != words[1]:
        a, b = committed.splitlines(), regenerated.splitlines()
        line = next((i for i, (x, y) in enumerate(zip(a, b)) if NUMBER.split(x) != NUMBER.split(y)), min(len(a), len(b)))
        return [f"line {line + 1}: {a[line] if line < len(a) else '(none)'!r} ≠ "
                f"{b[line] if line < len(b) else '(none)'!r}"]
    out = []
    for x, y in zip(*(NUMBER.findall(t) for t in (committed, regenerated))):
        if x.count(".") > 1 or y.count(".") > 1:  # a section number (Sec. 4.1.1): a label, equal or not
            if x != y:
                out.append(f"{x} ≠ {y}")
            continue
        u, v = (float(s.replace("−", "-").replace(",", "")) for s in (x, y))
        if abs(u - v) > max(floor, rel * max(abs(u), abs(v))):
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
