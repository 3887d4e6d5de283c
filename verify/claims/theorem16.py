"""Theorem 16 (compression ⇔ denoising) and Remarks 17–18 of the long version (App. B.3), at CRATE-Base sizes under
--full (d 768, n 196, K 12, p 64) and at d 256, n 64, K 8, p 32 under --quick (the same n/d ≈ 0.25 and Kp = d):
the good event, the nominal step and its floor, Remark 17's optimal ε (242)–(245), its residual (244), the
projection limit (248)–(249), the zero-shrinkage statement for ΔR, and Remark 18's near-orthogonal subspaces.

Model (232): K pairwise-orthogonal subspaces, codes N(0, I/p), noise N(0, σ²/d · I), a random permutation (Remark
18: the same draw on bases of coherence ν, d 256, n 64, K 7, p 32 quick and d 768, n 196, K 11, p 64 full).
"""
from __future__ import annotations

import functools

import numpy as np
import scipy.linalg
import scipy.optimize

import crate_nn
from crate_theory import coding_rate_grad, compression_rate_grad
from crate_theory.synthetic import orthonormal_bases
from crate_theory.theorem16 import (
    at_noise_level,
    on_bases,
    projection_operators,
    remark17_beta_inv,
    remark17_bound,
    remark17_eps,
    remark17_residual_bound,
    sample_theorem16,
    theorem16_residuals,
)
from verify import plots, verdicts
from verify.context import Context
from verify.numerics import fmt, loglog_argmin, loglog_slope
from verify.registry import Check, Headline, Result, claim
from verify.statistics import compare, every

SIGMAS = np.array([0.1, 0.03, 0.01, 0.003])

THEOREM16_QUOTE = ("‖Z⁺ − [Δ − ηP_{U[K]}(βΔΠ*)Π + ((1 + β^{-1} − η)/(1 + β^{-1}))X_♮]‖ ≤ C_5Kη(σ²β² + σ(1 + "
                   "√(n/d)) + √Kβσ²(1 + √(n/d)) + √(n/d))")
"""Theorem 16's conclusion (237)–(238), as printed."""


def _sizes(ctx) -> tuple[int, int, int, int]:
    """(d, n, K, p)."""
    return ctx.pick((256, 64, 8, 32), (768, 196, 12, 64))


def _sample(ctx, sigma: float):
    d, n, K, p = _sizes(ctx)
    return sample_theorem16(d, n, K, p, sigma, ctx.rng)


@claim(
    id="eqs257-258-good-event",
    formerly="2.16-good-event",
    tags=("theorem16",),
    location="long version, App. B.3, proof of Theorem 16, eqs. (257)–(258), Propositions 22–24",
    scope="probe",
    setting="a stricter reading of the good event's unspecified constants (within 3× of the Gaussian and "
            "Marchenko–Pastur edges), σ 0.1, one draw of (232) at the mode's sizes",
    quote="there exist universal constants C_i > 0 for which P[‖Δ‖ ≤ σ(C_1 + √(n/d)); ∀k ∈ [K]: ‖A_k‖ ≤ 1 + "
          "C_2√(n/d); ∀k ∈ [K]: ‖A_k^⊤A_k − I‖ ≤ C_3√(n/d)] ≥ 1 − C_4K(e^{−C_5d} + e^{−C_6n/K} + n^{−2})",
    statement="On the good event E⋆: ‖Δ‖ ≲ σ(1 + √(n/d)), ‖A_k‖ ≲ 1 + √(K_k/p), ‖A_k*A_k − I‖ ≲ √(K_k/p) "
              "(the constants of order one; K_k/p ≈ n/d)",
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


FLOOR_TOL = 0.15
"""How far the floor's fitted exponent in n/d may stray from (238)'s ½: the order-one factors of the good event E⋆,
which drift with n/d, and the sample-to-sample spread of a 7-point fit."""


@claim(
    id="thm16-nominal-floor",
    formerly="2.16-nominal-floor",
    tags=("theorem16", "rate"),
    location="long version, App. B.3, Theorem 16, eqs. (237)–(238), (315)–(318), Lemma 20",
    scope="paper",
    quote=THEOREM16_QUOTE,
    statement="The gradient step on R^c matches the nominal denoising step (237) up to the bound (238): an O(σ) "
              "part and a σ-independent part of order √(n/d) (Lemma 20's A_k/(1 + β^{-1}) replacement) — so as "
              "σ → 0 the residual levels off at a floor, which the bound allows to scale as √(n/d)",
    measures="‖∇R^c − (315)‖ vs σ at the mode's sizes (ε = 1: slope and floor); the σ = 0.003 floor for seven "
             "n ∈ [p, d] at fixed β (ε rescaled with n): fitted exponent a of floor ∝ (n/d)^a against (238)'s ½",
    expected=f"(238) read as a bound as n/d → 0 (`verify.verdicts.rate_bound`): `holds` when a is ½ ± {FLOOR_TOL} "
             f"(the bound's rate, attained), `loose` when a > ½ + {FLOOR_TOL} (the floor falls faster than the "
             f"bound's √(n/d)), `fails` when a < ½ − {FLOOR_TOL}; the tolerance allows the order-one factors of the "
             "good event E⋆, which drift with n/d, and the sample-to-sample spread of a 7-point fit. This restates "
             "the former 2.16-nominal-vanishes, which tested a misreading (that the residual vanishes as σ → 0) "
             "and failed, as the theorem says it must",
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
                  f"floor ∝ (n/d)^{exponent:.2f}", verdicts.rate_bound(exponent, 0.5, FLOOR_TOL),
                  {"sigma": SIGMAS, "residual_nominal": nominal, "sigma_slope": sigma_slope, "n_over_d": ratios,
                   "floor": floors, "exponent": exponent, "beta": beta}, figures,
                  Headline("a in floor ∝ (n/d)^a", exponent))


@claim(
    id="thm16-exact-a-residual",
    formerly="2.16-exact-a-nominal",
    tags=("theorem16", "rate"),
    location="long version, App. B.3, proof of Theorem 16, eqs. (264)–(311), and Lemma 20, eq. (318)",
    scope="probe",
    setting="a construct of the proof: the nominal gradient with its signal term U_kA_k(β^{-1}I + A_k*A_k)^{-1} "
            "kept exact (Lemma 20's replacement undone), ε = 1, σ 0.1 to 0.003, the mode's sizes",
    quote="‖A_k(β^{-1}I + A_k^⊤A_k)^{-1} − A_k/(1 + β^{-1})‖ ≤ C′√(n/d)/(1 + β^{-1})",
    statement="Keeping the signal term exactly (U_kA_k(β^{-1}I + A_k*A_k)^{-1}), the remaining error of the "
              "proof's expansion is O(σ): the noise part P_{U[K]}(βΔΠ*)Π is right to first order, and the σ-free "
              "floor of thm16-nominal-floor is all Lemma 20's",
    measures="fitted log-log slope of ‖∇R^c − exact-A nominal‖ vs σ ∈ {0.1 … 0.003} (ε = 1)",
    expected="read as a bound O(σ) (`verify.verdicts.rate_bound`): `holds` when the slope is 1 ± 0.2 (the bound "
             "(238) without its √(n/d) term is linear in σ for small σ), `loose` above, `fails` below",
    expected_verdict="holds",
    kind="theory", provenance="analysis",
)
def exact_a_nominal(ctx) -> Result:
    rows = _residual_sweep(ctx)
    exact_a = np.array([r.residual_exact_a for r in rows])
    slope = loglog_slope(SIGMAS, exact_a)
    return Result(f"slope {slope:.2f} ({fmt(exact_a[0])} → {fmt(exact_a[-1])})", verdicts.rate_bound(slope, 1.0, 0.2),
                  {"sigma": SIGMAS, "residual_exact_a": exact_a, "slope": slope})


@claim(
    id="remark17-noise-retention",
    formerly="2.16-noise-retention",
    tags=("theorem16", "remark17"),
    location="long version, App. B.3, Remark 17, eqs. (239)–(241), (248)–(249)",
    scope="paper",
    quote="P_k → Σ_{k′≠k} U_{k′} proj_{im(A_{k′})^⊥} U_{k′}* (249). This shows that, in an asymptotic sense, a "
          "gradient step on R^c serves to suppress the effect of the perturbation applied to the observations Z_o",
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
    id="remark17-projection-limit",
    formerly="2.17-projection-limit",
    tags=("theorem16", "remark17", "rate"),
    location="long version, App. B.3, Remark 17, eqs. (248)–(249), with (313)",
    scope="paper",
    quote="as σ → 0, we can express the limiting form of P_{U[K]} exactly as an orthogonal projection, since this "
          "drives β^{-1} → 0: … P_k → Σ_{k′≠k} U_{k′} proj_{im(A_{k′})^⊥} U_{k′}*",
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


def _base_sizes() -> tuple[int, int, int, int]:
    """(d, n, K, p) of crate_base (n = 196 patches), after checking Assumption 15's explicit inequalities d ≥ n ≥ p ≥ K
    ≥ 2 and Kp = d."""
    config = crate_nn.model_config("crate_base")
    d, K, p, n = config.dim, config.heads, config.head_dim, config.num_patches
    if not (d >= n >= p >= K >= 2 and K * p == d):
        raise AssertionError(f"Assumption 15's explicit inequalities fail at d={d}, n={n}, p={p}, K={K}")
    return d, n, K, p


def beta_witness(corrected: bool) -> Check:
    """"ε ≤ ε_max implies β = p/(nε²) ≥ 1" at crate_base's sizes, on 100 ε from ε_max/100 to ε_max: as printed ε_max =
    1, corrected ε_max = √(p/n). β is smallest at ε_max, where the corrected bound makes it 1 (to rounding, 1e-12)."""
    _, n, _, p = _base_sizes()
    eps_max = float(np.sqrt(p / n)) if corrected else 1.0
    betas = p / (n * np.linspace(eps_max / 100, eps_max, 100) ** 2)
    return Check(bool(betas.min() >= 1 - 1e-12), {"eps_max": eps_max, "smallest_beta": float(betas.min())})


@claim(
    id="thm16-beta-at-least-1",
    formerly="2.18-beta-at-least-1",
    tags=("theorem16", "erratum"),
    location="long version, App. B.3, proof of Theorem 16, after eq. (293), and Assumption 15",
    scope="paper",
    quote="where we used the fact that ε ≤ 1 and the rest of Assumption 15 implies that β ≥ 1.",
    statement="\"ε ≤ 1 and the rest of Assumption 15 imply β ≥ 1\", at the CRATE-Base sizes the theorem cites",
    measures="β = p/(nε²) at ε = 1 for crate_base (d, K, p from the registry; n = 196 patches), after checking "
             "Assumption 15's explicit inequalities d ≥ n ≥ p ≥ K ≥ 2, Kp = d",
    expected="β ≥ 1 for every ε ≤ 1 would need ε² ≤ p/n; expected to fail (β ≥ 1 only for ε ≤ √(p/n))",
    expected_verdict="fails",
    error_kind="substantive", witness=beta_witness,
    correction="β = p/(nε²) ≥ 1 needs ε ≤ √(p/n) (0.571 at CRATE-Base's p 64, n 196), which Assumption 15 does not "
               "give: the step after (293) that drops terms by β ≥ 1 needs it as a further hypothesis",
    kind="printed", provenance="analysis",
)
def beta_at_least_one(ctx) -> Result:
    d, n, K, p = _base_sizes()
    beta = p / n  # β = p/(nε²) is smallest at ε = 1 over ε ∈ (0, 1]
    return Result(f"β(ε=1) = {beta:.3f}; β ≥ 1 needs ε ≤ {np.sqrt(p / n):.3f}", verdicts.at_least(beta, 1.0),
                  {"d": d, "n": n, "K": K, "p": p, "beta_at_eps_1": beta, "eps_threshold": float(np.sqrt(p / n))})


# ---------------------------------------------------------------------------------------------------- Remark 17
REMARK17_QUOTE = ("we optimize this bound as a function of ε > 0 … The optimal ε is straightforward to compute using "
                  "calculus: it satisfies ε² = σd/(nK√(σ + √(n/d))) (243)")
R17_SIGMAS = np.geomspace(0.001, 0.1, 5)
"""Remark 17's σ grid of the ε² sweep and the shrinkage: two decades from 0.1, 5× below √(n/d) = 0.5, where (246)
√(σ + √(n/d)) ≲ 1 holds (≤ 0.77)."""
R17_LIMIT_SIGMAS = np.geomspace(1e-5, 1e-2, 7)
"""The σ grid of Remark 17's residual at its own ε (243), read as σ → 0: three decades, the largest 50× below
√(n/d) = 0.5, where (244) is linear in σ. Chosen after measuring on `R17_SIGMAS`, where the residual's local
σ-exponent still climbs towards its limit (≈ 0.54 between σ = 0.03 and 0.1, 0.81 between 0.01 and 0.03, 0.93,
0.98, then 1.00 below 1e-3), so that a fit there reads the approach to the limit as a rate."""
R17_FACTORS = np.logspace(-3, 0.5, 11)
"""The ε² grid of each σ, as multiples of (243)'s ε²: three points a decade (ratio 2.15), refined by a parabola."""
R17_SEEDS = 3
SHRINKAGE_SEEDS = 10
"""Seeds of the shrinkage comparison (`remark17-delta-r-zero-shrinkage`): its per-seed exponent spreads by ≈ 0.25, so
with 3 seeds (t₂ = 4.3) the interval of a ≈ 0.9 reached 0 at one base seed in five; with 10 it lies ≥ 3 standard
errors clear of 0 at every base seed of the panel. A seed costs ≈ 25 ms."""
SLOPE_TOL = 0.25
"""How far a fitted σ-exponent may stray from the one (243)/(244) give over the same σ: an order-one factor that
drifts by up to 2.4× across two decades of σ moves a slope by log 2.4 / log 100 ≈ 0.19, and the parabola's argmin
(`verify.numerics.loglog_argmin`) adds a few hundredths."""
ARGMIN_TOL = 1e-6
"""Relative gap allowed between (243)'s ε² and the numerical argmin of (241): the bounded scalar search stops at
1e-10 in log ε², far below it; (241) is flat at its minimum, so the argmin is found to about the square root of
the value's rounding (≈ 1e-8 relative)."""


@claim(
    id="remark17-optimal-eps",
    formerly="2.17-remark17-optimal-eps",
    tags=("theorem16", "remark17"),
    location="long version, App. B.3, Remark 17, eqs. (241)–(245)",
    scope="paper",
    quote=REMARK17_QUOTE,
    statement="The ε minimising the bound (241), K^{3/2}σ² + σ²d/(nε²) + (nK²/d)(σ + √(n/d))ε², is (243)'s; the bound "
              "there is at most a constant times (244), Kσ(√Kσ + √(σ + √(n/d))); and β^{-1} = ε²nK/d there is (245)'s "
              "σ/√(σ + √(n/d))",
    measures="for each σ ∈ {0.001 … 0.1} (5 values) at the mode's sizes: the relative gap between (243)'s ε² and the "
             "ε² minimising (241) numerically (bounded search in log ε² over six decades around it); (241) there "
             "divided by (244); the relative gap between nKε²/d at (243) and (245)",
    expected=f"`holds` when every ε² gap is ≤ {ARGMIN_TOL:g} (the search's precision), every ratio lies in [1, 2] "
             "((241) at its minimum is K^{3/2}σ² + 2Kσ√(σ + √(n/d)): (244) up to the factor 2 of its two balanced "
             "terms) and every β^{-1} gap is ≤ 1e-12 (rounding): the calculus Remark 17 states",
    expected_verdict="holds",
    kind="printed", provenance="analysis",
)
def remark17_optimal_eps(ctx) -> Result:
    d, n, K, _ = _sizes(ctx)
    rows = []
    for sigma in R17_SIGMAS:
        printed = remark17_eps(sigma, n, d, K) ** 2
        found = scipy.optimize.minimize_scalar(lambda u, s=sigma: remark17_bound(s, np.exp(u / 2), n, d, K),
                                               bounds=(np.log(printed) - 7, np.log(printed) + 7), method="bounded",
                                               options={"xatol": 1e-10})
        beta_inv = n * K * printed / d
        rows.append((abs(np.exp(found.x) - printed) / printed,
                     remark17_bound(sigma, np.sqrt(printed), n, d, K) / remark17_residual_bound(sigma, n, d, K),
                     abs(beta_inv - remark17_beta_inv(sigma, n, d)) / beta_inv))
    eps_gap, ratio, beta_gap = (np.array(column) for column in zip(*rows))
    verdict = verdicts.all_hold(verdicts.at_most(eps_gap.max(), ARGMIN_TOL), verdicts.at_least(ratio.min(), 1.0),
                                verdicts.at_most(ratio.max(), 2.0), verdicts.at_most(beta_gap.max(), 1e-12))
    return Result(f"argmin of (241) vs (243): gap ≤ {fmt(eps_gap.max())}; (241)/(244) at it {ratio.min():.3f}–"
                  f"{ratio.max():.3f}; (245) gap ≤ {fmt(beta_gap.max())}", verdict,
                  {"sigma": R17_SIGMAS, "eps2_gap": eps_gap, "bound_over_244": ratio, "beta_inv_gap": beta_gap})


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
            "residual_min": residual_min, "at_edge": at_edge.astype(bool)}


def _within(values, target: float, tol: float) -> list:
    """|mean of ``values`` − ``target``| < ``tol`` as two `compare` comparisons over seeds (both must hold)."""
    deviation = np.asarray(values, dtype=float) - target
    return [compare(deviation, direction="below", boundary=tol), compare(deviation, direction="above", boundary=-tol)]


@claim(
    id="remark17-measured-optimal-eps",
    tags=("theorem16", "remark17", "rate"),
    location="long version, App. B.3, Remark 17, eqs. (239)–(245)",
    scope="probe",
    setting=f"the residual's own minimiser over ε: 11 ε² per σ from 10^-3 to 10^0.5 times (243)'s, σ 0.001–0.1, "
            f"{R17_SEEDS} seeds, d 256, n 64, K 8, p 32 (CRATE-Base sizes under --full)",
    quote=REMARK17_QUOTE,
    statement="The ε that minimises the measured residual of Remark 17 (not the bound (241) that (243) minimises) "
              "grows with σ as (243)'s does: the bound's optimum is where the step denoises best",
    measures="the ε² minimising the measured ‖Z⁺ − [Δ − P(ΔΠ*)Π + X_♮/(1 + β^{-1})]‖ (η = β^{-1}, operator norm) "
             "on the grid (parabola-refined), one draw per seed for every σ; fitted σ-exponent of the optimal ε² per "
             "seed against that of (243) over the same σ; the minimum residual's σ-exponent beside it",
    expected=f"`holds` when the 95% interval over seeds of (measured − predicted exponent) lies within ±{SLOPE_TOL} "
             "(the rule, fixed before measuring: an order-one factor drifting by up to 2.4× across two decades of σ, "
             "plus the argmin's refinement); `fails` when it lies outside. Recorded after measuring: fails — the "
             "measured optimum grows as σ^1.5 at 10–100× smaller ε² than (243), and the minimum residual falls as "
             "σ^1.46 where (244) falls as σ^1.08: for small ε the true residual levels off near ‖P(ΔΠ*)Π‖ ~ σ "
             "instead of growing as the bound's σ²d/(nε²), so the optimum balances the σ-free √(n/d)·η term against "
             "a noise term ~ βσ³, not βσ². A finding about the bound's tightness in ε, not an error of Remark 17, "
             "which states the optimum of its bound (remark17-optimal-eps)",
    expected_verdict="fails",
    kind="theory", provenance="measurement",
)
def remark17_measured_optimal_eps(ctx) -> Result:
    sweep = _remark17_sweep(ctx.mode, ctx.seed, _sizes(ctx))
    slopes = np.array([loglog_slope(R17_SIGMAS, row) for row in sweep["eps2_opt"]])
    predicted = loglog_slope(R17_SIGMAS, sweep["eps2_predicted"])
    comparisons = _within(slopes, predicted, SLOPE_TOL)
    d, n, K, _ = _sizes(ctx)
    bound = np.array([remark17_residual_bound(s, n, d, K) for s in R17_SIGMAS])
    residual_slopes = np.array([loglog_slope(R17_SIGMAS, row) for row in sweep["residual_min"]])
    ratio = sweep["eps2_opt"].mean(axis=0) / sweep["eps2_predicted"]
    edges = int(sweep["at_edge"].sum())
    figure = plots.loglog_rates(ctx.figure_path("sigma"), R17_SIGMAS,
                                {"measured optimal ε²": sweep["eps2_opt"].mean(axis=0),
                                 "(243), the optimum of the bound": sweep["eps2_predicted"]},
                                xlabel="σ", ylabel="ε²", title="Remark 17: the residual's optimal ε² against σ",
                                references={f"slope {predicted:.2f}": predicted})
    return Result(f"σ-exponent {slopes.mean():.2f} ± {slopes.std(ddof=1):.2f} vs {predicted:.2f} predicted "
                  f"(measured / predicted {ratio.min():.2g}–{ratio.max():.2g}; {edges} argmins at a grid end); "
                  f"least residual ∝ σ^{residual_slopes.mean():.2f} vs (244) σ^{loglog_slope(R17_SIGMAS, bound):.2f}",
                  every(comparisons),
                  {"sigma": R17_SIGMAS, "eps2_opt": sweep["eps2_opt"], "eps2_predicted": sweep["eps2_predicted"],
                   "slopes": slopes, "predicted_slope": predicted, "tolerance": SLOPE_TOL,
                   "at_edge": sweep["at_edge"], "residual_min": sweep["residual_min"],
                   "residual_min_slopes": residual_slopes, "comparisons": [c.as_dict() for c in comparisons]},
                  [figure], Headline.of("σ-exponent − predicted", comparisons[0].difference))


@functools.lru_cache(maxsize=2)
def _remark17_residuals(mode: str, seed: int, sizes: tuple[int, int, int, int]) -> np.ndarray:
    """Remark 17's residual (239) at its own ε (243), η = β^{-1}, for each σ of `R17_LIMIT_SIGMAS`: (seeds, σ), one
    draw per seed shared by every σ (`at_noise_level`)."""
    d, n, K, p = sizes
    rng = Context(mode, seed, "remark17-residual", ".").rng_for("remark17-residual")
    residuals = np.empty((R17_SEEDS, len(R17_LIMIT_SIGMAS)))
    for i in range(R17_SEEDS):
        draw = sample_theorem16(d, n, K, p, 1.0, rng)
        residuals[i] = [theorem16_residuals(at_noise_level(draw, s), remark17_eps(s, n, d, K)).step_residual_nominal
                        for s in R17_LIMIT_SIGMAS]
    return residuals


@claim(
    id="remark17-residual",
    formerly="2.17-remark17-residual",
    tags=("theorem16", "remark17", "rate"),
    location="long version, App. B.3, Remark 17, eqs. (239), (243)–(244)",
    scope="paper",
    quote="the value of the residual arising from Theorem 16 with this choice of ε is no larger than an absolute "
          "constant multiple of K^{3/2}σ² + √(K²σ²d/n · (nσ/d + (n/d)^{3/2})) = Kσ(√Kσ + √(σ + √(n/d))) (244)",
    statement="At Remark 17's ε (243), with η = β^{-1}, the residual (239) of Theorem 16's step is at most an "
              "absolute constant times Kσ(√Kσ + √(σ + √(n/d))) (244): linear in σ as σ → 0",
    measures=f"‖Z⁺ − [Δ − P(ΔΠ*)Π + X_♮/(1 + β^{{-1}})]‖ (operator norm) at (243)'s ε for σ from 1e-5 to 1e-2 "
             f"(7 values), {R17_SEEDS} seeds (one draw per seed for every σ): its fitted σ-exponent per seed against "
             "that of (244) over the same σ; the ratio residual / (244)",
    expected=f"(244) read as a bound as σ → 0 (`verify.verdicts.rate_bound_over_seeds`, tolerance ±{SLOPE_TOL} as "
             "for remark17-measured-optimal-eps): `holds` when the 95% interval over seeds of (measured − (244)'s "
             f"exponent) lies within ±{SLOPE_TOL}, `loose` above (the residual falls faster than the bound), `fails` "
             "below (no constant bounds it as σ → 0). Recorded after measuring: holds — the residual at (243)'s ε "
             "is a fixed fraction of (244) for every σ below 1e-3 (0.3–0.6, from draw to draw), exponent 1.00. The "
             "former reading took the residual's minimum over ε (σ^1.46, the probe remark17-measured-optimal-eps), "
             "not its value at the ε the remark names; and the grid moved below 1e-2 after measuring (see "
             "`R17_LIMIT_SIGMAS`): on σ ∈ [1e-3, 0.1] the ratio still climbs towards its limit (from 0.15 at "
             "σ = 0.1 in one draw), which a fit there reads as a slower rate (0.84 against 1.08)",
    expected_verdict="holds",
    kind="theory", provenance="measurement",
)
def remark17_residual(ctx) -> Result:
    d, n, K, _ = _sizes(ctx)
    residuals = _remark17_residuals(ctx.mode, ctx.seed, _sizes(ctx))
    bound = np.array([remark17_residual_bound(s, n, d, K) for s in R17_LIMIT_SIGMAS])
    slopes = np.array([loglog_slope(R17_LIMIT_SIGMAS, row) for row in residuals])
    bound_slope = loglog_slope(R17_LIMIT_SIGMAS, bound)
    verdict, comparisons = verdicts.rate_bound_over_seeds(slopes, bound_slope, SLOPE_TOL)
    ratio = residuals.mean(axis=0) / bound
    figure = plots.loglog_rates(ctx.figure_path("sigma"), R17_LIMIT_SIGMAS,
                                {"measured residual at (243)'s ε": residuals.mean(axis=0), "(244)": bound},
                                xlabel="σ", ylabel="operator norm", title="Remark 17: the residual against σ",
                                references={f"slope {bound_slope:.2f}": bound_slope})
    return Result(f"σ-exponent {slopes.mean():.3f} ± {slopes.std(ddof=1):.3f} vs (244)'s {bound_slope:.3f}; "
                  f"residual / (244) {ratio.min():.3f}–{ratio.max():.3f}", verdict,
                  {"sigma": R17_LIMIT_SIGMAS, "residual": residuals, "bound_244": bound, "slopes": slopes,
                   "bound_slope": bound_slope, "ratio": ratio, "tolerance": SLOPE_TOL,
                   "comparisons": [c.as_dict() for c in comparisons]}, [figure],
                  Headline.of("σ-exponent − (244)'s", comparisons[0].difference))


@functools.lru_cache(maxsize=2)
def _shrinkage_sweep(mode: str, seed: int, sizes: tuple[int, int, int, int]) -> dict[str, np.ndarray]:
    """Signal shrinkage 1 − ⟨Z⁺, X_♮⟩/‖X_♮‖_F² of one step η = β^{-1} at Remark 17's ε (243), for each σ of
    `R17_SIGMAS` and seed: descent on R^c (Z⁺ = Z − η∇R^c) and ascent on ΔR = R − R^c (Z⁺ = Z + η(∇R − ∇R^c))."""
    d, n, K, p = sizes
    rng = Context(mode, seed, "2.17-remark17", ".").rng_for("2.17-shrinkage")
    shrink = {"R^c": np.empty((SHRINKAGE_SEEDS, len(R17_SIGMAS))), "ΔR": np.empty((SHRINKAGE_SEEDS, len(R17_SIGMAS)))}
    for i in range(SHRINKAGE_SEEDS):
        draw = sample_theorem16(d, n, K, p, 1.0, rng)
        X = draw.X_nat
        for j, sigma in enumerate(R17_SIGMAS):
            Z, eps = at_noise_level(draw, sigma).Z, remark17_eps(sigma, n, d, K)
            eta, grad_c = remark17_beta_inv(sigma, n, d), compression_rate_grad(Z, draw.U, eps)
            for name, step in (("R^c", Z - eta * grad_c), ("ΔR", Z + eta * (coding_rate_grad(Z, eps) - grad_c))):
                shrink[name][i, j] = 1 - np.sum(step * X) / np.sum(X * X)
    return {"sigma": R17_SIGMAS, "beta_inv": np.array([remark17_beta_inv(s, n, d) for s in R17_SIGMAS]), **shrink}


@claim(
    id="remark17-delta-r-zero-shrinkage",
    formerly="2.17-delta-r-zero-shrinkage",
    tags=("theorem16", "remark17", "rate"),
    location="long version, App. B.3, Remark 17, after eq. (249)",
    scope="paper",
    quote="when the gradient step is taken instead on the full ΔR rate reduction objective (which is computationally "
          "prohibitive, of course), there is zero shrinkage",
    statement="In Remark 17's asymptotic setting, a gradient step on R^c shrinks the signal by the noise-dependent "
              "factor 1/(1 + β^{-1}); a step on the full ΔR = R − R^c instead gives zero shrinkage (stated, not "
              "proved): read as σ → 0, the ΔR step's shrinkage vanishes faster than the R^c step's",
    measures="signal shrinkage 1 − ⟨Z⁺, X_♮⟩/‖X_♮‖_F² of one step η = β^{-1} at Remark 17's ε (243), on tokens of "
             f"(232) (on their subspaces plus noise), σ ∈ {{0.001 … 0.1}}, {SHRINKAGE_SEEDS} seeds: descent on R^c, "
             "ascent on ΔR; per seed the fitted σ-exponent a of |ΔR shrinkage| / (R^c shrinkage)",
    expected="`holds` when the 95% interval over seeds of a lies above 0 (the ΔR step's shrinkage is of higher order "
             "than the R^c step's, zero to the order at which R^c shrinks), `fails` when it lies below 0, "
             "`inconclusive` otherwise. Recorded after measuring: holds, a ≈ 0.9 — |ΔR shrinkage| ∝ σ^1.8 against "
             "R^c's σ^0.95. For noiseless tokens with A_k*A_k = I the ΔR step scales the signal by "
             "1 + (K − 1)/((Kβ + 1)(β + 1)) (∇R has α = Kβ): no first-order shrinkage, a second-order expansion "
             "(−0.015 at σ = 0.1, which the former reading, zero at every σ, counted as a failure)",
    expected_verdict="holds",
    kind="theory", provenance="measurement",
)
def delta_r_zero_shrinkage(ctx) -> Result:
    sweep = _shrinkage_sweep(ctx.mode, ctx.seed, _sizes(ctx))
    delta_r, r_c = sweep["ΔR"], sweep["R^c"]
    ratio = np.abs(delta_r) / r_c
    exponents = np.array([loglog_slope(R17_SIGMAS, row) for row in ratio])
    vanishes = compare(exponents, direction="above")
    mean = ratio.mean(axis=0)
    return Result(f"|ΔR| / R^c shrinkage {mean[-1]:.2g} (σ = {R17_SIGMAS[-1]:g}) → {mean[0]:.2g} "
                  f"(σ = {R17_SIGMAS[0]:g}), ∝ σ^a with a = {exponents.mean():.2f} ± {exponents.std(ddof=1):.2f}; "
                  f"ΔR step {delta_r.mean(axis=0)[-1]:+.2g}, R^c step {r_c.mean(axis=0)[-1]:+.2g} at σ = "
                  f"{R17_SIGMAS[-1]:g}", vanishes.verdict,
                  {"sigma": R17_SIGMAS, "beta_inv": sweep["beta_inv"], "shrinkage_delta_r": delta_r,
                   "shrinkage_r_c": r_c, "ratio": ratio, "exponents": exponents, "comparison": vanishes.as_dict()},
                  headline=Headline.of("a in |ΔR| / R^c shrinkage ∝ σ^a", vanishes.difference))


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
    id="remark18-coherence",
    formerly="2.17-remark18-coherence",
    tags=("theorem16", "remark18", "rate"),
    location="long version, App. B.3, Remark 18",
    scope="probe",
    setting="a stricter reading (the error itself grows, where the remark speaks of error terms in the proof): bases "
            "of coherence ν from 0 to 0.3 sharing one draw of (232), σ 0.01, 5 seeds, d 256, n 64, K 7, p 32 "
            "(d 768, n 196, K 11, p 64 under --full)",
    quote="Relaxing the orthogonality condition U_k^⊤U_{k′} = 1_{k=k′}I to near-orthogonality, namely ‖U_k^⊤U_{k′} − "
          "1_{k=k′}I‖ ≤ ν for a small ν, … would introduce additional small error terms in the proof, say "
          "polynomial in ν.",
    statement="Relaxing orthogonality to ‖U_k*U_{k'} − 1_{k=k'}I‖ ≤ ν adds error terms polynomial in ν to "
              "Theorem 16 / Remark 17: the denoising degrades with ν and continuously from ν = 0",
    measures=f"Remark 17's residual ‖Z⁺ − [Δ − P(ΔΠ*)Π + X_♮/(1 + β^{{-1}})]‖ (η = β^{{-1}} of (245), σ = "
             f"{R18_SIGMA}) on bases of coherence ν ∈ {R18_NUS.tolist()} (U_k*U_k' = νI), the same draw of (232) "
             f"for every ν, {R18_SEEDS} seeds; (K + 1)p = d",
    expected="`holds` when the mean residual increases on at least 3/4 of the grid steps and the 95% interval over "
             "seeds of the exponent a in (residual(ν) − residual(0)) ∝ ν^a lies above 0 (a polynomial extra that "
             "vanishes at ν = 0); `fails` when fewer steps increase or the interval lies below 0, `inconclusive` "
             "when it contains 0 (the rule fixed before measuring; the expectation is Remark 18's statement)",
    expected_verdict="holds",
    kind="theory", provenance="analysis",
)
def remark18_coherence(ctx) -> Result:
    errors = _coherence_sweep(ctx)
    mean = errors.mean(axis=0)
    rising = float(np.mean(np.diff(mean) > 0))
    exponents = coherence_exponents(errors)
    positive = compare(exponents, direction="above", boundary=0.0)
    verdict = verdicts.all_hold(verdicts.at_least(rising, 0.75), positive.verdict)
    figure = plots.curves(ctx.figure_path("coherence"), R18_NUS, {"Remark 17 residual": mean}, xlabel="ν",
                          ylabel="operator norm", title="Remark 18: residual against the coherence ν")
    return Result(f"residual {mean[0]:.3g} (ν = 0) → {mean[-1]:.3g} (ν = {R18_NUS[-1]:g}); rises on "
                  f"{rising:.0%} of the steps; extra ∝ ν^a, a = {exponents.mean():.2f} ± {exponents.std(ddof=1):.2f}",
                  verdict, {"nu": R18_NUS, "residual": errors, "rising_fraction": rising, "exponents": exponents,
                            "comparison": positive.as_dict()}, [figure],
                  Headline.of("a in extra ∝ ν^a", positive.difference))
