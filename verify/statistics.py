"""Across-seed statistics for the audit's comparisons: mean ± std, a two-sided 95% t-interval, and THE rule for
"A beats B" that every comparison of the audit uses (`compare`).

A comparison (trained vs initialisation, CRATE vs a control) is measured once per seed, on at least
`MIN_SEEDS` seeds. Where the seeds pair the two sides (the same seed draws the same data, initialisation or
tokens for A and for B) the per-seed differences A − B are the sample and the interval is Student's t on them;
where they do not, the interval of mean(A) − mean(B) is Welch's (unequal variances, Welch–Satterthwaite degrees of
freedom). A claim that "A is below B" (or above, or beyond a margin) then reads:

* ``holds`` when the whole 95% interval lies on the claimed side of the boundary;
* ``fails`` when the whole interval lies on the other side;
* ``inconclusive`` when the interval contains the boundary: the seeds cannot tell.

**A claim of several comparisons** (one per layer, per measure, per τ) controls its own error rate, α = 1 − `LEVEL`
(5%), split between its two ways of being wrong. Its verdict *holds* when every comparison holds: an
intersection-union test — a claim that holds wrongly holds wrongly at every comparison, so the chance is at most any
one comparison's, α/2, whatever their number: no split. It *fails* when any comparison fails: a union, whose chance
of a wrong refutation grows with the number m of comparisons that could give it, so each comparison's refuting side
is read at α/(2m) (Bonferroni: ≤ α/2 in all, whatever their correlation; Holm's step-down decides "does any fail?"
as Bonferroni does, and only names more of them): its interval at level 1 − α/m (`compare`'s ``union``). A claim
is thus decided wrongly — holds or fails where its comparisons are at their boundary — with chance ≤ α, per claim,
not per comparison. A comparison alone (m = 1) is the plain rule.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as _stats

LEVEL = 0.95
"""Confidence level of every interval in the audit."""
MIN_SEEDS = 3
"""Fewest seeds per side of a comparison (`compare`)."""
DIRECTIONS = ("below", "above")


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


def interval(values, level: float = LEVEL) -> Interval:
    """The t-interval at ``level`` (95%) of the mean of ``values`` (one number per seed, at least 2)."""
    x = np.asarray(values, dtype=float).ravel()
    if x.size < 2:
        raise ValueError(f"an interval needs at least 2 seeds, got {x.size}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"values must be finite, got {x}")
    mean, std = float(x.mean()), float(x.std(ddof=1))
    half = float(_stats.t.ppf(0.5 + level / 2, x.size - 1)) * std / np.sqrt(x.size)
    return Interval(mean, std, int(x.size), mean - half, mean + half)


def intervals(values) -> list[Interval]:
    """One interval per column of ``values`` (seeds × items), e.g. per layer."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"values must be a (seeds, items) array, got shape {x.shape}")
    return [interval(column) for column in x.T]


def welch_interval(a, b, level: float = LEVEL) -> Interval:
    """The interval at ``level`` (95%) of mean(``a``) − mean(``b``) for two independent samples (Welch: unequal variances,
    Welch–Satterthwaite degrees of freedom). ``std`` is the standard error of the difference times √n with
    n = min(len a, len b), so that ``text`` prints a spread comparable with a paired difference's."""
    x, y = (np.asarray(v, dtype=float).ravel() for v in (a, b))
    for name, v in (("a", x), ("b", y)):
        if v.size < 2:
            raise ValueError(f"{name}: an interval needs at least 2 seeds, got {v.size}")
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{name}: values must be finite, got {v}")
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    se = float(np.sqrt(vx + vy))
    mean = float(x.mean() - y.mean())
    if se == 0.0:
        return Interval(mean, 0.0, int(min(x.size, y.size)), mean, mean)
    dof = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    half = float(_stats.t.ppf(0.5 + level / 2, dof)) * se
    n = int(min(x.size, y.size))
    return Interval(mean, se * float(np.sqrt(n)), n, mean - half, mean + half)


def _side(interval: Interval, direction: str, boundary: float) -> str:
    """``holds`` when ``interval`` lies on the ``direction`` side of ``boundary``, ``fails`` on the other side,
    ``inconclusive`` when it contains it."""
    below, above = interval.high < boundary, interval.low > boundary
    claimed, other = (below, above) if direction == "below" else (above, below)
    return "holds" if claimed else ("fails" if other else "inconclusive")


def union_level(union: int) -> float:
    """The level of the interval that reads a refuting side shared by ``union`` comparisons (the module docstring):
    1 − (1 − `LEVEL`)/``union``."""
    if union < 1:
        raise ValueError(f"union: expected a number of comparisons >= 1, got {union}")
    return 1 - (1 - LEVEL) / union


@dataclass(frozen=True)
class Comparison:
    """The outcome of `compare`: the interval of the difference A − B, the claimed side of ``boundary`` and the
    verdict (``holds`` / ``fails`` / ``inconclusive``, see the module docstring).

    ``refuting``: where the comparison is one of ``union`` > 1 whose refutations a claim unites, the interval at
    `union_level` that alone may give the verdict ``refutes`` (``fails``, or ``holds`` where the claimed side is
    what refutes the claim, as a collapse refutes compression: `verify.joint`); None for a comparison alone."""

    difference: Interval
    direction: str
    boundary: float
    paired: bool
    refuting: Interval | None = None
    refutes: str = "fails"
    union: int = 1

    @property
    def verdict(self) -> str:
        plain = _side(self.difference, self.direction, self.boundary)
        if self.refuting is None or plain != self.refutes:
            return plain
        return plain if _side(self.refuting, self.direction, self.boundary) == plain else "inconclusive"

    def text(self, digits: int = 3) -> str:
        """``Δ = mean ± std [low, high]`` as the report prints a comparison."""
        d = self.difference
        return f"Δ = {d.mean:+.{digits}g} ± {d.std:.{digits}g} [{d.low:+.{digits}g}, {d.high:+.{digits}g}], {d.n} seeds"

    def as_dict(self) -> dict:
        refuting = {} if self.refuting is None else {
            "union": self.union, "refutes": self.refutes, "refuting_level": union_level(self.union),
            "refuting_low": self.refuting.low, "refuting_high": self.refuting.high}
        return {**self.difference.as_dict(), "direction": self.direction, "boundary": self.boundary,
                "paired": self.paired, **refuting, "verdict": self.verdict}


def _refuting(union: int, refutes: str, make) -> dict:
    """`Comparison`'s ``refuting``, ``refutes`` and ``union`` for a comparison that is one of ``union``; ``make(level)``
    gives the interval at a level."""
    if refutes not in ("holds", "fails"):
        raise ValueError(f"refutes: expected 'holds' or 'fails', got {refutes!r}")
    level = union_level(union)
    return dict(refuting=make(level) if union > 1 else None, refutes=refutes, union=union)


def compare(a, b=None, *, direction: str, boundary: float = 0.0, paired: bool = True, union: int = 1,
            refutes: str = "fails") -> Comparison:
    """THE audit's rule for "A is below (above) B": a 95% interval of A − B over seeds against ``boundary``.

    ``a``, ``b``: one number per seed (at least `MIN_SEEDS` each). ``b`` None compares ``a`` itself with the
    boundary (e.g. per-seed differences computed by the caller). ``paired``: seed i of ``a`` and of ``b`` share
    their data/initialisation (Student's t on the differences; the lengths must match); False: Welch.
    ``direction``: ``"below"`` (the claim is A − B < boundary) or ``"above"`` (A − B > boundary). ``union``: the
    number of comparisons of one claim whose refutations it unites (module docstring): the side ``refutes`` is
    read at `union_level`.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction: expected one of {DIRECTIONS}, got {direction!r}")
    x = np.asarray(a, dtype=float).ravel()
    y = None if b is None else np.asarray(b, dtype=float).ravel()
    for name, v in (("a", x), ("b", y)):
        if v is not None and v.size < MIN_SEEDS:
            raise ValueError(f"{name}: a comparison needs at least {MIN_SEEDS} seeds, got {v.size}")
    if y is not None and paired and x.size != y.size:
        raise ValueError(f"a, b: paired comparisons need one value per seed on both sides, got {x.size} and "
                         f"{y.size}")

    def at(level: float) -> Interval:
        if y is None:
            return interval(x, level)
        return interval(x - y, level) if paired else welch_interval(x, y, level)

    return Comparison(at(LEVEL), direction, float(boundary), paired and y is not None,
                      **_refuting(union, refutes, at))


def prediction_interval(population, *, level: float = LEVEL, least_std: float = 0.0) -> Interval:
    """The Student-t prediction interval of ONE new draw X of the population that ``population`` (one number per
    seed, at least `MIN_SEEDS`) was drawn from: mean ± t_{S−1, (1+level)/2} · s · √(1 + 1/S), s the seeds' std
    (ddof 1). A new draw lies outside it with probability 1 − ``level`` (Gaussian seeds): the interval of the mean
    alone (`interval`) shrinks as 1/√S and would call most new draws different. ``least_std``: a floor on s, for a
    quantity the seeds cannot show spreading below some step (`verify.check`: seeds that agree exactly)."""
    y = np.asarray(population, dtype=float).ravel()
    if y.size < MIN_SEEDS:
        raise ValueError(f"population: a comparison needs at least {MIN_SEEDS} seeds, got {y.size}")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"population: expected finite numbers, got {y}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: expected a probability in (0, 1), got {level}")
    mean, std = float(y.mean()), max(float(y.std(ddof=1)), float(least_std))
    half = float(_stats.t.ppf(0.5 + level / 2, y.size - 1)) * std * float(np.sqrt(1 + 1 / y.size))
    return Interval(mean, std, int(y.size), mean - half, mean + half)


def compare_one(value: float, population, *, direction: str, boundary: float = 0.0, union: int = 1,
                refutes: str = "fails") -> Comparison:
    """The rule for ONE network against a population the seeds draw from (a trained network against random
    initialisations of its architecture): the 95% `prediction_interval` of ``value`` − X for a new draw X of the
    population, mean(value − population) ± t_{S−1} · std · √(1 + 1/S), read against ``boundary`` as `compare`
    reads its interval. The interval of the mean difference alone (`compare` on the differences) would ask whether
    ``value`` differs from the population's mean, which a network drawn from the population itself does at every
    layer where the seeds spread; this asks whether it lies outside the population. ``population``: one number per
    seed (at least `MIN_SEEDS`); ``union``, ``refutes``: as in `compare`."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction: expected one of {DIRECTIONS}, got {direction!r}")
    if not np.isfinite(value):
        raise ValueError(f"value: expected a finite number, got {value}")

    def at(level: float) -> Interval:
        draw = prediction_interval(population, level=level)
        return Interval(value - draw.mean, draw.std, draw.n, value - draw.high, value - draw.low)

    return Comparison(at(LEVEL), direction, float(boundary), False, **_refuting(union, refutes, at))


def per_column(a, b=None, *, direction: str, boundary: float = 0.0, paired: bool = True) -> list[Comparison]:
    """`compare` of each column of ``a`` (seeds × items, e.g. per layer) with the same column of ``b`` (or with
    ``boundary`` when ``b`` is None)."""
    x = np.asarray(a, dtype=float)
    y = None if b is None else np.asarray(b, dtype=float)
    if x.ndim != 2 or (y is not None and y.ndim != 2):
        raise ValueError(f"a, b: expected (seeds, items) arrays, got shapes {x.shape} and "
                         f"{None if y is None else y.shape}")
    if y is not None and x.shape[1] != y.shape[1]:
        raise ValueError(f"a, b: expected the same items on both sides, got {x.shape[1]} and {y.shape[1]}")
    return [compare(x[:, i], None if y is None else y[:, i], direction=direction, boundary=boundary, paired=paired)
            for i in range(x.shape[1])]


def every(comparisons) -> str:
    """The verdict of a claim that needs each of ``comparisons`` (e.g. one per layer): ``fails`` when any of them
    fails, ``holds`` when all hold, ``inconclusive`` otherwise."""
    found = [c.verdict for c in comparisons]
    if not found:
        raise ValueError("comparisons: expected at least one comparison")
    return "fails" if "fails" in found else ("holds" if all(v == "holds" for v in found) else "inconclusive")


def brief(comparisons, digits: int = 3) -> str:
    """``mean [low, high]`` of each comparison's difference, ``;``-separated: a per-layer list for the report."""
    return "; ".join(f"{c.difference.mean:+.{digits}g} [{c.difference.low:+.{digits}g}, "
                     f"{c.difference.high:+.{digits}g}]" for c in comparisons)


def mean_std(values, *, scale: float = 1.0, digits: int = 3, unit: str = "") -> str:
    """``values`` × ``scale`` as "mean ± std" (sample std, ddof 1) with ``digits`` decimals and ``unit`` after; the
    value alone when there is one."""
    v = scale * np.asarray(values, dtype=float)
    return f"{v.mean():.{digits}f}" + (f" ± {v.std(ddof=1):.{digits}f}" if v.size > 1 else "") + unit


def percent(values) -> str:
    """Fractions as "mean ± std%" in points with one decimal (`mean_std`)."""
    return mean_std(values, scale=100, digits=1, unit="%")
