"""Compression: the Neumann approximation of ∇R^c, Approximation 9 (MSSA as a gradient step) and the implemented
MSSA (paper-notes §1.7; checks 2.6–2.8).

Tokens follow Approximation 9's hypotheses: unit-norm columns lying near a union of K mutually orthogonal
p-dimensional subspaces with Kp = d (so Σ_k U_kU_k* = I, the hypothesis used silently at (104)→(105)).
β = p/(nε²) is swept through ε.
"""
from __future__ import annotations

import numpy as np

from crate_theory import (
    compression_rate,
    compression_rate_grad,
    compression_step,
    mssa,
    mssa_free,
    neumann_compression_grad,
    project_onto_bases,
    tied_output_map,
)
from crate_theory.synthetic import orthonormal_bases, sample_tokens
from verify import digits, plots, verdicts
from verify.numerics import cosine, fmt, loglog_slope, rel_err
from verify.registry import Headline, Result, claim


def _union_of_subspaces(ctx, sigma: float = 0.05):
    """(Z, U): unit-norm tokens near ∪_k span(U_k), K orthogonal subspaces with Kp = d (quick or CRATE-Base sizes)."""
    d, n, K = ctx.pick((64, 50, 4), (768, 196, 12))
    U = orthonormal_bases(K, d, d // K, seed=ctx.rng)
    return sample_tokens(U, n, ctx.rng, sigma=sigma / np.sqrt(d), unit_norm=True).Z, U


def _eps_for_beta(beta: float, p: int, n: int) -> float:
    """ε giving β = p/(nε²)."""
    return float(np.sqrt(p / (n * beta)))


def _neumann_sweep(ctx, rhos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Relative error and cosine of the Neumann gradient (33) vs the exact one (31) at ρ = β·max_k‖U_k*Z‖²."""
    Z, U = _union_of_subspaces(ctx)
    p, n = U.shape[2], Z.shape[1]
    top = max(np.linalg.norm(A, 2) ** 2 for A in project_onto_bases(Z, U))  # max_k ‖U_k*Z‖²
    errors, cosines = [], []
    for rho in rhos:
        eps = _eps_for_beta(rho / top, p, n)
        exact, approx = compression_rate_grad(Z, U, eps), neumann_compression_grad(Z, U, eps)
        errors.append(rel_err(approx, exact))
        cosines.append(cosine(approx, exact))
    return np.array(errors), np.array(cosines)


@claim(
    id="2.6-neumann-rate",
    tags=("compression", "neumann", "rate"),
    location="004 eqs. (32)–(33)=(98)–(99)",
    statement="(I + βG_k)^{-1} ≈ I − βG_k gives ∇R^c up to an error of second order in ρ = β‖U_k*Z‖² (for ρ < 1)",
    measures="fitted log-log slope of ‖∇̂R^c − ∇R^c‖/‖∇R^c‖ against ρ = β max_k‖U_k*Z‖², ρ ∈ [0.01, 0.5]",
    expected="slope 2 ± 0.3 (the first neglected Neumann term is (βG_k)²)",
    expected_verdict="holds",
    kind="theory", provenance="analysis",
)
def neumann_rate(ctx) -> Result:
    rhos = np.logspace(-2, np.log10(0.5), 7)
    errors, _ = _neumann_sweep(ctx, rhos)
    slope = loglog_slope(rhos, errors)
    figure = plots.loglog_rates(ctx.figure_path("rate"), rhos, {"Neumann relative error": errors},
                                xlabel="ρ = β max_k ‖U_k*Z‖²", ylabel="relative error",
                                title="Neumann approximation (33) of ∇R^c", references={"slope 2": 2.0})
    return Result(f"slope {slope:.2f}; rel err {fmt(errors[0])} @ρ=0.01, {fmt(errors[-1])} @ρ=0.5",
                  verdicts.slope(slope, 2.0, 0.3), {"rho": rhos, "rel_err": errors, "slope": slope}, [figure])


@claim(
    id="2.6-neumann-beyond-1",
    tags=("compression", "neumann"),
    location="004 eqs. (32)–(33); paper-notes §7.8",
    statement="The Neumann gradient (33) approximates ∇R^c — stated without a range of validity",
    measures="min over ρ ∈ [1, 10] of cos(∇̂R^c, ∇R^c); relative error at ρ = 1",
    expected="`holds` only if it stays a descent-compatible direction (cos > 0) for all ρ ≤ 10; the series "
             "diverges for ρ > 1, so a sign flip is expected. At the papers' own setting (CRATE-Base sizes, ε = 1) "
             "ρ ≈ 0.7 < 1: the approximation is used inside its range there",
    expected_verdict="fails",
    kind="theory", provenance="analysis",
)
def neumann_beyond_one(ctx) -> Result:
    rhos = np.logspace(-2, 1, 13)
    errors, cosines = _neumann_sweep(ctx, rhos)
    beyond = rhos >= 1
    worst = float(cosines[beyond].min())
    rho_base = _rho_at_crate_base(ctx)
    figure = plots.curves(ctx.figure_path("cosine"), rhos, {"cos(Neumann, exact)": cosines,
                                                            "relative error": np.minimum(errors, 3)},
                          xlabel="ρ = β max_k ‖U_k*Z‖²", ylabel="", title="Neumann gradient beyond ρ = 1 "
                          "(relative error clipped at 3)", logx=True, hlines={"cos = 0": 0.0})
    return Result(f"min cos {worst:.2f} (at ρ={rhos[beyond][cosines[beyond].argmin()]:.2g}); rel err "
                  f"{errors[rhos >= 1][0]:.2f} at ρ=1; at the papers' setting ρ = {rho_base:.2f}",
                  verdicts.at_least(worst, 0.0),
                  {"rho": rhos, "cosine": cosines, "rel_err": errors, "rho_crate_base_eps_1": rho_base}, [figure])


def _rho_at_crate_base(ctx) -> float:
    """ρ = β max_k ‖U_k*Z‖² at CRATE-Base sizes (d 768, K 12, p 64, n = 197 tokens with [CLS]) and ε = 1, on
    unit-norm union-of-subspace tokens (Approximation 9's hypotheses)."""
    d, K, p, n = 768, 12, 64, 197
    U = orthonormal_bases(K, d, p, seed=ctx.rng)
    Z = sample_tokens(U, n, ctx.rng, sigma=0.05 / np.sqrt(d), unit_norm=True).Z
    return float(p / n * max(np.linalg.norm(A, 2) ** 2 for A in project_onto_bases(Z, U)))


BETAS = (0.02, 0.08, 0.33, 1.3, 5.2)
"""β swept for Approximation 9 (CRATE-Base with ε = 1 has β = 64/197 ≈ 0.33)."""


def _mssa_directions(ctx):
    """For each β: the MSSA step direction (Z − step)/κ = βZ − βMSSA(Z), the exact gradient, and Z itself."""
    Z, U = _union_of_subspaces(ctx)
    p, n = U.shape[2], Z.shape[1]
    out = []
    for beta in BETAS:
        eps = _eps_for_beta(beta, p, n)
        direction = Z - compression_step(Z, U, eps, kappa=1.0, method="mssa")
        out.append((beta, eps, direction, compression_rate_grad(Z, U, eps)))
    return Z, U, out


@claim(
    id="2.7-approx9-cosine",
    tags=("compression", "mssa", "approx9"),
    location="004 Approximation 9, eqs. (91), (100)–(107)",
    statement="Z − κ∇R^c(Z | U) ≈ (1 − κβ)Z + κβ MSSA(Z | U): the MSSA step points along −∇R^c",
    measures=f"cos(βZ − βMSSA(Z), ∇R^c(Z)) for β ∈ {BETAS} on unit-norm union-of-subspace tokens",
    expected="cos > 0 at every β (a descent-compatible direction); the paper gives no rate, it is a heuristic. "
             "It holds through the step's first-order part: βZ alone scores as well or better "
             "(2.7-approx9-attention-term)",
    expected_verdict="holds",
    kind="theory", provenance="analysis",
)
def approx9_cosine(ctx) -> Result:
    Z, _, rows = _mssa_directions(ctx)
    cosines = [cosine(direction, grad) for _, _, direction, grad in rows]
    first_order = [cosine(beta * Z, grad) for beta, _, _, grad in rows]  # the step without its attention term
    errors = [rel_err(direction, grad) for _, _, direction, grad in rows]
    figure = plots.curves(ctx.figure_path("cosine-vs-beta"), BETAS, {"cos(MSSA step, ∇R^c)": cosines,
                                                                      "cos(βZ alone, ∇R^c)": first_order,
                                                                      "relative error (clipped at 2)": np.minimum(errors, 2)},
                          xlabel="β = p/(nε²)", ylabel="", title="Approximation 9 vs β", logx=True)
    return Result("cos " + ", ".join(f"{c:.3f}" for c in cosines), verdicts.at_least(min(cosines), 0.0),
                  {"beta": BETAS, "cosine": cosines, "cosine_first_order_only": first_order, "rel_err": errors},
                  [figure], Headline(f"least cos, β ≤ {max(BETAS):g}", min(cosines)))


@claim(
    id="2.7-approx9-descent",
    tags=("compression", "mssa", "approx9"),
    location="004 Approximation 9, eq. (27)=(34)",
    statement="For small κ the MSSA step decreases R^c(Z | U): R^c((1 − κβ)Z + κβMSSA(Z)) < R^c(Z)",
    measures="R^c decrease of the MSSA step with κβ = 0.01, relative to that of the exact gradient step of equal length",
    expected="decrease > 0 at every β (descent); the ratio shows how much of the exact step's decrease it achieves. "
             "As for the cosine, the βZ shrink alone gives this descent (2.7-approx9-attention-term)",
    expected_verdict="holds",
    kind="theory", provenance="analysis",
)
def approx9_descent(ctx) -> Result:
    Z, U, rows = _mssa_directions(ctx)
    ratios, drops = [], []
    for beta, eps, direction, grad in rows:
        kappa = 0.01 / beta
        drop = compression_rate(Z, U, eps) - compression_rate(Z - kappa * direction, U, eps)
        exact_drop = compression_rate(Z, U, eps) - compression_rate(
            Z - kappa * np.linalg.norm(direction) / np.linalg.norm(grad) * grad, U, eps)
        drops.append(drop)
        ratios.append(drop / exact_drop)
    return Result("decrease / exact-step decrease " + ", ".join(f"{r:.2f}" for r in ratios),
                  verdicts.at_least(min(drops), 1e-300), {"beta": BETAS, "decrease": drops, "ratio": ratios})


@claim(
    id="2.7-approx9-second-order",
    tags=("compression", "mssa", "approx9"),
    location="004 Approximation 9, eqs. (100)–(106)",
    statement="The attention term −β²Σ_k U_k SSA(Z | U_k) stands in for the second-order part of ∇R^c "
              "(replacing the Gram matrix (U_k*Z)*(U_k*Z) by its softmax, (101))",
    measures="r = ‖attention term − (∇R^c − βZ)‖ / ‖∇R^c − βZ‖ per β (r = 1: the term explains nothing of the "
             "remainder beyond the first-order βZ; r = 0: all of it)",
    expected="`holds` if r ≤ 0.5 at every β. Expected to fail: softmax(G_k) is column-stochastic while G_k is "
             "not, so the replacement matches the remainder neither in size nor, beyond small β, in direction",
    expected_verdict="fails",
    kind="theory", provenance="analysis",
)
def approx9_second_order(ctx) -> Result:
    Z, _, rows = _mssa_directions(ctx)
    ratios = [rel_err(direction - beta * Z, grad - beta * Z) for beta, _, direction, grad in rows]
    return Result("r = " + ", ".join(f"{r:.2f}" for r in ratios), verdicts.at_most(max(ratios), 0.5),
                  {"beta": BETAS, "remainder_ratio": ratios})


@claim(
    id="2.8-free-output-contains-paper",
    tags=("compression", "mssa"),
    location="004 eqs. (36)–(37)",
    statement="The implemented MSSA with a free output map W (37) reduces to the paper's (36) when "
              "W = β[U_1 … U_K], b = 0 and the softmax temperature is 1",
    measures="relative difference of mssa_free(Z, U, β[U_1…U_K], temperature=1) and mssa(Z, U, ε)",
    expected="≤ 1e-13 (the same operator; float64 rounding)",
    expected_verdict="holds",
    kind="identity", provenance="analysis",
)
def free_output_contains_paper(ctx) -> Result:
    Z, U = _union_of_subspaces(ctx)
    p, n = U.shape[2], Z.shape[1]
    err = rel_err(mssa_free(Z, U, tied_output_map(U, p / n), temperature=1.0), mssa(Z, U, 1.0))
    return Result(f"rel diff {fmt(err)}", verdicts.at_most(err, 1e-13), {"rel_diff": err})


@claim(
    id="2.7-approx9-attention-term",
    tags=("compression", "mssa", "approx9"),
    location="004 Approximation 9, eqs. (100)–(107)",
    statement="The attention term carries Approximation 9: the MSSA step βZ − βMSSA(Z) points along ∇R^c better "
              "than its first-order part βZ alone (the shrink (1 − κβ)Z of eq. 27, without attention)",
    measures=f"cos(βZ − βMSSA(Z), ∇R^c) − cos(βZ, ∇R^c) for β ∈ {BETAS}; size ‖βMSSA(Z)‖/‖βZ‖ and cos(−βMSSA(Z), "
             "∇R^c − βZ) of the attention term against the part of the gradient it stands for",
    expected="`holds` when the MSSA step's cosine exceeds βZ's at every β. Expected to fail: the attention term is "
             "small next to βZ and only loosely aligned with what it replaces, so βZ alone does as well at small β "
             "and better at large β; 2.7-approx9-cosine/-descent hold through the βZ shrink",
    expected_verdict="fails",
    kind="control", provenance="measurement",
)
def approx9_attention_term(ctx) -> Result:
    Z, _, rows = _mssa_directions(ctx)
    gain = [cosine(direction, grad) - cosine(beta * Z, grad) for beta, _, direction, grad in rows]
    size = [float(np.linalg.norm(beta * Z - direction) / np.linalg.norm(beta * Z)) for beta, _, direction, _ in rows]
    aim = [cosine(direction - beta * Z, grad - beta * Z) for beta, _, direction, grad in rows]
    return Result("cosine gain over βZ " + ", ".join(f"{g:+.2g}" for g in gain) + "; attention term ‖·‖/‖βZ‖ "
                  + ", ".join(f"{r:.2g}" for r in size), "holds" if min(gain) > 0 else "fails",
                  {"beta": BETAS, "cosine_gain": gain, "relative_size": size, "cosine_with_remainder": aim},
                  headline=Headline("least gain over βZ", min(gain)))


@claim(
    id="2.7-sum-projectors",
    tags=("compression", "approx9", "nn", "digits"),
    location="004 Approximation 9, the step (104) → (105); paper-notes §7.8",
    statement="Σ_k U_kU_k* ≈ I_d (the hypothesis that turns β(Σ_k U_kU_k*)Z into βZ in (105)) holds for CRATE's "
              "subspaces",
    measures=f"‖Y(S/s − I)‖_F/‖Y‖_F with S = Σ_k U_kU_k* (= WᵀW of the qkv weight), s = tr S/d and Y = LN1(Z^ℓ) the "
             f"tokens MSSA receives, per layer of the digits CRATE, trained and at initialisation, {digits.SEEDS} seeds",
    expected="`holds` when the trained model's worst layer stays ≤ 0.1 (the replacement must be accurate to 10% for "
             "βZ to stand in for β(Σ_k U_kU_k*)Z at the accuracy Approximation 9 claims: cos ≥ 0.98 at the papers' "
             "β ≈ 0.33). Expected to fail: K·p = d heads of a random or trained U are not mutually orthogonal, "
             "S has a Marchenko–Pastur-like spread (deviation ≈ 1 at initialisation, larger after training)",
    expected_verdict="fails",
    kind="trained", provenance="measurement",
)
def sum_projectors(ctx) -> Result:
    runs = digits.runs(ctx)
    trained, init = (digits.per_seed(runs, m, ("projector_sum_deviation",)) for m in ("trained", "init"))
    worst = float(trained.mean(0).max())
    return Result(f"deviation per layer: trained {'→'.join(f'{v:.2f}' for v in trained.mean(0))}, init "
                  f"{'→'.join(f'{v:.2f}' for v in init.mean(0))}", verdicts.at_most(worst, 0.1),
                  {"trained": trained.mean(0), "init": init.mean(0), "worst_trained": worst})
