"""Sparsification by (non-negative) LASSO and ISTA (crate_theory.ista): eqs. (41)–(44), (118)."""
import numpy as np
import pytest
from _theory_cases import seeds
from hypothesis import given
from hypothesis import strategies as st

import crate_theory as ct
from verify.numerics import rel_err

sizes = st.tuples(st.integers(1, 6), st.integers(1, 5))  # (d, n)
lams = st.sampled_from([0.0, 0.05, 0.3, 1.0])


def _kkt_residual(X, D, Z, lam, nonneg):
    """Largest violation of the optimality conditions of (42) (nonneg) or (41) at Z, per unit of λ or gradient.

    (42): Z ≥ 0, g = D*(DZ − X) + λ ≥ 0 and Z ⊙ g = 0. (41): g_S = −λ sign(Z_S) on the support, |g| ≤ λ off it.
    """
    g = D.T @ (D @ Z - X)
    if nonneg:
        full = g + lam
        return max(-Z.min(initial=0.0), -full.min(initial=0.0), np.abs(Z * full).max(initial=0.0))
    on = Z != 0
    return max(np.abs(g[on] + lam * np.sign(Z[on])).max(initial=0.0), (np.abs(g[~on]) - lam).max(initial=0.0))


@given(seed=seeds, t=st.sampled_from([0.0, 0.1, 1.0]))
def test_thresholds_are_the_proximal_maps(seed, t):
    """S_t = prox of t‖·‖_1 (41) and max(· − t, 0) = prox of t‖·‖_1 + χ_{≥0} (118): optimality of each entry, and
    the output beats nearby points of the prox objective."""
    V = 2 * np.random.default_rng(seed).standard_normal((4, 5))
    S = ct.soft_threshold(V, t)
    np.testing.assert_array_equal(S, np.sign(V) * np.maximum(np.abs(V) - t, 0))
    on = S != 0
    assert np.allclose(S[on] - V[on] + t * np.sign(S[on]), 0, atol=1e-15) and np.all(np.abs(V[~on]) <= t)
    P = ct.nonneg_soft_threshold(V, t)
    assert np.all(P >= 0)
    on = P > 0
    assert np.allclose(P[on] - V[on] + t, 0, atol=1e-15) and np.all(V[~on] - t <= 0)
    rng = np.random.default_rng(seed + 1)
    for _ in range(5):  # strongly convex prox objectives: any perturbation increases them
        W = P + 1e-3 * rng.standard_normal(P.shape)
        W = np.maximum(W, 0)
        assert t * P.sum() + 0.5 * np.sum((P - V) ** 2) <= t * W.sum() + 0.5 * np.sum((W - V) ** 2) + 1e-15


@given(size=sizes, seed=seeds, eta=st.sampled_from([0.1, 0.5, 1.0]), lam=lams)
def test_ista_is_one_prox_gradient_step_from_the_input(size, seed, eta, lam):
    """(44) ReLU(Z − ηD*(DZ − Z) − ηλ1) = prox_{ηλ‖·‖_1 + χ≥0}(Z' − η∇_Z' ½‖Z − DZ'‖²) at Z' = Z, i.e. ista_solve
    for one iteration from Z0 = Z with X = Z; and the KKT conditions of that prox subproblem hold."""
    d, n = size
    rng = np.random.default_rng(seed)
    Z = rng.standard_normal((d, n))
    D = rng.standard_normal((d, d))
    out = ct.ista(Z, D, eta=eta, lam=lam)
    V = Z - eta * D.T @ (D @ Z - Z)  # the gradient step on ½‖Z − DZ'‖² at Z' = Z
    np.testing.assert_allclose(out, np.maximum(V - eta * lam, 0.0), rtol=1e-14, atol=1e-15)  # association order
    one = ct.ista_solve(Z, D, lam, Z0=Z, eta=eta, max_iter=1, tol=0.0)
    assert one.n_iter == 1
    np.testing.assert_allclose(one.Z, out, rtol=1e-15, atol=1e-15)  # same arithmetic, different association
    on = out > 0  # prox optimality: W − V + ηλ = 0 on the support, V ≤ ηλ off it
    assert np.allclose(out[on] - V[on] + eta * lam, 0, atol=1e-13) and np.all(V[~on] <= eta * lam + 1e-15)


@given(size=sizes, seed=seeds, lam=lams)
def test_orthogonal_dictionary_unit_step_is_relu_of_rotation(size, seed, lam):
    """D orthogonal, η = 1: ISTA(Z | D) = ReLU(D*Z − λ1) (a special case inferred from (44))."""
    d, n = size
    rng = np.random.default_rng(seed)
    D = np.linalg.qr(rng.standard_normal((d, d)))[0]
    Z = rng.standard_normal((d, n))
    np.testing.assert_allclose(ct.ista(Z, D, eta=1.0, lam=lam), np.maximum(D.T @ Z - lam, 0), rtol=0, atol=1e-14)


def test_ista_batch_equals_loop():
    rng = np.random.default_rng(0)
    Zs = rng.standard_normal((2, 3, 5, 4))
    D = rng.standard_normal((5, 5))
    out = ct.ista(Zs, D)
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(out[i, j], ct.ista(Zs[i, j], D), rtol=1e-15, atol=1e-15)


def _problem(seed, d=7, m=5, n=4):
    """A (d × m) dictionary with singular values in [0.5, 1.5] (so the LASSO is strongly convex and ISTA converges
    linearly) and signals X = D Z_true + noise with a sparse non-negative Z_true."""
    rng = np.random.default_rng(seed)
    P = np.linalg.qr(rng.standard_normal((d, m)))[0]
    Q = np.linalg.qr(rng.standard_normal((m, m)))[0]
    D = P @ np.diag(np.linspace(0.5, 1.5, m)) @ Q.T
    Z_true = np.maximum(rng.standard_normal((m, n)), 0)
    return D @ Z_true + 0.1 * rng.standard_normal((d, n)), D


@given(seed=seeds, lam=st.sampled_from([0.05, 0.3, 1.0]), step=st.sampled_from([1.0, 0.5]), nonneg=st.booleans())
def test_unrolled_ista_is_monotone_and_converges_to_reference(seed, lam, step, nonneg):
    """With η ≤ 1/‖D‖² the objective (42) (or (41)) never increases along unrolled ISTA, and the iterates converge
    to the independent L-BFGS-B (+ KKT polish) solution; the KKT residual vanishes."""
    X, D = _problem(seed)
    eta = step / np.linalg.norm(D, 2) ** 2
    res = ct.ista_solve(X, D, lam, eta=eta, tol=1e-14, max_iter=20000, nonneg=nonneg)
    assert res.converged
    obj = np.array(res.objective)
    # monotone up to rounding of the objective evaluation itself (~1e-16 relative per step)
    assert np.all(np.diff(obj) <= 1e-13 * np.abs(obj[:-1]).max())
    ref = ct.nonneg_lasso_reference(X, D, lam, nonneg=nonneg)
    # ISTA's stopping rule 1e-14 on a problem with contraction ≤ 1 − 0.25/2.25 leaves ~1e-13 error; the reference
    # is polished to machine precision on its support: 1e-9 is the 1e-8 target with margin.
    assert rel_err(res.Z, ref) < 1e-9
    assert _kkt_residual(X, D, res.Z, lam, nonneg) < 1e-10
    assert _kkt_residual(X, D, ref, lam, nonneg) < 1e-10
    assert res.objective[-1] == pytest.approx(ct.lasso_objective(X, D, ref, lam, nonneg=nonneg), rel=1e-12)


@pytest.mark.parametrize("nonneg", [True, False])
def test_fista_reaches_the_same_solution(nonneg):
    """FISTA (not monotone) converges to the same minimiser as ISTA and the reference solver."""
    X, D = _problem(11, d=9, m=9, n=3)
    ista = ct.ista_solve(X, D, 0.2, tol=1e-13, max_iter=50000, nonneg=nonneg)
    fista = ct.ista_solve(X, D, 0.2, tol=1e-13, max_iter=50000, accelerated=True, nonneg=nonneg)
    assert ista.converged and fista.converged
    assert rel_err(fista.Z, ista.Z) < 1e-9  # both converged to 1e-13 steps on a strongly convex problem
    assert rel_err(fista.Z, ct.nonneg_lasso_reference(X, D, 0.2, nonneg=nonneg)) < 1e-9


def test_unrolled_ista_from_the_input_mimics_crate_blocks():
    """Repeating CRATE's ISTA block (44) with a fixed X (= the block input) is unrolled ISTA from Z0 = X."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((6, 4))
    D = np.eye(6) + 0.2 * rng.standard_normal((6, 6))
    eta, lam = 0.1, 0.1
    Z = X.copy()
    for _ in range(5):
        Z = np.maximum(Z - eta * D.T @ (D @ Z - X) - eta * lam, 0)
    res = ct.ista_solve(X, D, lam, Z0=X, eta=eta, max_iter=5, tol=0.0)
    np.testing.assert_allclose(res.Z, Z, rtol=1e-13, atol=1e-14)  # same iteration, association order differs
    np.testing.assert_array_equal(ct.ista_solve(X, D, lam, Z0=X, eta=eta, max_iter=1, tol=0.0).Z, ct.ista(X, D, eta, lam))


def test_lasso_objective_values():
    """(41) λ‖Z‖_1 + ½‖X − DZ‖²; (42) adds χ_{Z≥0} (+inf for a negative entry); batched → one value per element."""
    rng = np.random.default_rng(6)
    X, D = rng.standard_normal((5, 3)), rng.standard_normal((5, 4))
    Z = rng.standard_normal((4, 3))
    plain = 0.3 * np.abs(Z).sum() + 0.5 * np.sum((X - D @ Z) ** 2)
    assert ct.lasso_objective(X, D, Z, 0.3, nonneg=False) == pytest.approx(plain, rel=1e-15)
    assert ct.lasso_objective(X, D, Z, 0.3) == np.inf
    assert ct.lasso_objective(X, D, np.abs(Z), 0.3) < np.inf
    batched = ct.lasso_objective(np.stack([X, X]), D, np.stack([np.abs(Z), Z]), 0.3)
    assert batched.shape == (2,) and np.isfinite(batched[0]) and batched[1] == np.inf


def test_ista_in_place_step_equals_the_expression():
    """d = 64, n = 10,000: the in-place step (two (d, n) arrays instead of seven) equals (44) written as one
    expression, for the ReLU and the soft threshold. The same operations in the same order; only BLAS may sum the
    64-term products in another order between calls (e.g. by alignment), a few u relative: 1e-13 of the largest
    entry."""
    rng = np.random.default_rng(0)
    d, n, eta, lam = 64, 10_000, 0.1, 0.1
    Z = rng.standard_normal((d, n))
    D = rng.standard_normal((d, d)) / np.sqrt(d)
    whole = np.maximum(Z - eta * D.T @ (D @ Z - Z) - eta * lam, 0.0)
    out = ct.ista(Z, D, eta=eta, lam=lam)
    np.testing.assert_allclose(out, whole, rtol=0, atol=1e-13 * np.abs(whole).max())
    soft = ct.ista_solve(Z, D, lam, Z0=Z, eta=eta, max_iter=1, tol=0.0, nonneg=False).Z
    V = Z - eta * D.T @ (D @ Z - Z)
    np.testing.assert_allclose(soft, np.sign(V) * np.maximum(np.abs(V) - eta * lam, 0), rtol=0,
                               atol=1e-13 * np.abs(V).max())
