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
        file.write_text(text + before + documents.BEGIN.format(name=name) + "\nstale 1\n"
                        + documents.END.format(name=name) + after)
    report = {"claims": [], "meta": {"mode": "quick", "seed": 0},
              "summary": {"claims": 0, "mismatches": [],
                          "by_scope": {s: {"claims": 0, **{v: 0 for v in documents.COUNTED}}
                                       for s in documents.SCOPES}}}
    changed = documents.update(report, root=tmp_path)
    assert sorted(changed) == sorted(documents.PARTS)
    readme = (tmp_path / "README.md").read_text()
    assert "stale 1" not in readme and readme.startswith("intro\n") and readme.endswith("\nrest\n")
    assert documents.update(report, root=tmp_path, check=True) == []  # now up to date
