"""The parts of README.md and docs/papers.md written from the audit's report say what this test run's quick audit says
(`verify.documents`): no number in them is typed by hand, and none is left stale by a change of rule or claim."""
import pytest

from verify import documents

REL, FLOOR = 0.15, 0.02
"""How far a number in a committed part may lie from this test run's: the parts print numbers to two significant
digits (a shift of one unit in the second digit of 1.0 is 10%); a number printed with its 95% interval over seeds
may move by half that interval's width (`documents.same_text`): CI may run on another processor, whose rounding
trains another trajectory. A number typed by hand, or left from an earlier rule or recipe, is off by more."""


@pytest.mark.parametrize("name", sorted(documents.PARTS))
def test_each_generated_part_says_what_the_quick_audit_says(quick_audit, name):
    assert quick_audit.exit_status == 0
    regenerated = documents.render(quick_audit.report)[name]
    differences = documents.same_text(documents.current(name), regenerated, REL, FLOOR)
    assert not differences, (f"{documents.PARTS[name][0]}, part {name!r}, differs from this quick audit "
                             f"(rewrite it: python -m verify && python -m verify.documents): {differences[:5]}")


def test_same_text_compares_words_exactly_and_numbers_within_a_tolerance():
    assert documents.same_text("holds (+1.2 [0.5, 1.9])", "holds (+1.25 [0.52, 1.9])", 0.1, 0.0) == []
    assert documents.same_text("holds (+1.2)", "fails (+1.2)", 0.1, 0.0)  # a word differs
    assert documents.same_text("−0.78 [−0.80, −0.76]", "−0.60 [−0.80, −0.76]", 0.1, 0.0) == ["−0.78 ≠ −0.60"]
    assert documents.same_text("169 claims", "170 claims", 0.0, 0.0) == ["169 ≠ 170"]
    assert documents.same_text("a\nb 1", "a\nc 1", 0.1, 0.0)[0].startswith("line 2")
    assert documents.same_text("Sec. 4.1.1, 2.5", "Sec. 4.1.1, 2.6", 0.1, 0.0) == []  # a section number is a label
    assert documents.same_text("Sec. 4.1.1", "Sec. 4.1.2", 0.5, 1.0) == ["4.1.1 ≠ 4.1.2"]
    # a number with its interval moves by up to half the interval's width: what another processor's training does
    # (fig10-mae-roundtrip-training's layer 1 on two processors), not a bound of the other side of zero
    assert documents.same_text("−0.18 [−0.41, +0.04]", "−0.20 [−0.35, −0.052]", 0.15, 0.02) == []
    assert documents.same_text("−0.18 [−0.41, +0.04]", "−0.50 [−0.70, −0.30]", 0.15, 0.02) == [
        "−0.18 ≠ −0.50", "−0.41 ≠ −0.70", "+0.04 ≠ −0.30"]
    assert documents.same_text("1.0 and 3 [2, 4]", "1.3 and 3 [2, 4]", 0.15, 0.02) == ["1.0 ≠ 1.3"]  # no interval


def test_a_part_is_rewritten_between_its_markers_only(tmp_path):
    (tmp_path / "docs").mkdir()
    before, after = "intro\n", "\nrest\n"
    for name, (path, _) in documents.PARTS.items():
        file = tmp_path / path
        text = file.read_text() if file.exists() else ""
        file.write_text(text + before + documents.BEGIN.format(name=name, command=documents.COMMAND) + "\nstale 1\n"
                        + documents.END.format(name=name) + after)
    report = {"claims": [], "meta": {"mode": "quick", "seed": 0},
              "summary": {"claims": 0, "mismatches": [], "answer": ["One.", "Two.", "Three."],
                          "by_scope": {s: {"claims": 0, **{v: 0 for v in documents.COUNTED}}
                                       for s in documents.SCOPES}}}
    changed = documents.update(report, root=tmp_path)
    assert sorted(changed) == sorted(documents.PARTS)
    readme = (tmp_path / "README.md").read_text()
    assert "stale 1" not in readme and readme.startswith("intro\n") and readme.endswith("\nrest\n")
    assert documents.update(report, root=tmp_path, check=True) == []  # now up to date


def _entry(claim_id: str, scope: str, verdict: str, **fields) -> dict:
    return {"id": claim_id, "scope": scope, "verdict": verdict, "location": "long version, eq. (1)",
            "statement": f"statement of {claim_id}", "measured": "1.0", "headline": None, "setting": "a scale",
            "formerly": [], "data": {}, **fields}


def _report(entries: list[dict]) -> dict:
    by_scope = {s: {"claims": 0, **{v: 0 for v in documents.COUNTED}} for s in documents.SCOPES}
    for e in entries:
        by_scope[e["scope"]]["claims"] += 1
        by_scope[e["scope"]][e["verdict"]] += 1
    return {"claims": entries, "meta": {"mode": "quick", "seed": 0},
            "summary": {"claims": len(entries), "mismatches": [], "by_scope": by_scope}}


def test_errata_and_substantive_errors_are_listed_apart():
    report = _report([_entry("eq1-typo", "paper", "fails", error_kind="erratum", correction="eq. (1) with a plus"),
                      _entry("eq2-step", "paper", "fails", error_kind="substantive", correction="a further hypothesis"),
                      _entry("eq3-typo", "paper", "fails", error_kind="erratum", correction="a minus"),
                      _entry("eq4-holds", "paper", "holds"), _entry("x-probe", "probe", "fails")])
    headline = documents.headline(report, [])
    assert "| 3 (errors of the papers: 2 errata, 1 substantive) |" in headline
    assert "2 errata (a printed slip" in headline and "`eq1-typo`, `eq3-typo`" in headline
    assert "1 substantive error (a step of an argument" in headline and "`eq2-step`." in headline
    assert "x-probe" not in headline and "eq4-holds" not in headline
    listed = documents.papers_errors(report, [])
    errata_part, substantive_part = listed.split("**Substantive errors**")
    assert errata_part.startswith("**Errata** (2:") and "`eq1-typo`" in errata_part and "`eq2-step`" not in errata_part
    assert "`eq2-step`" in substantive_part and "corrected: a further hypothesis" in substantive_part
    assert "(witness: `python -m verify.errata --only eq2-step`)" in substantive_part
    # a paper claim that fails where it was expected to hold names no kind: listed as unclassified, not dropped
    unforeseen = _report([_entry("eq5-unforeseen", "paper", "fails", error_kind=None, correction=None)])
    assert "1 unclassified" in documents.headline(unforeseen, []) and "`eq5-unforeseen`" in documents.papers_errors(
        unforeseen, [])


def test_each_central_question_cell_names_its_scope_and_the_papers_scale_is_said():
    report = _report([_entry("fig15-digits-official", "replication", "holds"),
                      _entry("fig15-digits-paper", "probe", "fails"),
                      _entry("fig15-gpt-compression-official", "probe", "holds")])
    part = documents.layers_compress(report, [])
    assert "**holds** (replication; 1.0; `fig15-digits-official`)" in part
    assert "**holds** (probe; 1.0; `fig15-gpt-compression-official`)" in part
    assert "authors' protocol: 1 hold (replications), 1 hold (probes); paper's formula: 1 fail (probes)" in part
    assert "12 layers, 197 tokens, ImageNet" in part and "python -m verify.network" in part
