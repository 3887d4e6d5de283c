"""The audit's outputs — the console summary, the full table, ``report.md`` and ``report.json`` — and the network
audit's (``python -m verify.network``): the one place a report of the audit is written and escaped.

Every claim says what it tests (its scope, `verify.registry.SCOPES`): the papers' statement as printed, the papers'
statement at their protocol replicated at laptop scale, or a probe of the audit's own. The headline counts verdicts
per scope, the papers' statements first: only a `fails` of the papers' statements is an error of the papers; a
replication's `fails` does not replicate at its scale, a probe's `fails` is a finding of the audit.

``report.md`` opens with the headline, then the summary a reader of the papers takes in at a glance: the central
question "do CRATE layers compress?" under each protocol (`LAYERS_COMPRESS`) and one row per substantive statement
of the papers (`PAPER_CLAIMS`), then where the stored verdicts come from (`provenance`: each replication's recording
code and last re-check, in words), the detail (every claim as one bullet with its verdict, grouped by scope), the
full table and one section per claim. A stale verdict (its replication's last re-check failed) is shown, marked,
and left out of every count. The console gets the headline and the summary; ``python -m verify --table``
adds the full table.

A network audit's report (`write_network`, into the folder `ReportFolder` holds) opens with its conclusion
(`network_conclusion`: does the network compress and sparsify, and against what), then every row of the layer-wise
family decided on it (`verify.layerwise.Decision`: a row and its `verify.registry.Result`) with its rule and
numbers, the per-layer means and R^c per head (`network_markdown`); beside it ``report.json``, ``values.npz`` (every
measure per input and layer of every network), ``layers.csv`` (per-layer means, per head for R^c) and the figures
(`network_figures`); the console gets every verdict (`network_console`).
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

from crate_nn.analysis.diagnostics import THRESHOLDS
from crate_nn.preprocessing import channel_count
from verify.errata import command as errata_command
from verify.layerwise import SHOWN, criterion, statement
from verify.registry import ERROR_KINDS, KINDS, PROVENANCES, SCOPES, SOURCES, VERDICTS, errors_of_kind
from verify.runner import NOT_MEASURED, Outcome

COUNTED = (*VERDICTS, "error")
"""The verdicts the report counts: the claims' own, and ``error`` for a measurement that raised."""
SEED_SENSITIVE = "seed-sensitive"
"""What the counts call a claim whose expectation is a band of verdicts (`verify.registry.Band`) and whose verdict
lies in it: counted apart from the verdicts, whichever of its band this run gave, so that the counts say the same
on every processor and at every base seed."""
SEED_MARK = "~"
"""Marks the verdict of a seed-sensitive claim in every view: one verdict of its band, which another base seed or
processor may move to another."""
PLURAL = {"holds": "hold", "fails": "fail", "loose": "loose", "inconclusive": "inconclusive", "error": "raised",
          SEED_SENSITIVE: SEED_SENSITIVE}
DETAIL_ORDER = ("fails", "inconclusive", "loose", "error", "holds", NOT_MEASURED)
"""Order of the bullets within each scope in the detail: what contradicts the statement first."""
FAILS_READ = {"paper": "errors of the papers", "replication": "do not replicate at their scale",
              "probe": "findings of the audit", "versions": "differences between the versions"}
"""What a ``fails`` means in each scope (plural, for the headline)."""
FAIL_READ = {"paper": "error of the papers", "replication": "does not replicate at this scale",
             "probe": "finding of the audit", "versions": "a difference between the versions"}
"""The same for one claim (the detail's bullets)."""
UNCLASSIFIED = "unclassified"
"""The kind of an error of the papers whose claim names none: a paper claim that fails where it was expected to
hold (`verify.registry.ERROR_KINDS` are the others)."""

PAPERS = ("Sources: " + "; ".join(f"*{label}*: {work}" for label, work in SOURCES.items())
          + ". Each claim quotes the statement it tests and gives its location; docs/papers.md indexes them.")

PAPERS_SCALE = ("The built-in runs are laptop scale (3 layers, 5 tokens, 8×8 digits; CRATE-GPT: 2 layers); the papers' "
                "scale (12 layers, 197 tokens, ImageNet) is not measured by them: `python -m verify.network` answers "
                "it for any checkpoint you have.")
"""What the central question's answer covers, and how to answer it at the papers' scale (every view says it)."""

LAYERS_COMPRESS = (
    ("digits CRATE (Fig. 15)", ("fig15-digits-official", "fig15-digits-paper", "fig15-digits-joint")),
    ("Fig. 15, end of training", ("fig15-digits-end-official", "fig15-digits-end-paper", None)),
    ("Fig. 21, depth", ("fig21-digits-depth-official", "fig21-digits-depth-paper", None)),
    ("CRATE-GPT", ("fig15-gpt-compression-official", "fig15-gpt-compression-paper", "fig15-gpt-joint")),
)
"""The central question, "do CRATE layers compress?", for each model: the claims that answer it under the authors'
per-head-normalised protocol, under the paper's formula (eq. (13) as printed, unnormalised) and under the joint rule
(`verify.joint`, compression told apart from collapse; None where the model has no joint claim)."""
PROTOCOLS = ("authors' protocol", "paper's formula", "joint rule")

PAPER_CLAIMS = (
    ("MSSA step descends R^c (Approx. 9)", ("approx9-cosine",)),
    ("… attention term beats βZ (control)", ("approx9-attention-term",)),
    ("R^c gradient step ≈ denoising (Th. 16)", ("thm16-nominal-floor",)),
    ("−∇R^c/σ² points along the score (432)", ("eq432-rc-as-score",)),
    ("−∇R^c/σ² has the score's size (432)", ("eq432-score-scale",)),
    ("Remark 7 inverse at the models' η 0.1", ("remark7-presets-at-eta-0.1",)),
    ("… in a trained CRATE-MAE (Fig. 10)", ("fig10-mae-roundtrip",)),
    ("ideal CRATE compresses layer by layer", ("sec2.5-ideal-compression",)),
    ("… crediting attention over ISTA alone", ("eq45-ideal-attention-credit",)),
    ("trained sparser than init (Fig. 15)", ("fig15-digits-sparsity",)),
    ("random init is flat (Fig. 15)", ("fig15-random-init-flat",)),
    ("DINO k-NN beats its init (Table 4)", ("table4-dino-knn", "table4-dino-knn-short")),
    ("ISTA lowers CRATE-GPT's loss (T. 16)", ("table16-gpt-without-ista",)),
    ("CRATE attention segments > ViT (T. 17)", ("table17-attention",)),
    ("MaskCut on CRATE > on ViT (T. 7, 17)", ("table17-maskcut",)),
)
"""The summary's rows: a substantive statement of the papers (not an identity or a printed number) and the claims
that test it most directly — the first one measured in this run answers the row (the quick and the full mode may
measure it under different ids). The layer-wise compression rows are `LAYERS_COMPRESS`."""

SUMMARY_WIDTHS = (38, 16, 48, 7, 3)
"""Console widths of the summary's columns (statement, verdict, number, scope, seeds): 120 columns in all."""
COLUMNS = ("id", "scope", "location", "measured quantity", "measured", "expected", "verdict")
SCOPE_SHORT = {"paper": "paper", "replication": "repl.", "probe": "probe", "versions": "vers.", None: "—"}


def _find(outcomes: list[Outcome], claim_id: str | None) -> Outcome | None:
    """The outcome of the claim named ``claim_id`` (its id or a former one), if it was measured."""
    if claim_id is None:
        return None
    return next((o for o in outcomes if claim_id == o.claim.id or claim_id in o.claim.formerly), None)


def summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """Counts of verdicts (all, per scope and per kind), the as-expected counts per provenance, and the ids whose
    measured verdict differs from the expected one; how many verdicts were read from stored runs (``stored``), the
    stored claims not re-measured at this base seed (``not_re_measured``) and the stale ones (``stale``: their
    replication's last re-check failed), both left out of every count."""
    skipped = [o for o in outcomes if o.skipped]
    stale = [o for o in outcomes if o.stale]
    outcomes = [o for o in outcomes if o.counted]

    def tally(group: list[Outcome]) -> dict[str, Any]:
        per = Counter(SEED_SENSITIVE if o.seed_sensitive and o.matches else o.verdict for o in group)
        return {"claims": len(group), **{v: per.get(v, 0) for v in (*COUNTED, SEED_SENSITIVE)},
                "as_expected": {p: sum(o.matches and o.claim.provenance == p for o in group) for p in PROVENANCES},
                "stored": sum(o.stored is not None for o in group)}

    by_kind = {kind: tally([o for o in outcomes if o.claim.kind == kind]) for kind in KINDS}
    found = {
        "claims": len(outcomes),
        "verdicts": {v: sum(k[v] for k in by_kind.values()) for v in (*COUNTED, SEED_SENSITIVE)},
        "by_scope": {scope: tally([o for o in outcomes if o.claim.scope == scope]) for scope in SCOPES},
        "by_kind": by_kind,
        "as_expected": {p: sum(k["as_expected"][p] for k in by_kind.values()) for p in PROVENANCES},
        "mismatches": [o.claim.id for o in outcomes if not o.matches],
        "seed_sensitive": [{"id": o.claim.id, "band": list(o.band.verdicts), "verdict": o.verdict}
                           for o in outcomes if o.seed_sensitive],
        "errors_of_the_papers": [o.claim.id for o in outcomes if o.claim.scope == "paper" and o.verdict == "fails"],
        "errors_by_kind": errors_by_kind(outcomes),
        "seconds": round(sum(o.seconds for o in outcomes), 2),
        "stored": sum(o.stored is not None for o in outcomes),
        "not_re_measured": [o.claim.id for o in skipped],
        "stale": [o.claim.id for o in stale],
    }
    layers = [(protocol, SEED_SENSITIVE if o.seed_sensitive and o.matches else o.verdict)
              for protocol, o in layers_outcomes(outcomes, every=True)]
    return found | {"answer": answer(found, layers)}


ANSWER_WORDS = {"holds": "hold", "loose": "hold loosely", "fails": "fail", "inconclusive": "are inconclusive",
                "error": "raised", SEED_SENSITIVE: "are seed-sensitive"}
"""How `answer` reads each count (``3 hold, 1 is inconclusive``)."""


def _told(counts: dict[str, int], order: tuple[str, ...], total: int | None = None, fails: str = "fail") -> str:
    """``52 hold, 2 hold loosely and 10 fail`` (``4 of 4 hold`` with ``total``) from counts by verdict, in ``order``."""
    parts = []
    for v in order:
        n = counts.get(v, 0)
        if n:
            word = fails if v == "fails" else ANSWER_WORDS[v]
            if n == 1 and word.startswith("are "):
                word = "is " + word[4:]
            parts.append(f"{n}{f' of {total}' if total is not None and not parts else ''} {word}")
    return (", ".join(parts[:-1]) + " and " + parts[-1]) if len(parts) > 1 else (parts[0] if parts else "none")


def answer(found: dict[str, Any], layers: list[tuple[str, str]]) -> list[str]:
    """The audit's answer in three sentences, from `summary`'s counts (``found``) and the central question's verdicts
    (``layers``: (protocol, verdict) per claim): what of the papers' statements fails, and of what kind; whether the
    trained CRATEs' layers compress under each reading; how the replications and the audit's probes came out. Every
    number in them is a count, the same on every processor and base seed (seed-sensitive claims counted apart)."""
    order = ("holds", "loose", "fails", "inconclusive", SEED_SENSITIVE, "error")
    paper, replication, probe = (found["by_scope"][s] for s in ("paper", "replication", "probe"))
    by_kind = {kind: ids for kind, ids in found["errors_by_kind"].items() if ids}
    errors = " and ".join(errors_of_kind(kind, len(ids)) + (f" ({', '.join(ids)})" if kind != "erratum" else "")
                          for kind, ids in by_kind.items())
    first = (f"Of the papers' {paper['claims']} statements checked as printed, {_told(paper, order)}"
             + (f": {errors}." if errors and paper["fails"] else "."))
    readings = []
    for protocol, name in zip(PROTOCOLS, ("the authors' protocol", "the paper's formula as printed",
                                          "the joint rule (compression told from collapse)")):
        seen = Counter(v for q, v in layers if q == protocol)
        if seen:
            readings.append(f"under {name}, {_told(seen, order, sum(seen.values()))}")
    second = ("Do the trained CRATEs' layers compress? At laptop scale, " + "; ".join(readings) + " — the papers' "
              "scale is answered per checkpoint by `python -m verify.network`.")
    third = (f"Of the {replication['claims']} replications at laptop scale, "
             f"{_told(replication, order, fails='do not replicate')}; the audit's {probe['claims']} probes of its own "
             f"(controls, stricter readings) give {probe['fails']} findings.")
    return [first, second, third]


def errors_by_kind(outcomes: list[Outcome]) -> dict[str, list[str]]:
    """The errors of the papers (the papers' statements that fail) by kind (`verify.registry.ERROR_KINDS`, then
    `UNCLASSIFIED` where a claim names none): kind → ids, each kind present even when empty but `UNCLASSIFIED`."""
    failing = [o.claim for o in outcomes if o.claim.scope == "paper" and o.verdict == "fails"]
    found = {kind: [c.id for c in failing if c.error_kind == kind] for kind in ERROR_KINDS}
    unclassified = [c.id for c in failing if c.error_kind not in ERROR_KINDS]
    return found | ({UNCLASSIFIED: unclassified} if unclassified else {})


def kinds_text(by_kind: dict[str, list]) -> str:
    """``7 errata, 2 substantive`` (and ``1 unclassified``) from `errors_by_kind`: the kinds with an error, each
    count in `verify.registry.errors_of_kind`'s words without the word "error" (a count inside "errors of the
    papers: …")."""
    return ", ".join(errors_of_kind(kind, len(ids)).removesuffix(" errors").removesuffix(" error")
                     for kind, ids in by_kind.items() if ids)


def _counts(verdicts: dict[str, int], scope: str | None = None, by_kind: dict[str, list] | None = None) -> str:
    """``N hold, M fail (<what a fail means in this scope>), …``; the papers' failing statements split by kind of
    error (``by_kind``, `errors_by_kind`). How many were read from stored runs the headline's next lines say, in all
    (report.json's ``by_scope`` keeps them per scope)."""
    parts = []
    for v in COUNTED:
        if v == "fails" and scope == "paper" and by_kind is not None and verdicts[v]:
            parts.append(f"{verdicts[v]} fail ({FAILS_READ[scope]}: {kinds_text(by_kind)})")
        elif v == "fails" and scope in FAILS_READ:
            parts.append(f"{verdicts[v]} fail ({FAILS_READ[scope]})")
        elif verdicts[v] or v in ("holds", "fails"):
            parts.append(f"{verdicts[v]} {PLURAL[v]}")
    if verdicts.get(SEED_SENSITIVE):
        parts.append(f"{verdicts[SEED_SENSITIVE]} {SEED_SENSITIVE}")
    return ", ".join(parts)


def format_summary(outcomes: list[Outcome]) -> str:
    """The headline: the verdicts of each scope, the papers' statements first, then how many came out as expected
    by analysis and by measurement; each line wrapped at 120 columns (the console's width), continued indented."""
    s = summary(outcomes)
    lines = [textwrap.fill(f"{SCOPES[scope][0][0].upper() + SCOPES[scope][0][1:]} ({k['claims']}): "
                           f"{_counts(k, scope, s['errors_by_kind'])}", 120, subsequent_indent="  ",
                           break_on_hyphens=False)
             for scope, k in s["by_scope"].items() if k["claims"]]
    matched = s["claims"] - len(s["mismatches"])
    lines.append(textwrap.fill(f"{matched}/{s['claims']} claims as expected: {s['as_expected']['analysis']} by "
                               f"analysis, {s['as_expected']['measurement']} by measurement (for those a regression "
                               f"check only); {s['seconds']:.1f} s measuring", 120, subsequent_indent="  "))
    text = "\n".join(lines)
    if s["mismatches"]:
        text += "\n" + textwrap.fill("verdict differs from its expectation (or raised): " + ", ".join(s["mismatches"]),
                                     120, break_on_hyphens=False)
    return text


def band_line(seed_sensitive: list[dict]) -> str:
    """The headline's sentence on the seed-sensitive claims (`summary`'s ``seed_sensitive``): each with its band and
    this run's verdict."""
    return (f"{SEED_SENSITIVE[0].upper() + SEED_SENSITIVE[1:]} ({SEED_MARK}: the verdict moves within a band seen over "
            "base seeds and perturbed trainings, counted apart): "
            + "; ".join(f"{e['id']} {' or '.join(e['band'])} (now {e['verdict']})" for e in seed_sensitive) + ".")


def _scope_rows(outcomes: list[Outcome]) -> list[tuple[str, ...]]:
    rows = []
    for scope, k in summary(outcomes)["by_scope"].items():
        if k["claims"]:
            rows.append((SCOPES[scope][0], str(k["claims"]), *(str(k[v]) for v in (*COUNTED, SEED_SENSITIVE)),
                         f"{k['as_expected']['analysis']} / {k['as_expected']['measurement']}"))
    return rows


SCOPE_HEADER = ("scope", "claims", *(PLURAL[v] for v in (*COUNTED, SEED_SENSITIVE)),
                "as expected: analysis / measurement")


STORED_MARK = "†"
"""Marks a verdict read from a committed replication's stored runs (`Outcome.stored`) in every view."""
STALE = "stale"
"""Marks a stored verdict whose replication's last re-check failed (`verify.runner.Outcome.stale`)."""


def stored_lines(outcomes: list[Outcome]) -> list[str]:
    """The headline's sentences on stored verdicts (unwrapped): how many were read from stored runs, how many are
    stale (their replication's last re-check failed), and the stored claims not re-measured at this base seed (by
    the base seed their replications were recorded at)."""
    lines = []
    stored = [o for o in outcomes if o.stored and o.counted]
    if stored:
        names = ", ".join(dict.fromkeys(o.stored for o in stored))
        lines.append(f"{len(stored)} verdicts {STORED_MARK} read from stored runs, not measured now (results/: "
                     f"{names}; report.md says below its summary which code recorded each and when it was last "
                     "re-checked).")
    stale = [o for o in outcomes if o.stale]
    if stale:
        names = ", ".join(dict.fromkeys(o.stored for o in stale))
        lines.append(f"{len(stale)} stored verdicts {STALE} (not counted): the last re-check of {names} failed, "
                     f"today's code no longer trains what it stores (python -m verify.record --check NAME).")
    by_seed: dict[int, list[Outcome]] = {}
    for o in outcomes:
        if o.skipped:
            by_seed.setdefault(o.recorded_seed, []).append(o)
    for recorded, group in by_seed.items():
        names = ", ".join(dict.fromkeys(o.stored for o in group))
        lines.append(f"{len(group)} stored claims {NOT_MEASURED} (not counted): recorded at base seed {recorded} only "
                     f"(re-record: python -m verify.record NAME --seed {group[0].seed}, NAME in {names}).")
    return lines


def provenance(meta: dict[str, Any], outcomes: list[Outcome]) -> list[str]:
    """report.md's section, below the summary, on the committed replications read in this run
    (``meta["replications"]``), one sentence each in plain words: its file and runs, when and by which commit it was
    recorded, in how many crate_nn files today's code differs from that, and its last re-check — when, by which
    code, what it found; a replication never re-checked, or whose check failed (its verdicts stale), is marked."""
    reps = meta.get("replications") or []
    if not reps:
        return []
    lines = ["## Stored runs", "",
             f"Verdicts marked {STORED_MARK} are decided from the committed runs of these replications, not measured "
             "now. Each file is sealed (its SHA-256, checked when read, in report.json) and names the code that "
             "trained it; `python -m verify.record --check NAME` re-trains a sample of it with today's code and "
             "compares it with the stored seeds (docs/audit.md).", ""]
    for r in reps:
        if "error" in r:
            lines += [f"- **{r['name']}** (`{r['file']}`): refused — {md_escape(r['error'])}"]
            continue
        verdicts = sum(o.stored == r["name"] for o in outcomes)
        files = [f for f in r["files_differing"] if " → " not in f]
        torch = [f for f in r["files_differing"] if " → " in f]
        today = (f"today's crate_nn differs from that code in {len(files)} of {r['files']} files"
                 + "".join(f", and {t}" for t in torch) if r["today_differs"] else "today's code is that code")
        after = ", sealed after recording" if r["sealed_after_recording"] else ""
        lines.append(f"- **{r['name']}** (`{r['file']}`: {r['runs']} runs at base seed {r['base_seed']}, "
                     f"{verdicts} verdict{'' if verdicts == 1 else 's'} here): recorded {r['recorded'][:10]} by "
                     f"commit `{(r['commit'] or '—')[:12]}`{after}; {today}. {_checked(r['name'], r['check'])}")
    return lines + [""]


def _checked(name: str, check: dict) -> str:
    """A replication's last re-check in words (`verify.committed.Replication.check`)."""
    state = check["state"]
    if state == "never":
        return (f"**Never re-checked**{' (' + check['note'] + ')' if check.get('note') else ''}: "
                f"`python -m verify.record --check {name}`.")
    if state == "refused":
        return f"**Check file refused**: {md_escape(check['error'])}."
    by = ("today's code" if not check["files_differing"] else
          f"{check['files_differing']} crate_nn files differ from it today")
    counts = check["counts"]
    found = (f"{check['runs']} sampled runs re-run, {check['quantities']} quantities compared, "
             f"{counts['reproduced']} reproduced exactly, {counts['outside 95%']} outside their 95% interval")
    if state == "passed":
        return (f"Re-checked {check['checked'][:10]} by commit `{(check['commit'] or '—')[:12]}` ({by}): passed — "
                f"{found}, none moved.")
    moved = check["moved"]
    return (f"**Check failed** {check['checked'][:10]} by commit `{(check['commit'] or '—')[:12]}` ({by}): "
            f"{len(moved)} quantities moved ({md_escape('; '.join(moved[:3]))}{'; …' if len(moved) > 3 else ''}); "
            f"{found}. Its verdicts are **{STALE}**, left out of the counts.")


def _kind_rows(outcomes: list[Outcome]) -> list[tuple[str, ...]]:
    rows = []
    for kind, k in summary(outcomes)["by_kind"].items():
        if k["claims"]:
            rows.append((KINDS[kind][0], str(k["claims"]), *(str(k[v]) for v in (*COUNTED, SEED_SENSITIVE)),
                         f"{k['as_expected']['analysis']} / {k['as_expected']['measurement']}"))
    return rows


KIND_HEADER = ("kind of check", "claims", *(PLURAL[v] for v in (*COUNTED, SEED_SENSITIVE)),
               "as expected: analysis / measurement")


def _verdict_cell(o: Outcome, expected: str = "expected ") -> str:
    text = o.verdict if o.matches or not o.counted else f"{o.verdict} ({expected}{o.expected_verdict})"
    return (text + (SEED_MARK if o.seed_sensitive and o.matches else "") + (STORED_MARK if o.stored else "")
            + (f" ({STALE})" if o.stale else ""))


def _measured(o: Outcome) -> str:
    """The measured line of an outcome; for a claim not re-measured, why; "raised" for an error."""
    return o.result.measured if o.result else (o.skipped or "raised")


def _fit(text: str, width: int) -> str:
    """``text`` shortened to ``width`` without cutting a bracketed interval: a cut inside one moves before it."""
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    if cut.count("[") > cut.count("]"):
        cut = cut[: cut.rindex("[")].rstrip()
    return cut + "…"


def _shorten(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def paper_rows(outcomes: list[Outcome]) -> list[tuple[str, Outcome]]:
    """The summary's rows measured in this run: (the papers' statement, the outcome of the claim that answers it)."""
    rows = []
    for said, ids in PAPER_CLAIMS:
        measured = [o for o in (_find(outcomes, i) for i in ids) if o is not None]
        if measured:
            rows.append((said, measured[0]))
    return rows


def _summary_cells(said: str, o: Outcome, width: int, expected: str = "expected ") -> tuple[str, ...]:
    """(statement, verdict, number, scope, seeds) of a summary row; the number is the claim's headline, or its
    measured line shortened to ``width`` where the claim sets none; ``expected`` introduces a differing
    expectation."""
    headline = o.result.headline if o.result else None
    if headline is not None:  # the label is shortened, the numbers never
        numbers = headline.text()[len(headline.label):]
        number, seeds = _shorten(headline.label, max(width - len(numbers), 2)) + numbers, str(headline.seeds or "—")
    else:
        number, seeds = _fit(o.skipped.split(" (")[0] if o.skipped else _measured(o), width), "—"
    return said, _verdict_cell(o, expected), number, SCOPE_SHORT[o.claim.scope], seeds


def last_layer(data: dict | None) -> dict:
    """The last layer's judgement in a joint claim's data (`verify.joint.Judgement.as_dict` per layer), {} where
    there is none."""
    layers = (data or {}).get("per_layer") or []
    return layers[-1] if layers and isinstance(layers[-1], dict) else {}


def delta_r(data: dict | None) -> str:
    """ΔR = R − R^c (the papers' objective) at a joint claim's last layer, A − B with its 95% interval, from its
    data; "not stored" where the profiles predate it."""
    d = last_layer(data).get("rate_reduction")
    return f"{d['mean']:+.2g} [{d['ci_low']:.2g}, {d['ci_high']:.2g}]" if d else "not stored"


def _data(o: Outcome | None) -> dict | None:
    return o.result.data if o is not None and o.result else None


def _joint_cell(o: Outcome) -> str:
    """A joint claim's verdict and its last layer's label (`verify.joint`), e.g. ``fails: ℓ 3 collapse``, marked
    ``(apart)`` where footnote 17 exempts the last layer from the verdict."""
    judged = last_layer(_data(o))
    depth = len(_data(o).get("per_layer", [])) if _data(o) else 0
    apart = " (apart)" if (_data(o) or {}).get("exempt_last") else ""
    return _verdict_cell(o, "≠") + (f": ℓ {depth} {judged['label']}{apart}" if judged.get("label") else "")


def _scoped(cell: str, o: Outcome) -> str:
    """A central-question cell with the scope of the claim that answers it: ``holds (repl.)``."""
    return f"{cell} ({SCOPE_SHORT[o.claim.scope]})"


def layers_compress_rows(outcomes: list[Outcome], setting: bool = False) -> list[tuple[str, ...]]:
    """The central question's rows measured in this run: (model, then per protocol the verdict of the claim that
    answers it with that claim's scope, "—" where none was measured, and ΔR at the last layer beside the joint rule;
    with ``setting``, the setting of the row's first claim last)."""
    rows = []
    for model, ids in LAYERS_COMPRESS:
        found = [_find(outcomes, i) for i in ids]
        if not any(found):
            continue
        cells = ["—" if o is None else _scoped(_joint_cell(o) if i == 2 else _verdict_cell(o, "≠"), o)
                 for i, o in enumerate(found)]
        first = next(o for o in found if o is not None)
        rows.append((model, *cells, delta_r(_data(found[2])) if found[2] else "—")
                    + ((first.claim.setting or "—",) if setting else ()))
    return rows


def layers_tally(scopes_and_verdicts) -> str:
    """The central question's verdicts counted per protocol and scope, from (protocol, scope, verdict) triples:
    ``authors' protocol: 3 hold (replications), 1 hold (probes); …``."""
    tally: dict[str, dict[str, Counter]] = {}
    for protocol, scope, verdict in scopes_and_verdicts:
        tally.setdefault(protocol, {}).setdefault(scope, Counter())[verdict] += 1
    return "; ".join(f"{protocol}: " + ", ".join(
        ", ".join(f"{n} {PLURAL.get(v, v)}" for v, n in sorted(counts.items())) + f" ({SCOPE_PLURAL.get(scope, scope)})"
        for scope, counts in by_scope.items()) for protocol, by_scope in tally.items())


def layers_outcomes(outcomes: list[Outcome], every: bool = False):
    """(protocol, scope, verdict) of every central-question claim measured in this run; with ``every``, (protocol,
    outcome) instead."""
    for _, ids in LAYERS_COMPRESS:
        for protocol, claim_id in zip(PROTOCOLS, ids):
            o = _find(outcomes, claim_id)
            if o is not None:
                yield (protocol, o) if every else (protocol, o.claim.scope, o.verdict)


SCOPE_PLURAL = {"paper": "the papers' statements", "replication": "replications", "probe": "probes",
                "versions": "version records"}
LAYERS_HEADER = ("do layers compress?", *PROTOCOLS, "ΔR, last layer")
LAYERS_WIDTHS = (24, 21, 21, 27, 18)


def _text_table(header: tuple[str, ...], rows: list[tuple[str, ...]], widths: tuple[int, ...]) -> list[str]:
    """An aligned plain-text table; each cell cut to its column's width."""
    def line(cells):
        return "  ".join(_shorten(c, w).ljust(w) for c, w in zip(cells, widths)).rstrip()

    return [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def _md_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(md_escape(c) for c in r) + " |" for r in rows])


SUMMARY_HEADER = ("the papers say", "verdict", "number [95% interval]", "scope", "n")


def errors_line(outcomes: list[Outcome]) -> str:
    """``Errors of the papers (…) — 7 errata: …; 3 substantive errors: …``, or "" when none fails."""
    by_kind = summary(outcomes)["errors_by_kind"]
    listed = "; ".join(f"{errors_of_kind(kind, len(ids))}: " + ", ".join(ids) for kind, ids in by_kind.items() if ids)
    return f"Errors of the papers (their statements that fail) — {listed}" if listed else ""


def format_console(outcomes: list[Outcome]) -> str:
    """What ``python -m verify`` prints: the headline (the verdicts per scope), the papers' errors, the central
    question and the summary (≤ 40 lines of ≤ 120 columns; report.md adds the tables per scope and per kind)."""
    lines = [format_summary(outcomes), *(textwrap.fill(t, 120) for t in stored_lines(outcomes))]
    if errors_line(outcomes):
        lines += [""] + textwrap.wrap(errors_line(outcomes), 120, break_on_hyphens=False)
    layers = layers_compress_rows(outcomes)
    if layers:
        lines += [""] + _text_table(LAYERS_HEADER, layers, LAYERS_WIDTHS) + textwrap.wrap(PAPERS_SCALE, 120)
    rows = [_summary_cells(said, o, SUMMARY_WIDTHS[2], "≠") for said, o in paper_rows(outcomes)]
    if rows:
        lines += ["", "The papers' substantive statements (the detail is in report.md):"]
        lines += _text_table(SUMMARY_HEADER, rows, SUMMARY_WIDTHS)
    return "\n".join(lines)


def format_table(outcomes: list[Outcome], widths: tuple[int, ...] = (22, 8, 26, 34, 30, 34, 24)) -> str:
    """The full table (every claim) for a wide terminal (``--table``); long cells wrap within their column."""
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


def _row(o: Outcome) -> tuple[str, ...]:
    measured = _measured(o) if o.result or o.skipped else (o.error or "").strip().splitlines()[-1]
    c = o.claim
    return (c.id, SCOPE_SHORT[c.scope], c.location, c.measures, measured, c.expected, _verdict_cell(o))


def md_escape(text: str) -> str:
    """``text`` as one markdown table cell or line: ``|`` escaped, every run of white space (a line break too) one
    space — the audit's one escaper, for report.md, the network audit's report and the generated documents."""
    return " ".join(str(text).replace("|", "\\|").split())


def _reason(claim) -> str:
    """Why the claim expects what it expects: the part of ``expected`` from "Expected to …" on; else the criterion
    the verdict is computed by, named as such (it states when the claim *would* hold)."""
    text = claim.expected
    at = text.lower().find("expected to")
    return text[at:] if at >= 0 else f"criterion: {text}"


def _bullet(o: Outcome) -> str:
    """One claim in the detail: verdict first (a ``fails`` read in its scope: an error of the papers, does not
    replicate at this scale, a finding of the audit — with its setting), then the statement and the measured
    figure, and for a verdict other than ``holds`` the reason; a printed-number check and an expectation set by
    measurement say so."""
    c = o.claim
    figure = f" ([figure]({o.figures[0]}))" if o.figures else ""
    measured = _measured(o)
    labels = [note for note, on in (("printed-number check", c.kind == "printed"),
                                    ("expected by measurement", c.provenance == "measurement")) if on]
    if o.verdict == "fails" and c.scope in FAIL_READ:
        kind = f", {c.error_kind}" if c.error_kind and c.scope == "paper" else ""
        labels.insert(0, FAIL_READ[c.scope] + kind + (f": {c.setting}" if c.setting else ""))
    label = f" ({'; '.join(labels)})" if labels else ""
    said = "" if o.verdict == "holds" and c.kind == "identity" else f" {md_escape(c.statement)} →"
    reason = "" if o.verdict in ("holds", NOT_MEASURED) else f" — {md_escape(_reason(c))}"
    corrected = (f" — corrected: {md_escape(c.correction)} (witness: `{errata_command(c.id)}`)"
                 if o.verdict == "fails" and c.correction else "")
    return (f"- **{c.id}** — **{_verdict_cell(o)}**{md_escape(label)}:{said} {md_escape(measured)}{figure}{reason}"
            + corrected)


def summary_page(outcomes: list[Outcome]) -> list[str]:
    """The summary: the sources, the central question `LAYERS_COMPRESS` and `PAPER_CLAIMS` as tables (≤ 30
    lines)."""
    layers = layers_compress_rows(outcomes, setting=True)
    rows = [_summary_cells(said, o, 60) + (o.claim.id,) for said, o in paper_rows(outcomes)]
    lines = ["## Summary", "", PAPERS, ""]
    if layers:
        lines += _md_table(LAYERS_HEADER + ("setting of the first claim",), layers) + [""]
        lines += [f"Counted by scope — {layers_tally(layers_outcomes(outcomes))}. {PAPERS_SCALE}", ""]
    lines += _md_table(SUMMARY_HEADER + ("claim",), rows) if rows else ["(none of the summary's claims was measured)"]
    return lines + [""]


def detail_page(outcomes: list[Outcome], meta: dict[str, Any]) -> list[str]:
    """The detail: every claim, grouped by scope, each bullet with its verdict."""
    lines = [
        "## Detail", "",
        "Verdicts: **holds** = confirmed; **fails** = contradicted by the measurement; **loose** = true, with a",
        "bound the data beat by a wide margin; **inconclusive** = a comparison whose 95% interval over seeds",
        "contains its boundary; *(expected …)* marks a verdict that differs from its claim's expectation, and",
        f"{SEED_MARK} a seed-sensitive verdict (one of the band its claim gave over base seeds and perturbed trainings). Each",
        f"expectation is set by *analysis* ({PROVENANCES['analysis']}) or by *measurement*",
        f"({PROVENANCES['measurement']}). {STORED_MARK} marks a verdict read from stored runs (see Stored runs); "
        f"*({STALE})* one whose replication's last re-check failed, not counted.",
    ]
    for scope, (name, description) in SCOPES.items():
        group = sorted((o for o in outcomes if o.claim.scope == scope), key=lambda o: DETAIL_ORDER.index(o.verdict))
        if group:
            counts = Counter(o.verdict if not o.stale else STALE for o in group)
            tally = ", ".join(f"{counts[v]} {PLURAL.get(v, v)}" for v in (*COUNTED, NOT_MEASURED, STALE) if counts[v])
            lines += ["", f"### {name[0].upper() + name[1:]} ({len(group)}: {tally})", "",
                      f"{description[0].upper() + description[1:]}.", ""]
            lines += [_bullet(o) for o in group]
    if meta.get("not_run_in_this_mode"):
        lines += ["", f"Not measured in `{meta['mode']}` mode (run `python -m verify --full`): "
                  + ", ".join(meta["not_run_in_this_mode"]) + "."]
    return lines + [""]


def write_markdown(path: Path, outcomes: list[Outcome], meta: dict[str, Any]) -> None:
    """``report.md``: the headline, the counts per scope and per kind of check, the summary and the detail, the full
    table, then one section per claim with its quoted statement, location and figures."""
    headline = format_summary(outcomes).split("\n")
    lines = [
        "# CRATE derivation audit",
        "",
        f"Mode `{meta['mode']}`, seed {meta['seed']}, {meta['started']} — `{meta['command']}`.",
        "",
        " ".join(summary(outcomes)["answer"]),
        "",
        *[f"**{line}.**" if i < len(headline) - 1 else f"{line}." for i, line in enumerate(headline)],
        "",
        *_md_table(SCOPE_HEADER, _scope_rows(outcomes)),
        "",
        *([errors_line(outcomes) + ".", ""] if errors_line(outcomes) else []),
        *([band_line(summary(outcomes)["seed_sensitive"]), ""] if any(o.seed_sensitive for o in outcomes) else []),
        *(f"{t}\n" for t in stored_lines(outcomes)),
        *_md_table(KIND_HEADER, _kind_rows(outcomes)),
        "",
        *summary_page(outcomes),
        *provenance(meta, outcomes),
        *detail_page(outcomes, meta),
        "## All claims",
        "",
        *_md_table(COLUMNS, [_row(o) for o in outcomes]),
        "",
    ]
    for o in outcomes:
        c = o.claim
        scope = SCOPES[c.scope][0] if c.scope in SCOPES else "no scope"
        lines += [
            f"## {c.id} — {_verdict_cell(o)}",
            "",
            f"*{c.location}* · {scope}" + (f" ({c.setting})" if c.setting else "") + f" · {KINDS[c.kind][0]} · "
            f"tags: {', '.join(c.tags)}" + (f" · formerly {', '.join(c.formerly)}" if c.formerly else "")
            + f" · {o.seconds:.2f} s",
            "",
        ]
        if c.quote:
            lines += [f"> {c.quote}", ""]
        lines += [
            f"**Statement.** {c.statement}",
            "",
            f"**Measured.** {c.measures}: {_measured(o) if o.result or o.skipped else '—'}",
            "",
            f"**Expected.** {c.expected} (expected verdict: `{o.expected_verdict}`"
            + (f", under --full `{c.full_verdict}`" if c.full_verdict and o.mode == "quick" else "")
            + f", set by {c.provenance}: "
            f"{PROVENANCES[c.provenance]})",
            "",
        ]
        if c.error_kind:
            singular, _, description = ERROR_KINDS[c.error_kind]
            lines += [f"**Error of the papers** ({singular}: {description}). Corrected: {c.correction}. Witness: "
                      f"`{errata_command(c.id)}`.", ""]
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


# --------------------------------------------------------------------------------------------- the network audit
NETWORK_NAMES = {"official": "R^c (authors' protocol)", "paper": "R^c (paper, eq. 13)", "rate": "R (eq. 8)",
                 "delta_r": "ΔR = R − R^c (paper)", "sparsity": "‖Z^{ℓ+1}‖₀/(dn)",
                 **{f"above_{tau:g}": f"|Z^{{ℓ+1}}| ≥ {tau:g}" for tau in THRESHOLDS},
                 "specific": "specific R^c (joint)", "alignment": "alignment (joint)", "spread": "spread (joint)",
                 "rate_reduction": "ΔR of unit tokens (joint)"}
"""A network audit's measure → how its report names it (Unicode; the figures' axes: `NETWORK_AXES`)."""
NETWORK_AXES = {"official": r"$R^c$ (authors' protocol)", "paper": r"$R^c$ (paper, eq. 13)", "rate": r"$R$ (eq. 8)",
                "delta_r": r"$\Delta R = R - R^c$ (paper)", "sparsity": r"$\|Z^{\ell+1}\|_0/(dn)$",
                **{f"above_{tau:g}": rf"$|Z^{{\ell+1}}| \geq {tau:g}$" for tau in THRESHOLDS},
                "specific": r"specific $R^c$ (joint)", "alignment": "alignment (joint)", "spread": "spread (joint)",
                "rate_reduction": r"$\Delta R$ of unit tokens (joint)"}
"""Measure → its axis label in the figures, in matplotlib's mathtext (`NETWORK_NAMES`' Unicode with TeX would show
raw)."""
NETWORK_LOCATION = "long version, Sec. 4.2, Figs. 14–15 and footnote 17; App. C.9, Fig. 26"
CONSOLE_HEAD = 3
"""The console's lines above the verdicts (what was audited, the conclusion, the counts); one line per verdict
follows, then the report's path: 4 + the verdicts in all — 7 against random initialisations alone, 4 more per
initialisation or CRATE control, 2 per ViT."""


def _state(verdicts: list[str]) -> str:
    """What a group of verdicts says together: ``yes`` (all hold), ``no`` (all fail), ``mixed`` (some hold, some
    fail) or ``open`` (else: an inconclusive one among them)."""
    if all(v == "holds" for v in verdicts):
        return "yes"
    if all(v == "fails" for v in verdicts):
        return "no"
    return "mixed" if {"holds", "fails"} <= set(verdicts) else "open"


def _clause(decisions, forms: tuple[str, str, str], what: str) -> str:
    """``compresses (R^c from layer 2 to L: holds, holds)``: the verdicts of ``decisions`` as a verb phrase;
    ``forms`` are the phrase when they hold, fail and the verb's base (``is not shown to …``)."""
    verdicts = [d.verdict for d in decisions]
    yes, no, base = forms
    verb = {"yes": yes, "no": no, "mixed": f"{yes} by some measures, not by others",
            "open": f"is not shown to {base}"}[_state(verdicts)]
    return f"{verb} ({what}: {', '.join(verdicts)})"


COMPRESS = ("compresses", "does not compress", "compress")
SPARSIFY = ("sparsifies", "does not sparsify", "sparsify")
COMPRESS_MORE = ("compresses more", "does not compress more", "compress more")
SPARSER = ("is sparser", "is not sparser", "be sparser")


def network_conclusion(decisions, n: int, seeds: int) -> str:
    """The network audit's opening sentence: does this network compress and sparsify, and against what — with depth
    (its layers against each other, over ``n`` inputs), against each control (``seeds`` random initialisations, a
    run's own, a CRATE checkpoint) and against each ViT (Fig. 26) — each part the verdicts it stands on, in order."""
    def where(control, rule=None, quantities=()):
        return [d for d in decisions if d.row.control == control and (rule is None or d.row.rule == rule)
                and (not quantities or d.row.quantity in quantities)]

    alone = where(None)
    parts = [f"On these {n} inputs, with depth this network "
             + _clause([d for d in alone if d.row.quantity != "sparsity"], COMPRESS,
                       "R^c from layer 2 to L, authors' protocol and paper's formula")
             + " and " + _clause([d for d in alone if d.row.quantity == "sparsity"], SPARSIFY,
                                 "‖Z‖₀/(dn) from layer 1 to L − 1")]
    for control in dict.fromkeys(d.row.control for d in decisions if d.row.control is not None):
        if where(control, "further"):
            parts.append(f"against {control.label} it "
                         + _clause(where(control, "further"), COMPRESS_MORE, "(R_1 − R_L)/R_1")
                         + " and " + _clause(where(control, "denser"), SPARSER, "|Z| ≥ τ for every τ"))
            continue
        name = (f"{seeds} random initialisations of its architecture" if control.kind == "random"
                else SHOWN.get(control.label, control.label))
        parts.append(f"against {name} it "
                     + _clause(where(control, quantities=("official", "paper", "joint")), COMPRESS_MORE,
                               "R^c below at every layer, both protocols, and jointly")
                     + " and " + _clause(where(control, quantities=("sparsity",)), SPARSER, "every layer but the last"))
    return "; ".join(parts) + "."


def _preprocessed(done: dict) -> str:
    """``; normalised by mean (…) and std (…), ImageNet's (…); converted to 3 channels`` for report.md."""
    if "mean" not in done:
        return f"; tokenizer {done['tokenizer']}" if "tokenizer" in done else ""
    return (f"; normalised by mean {tuple(done['mean'])} and std {tuple(done['std'])}, {done['source']}"
            + (f"; converted to {channel_count(done['channels'])}" if done["channels"] else ""))


def network_markdown(meta: dict[str, Any], decisions, figures: list[str]) -> str:
    """A network audit's report.md: the conclusion, what was measured, the verdicts with their numbers, the
    per-layer means (per head for R^c), the files beside it and the figures (paths relative to the report)."""
    model, inputs, sizes = meta["model"], meta["inputs"], meta["sizes"]
    lines = [f"# White-box audit of {model['spec']}", "", f"**{meta['conclusion']}**", "",
             f"- model: {model['format']}, {model['parameters']:,} parameters, {model['layers']} layers (d "
             f"{sizes['d']}, n {sizes['n']} tokens per input, K {sizes['heads']})",
             f"- inputs: {inputs['source']}; seed {inputs['seed']}; controls on the first {inputs['control_n']}"
             + _preprocessed(inputs["preprocessing"]),
             f"- controls: {', '.join(meta['controls']) or 'none'}",
             f"- scope: the papers' statements ({NETWORK_LOCATION}) on this network and these inputs; each rule names "
             "its unit of replication (inputs, paired where both sides saw them, or initialisation seeds) and holds "
             "its error rate at 5% per claim (verify.layerwise)",
             f"- time: {meta['seconds']:.0f} s on {meta['machine']}; crate_nn code {meta['versions']['crate_nn code']}, "
             f"torch {meta['versions']['torch']}",
             "- files: report.json (every number), values.npz (every measure per input and layer of every network, "
             "`<network>/<measure>`), layers.csv (per-layer means, per head for R^c)", "",
             *_md_table(("claim", "verdict", "rule", "numbers"),
                        [(f"`{d.id}`: {statement(d.row)}", f"**{d.verdict}**", criterion(d.row), d.result.measured)
                         for d in decisions]),
             "", "## Per-layer means", ""]
    for name, by_label in meta["means"].items():
        lines += [md_escape(f"**{NETWORK_NAMES[name]}**: " + "; ".join(
            f"{label} " + " ".join(f"{x:.4g}" for x in values) for label, values in by_label.items())), ""]
    for name, by_label in meta["heads"].items():
        lines += [md_escape(f"**{NETWORK_NAMES[name]}, per head** (layer: heads 1 … K): " + "; ".join(
            f"{label} " + " | ".join(" ".join(f"{x:.3g}" for x in layer) for layer in per_layer)
            for label, per_layer in by_label.items())), ""]
    lines += [f"![{Path(p).stem}]({p})" for p in figures]
    return "\n".join(lines) + "\n"


def network_console(meta: dict[str, Any], decisions, folder: Path) -> str:
    """The console's summary: what was audited, the conclusion, the counts, every verdict asked for (one line each:
    `CONSOLE_HEAD` + the verdicts + 1 lines) and the report."""
    counts = Counter(d.verdict for d in decisions)
    head = [f"{meta['model']['spec']} ({meta['model']['format']}, {meta['model']['parameters']:,} parameters), "
            f"{meta['inputs']['n']} inputs, {meta['seconds']:.0f} s", meta["conclusion"],
            f"{len(decisions)} claims (the papers' statements on this network): "
            + ", ".join(f"{counts[v]} {v}" for v in ("holds", "fails", "inconclusive"))]
    body = [f"  {d.verdict:<12} " + _shorten(f"{d.id}: {d.result.measured}", 145) for d in decisions]
    return "\n".join([*head, *body, f"report: {folder / 'report.md'}"])


def _band(values) -> tuple[list[float], list[float]]:
    """Per-layer 95% interval of the mean over the rows of ``values`` (inputs or seeds)."""
    from verify.statistics import intervals

    found = intervals(values)
    return [c.low for c in found], [c.high for c in found]


def network_figures(folder: Path, series: dict, seeds: dict, heads: dict, title: str) -> list[str]:
    """One figure per measure (its axis `NETWORK_AXES`): per-layer means, a curve per network measured, with 95%
    bands over inputs — or, for a control of several initialisations (``seeds``: label → one measurement per seed),
    over the seeds' means, the spread its verdicts weigh; and ``heads.png``: R^c per head and layer of each network
    (``heads``: measure → label → per layer, per head)."""
    import numpy as np

    from verify import plots

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in NETWORK_NAMES:
        curves = {label: values[name] for label, values in series.items() if name in values}
        if not curves:
            continue
        bands = {k: _band(np.array([[m[name][:, i].mean() for i in range(v.shape[1])] for m in seeds[k]])
                          if k in seeds else v) for k, v in curves.items()}
        axis = NETWORK_AXES[name]
        paths.append(plots.per_layer(folder / f"{name}.png", {axis: {k: list(v.mean(0)) for k, v in curves.items()}},
                                     title=title, bands={axis: bands}))
    panels = {f"{NETWORK_AXES[name]}, per head": {f"{label}, head {k + 1}": [layer[k] for layer in per_layer]
                                                  for label, per_layer in by_label.items()
                                                  for k in range(len(per_layer[0]))}
              for name, by_label in heads.items()}
    paths.append(plots.per_layer(folder / "heads.png", panels, title=f"{title}: R^c per head"))
    return [p for p in paths if p]


def write_network(staging: Path, meta: dict[str, Any], decisions, measured: dict, series: dict, seeds: dict) -> None:
    """A network audit's report into ``staging`` (`ReportFolder.publish` moves it into place): ``figures/``,
    ``report.md``, ``values.npz`` (``measured``: label → measure → per input and layer, per head for R^c),
    ``layers.csv`` (one row per network × measure × layer × head: the mean over the inputs it saw; the ``head``
    column empty for whole-layer measures) and ``report.json`` (``meta`` with the figures and the verdicts)."""
    import csv
    import io

    import numpy as np

    from crate_nn.files import atomic_write

    title = f"{meta['model']['spec']}: per-layer means, 95% bands (over inputs; random initialisations: over seeds)"
    paths = network_figures(staging / "figures", series, seeds, meta["heads"], title)
    meta = {**meta, "figures": [Path(p).relative_to(staging).as_posix() for p in paths],
            "verdicts": [d.to_json() for d in decisions]}
    arrays = {f"{label}/{name}": v for label, m in measured.items() for name, v in m.items() if name != "sizes"}
    with atomic_write(staging / "values.npz", "per-input values") as f:
        np.savez_compressed(f, **arrays)
    table = io.StringIO()
    out = csv.writer(table, lineterminator="\n")
    out.writerow(("network", "measure", "layer", "head", "mean", "inputs"))
    for key, v in arrays.items():
        label, name = key.rsplit("/", 1)
        means = v.mean(0)
        for layer, value in enumerate(means, 1):
            for head, x in (enumerate(value, 1) if np.ndim(value) else [("", value)]):
                out.writerow((label, name.removesuffix("_heads"), layer, head, f"{float(x):.10g}", len(v)))
    for name, text in (("layers.csv", table.getvalue()), ("report.md", network_markdown(meta, decisions, meta["figures"])),
                       ("report.json", json.dumps(meta, indent=1, default=_json_default))):
        with atomic_write(staging / name, f"network audit {name}") as f:
            f.write(text.encode())


class ReportFolder:
    """Where one network audit writes its report, held from before the measuring to the end: ``with
    ReportFolder(path, overwrite) as out: … out.publish(write)``.

    Entering checks the folder — not a file, no report already in it unless ``overwrite`` (a report is a folder
    holding ``report.json``) — takes its lock (`crate_nn.files.FileLock` on ``.network-audit.lock``: a second audit
    of the same folder is refused, naming the first) and makes a staging folder inside it (so a folder that cannot
    be written is told before minutes of measuring). `publish` has ``write(staging)`` write the report there, then
    moves it into place: the old report's ``report.json`` removed first, ``report.json`` moved last, so that a
    folder holding ``report.json`` holds a whole report. Leaving without publishing (an error, SIGTERM, SIGINT)
    removes the staging folder, and the folder itself when the audit made it; a report already there is untouched."""

    LOCK = ".network-audit.lock"
    STAGING = ".network-audit-partial-"

    def __init__(self, path: Path, overwrite: bool) -> None:
        self.path, self.overwrite = Path(path), overwrite
        self.made, self.published, self.staging, self.lock = False, False, None, None

    def __enter__(self) -> ReportFolder:
        from crate_nn.files import FileLock

        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"out: {str(self.path)!r} is a file, not a folder")
        if (self.path / "report.json").exists() and not self.overwrite:
            raise ValueError(f"out: {str(self.path)!r} holds a report already; pass --overwrite to replace it, or "
                             "another --out")
        try:
            self.made = not self.path.exists()
            self.path.mkdir(parents=True, exist_ok=True)
            self.lock = FileLock(self.path / self.LOCK, refuse=lambda holder: ValueError(
                f"out: {str(self.path)!r} is being written by another audit ({holder}); wait for it, or pass "
                "another --out"))
            self.lock.__enter__()
            for stale in self.path.glob(self.STAGING + "*"):  # left by an audit killed outright (we hold the lock)
                shutil.rmtree(stale, ignore_errors=True)
            self.staging = self.path / f"{self.STAGING}{os.getpid()}"
            self.staging.mkdir()
        except OSError as err:
            self._leave()
            raise ValueError(f"out: cannot write in {str(self.path)!r}: {err.strerror or err}") from None
        except BaseException:
            self._leave()
            raise
        return self

    def publish(self, write) -> None:
        """``write(staging folder)``, then its files moved into the folder, ``report.json`` last."""
        write(self.staging)
        made = sorted(p.name for p in self.staging.iterdir())
        (self.path / "report.json").unlink(missing_ok=True)
        for name in [*(n for n in made if n != "report.json"), *(n for n in made if n == "report.json")]:
            target = self.path / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(self.staging / name, target)
        self.published = True

    def _leave(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
        if self.lock is not None:
            if self.made and not self.published:
                (self.path / self.LOCK).unlink(missing_ok=True)
            self.lock.__exit__(None, None, None)
        if self.made and not self.published:
            with contextlib.suppress(OSError):
                self.path.rmdir()  # only when empty: what the audit made, nothing else

    def __exit__(self, *exc) -> None:
        self._leave()
