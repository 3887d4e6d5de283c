"""The audit's outputs: the terminal table, ``report.md`` and ``report.json``."""
from __future__ import annotations

import json
import platform
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

from verify.runner import Outcome

COLUMNS = ("id", "reference", "measured quantity", "measured", "expected", "verdict")


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """Counts of verdicts and the ids whose measured verdict differs from the expected one."""
    counts = Counter(o.verdict for o in outcomes)
    return {
        "claims": len(outcomes),
        "verdicts": {v: counts.get(v, 0) for v in ("holds", "fails", "loose", "inconclusive", "error")},
        "mismatches": [o.claim.id for o in outcomes if not o.matches],
        "seconds": round(sum(o.seconds for o in outcomes), 2),
    }


def _verdict_cell(o: Outcome) -> str:
    return o.verdict if o.matches else f"{o.verdict} (expected {o.claim.expected_verdict})"


def _row(o: Outcome) -> tuple[str, ...]:
    measured = o.result.measured if o.result else (o.error or "").strip().splitlines()[-1]
    return (o.claim.id, o.claim.reference, o.claim.measures, measured, o.claim.expected, _verdict_cell(o))


def format_table(outcomes: list[Outcome], widths: tuple[int, ...] = (22, 26, 34, 30, 34, 24)) -> str:
    """A fixed-width text table for the terminal; long cells wrap within their column."""
    def render(cells: tuple[str, ...]) -> list[str]:
        wrapped = [textwrap.wrap(str(c), w) or [""] for c, w in zip(cells, widths)]
        height = max(len(w) for w in wrapped)
        return [
            " | ".join((w[i] if i < len(w) else "").ljust(width) for w, width in zip(wrapped, widths)).rstrip()
            for i in range(height)
        ]

    rule = "-+-".join("-" * w for w in widths)
    lines = render(COLUMNS) + [rule]
    for o in outcomes:
        lines += render(_row(o))
    return "\n".join(lines)


def format_summary(outcomes: list[Outcome]) -> str:
    s = summary(outcomes)
    v = s["verdicts"]
    text = (
        f"{s['claims']} claims: {v['holds']} hold, {v['loose']} loose, {v['fails']} fail, "
        f"{v['inconclusive']} inconclusive, {v['error']} raised; "
        f"{s['claims'] - len(s['mismatches'])}/{s['claims']} as expected ({s['seconds']:.1f} s measuring)"
    )
    if s["mismatches"]:
        text += "\nverdict differs from its expectation (or raised): " + ", ".join(s["mismatches"])
    return text


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _why(claim) -> str:
    """The claim's explanation of its expected outcome: the part of ``expected`` from "Expected to …" on, else all."""
    text = claim.expected
    at = text.lower().find("expected to")
    return text[at:] if at >= 0 else text


def _summary_line(o: Outcome, why: bool, statement: bool = True) -> str:
    c = o.claim
    figure = f" ([figure]({o.figures[0]}))" if o.figures else ""
    measured = o.result.measured if o.result else "raised"
    reason = f" — {_md_escape(_why(c))}" if why else ""
    said = f" · {_md_escape(c.statement)}" if statement else ""
    return f"- **{c.id}**{said} → {_md_escape(measured)}{figure}{reason}"


def summary_page(outcomes: list[Outcome], meta: dict[str, Any]) -> list[str]:
    """The one-page summary report.md opens with: the layer-wise claims (does a CRATE layer compress?) first, then
    every other claim grouped by verdict, failures and loose bounds with their explanation and figure."""
    layers = [o for o in outcomes if "layers" in o.claim.tags]
    rest = [o for o in outcomes if "layers" not in o.claim.tags]
    lines = ["## Summary", "", "### Does a CRATE layer compress? (Sec. 4.2, Figs. 14–17)", "",
             "Measured scale-free (R^c against isotropic tokens of the same norms, own-subspace energy, the authors'",
             "per-head normalisation) and against controls, over seeds with 95% intervals (verify.statistics).", ""]
    lines += [_summary_line(o, why=o.verdict != "holds") for o in layers]
    for verdict, title in (("fails", "Fail"), ("inconclusive", "Inconclusive"), ("loose", "Loose"), ("error", "Raised"),
                           ("holds", "Hold")):
        group = [o for o in rest if o.verdict == verdict]
        if group:
            lines += ["", f"### {title} ({len(group)})", ""]
            lines += [_summary_line(o, why=verdict in ("fails", "loose", "inconclusive"), statement=verdict != "holds")
                      for o in group]
    if meta.get("not_run_in_this_mode"):
        lines += ["", f"Not measured in `{meta['mode']}` mode (run `python -m verify --full`): "
                  + ", ".join(meta["not_run_in_this_mode"]) + "."]
    return lines + [""]


def write_markdown(path: Path, outcomes: list[Outcome], meta: dict[str, Any]) -> None:
    """``report.md``: the one-page summary, the full table, then one section per claim with its statement and
    figures."""
    lines = [
        "# CRATE derivation audit",
        "",
        f"Mode `{meta['mode']}`, seed {meta['seed']}, {meta['started']} — `{meta['command']}`.",
        "",
        format_summary(outcomes).replace("\n", "  \n"),
        "",
        "Verdicts: **holds** = confirmed; **fails** = contradicted by the measurement; **loose** = true, with a bound",
        "the data beat by a wide margin; **inconclusive** = a comparison whose 95% interval over seeds contains its",
        "boundary. Each claim states the verdict its analysis expects (paper-notes §2);",
        "a verdict marked *(expected …)* differs from it.",
        "",
        *summary_page(outcomes, meta),
        "## All claims",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(_md_escape(c) for c in _row(o)) + " |" for o in outcomes]
    lines.append("")
    for o in outcomes:
        c = o.claim
        lines += [
            f"## {c.id} — {_verdict_cell(o)}",
            "",
            f"*{c.reference}* · tags: {', '.join(c.tags)} · {o.seconds:.2f} s",
            "",
            f"**Statement.** {c.statement}",
            "",
            f"**Measured.** {c.measures}: {o.result.measured if o.result else '—'}",
            "",
            f"**Expected.** {c.expected} (expected verdict: `{c.expected_verdict}`)",
            "",
        ]
        lines += [f"![{c.id}]({f})" for f in o.figures]
        if o.error:
            lines += ["```", o.error.rstrip(), "```"]
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def write_json(path: Path, outcomes: list[Outcome], meta: dict[str, Any]) -> None:
    """``report.json``: ``{"claims": [...], "summary": {...}, "meta": {...}}``."""
    meta = {**meta, "python": platform.python_version(), "platform": platform.platform()}
    doc = {"claims": [o.to_json() for o in outcomes], "summary": summary(outcomes), "meta": meta}
    path.write_text(json.dumps(doc, indent=2, default=_json_default), encoding="utf-8")


def _json_default(value: Any) -> Any:
    """numpy scalars and arrays → Python numbers and lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"report.json: cannot serialise {type(value).__name__}")
