"""verify.joint: the rule for "A compresses relative to B", on constructed per-seed numbers."""
import numpy as np
import pytest

from verify.joint import compresses

RNG = np.random.default_rng(0)
B = {"specific": 0.95 + 0.001 * RNG.standard_normal(5), "alignment": 0.5 + 0.001 * RNG.standard_normal(5),
     "spread": 0.99 + 0.001 * RNG.standard_normal(5)}


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
])
def test_labels_and_verdicts(shifts, label, verdict):
    judged = compresses(shifted(**shifts), B)
    assert (judged.label, judged.verdict) == (label, verdict)
    assert judged.text().startswith(label) and judged.as_dict()["verdict"] == verdict


def test_differences_and_unpaired_samples():
    a = shifted(specific=-0.01, alignment=0.02, spread=0.01)
    assert compresses({k: a[k] - B[k] for k in a}).label == "compression"
    assert compresses(a, B, paired=False).specific.paired is False


def test_missing_measures_are_named():
    with pytest.raises(KeyError, match="spread"):
        compresses({"specific": B["specific"], "alignment": B["alignment"]}, B)
