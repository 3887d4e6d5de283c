"""Values of the coding rates (crate_theory.coding_rate): eqs. (7)–(9), (12)–(17)."""
import numpy as np
import pytest
from _theory_cases import (
    adversarial_tokens,
    bases_shapes,
    eps_values,
    mp_rate,
    naive_rate,
    random_bases,
    scales,
    seeds,
    svd_grad,
    svd_hvp,
    svd_rate,
    token_shapes,
)
from hypothesis import given

import crate_theory as ct
from verify.numerics import rel_err

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
    """R, ∇R, the HVP and the Hessian norm stay finite for every finite input."""
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
    """The edge shapes (n = 1, K = 1, p = d, n < d, n > d), independently of hypothesis' draws:
    values against the 50-digit reference and R^c = Σ_k R(U_k*Z); with p = d and K = 1, R^c(Z|U) = R(Z)."""
    rng = np.random.default_rng(K * 1000 + d * 100 + p * 10 + n)
    U = random_bases(rng, K, d, p)
    Z = rng.standard_normal((d, n))
    assert abs(ct.coding_rate(Z, 0.5) - mp_rate(Z, 0.5)) <= MP_RTOL * mp_rate(Z, 0.5)
    expected = sum(mp_rate(U[k].T @ Z, 0.5) for k in range(K))
    assert abs(ct.compression_rate(Z, U, 0.5) - expected) <= MP_RTOL * expected
    if K == 1 and p == d:  # an orthogonal change of basis: R(U*Z) = R(Z), β = α
        assert abs(ct.rate_reduction(Z, U, 0.5)) <= MP_RTOL * expected


# ----------------------------------------------------------------------------------------------------------------
# The smaller-Gram evaluation against the previous thin-SVD one (tests/theory/_theory_cases.py)
# ----------------------------------------------------------------------------------------------------------------
# Both evaluations are spectral functions of singular values/vectors of Z, and each computes those with an error
# that rounding bounds in terms of s_max (LAPACK's SVD: |δs_i| ≤ c·u·s_max; the Gram path: the row norms of W*Ẑ
# are accurate to c·u·s_max, see the coding_rate module docstring), c a small multiple of the sizes: we take
# δ = 4(d + n)·u·s_max for each (two such bounds on the difference, a factor 2 margin). The tolerances below propagate
# δ through the exact sensitivity of each quantity, so they are tight where the problem is well conditioned (a few
# u relative for Gaussian tokens at moderate α) and wide only where any float64 evaluation is uncertain (e.g. the
# singular values of a rank-deficient Z are only known to within δ, and α δ² is what they then add to R).
U64 = np.finfo(float).eps


def _log_alpha(Z, eps):
    d, n = Z.shape
    return np.log(d) - np.log(n) - 2 * np.log(eps)


def _half_log1p(log_alpha, s):
    with np.errstate(divide="ignore"):
        return 0.5 * np.logaddexp(0.0, log_alpha + 2 * np.log(s))


def _log_h(log_alpha, s_min):
    """log h(s_min), h(s) = α/(1 + αs²) = 1/(1/α + s²): the largest |f'| and f(s)/s over the spectrum, f(s) = αs/(1+αs²)
    (|f'(s)| = h(s)·|1 − αs²|/(1 + αs²) ≤ h(s), and h decreases in s)."""
    with np.errstate(divide="ignore"):
        return -np.logaddexp(-log_alpha, 2 * np.log(s_min))


def _rate_tolerance(Z, eps, ref):
    """Each singular value may move by 2δ, which changes ½ log(1 + αs²) by at most its variation over
    [s − 2δ, s + 2δ] (summed over i); plus 8r·u·|R| for the rounding of the r logarithms and their sum; plus the
    reference's own error: it evaluates every term as ½ logaddexp(0, y), y = log α + 2 log s, whose argument
    carries ~u·(|log α| + 2|log s| + 1) absolute, which is relative to the term when α s² is tiny (1.1e-13 relative
    at α s² = 3e-298, found by hypothesis; 4u per unit of |y| is the margin)."""
    d, n = Z.shape
    s = np.linalg.svd(Z, compute_uv=False)
    delta = 4 * (d + n) * U64 * s[0]
    la = _log_alpha(Z, eps)
    spread = _half_log1p(la, s + 2 * delta) - _half_log1p(la, np.maximum(s - 2 * delta, 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_error = np.where(s > 0, 4 * U64 * (abs(la) + 2 * abs(np.log(s)) + 1) * _half_log1p(la, s), 0.0)
    return spread.sum() + log_error.sum() + 8 * min(d, n) * U64 * abs(ref)


@given(case=adversarial_tokens())
def test_gram_rate_equals_svd_rate(case):
    """R from the smaller Gram matrix vs the thin-SVD reference, within :func:`_rate_tolerance`."""
    Z, eps, kind, scale = case
    ref = svd_rate(Z, eps)
    ours = ct.coding_rate(Z, eps)
    assert np.isfinite(ours)
    assert abs(ours - ref) <= _rate_tolerance(Z, eps, ref), (kind, scale, eps)


@given(case=adversarial_tokens())
def test_gram_gradient_equals_svd_gradient(case):
    """∇R (109) vs the thin-SVD reference. A perturbation δZ changes the singular-value function Z ↦ P f(S) Q* by at
    most L·‖δZ‖, L the largest divided difference of f over the spectrum, bounded by h(s_min) (see _log_h); the Gram
    path's own error (its right singular vectors of small s carry ~u·s_max of the large ones, amplified by
    h(s_min)) has the same form. Tolerance on the largest entry: 4(d + n)·u·√r·s_max·h(s_min)."""
    Z, eps, kind, scale = case
    d, n = Z.shape
    s = np.linalg.svd(Z, compute_uv=False)
    ours, ref = ct.coding_rate_grad(Z, eps), svd_grad(Z, eps)
    assert np.all(np.isfinite(ours))
    if s[0] == 0:
        np.testing.assert_array_equal(ours, 0.0)
        return
    log_tol = np.log(4 * (d + n) * U64 * np.sqrt(min(d, n))) + np.log(s[0]) + _log_h(_log_alpha(Z, eps), s[-1])
    assert np.abs(ours - ref).max() <= np.exp(log_tol), (kind, scale, eps)


@given(case=adversarial_tokens(max_n=40))
def test_gram_hvp_equals_svd_hvp(case):
    """∇²R(Z)[V] (127) vs the thin-SVD reference, V Gaussian. Two error sources, each bounded with the 4(d + n)·u
    factor: (i) the two terms of (127) are each up to α‖V‖ in size and cancel to the result, so every float64
    evaluation carries ~u·α·‖V‖ absolute (both this path and the reference measured 1.7e-11 relative from the
    50-digit value on the case that exposed it, d = 2, n = 3, ε = 1e-3); (ii) the operator's entries are
    h(s)-weighted (|eigenvalue| ≤ h(s_min)) and its sensitivity to δZ carries one more factor s_max²·h(s_min) (the
    condition number 1 + αs_max² of I + αZZ* when s_min = 0). Tolerance on the largest entry:
    4(d + n)·u·‖V‖_F·(α + h(s_min)·(1 + s_max²·h(s_min)))."""
    Z, eps, kind, scale = case
    d, n = Z.shape
    V = np.random.default_rng(d * 1000 + n).standard_normal((d, n))
    s = np.linalg.svd(Z, compute_uv=False)
    ours, ref = ct.coding_rate_hvp(Z, V, eps), svd_hvp(Z, V, eps)
    assert np.all(np.isfinite(ours))
    lh = _log_h(_log_alpha(Z, eps), s[-1])
    with np.errstate(divide="ignore"):
        log_kappa = np.logaddexp(0.0, 2 * np.log(s[0]) + lh)
    log_tol = np.log(4 * (d + n) * U64 * np.linalg.norm(V)) + np.logaddexp(_log_alpha(Z, eps), lh + log_kappa)
    with np.errstate(over="ignore"):  # +inf where the condition number itself is beyond float64 (rank-deficient
        tol = np.exp(log_tol)  # Z at 1e300 and small ε): then only finiteness, asserted above, is checked
    assert np.abs(ours - ref).max() <= tol, (kind, scale, eps)


@given(case=adversarial_tokens(max_d=4, max_n=12))
def test_gram_paths_batch_and_compression(case):
    """A stack equals the loop (same arithmetic, stacked LAPACK: 1e-13 relative), and R^c goes through the same path
    on the projected codes U_k*Z (checked against the SVD reference of each U_k*Z with the rate tolerance; the
    projection differs only by the rounding of U_k*Z, inside δ)."""
    Z, eps, kind, scale = case
    d, n = Z.shape
    stack = np.stack([Z, Z[::-1], 0.5 * Z])
    np.testing.assert_allclose(ct.coding_rate(stack, eps), [ct.coding_rate(x, eps) for x in stack], rtol=1e-13)
    looped = np.stack([ct.coding_rate_grad(x, eps) for x in stack])
    batched = ct.coding_rate_grad(stack, eps)
    assert np.abs(batched - looped).max() <= 1e-13 * np.abs(looped).max()
    U = random_bases(np.random.default_rng(n), 2, d, max(1, d // 2))
    A = np.einsum("kdp,dn->kpn", U, Z)
    refs = [svd_rate(a, eps) for a in A]
    tol = sum(_rate_tolerance(a, eps, r) for a, r in zip(A, refs)) + 4 * U64 * abs(sum(refs))  # + the sum's rounding
    assert abs(ct.compression_rate(Z, U, eps) - sum(refs)) <= tol, (kind, scale, eps)


def test_gram_paths_at_n_1e5_linear_memory():
    """n = 1e5 ≫ d = 8, duplicated tokens (rank 2): R has the closed form ½ log(1 + αλ_1) + ½ log(1 + αλ_2) of the
    2×2 Gram matrix of the distinct tokens weighted by their counts (exact rational-size arithmetic, 1e-13 relative
    for the ~1e5-term sums); the gradient and HVP stay within a few Z-sized arrays (the previous SVD path held
    (d, n) U/V factors and LAPACK copies: 917 MiB for a 293 MiB Z); peak traced memory ≤ 8 × Z.nbytes."""
    import tracemalloc

    rng = np.random.default_rng(0)
    d, n, eps = 8, 100_000, 0.5
    tokens = rng.standard_normal((d, 2))
    pick = rng.integers(0, 2, n)
    Z = tokens[:, pick]
    counts = np.bincount(pick, minlength=2)
    small = (tokens * counts) @ tokens.T  # ZZ* = Σ_j counts_j t_j t_j*
    lam = np.linalg.eigvalsh(small)
    alpha = d / (n * eps**2)
    assert rel_err(ct.coding_rate(Z, eps), 0.5 * np.log1p(alpha * np.clip(lam, 0, None)).sum()) < 1e-13
    V = rng.standard_normal((d, n))
    for fn, args in ((ct.coding_rate_grad, (Z, eps)), (ct.coding_rate_hvp, (Z, V, eps))):
        tracemalloc.start()
        try:
            out = fn(*args)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert np.all(np.isfinite(out))
        assert peak <= 8 * Z.nbytes, (fn.__name__, peak / Z.nbytes)
