"""verify.joint: the rule for "A compresses relative to B", on constructed per-seed numbers."""
import numpy as np
import pytest

from crate_theory.protocol import CollapseFloor
from verify import joint
from verify.joint import Sizes, compresses, expands

RNG = np.random.default_rng(0)
B = {"specific": 0.95 + 0.001 * RNG.standard_normal(5), "alignment": 0.5 + 0.001 * RNG.standard_normal(5),
     "spread": 0.99 + 0.001 * RNG.standard_normal(5)}
FLOOR = 0.005
"""A collapse floor of the size the ideal stacks measure (0.0052 at d 32, n 64, K 4)."""


def shifted(**shifts):
    """B with every seed shifted by a constant per measure (paired differences without spread)."""
    noise = 1e-4 * np.random.default_rng(1).standard_normal(5)  # keeps each interval finite and narrow
    return {name: values + shifts.get(name, 0.0) + noise for name, values in B.items()}


@pytest.mark.parametrize("shifts, label, verdict", [
    ({"specific": -0.01, "alignment": 0.02, "spread": 0.01}, "compression", "holds"),
    ({"specific": -0.01, "alignment": 0.02}, "compression", "holds"),  # spread unchanged: no collapse
    ({"specific": -0.01, "alignment": 0.02, "spread": -0.01}, "collapse", "fails"),  # compressed, and collapsed
    ({"specific": -0.2, "alignment": -0.02, "spread": -0.3}, "collapse", "fails"),
    ({"specific": 0.01, "alignment": 0.02, "spread": 0.01}, "no compression", "fails"),
    ({"specific": -0.01, "alignment": -0.02, "spread": 0.01}, "no compression", "fails"),
    ({"specific": -0.01, "spread": 0.01}, "undecided", "inconclusive"),
    # changed on purpose: a drop of spread within the floor is what exact-subspace tokens can cause, not collapse
    ({"specific": -0.01, "alignment": 0.02, "spread": -0.003}, "compression", "holds"),
    ({"specific": 0.01, "alignment": 0.02, "spread": -0.003}, "no compression", "fails"),
])
def test_labels_and_verdicts(shifts, label, verdict):
    judged = compresses(shifted(**shifts), B, floor=FLOOR)
    assert (judged.label, judged.verdict) == (label, verdict)
    assert judged.text().startswith(label) and judged.as_dict()["verdict"] == verdict
    assert judged.as_dict()["collapse_floor"] == FLOOR and judged.spread.boundary == -FLOOR


def test_a_spread_interval_straddling_the_floor_is_not_collapse():
    """Collapse needs the whole interval beyond −floor: one straddling it leaves the other two to decide."""
    a = shifted(specific=-0.01, alignment=0.02)
    a["spread"] = B["spread"] - FLOOR + 0.003 * np.array([-1.0, 1.0, -1.0, 1.0, 0.0])  # mean −floor, wide
    judged = compresses(a, B, floor=FLOOR)
    assert judged.spread.verdict == "inconclusive" and judged.label == "compression"
    assert compresses(a, B, floor=0.0).label == "collapse"  # wholly below 0: the former rule's collapse
    assert compresses(shifted(specific=-0.01, alignment=0.02, spread=-0.003), B, floor=0.0).label == "collapse"


def test_rate_reduction_is_reported_beside_and_does_not_decide():
    a, b = shifted(specific=-0.01, alignment=0.02), dict(B)
    a["rate_reduction"], b["rate_reduction"] = np.full(5, 3.0) + 1e-3 * np.arange(5), np.full(5, 5.0)
    judged = compresses(a, b, floor=FLOOR)
    assert judged.label == "compression" and judged.rate_reduction.difference.mean == pytest.approx(-1.998)
    assert "ΔR -1.998" in judged.text() and judged.as_dict()["rate_reduction"]["verdict"] == "fails"
    without = compresses(shifted(specific=-0.01, alignment=0.02), B, floor=FLOOR)  # a stored profile: no ΔR
    assert without.rate_reduction is None and "ΔR not stored" in without.text()
    assert without.as_dict()["rate_reduction"] is None and without.label == "compression"


def _floors(floor: float, orthant: float) -> CollapseFloor:
    """A `CollapseFloor` with these two floors (standard errors 0)."""
    return CollapseFloor(32, 64, 4, 8, 0.1, "any", 2, {"one subspace per input": (floor, 0.0),
                                                       "ReLU of one subspace per input, generic": (orthant, 0.0)})


def test_a_step_into_the_non_negative_orthant_is_sparsification_unless_it_collapses():
    a, b = shifted(specific=-0.01, alignment=0.02, spread=-0.05), dict(B)
    floors = _floors(FLOOR, 0.06)
    assert compresses(a, b, floor=floors).label == "collapse"  # without the orthant facts: beyond the floor
    a["nonnegative"], b["nonnegative"] = np.ones(5), np.zeros(5)
    judged = compresses(a, b, floor=floors)
    assert (judged.label, judged.verdict) == ("sparsification", "inconclusive") and "sparsity claims" in judged.text()
    assert judged.floor == 0.06 and "orthant floor 0.0600" in judged.text()
    # a ReLU after a collapse: beyond what a ReLU of exact-subspace tokens causes, collapse (never sparsification)
    relu_after = {**shifted(specific=-0.01, alignment=0.02, spread=-0.3), "nonnegative": np.ones(5)}
    judged = compresses(relu_after, b, floor=floors)
    assert (judged.label, judged.verdict) == ("collapse", "fails") and "beyond what a ReLU" in judged.text()
    assert compresses(a, b, floor=FLOOR).label == "collapse"  # a number is the floor of every step
    b["nonnegative"] = np.ones(5)  # both in the orthant (two ISTA outputs): the spread is read as usual
    assert compresses(a, b, floor=floors).label == "collapse"
    assert compresses({k: a[k] - b[k] for k in a}, floor=floors).label == "collapse"  # differences: no orthant facts


def test_where_the_label_and_the_objective_disagree_the_text_says_so():
    def judged(shifts, delta_r):
        a, b = shifted(**shifts), dict(B)
        a["rate_reduction"] = np.full(5, 5.0 + delta_r) + 1e-3 * np.arange(5)
        b["rate_reduction"] = np.full(5, 5.0)
        return compresses(a, b, floor=FLOOR)

    compressed = {"specific": -0.01, "alignment": 0.02}
    assert judged(compressed, +1.0).objective == ""  # both credit it
    assert judged(compressed, -1.0).objective == "ΔR falls: the paper's objective does not credit this compression"
    collapsed = judged({"spread": -0.05}, +1.0)
    assert collapsed.label == "collapse" and "ΔR rises: the paper's objective alone would credit compression" in \
        collapsed.text() and collapsed.as_dict()["objective_disagrees"] == collapsed.objective
    assert judged({"spread": -0.05}, -1.0).objective == "" and judged({}, +1.0).objective == ""  # undecided: no claim
    expanded = expands(shifted(specific=0.01, alignment=-0.02), B, floor=FLOOR)
    assert expanded.label == "expansion" and expanded.objective == ""  # no ΔR stored


def test_differences_and_unpaired_samples():
    a = shifted(specific=-0.01, alignment=0.02, spread=0.01)
    assert compresses({k: a[k] - B[k] for k in a}, floor=FLOOR).label == "compression"
    assert compresses(a, B, paired=False, floor=FLOOR).specific.paired is False


def test_missing_measures_and_bad_floors_are_named():
    with pytest.raises(KeyError, match="spread"):
        compresses({"specific": B["specific"], "alignment": B["alignment"]}, B, floor=FLOOR)
    with pytest.raises(ValueError, match="floor"):
        compresses(B, B, floor=-0.1)
    with pytest.raises(ValueError, match="floor"):
        compresses(B, B, floor=float("nan"))
    with pytest.raises(ValueError, match="memberships"):
        Sizes(32, 64, 4, memberships="unbalanced")


def test_sizes_come_from_the_profiles_or_a_fallback():
    recorded = [{"sizes": {"d": 32, "n": 64, "heads": 4, "p": 8}}]
    assert Sizes.of(recorded) == Sizes(32, 64, 4, 8)
    assert Sizes.of(recorded, Sizes(1, 1, 1, memberships="balanced")) == Sizes(32, 64, 4, 8, memberships="balanced")
    assert Sizes.of([{}], Sizes(96, 5, 4)) == Sizes(96, 5, 4)
    with pytest.raises(ValueError, match="sizes"):
        Sizes.of([{}])
    floor = Sizes(32, 64, 4).collapse_floor()
    assert Sizes(32, 64, 4).floor == floor.floor  # cached per size
    joint._collapse_floor.cache_clear()  # read back from the audit's cache folder: the same floor
    assert Sizes(32, 64, 4).collapse_floor() == floor
    assert compresses(shifted(specific=-0.01, alignment=0.02), B, floor=Sizes(32, 64, 4)).floor == floor.floor
    assert Sizes(32, 64, 4, memberships="balanced").floor < floor.floor / 50  # the known law: far tighter


def test_a_new_size_says_on_stderr_that_its_floor_is_being_computed(capsys, monkeypatch, tmp_path):
    """Whether or not stderr is a terminal (here: captured), one line before and one after; none from the cache."""
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path))  # an empty cache: the floor is computed
    joint._collapse_floor.cache_clear()
    Sizes(12, 7, 3).collapse_floor()
    before, after = capsys.readouterr().err.splitlines()
    assert before.startswith("collapse floor at d 12, n 7, K 3") and before.endswith("computing, once for this size …")
    assert after.startswith("collapse floor at d 12, n 7, K 3") and " sets, " in after
    joint._collapse_floor.cache_clear()
    Sizes(12, 7, 3).collapse_floor()
    assert capsys.readouterr().err == ""


def test_describe_marks_the_last_layer_apart_where_a_head_reads_it():
    """Footnote 17 (module docstring): the rows that exempt the last layer (verify.layerwise) say so per layer."""
    compressed = compresses(shifted(specific=-0.01, alignment=0.02), B, floor=FLOOR)
    collapsed = compresses(shifted(spread=-0.05), B, floor=FLOOR)
    layers = [collapsed, compressed, collapsed]
    assert joint.every_judgement(layers[1:2]) == "holds" and joint.every_judgement(layers) == "fails"
    assert joint.every_judgement([]) == "inconclusive"
    assert joint.describe(layers, exempt_last=True).split("; layer 3")[1].startswith(" (footnote 17, apart): collapse")


def test_labels_of_judgements():
    judged = [compresses(shifted(**s), B, floor=FLOOR) for s in
              ({"specific": -0.01, "alignment": 0.02}, {"spread": -0.05})]
    assert joint.layer_labels(judged) == "layer 1 compression, layer 2 collapse"
    assert joint.label_runs(("compression", 1), ("collapse", 1)) == joint.layer_labels(judged)
    assert joint.named_labels({"layer 1 → 2": judged[1]}) == "layer 1 → 2: collapse"
