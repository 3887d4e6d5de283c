"""The claims' former ids stay where they are the record: each claim's ``formerly`` field, the generated former-ids
table of docs/papers.md and the "formerly …" a report prints under each claim. A document (any tracked ``.md``) or
a notebook that names a claim by a former id — the id itself, a numbered group or range (``2.24-digits-*``, ``claims
2.1–2.5``), or a selector of ``--only`` or ``select`` that reaches its claims through their former ids alone —
fails here, so that the numbered scheme does not come back; nor do figure files named after it."""
from __future__ import annotations

import dataclasses
import re

from _repository import ROOT, repository_files

from verify.registry import all_claims

CLAIMS = all_claims()
TODAY = [dataclasses.replace(c, formerly=()) for c in CLAIMS]
"""The claims as today's names alone select them (id, id prefix, tag, module)."""

FORMER = re.compile(r"(?<![\w.-])(" + "|".join(sorted((re.escape(f) for c in CLAIMS for f in c.formerly),
                                                        key=len, reverse=True)) + r")(?![\w-])")
"""Any claim's former id, as a whole word."""
NUMBERED = re.compile(r"(?<![\w.])(?:2\.\d{1,2}|4\.\d(?:\.\d)?|C\.\d)-[a-z*]|\bclaims? (?:2|4|C)\.\d")
"""The numbered scheme's groups and ranges (``2.24-fig15-*``, ``C.5-*``, ``claims 2.6–2.8``); the papers' section
numbers (Sec. 2.5, App. C.5, Sec. 4.1.3's) are not followed by a dash and a word."""
RECORD = re.compile(r"<!-- generated: former-ids.*?<!-- end: former-ids -->|formerly [^·\n]*", re.S)
"""Where former ids are the record: docs/papers.md's table, and a report's "formerly …" under each claim."""
ONLY = re.compile(r"--only((?:[ \t]+[\w.*-]+)+)")
SELECT = re.compile(r"select\(\s*all_claims\(\),\s*\[([^\]]*)\]")


def former_only(selector: str) -> bool:
    """Whether ``selector`` selects claims, but none by today's names: only through former ids."""
    return any(c.matches(selector) for c in CLAIMS) and not any(c.matches(selector) for c in TODAY)


def selectors(text: str) -> list[str]:
    """The claim selectors of every ``--only …`` (up to the next flag) and every ``select(all_claims(), […])``."""
    found = []
    for match in ONLY.finditer(text):
        for word in match.group(1).split():
            if word.startswith("-"):
                break
            found.append(word)
    for match in SELECT.finditer(text):
        found += re.findall(r"[\"']([^\"']+)[\"']", match.group(1))
    return found


def problems(text: str) -> list[str]:
    """What in ``text`` names a claim by a former id, outside the record."""
    text = RECORD.sub("", text)
    found = [m.group(0) for m in FORMER.finditer(text)] + [m.group(0) for m in NUMBERED.finditer(text)]
    return found + [f"selector {s}" for s in selectors(text) if former_only(s)]


def _documents():
    return [path for path in repository_files()
            if path.suffix == ".md" or re.fullmatch(r"notebooks/\d\d_\w+\.py", path.relative_to(ROOT).as_posix())]


def test_documents_and_notebooks_name_claims_by_todays_ids():
    documents = _documents()
    assert any(p.name == "papers.md" for p in documents) and any(p.parent.name == "notebooks" for p in documents)
    found = [f"{p.relative_to(ROOT)}: {', '.join(sorted(set(hits)))}" for p in documents
             if (hits := problems(p.read_text(encoding="utf-8")))]
    assert not found, "former claim ids used as today's (the former-ids table of docs/papers.md maps them):\n" + \
        "\n".join(found)


def test_the_check_catches_former_ids_and_spares_the_papers_numbers():
    """Not vacuous: each way of naming a claim by its former id is caught, section numbers and today's ids are not."""
    for text in ("claims 2.24-fig15-*", "`C.5-*` (10)", "the audit's claims 2.6–2.8.", "see 2.4-lemma11 there",
                 "`python -m verify --only 2.16 lemma11`", 'select(all_claims(), ["eq8", "2.1"])',
                 "`tost-gradient-step`", "python -m verify --full --only 4.1.3-simdino"):
        assert problems(text), text
    for text in ("Sec. 2.5, eqs. 8, 12–14; App. C.5, Table 11; Sec. 4.1.3's teacher; Secs. 2.1–2.5",
                 "torch 2.13.0+cpu; slope 2.1–2.2", "`sec2.5-ideal-compression` and remark7-presets-at-eta-0.1",
                 "tags: ablation, digits, nn · formerly C.5-table11-eta · 0.00 s",
                 "<!-- generated: former-ids -->\n| `2.1-rc-sum` | `eqs12-13-rc-sum` |\n<!-- end: former-ids -->",
                 "`python -m verify --only thm16 lemma11 calculus`", 'select(all_claims(), ["ista", "mm"])',
                 "python3 -m benchmarks.gpu_check --only data tests", "pip download --only-binary=:all:"):
        assert not problems(text), text


def test_committed_figures_are_named_after_todays_ids():
    """Every figure of a replication is named ``<today's claim id>[-<what>].png``, no word of the id said twice, and
    every figure a committed report shows exists."""
    ids = sorted((c.id for c in CLAIMS), key=len, reverse=True)
    figures = sorted(ROOT.glob("results/*/figures/*.png"))
    assert figures
    for path in figures:
        owner = next((i for i in ids if path.stem == i or path.stem.startswith(f"{i}-")), None)
        assert owner, f"{path.relative_to(ROOT)}: not named after a claim's id"
        rest = path.stem[len(owner) + 1:].split("-") if path.stem != owner else []
        assert not set(rest) & set(owner.split("-")), f"{path.relative_to(ROOT)}: says a word of {owner} twice"
    for report in ROOT.glob("results/*/report.md"):
        for link in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", report.read_text(encoding="utf-8")):
            assert (report.parent / link).is_file(), f"{report.relative_to(ROOT)} shows a missing figure {link}"
