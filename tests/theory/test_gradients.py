"""Gradients (31), (109) and the Hessian operator (127) of the coding rates: against the printed formulas, central
finite differences, torch autograd in float64 and sympy; rotation equivariance (120)–(121)."""
import numpy as np
import pytest
import sympy
import torch
from _theory_cases import (
    bases_shapes,
    condition_number,
    eps_values,
    mp_grad_and_hvp,
    naive_compression_grad,
    naive_grad,
    naive_hvp,
    random_bases,
    scales,
    seeds,
    token_shapes,
)
from hypothesis import given

import crate_theory as ct
from verify.numerics import directional_difference, finite_difference_gradient, rel_err

# Tolerances. 1e-8 relative is the target for gradients and HVPs.
# * vs the printed formulas evaluated in 50-digit arithmetic: the SVD evaluation is accurate to ~1e-13 (measured),
#   so 1e-10 is strict.
# * vs finite differences: 5-point central stencil with h = 1e-3/√α (the length scale on which R varies):
#   truncation O(h⁴) ~ 1e-12 and rounding O(ε_mach·|R|/h) ~ 1e-11 relative; measured worst 1.7e-9 over 300 draws.
# * vs torch autograd and the float64 printed formulas: these evaluate (I + αZ*Z)^{-1} naively, so their own
#   rounding grows with κ = 1 + α‖Z‖² (up to ~1e6 at scale 30, ε = 0.1): measured ≤ 13·ε_mach·κ for ∇R and
#   ≤ 4·ε_mach·κ² for the HVP (the two terms of (127) cancel to O(1/κ) of their size); the tolerance adds 100× that
#   bound to 1e-8. The 50-digit comparison is the one that pins the value at every κ.
GRAD_RTOL = 1e-8
MP_RTOL = 1e-10
ULP = np.finfo(float).eps


def _alpha(Z, eps):
    d, n = Z.shape[-2:]
    return d / (n * eps**2)


def _torch_rate(Z: torch.Tensor, eps: float) -> torch.Tensor:
    d, n = Z.shape
    alpha = d / (n * eps**2)
    return 0.5 * torch.logdet(torch.eye(n, dtype=Z.dtype) + alpha * Z.T @ Z)


def _torch_compression(Z: torch.Tensor, U: torch.Tensor, eps: float) -> torch.Tensor:
    return sum(_torch_rate(U[k].T @ Z, eps) for k in range(U.shape[0]))


# ---------------------------------------------------------------------------------------------------------------
# ∇R (109)
# ---------------------------------------------------------------------------------------------------------------
@given(shape=token_shapes(max_d=5, max_n=5), scale=scales, eps=eps_values, seed=seeds)
def test_coding_rate_grad_matches_formula_fd_and_autograd(shape, scale, eps, seed):
    """∇R = αZ(I + αZ*Z)^{-1} (109): the SVD evaluation vs the printed formula, finite differences, torch autograd."""
    Z = scale * np.random.default_rng(seed).standard_normal(shape)
    G = ct.coding_rate_grad(Z, eps)
    exact, _ = mp_grad_and_hvp(Z, Z, eps)
    assert rel_err(G, exact) < MP_RTOL
    naive_tol = GRAD_RTOL + 100 * 13 * ULP * condition_number(Z, eps)
    assert rel_err(G, naive_grad(Z, eps)) < naive_tol
    fd = finite_difference_gradient(lambda X: ct.coding_rate(X, eps), Z, 1e-3 / np.sqrt(_alpha(Z, eps)), "five_point")
    assert rel_err(G, fd) < GRAD_RTOL
    Zt = torch.tensor(Z, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(_torch_rate(Zt, eps), Zt)
    assert rel_err(G, auto.numpy()) < naive_tol


def test_coding_rate_grad_both_gram_forms_and_batch():
    """(109) = α(I + αZZ*)^{-1}Z (the d×d form), and a batch equals the loop."""
    rng = np.random.default_rng(0)
    Zs = rng.standard_normal((3, 4, 6))
    G = ct.coding_rate_grad(Zs, 0.5)
    for Z, g in zip(Zs, G):
        alpha = 4 / (6 * 0.25)
        assert rel_err(g, alpha * np.linalg.solve(np.eye(4) + alpha * Z @ Z.T, Z)) < 1e-13
        assert rel_err(g, ct.coding_rate_grad(Z, 0.5)) < 1e-13  # same arithmetic, stacked LAPACK


def test_coding_rate_grad_sympy_small_sizes():
    """Symbolic differentiation of ½ logdet(I + αZ*Z) (exact rational arithmetic) at d×n ∈ {2×3, 3×2}."""
    for d, n in [(2, 3), (3, 2)]:
        eps = sympy.Rational(1, 2)
        alpha = sympy.Rational(d, n) / eps**2
        syms = sympy.symbols(f"z0:{d * n}")
        Z = sympy.Matrix(d, n, syms)
        R = sympy.log((sympy.eye(n) + alpha * Z.T * Z).det()) / 2
        rng = np.random.default_rng(d * 10 + n)
        point = [sympy.Rational(int(v), 7) for v in rng.integers(-9, 10, size=d * n)]
        subs = dict(zip(syms, point))
        exact = np.array([float(sympy.diff(R, s).subs(subs)) for s in syms]).reshape(d, n)
        Znum = np.array([float(v) for v in point]).reshape(d, n)
        assert rel_err(ct.coding_rate_grad(Znum, 0.5), exact) < 1e-13  # exact rationals vs float64 SVD


# ---------------------------------------------------------------------------------------------------------------
# ∇R^c (31)
# ---------------------------------------------------------------------------------------------------------------
@given(shape=bases_shapes(max_d=5, max_n=4), scale=scales, eps=eps_values, seed=seeds)
def test_compression_rate_grad_matches_formula_fd_and_autograd(shape, scale, eps, seed):
    """∇R^c = βΣ_k U_k(U_k*Z)(I + β(U_k*Z)*(U_k*Z))^{-1} (31): formula, finite differences, torch autograd."""
    K, d, p, n = shape
    rng = np.random.default_rng(seed)
    U = random_bases(rng, K, d, p)
    Z = scale * rng.standard_normal((d, n))
    G = ct.compression_rate_grad(Z, U, eps)
    exact = sum(U[k] @ mp_grad_and_hvp(U[k].T @ Z, U[k].T @ Z, eps)[0] for k in range(K))  # chain rule, 50 digits
    assert rel_err(G, exact) < MP_RTOL
    kappa = max(condition_number(U[k].T @ Z, eps) for k in range(K))
    naive_tol = GRAD_RTOL + 100 * 13 * ULP * kappa
    assert rel_err(G, naive_compression_grad(Z, U, eps)) < naive_tol
    beta = p / (n * eps**2)
    fd = finite_difference_gradient(lambda X: ct.compression_rate(X, U, eps), Z, 1e-3 / np.sqrt(beta), "five_point")
    assert rel_err(G, fd) < GRAD_RTOL
    Zt = torch.tensor(Z, dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(_torch_compression(Zt, torch.tensor(U), eps), Zt)
    assert rel_err(G, auto.numpy()) < naive_tol


def test_compression_rate_grad_equivalent_form_235():
    """(235): ∇R^c = Σ_k U_kU_k* Z (β^{-1}I + (U_k*Z)*(U_k*Z))^{-1}."""
    rng = np.random.default_rng(1)
    U = random_bases(rng, 3, 8, 2)
    Z = rng.standard_normal((8, 5))
    beta = 2 / (5 * 0.3**2)
    expected = sum(U[k] @ U[k].T @ Z @ np.linalg.inv(np.eye(5) / beta + (U[k].T @ Z).T @ (U[k].T @ Z)) for k in range(3))
    assert rel_err(ct.compression_rate_grad(Z, U, 0.3), expected) < 1e-12


# ---------------------------------------------------------------------------------------------------------------
# Hessian (127)
# ---------------------------------------------------------------------------------------------------------------
@given(shape=token_shapes(max_d=5, max_n=5), scale=scales, eps=eps_values, seed=seeds)
def test_hvp_matches_formula_fd_and_autograd(shape, scale, eps, seed):
    """∇²R(Z)[V] (127): the symmetric SVD form vs the printed formula, FD of the gradient, torch's hvp."""
    rng = np.random.default_rng(seed)
    Z = scale * rng.standard_normal(shape)
    V = rng.standard_normal(shape)
    H = ct.coding_rate_hvp(Z, V, eps)
    _, exact = mp_grad_and_hvp(Z, V, eps)
    assert rel_err(H, exact) < MP_RTOL
    naive_tol = GRAD_RTOL + 100 * 4 * ULP * condition_number(Z, eps) ** 2
    assert rel_err(H, naive_hvp(Z, V, eps)) < naive_tol
    fd = directional_difference(lambda X: ct.coding_rate_grad(X, eps), Z, V, 1e-3 / np.sqrt(_alpha(Z, eps)), "five_point")
    assert rel_err(H, fd) < GRAD_RTOL
    _, auto = torch.autograd.functional.hvp(lambda X: _torch_rate(X, eps), torch.tensor(Z), torch.tensor(V))
    assert rel_err(H, auto.numpy()) < naive_tol


def test_hvp_batch_equals_loop():
    rng = np.random.default_rng(2)
    Zs, Vs = rng.standard_normal((2, 3, 5, 4))
    H = ct.coding_rate_hvp(Zs, Vs, 0.7)
    for Z, V, h in zip(Zs, Vs, H):
        assert rel_err(h, ct.coding_rate_hvp(Z, V, 0.7)) < 1e-13


@given(shape=token_shapes(max_d=4, max_n=4), scale=scales, eps=eps_values, seed=seeds)
def test_hessian_spectrum_closed_form_matches_dense_matrix(shape, scale, eps, seed):
    """The closed-form eigenvalues (ours) equal eigvalsh of the dense dn×dn Hessian built from (127); the dense
    matrix is symmetric before symmetrisation and lies in [−α/8, α]."""
    Z = scale * np.random.default_rng(seed).standard_normal(shape)
    alpha = _alpha(Z, eps)
    d, n = shape
    basis = np.eye(d * n).reshape(d * n, d, n)
    raw = np.stack([naive_hvp(Z, E, eps).ravel() for E in basis], axis=1)  # the printed (127), column by column
    assert np.abs(raw - raw.T).max() <= 1e-12 * alpha  # Hessian of a scalar: symmetric
    dense = np.linalg.eigvalsh(ct.coding_rate_hessian(Z, eps))
    closed = ct.coding_rate_hessian_eigenvalues(Z, eps)
    np.testing.assert_allclose(closed, dense, rtol=0, atol=1e-11 * alpha)  # eigvalsh: backward stable, ~ε‖H‖
    np.testing.assert_allclose(np.linalg.eigvalsh(raw), dense, rtol=0, atol=1e-11 * alpha)
    assert closed.min() >= -alpha / 8 * (1 + 1e-12)
    assert closed.max() <= alpha * (1 + 1e-12)
    assert ct.coding_rate_hessian_norm(Z, eps) == pytest.approx(np.abs(dense).max(), rel=1e-10, abs=1e-11 * alpha)


def test_lemma11_bound_is_loose_sup_is_one():
    """Lemma 11 (136) bounds ‖∇²R(Z)‖/α by 9/4 for every Z. The exact supremum is 1: reached at Z = 0 and at any
    rank-deficient Z, approached as Z → 0; and the most negative curvature is exactly −α/8 (at αs² = 3)."""
    rng = np.random.default_rng(3)
    eps = 0.5
    ratios = []
    for scale in 10.0 ** np.arange(-4, 3):
        for shape in [(3, 5), (5, 3), (4, 4)]:
            Z = scale * rng.standard_normal(shape)
            ratios.append(ct.coding_rate_hessian_norm(Z, eps) / _alpha(Z, eps))
    assert max(ratios) <= 1.0 + 1e-12 < 9 / 4
    assert ct.coding_rate_hessian_norm(np.zeros((3, 4)), eps) == pytest.approx(_alpha(np.zeros((3, 4)), eps), rel=1e-15)
    # full column rank square Z: strictly below α, → α as the scale → 0
    Z = rng.standard_normal((4, 4))
    norms = [ct.coding_rate_hessian_norm(c * Z, eps) / _alpha(Z, eps) for c in (1.0, 1e-2, 1e-4)]
    assert norms[0] < 1 and norms[0] < norms[1] < norms[2] < 1 and 1 - norms[2] < 1e-6
    # minimal curvature −α/8: one token, d = n = 1, at α s² = 3
    alpha = _alpha(np.zeros((1, 1)), eps)
    Z = np.array([[np.sqrt(3 / alpha)]])
    assert ct.coding_rate_hessian_eigenvalues(Z, eps)[0] == pytest.approx(-alpha / 8, rel=1e-14)


def test_rotation_equivariance_120_and_121():
    """(120) D∇R(Z) = ∇R(DZ) and the correct form of (121), ⟨DΔ, ∇²R(DZ)[DΔ]⟩ = ⟨Δ, ∇²R(Z)[Δ]⟩; the printed
    (121), ⟨DΔ, ∇²R(Z)[DΔ]⟩ = ⟨Δ, ∇²R(DZ)[Δ]⟩, fails for a generic orthogonal D (arguments swapped)."""
    rng = np.random.default_rng(4)
    Z = rng.standard_normal((5, 3))
    Delta = rng.standard_normal((5, 3))
    D = np.linalg.qr(rng.standard_normal((5, 5)))[0]
    eps = 0.8
    assert rel_err(D @ ct.coding_rate_grad(Z, eps), ct.coding_rate_grad(D @ Z, eps)) < 1e-13
    lhs = np.sum(D @ Delta * ct.coding_rate_hvp(D @ Z, D @ Delta, eps))
    rhs = np.sum(Delta * ct.coding_rate_hvp(Z, Delta, eps))
    assert rel_err(lhs, rhs) < 1e-12
    printed_lhs = np.sum(D @ Delta * ct.coding_rate_hvp(Z, D @ Delta, eps))
    printed_rhs = np.sum(Delta * ct.coding_rate_hvp(D @ Z, Delta, eps))
    assert rel_err(printed_lhs, printed_rhs) > 1e-3


def test_hessian_spectrum_batch_equals_loop():
    rng = np.random.default_rng(5)
    Zs = rng.standard_normal((2, 3, 4, 3))
    eig = ct.coding_rate_hessian_eigenvalues(Zs, 0.6)
    norms = ct.coding_rate_hessian_norm(Zs, 0.6)
    assert eig.shape == (2, 3, 12) and norms.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            np.testing.assert_allclose(eig[i, j], ct.coding_rate_hessian_eigenvalues(Zs[i, j], 0.6), rtol=1e-13, atol=1e-14)
            assert norms[i, j] == pytest.approx(ct.coding_rate_hessian_norm(Zs[i, j], 0.6), rel=1e-13)
