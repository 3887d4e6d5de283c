"""THE audit's rule for "A compresses the tokens relative to B": compression told apart from collapse.

The measures are those of ``crate_theory.protocol`` (torch: ``crate_nn.analysis.protocol``), one number per seed:
``specific`` (R^c of unit tokens against the same tokens in random orientations: compression onto *these*
subspaces), ``alignment`` (own-subspace energy) and ``spread`` (R^c of the tokens in random orientations against
isotropic tokens: how unlike each other they are). Each is compared by `verify.statistics.compare` (95% interval
over ≥ 3 seeds, paired when the seeds pair A and B):

* **collapse** — ``spread`` lower in A by more than tokens lying exactly on their subspaces can lower it: the
  interval of A − B wholly below −floor, the floor `crate_theory.protocol.collapse_floor` at the size measured (d, n
  tokens per input, K, p, ε) for the membership law allowed (`Sizes.memberships`). The tokens bunch together.
  Reported as collapse, never as compression or sparsification, whatever the other two say (verdict ``fails``);
* **sparsification** — no collapse, A's token sets all in the non-negative orthant (``nonnegative`` 1 at every seed)
  and B's not: the step ends in a ReLU, the ISTA block's non-negative sparse codes (long paper Sec. 2.4, eq. 44),
  the sparsification half (25) of the layer, not its compression half (24). Seen through the Gram matrix — all that
  ``spread`` sees — a ReLU is a pull of the tokens towards the orthant's diagonal (mean cosine 1/π between ReLU-ed
  isotropic tokens), what a pull towards one shared direction also gives, so the joint measure does not judge the
  step: the sparsity claims do (verdict ``inconclusive``). A non-negative output excuses no collapse: for such a
  step the floor is the *orthant floor*, the largest drop of spread that the ReLU of the exact-subspace construction
  causes (subspaces generically oriented or spanned by coordinate axes; `CollapseFloor.orthant_floor`), and a drop
  beyond it — a ReLU after a collapse — is collapse;
* **compression** — no collapse, ``specific`` lower and ``alignment`` higher (both intervals on their side of 0):
  verdict ``holds``;
* **no compression** — no collapse, and ``specific`` higher or ``alignment`` lower (an interval on the wrong side):
  verdict ``fails``;
* otherwise ``undecided`` (``inconclusive``): the seeds cannot tell.

Beside every judgement, not deciding it, the paper's own objective: ``rate_reduction``, ΔR = R(Ẑ) − R^c(Ẑ | U) of
the unit tokens (eqs. 8, 13–14), as a comparison A − B with its interval ("ΔR not stored" where a stored profile
predates it). Where the label and ΔR disagree — compression while ΔR falls, or collapse or no compression while ΔR
rises (for expansion, the mirror) — `Judgement.text` says so beside the label. On the calibration cases
(`verify.joint_calibration`) ΔR rises wherever tokens move onto their subspaces and falls for every collapse,
rotation away and ReLU. It does not decide because (1) the claims are about compression, R^c (Figs. 14–15), and ΔR
mixes in R, the expansion term, at another operating point (α = Kβ) where LayerNorm's removal of the mean
direction already reads as lost rate (``crate_theory.protocol``); (2) it has no yardstick at the size measured: the
same construction moves it by +3 nats at d 32, n 64 and by +31 at d 96, n 5, so the size of a difference cannot be
weighed; (3) it cannot tell collapse from no compression, nor either from a sparsification (all lower it).

**Why a floor, and this one.** Tokens moved exactly onto their own subspaces — the signal model (10), the extreme
of compression — lower ``spread`` wherever the subspaces do not share the tokens as isotropic tokens share the
space, and by how much depends on what (10) leaves free: the memberships' law ("the joint distribution of such Z
is underspecified": class shares, classes absent, how many subspaces one input's tokens occupy) and, through the
tokens' Gram matrix, the coherence of the subspaces. A floor fitted to a few such laws (formerly shares 2:1:1:1 and
a largest principal cosine 0.3) called the next one collapse: shares 0.55/0.15/0.15/0.15, coherence 0.45, an
input on two of four subspaces. None of this is recorded for a trained model — it has no labels, and memberships
read off the tokens would move with a collapse into one subspace — so the floor is the worst case over every law
at the size measured, which ``crate_theory.protocol`` ("The collapse floor") shows to be every token of an input
on one subspace: no membership law on orthogonal subspaces drops the spread more, for any codes (a majorisation
argument), and none measured on coherent ones did (largest principal cosines up to 0.8). It needs only the sizes,
so the stored runs are judged by it too. What it cannot excuse is bunching *inside* a subspace: (10)'s codes are
taken isotropic there, Remark 3's features "diverse and expanded within their supporting subspaces, and in
particular not collapsed to individual points". So the objection to a reference built from memberships read off
the tokens — a pull of every token towards one direction inside one subspace would excuse itself — does not touch
it: one subspace per input is already allowed, and the pull drops the spread beyond it. Measured
(``benchmarks/joint_calibration.py``, tests/verify/test_joint_beyond.py): the floor is 0.015 at the digits CRATE's
size (d 96, 5 tokens, K 4), 0.093 at 17 tokens (CRATE-MAE, CRATE-DINO), 0.186 at d 32, n 64, K 4 and 0.198 at
d 576, n 197, K 12; every token onto one direction drops the spread by 0.73–0.88 at the first three sizes, each
class onto one point of its subspace by 0.34–0.64, a ReLU after either by as much. The price of not knowing the
law: a smaller collapse reads as whatever the other two measures say — isotropic tokens pulled half-way to one
direction drop the spread by 0.12 at d 32, n 64, within that size's floor (at d 96, n 5 by 0.07, beyond its
0.015) — and every judgement prints its floor. Where the memberships *are* known — the ideal stacks draw them
i.i.d. with equal shares on orthogonal subspaces and give them to the measure — the floor is that law's (`Sizes`
with ``memberships "balanced"``): 0.0005 at d 32, n 64, its Monte-Carlo error, for exact-subspace tokens of that
law do not lower the spread at all (orthant floor 0.055) — the situation measured, with no worst case to allow for,
so any bunching the seeds can resolve is reported, however small, with its numbers. The floor settles collapse only: on strongly overlapping subspaces (largest principal cosine 0.45 at d 32,
n 64; 0.8 at 5 or 17 tokens in d 96) exact-subspace tokens read as no compression, never as collapse, because (13)
sums the rates of the projections onto every subspace and counts a token in each one it overlaps, so R^c itself is
then no lower for them than for the same tokens in random orientations (`verify.joint_calibration.OVERLAP`).

**The last layer (footnote 17).** Where a head reads the last layer — a classifier's linear layer, DINO's head, a
language model's output map — the sparsity claims exempt it after footnote 17: the rise of the sparsity measure
there "is caused by the extra linear layer for classification", the learned features "need to be mixed in the last
layer for predicting the class". The joint rule takes the same exemption for the same cause: training shapes the
last layer's tokens for the head that reads them, and mixing one input's tokens — the last attention gathering them
into the token the head reads — is exactly what the joint measure calls collapse, so a collapse there is what the
footnote anticipates rather than evidence against the claim. The layer-wise rows of footnote 17
(`verify.layerwise`) decide on layers 2 … L − 1 and report the last layer's label apart; stacks no head reads (the ideal stacks, CRATE-MAE's
encoder, whose sparsity claims exempt no layer either) are decided on every layer from 2. The footnote names the
sparsity measure only: the exemption of the compression half is the audit's reading of its cause.

**Time.** A size's floor is computed once (`crate_theory.protocol.collapse_floor`, a few thousand token sets at
small sizes, ~100 at large ones: about a second at the audit's own sizes, 17 s at d 576, n 197, K 12 and 10 s at
d 768, n 1,024 on 2 cores — the floor it replaced took 166 s and 3.5 min; `python -m benchmarks.collapse_floor`)
and kept in the audit's cache; a line on stderr, piped or not, says when one is being computed and what it came
to.

`expands` is the mirror rule for *anti-compression* (the CRATE-MAE decoder's −MSSA step, eq. 62): ``specific``
higher and ``alignment`` lower (label ``expansion``); a collapse is never credited as expansion either.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import crate_theory
from crate_nn.files import write_json
from crate_theory.protocol import MEMBERSHIPS, OFFICIAL_EPS, CollapseFloor, collapse_floor
from verify import experiments
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
    d/K), and ε of the rates; ``memberships``: the membership law the collapse floor allows (a key of
    `crate_theory.protocol.MEMBERSHIPS`: ``any``, the worst case over every law, wherever the memberships are not
    known; ``balanced`` for tokens whose memberships are drawn i.i.d. with equal shares on orthogonal subspaces and
    known). ``floor`` is the collapse floor there (computed once per process, kept in the audit's cache)."""

    d: int
    n: int
    heads: int
    p: int | None = None
    eps: float = OFFICIAL_EPS
    memberships: str = "any"

    def __post_init__(self):
        if self.memberships not in MEMBERSHIPS:
            raise ValueError(f"memberships: expected one of {sorted(MEMBERSHIPS)}, got {self.memberships!r}")

    @classmethod
    def of(cls, profiles: Sequence[Mapping], fallback: Sizes | None = None) -> Sizes:
        """The sizes a profile records (`crate_nn.analysis.protocol.LayerProfile.sizes`), with ``fallback``'s
        membership law (default ``any``), else ``fallback`` (for stored profiles recorded before they carried
        them); ValueError when neither is there."""
        recorded = profiles[0].get("sizes") if profiles else None
        if recorded:
            return cls(recorded["d"], recorded["n"], recorded["heads"], recorded.get("p"),
                       memberships=fallback.memberships if fallback is not None else "any")
        if fallback is None:
            raise ValueError("profiles: they carry no 'sizes' (recorded before the collapse floor existed); pass "
                             "sizes=Sizes(d, n, heads) of the model measured")
        return fallback

    @classmethod
    def of_images(cls, config) -> Sizes:
        """The size of an image CRATE with a [CLS] token from its training config (``model_args`` dim, heads,
        patch_size; ``image_size``): n = patches + 1 — for stored profiles recorded before they carried sizes."""
        args, side = config.network.model_args, config.data.image_size
        return cls(args["dim"], (side // args["patch_size"]) ** 2 + 1, args["heads"])

    @property
    def floor(self) -> float:
        return self.collapse_floor().floor

    def collapse_floor(self) -> CollapseFloor:
        return _collapse_floor(self.d, self.n, self.heads, self.p or self.d // self.heads, self.eps, self.memberships)


@functools.cache
def _collapse_floor(d: int, n: int, heads: int, p: int, eps: float, memberships: str) -> CollapseFloor:
    """`crate_theory.protocol.collapse_floor` (default seed and sets), kept in the audit's cache: keyed by the size,
    the law and a hash of crate_theory's source, so a changed construction is computed again. Computing one prints
    a line on stderr before and after (seconds: 17 s at d 576, n 197, K 12 on 2 cores)."""
    path = experiments.root() / "collapse-floors" / f"{d}-{n}-{heads}-{p}-{eps!r}-{memberships}-{_THEORY_CODE()}.json"
    if path.is_file():
        stored = json.loads(path.read_text())
        return CollapseFloor(**{**stored, "drops": {k: tuple(v) for k, v in stored["drops"].items()}})
    what = f"collapse floor at d {d}, n {n}, K {heads}, p {p}, ε {eps:g} ({memberships} memberships)"
    print(f"{what}: computing, once for this size …", file=sys.stderr, flush=True)
    start = time.perf_counter()
    floor = collapse_floor(d, n, heads, p, eps, memberships=memberships)
    print(f"{what}: {floor.floor:.4f}, orthant {floor.orthant_floor:.4f} ({floor.sets} sets, "
          f"{time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
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
    collapse floor; the orthant floor for a step into the non-negative orthant); ``rate_reduction`` is
    ΔR(A) − ΔR(B), reported beside (None where a profile lacks it); ``sparsification``: A's token sets all lie in
    the non-negative orthant and B's do not."""

    specific: Comparison
    alignment: Comparison
    spread: Comparison
    goal: str = "compression"
    rate_reduction: Comparison | None = None
    sparsification: bool = False

    @property
    def floor(self) -> float:
        """The drop of spread beyond which it is collapse (the orthant floor for a sparsification step)."""
        return -self.spread.boundary

    @property
    def label(self) -> str:
        """``collapse``, ``sparsification``, the goal (``compression``/``expansion``), ``no <goal>`` or
        ``undecided`` (module docstring)."""
        if self.spread.verdict == "holds":
            return "collapse"
        if self.sparsification:
            return "sparsification"
        if self.specific.verdict == "holds" and self.alignment.verdict == "holds":
            return self.goal
        if "fails" in (self.specific.verdict, self.alignment.verdict):
            return f"no {self.goal}"
        return "undecided"

    @property
    def verdict(self) -> str:
        return {self.goal: "holds", "undecided": "inconclusive", "sparsification": "inconclusive"}.get(self.label,
                                                                                                        "fails")

    @property
    def objective(self) -> str:
        """Where the label and ΔR (the paper's objective, beside it) disagree, what ΔR does — ``ΔR rises: the
        paper's objective alone would credit compression`` —, else "": the goal credited while ΔR's interval lies
        on the other side of 0, or collapse / no <goal> while it lies on the goal's side. Undecided and
        sparsification labels claim nothing ΔR could contradict."""
        if self.rate_reduction is None or self.label in ("undecided", "sparsification"):
            return ""
        towards, away = ("rises", "falls") if OBJECTIVE_SIDES[self.goal] == "above" else ("falls", "rises")
        if self.label == self.goal and self.rate_reduction.verdict == "fails":
            return f"ΔR {away}: the paper's objective does not credit this {self.goal}"
        if self.label != self.goal and self.rate_reduction.verdict == "holds":
            return f"ΔR {towards}: the paper's objective alone would credit {self.goal}"
        return ""

    def text(self, digits: int = 3) -> str:
        """``label (specific Δ …; alignment Δ …; spread Δ … (floor …); ΔR Δ …)`` with each mean and 95% interval,
        then where ΔR disagrees with the label (`objective`) and the note of a sparsification step."""
        def part(name: str, c: Comparison) -> str:
            return (f"{name} {c.difference.mean:+.{digits}f} [{c.difference.low:+.{digits}f}, "
                    f"{c.difference.high:+.{digits}f}]")

        parts = [part(name, getattr(self, name)) for name in SIDES]
        parts[-1] += f" ({'orthant floor' if self.sparsification else 'floor'} {self.floor:.4f})"
        parts.append("ΔR not stored" if self.rate_reduction is None else part("ΔR", self.rate_reduction))
        notes = [self.objective] if self.objective else []
        if self.sparsification:
            notes.append("a step into the non-negative orthant" + (", beyond what a ReLU of exact-subspace tokens "
                                                                    "causes" if self.label == "collapse" else
                                                                    ": the sparsity claims judge it"))
        return f"{self.label} ({'; '.join(parts)})" + "".join(f" — {note}" for note in notes)

    def deciding(self) -> tuple[str, Comparison]:
        """The measure that decides the label (``spread`` for a collapse, else ``specific``) and its comparison."""
        name = "spread" if self.label == "collapse" else "specific"
        return name, getattr(self, name)

    def as_dict(self) -> dict:
        return {"label": self.label, "verdict": self.verdict, "goal": self.goal, "collapse_floor": self.floor,
                "sparsification": self.sparsification, "objective_disagrees": self.objective or None,
                **{name: getattr(self, name).as_dict() for name in SIDES},
                "rate_reduction": None if self.rate_reduction is None else self.rate_reduction.as_dict()}


def compresses(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray] | None = None, *,
               floor: float | Sizes | CollapseFloor, paired: bool = True, population: bool = False,
               union: int = 1) -> Judgement:
    """Whether A compresses the tokens relative to B (module docstring).

    ``a``, ``b``: measure name (``specific``, ``alignment``, ``spread``; optionally ``rate_reduction`` and
    ``nonnegative``; more keys are ignored) → one value per seed. ``b`` None: ``a`` holds per-seed differences
    A − B computed by the caller (then no sparsification can be told). ``floor``: the `Sizes` measured (whose
    `CollapseFloor` is computed), a `CollapseFloor`, or a number — then the floor of every step, a step into the
    orthant included. ``paired``: as in `compare`. ``population``: A is one network (its values all one number) and
    B's values are draws of a population (random initialisations): each measure by
    `verify.statistics.compare_one`, the prediction interval. ``union``: the number of comparisons whose refutations
    the claim this judgement belongs to unites (`verify.statistics`: a claim of several layers counts three per
    layer — a collapse, ``specific`` higher, ``alignment`` lower): each refuting side — the collapse's, and each
    measure's wrong side — is read at that share of the claim's level.
    """
    return _judge(a, b, floor, paired, SIDES, "compression", population, union)


def expands(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray] | None = None, *,
            floor: float | Sizes | CollapseFloor, paired: bool = True) -> Judgement:
    """Whether A anti-compresses (expands) the tokens relative to B: the mirror of `compresses` (module docstring);
    arguments as there."""
    return _judge(a, b, floor, paired, EXPANSION_SIDES, "expansion")


def _floors(floor: float | Sizes | CollapseFloor) -> tuple[float, float]:
    """(floor, orthant floor) from `compresses`' ``floor`` argument."""
    if isinstance(floor, Sizes):
        floor = floor.collapse_floor()
    if isinstance(floor, CollapseFloor):
        return floor.floor, floor.orthant_floor
    value = float(floor)
    if not value >= 0:
        raise ValueError(f"floor: expected a collapse floor >= 0, got {value}")
    return value, value


def _judge(a, b, floor, paired: bool, sides: Mapping[str, str], goal: str, population: bool = False,
           union: int = 1) -> Judgement:
    missing = [name for name in sides for side in (a, b) if side is not None and name not in side]
    if missing:
        raise KeyError(f"the joint rule needs per-seed values of {', '.join(sides)}; missing {sorted(set(missing))}")
    if population and b is None:
        raise ValueError("population: needs B's values, the population's draws")
    plain, orthant = _floors(floor)
    sparsification = _sparsifies(a, b)
    boundary = orthant if sparsification else plain

    def rule(name: str, direction: str, boundary: float = 0.0, union: int = 1, refutes: str = "fails") -> Comparison:
        if population:
            return compare_one(float(np.mean(a[name])), b[name], direction=direction, boundary=boundary, union=union,
                               refutes=refutes)
        return compare(a[name], None if b is None else b[name], direction=direction, paired=paired, boundary=boundary,
                       union=union, refutes=refutes)

    # a collapse (spread's claimed side) refutes the goal, as the other measures' wrong sides do
    comparisons = {name: rule(name, side, -boundary, union, "holds") if name == "spread" else rule(name, side, 0.0, union)
                   for name, side in sides.items()}
    stored = "rate_reduction" in a and (b is None or "rate_reduction" in b)
    objective = rule("rate_reduction", OBJECTIVE_SIDES[goal]) if stored else None  # beside the label: never split
    return Judgement(**comparisons, goal=goal, rate_reduction=objective, sparsification=sparsification)


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


def every_judgement(judgements: Sequence[Judgement]) -> str:
    """`holds` when every judgement holds (at least one), `fails` when one fails, else `inconclusive` (also for
    none: nothing was judged)."""
    verdicts = {j.verdict for j in judgements}
    return "fails" if "fails" in verdicts else ("holds" if verdicts == {"holds"} else "inconclusive")


def describe(judgements: Sequence[Judgement], exempt_last: bool = False) -> str:
    """``layer 1: <label> (…); layer 2: …`` for the report; with ``exempt_last`` the last layer is marked
    ``(footnote 17, apart)``."""
    depth = len(judgements)
    return "; ".join(f"layer {i}{' (footnote 17, apart)' if exempt_last and i == depth else ''}: {j.text()}"
                     for i, j in enumerate(judgements, 1))


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
