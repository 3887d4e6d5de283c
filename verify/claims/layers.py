"""\"Layers compress\" on an ideal unrolled CRATE (long version Sec. 2.5, eq. (45), Fig. 14), measured with the joint
measure of ``crate_theory.protocol`` (compression told apart from collapse) and against controls.

Every claim here is a probe of the audit's own: the papers derive each layer as a step on the sparse rate reduction
with *learned* subspaces and dictionaries and measure trained networks (Figs. 14–15); they never build a stack by
hand from the data's true subspaces, nor measure one with the joint measure, a stricter reading of "compresses"
than their R^c. The claims ask what the derivation's layers do where its model holds exactly.

The ideal CRATE (crate_theory.crate_forward, the official LayerNorm wiring): every layer uses the data's true
subspaces U, the tied output map β[U_1 … U_K] (36) with the paper's temperature 1 (35), ε = 1, and ISTA (η = λ = 0.1)
with the subspace-aligned orthogonal dictionary D = [U_1 … U_K]. Tokens: the mixture (11) with σ = 0.1, scaled by a
LayerNorm before the first layer (so that the first layer receives tokens of the scale every later layer sees).

Each token set is measured at every *station* — Z^1, then Z^{ℓ+1/2} (after MSSA) and Z^{ℓ+1} (after ISTA) for
ℓ = 1 … L — against the true U and the tokens' labels: the paper's R^c (eq. 13 at ε = 1, grows with the tokens'
energy), and the joint measure on unit tokens (ε = 0.1): ``specific`` (R^c against the same tokens in random
orientations — compression onto the subspaces), ``spread`` (those against isotropic tokens — < 1 is collapse),
``relative`` (= specific × spread, R^c against isotropic tokens alone), the own-subspace energy (alignment; floor
= isotropic tokens, ceiling 1), the token norms and the fraction of non-zeros. "Compresses" is decided by
``verify.joint.compresses`` over the seeds: specific lower, alignment higher, no collapse.

Layer 1 holds the first sparsification, the one ReLU that meets tokens still on randomly oriented subspaces: it is
reported apart, and layer-wise rules apply from layer 2 on.

Controls, on the same data (paired by seed): attention only (no ISTA block, Table 15), ISTA only (no MSSA term),
eq. (27)'s shrink (1 − κβ)Z with κβ = 1 — the step the tied attention term β[U]·SSA implies — random layers
(random U^ℓ and orthogonal D^ℓ, the data unchanged), axis-aligned subspaces (D = I) with and without attention,
and the implemented temperature √p in the full stack and in the attention-only stack.
"""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass

import numpy as np

from crate_theory import CrateLayerParams, compression_rate, crate_forward, layer_norm
from crate_theory.protocol import CollapseFloor, compression_profile
from crate_theory.synthetic import orthonormal_bases, random_orthogonal, sample_tokens
from verify import plots, verdicts
from verify.context import Context
from verify.joint import Judgement, Sizes, compresses, label_runs, layer_labels, named_labels
from verify.registry import Headline, Result, claim
from verify.statistics import Comparison, brief, compare, every, interval, intervals, per_column

SEEDS = 16
"""Independent data sets (bases, tokens) per comparison; each control runs on the same ones. The stacks are cheap,
and the effects the joint rule weighs are of the order of 0.01 with a seed-to-seed spread of the same order."""
DRAWS = 4
"""Yardstick sets (isotropic, rotated) per station. The same draws serve every station and control of a seed
(common random numbers), so the comparisons see little of their Monte-Carlo error: the spread of a difference
over seeds is the same with 2 or 16 draws (measured, axis-aligned stack, layer 8 − layer 2)."""

IDEAL = ("hand-built, untrained CRATE stacks: every layer with the data's true subspaces U and D = [U_1 … U_K]; "
         "mixture tokens (11), σ 0.1; d 32, n 64, K 4, L 8 (--full: d 128, n 196, K 8, L 12)")
"""The setting every claim of this module shares (`_sizes`); each names its control or measure after it."""

MEASURES = ("rate", "relative", "specific", "spread", "alignment", "isotropic_alignment", "norm", "sparsity",
            "rate_reduction", "nonnegative")
JOINT = ("specific", "alignment", "spread", "rate_reduction", "nonnegative")


@dataclass(frozen=True)
class Control:
    """A variant of the ideal stack: its crate_forward options and how the bases / layers are built."""

    options: tuple = ()
    axis_aligned: bool = False
    random_layers: bool = False
    temperature_sqrt_p: bool = False


CONTROLS = {
    "CRATE": Control(),
    "attention only": Control(options=(("sparsify", "none"),)),
    "ISTA only": Control(options=(("compress", False),)),
    "(27) shrink": Control(options=(("shrink", 1.0),)),
    "random layers": Control(random_layers=True),
    "axis-aligned": Control(axis_aligned=True),
    "axis-aligned, ISTA only": Control(options=(("compress", False),), axis_aligned=True),
    "CRATE, T = √p": Control(temperature_sqrt_p=True),
    "attention only, T = √p": Control(options=(("sparsify", "none"),), temperature_sqrt_p=True),
}


def _sizes(ctx) -> tuple[int, int, int, int]:
    """(d, n, K, depth): quick, or the CRATE-Base depth with d = 128 under --full."""
    return ctx.pick((32, 64, 4, 8), (128, 196, 8, 12))


def _floor(ctx) -> CollapseFloor:
    """The joint rule's collapse floors at the stacks' size for the memberships their tokens have — drawn i.i.d.
    with equal shares on orthogonal subspaces, and known (verify.joint.Sizes, ``memberships="balanced"``;
    crate_theory.protocol.collapse_floor)."""
    d, n, K, _ = _sizes(ctx)
    return Sizes(d, n, K, memberships="balanced").collapse_floor()


def _stack(ctx, name: str, seeds: int = SEEDS) -> np.ndarray:
    """(seeds, stations, measures) for one control (each data set memoised per mode and base seed; the first
    ``SEEDS`` data sets are those of every other claim)."""
    return _stack_at(ctx.mode, ctx.seed, _sizes(ctx), name, seeds)


def _stack_at(mode: str, seed: int, sizes: tuple[int, int, int, int], name: str, seeds: int = SEEDS) -> np.ndarray:
    return np.array([_profile(mode, seed, sizes, name, s) for s in range(seeds)])


@functools.cache
def _profile(mode: str, seed: int, sizes: tuple[int, int, int, int], name: str, s: int) -> list:
    """(stations, measures) of one control on data set ``s``."""
    d, n, K, depth = sizes
    control = CONTROLS[name]
    base = Context(mode, seed, "2.24-ideal", ".")
    data = base.rng_for(f"2.24-ideal-data-{s}")
    U = orthonormal_bases(K, d, d // K, seed=data)  # drawn for every control, so the codes below are paired
    if control.axis_aligned:
        U = np.eye(d).reshape(d, K, d // K).transpose(1, 0, 2).copy()
    tokens = sample_tokens(U, n, data, sigma=0.1)
    if control.random_layers:
        draw = base.rng_for(f"2.24-ideal-layers-{s}")
        layers = [CrateLayerParams(U=orthonormal_bases(K, d, d // K, seed=draw), D=random_orthogonal(d, draw))
                  for _ in range(depth)]
    else:
        layers = [CrateLayerParams(U=U, D=U.transpose(1, 0, 2).reshape(d, d))] * depth
    temperature = np.sqrt(d // K) if control.temperature_sqrt_p else 1.0
    start = layer_norm(tokens.Z)
    trace = crate_forward(start, layers, eps=1.0, temperature=temperature, **dict(control.options))
    stations = [start] + [Z for pair in zip(trace.halves, trace.outputs) for Z in pair]
    rows = []
    for Z in stations:
        joint = compression_profile(Z, U, labels=tokens.labels, draws=DRAWS,
                                    seed=base.rng_for(f"yardsticks-{s}"))
        rows.append([compression_rate(Z, U, 1.0), joint.relative, joint.specific, joint.spread, joint.alignment,
                     joint.isotropic_alignment, np.linalg.norm(Z, axis=0).mean(), np.mean(Z != 0),
                     joint.rate_reduction, joint.nonnegative])
    return rows


def _measure(values: np.ndarray, name: str) -> np.ndarray:
    return values[..., MEASURES.index(name)]


def _input(layer: int) -> int:
    """Station index of Z^ℓ (ℓ = 1 … L)."""
    return 2 * layer - 2


def _half(layer: int) -> int:
    """Station index of Z^{ℓ+1/2}."""
    return 2 * layer - 1


def _output(layer: int) -> int:
    """Station index of Z^{ℓ+1}."""
    return 2 * layer


def _depth(values: np.ndarray) -> int:
    return (values.shape[1] - 1) // 2


def _joint(values: np.ndarray, station: int) -> dict[str, np.ndarray]:
    """Per-seed values of the joint measures at one station."""
    return {m: _measure(values, m)[:, station] for m in JOINT}


def _halves(x: np.ndarray) -> np.ndarray:
    """Z^{ℓ+1/2}, ℓ = 1 … L (station axis −1)."""
    return x[..., 1::2]


def _outputs(x: np.ndarray) -> np.ndarray:
    """Z^{ℓ+1}, ℓ = 1 … L."""
    return x[..., 2::2]


def _inputs(x: np.ndarray) -> np.ndarray:
    """Z^ℓ, ℓ = 1 … L."""
    return x[..., 0:-1:2]


def _half_steps(values: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Changes of a measure over each layer's MSSA half-step (Z^ℓ → Z^{ℓ+1/2}) and LN + ISTA half-step
    (Z^{ℓ+1/2} → Z^{ℓ+1}), each (seeds, L)."""
    x = _measure(values, name)
    return _halves(x) - _inputs(x), _outputs(x) - _halves(x)


def _retained_alignment(values: np.ndarray) -> np.ndarray:
    """Per seed: (alignment of Z^{L+1} − isotropic floor) / (alignment of Z^1 − floor) — 1 = kept, 0 = lost."""
    a, floor = _measure(values, "alignment"), _measure(values, "isotropic_alignment")
    return (a[:, -1] - floor[:, -1]) / (a[:, 0] - floor[:, 0])


MOST = 0.75
"""The papers' "in most cases": the share of layers (or layer-to-layer steps) a layer-wise rule needs."""


def decreases_layer_by_layer(values: np.ndarray) -> tuple[list[Comparison], Comparison, str]:
    """The papers' "decreasing in most cases" on per-seed curves (seeds, layers): every layer-to-layer step and the
    last layer against the first, each a paired `verify.statistics.compare` below 0, and the verdict of
    `DECREASE_RULE` (`verify.verdicts.most` of the steps, with the whole)."""
    steps = per_column(np.diff(values, axis=1), direction="below")
    whole = compare(values[:, -1], values[:, 0], direction="below")
    return steps, whole, verdicts.all_hold(verdicts.most([c.verdict for c in steps], MOST), whole.verdict)


DECREASE_RULE = ("`holds` when the measure falls at ≥ 3/4 of the layer-to-layer steps (the papers: \"in most "
                 "cases\") and from the first layer to the last, each by a 95% interval over seeds below 0 "
                 "(verify.statistics.compare); `fails` when more than 1/4 of the steps, or the whole, rise; "
                 "`inconclusive` otherwise")

TREND_RULE = ("from layer 2 on (layer 1, which holds the first sparsification, is reported apart): `holds` when the "
              "last layer's tokens are compressed relative to layer 2's by the joint rule (verify.joint: "
              "subspace-specific R^c lower, own-subspace energy higher, spread not lower; 95% intervals over seeds) "
              "and the subspace-specific R^c falls, by a 95% interval over seeds, at ≥ 3/4 of the steps between "
              "them (the papers: \"in most cases\"); `fails` on collapse, on no compression, or when more than 1/4 "
              "of the steps rise; "
              "`inconclusive` when the seeds cannot tell")


def trend_from_layer_2(values: np.ndarray, floor: CollapseFloor) -> tuple[Judgement, float, str]:
    """`TREND_RULE` on Z^{ℓ+1/2}: (joint judgement of the last layer against layer 2, the share of steps over layers
    2 … L at which the subspace-specific R^c falls by a 95% interval over seeds, verdict: the joint rule's with
    `verify.verdicts.most` of those steps); ``floor``: the collapse floor."""
    depth = _depth(values)
    joint = compresses(_joint(values, _half(depth)), _joint(values, _half(2)), floor=floor)
    steps = per_column(np.diff(_halves(_measure(values, "specific"))[:, 1:], axis=1), direction="below")
    falling = float(np.mean([c.verdict == "holds" for c in steps]))
    return joint, falling, verdicts.all_hold(joint.verdict, verdicts.most([c.verdict for c in steps], MOST))


def over_layers(judgements: list[Judgement], share: float = MOST) -> str:
    """A layer-wise verdict from per-layer judgements (`verify.verdicts.most`; ``share`` 1: every layer)."""
    return verdicts.most([j.verdict for j in judgements], share)


def _labels(judgements: list[Judgement], first: int = 2) -> str:
    """``layers 2–8: 5 collapse, 2 undecided``."""
    counts = Counter(j.label for j in judgements)
    return f"layers {first}–{first + len(judgements) - 1}: " + ", ".join(f"{c} {label}" for label, c in
                                                                      counts.most_common())


def _controls_figure(ctx) -> str:
    """R^c, subspace-specific R^c, spread and own-subspace energy at every station (x = ℓ in half-steps) for the
    ideal CRATE and every control, means over seeds with 95% bands — one figure shared by the ideal-stack claims
    (None when figures are off)."""
    if not plots.enabled():
        return None
    return _draw_controls(str(ctx.output_dir), ctx.mode, ctx.seed, _sizes(ctx))


@functools.lru_cache(maxsize=4)
def _draw_controls(output_dir: str, mode: str, seed: int, sizes: tuple[int, int, int, int]) -> str:
    x = np.arange(2 * sizes[3] + 1) / 2 + 1
    panels, bands = {}, {}
    for label, measure in (("R^c (ε = 1)", "rate"), ("subspace-specific R^c", "specific"),
                           ("spread (< 1: collapse)", "spread"), ("own-subspace energy", "alignment")):
        panels[label], bands[label] = {}, {}
        for name in CONTROLS:
            per_station = intervals(_measure(_stack_at(mode, seed, sizes, name), measure))
            panels[label][name] = [i.mean for i in per_station]
            bands[label][name] = ([i.low for i in per_station], [i.high for i in per_station])
    path = Context(mode, seed, "ideal", output_dir).figure_path("controls")  # one figure for the *-ideal-* claims
    return plots.per_layer(path, panels, title=f"ideal CRATE and its controls ({SEEDS} seeds, 95% bands)", x=x,
                           xlabel="station (ℓ: input of layer ℓ, ℓ + ½: after MSSA)", bands=bands)


def _curve(values) -> str:
    return "→".join(f"{v:.3f}" for v in values)


@claim(
    id="sec2.5-ideal-compression", formerly="2.24-ideal-compression",
    tags=("layers", "ideal", "protocol"),
    location="long version, Sec. 2.5, eq. (45), Fig. 14 (the unrolled-optimisation claim); NeurIPS 2023, Sec. 2.5, "
             "eq. (18)",
    scope="probe",
    setting=f"{IDEAL}, {SEEDS} seeds; the joint measure, a stricter reading of \"compresses\" than R^c",
    quote="Composing multiple such layers following the incremental construction of our representation in (20), we "
          "obtain a white-box transformer architecture that transforms the data tokens towards a compact and sparse "
          "union of incoherent subspaces.",
    statement="An ideal unrolled CRATE — every layer with the data's true subspaces (MSSA (35)–(36)) and a "
              "subspace-aligned ISTA dictionary — compresses its tokens layer by layer: R^c(Z^{ℓ+1/2} | U) decreases",
    measures=f"the joint measure of Z^{{ℓ+1/2}} (subspace-specific R^c, own-subspace energy, spread; unit tokens, "
             f"ε = 0.1) from LayerNorm-scaled mixture tokens, {SEEDS} seeds; layer 1 → 2 apart; raw R^c (ε = 1) "
             "in the data",
    expected=f"{TREND_RULE}. Expected to fail (recorded after measuring, quick, 16 seeds): layer 1 → 2 is a "
             "collapse — the first ISTA ReLU, on coordinates the randomly oriented subspaces are not aligned with, "
             "lowers the own-subspace energy by 0.333 [0.326, 0.339] and the spread by 0.032 [0.031, 0.033] — and "
             "from layer 2 to 8 the tokens lose structure: specific R^c +0.016 [+0.013, +0.019] (rising at every "
             "step), own-subspace energy −0.188 [−0.196, −0.179]. --full the same (layer 2 → 12: +0.040, −0.243). "
             "The raw R^c (35 → 33) tracks the tokens' energy. ΔR (reported beside) falls too: −1.79 [−2.04, −1.53] "
             "at layer 1 → 2, −2.44 [−3.00, −1.88] from layer 2 to 8. Re-measured with the collapse floor (0.0052 at "
             "d 32, n 64, K 4; 0.0035 at d 128, n 196, K 8), then with the floor of the stacks' own memberships "
             "(balanced and known: 0.0005; 0.0002 at d 128): no label changed",
    expected_verdict="fails",
    expected_labels="layer 1 → 2: collapse; layer 2 → 8: no compression",
    full_labels="layer 1 → 2: collapse; layer 2 → 12: no compression",
    kind="ideal", provenance="measurement",
)
def ideal_compression(ctx) -> Result:
    values, floor = _stack(ctx, "CRATE"), _floor(ctx)
    joint, falling, verdict = trend_from_layer_2(values, floor)
    first = compresses(_joint(values, _half(2)), _joint(values, _half(1)), floor=floor)
    specific, rate = _halves(_measure(values, "specific")).mean(0), _halves(_measure(values, "rate")).mean(0)
    figure = _controls_figure(ctx)
    return Result(f"layer 1 → 2: {first.text()}; layer 2 → {_depth(values)}: {joint.text()}, specific R^c falls (95%) at "
                  f"{falling:.0%} of steps ({_curve(specific[[1, -1]])}); raw R^c {rate[0]:.1f} → {rate[-1]:.1f}",
                  verdict, {"layer_1_to_2": first.as_dict(), "layer_2_to_last": joint.as_dict(),
                            "falling_steps": falling, "specific_halves": specific, "rate_halves": rate,
                            "spread_halves": _halves(_measure(values, "spread")).mean(0),
                            "alignment_halves": _halves(_measure(values, "alignment")).mean(0),
                            "norm_stations": _measure(values, "norm").mean(0)}, [figure],
                  Headline.of_judgement(f"2→{_depth(values)}", joint),
                  labels=named_labels({"layer 1 → 2": first, f"layer 2 → {_depth(values)}": joint}))


def _mssa_steps(values: np.ndarray, floor: CollapseFloor) -> list[Judgement]:
    """The joint judgement of every layer's MSSA half-step, Z^{ℓ+1/2} against Z^ℓ, ℓ = 1 … L."""
    return [compresses(_joint(values, _half(layer)), _joint(values, _input(layer)), floor=floor)
            for layer in range(1, _depth(values) + 1)]


@claim(
    id="eq24-ideal-mssa-half-step", formerly="2.24-ideal-half-steps",
    tags=("layers", "ideal", "protocol"),
    location="long version, eqs. (24)–(26), (45); NeurIPS 2023, eq. (18)",
    scope="probe",
    setting=f"{IDEAL}, {SEEDS} seeds; the joint measure of each MSSA half-step",
    quote="Z^{ℓ+1/2} is chosen to incrementally minimize R^c(Z^{ℓ+1/2} | U^ℓ_[K]), (24) … Z^{ℓ+1/2} ≐ Z^ℓ + "
          "MSSA(Z^ℓ | U^ℓ_[K]), Z^{ℓ+1} ≐ ISTA(Z^{ℓ+1/2} | D^ℓ). (45)",
    statement="In the implemented layer (45), the MSSA half-step is the compression step (24): it compresses the "
              "tokens, Z^{ℓ+1/2} against Z^ℓ",
    measures=f"per layer, the joint judgement of the MSSA half-step (Z^ℓ → Z^{{ℓ+1/2}}); raw ΔR^c (ε = 1) over the "
             f"MSSA and the LayerNorm + ISTA half-steps in the data; {SEEDS} seeds",
    expected="`holds` when the joint rule credits compression to the MSSA half-step at ≥ 3/4 of layers 2 … L (layer "
             "1 apart), `fails` when it fails at more than 1/4. Recorded after measuring (it failed under the former "
             "R^c/isotropic yardstick; "
             "quick, 16 seeds): from layer 2 on every MSSA half-step compresses — specific R^c −0.005 to −0.003, "
             "own-subspace energy +0.026 to +0.004, spread not lower — while the raw R^c rises by ≈ 3.6 per "
             "half-step (the skip adds energy); layer 1's step is a slight collapse: its spread falls by 0.0006 "
             "[0.0006, 0.0007] at base seeds 0–2, beyond the floor of the stacks' own memberships (balanced and "
             "known: 0.0005, for such tokens do not lower the spread at all; under the former fitted floor, 0.0052, "
             "it was no compression), and its own-subspace energy by 0.0034 [0.0030, 0.0038]; ΔR rises there, which "
             "the report marks. ΔR (reported beside) rises at layers 1–3 and falls from layer 5 on (−0.03 to −0.09). "
             "--full (d 128, K 8, 12 layers) it fails: the specific R^c falls (−0.012 to −0.003) but so does the "
             "own-subspace energy (−0.014 to −0.0002): no compression at layers 2–11 (layer 12 undecided at base seed "
             "1); layer 1's step a collapse (spread −0.0010 [−0.0010, −0.0010], beyond the floor 0.0002 of this size; "
             "no compression under the fitted floor, 0.0035)",
    expected_verdict="holds", full_verdict="fails",
    expected_labels=label_runs(("collapse", 1), ("compression", 7)),
    full_labels=label_runs(("collapse", 1), ("no compression", 10), ("no compression|undecided", 1)),
    kind="ideal", provenance="measurement",
)
def ideal_half_steps(ctx) -> Result:
    values = _stack(ctx, "CRATE")
    mssa_raw, ista_raw = _half_steps(values, "rate")
    steps = _mssa_steps(values, _floor(ctx))
    return Result(f"MSSA half-step, layer 1: {steps[0].text()}; {_labels(steps[1:])}; raw ΔR^c per MSSA half-step "
                  f"{mssa_raw.mean():+.2f}, per LN + ISTA half-step {ista_raw.mean():+.2f}", over_layers(steps[1:]),
                  {"mssa_delta_rate": mssa_raw.mean(0), "ista_delta_rate": ista_raw.mean(0),
                   "mssa_step": [j.as_dict() for j in steps]}, labels=layer_labels(steps))


@claim(
    id="eq27-ideal-shrink", formerly="2.24-ideal-shrink",
    tags=("layers", "ideal", "protocol"),
    location="long version, eq. (27) = (34) vs eq. (45); NeurIPS 2023, eq. (10) vs eq. (18)",
    scope="probe",
    setting=f"{IDEAL}, with eq. (27)'s shrink (1 − κβ)Z^ℓ, κβ = 1, {SEEDS} seeds; the joint measure of each MSSA "
            "half-step",
    quote="taking a gradient step on R^c with learning rate κ > 0 pushes the tokens towards having the desired "
          "statistics … Z^{ℓ+1/2} ≐ (1 − βκ)Z^ℓ + βκ MSSA(Z^ℓ | U^ℓ_[K]) ≈ Z^ℓ − κ∇R^c(Z^ℓ | U^ℓ_[K]), (27)",
    statement="With eq. (27)'s shrink (1 − κβ)Z^ℓ, which the implemented layer lacks (κβ = 1, the step the tied "
              "attention term implies), each MSSA half-step compresses the tokens towards their subspaces",
    measures=f"per layer, the joint judgement of the MSSA half-step in the stack with the shrink; raw ΔR^c (ε = 1) "
             f"per MSSA and per LN + ISTA half-step; {SEEDS} seeds",
    expected="`holds` when the joint rule credits compression to the MSSA half-step at ≥ 3/4 of layers 2 … L (layer "
             "1 apart), `fails` when it fails at more than 1/4. Expected to fail (recorded after measuring, quick, 16 "
             "seeds): the raw R^c does fall "
             "(−22 per MSSA half-step, given back by the next LayerNorm + ISTA), but layer 1's step is a collapse "
             "(spread −0.009 [−0.010, −0.008], beyond the floor of the stacks' own memberships, balanced and known, "
             "0.0005; own-subspace energy −0.090), layers 2–4 show no compression — the own-subspace energy falls at "
             "each (−0.083 to −0.038) while the specific R^c falls too (−0.057 to −0.082) — layer 5 sits at the "
             "floor (spread −0.0035 [−0.0074, +0.0004]: no compression at base seeds 0 and 2, a collapse at 1), and "
             "layers 6–8 are a collapse (spread −0.006 to −0.011, beyond that floor at base seeds 0–2; under the "
             "former fitted floor, 0.0052, their intervals straddled it). --full: layer 1 a collapse, no compression "
             "at layers 2–12 (spread higher at each; labels unchanged by either floor)",
    expected_verdict="fails",
    expected_labels=label_runs(("collapse", 1), ("no compression", 3), ("no compression|collapse", 1),
                               ("collapse", 3)),
    full_labels=label_runs(("collapse", 1), ("no compression", 11)),
    kind="ideal", provenance="measurement",
)
def ideal_shrink(ctx) -> Result:
    values = _stack(ctx, "(27) shrink")
    mssa_raw, ista_raw = _half_steps(values, "rate")
    steps = _mssa_steps(values, _floor(ctx))
    figure = _controls_figure(ctx)
    return Result(f"MSSA half-step, layer 1: {steps[0].text()}; {_labels(steps[1:])}; raw ΔR^c per MSSA half-step "
                  f"{mssa_raw.mean():+.1f}, per LN + ISTA {ista_raw.mean():+.1f}", over_layers(steps[1:]),
                  {"mssa_delta_rate": mssa_raw.mean(0), "ista_delta_rate": ista_raw.mean(0),
                   "mssa_step": [j.as_dict() for j in steps],
                   "retained_alignment": interval(_retained_alignment(values)).as_dict()}, [figure],
                  labels=layer_labels(steps))


def _paired_outputs(ctx, name: str, other: str) -> list[Judgement]:
    """Per layer ℓ = 1 … L, the joint judgement of ``name`` against ``other`` at Z^{ℓ+1}, paired by seed."""
    a, b, floor = _stack(ctx, name), _stack(ctx, other), _floor(ctx)
    return [compresses(_joint(a, _output(layer)), _joint(b, _output(layer)), floor=floor)
            for layer in range(1, _depth(a) + 1)]


CREDIT_VARIANTS = {"T = 1": ("CRATE", "ISTA only"), "T = √p": ("CRATE, T = √p", "ISTA only"),
                   "axis-aligned": ("axis-aligned", "axis-aligned, ISTA only")}
"""The attention-credit comparisons: stack with MSSA vs the same stack without its MSSA term."""


@claim(
    id="eq45-ideal-attention-credit", formerly="2.24-ideal-attention-credit",
    tags=("layers", "ideal", "protocol", "control"),
    location="long version, Sec. 2.3, eq. (45), Sec. 4.2 (the blocks' roles); NeurIPS 2023, eq. (18), Sec. 3.1; "
             "the ISTA-only control",
    scope="probe",
    setting=f"{IDEAL}, against the same stacks without their MSSA term (ISTA only), {SEEDS} seeds paired",
    quote="the MSSA block is designed to optimize the compression term R^c(Z|U_[K]) and the ISTA block to sparsify "
          "the token representations (corresponding to the sparsification term ‖Z‖₀)",
    statement="The attention (MSSA) block compresses: at every layer the full ideal CRATE's tokens are more "
              "compressed than those of the same stack without its MSSA term (ISTA only) — with temperature 1 "
              "(35) or √p (Alg. 2), randomly oriented or axis-aligned subspaces",
    measures=f"joint judgement of Z^{{ℓ+1}}, CRATE against the ISTA-only control, per layer, paired over {SEEDS} "
             f"seeds, for {', '.join(CREDIT_VARIANTS)}",
    expected="`holds` when the joint rule credits compression to attention at every layer 2 … L (layer 1 apart) in "
             "every variant, `fails` when it fails at one. Expected to fail (recorded after measuring, quick, 16 "
             "seeds; it held under the former R^c/isotropic yardstick, which credited the collapse; re-decided with "
             "the floor of the stacks' own memberships — balanced and known: 0.0005 at this size, for such tokens do "
             "not lower the spread at all —, under which every variant still fails): with attention the tokens are "
             "more alike than in the ISTA-only control at every layer of every variant, at base seeds 0–2. T = 1: "
             "layer 1 spread −0.0011 [−0.0012, −0.0009], layer 8 −0.010 [−0.011, −0.009] (energy −0.021 [−0.025, "
             "−0.018], specific R^c −0.003 [−0.004, −0.002]); T = √p: layer 1 −0.0008 [−0.0009, −0.0007], layer 8 "
             "−0.010 [−0.012, −0.009] though the own-subspace energy rises (+0.002 to +0.018); axis-aligned: "
             "−0.0009 to −0.0027, energy −0.004 to −0.050. Under the former fitted floor (0.0052) layers 1–4 read as "
             "no compression (T = 1, axis-aligned: every layer) or compression (T = √p, layers 2–4). ΔR (reported "
             "beside) is lower with attention at every layer 2–8 of every variant. --full (floor 0.0002 at d 128, "
             "n 196, K 8; it was 0.0035), base seeds 0 and 1: a collapse at every layer with T = 1 (layer 12: spread "
             "−0.0079 [−0.0087, −0.0071], energy −0.026) and axis-aligned subspaces (spread −0.0009 to −0.0058, "
             "energy −0.03 to −0.28), and with T = √p at layers 2–12 (spread −0.0018 to −0.0038, energy +0.009 to "
             "+0.020); T = √p's layer 1 sits at the floor (spread −0.0002 [−0.0003, −0.0002]: a compression at both "
             "seeds). Under the fitted floor T = √p was a compression at layers 1–11 and the others no compression "
             "at their first layers",
    expected_verdict="fails",
    expected_labels="; ".join([
        "T = 1: " + label_runs(("collapse", 8)),
        "T = √p: " + label_runs(("collapse", 8)),
        "axis-aligned: " + label_runs(("collapse", 8))]),
    full_labels="; ".join([
        "T = 1: " + label_runs(("collapse", 12)),
        "T = √p: " + label_runs(("compression|collapse", 1), ("collapse", 11)),
        "axis-aligned: " + label_runs(("collapse", 12))]),
    kind="control", provenance="measurement",
)
def ideal_attention_credit(ctx) -> Result:
    judged = {variant: _paired_outputs(ctx, *pair) for variant, pair in CREDIT_VARIANTS.items()}
    verdict = verdicts.all_hold(*(over_layers(j[1:], share=1.0) for j in judged.values()))
    first, last = next(iter(judged.items()))
    return Result("; ".join(f"{v}: {_labels(j[1:])} (layer {len(j)}: {j[-1].text()})" for v, j in judged.items()),
                  verdict, {v: [x.as_dict() for x in j] for v, j in judged.items()},
                  headline=Headline.of_judgement(f"{first}, ℓ {len(last)}", last[-1]),
                  labels="; ".join(f"{v}: {layer_labels(j)}" for v, j in judged.items()))


@claim(
    id="sec4.2-ideal-random-layers", formerly="2.24-ideal-random-layers",
    tags=("layers", "ideal", "protocol", "control"),
    location="long version, Sec. 2.5 (layers built from the data's subspaces U^ℓ), Sec. 4.2 and Fig. 15 (random "
             "initialisation); NeurIPS 2023, Sec. 3.1, Fig. 4",
    scope="probe",
    setting=f"{IDEAL}, against random layers (random U^ℓ, random orthogonal D^ℓ) on the same data, {SEEDS} seeds "
            "paired",
    quote="However, during training—learning better subspaces U^ℓ_[K] and dictionaries D^ℓ—the designed blocks start "
          "to optimize the objectives much more effectively.",
    statement="Layers built from the data's own subspaces compress the tokens more than random layers (random U^ℓ, "
              "random orthogonal D^ℓ) do",
    measures=f"joint judgement of Z^{{L+1}}, CRATE against random layers, paired over {SEEDS} seeds; every layer in "
             "the data",
    expected="`holds` when the joint rule credits compression to the CRATE stack at the last layer. "
             "Expected to fail (recorded after measuring, quick, 16 seeds; it held, by −0.011 "
             "of the former R^c/isotropic yardstick, which credited the collapse): at layer 8 the CRATE stack's "
             "tokens are more alike than the random layers' (spread −0.008 [−0.010, −0.006]) and no closer to their "
             "subspaces (own-subspace energy −0.034 [−0.042, −0.027], specific R^c −0.002 [−0.004, −0.000]) — a "
             "collapse at layers 2–8, beyond the floor of the stacks' own memberships (balanced and known: 0.0005) "
             "at base seeds 0–2 (layer 2: spread −0.0022 [−0.0029, −0.0015]); at layer 1 the spread drop (−0.0006 "
             "[−0.0012, −0.0001]) does not pass it and the lower own-subspace energy makes it no compression. Under "
             "the former fitted floor (0.0052) only layers 7–8 passed it (6–8 at base seed 2). ΔR lower at every "
             "layer (layer 8: −1.28 [−1.79, −0.77]). --full (floor 0.0002; it was 0.0035): a collapse at every layer "
             "1–12 at base seeds 0 and 1 (layer 1: spread −0.0013 [−0.0015, −0.0011]; layer 12: −0.011, energy "
             "−0.057)",
    expected_verdict="fails",
    expected_labels=label_runs(("no compression|undecided", 1), ("collapse", 7)),
    full_labels=label_runs(("collapse", 12)),
    kind="control", provenance="measurement",
)
def ideal_random_layers(ctx) -> Result:
    judged = _paired_outputs(ctx, "CRATE", "random layers")
    return Result(f"CRATE against random layers at layer {len(judged)}: {judged[-1].text()}", judged[-1].verdict,
                  {"per_layer": [j.as_dict() for j in judged]}, labels=layer_labels(judged))


ORIENTATION_SEEDS = 96
"""Data sets for the axis-aligned stack's layer 2 → L comparison, the one effect of the ideal stacks that sits at
the seed spread: its specific R^c change is about −0.0065 with a seed-to-seed standard deviation of about 0.012
(quick, 100 data sets at each of base seeds 0, 1, 2: −0.0061, −0.0078, −0.0067 ± 0.0025 — recorded after
measuring). With 16 data sets the 95% interval (± 0.006) straddles 0 at some base seeds and not at others; 96 bring
it to about ± 0.0025, under half the effect. Each data set costs about 0.04 s (quick)."""


@claim(
    id="fig3-ideal-orientation", formerly="2.24-ideal-orientation",
    tags=("layers", "ideal", "protocol", "control"),
    location="long version, Fig. 3 and Sec. 2.1 (the optimal representations: incoherent *and axis-aligned* "
             "subspaces), Fig. 5, eq. (44)",
    scope="probe",
    setting=f"{IDEAL}, axis-aligned subspaces (D = I) against randomly oriented ones on the same data, "
            f"{SEEDS} and {ORIENTATION_SEEDS} seeds",
    quote="The optimal representations … are linearized—having low-dimensional linear subspace structure— "
          "sparse—where the subspaces are axis-aligned—and compressed—adhering closely to that structure, with low "
          "or no noise.",
    statement="ISTA's ReLU preserves the subspace structure only when the subspaces are axis-aligned: with "
              "axis-aligned subspaces the ideal stack keeps its tokens on their subspaces and compresses them, with "
              "randomly oriented ones it does not",
    measures=f"alignment retained (a_L − a_iso)/(a_1 − a_iso), axis-aligned against randomly oriented subspaces "
             f"(paired, {SEEDS} seeds); the joint judgement of the axis-aligned stack's Z^{{L+1/2}} against its "
             f"Z^{{2+1/2}} (layer 1 apart), {ORIENTATION_SEEDS} seeds (an effect at the seed spread: "
             "`ORIENTATION_SEEDS`)",
    expected="`holds` when the axis-aligned stack retains more alignment (95% interval of the paired difference "
             "above 0) and its last layer's tokens are compressed relative to layer 2's by the joint rule "
             "(verify.joint); `fails` when either fails. Recorded after measuring (quick): the axis-aligned stack "
             "retains its alignment (0.99 vs 0.22 over 16 seeds) and from layer 2 to 8 compresses a little: over "
             f"{ORIENTATION_SEEDS} seeds specific R^c about −0.006 ± 0.0025, own-subspace energy and spread higher "
             "— most of it between layers 2 and 3. With 16 seeds this verdict depended on the base seed "
             "(`holds`, `inconclusive`, `holds` at base seeds 0, 1, 2). Layer 1 → 2 is a collapse even with "
             "axis-aligned subspaces (spread −0.021, beyond the floor of the stacks' own memberships, 0.0005). --full "
             "(d 128, K 8, 12 layers) it fails: alignment retained 0.74, and from layer 2 to 12 the own-subspace "
             "energy falls by 0.131 (no compression). The labels were recorded after measuring (neither the fitted "
             "floor, 0.0052, nor the floor of the stacks' own memberships changed any)",
    expected_verdict="holds", full_verdict="fails",
    expected_labels="axis-aligned layer 1 → 2: collapse; axis-aligned layer 2 → 8: compression; random layer 2 → 8: "
                    "no compression",
    full_labels="axis-aligned layer 1 → 2: collapse; axis-aligned layer 2 → 12: no compression; random layer 2 → 12: "
                "no compression",
    kind="control", provenance="measurement",
)
def ideal_orientation(ctx) -> Result:
    axis, rand = _stack(ctx, "axis-aligned"), _stack(ctx, "CRATE")
    kept = compare(_retained_alignment(axis), _retained_alignment(rand), direction="above")
    depth = _depth(axis)
    many = _stack(ctx, "axis-aligned", ORIENTATION_SEEDS)
    floor = _floor(ctx)
    first = compresses(_joint(axis, _half(2)), _joint(axis, _half(1)), floor=floor)
    later = {"axis-aligned": compresses(_joint(many, _half(depth)), _joint(many, _half(2)), floor=floor),
             "random": compresses(_joint(rand, _half(depth)), _joint(rand, _half(2)), floor=floor)}
    verdict = verdicts.all_hold(kept.verdict, later["axis-aligned"].verdict)
    figure = _controls_figure(ctx)
    return Result(f"alignment retained: axis-aligned {np.mean(_retained_alignment(axis)):.2f}, random "
                  f"{np.mean(_retained_alignment(rand)):.2f} ({kept.text()}); axis-aligned layer 1 → 2: "
                  f"{first.text()}; layer 2 → {depth} ({ORIENTATION_SEEDS} seeds): {later['axis-aligned'].text()}; "
                  f"randomly oriented layer 2 → {depth}: {later['random'].label}", verdict,
                  {"retained_difference": kept.as_dict(), "axis_layer_1_to_2": first.as_dict(),
                   **{f"{name}_layer_2_to_last": j.as_dict() for name, j in later.items()}}, [figure],
                  labels=named_labels({"axis-aligned layer 1 → 2": first,
                                       **{f"{name} layer 2 → {depth}": j for name, j in later.items()}}))


@claim(
    id="fig14-ideal-sparsity", formerly="2.24-ideal-sparsity",
    tags=("layers", "ideal"),
    location="long version, Sec. 2.4, eq. (44), Sec. 4.2, Fig. 14 (right) and footnote 17; NeurIPS 2023, eq. (17), "
             "Sec. 3.1, Fig. 3 and footnote 8",
    scope="probe",
    setting=f"{IDEAL}, {SEEDS} seeds; the stack has no classifier, so footnote 17 exempts no layer",
    quote="as the layer index ℓ increases, both the compression and the sparsification terms improve in most cases. "
          "The increase in the sparsity measure of the last layer is caused by the extra linear layer for "
          "classification.",
    statement="The same ideal unrolled CRATE makes the tokens sparser layer by layer (‖Z^{ℓ+1}‖₀/(dn) decreases; "
              "footnote 17's rise at the last layer comes from a classifier, which this stack lacks)",
    measures=f"fraction of non-zero entries of the ISTA output per layer, {SEEDS} seeds: each layer-to-layer step "
             "and the last layer against the first, paired by seed",
    expected=DECREASE_RULE,
    expected_verdict="holds",
    kind="ideal", provenance="analysis",
)
def ideal_sparsity(ctx) -> Result:
    sparsity = _outputs(_measure(_stack(ctx, "CRATE"), "sparsity"))
    steps, whole, verdict = decreases_layer_by_layer(sparsity)
    return Result(f"non-zeros {_curve(sparsity.mean(0)[[0, -1]])}, last − first {whole.text()}; steps "
                  f"{brief(steps)}", verdict,
                  {"sparsity": sparsity.mean(0), "steps": [c.as_dict() for c in steps], "whole": whole.as_dict()},
                  headline=Headline.of(f"non-zeros, layer {sparsity.shape[1]} − 1", whole.difference))


EQUIVALENCE = 0.05
"""Margin on the last-layer alignment (a fraction of energy in [0, 1]) within which two temperatures count as
equivalent: 5 points of own-subspace energy."""


@claim(
    id="eq35-ideal-temperature", formerly="2.8-temperature",
    tags=("compression", "mssa", "erratum", "protocol"),
    location="long version, eq. (35) vs Algorithm 2 (scale p^{-1/2}); NeurIPS 2023, eq. (11)",
    scope="probe",
    setting=f"{IDEAL}, attention half-steps only (no ISTA), temperature 1 against √p, {SEEDS} seeds paired",
    quote="SSA(Z|U_k) ≐ (U_k*Z) softmax((U_k*Z)*(U_k*Z)), k ∈ [K], (35) … Algorithm 2: self.scale = dim_head ** "
          "-0.5 … dots = matmul(w, w.transpose(-1, -2)) * self.scale",
    statement="The implemented softmax temperature √p (Alg. 2) is immaterial: inside a stack of attention "
              "half-steps, eq. (35)'s temperature 1 and √p both keep the tokens in their subspaces",
    measures=f"own-subspace energy of Z^{{L+1}} in the ideal attention-only stack, temperature 1 − √p, paired over "
             f"{SEEDS} seeds",
    expected=f"`holds` when the 95% interval of the difference lies within ±{EQUIVALENCE} (verify.statistics.compare "
             "against each margin), `fails` when it lies beyond one, `inconclusive` when it straddles one. Expected "
             "to fail (recorded after measuring): with temperature 1 the near-uniform softmax of the other "
             "subspaces' heads mixes every token with their means and the own-subspace energy decays with depth "
             "(0.94 → 0.81), while √p keeps it (0.94 → 0.97): difference −0.152 ± 0.007",
    expected_verdict="fails",
    kind="ideal", provenance="measurement",
)
def temperature(ctx) -> Result:
    one, sqrt_p = _stack(ctx, "attention only"), _stack(ctx, "attention only, T = √p")
    a1, ap = _measure(one, "alignment"), _measure(sqrt_p, "alignment")
    margins = verdicts.within(a1[:, -1] - ap[:, -1], EQUIVALENCE)  # paired by seed
    figure = _controls_figure(ctx)
    return Result(f"own-subspace energy {a1.mean(0)[0]:.2f} → {a1.mean(0)[-1]:.2f} (T = 1) vs "
                  f"{ap.mean(0)[0]:.2f} → {ap.mean(0)[-1]:.2f} (T = √p); difference {margins[0].text()}",
                  every(margins),
                  {"alignment_T1": a1.mean(0), "alignment_sqrt_p": ap.mean(0),
                   "difference": margins[0].difference.as_dict(), "margins": [c.as_dict() for c in margins]},
                  [figure], Headline.of("energy, T = 1 − √p", margins[0].difference))
