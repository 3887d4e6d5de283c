"""THE audit's rule for "A compresses the tokens relative to B": compression told apart from collapse.

The measures are those of ``crate_theory.protocol`` (torch: ``crate_nn.analysis.protocol``), one number per seed:
``specific`` (R^c of unit tokens against the same tokens in random orientations: compression onto *these*
subspaces), ``alignment`` (own-subspace energy) and ``spread`` (R^c of the tokens in random orientations against
isotropic tokens: how unlike each other they are). Each is compared by `verify.statistics.compare` (95% interval
over ≥ 3 seeds, paired when the seeds pair A and B):

* **sparsification** — A's token sets all lie in the non-negative orthant (``nonnegative`` 1 at every seed) and
  B's do not: the step ends in a ReLU, the ISTA block's non-negative sparse codes (long paper Sec. 2.4, eq. 44),
  the sparsification half (25) of the layer, not its compression half (24). Seen through the Gram matrix — all that
  ``spread`` sees of the tokens — a ReLU of isotropic tokens is a pull of each towards the orthant's diagonal (mean
  cosine 1/π between tokens), what a pull towards one shared direction also gives: the ReLU of exact-subspace tokens
  lowers spread by 0.053 at d 32, n 64, ten floors. The joint measure cannot tell the two apart, so it does not judge
  the step: the sparsity claims do. Verdict ``inconclusive``, never collapse;
* **collapse** — ``spread`` lower in A by more than compression itself can lower it: the interval of A − B wholly
  below −floor, the floor `crate_theory.protocol.collapse_floor` at the size measured (d, n tokens per input, K,
  p, ε). The tokens bunch together. Reported as collapse, never as compression, whatever the other two say
  (verdict ``fails``);
* **compression** — no collapse, ``specific`` lower and ``alignment`` higher (both intervals on their side of 0):
  verdict ``holds``;
* **no compression** — no collapse, and ``specific`` higher or ``alignment`` lower (an interval on the wrong side):
  verdict ``fails``;
* otherwise ``undecided`` (``inconclusive``): the seeds cannot tell.

Beside every judgement, not deciding it, the paper's own objective: ``rate_reduction``, ΔR = R(Ẑ) − R^c(Ẑ | U) of
the unit tokens (eqs. 8, 13–14), as a comparison A − B with its interval ("ΔR not stored" where a stored profile
predates it). On the calibration cases (`verify.joint_calibration`) it rises wherever tokens move onto their
subspaces and falls for every collapse, rotation away and ReLU. It does not decide because (1) the claims are
about compression, R^c (Figs. 14–15), and ΔR mixes in R, the expansion term, at another operating point (α = Kβ)
where LayerNorm's removal of the mean direction already reads as lost rate (``crate_theory.protocol``); (2) it has
no yardstick at the size measured: the same construction moves it by +3 nats at d 32, n 64 and by +31 at d 96,
n 5, so the size of a difference cannot be weighed; (3) it cannot tell collapse from no compression, nor either
from a sparsification (all lower it).

**Why a floor, and this one.** Tokens moved exactly onto their own subspaces — the signal model (10), the extreme of
compression — lower ``spread`` a little wherever the subspaces do not share the tokens as isotropic tokens share
the space: unequal class shares, mildly coherent subspaces, few tokens per input (measured: shares 0.4/0.2/0.2/0.2
lower it by 0.0046 ± 0.0003 at d 32, n 64, K 4). Read as collapse whatever its size, such a drop vetoed true
compression. A spread drop therefore counts as collapse only beyond the largest drop those exact-subspace constructions cause
at the same size (`crate_theory.protocol.collapse_floor`: balanced, unbalanced and coherent, each by Monte-Carlo
with its 95% upper bound). The alternative — comparing a token set's spread with that of tokens of the signal
model with *its own* memberships (each token's own subspace), which would also excuse whatever configuration of
classes an input has — was rejected: with no labels (every trained model) the memberships are read off the tokens,
so a pull of every token towards one direction inside one subspace would move them all into that subspace and the
reference would fall with the tokens, excusing the collapse it should find; it also needs a new measure that the
stored runs lack. The floor needs only the sizes, has no free parameter beyond the constructions' definitions,
and leaves every pull towards one shared direction or point (drops of 0.4–0.8) far beyond it. Where an input is
an image of one object (the trained CRATEs' 8×8 digits: `Sizes.single_object`), every token of it may lie on that
object's subspace — (10) leaves the law of an input's memberships free — and the floor takes that construction too
(`crate_theory.protocol.SINGLE_OBJECT`): at the digits CRATE's size (d 96, 5 tokens, K 4) it lowers spread by
0.015, which is then the floor (0.0011 without it); at 17 tokens per image (CRATE-MAE, CRATE-DINO) by 0.09–0.14,
so there the measure cannot tell a smaller collapse from one object per image. Token sets of the signal model with
memberships drawn per token (the ideal stacks) and text windows (CRATE-GPT) keep the three constructions.

A pull of each class onto one point inside its own subspace is collapse too: R^c falls (to the rate of one point
per class) and ``specific`` and ``alignment`` both credit it, but the sparse rate reduction objective "encourages
the features to be diverse and expanded within their supporting subspaces, and in particular not collapsed to
individual points" (Sec. 2.1, Remark 3), and ΔR falls with it (R loses more than R^c). Its spread drop (0.43 at
d 32, n 64) is far beyond the floor.

`expands` is the mirror rule for *anti-compression* (the CRATE-MAE decoder's −MSSA step, eq. 62): ``specific``
higher and ``alignment`` lower (label ``expansion``); a collapse is never credited as expansion either.
"""
from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import crate_theory
from crate_nn.files import write_json
from crate_theory.protocol import OFFICIAL_EPS, CollapseFloor, collapse_floor
from verify import experiments
from verify.registry import Headline, Result
from verify.statistics import Comparison, compare, compare_one

IMAGES = 64
"""Inputs per trained model on which the MAE, DINO and GPT claims take the joint measure: the first 64 test
digits (GPT: its 16 validation windows). Each seed's value is a mean over them; its spread over seeds, which the
comparisons weigh, comes from the runs, and the measure costs ≈ 1 s per model at this size."""
DRAWS = 2
"""Yardstick sets (isotropic, rotated) per input; the same for every model of a seed's comparison."""

SIDES = {"specific": "below", "alignment": "above", "spread": "below"}
"""Measure → the side of 0 that A − B lies on when A compresses (``spread``: when A has collapsed, beyond the
floor)."""
EXPANSION_SIDES = {"specific": "above", "alignment": "below", "spread": "below"}
"""The same for `expands` (``spread``: still the side of a collapse)."""
OBJECTIVE_SIDES = {"compression": "above", "expansion": "below"}
"""Goal → the side of 0 that ΔR(A) − ΔR(B) lies on when the paper's objective agrees (reported, not deciding)."""
OPTIONAL = ("rate_reduction", "nonnegative")
"""Measures a stored profile may lack (recorded before they existed): the rule works without them."""


@dataclass(frozen=True)
class Sizes:
    """The size a joint measure was taken at: dimension d, tokens per input n, heads K, head dimension p (default
    d/K), and ε of the rates; ``single_object``: each input is an image of one object, whose tokens may all lie on
    one subspace (`crate_theory.protocol.SINGLE_OBJECT`). ``floor`` is the collapse floor there (computed once per
    process)."""

    d: int
    n: int
    heads: int
    p: int | None = None
    eps: float = OFFICIAL_EPS
    single_object: bool = False

    @classmethod
    def of(cls, profiles: Sequence[Mapping], fallback: Sizes | None = None, *,
           single_object: bool | None = None) -> Sizes:
        """The sizes a profile records (`crate_nn.analysis.protocol.LayerProfile.sizes`), else ``fallback`` (for
        stored profiles recorded before they carried them); ValueError when neither is there. ``single_object``:
        as the class says (default: ``fallback``'s, else False)."""
        if single_object is None:
            single_object = fallback.single_object if fallback is not None else False
        recorded = profiles[0].get("sizes") if profiles else None
        if recorded:
            return cls(recorded["d"], recorded["n"], recorded["heads"], recorded.get("p"),
                       single_object=single_object)
        if fallback is None:
            raise ValueError("profiles: they carry no 'sizes' (recorded before the collapse floor existed); pass "
                             "sizes=Sizes(d, n, heads) of the model measured")
        return dataclasses.replace(fallback, single_object=single_object)

    @classmethod
    def of_images(cls, config) -> Sizes:
        """The size of an image CRATE with a [CLS] token from its training config (``model_args`` dim, heads,
        patch_size; ``image_size``): n = patches + 1, each input an image of one object (the built-in digits) — for
        stored profiles recorded before they carried sizes."""
        args = config.model_args
        return cls(args["dim"], (config.image_size // args["patch_size"]) ** 2 + 1, args["heads"], single_object=True)

    @property
    def floor(self) -> float:
        return self.collapse_floor().floor

    def collapse_floor(self) -> CollapseFloor:
        return _collapse_floor(self.d, self.n, self.heads, self.p or self.d // self.heads, self.eps, self.single_object)


@functools.cache
def _collapse_floor(d: int, n: int, heads: int, p: int, eps: float, single_object: bool) -> CollapseFloor:
    """`crate_theory.protocol.collapse_floor` (default seed and sets), kept in the audit's cache (a few seconds per
    size, once): keyed by the size and a hash of crate_theory's source, so a changed construction is computed again."""
    kind = "-single-object" if single_object else ""
    path = experiments.root() / "collapse-floors" / f"{d}-{n}-{heads}-{p}-{eps!r}{kind}-{_THEORY_CODE()}.json"
    if path.is_file():
        stored = json.loads(path.read_text())
        return CollapseFloor(**{**stored, "drops": {k: tuple(v) for k, v in stored["drops"].items()}})
    floor = collapse_floor(d, n, heads, p, eps, single_object=single_object)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, dataclasses.asdict(floor), "collapse floor")
    return floor


@functools.cache
def _THEORY_CODE() -> str:  # noqa: N802 - a constant, computed once when first needed
    return experiments.code_hash(Path(crate_theory.__file__).resolve().parent)


@dataclass(frozen=True)
class Judgement:
    """The outcome of `compresses` (or `expands`): one `Comparison` (A − B) per measure, the label and the verdict.
    ``goal`` is what the claim credits: ``compression`` or ``expansion``. ``spread``'s boundary is −floor (the
    collapse floor); ``rate_reduction`` is ΔR(A) − ΔR(B), reported beside (None where a profile lacks it);
    ``sparsification``: A's token sets all lie in the non-negative orthant and B's do not."""

    specific: Comparison
    alignment: Comparison
    spread: Comparison
    goal: str = "compression"
    rate_reduction: Comparison | None = None
    sparsification: bool = False

    @property
    def floor(self) -> float:
        """The collapse floor: the drop of spread beyond which it is collapse."""
        return -self.spread.boundary

    @property
    def label(self) -> str:
        """``sparsification``, ``collapse``, the goal (``compression``/``expansion``), ``no <goal>`` or
        ``undecided`` (module docstring)."""
        if self.sparsification:
            return "sparsification"
        if self.spread.verdict == "holds":
            return "collapse"
        if self.specific.verdict == "holds" and self.alignment.verdict == "holds":
            return self.goal
        if "fails" in (self.specific.verdict, self.alignment.verdict):
            return f"no {self.goal}"
        return "undecided"

    @property
    def verdict(self) -> str:
        return {self.goal: "holds", "undecided": "inconclusive", "sparsification": "inconclusive"}.get(self.label,
                                                                                                        "fails")

    def text(self, digits: int = 3) -> str:
        """``label (specific Δ …; alignment Δ …; spread Δ … (floor …); ΔR Δ …)`` with each mean and 95% interval."""
        def part(name: str, c: Comparison) -> str:
            return (f"{name} {c.difference.mean:+.{digits}f} [{c.difference.low:+.{digits}f}, "
                    f"{c.difference.high:+.{digits}f}]")

        parts = [part(name, getattr(self, name)) for name in SIDES]
        parts[-1] += f" (floor {self.floor:.4f})"
        parts.append("ΔR not stored" if self.rate_reduction is None else part("ΔR", self.rate_reduction))
        note = " — a step into the non-negative orthant: the sparsity claims judge it" if self.sparsification else ""
        return f"{self.label} ({'; '.join(parts)}){note}"

    def deciding(self) -> tuple[str, Comparison]:
        """The measure that decides the label (``spread`` for a collapse, else ``specific``) and its comparison."""
        name = "spread" if self.label == "collapse" else "specific"
        return name, getattr(self, name)

    def as_dict(self) -> dict:
        return {"label": self.label, "verdict": self.verdict, "goal": self.goal, "collapse_floor": self.floor,
                "sparsification": self.sparsification,
                **{name: getattr(self, name).as_dict() for name in SIDES},
                "rate_reduction": None if self.rate_reduction is None else self.rate_reduction.as_dict()}


def compresses(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray] | None = None, *, floor: float | Sizes,
               paired: bool = True, population: bool = False) -> Judgement:
    """Whether A compresses the tokens relative to B (module docstring).

    ``a``, ``b``: measure name (``specific``, ``alignment``, ``spread``; optionally ``rate_reduction`` and
    ``nonnegative``; more keys are ignored) → one value per seed. ``b`` None: ``a`` holds per-seed differences
    A − B computed by the caller (then no sparsification can be told). ``floor``: the collapse floor, or the `Sizes`
    measured (whose floor is computed). ``paired``: as in `compare`. ``population``: A is one network (its values
    all one number) and B's values are draws of a population (random initialisations): each measure by
    `verify.statistics.compare_one`, the prediction interval.
    """
    return _judge(a, b, floor, paired, SIDES, "compression", population)


def expands(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray] | None = None, *, floor: float | Sizes,
            paired: bool = True) -> Judgement:
    """Whether A anti-compresses (expands) the tokens relative to B: the mirror of `compresses` (module docstring);
    arguments as there."""
    return _judge(a, b, floor, paired, EXPANSION_SIDES, "expansion")


def _judge(a, b, floor, paired: bool, sides: Mapping[str, str], goal: str, population: bool = False) -> Judgement:
    missing = [name for name in sides for side in (a, b) if side is not None and name not in side]
    if missing:
        raise KeyError(f"the joint rule needs per-seed values of {', '.join(sides)}; missing {sorted(set(missing))}")
    floor = floor.floor if isinstance(floor, Sizes) else float(floor)
    if not floor >= 0:
        raise ValueError(f"floor: expected a collapse floor >= 0, got {floor}")
    if population and b is None:
        raise ValueError("population: needs B's values, the population's draws")

    def rule(name: str, direction: str, boundary: float = 0.0) -> Comparison:
        if population:
            return compare_one(float(np.mean(a[name])), b[name], direction=direction, boundary=boundary)
        return compare(a[name], None if b is None else b[name], direction=direction, paired=paired, boundary=boundary)

    comparisons = {name: rule(name, side, -floor if name == "spread" else 0.0) for name, side in sides.items()}
    stored = "rate_reduction" in a and (b is None or "rate_reduction" in b)
    objective = rule("rate_reduction", OBJECTIVE_SIDES[goal]) if stored else None
    return Judgement(**comparisons, goal=goal, rate_reduction=objective, sparsification=_sparsifies(a, b))


def _sparsifies(a, b) -> bool:
    """A's sets all in the non-negative orthant (``nonnegative`` 1 at every seed), B's not (below 1 at every seed)."""
    if b is None or "nonnegative" not in a or "nonnegative" not in b:
        return False
    return bool(np.all(np.asarray(a["nonnegative"]) == 1) and np.all(np.asarray(b["nonnegative"]) < 1))


def at(profiles: Sequence[Mapping], station: str, layer: int) -> dict[str, np.ndarray]:
    """Per-seed values of every measure at ``station`` of layer ``layer`` (1-based), from per-seed profiles
    ``{measure: {station: [one value per layer]}}`` (`crate_nn.analysis.protocol.LayerProfile.all_means`); the
    `OPTIONAL` measures where every profile has them."""
    names = [*SIDES, *(name for name in OPTIONAL if all(name in p for p in profiles))]
    return {name: np.array([p[name][station][layer - 1] for p in profiles], dtype=float) for name in names}


def per_layer(a: Sequence[Mapping], b: Sequence[Mapping], station: str = "half",
              sizes: Sizes | None = None, single_object: bool | None = None) -> list[Judgement]:
    """`compresses` of A against B at ``station`` of every layer ℓ = 1 … L, paired by seed: ``a``, ``b`` hold one
    profile per seed (as `at` reads them; e.g. a trained model and its own initialisation). The collapse floor is
    that of the sizes the profiles record, else of ``sizes`` (`Sizes.of`, with ``single_object``)."""
    depth = len(a[0]["specific"][station])
    floor = Sizes.of(a, sizes, single_object=single_object).floor
    return [compresses(at(a, station, layer), at(b, station, layer), floor=floor) for layer in range(1, depth + 1)]


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


def against_init(trained: Sequence[Mapping], init: Sequence[Mapping], station: str = "half",
                 sizes: Sizes | None = None, single_object: bool | None = None) -> Result:
    """The `verify.registry.Result` of a "training compresses, jointly" claim: `per_layer` judgements of the trained
    profiles against the initialisation's, decided by `from_layer_2`, with the last layer as headline and the
    per-layer labels as the result's ``labels``."""
    judged = per_layer(trained, init, station, sizes, single_object)
    return Result(describe(judged), from_layer_2(judged), {"per_layer": [j.as_dict() for j in judged]}, [],
                  Headline.of_judgement(f"ℓ {len(judged)}", judged[-1]), labels=layer_labels(judged))


def describe(judgements: Sequence[Judgement]) -> str:
    """``layer 1: <label> (…); layer 2: …`` for the report."""
    return "; ".join(f"layer {i}: {j.text()}" for i, j in enumerate(judgements, 1))


def layer_labels(judgements: Sequence[Judgement], first: int = 1) -> str:
    """``layer 1 undecided, layer 2 collapse, …``: the labels of per-layer judgements (layers ``first`` …), the
    form a claim's ``expected_labels`` takes (`verify.registry.claim`)."""
    return _per_layer([j.label for j in judgements], first)


def label_runs(*runs: tuple[str, int]) -> str:
    """Expected per-layer labels in `layer_labels`' form from runs (label, number of layers), as a claim's
    ``expected_labels``: ``label_runs(("collapse", 1), ("compression", 7))``; a label ``"collapse|no compression"``
    accepts either (a layer at the collapse floor, whose label moves with the base seed)."""
    return _per_layer([f"({label})" if "|" in label else label for label, count in runs for _ in range(count)])


def _per_layer(labels: Sequence[str], first: int = 1) -> str:
    return ", ".join(f"layer {i} {label}" for i, label in enumerate(labels, first))


def named_labels(judgements: Mapping[str, Judgement]) -> str:
    """``name: label; …`` for judgements named by what they compare (``layer 2 → 3: collapse; …``)."""
    return "; ".join(f"{name}: {j.label}" for name, j in judgements.items())


def shared_by(trained: Judgement, control: Judgement) -> bool:
    """Whether the control (e.g. the untrained model) earns the same label as the trained model: then the label
    describes the architecture, not what training did."""
    return trained.label == control.label
