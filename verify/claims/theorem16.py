"""Theorem 16 (compression ⇔ denoising) and Remark 17 at CRATE-Base sizes under --full (d 768, n 196, K 12,
p 64) and at d 256, n 64, K 8, p 32 under --quick (the same n/d ≈ 0.25 and Kp = d) — paper-notes §1.12,
checks 2.16–2.18; Remark 17's optimal ε (242)–(245) and residual (244), the zero-shrinkage statement for ΔR, and
Remark 18's near-orthogonal subspaces (issue 25).

Model (232): K pairwise-orthogonal subspaces, codes N(0, I/p), noise N(0, σ²/d · I), a random permutation (Remark
18: the same draw on bases of coherence ν, d 256, n 64, K 7, p 32 quick and d 768, n 196, K 11, p 64 full).
"""
from __future__ import annotations

import functools

import numpy as np
import scipy.linalg

import crate_nn
from crate_theory import coding_rate_grad, compression_rate_grad
from crate_theory.synthetic import orthonormal_bases
from crate_theory.theorem16 import (
    at_noise_level,
    on_bases,
    projection_operators,
    remark17_beta_inv,
    remark17_eps,
    remark17_residual_bound,
    sample_theorem16,
    theorem16_residuals,
)
from verify import plots, verdicts
from verify.context import Context
from verify.numerics import fmt, loglog_argmin, loglog_slope
from verify.registry import Headline, Result, claim
from verify.statistics import compare, every

SIGMAS = np.array([0.1, 0.03, 0.01, 0.003])


def _sizes(ctx) -> tuple[int, int, int, int]:
    """(d, n, K, p)."""
    return ctx.pick((256, 64, 8, 32), (768, 196, 12, 64))


def _sample(ctx, sigma: float):
    d, n, K, p = _sizes(ctx)
    return sample_theorem16(d, n, K, p, sigma, ctx.rng)


@claim(
    id="2.16-good-event",
    tags=("theorem16",),
    location="004 eqs. (257)–(258), Props. 22–24",
    statement="On the good event E⋆: ‖Δ‖ ≲ σ(1 + √(n/d)), ‖A_k‖ ≲ 1 + √(K_k/p), ‖A_k*A_k − I‖ ≲ √(K_k/p) "
              "(the constants of order one)",
    measures="ratios of the measured norms to σ(1 + √(n/d)), 1 + √(K_k/p) and 2√(K_k/p) + K_k/p "
             "(the Gaussian/Marchenko–Pastur edges), worst over k",
    expected="every ratio in [1/3, 3]: the theorem's constants are unspecified, 'of order one' is what can be checked "
             "(the Gaussian/MP edges are approached only for large blocks; K_k ≈ n/K is small here)",
    expected_verdict="holds",
    kind="theory", provenance="analysis",
)
def good_event(ctx) -> Result:
    sigma = 0.1
    s = _sample(ctx, sigma)
    d, n, _, p = _sizes(ctx)
    ratios = {"delta": np.linalg.norm(s.Delta, 2) / (sigma * (1 + np.sqrt(n / d)))}
    a_norm, gram = [], []
    for A in s.A:
        c = A.shape[1] / p
        a_norm.append(np.linalg.norm(A, 2) / (1 + np.sqrt(c)))
        gram.append(np.linalg.norm(A.T @ A - np.eye(A.shape[1]), 2) / (2 * np.sqrt(c) + c))
    ratios["A_k (worst)"] = max(a_norm, key=lambda r: abs(r - 1))
    ratios["A_k*A_k − I (worst)"] = max(gram, key=lambda r: abs(r - 1))
    worst = max(max(r, 1 / r) for r in ratios.values())
    return Result(", ".join(f"{k} {v:.2f}" for k, v in ratios.items()), verdicts.at_most(worst, 3.0),
                  {k: float(v) for k, v in ratios.items()})


def _residual_sweep(ctx):
    """theorem16_residuals at ε = 1 for each σ of SIGMAS — one sweep shared by the claims that read it."""
    return _sweep(ctx.mode, ctx.seed, _sizes(ctx))


@functools.lru_cache(maxsize=2)
def _sweep(mode: str, seed: int, sizes: tuple[int, int, int, int]):
    rng = Context(mode, seed, "2.16-sweep", ".").rng_for("2.16-sweep")
    return [theorem16_residuals(sample_theorem16(*sizes, sigma, rng), 1.0) for sigma in SIGMAS]


def floor_exponent(ratios, floors) -> float:
    """Fitted exponent a of floor ∝ (n/d)^a."""
    return loglog_slope(np.asarray(ratios), np.asarray(floors))


@functools.lru_cache(maxsize=2)
def _floors(mode: str, seed: int, sizes: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray, float]:
    """(n/d, mean σ → 0 residual ‖∇R^c − (315)‖ per n, β) at a fixed β = p/(n_0ε²) with ε = 1 at the mode's n_0:
    ε is rescaled with n so that only n/d moves. Seven n from p to d (geometric), ``reps`` samples each."""
    d, n0, K, p = sizes
    beta = p / n0
    reps = 2 if mode == "quick" else 3
    rng = Context(mode, seed, "2.16-floor", ".").rng_for("2.16-floor")
    ns = np.unique(np.round(np.geomspace(p, d, 7)).astype(int))
    floors = [np.mean([theorem16_residuals(sample_theorem16(d, n, K, p, SIGMAS[-1], rng), np.sqrt(p / (n * beta)))
                       .residual_nominal for _ in range(reps)]) for n in ns]
    return ns / d, np.array(floors), beta


@claim(
    id="2.16-nominal-floor",
    tags=("theorem16", "rate"),
    location="004 Theorem 16, eqs. (237)–(238), (315)–(318); Lemma 20",
    statement="The gradient step on R^c matches the nominal denoising step (237) up to the bound (238): an O(σ) "
              "part and a σ-independent part of order √(n/d) (Lemma 20's A_k/(1 + β^{-1}) replacement) — so as "
              "σ → 0 the residual levels off at a floor that scales as √(n/d)",
    measures="‖∇R^c − (315)‖ vs σ at the mode's sizes (ε = 1: slope and floor); the σ = 0.003 floor for seven "
             "n ∈ [p, d] at fixed β (ε rescaled with n): fitted exponent of floor ∝ (n/d)^a",
    expected="`holds` when the exponent is 0.5 ± 0.15 (the √(n/d) of (238); the tolerance allows the order-one "
             "factors of the good event E⋆, which drift with n/d, and the sample-to-sample spread of a 7-point fit). "
             "This restates the former 2.16-nominal-vanishes, which tested a misreading (that the residual vanishes "
             "as σ → 0) and failed, as the theorem says it must",
    expected_verdict="holds",
    kind="theory", provenance="analysis",
)
def nominal_floor(ctx) -> Result:
    rows = _residual_sweep(ctx)
    d, n, _, _ = _sizes(ctx)
    nominal = np.array([r.residual_nominal for r in rows])
    exact_a = np.array([r.residual_exact_a for r in rows])
    sigma_slope = loglog_slope(SIGMAS, nominal)
    ratios, floors, beta = _floors(ctx.mode, ctx.seed, _sizes(ctx))
    exponent = floor_exponent(ratios, floors)
    figures = [plots.loglog_rates(ctx.figure_path("residuals"), SIGMAS, {"vs nominal (315)": nominal,
                                                                         "vs exact-A nominal": exact_a},
                                  xlabel="σ", ylabel="‖∇R^c − prediction‖ (operator norm)",
                                  title=f"Theorem 16 at d={d}, n={n} (ε = 1)", references={"slope 1": 1.0}),
               plots.loglog_rates(ctx.figure_path("floor"), ratios, {"σ → 0 floor": floors}, xlabel="n/d",
                                  ylabel="‖∇R^c − (315)‖ at σ = 0.003", title=f"floor vs n/d at β = {beta:.3g}",
                                  references={"slope ½ (√(n/d))": 0.5})]
    return Result(f"σ-slope {sigma_slope:.3f} (floor {fmt(nominal[-1])} = {nominal[-1] / np.sqrt(n / d):.3f}·√(n/d)); "
                  f"floor ∝ (n/d)^{exponent:.2f}", verdicts.slope(exponent, 0.5, 0.15),
                  {"sigma": SIGMAS, "residual_nominal": nominal, "sigma_slope": sigma_slope, "n_over_d": ratios,
                   "floor": floors, "exponent": exponent, "beta": beta}, figures,
                  Headline("a in floor ∝ (n/d)^a", exponent))


@claim(
    id="2.16-exact-a-nominal",
    tags=("theorem16", "rate"),
    location="004 Theorem 16 proof, (264)–(311); paper-notes §2.16 (c)",
    statement="Keeping the signal term exactly (U_kA_k(β^{-1}I + A_k*A_k)^{-1}), the remaining error of the "
              "proof's expansion is O(σ): the noise part P_{U[K]}(βΔΠ*)Π is right to first order",
    measures="fitted log-log slope of ‖∇R^c − exact-A nominal‖ vs σ ∈ {0.1 … 0.003} (ε = 1)",
    expected="slope 1 ± 0.2 (the bound (238) without its √(n/d) term is linear in σ for small σ)",
    expected_verdict="holds",
    kind="theory", provenance="analysis",
)
def exact_a_nominal(ctx) -> Result:
    rows = _residual_sweep(ctx)
    exact_a = np.array([r.residual_exact_a for r in rows])
    slope = loglog_slope(SIGMAS, exact_a)
    return Result(f"slope {slope:.2f} ({fmt(exact_a[0])} → {fmt(exact_a[-1])})", verdicts.slope(slope, 1.0, 0.2),
                  {"sigma": SIGMAS, "residual_exact_a": exact_a, "slope": slope})


@claim(
    id="2.16-noise-retention",
    tags=("theorem16", "remark17"),
    location="004 Remark 17, eqs. (239)–(241), (248)–(249)",
    statement="With η = β^{-1} and ε → 0, one step keeps the fraction (p + (K−1)n/K)/d of the noise energy: the "
              "own-subspace part and, in the other subspaces, the part inside the span of their tokens",
    measures="‖Z⁺(X_♮+Δ) − Z⁺(X_♮)‖_F²/‖Δ‖_F² at ε = 0.05, σ = 0.01, vs (p + (K−1)n/K)/d",
    expected="within 10% of the prediction (the prediction is the ε → 0 limit with the expected K_k = n/K)",
    expected_verdict="holds",
    kind="theory", provenance="analysis",
)
def noise_retention(ctx) -> Result:
    d, n, K, p = _sizes(ctx)
    r = theorem16_residuals(_sample(ctx, 0.01), eps=0.05)
    predicted = (p + (K - 1) * n / K) / d
    gap = abs(r.noise_retention - predicted) / predicted
    return Result(f"retained {r.noise_retention:.3f} vs predicted {predicted:.3f} (nominal step "
                  f"{r.nominal_noise_retention:.3f})", verdicts.at_most(gap, 0.1),
                  {"retained": r.noise_retention, "predicted": predicted, "nominal": r.nominal_noise_retention})


@claim(
    id="2.17-projection-limit",
    tags=("theorem16", "remark17", "rate"),
    location="004 Remark 17, eqs. (248)–(249)",
    statement="As β^{-1} → 0, I − A(β^{-1}I + A*A)^{-1}A* → the orthogonal projection onto im(A)^⊥, so P_k → "
              "Σ_{k'≠k} U_{k'} proj_{im(A_{k'})^⊥} U_{k'}*, at rate O(β^{-1}/σ_min(A)²)",
    measures="‖P_k(β) − P_k(∞)‖ for β^{-1} ∈ 1e-6 … 1e-2: fitted slope, and the ratio to β^{-1}/min_k σ_min(A_k)²",
    expected="slope 1 ± 0.1 and ratio ≤ 1 (for A of full column rank the gap is exactly "
             "max β^{-1}/(σ_i² + β^{-1}) ≤ β^{-1}/σ_min²)",
    expected_verdict="holds",
    kind="theory", provenance="analysis",
)
def projection_limit(ctx) -> Result:
    s = _sample(ctx, 0.01)
    pieces = []
    for U_k, A in zip(s.U, s.A):
        Q = scipy.linalg.orth(A)  # orthonormal basis of im(A_k)
        pieces.append(U_k @ (np.eye(U_k.shape[1]) - Q @ Q.T) @ U_k.T)
    limit_0 = sum(pieces[1:])  # P_1(∞) = Σ_{k'≠1}
    inv_betas = np.logspace(-6, -2, 5)
    gaps = np.array([np.linalg.norm(projection_operators(s.U, s.A, 1 / b)[0] - limit_0, 2) for b in inv_betas])
    smin2 = min(np.linalg.svd(A, compute_uv=False).min() ** 2 for A in s.A[1:])
    slope, ratio = loglog_slope(inv_betas, gaps), float(np.max(gaps / (inv_betas / smin2)))
    verdict = verdicts.all_hold(verdicts.slope(slope, 1.0, 0.1), verdicts.at_most(ratio, 1.0 + 1e-9))
    return Result(f"slope {slope:.3f}; gap / (β⁻¹/σ_min²) ≤ {ratio:.3f}", verdict,
                  {"inv_beta": inv_betas, "gap": gaps, "slope": slope, "ratio": ratio})


@claim(
    id="2.18-beta-at-least-1",
    tags=("theorem16", "erratum"),
    location="004 Theorem 16 proof after (293); paper-notes §7.6",
    statement="\"ε ≤ 1 and the rest of Assumption 15 imply β ≥ 1\", at the CRATE-Base sizes the theorem cites",
    measures="β = p/(nε²) at ε = 1 for crate_base (d, K, p from the registry; n = 196 patches), after checking "
             "Assumption 15's explicit inequalities d ≥ n ≥ p ≥ K ≥ 2, Kp = d",
    expected="β ≥ 1 for every ε ≤ 1 would need ε² ≤ p/n; expected to fail (β ≥ 1 only for ε ≤ √(p/n))",
    expected_verdict="fails",
    kind="printed", provenance="analysis",
)
def beta_at_least_one(ctx) -> Result:
    config = crate_nn.model_config("crate_base")
    d, K, p, n = config.dim, config.heads, config.head_dim, config.num_patches
    if not (d >= n >= p >= K >= 2 and K * p == d):
        raise AssertionError(f"Assumption 15's explicit inequalities fail at d={d}, n={n}, p={p}, K={K}")
    beta = p / n  # β = p/(nε²) is smallest at ε = 1 over ε ∈ (0, 1]
    return Result(f"β(ε=1) = {beta:.3f}; β ≥ 1 needs ε ≤ {np.sqrt(p / n):.3f}", verdicts.at_least(beta, 1.0),
                  {"d": d, "n": n, "K": K, "p": p, "beta_at_eps_1": beta, "eps_threshold": float(np.sqrt(p / n))})


# ---------------------------------------------------------------------------------------------------- Remark 17
R17_SIGMAS = np.geomspace(0.001, 0.1, 5)
"""Remark 17's σ grid: two decades below √(n/d) = 0.5, where (246) √(σ + √(n/d)) ≲ 1 holds (≤ 0.77)."""
R17_FACTORS = np.logspace(-3, 0.5, 11)
"""The ε² grid of each σ, as multiples of (243)'s ε²: three points a decade (ratio 2.15), refined by a parabola."""
R17_SEEDS = 3
SLOPE_TOL = 0.25
"""How far a fitted σ-exponent may stray from the one (243)/(244) give over `R17_SIGMAS`: an order-one factor that
drifts by up to 2.4× across the grid's two decades moves a slope by log 2.4 / log 100 ≈ 0.19, and the parabola's
argmin (`verify.numerics.loglog_argmin`) adds a few hundredths."""


@functools.lru_cache(maxsize=2)
def _remark17_sweep(mode: str, seed: int, sizes: tuple[int, int, int, int]) -> dict[str, np.ndarray]:
    """Remark 17's residual ‖Z⁺ − [Δ − P(ΔΠ*)Π + X_♮/(1 + β^{-1})]‖ (η = β^{-1}, operator norm) on the ε² grid of
    each σ, one draw per seed shared by every σ (`at_noise_level`); its parabola-refined minimum per (seed, σ)."""
    d, n, K, p = sizes
    rng = Context(mode, seed, "2.17-remark17", ".").rng_for("2.17-remark17")
    predicted = np.array([remark17_eps(s, n, d, K) ** 2 for s in R17_SIGMAS])
    errors = np.empty((R17_SEEDS, len(R17_SIGMAS), len(R17_FACTORS)))
    for i in range(R17_SEEDS):
        draw = sample_theorem16(d, n, K, p, 1.0, rng)
        for j, sigma in enumerate(R17_SIGMAS):
            sample = at_noise_level(draw, sigma)
            errors[i, j] = [theorem16_residuals(sample, np.sqrt(e2)).step_residual_nominal
                            for e2 in predicted[j] * R17_FACTORS]
    optimum = [[loglog_argmin(predicted[j] * R17_FACTORS, errors[i, j]) for j in range(len(R17_SIGMAS))]
               for i in range(R17_SEEDS)]
    eps2_opt, residual_min, at_edge = (np.array([[o[m] for o in row] for row in optimum]) for m in range(3))
    return {"sigma": R17_SIGMAS, "eps2_predicted": predicted, "errors": errors, "eps2_opt": eps2_opt,
            "residual_min": residual_min, "at_edge": at_edge.astype(bool),
            "residual_predicted": np.array([remark17_residual_bound(s, n, d, K) for s in R17_SIGMAS])}


def _within(values, target: float, tol: float) -> list:
    """|mean of ``values`` − ``target``| < ``tol`` as two `compare` comparisons over seeds (both must hold)."""
    deviation = np.asarray(values, dtype=float) - target
    return [compare(deviation, direction="below", boundary=tol), compare(deviation, direction="above", boundary=-tol)]


def _slope_claim(ctx, key: str, predicted_key: str, name: str) -> Result:
    """The fitted σ-exponent of ``key`` per seed against that of ``predicted_key`` (both over `R17_SIGMAS`)."""
    sweep = _remark17_sweep(ctx.mode, ctx.seed, _sizes(ctx))
    slopes = np.array([loglog_slope(R17_SIGMAS, row) for row in sweep[key]])
    predicted = loglog_slope(R17_SIGMAS, sweep[predicted_key])
    comparisons = _within(slopes, predicted, SLOPE_TOL)
    ratio = sweep[key].mean(axis=0) / sweep[predicted_key]
    edges = int(sweep["at_edge"].sum())
    figure = plots.loglog_rates(ctx.figure_path("sigma"), R17_SIGMAS,
                                {f"measured {name}": sweep[key].mean(axis=0), f"Remark 17 {name}": sweep[predicted_key]},
                                xlabel="σ", ylabel=name, title=f"Remark 17: {name} against σ",
                                references={f"slope {predicted:.2f}": predicted})
    return Result(f"σ-exponent {slopes.mean():.2f} ± {slopes.std(ddof=1):.2f} vs {predicted:.2f} predicted "
                  f"(measured / predicted {ratio.min():.2g}–{ratio.max():.2g}; {edges} argmins at a grid end)",
                  every(comparisons),
                  {"sigma": R17_SIGMAS, key: sweep[key], predicted_key: sweep[predicted_key], "slopes": slopes,
                   "predicted_slope": predicted, "tolerance": SLOPE_TOL, "at_edge": sweep["at_edge"],
                   "comparisons": [c.as_dict() for c in comparisons]}, [figure],
                  Headline.of("σ-exponent − predicted", comparisons[0].difference))


@claim(
    id="2.17-remark17-optimal-eps",
    tags=("theorem16", "remark17", "rate"),
    location="004 Remark 17, eqs. (239)–(243), (245)",
    statement="Minimising the bound (239)–(241) over ε gives the optimal precision ε² = σd/(nK√(σ + √(n/d))) "
              "(242)–(243), i.e. β^{-1} = σ/√(σ + √(n/d)) (245): the best ε² grows about linearly in σ for "
              "σ ≪ √(n/d)",
    measures="the ε² minimising the measured ‖Z⁺ − [Δ − P(ΔΠ*)Π + X_♮/(1 + β^{-1})]‖ (η = β^{-1}, operator norm) "
             f"on a grid of 11 ε² from 10^-3 to 10^0.5 times (243)'s (parabola-refined), for σ ∈ "
             f"{{0.001 … 0.1}} (5 values), {R17_SEEDS} seeds (one draw per seed for every σ); fitted σ-exponent of "
             "the optimal ε² per seed against that of (243) over the same σ",
    expected=f"`holds` when the 95% interval over seeds of (measured − predicted exponent) lies within ±{SLOPE_TOL} "
             "(the rule, fixed before measuring: an order-one factor drifting by up to 2.4× across two decades of σ, "
             "plus the argmin's refinement); `fails` when it lies outside. Recorded after measuring: fails — the "
             "measured optimum grows as σ^1.5 at 10–100× smaller ε² than (243): for small ε the true residual levels "
             "off near ‖P(ΔΠ*)Π‖ ~ σ instead of growing as the bound's σ²d/(nε²), so the optimum balances the "
             "σ-free √(n/d)·η term against a noise term ~ βσ³, not βσ²",
    expected_verdict="fails",
    kind="theory", provenance="measurement",
)
def remark17_optimal_eps(ctx) -> Result:
    return _slope_claim(ctx, "eps2_opt", "eps2_predicted", "optimal ε²")


@claim(
    id="2.17-remark17-residual",
    tags=("theorem16", "remark17", "rate"),
    location="004 Remark 17, eq. (244)",
    statement="At the optimal ε the residual of Theorem 16's step is at most a constant times "
              "Kσ(√K σ + √(σ + √(n/d))) (244): about linear in σ for σ ≪ √(n/d)",
    measures="the parabola-refined minimum over ε² of the measured residual (the sweep of "
             "2.17-remark17-optimal-eps); its fitted σ-exponent per seed against that of (244) over the same σ",
    expected=f"`holds` when the 95% interval over seeds of (measured − predicted exponent) lies within ±{SLOPE_TOL} "
             "(the rule of 2.17-remark17-optimal-eps, fixed before measuring). Recorded after measuring: fails — the "
             "best residual falls as σ^1.5 (below (244), an upper bound, whose σ-dependence is that of a loose "
             "term); the bound is not contradicted, its rate is not the one attained",
    expected_verdict="fails",
    kind="theory", provenance="measurement",
)
def remark17_best_residual(ctx) -> Result:
    return _slope_claim(ctx, "residual_min", "residual_predicted", "best residual")


@functools.lru_cache(maxsize=2)
def _shrinkage_sweep(mode: str, seed: int, sizes: tuple[int, int, int, int]) -> dict[str, np.ndarray]:
    """Signal shrinkage 1 − ⟨Z⁺, X_♮⟩/‖X_♮‖_F² of one step η = β^{-1} at Remark 17's ε (243), for each σ of
    `R17_SIGMAS` and seed: descent on R^c (Z⁺ = Z − η∇R^c) and ascent on ΔR = R − R^c (Z⁺ = Z + η(∇R − ∇R^c))."""
    d, n, K, p = sizes
    rng = Context(mode, seed, "2.17-remark17", ".").rng_for("2.17-shrinkage")
    shrink = {"R^c": np.empty((R17_SEEDS, len(R17_SIGMAS))), "ΔR": np.empty((R17_SEEDS, len(R17_SIGMAS)))}
    for i in range(R17_SEEDS):
        draw = sample_theorem16(d, n, K, p, 1.0, rng)
        X = draw.X_nat
        for j, sigma in enumerate(R17_SIGMAS):
            Z, eps = at_noise_level(draw, sigma).Z, remark17_eps(sigma, n, d, K)
            eta, grad_c = remark17_beta_inv(sigma, n, d), compression_rate_grad(Z, draw.U, eps)
            for name, step in (("R^c", Z - eta * grad_c), ("ΔR", Z + eta * (coding_rate_grad(Z, eps) - grad_c))):
                shrink[name][i, j] = 1 - np.sum(step * X) / np.sum(X * X)
    return {"sigma": R17_SIGMAS, "beta_inv": np.array([remark17_beta_inv(s, n, d) for s in R17_SIGMAS]), **shrink}


@claim(
    id="2.17-delta-r-zero-shrinkage",
    tags=("theorem16", "remark17"),
    location="004 Remark 17, after (249); paper-notes §1.12",
    statement="A gradient step on R^c shrinks the signal by the noise-dependent factor 1/(1 + β^{-1}); a step on the "
              "full ΔR = R − R^c instead gives zero shrinkage (stated, not proved)",
    measures="signal shrinkage 1 − ⟨Z⁺, X_♮⟩/‖X_♮‖_F² of one step η = β^{-1} at Remark 17's ε (243), on tokens of "
             f"(232) (on their subspaces plus noise), σ ∈ {{0.001 … 0.1}}, {R17_SEEDS} seeds: descent on R^c, "
             "ascent on ΔR",
    expected="`holds` when at every σ the 95% interval over seeds of the ΔR step's shrinkage contains 0 (zero, up to "
             "the noise's scatter); `fails` when at some σ it excludes 0. Recorded after measuring: fails. For "
             "noiseless tokens with A_k*A_k = I the step scales the signal by 1 + (K − 1)/((Kβ + 1)(β + 1)) (∇R has "
             "α = Kβ): no first-order shrinkage, but a second-order expansion, which the larger σ resolve (while the "
             "R^c step's shrinkage follows β^{-1}/(1 + β^{-1}))",
    expected_verdict="fails",
    kind="theory", provenance="measurement",
)
def delta_r_zero_shrinkage(ctx) -> Result:
    sweep = _shrinkage_sweep(ctx.mode, ctx.seed, _sizes(ctx))
    delta_r, r_c = sweep["ΔR"], sweep["R^c"]
    nonzero = [compare(delta_r[:, j], direction=side, boundary=0.0).verdict == "holds"
               for j in range(len(R17_SIGMAS)) for side in ("below", "above")]
    worst = int(np.argmax(np.abs(delta_r.mean(axis=0))))
    ratio = np.abs(delta_r.mean(axis=0)) / r_c.mean(axis=0)
    return Result(f"ΔR step {delta_r.mean(axis=0)[worst]:+.2g} at σ = {R17_SIGMAS[worst]:g} (R^c step "
                  f"{r_c.mean(axis=0)[worst]:+.2g}, β^{{-1}}/(1 + β^{{-1}}) = "
                  f"{sweep['beta_inv'][worst] / (1 + sweep['beta_inv'][worst]):.2g}); |ΔR|/R^c "
                  f"{ratio.min():.1g}–{ratio.max():.2g}", "fails" if any(nonzero) else "holds",
                  {"sigma": R17_SIGMAS, "beta_inv": sweep["beta_inv"], "shrinkage_delta_r": delta_r,
                   "shrinkage_r_c": r_c, "ratio": ratio},
                  headline=Headline.from_seeds(f"ΔR step's shrinkage at σ = {R17_SIGMAS[worst]:g}", delta_r[:, worst]))


# ---------------------------------------------------------------------------------------------------- Remark 18
R18_NUS = np.array([0.0, 0.003, 0.01, 0.03, 0.1, 0.3])
R18_SIGMA = 0.01
R18_SEEDS = 5
NU_ZERO = 1e-32
"""ν = 0 realised as coherence 1e-32 of the same construction (sin θ = 1e-16: the same Q_k, pairwise orthogonal to
rounding), so that every ν of a seed shares the blocks Q_1 … Q_K, S and the draw."""


def _r18_sizes(ctx) -> tuple[int, int, int, int]:
    """(d, n, K, p) with (K + 1)p = d, which bases of coherence ν > 0 need (one block S shared by all U_k)."""
    return ctx.pick((256, 64, 7, 32), (768, 196, 11, 64))


def _coherence_sweep(ctx) -> np.ndarray:
    """Remark 17's residual (η = β^{-1} of (245) at σ = `R18_SIGMA`) for each ν of `R18_NUS`: (seeds, ν)."""
    d, n, K, p = _r18_sizes(ctx)
    eps = np.sqrt(remark17_beta_inv(R18_SIGMA, n, d) * p / n)  # β^{-1} = nε²/p at (245)'s value
    errors = np.empty((R18_SEEDS, len(R18_NUS)))
    for i in range(R18_SEEDS):
        draw = sample_theorem16(d, n, K, p, R18_SIGMA, ctx.rng)
        bases_seed = int(ctx.rng.integers(2**31))
        for j, nu in enumerate(R18_NUS):
            U = orthonormal_bases(K, d, p, seed=bases_seed, coherence=max(nu, NU_ZERO))
            errors[i, j] = theorem16_residuals(on_bases(draw, U), eps).step_residual_nominal
    return errors


def coherence_exponents(errors: np.ndarray) -> np.ndarray:
    """Per seed, the fitted exponent a of (residual(ν) − residual(0)) ∝ ν^a over the ν > 0 where the extra is
    positive; 0 (no growth to fit) where fewer than 3 are."""
    out = []
    for row in errors:
        extra, nus = row[1:] - row[0], R18_NUS[1:]
        up = extra > 0
        out.append(loglog_slope(nus[up], extra[up]) if up.sum() >= 3 else 0.0)
    return np.array(out)


@claim(
    id="2.17-remark18-coherence",
    tags=("theorem16", "remark18", "rate"),
    location="004 Remark 18",
    statement="Relaxing orthogonality to ‖U_k*U_{k'} − 1_{k=k'}I‖ ≤ ν adds error terms polynomial in ν to "
              "Theorem 16 / Remark 17: the denoising degrades with ν and continuously from ν = 0",
    measures=f"Remark 17's residual ‖Z⁺ − [Δ − P(ΔΠ*)Π + X_♮/(1 + β^{{-1}})]‖ (η = β^{{-1}} of (245), σ = "
             f"{R18_SIGMA}) on bases of coherence ν ∈ {R18_NUS.tolist()} (U_k*U_k' = νI), the same draw of (232) "
             f"for every ν, {R18_SEEDS} seeds; (K + 1)p = d",
    expected="`holds` when the mean residual increases on at least 3/4 of the grid steps and the 95% interval over "
             "seeds of the exponent a in (residual(ν) − residual(0)) ∝ ν^a lies above 0 (a polynomial extra that "
             "vanishes at ν = 0); `fails` when fewer steps increase or the interval lies below 0 (the rule of "
             "issue 25, fixed before measuring; the expectation is Remark 18's statement)",
    expected_verdict="holds",
    kind="theory", provenance="analysis",
)
def remark18_coherence(ctx) -> Result:
    errors = _coherence_sweep(ctx)
    mean = errors.mean(axis=0)
    rising = float(np.mean(np.diff(mean) > 0))
    exponents = coherence_exponents(errors)
    positive = compare(exponents, direction="above", boundary=0.0)
    verdict = "fails" if rising < 0.75 else positive.verdict
    figure = plots.curves(ctx.figure_path("coherence"), R18_NUS, {"Remark 17 residual": mean}, xlabel="ν",
                          ylabel="operator norm", title="Remark 18: residual against the coherence ν")
    return Result(f"residual {mean[0]:.3g} (ν = 0) → {mean[-1]:.3g} (ν = {R18_NUS[-1]:g}); rises on "
                  f"{rising:.0%} of the steps; extra ∝ ν^a, a = {exponents.mean():.2f} ± {exponents.std(ddof=1):.2f}",
                  verdict, {"nu": R18_NUS, "residual": errors, "rising_fraction": rising, "exponents": exponents,
                            "comparison": positive.as_dict()}, [figure],
                  Headline.of("a in extra ∝ ν^a", positive.difference))
