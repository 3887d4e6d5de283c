"""Verdict rules: turn measured numbers into ``holds`` / ``fails`` / ``loose``.

Every rule takes the measured figure and a threshold whose reason the claim states; none looks at the
expected verdict.
"""
from __future__ import annotations

import math


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


def all_hold(*verdicts: str) -> str:
    """Combine sub-checks of one claim: ``fails`` if any fails, else ``loose`` if any is loose, else ``holds``."""
    if "fails" in verdicts:
        return "fails"
    return "loose" if "loose" in verdicts else "holds"
