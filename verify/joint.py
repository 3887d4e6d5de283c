"""THE audit's rule for "A compresses the tokens relative to B": compression told apart from collapse.

The measures are those of ``crate_theory.protocol`` (torch: ``crate_nn.analysis.protocol``), one number per seed:
``specific`` (R^c of unit tokens against the same tokens in random orientations: compression onto *these*
subspaces), ``alignment`` (own-subspace energy) and ``spread`` (R^c of the tokens in random orientations against
isotropic tokens: how unlike each other they are). Each is compared by `verify.statistics.compare` (95% interval
over ≥ 3 seeds, paired when the seeds pair A and B):

* **collapse** — ``spread`` lower in A (its interval below 0): the tokens bunch together. Reported as collapse,
  never as compression, whatever the other two say (verdict ``fails``);
* **compression** — no collapse, ``specific`` lower and ``alignment`` higher (both intervals on their side of 0):
  verdict ``holds``;
* **no compression** — no collapse, and ``specific`` higher or ``alignment`` lower (an interval on the wrong side):
  verdict ``fails``;
* otherwise ``inconclusive``: the seeds cannot tell.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from verify.statistics import Comparison, compare

SIDES = {"specific": "below", "alignment": "above", "spread": "below"}
"""Measure → the side of 0 that A − B lies on when A compresses (``spread``: when A has collapsed)."""


@dataclass(frozen=True)
class Judgement:
    """The outcome of `compresses`: one `Comparison` (A − B) per measure, the label and the verdict."""

    specific: Comparison
    alignment: Comparison
    spread: Comparison

    @property
    def label(self) -> str:
        """``collapse``, ``compression``, ``no compression`` or ``undecided`` (module docstring)."""
        if self.spread.verdict == "holds":
            return "collapse"
        if self.specific.verdict == "holds" and self.alignment.verdict == "holds":
            return "compression"
        if "fails" in (self.specific.verdict, self.alignment.verdict):
            return "no compression"
        return "undecided"

    @property
    def verdict(self) -> str:
        return {"compression": "holds", "undecided": "inconclusive"}.get(self.label, "fails")

    def text(self, digits: int = 3) -> str:
        """``label (specific Δ …; alignment Δ …; spread Δ …)`` with each mean and 95% interval."""
        parts = [f"{name} {c.difference.mean:+.{digits}f} [{c.difference.low:+.{digits}f}, "
                 f"{c.difference.high:+.{digits}f}]" for name, c in self._comparisons().items()]
        return f"{self.label} ({'; '.join(parts)})"

    def deciding(self) -> tuple[str, Comparison]:
        """The measure that decides the label (``spread`` for a collapse, else ``specific``) and its comparison."""
        name = "spread" if self.label == "collapse" else "specific"
        return name, getattr(self, name)

    def as_dict(self) -> dict:
        return {"label": self.label, "verdict": self.verdict,
                **{name: c.as_dict() for name, c in self._comparisons().items()}}

    def _comparisons(self) -> dict[str, Comparison]:
        return {name: getattr(self, name) for name in SIDES}


def compresses(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray] | None = None, *,
               paired: bool = True) -> Judgement:
    """Whether A compresses the tokens relative to B (module docstring).

    ``a``, ``b``: measure name (``specific``, ``alignment``, ``spread``; more keys are ignored) → one value per
    seed. ``b`` None: ``a`` holds per-seed differences A − B computed by the caller. ``paired``: as in `compare`.
    """
    missing = [name for name in SIDES for side in (a, b) if side is not None and name not in side]
    if missing:
        raise KeyError(f"compresses needs per-seed values of {', '.join(SIDES)}; missing {sorted(set(missing))}")
    return Judgement(**{name: compare(a[name], None if b is None else b[name], direction=side, paired=paired)
                        for name, side in SIDES.items()})
