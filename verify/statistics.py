"""Across-seed statistics for the audit's comparisons: mean ± std and a two-sided 95% t-interval.

A comparison (trained vs initialisation, CRATE vs a control) is measured once per seed; the per-seed differences
are treated as independent draws, and a claim that "A is below B" is credited only when the 95% interval of the
mean difference lies entirely below 0.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as _stats

LEVEL = 0.95
"""Confidence level of every interval in the audit."""


@dataclass(frozen=True)
class Interval:
    """Mean, std (ddof = 1), number of seeds and the 95% t-interval [low, high] of a per-seed quantity."""

    mean: float
    std: float
    n: int
    low: float
    high: float

    @property
    def below_zero(self) -> bool:
        """The whole interval is below 0."""
        return self.high < 0

    @property
    def above_zero(self) -> bool:
        """The whole interval is above 0."""
        return self.low > 0

    def sign(self) -> int:
        """−1 / +1 when the interval excludes 0 on that side, 0 when it contains 0."""
        return -1 if self.below_zero else (1 if self.above_zero else 0)

    def text(self, digits: int = 3) -> str:
        """``mean ± std`` as printed in the report's tables."""
        return f"{self.mean:+.{digits}f} ± {self.std:.{digits}f}"

    def as_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "std": self.std, "n": self.n, "ci_low": self.low, "ci_high": self.high}


def interval(values) -> Interval:
    """The 95% t-interval of the mean of ``values`` (one number per seed, at least 2)."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size < 2:
        raise ValueError(f"an interval needs at least 2 seeds, got {x.size}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"values must be finite, got {x}")
    mean, std = float(x.mean()), float(x.std(ddof=1))
    half = float(_stats.t.ppf(0.5 + LEVEL / 2, x.size - 1)) * std / np.sqrt(x.size)
    return Interval(mean, std, int(x.size), mean - half, mean + half)


def intervals(values) -> list[Interval]:
    """One interval per column of ``values`` (seeds × items), e.g. per layer."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"values must be a (seeds, items) array, got shape {x.shape}")
    return [interval(column) for column in x.T]
