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

`expands` is the mirror rule for *anti-compression* (the CRATE-MAE decoder's −MSSA step, eq. 62): ``specific``
higher and ``alignment`` lower (label ``expansion``); a collapse is never credited as expansion either.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from verify.registry import Headline, Result
from verify.statistics import Comparison, compare

IMAGES = 64
"""Inputs per trained model on which the MAE, DINO and GPT claims take the joint measure: the first 64 test
digits (GPT: its 16 validation windows). Each seed's value is a mean over them; its spread over seeds, which the
comparisons weigh, comes from the runs, and the measure costs ≈ 1 s per model at this size."""
DRAWS = 2
"""Yardstick sets (isotropic, rotated) per input; the same for every model of a seed's comparison."""

SIDES = {"specific": "below", "alignment": "above", "spread": "below"}
"""Measure → the side of 0 that A − B lies on when A compresses (``spread``: when A has collapsed)."""
EXPANSION_SIDES = {"specific": "above", "alignment": "below", "spread": "below"}
"""The same for `expands` (``spread``: still the side of a collapse)."""


@dataclass(frozen=True)
class Judgement:
    """The outcome of `compresses` (or `expands`): one `Comparison` (A − B) per measure, the label and the verdict.
    ``goal`` is what the claim credits: ``compression`` or ``expansion``."""

    specific: Comparison
    alignment: Comparison
    spread: Comparison
    goal: str = "compression"

    @property
    def label(self) -> str:
        """``collapse``, the goal (``compression``/``expansion``), ``no <goal>`` or ``undecided`` (module
        docstring)."""
        if self.spread.verdict == "holds":
            return "collapse"
        if self.specific.verdict == "holds" and self.alignment.verdict == "holds":
            return self.goal
        if "fails" in (self.specific.verdict, self.alignment.verdict):
            return f"no {self.goal}"
        return "undecided"

    @property
    def verdict(self) -> str:
        return {self.goal: "holds", "undecided": "inconclusive"}.get(self.label, "fails")

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
        return {"label": self.label, "verdict": self.verdict, "goal": self.goal,
                **{name: c.as_dict() for name, c in self._comparisons().items()}}

    def _comparisons(self) -> dict[str, Comparison]:
        return {name: getattr(self, name) for name in SIDES}


def compresses(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray] | None = None, *,
               paired: bool = True) -> Judgement:
    """Whether A compresses the tokens relative to B (module docstring).

    ``a``, ``b``: measure name (``specific``, ``alignment``, ``spread``; more keys are ignored) → one value per
    seed. ``b`` None: ``a`` holds per-seed differences A − B computed by the caller. ``paired``: as in `compare`.
    """
    return _judge(a, b, paired, SIDES, "compression")


def expands(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray] | None = None, *,
            paired: bool = True) -> Judgement:
    """Whether A anti-compresses (expands) the tokens relative to B: the mirror of `compresses` (module docstring);
    arguments as there."""
    return _judge(a, b, paired, EXPANSION_SIDES, "expansion")


def _judge(a, b, paired: bool, sides: Mapping[str, str], goal: str) -> Judgement:
    missing = [name for name in sides for side in (a, b) if side is not None and name not in side]
    if missing:
        raise KeyError(f"the joint rule needs per-seed values of {', '.join(sides)}; missing {sorted(set(missing))}")
    return Judgement(**{name: compare(a[name], None if b is None else b[name], direction=side, paired=paired)
                        for name, side in sides.items()}, goal=goal)


def at(profiles: Sequence[Mapping], station: str, layer: int) -> dict[str, np.ndarray]:
    """Per-seed values of every measure at ``station`` of layer ``layer`` (1-based), from per-seed profiles
    ``{measure: {station: [one value per layer]}}`` (`crate_nn.analysis.protocol.LayerProfile.all_means`)."""
    return {name: np.array([p[name][station][layer - 1] for p in profiles], dtype=float) for name in SIDES}


def per_layer(a: Sequence[Mapping], b: Sequence[Mapping], station: str = "half") -> list[Judgement]:
    """`compresses` of A against B at ``station`` of every layer ℓ = 1 … L, paired by seed: ``a``, ``b`` hold one
    profile per seed (as `at` reads them; e.g. a trained model and its own initialisation)."""
    depth = len(a[0]["specific"][station])
    return [compresses(at(a, station, layer), at(b, station, layer)) for layer in range(1, depth + 1)]


def from_layer_2(judgements: Sequence[Judgement]) -> str:
    """The verdict of "every layer compresses" with layer 1 (which holds the first ISTA ReLU's sparsification)
    reported apart: `holds` when every judgement of layers 2 … L holds, `fails` when one fails, else
    `inconclusive`."""
    verdicts = {j.verdict for j in judgements[1:]}
    if not verdicts:
        raise ValueError("judgements: expected at least two layers")
    return "fails" if "fails" in verdicts else ("holds" if verdicts == {"holds"} else "inconclusive")


TRAINING_RULE = ("`holds` when the joint rule credits compression to training at every layer 2 … L (layer 1 reported "
                 "apart), `fails` when it fails at one")
"""The expectation rule of the "training compresses, jointly" claims (trained model against its initialisation)."""


def against_init(trained: Sequence[Mapping], init: Sequence[Mapping], station: str = "half") -> Result:
    """The `verify.registry.Result` of a "training compresses, jointly" claim: `per_layer` judgements of the trained
    profiles against the initialisation's, decided by `from_layer_2`, with the last layer as headline."""
    judged = per_layer(trained, init, station)
    return Result(describe(judged), from_layer_2(judged), {"per_layer": [j.as_dict() for j in judged]}, [],
                  Headline.of_judgement(f"ℓ {len(judged)}", judged[-1]))


def describe(judgements: Sequence[Judgement]) -> str:
    """``layer 1: <label> (…); layer 2: …`` for the report."""
    return "; ".join(f"layer {i}: {j.text()}" for i, j in enumerate(judgements, 1))


def shared_by(trained: Judgement, control: Judgement) -> bool:
    """Whether the control (e.g. the untrained model) earns the same label as the trained model: then the label
    describes the architecture, not what training did."""
    return trained.label == control.label
