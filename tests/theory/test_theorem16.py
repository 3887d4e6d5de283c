"""Theorem 16 (crate_theory.theorem16): the model (232), P_{U[K]} (313)–(314), nominals (237)/(315), Remark 17."""
import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crate_theory.coding_rate import compression_rate_grad
from crate_theory.synthetic import orthonormal_bases
from crate_theory.theorem16 import (
    apply_projection,
    at_noise_level,
    exact_a_nominal_gradient,
    nominal_gradient,
    nominal_step,
    on_bases,
    permutation_matrix,
    projection_operators,
    remark17_beta_inv,
    remark17_bound,
    remark17_eps,
    remark17_residual_bound,
    sample_theorem16,
    theorem16_residuals,
)

SEEDS = st.integers(0, 2**32 - 1)


@st.composite
def samples(draw, sigma=None):
    """A Theorem 16 sample with K ≤ 4, p ≤ 4, Kp ≤ d ≤ Kp + 4, n ≤ 12."""
    K, p = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    d = K * p + draw(st.integers(0, 4))
    n = draw(st.integers(1, 12))
    sigma = draw(st.sampled_from([0.0, 0.01, 0.5])) if sigma is None else sigma
    return sample_theorem16(d, n, K, p, sigma, np.random.default_rng(draw(SEEDS)))


@given(samples())
def test_sample_has_the_block_form_232(s):
    K, d, p = s.U.shape
    n = s.Z.shape[1]
    Pi = permutation_matrix(s.order)
    np.testing.assert_array_equal(Pi @ Pi.T, np.eye(n))  # Π is a permutation matrix
    block = np.concatenate([s.U[k] @ s.A[k] for k in range(K)], axis=1)
    np.testing.assert_allclose(s.X_nat, block @ Pi, rtol=0, atol=1e-15)  # X_♮ = [U_1A_1 … U_KA_K] Π, exactly
    np.testing.assert_array_equal(s.Z, s.X_nat + s.Delta)
    assert [a.shape for a in s.A] == [(p, c) for c in s.counts] and s.counts.sum() == n
    np.testing.assert_array_equal(np.bincount(s.labels, minlength=K), s.counts)
    for k in range(K):  # token i lies in span(U_{s_i}) and is orthogonal to the other subspaces
        own = s.labels == k
        np.testing.assert_allclose(s.U[k] @ (s.U[k].T @ s.X_nat[:, own]), s.X_nat[:, own], atol=1e-13)
        np.testing.assert_allclose(s.U[k].T @ s.X_nat[:, ~own], 0.0, atol=1e-13)
    assert np.abs(np.einsum("kdp,ldq->klpq", s.U, s.U) - np.einsum("kl,pq->klpq", np.eye(K), np.eye(p))).max() < 1e-12


def test_sample_scalings_match_the_model():
    d, n, K, p, sigma = 64, 800, 4, 16, 0.3
    s = sample_theorem16(d, n, K, p, sigma, np.random.default_rng(0))
    codes = np.concatenate(s.A, axis=1).ravel()
    # Variance estimates of N Gaussian entries have standard error var·√(2/N); we allow 5 standard errors.
    for values, var in ((codes, 1 / p), (s.Delta.ravel(), sigma**2 / d)):
        assert abs(values.var() - var) < 5 * var * np.sqrt(2 / values.size)
        assert abs(values.mean()) < 5 * np.sqrt(var / values.size)
    # K_k ~ Binomial(n, 1/K): 5 standard deviations.
    assert np.all(np.abs(s.counts - n / K) < 5 * np.sqrt(n * (1 / K) * (1 - 1 / K)))


def test_permutation_is_uniform():
    rng = np.random.default_rng(1)
    draws = 1200
    counts = {perm: 0 for perm in itertools.permutations(range(3))}
    for _ in range(draws):
        counts[tuple(sample_theorem16(4, 3, 2, 2, 0.0, rng).order)] += 1
    expected = draws / 6
    sd = np.sqrt(draws * (1 / 6) * (5 / 6))
    assert all(abs(c - expected) < 5 * sd for c in counts.values())  # each of the 3! orders within 5 sd


@given(samples(sigma=0.1), st.sampled_from([0.01, 1.0, 100.0]))
def test_projection_operators_match_the_dense_formula_and_act_blockwise(s, beta):
    K, d, p = s.U.shape
    P = projection_operators(s.U, s.A, beta)
    # Push-through identity I − A(β^{-1}I + A*A)^{-1}A* = β^{-1}(β^{-1}I + AA*)^{-1}: an independent route to (313).
    Q = [s.U[k] @ np.linalg.inv(np.eye(p) + beta * s.A[k] @ s.A[k].T) @ s.U[k].T for k in range(K)]
    for k in range(K):
        np.testing.assert_allclose(P[k], sum((Q[j] for j in range(K) if j != k), np.zeros((d, d))), atol=1e-12)
    V = np.random.default_rng(0).standard_normal(s.Z.shape)
    # Block form of (314): [V_1 … V_K] = VΠ*, P_{U[K]}(VΠ*) = [P_1V_1 … P_KV_K], then multiply by Π.
    Pi = permutation_matrix(s.order)
    blocks = np.split(V @ Pi.T, np.cumsum(s.counts)[:-1], axis=1)
    block_form = np.concatenate([P[k] @ blocks[k] for k in range(K)], axis=1) @ Pi
    np.testing.assert_allclose(apply_projection(P, s.labels, V), block_form, atol=1e-13)


@given(SEEDS, st.sampled_from([1e-2, 1e-4, 1e-6]))
def test_projection_tends_to_orthogonal_projection_as_beta_inverse_vanishes(seed, beta_inv):
    rng = np.random.default_rng(seed)
    K, d, p = 2, 10, 5
    U = orthonormal_bases(K, d, p, rng)
    A = (rng.standard_normal((p, 3)), rng.standard_normal((p, 2)))
    P = projection_operators(U, A, 1 / beta_inv)
    Q, _ = np.linalg.qr(A[1])
    limit = U[1] @ (np.eye(p) - Q @ Q.T) @ U[1].T  # (248)–(249): U_{k'} proj_{im(A_{k'})⊥} U_{k'}*, k = 0
    s_min = np.linalg.svd(A[1], compute_uv=False).min()
    # On im(A) the bracket of (313) has eigenvalues β^{-1}/(β^{-1} + s²): the distance is exactly the largest one.
    np.testing.assert_allclose(np.linalg.norm(P[0] - limit, 2), beta_inv / (beta_inv + s_min**2), rtol=1e-6)


@given(samples(sigma=0.0), st.sampled_from([0.3, 1.0, 3.0]))
def test_exact_a_signal_term_is_the_exact_noise_free_gradient(s, eps):
    # With Δ = 0 the "exact-A" nominal keeps U_kA_k(β^{-1}I + A_k*A_k)^{-1}, which is ∇R^c(X_♮) exactly (235).
    grad = compression_rate_grad(s.X_nat, s.U, eps)
    np.testing.assert_allclose(exact_a_nominal_gradient(s, eps), grad, atol=1e-12 * (1 + np.abs(grad).max()))


@given(samples(sigma=0.2), st.sampled_from([0.5, 2.0]), st.sampled_from([0.1, 1.0]))
def test_nominal_step_is_equation_237(s, eps, eta):
    p, n = s.U.shape[2], s.Z.shape[1]
    beta = p / (n * eps**2)
    P = projection_operators(s.U, s.A, beta)
    expected = (s.Delta - eta * apply_projection(P, s.labels, beta * s.Delta)
                + (1 + 1 / beta - eta) / (1 + 1 / beta) * s.X_nat)
    np.testing.assert_allclose(nominal_step(s, eps, eta), expected, atol=1e-13)
    np.testing.assert_allclose(nominal_step(s, eps, eta), s.Z - eta * nominal_gradient(s, eps), atol=1e-13)


def test_exact_a_residual_is_first_order_in_sigma_while_the_nominal_one_saturates():
    base = sample_theorem16(96, 40, 4, 24, 1.0, np.random.default_rng(5))
    scaled = lambda sigma: dataclasses.replace(  # noqa: E731 — same noise direction, scaled to level σ
        base, Delta=sigma * base.Delta, Z=base.X_nat + sigma * base.Delta, sigma=sigma)
    r = {sigma: theorem16_residuals(scaled(sigma), eps=1.0) for sigma in (1e-3, 1e-4)}
    # residual_exact_a = c·σ + O(σ²): c estimated at two σ a decade apart agrees to O(σ) relative (< 2%).
    np.testing.assert_allclose(r[1e-3].residual_exact_a / 1e-3, r[1e-4].residual_exact_a / 1e-4, rtol=2e-2)
    # The Lemma 20 replacement A(β^{-1}I + A*A)^{-1} → A/(1 + β^{-1}) leaves an error that σ → 0 does not remove.
    assert r[1e-4].residual_nominal > 100 * r[1e-4].residual_exact_a


def test_noise_retention_of_the_nominal_step_tends_to_the_span_count():
    # η = β^{-1}, β → ∞: token i keeps U_{s_i}U_{s_i}*δ_i plus its components on im(A_{k'}) for k' ≠ s_i, and the
    # part outside ⊕_k span(U_k); summed over tokens that is an exact projection of Δ we can form directly.
    s = sample_theorem16(40, 16, 3, 8, 0.1, np.random.default_rng(3))
    K, d, p = s.U.shape
    proj_A = [s.U[k] @ np.linalg.qr(s.A[k])[0] @ np.linalg.qr(s.A[k])[0].T @ s.U[k].T for k in range(K)]
    outside = np.eye(d) - sum(s.U[k] @ s.U[k].T for k in range(K))
    kept = [s.U[k] @ s.U[k].T + outside + sum(proj_A[j] for j in range(K) if j != k) for k in range(K)]
    expected = sum(np.sum((kept[s.labels[i]] @ s.Delta[:, i]) ** 2) for i in range(16)) / np.sum(s.Delta**2)
    eps = np.sqrt(p / (16 * 1e9))  # β = 1e9
    np.testing.assert_allclose(theorem16_residuals(s, eps).nominal_noise_retention, expected, rtol=1e-6)


@given(st.floats(1e-4, 1.0), st.integers(1, 5), st.integers(1, 8), st.integers(1, 50))
def test_remark17_optimal_beta_matches_245(sigma, K, p, n):
    d = K * p  # (245) uses Kp = d
    eps = remark17_eps(sigma, n, d, K)
    np.testing.assert_allclose(n * eps**2 / p, remark17_beta_inv(sigma, n, d), rtol=1e-12)  # β^{-1} = nε²/p


@given(st.floats(1e-4, 1.0), st.integers(1, 12), st.integers(1, 8), st.integers(1, 50))
def test_remark17_residual_is_the_bound_241_at_the_optimal_eps_without_its_2(sigma, K, p, n):
    """(241) at (243)'s ε is K^{3/2}σ² + 2Kσ√(σ + √(n/d)); (244) keeps its form up to that factor 2."""
    d = K * p
    eps = remark17_eps(sigma, n, d, K)
    bound = remark17_bound(sigma, eps, n, d, K)
    naive = K**1.5 * sigma**2 + sigma**2 * d / (n * eps**2) + n * K**2 / d * (sigma + np.sqrt(n / d)) * eps**2
    np.testing.assert_allclose(bound, naive, rtol=1e-12)  # (241) term by term
    expected = bound - K * sigma * np.sqrt(sigma + np.sqrt(n / d))  # the two balanced terms are equal at (243)
    np.testing.assert_allclose(remark17_residual_bound(sigma, n, d, K), expected, rtol=1e-12)
    for factor in (0.5, 2.0):  # (243) minimises (241) over ε²
        assert remark17_bound(sigma, eps * np.sqrt(factor), n, d, K) > bound


@given(samples(sigma=0.5), st.sampled_from([0.0, 0.1, 0.4]), SEEDS)
def test_on_bases_places_the_same_draw_on_other_bases(s, nu, seed):
    """Remark 18: the codes, labels, Π and Δ are kept; X_♮ = [U_1A_1 … U_KA_K]Π with the new bases, in float64."""
    K, d, p = s.U.shape
    if nu > 0 and (K + 1) * p > d:
        return  # bases of coherence ν need (K+1)p ≤ d
    U = orthonormal_bases(K, d, p, np.random.default_rng(seed), coherence=nu)
    moved = on_bases(s, U)
    block = np.concatenate([U[k] @ s.A[k] for k in range(K)], axis=1)
    np.testing.assert_allclose(moved.X_nat, block @ permutation_matrix(s.order), rtol=0, atol=1e-15)
    np.testing.assert_array_equal(moved.Z, moved.X_nat + s.Delta)
    for name in ("Delta", "labels", "order"):
        np.testing.assert_array_equal(getattr(moved, name), getattr(s, name))
    assert moved.U is not s.U and moved.sigma == s.sigma
    np.testing.assert_array_equal(on_bases(s, s.U).Z, s.Z)  # its own bases give the sample back exactly


@given(samples(sigma=0.5), st.sampled_from([0.0, 0.01, 2.0]))
def test_at_noise_level_rescales_the_noise_only(s, sigma):
    moved = at_noise_level(s, sigma)
    np.testing.assert_allclose(moved.Delta, s.Delta * (sigma / 0.5), rtol=1e-15, atol=0)
    np.testing.assert_array_equal(moved.Z, s.X_nat + moved.Delta)
    np.testing.assert_array_equal(moved.X_nat, s.X_nat)
    assert moved.sigma == sigma
    np.testing.assert_array_equal(at_noise_level(s, 0.5).Z, s.Z)


def test_redraws_refuse_what_they_cannot_do():
    rng = np.random.default_rng(0)
    s = sample_theorem16(12, 5, 3, 4, 0.1, rng)
    with pytest.raises(ValueError, match="shape"):
        on_bases(s, orthonormal_bases(2, 12, 4, rng))
    with pytest.raises(ValueError, match="orthonormal"):
        on_bases(s, 2 * s.U)
    with pytest.raises(ValueError, match="sigma"):
        at_noise_level(sample_theorem16(12, 5, 3, 4, 0.0, rng), 0.1)
    with pytest.raises(ValueError, match="sigma"):
        at_noise_level(s, -1.0)


def test_bad_input_raises_named_errors():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="K\\*p"):
        sample_theorem16(10, 5, 3, 4, 0.1, rng)
    with pytest.raises(ValueError, match="sigma"):
        sample_theorem16(12, 5, 3, 4, -0.1, rng)
    with pytest.raises(TypeError, match="rng"):
        sample_theorem16(12, 5, 3, 4, 0.1, 0)
    with pytest.raises(ValueError, match="orthogonal"):
        sample_theorem16(12, 5, 2, 4, 0.1, rng, U=orthonormal_bases(2, 12, 4, rng, coherence=0.3))
    with pytest.raises(ValueError, match="orthonormal"):
        sample_theorem16(12, 5, 3, 4, 0.1, rng, U=2 * orthonormal_bases(3, 12, 4, rng))
    s = sample_theorem16(12, 5, 3, 4, 0.1, rng)
    with pytest.raises(ValueError, match="eps"):
        nominal_gradient(s, 0.0)
    with pytest.raises(ValueError, match="sigma"):
        theorem16_residuals(sample_theorem16(12, 5, 3, 4, 0.0, rng), 1.0)
    with pytest.raises(ValueError, match="sigma"):
        remark17_eps(0.0, 196, 768, 12)
    with pytest.raises(ValueError, match="eps"):
        remark17_bound(0.01, -1.0, 196, 768, 12)
    with pytest.raises(ValueError, match="order"):
        permutation_matrix([0, 0, 1])
