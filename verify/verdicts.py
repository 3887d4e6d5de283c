"""Verdict rules: turn measured numbers into ``holds`` / ``fails`` / ``loose`` (and ``inconclusive`` where a rule
reads seeds through `verify.statistics.compare`).

Every rule takes the measured figure and a threshold whose reason the claim states; none looks at the
expected verdict. Comparisons over seeds are `verify.statistics.compare`'s (`within` states an equivalence with
them); `all_hold` and `most` combine their verdicts (``inconclusive`` included) with these rules'.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from verify.statistics import Comparison, compare


def _finite(value: float, name: str) -> float:
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} is NaN: the measurement is broken")
    return value


def at_most(error: float, tol: float) -> str:
    """``holds`` when ``error ≤ tol`` (an identity or approximation checked to a tolerance), else ``fails``."""
    return "holds" if _finite(error, "error") <= tol else "fails"


def at_least(value: float, threshold: float) -> str:
    """``holds`` when ``value ≥ threshold``, else ``fails``."""
    return "holds" if _finite(value, "value") >= threshold else "fails"


def bound(value: float, limit: float, loose_below: float, slack: float = 1e-9) -> str:
    """A claimed upper bound ``value ≤ limit``.

    ``fails`` when the measured value exceeds the limit (beyond a relative ``slack`` for rounding); ``loose`` when
    even the largest measured value stays below ``loose_below · limit``; ``holds`` otherwise.
    """
    value = _finite(value, "value")
    if value > limit * (1 + slack):
        return "fails"
    return "loose" if value < loose_below * limit else "holds"


def slope(measured: float, expected: float, tol: float) -> str:
    """A claimed rate: ``holds`` when the fitted log-log slope is within ``tol`` of ``expected``."""
    return "holds" if abs(_finite(measured, "slope") - expected) <= tol else "fails"


def rate_bound(exponent: float, bound_exponent: float, tol: float) -> str:
    """A claimed bound y ≲ x^b as x → 0, with an unspecified constant, read through the fitted log-log exponent a
    of the measured y against the bound's b (fitted over the same x).

    ``fails`` when a < b − ``tol`` (y falls more slowly than the bound: no constant keeps it below as x → 0);
    ``loose`` when a > b + ``tol`` (y falls faster: the bound holds but its rate is not attained); ``holds``
    otherwise. ``tol`` allows the order-one factors a bound leaves out, drifting across the grid.
    """
    gap = _finite(exponent, "exponent") - _finite(bound_exponent, "bound_exponent")
    if gap < -tol:
        return "fails"
    return "loose" if gap > tol else "holds"


def rate_bound_over_seeds(exponents, bound_exponent: float, tol: float) -> tuple[str, list[Comparison]]:
    """`rate_bound` with one fitted exponent per seed: the 95% interval over seeds of a − b
    (`verify.statistics.compare`) against −``tol`` and +``tol``.

    ``fails`` when the interval lies below −tol, ``loose`` when it lies above +tol, ``holds`` when it lies between
    them, ``inconclusive`` when it contains either boundary. Returns the verdict and the two comparisons (against
    −tol: "the bound is met"; against +tol: "the bound is beaten").
    """
    gaps = np.asarray(exponents, dtype=float) - _finite(bound_exponent, "bound_exponent")
    met = compare(gaps, direction="above", boundary=-tol)
    beaten = compare(gaps, direction="above", boundary=tol)
    if met.verdict != "holds":
        return met.verdict, [met, beaten]
    return {"holds": "loose", "fails": "holds"}.get(beaten.verdict, "inconclusive"), [met, beaten]


def all_hold(*verdicts: str) -> str:
    """Combine sub-checks of one claim: ``fails`` if any fails, else ``inconclusive`` if any is (a comparison over
    seeds that cannot tell), else ``loose`` if any is loose, else ``holds``."""
    for verdict in ("fails", "inconclusive", "loose"):
        if verdict in verdicts:
            return verdict
    return "holds"


def most(verdicts: Sequence[str], share: float) -> str:
    """A statement that holds "in most cases" (the papers' words for layer-wise trends), from one verdict per case
    (e.g. per layer-to-layer step): ``holds`` when at least ``share`` of them hold; ``fails`` when more than
    1 − ``share`` of them fail, so that ``share`` cannot be reached whatever the undecided ones are; else
    ``inconclusive``."""
    verdicts = list(verdicts)
    if not verdicts or not 0 < share <= 1:
        raise ValueError(f"most: expected at least one verdict and 0 < share ≤ 1, got {len(verdicts)} and {share}")
    held = sum(v == "holds" for v in verdicts) / len(verdicts)
    failed = sum(v == "fails" for v in verdicts) / len(verdicts)
    if held >= share:
        return "holds"
    return "fails" if failed > 1 - share else "inconclusive"


def within(values, margin: float) -> list[Comparison]:
    """An equivalence over seeds — ``values`` (one per seed, e.g. paired differences) lie within ±``margin`` — as the
    two `verify.statistics.compare` results it needs (above −margin, below +margin): `verify.statistics.every` of
    them `holds` when the 95% interval lies inside the margins, `fails` when it lies wholly beyond one and is
    `inconclusive` when it straddles one."""
    if not margin > 0:
        raise ValueError(f"margin: expected a positive number, got {margin}")
    return [compare(values, direction="above", boundary=-margin), compare(values, direction="below", boundary=margin)]


def agree(verdicts: Sequence[str]) -> str:
    """A statement that a claim's verdict does not depend on a setting (a recipe value, a protocol), from its verdict
    in each setting: ``fails`` when two settings decide differently (one ``holds``, another ``fails``); ``holds``
    when every setting gives the same decided verdict; ``inconclusive`` otherwise (a setting the seeds cannot
    decide, the decided ones agreeing)."""
    verdicts = list(verdicts)
    if len(verdicts) < 2:
        raise ValueError(f"agree: expected the verdicts of at least two settings, got {len(verdicts)}")
    decided = {v for v in verdicts if v in ("holds", "fails")}
    if len(decided) > 1:
        return "fails"
    return "holds" if len(decided) == 1 and all(v in decided for v in verdicts) else "inconclusive"


FOOTNOTE_17 = ("footnote 17 exempts the last layer, whose features are mixed for the classifier: the verdict is "
               "decided on the other layers, the last reported apart")
"""How the sparsity claims read footnote 17 (long version Sec. 4.2; NeurIPS 2023 footnote 8)."""
