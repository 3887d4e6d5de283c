"""Values of the coding rates (crate_theory.coding_rate): eqs. (7)–(9), (12)–(17); paper-notes §2.1."""
import numpy as np
import pytest
from _theory_cases import (
    bases_shapes,
    eps_values,
    mp_rate,
    naive_rate,
    random_bases,
    rel_err,
    scales,
    seeds,
    token_shapes,
)
from hypothesis import given

import crate_theory as ct

# Values: 1e-10 relative is the target. Against the 50-digit reference the SVD evaluation is accurate to a
# few ulps (measured ≤ 2e-15 over 400 draws), so 1e-12 is a strict check. The naive float64 slogdet of a matrix
# I + E close to I has an *absolute* error of a few ulps per dimension (measured ≤ 5e-12 for R up to ~40), which is
# large relative to R when R → 0 (tokens at scale 1e-3): hence rtol 1e-10 plus atol 1e-13 against naive formulas.
VALUE_RTOL = 1e-10
NAIVE_ATOL = 1e-13
MP_RTOL = 1e-12


@given(shape=token_shapes(), scale=scales, eps=eps_values, seed=seeds)
def test_coding_rate_equals_both_gram_forms(shape, scale, eps, seed):
    """R(Z) = ½logdet(I_n + αZ*Z) = ½logdet(I_d + αZZ*) (Sylvester), eq. (8), over n<d, n>d, n=1 and scales;
    and R agrees with the 50-digit evaluation of (8)."""
    Z = scale * np.random.default_rng(seed).standard_normal(shape)
    R = ct.coding_rate(Z, eps)
    assert isinstance(R, float)
    small, large = naive_rate(Z, eps, "n"), naive_rate(Z, eps, "d")
    assert abs(small - large) <= VALUE_RTOL * abs(small) + NAIVE_ATOL  # Sylvester itself
    assert abs(R - small) <= VALUE_RTOL * abs(small) + NAIVE_ATOL
    assert abs(R - mp_rate(Z, eps)) <= MP_RTOL * abs(R)


@given(shape=bases_shapes(), scale=scales, eps=eps_values, seed=seeds)
def test_compression_rate_is_sum_of_projected_rates(shape, scale, eps, seed):
    """R^c(Z | U) = Σ_k R(U_k*Z) with β = p/(nε²) — eqs. (12)–(13); K = 1 and p = d included."""
    K, d, p, n = shape
    rng = np.random.default_rng(seed)
    U = random_bases(rng, K, d, p)
    Z = scale * rng.standard_normal((d, n))
    expected = sum(naive_rate(U[k].T @ Z, eps) for k in range(K))  # naive_rate uses α = p/(nε²) for p×n input
    assert abs(ct.compression_rate(Z, U, eps) - expected) <= VALUE_RTOL * abs(expected) + K * NAIVE_ATOL
    delta = ct.rate_reduction(Z, U, eps)
    assert abs(delta - (naive_rate(Z, eps) - expected)) <= VALUE_RTOL * (abs(expected) + naive_rate(Z, eps)) + (
        K + 1
    ) * NAIVE_ATOL


@given(shape=bases_shapes(), scale=scales, eps=eps_values, seed=seeds)
def test_rate_reduction_invariant_under_joint_rotation(shape, scale, eps, seed):
    """ΔR(QZ | QU) = ΔR(Z | U) for orthogonal Q (Sec. 2.1, Fig. 5), while ‖Z‖_1 changes in general."""
    K, d, p, n = shape
    rng = np.random.default_rng(seed)
    U = random_bases(rng, K, d, p)
    Z = scale * rng.standard_normal((d, n))
    Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
    before = ct.rate_reduction(Z, U, eps)
    after = ct.rate_reduction(Q @ Z, np.einsum("ij,kjp->kip", Q, U), eps)
    scale_of_terms = ct.coding_rate(Z, eps) + ct.compression_rate(Z, U, eps)
    assert abs(after - before) <= 1e-12 * scale_of_terms + 1e-300  # both sides by the SVD: a few ulps of the terms


def test_l1_norm_is_not_rotation_invariant():
    """The reason for the sparsity term (Sec. 2.1): ‖QZ‖_1 ≠ ‖Z‖_1 for a generic rotation."""
    rng = np.random.default_rng(0)
    Z = rng.standard_normal((6, 4))
    Q = np.linalg.qr(rng.standard_normal((6, 6)))[0]
    assert abs(np.abs(Q @ Z).sum() - np.abs(Z).sum()) > 1e-3


@given(shape=bases_shapes(max_d=6, max_n=5), eps=eps_values, seed=seeds)
def test_batch_equals_loop(shape, eps, seed):
    """Every value function on a (B1, B2, d, n) stack equals the loop over its elements."""
    K, d, p, n = shape
    rng = np.random.default_rng(seed)
    U = random_bases(rng, K, d, p)
    Zs = rng.standard_normal((2, 3, d, n))
    for fn, args in [
        (ct.coding_rate, (eps,)),
        (ct.compression_rate, (U, eps)),
        (ct.rate_reduction, (U, eps)),
        (ct.sparse_rate_reduction, (U, eps, 0.3)),
    ]:
        batched = fn(Zs, *args)
        assert batched.shape == (2, 3)
        looped = np.array([[fn(Zs[i, j], *args) for j in range(3)] for i in range(2)])
        np.testing.assert_allclose(batched, looped, rtol=1e-13, atol=1e-14)  # same arithmetic, stacked LAPACK


@pytest.mark.parametrize(
    "Z",
    [
        np.zeros((5, 3)),  # zero tokens: R = 0
        np.ones((4, 6)),  # duplicated tokens: rank 1
        np.outer(np.arange(1.0, 6.0), np.ones(7)),  # rank 1, n > d
        1e-200 * np.random.default_rng(1).standard_normal((4, 3)),  # tiny: α s² underflows
        1e300 * np.random.default_rng(2).standard_normal((4, 3)),  # huge: α s² overflows
        np.full((3, 5), np.finfo(float).max / 4),  # near the float64 limit
    ],
    ids=["zero", "duplicated", "rank1-wide", "tiny", "huge", "near-max"],
)
def test_coding_rate_finite_on_extreme_inputs(Z):
    """R, ∇R, the HVP and the Hessian norm stay finite for every finite input (the issue's requirement)."""
    for eps in (1e-3, 1.0, 1e3):
        R = ct.coding_rate(Z, eps)
        assert np.isfinite(R) and R >= 0
        assert np.all(np.isfinite(ct.coding_rate_grad(Z, eps)))
        assert np.all(np.isfinite(ct.coding_rate_hvp(Z, np.ones_like(Z), eps)))
        assert np.isfinite(ct.coding_rate_hessian_norm(Z, eps))


def test_coding_rate_closed_forms_on_degenerate_inputs():
    """Exact values: R(0) = 0; n identical tokens z give ½log(1 + α n‖z‖²); huge scale matches log asymptotics."""
    assert ct.coding_rate(np.zeros((5, 3)), 0.5) == 0.0
    z = np.array([1.0, 2.0, -0.5])
    n, eps = 4, 0.7
    alpha = 3 / (n * eps**2)
    Z = np.tile(z[:, None], (1, n))  # rank one, singular value √n‖z‖
    assert rel_err(ct.coding_rate(Z, eps), 0.5 * np.log1p(alpha * n * z @ z)) < 1e-14
    # scale c → ∞ with Z of full rank r: R(cZ) = r log c + ½ Σ log(α s_i²) + O(1/c²)
    rng = np.random.default_rng(3)
    Z = rng.standard_normal((3, 5))
    s = np.linalg.svd(Z, compute_uv=False)
    alpha = 3 / (5 * eps**2)
    c = 1e150
    expected = 3 * np.log(c) + 0.5 * np.sum(np.log(alpha * s**2))
    assert rel_err(ct.coding_rate(c * Z, eps), expected) < 1e-14


def test_empty_token_set_has_zero_rate():
    """n = 0 (no tokens) and d = 0 give R = 0, also batched."""
    assert ct.coding_rate(np.zeros((4, 0)), 1.0) == 0.0
    assert ct.coding_rate(np.zeros((0, 3)), 1.0) == 0.0
    np.testing.assert_array_equal(ct.coding_rate(np.zeros((2, 4, 0)), 1.0), np.zeros(2))
    assert ct.compression_rate(np.zeros((4, 0)), random_bases(np.random.default_rng(0), 2, 4, 2), 1.0) == 0.0


def test_token_permutation_invariance():
    """R and R^c do not depend on the order of the tokens (columns)."""
    rng = np.random.default_rng(4)
    Z = rng.standard_normal((6, 5))
    U = random_bases(rng, 3, 6, 2)
    perm = rng.permutation(5)
    assert rel_err(ct.coding_rate(Z[:, perm], 1.0), ct.coding_rate(Z, 1.0)) < 1e-13
    assert rel_err(ct.compression_rate(Z[:, perm], U, 1.0), ct.compression_rate(Z, U, 1.0)) < 1e-13


def test_sparse_rate_reduction_l1_and_l0():
    """(17): ΔR − λ‖Z‖_1; (16): ΔR − λ‖Z‖_0 with the exact count of non-zeros."""
    rng = np.random.default_rng(5)
    Z = rng.standard_normal((6, 4))
    Z[Z < 0.3] = 0.0
    U = random_bases(rng, 2, 6, 3)
    dr = ct.rate_reduction(Z, U, 0.5)
    assert ct.sparse_rate_reduction(Z, U, 0.5, 0.2) == pytest.approx(dr - 0.2 * np.abs(Z).sum(), rel=1e-14)
    assert ct.sparse_rate_reduction(Z, U, 0.5, 0.2, norm="l0") == pytest.approx(
        dr - 0.2 * np.count_nonzero(Z), rel=1e-14
    )


def test_label_compression_rate_paper_and_mcr2_weighting():
    """(9): ½Σ_k logdet(I + γ_k Z Π_k Z*), γ_k = d/(n_k ε²); MCR² weights term k by n_k/n; empty groups add 0."""
    rng = np.random.default_rng(6)
    d, n, eps = 5, 9, 0.8
    Z = rng.standard_normal((d, n))
    labels = np.array([0, 2, 0, 2, 2, 0, 0, 2, 2])  # group 1 is empty
    paper, mcr2 = 0.0, 0.0
    for k in range(3):
        Pi = np.diag((labels == k).astype(float))  # Boolean diagonal membership matrix
        nk = int(Pi.trace())
        if nk == 0:
            continue
        term = 0.5 * np.linalg.slogdet(np.eye(d) + d / (nk * eps**2) * Z @ Pi @ Z.T)[1]
        paper += term
        mcr2 += nk / n * term
    assert rel_err(ct.label_compression_rate(Z, labels, eps), paper) < 1e-12
    assert rel_err(ct.label_compression_rate(Z, labels, eps, weighting="mcr2"), mcr2) < 1e-12
    assert ct.label_compression_rate(Z, labels, eps, num_classes=5) == pytest.approx(paper, rel=1e-14)



@pytest.mark.parametrize(
    "K, d, p, n",
    [(1, 5, 5, 1), (1, 1, 1, 4), (1, 4, 4, 4), (3, 6, 2, 1), (2, 3, 1, 7), (1, 6, 6, 2), (2, 2, 2, 5)],
    ids=["K1-p=d-n1", "d1", "K1-p=d-square", "n1", "n>d", "K1-p=d-n<d", "p=d-n>d"],
)
def test_edge_shapes_explicitly(K, d, p, n):
    """The edge shapes the issue names (n = 1, K = 1, p = d, n < d, n > d), independently of hypothesis' draws:
    values against the 50-digit reference and R^c = Σ_k R(U_k*Z); with p = d and K = 1, R^c(Z|U) = R(Z)."""
    rng = np.random.default_rng(K * 1000 + d * 100 + p * 10 + n)
    U = random_bases(rng, K, d, p)
    Z = rng.standard_normal((d, n))
    assert abs(ct.coding_rate(Z, 0.5) - mp_rate(Z, 0.5)) <= MP_RTOL * mp_rate(Z, 0.5)
    expected = sum(mp_rate(U[k].T @ Z, 0.5) for k in range(K))
    assert abs(ct.compression_rate(Z, U, 0.5) - expected) <= MP_RTOL * expected
    if K == 1 and p == d:  # an orthogonal change of basis: R(U*Z) = R(Z), β = α
        assert abs(ct.rate_reduction(Z, U, 0.5)) <= MP_RTOL * expected
