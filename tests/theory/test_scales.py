"""The Neumann gradient (33) at large n (p × p form), and the Hessian spectrum of R (127) and
MSSA (36) at extreme scales (1e±150, 1e±300), checked against moderate-scale values through their scaling laws."""
import time
import tracemalloc

import numpy as np
import pytest
from _theory_cases import bases_shapes, random_bases, seeds, token_shapes
from hypothesis import assume, given
from hypothesis import strategies as st

import crate_theory as ct
from crate_theory import synthetic
from verify.numerics import rel_err

U64 = np.finfo(float).eps  # 2^-52, the float64 unit roundoff (×2)


# ----------------------------------------------------------------------------------------------------------------
# Neumann gradient (33): p × p form
# ----------------------------------------------------------------------------------------------------------------
def _old_dense_neumann(Z, U, eps):
    """The previous implementation, kept only here as the reference: A_k (A_k*A_k) with the n × n Gram matrix."""
    p, n = U.shape[2], Z.shape[-1]
    beta = p / (n * eps**2)
    A = np.einsum("kdp,...dn->...kpn", U, Z)
    return np.einsum("kdp,...kpn->...dn", U, beta * A - beta**2 * (A @ (np.swapaxes(A, -1, -2) @ A)))


@given(shape=bases_shapes(max_d=7, max_n=9), seed=seeds, eps=st.sampled_from([0.3, 1.0, 3.0]), batch=st.booleans())
def test_neumann_pxp_form_equals_old_dense_formula(shape, seed, eps, batch):
    """(A A*)A and A(A*A) are the same product, associated differently: they agree to rounding. Standard matmul
    error bounds give |fl(XY) − XY| ≤ γ_m |X||Y| (γ_m ≈ m·u, m the inner size), so each association is within
    ≈ (p + n)·u·‖A‖_F³ of the exact cubic term (Frobenius norms bound the |·| products); the lift by U_k (‖U_k‖ = 1)
    adds d·u relative. The tolerance 4(p + n + d)·u·Σ_k(β‖A_k‖_F + β²‖A_k‖_F³) is that bound with a factor 2 margin
    on each side; a wrong power of β or a missing term is off by O(β²‖A‖³), far above it."""
    K, d, p, n = shape
    rng = np.random.default_rng(seed)
    U = random_bases(rng, K, d, p)
    Z = rng.standard_normal((2, d, n) if batch else (d, n))
    beta = p / (n * eps**2)
    ours, old = ct.neumann_compression_grad(Z, U, eps), _old_dense_neumann(Z, U, eps)
    assert ours.shape == Z.shape
    A = np.einsum("kdp,...dn->...kpn", U, Z)
    normA = np.linalg.norm(A, axis=(-2, -1))
    tol = 4 * (p + n + d) * U64 * np.sum(beta * normA + beta**2 * normA**3)
    assert np.linalg.norm(ours - old) <= tol


def test_neumann_runs_at_n_200000_in_megabytes():
    """d = 4, n = 200,000: the old n × n form asked for 298 GiB per head; the p × p form needs O(pn) memory
    (Z is 6.4 MB; the peak stays below 64 MiB, ~10 Z-sized temporaries) and well under a second.

    Its value is checked against the exact gradient (31): per singular direction of A_k the Neumann factor
    βσ(1 − x) differs from the exact βσ/(1 + x), x = βσ² ≤ ρ := max_k β‖A_k‖², by βσ x²/(1 + x), i.e. by at most
    ρ² relatively; with mutually orthogonal U_k the lift is an isometry, so rel_err ≤ ρ² (+ rounding ~1e-13)."""
    U = synthetic.orthonormal_bases(2, 4, 2, seed=0)  # K = 2, d = 4, p = 2, mutually orthogonal
    Z = np.random.default_rng(0).standard_normal((4, 200_000))
    eps = 10.0  # β = 1e-7: ρ = β‖A_k‖² ≈ 0.02 (‖A_k‖² ≈ n = 2e5)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        neumann = ct.neumann_compression_grad(Z, U, eps)
        step = ct.compression_step(Z, U, eps, 1.0, method="neumann")
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20, peak
    assert seconds < 20, seconds  # ~0.05 s measured; 20 s only guards against an O(n²) path on a loaded machine
    np.testing.assert_array_equal(step, Z - neumann)
    beta = 2 / (200_000 * eps**2)
    rho = beta * max(np.linalg.norm(U[k].T @ Z, 2) ** 2 for k in range(2))
    assert 1e-3 < rho < 0.1
    assert rel_err(neumann, ct.compression_rate_grad(Z, U, eps)) <= rho**2 + 1e-12


# ----------------------------------------------------------------------------------------------------------------
# Hessian spectrum of R (127) at extreme ε and token scales
# ----------------------------------------------------------------------------------------------------------------
def _full_rank_tokens(rng, d, n):
    Z = rng.standard_normal((d, n))
    s = np.linalg.svd(Z, compute_uv=False)
    assume(s.min() > 1e-3 * s.max())  # full rank with a moderate condition number (the limits below need s > 0)
    return Z, s


@given(shape=token_shapes(max_d=6, max_n=6), seed=seeds, eps=st.sampled_from([1e-150, 1e-300]))
def test_hessian_spectrum_as_eps_to_zero(shape, seed, eps):
    """ε → 0 (α → ∞): the eigenvalues α(1−x_i)/(1+x_i)², α(1 ± √(x_ix_j))/((1+x_i)(1+x_j)), α/(1+x_k) (x = αs²)
    tend to −1/s_i², ±1/(s_i s_j), 1/s_k², each with relative deviation ≤ 3/x_min. At a moderate ε_m with
    x_min = 1e18 that deviation (3e-18) is below rounding, so the spectrum at ε = 1e-150 and 1e-300 (where α is
    1e300 / beyond float64 and the old code gave 0s and NaN) must equal the moderate-scale one to rounding:
    10⁴·u relative to ‖∇²R‖ covers the O(u) relative error of each eigenvalue (functions of s computed
    differently, e.g. 1/(1/α + s²)), and a missed limit (0 or α-sized values) is off by O(1)."""
    d, n = shape
    Z, s = _full_rank_tokens(np.random.default_rng(seed), d, n)
    eps_m = np.sqrt(d / n) * s.min() * 1e-9  # α s_min² = 1e18
    moderate = ct.coding_rate_hessian_eigenvalues(Z, eps_m)
    extreme = ct.coding_rate_hessian_eigenvalues(Z, eps)
    assert np.all(np.isfinite(extreme))
    scale = np.abs(moderate).max()
    np.testing.assert_allclose(extreme, moderate, rtol=0, atol=1e4 * U64 * scale)
    np.testing.assert_allclose(ct.coding_rate_hessian_norm(Z, eps), scale, rtol=1e4 * U64)
    np.testing.assert_allclose(scale, 1 / s.min() ** 2, rtol=1e4 * U64)  # the limit's norm is 1/s_min²


@given(shape=token_shapes(max_d=6, max_n=6), seed=seeds, eps0=st.sampled_from([0.5, 1.0, 2.0]),
       c=st.sampled_from([1e-150, 1e150]))
def test_hessian_spectrum_homogeneity_at_1e150(shape, seed, eps0, c):
    """R(cZ; cε) = R(Z; ε) exactly (α s² is invariant), so ∇²R(cZ; cε) = c⁻² ∇²R(Z; ε): at c = 1e∓150 the spectrum
    is 1e±300 times the moderate one. Rounding of c·Z, c·ε and of the products is a few u relative to ‖∇²R‖;
    10⁴·u is the margin (a wrong power of c is off by a factor 1e150)."""
    d, n = shape
    Z, _ = _full_rank_tokens(np.random.default_rng(seed), d, n)
    moderate = ct.coding_rate_hessian_eigenvalues(Z, eps0)
    scaled = ct.coding_rate_hessian_eigenvalues(c * Z, c * eps0) * c**2  # c² = 1e∓300: representable
    np.testing.assert_allclose(scaled, moderate, rtol=0, atol=1e4 * U64 * np.abs(moderate).max())


@given(shape=token_shapes(max_d=6, max_n=6), seed=seeds, eps=st.sampled_from([0.5, 1.0, 2.0]))
def test_hessian_spectrum_at_token_scales_1e300(shape, seed, eps):
    """Z → 0: ∇²R → α·I (every eigenvalue α(1 + O(x)), x = αs² ≈ 1e-600 at scale 1e-300: exactly α in float64),
    the same as the moderate-scale value at Z·1e-9 to 3·x_max ≈ 1e-17 relative. Z → ∞: |λ| ≤ 2/s_min² ≈ 1e-600 at
    scale 1e300, below the smallest subnormal, so the exact value rounds to 0; likewise at ε = 1e300 (α ≈ 1e-600).
    At scale 1e150 it is c⁻² times the ε → 0 limit (homogeneity + the limit of the test above)."""
    d, n = shape
    Z, s = _full_rank_tokens(np.random.default_rng(seed), d, n)
    alpha = d / (n * eps**2)
    tiny = ct.coding_rate_hessian_eigenvalues(1e-300 * Z, eps)
    np.testing.assert_allclose(tiny, ct.coding_rate_hessian_eigenvalues(1e-9 * Z, eps), rtol=1e3 * U64)
    np.testing.assert_allclose(tiny, alpha, rtol=1e3 * U64)  # 1e3·u: rounding of α and of a = 1/(1 + x)
    np.testing.assert_array_equal(ct.coding_rate_hessian_eigenvalues(1e300 * Z, eps), 0.0)
    np.testing.assert_array_equal(ct.coding_rate_hessian_eigenvalues(Z, 1e300), 0.0)
    huge = ct.coding_rate_hessian_eigenvalues(1e150 * Z, eps) * 1e300
    limit = ct.coding_rate_hessian_eigenvalues(Z, np.sqrt(d / n) * s.min() * 1e-9)  # x_min = 1e18, see above
    np.testing.assert_allclose(huge, limit, rtol=0, atol=1e4 * U64 * np.abs(limit).max())


def test_hessian_spectrum_rank_deficient_overflow_is_inf_not_nan():
    """A zero singular value has the eigenvalue α exactly; at ε = 1e-300 α ≈ 1e600 is beyond float64, so +inf
    (the exact value rounded) — never NaN — and the full-rank part stays finite. Z = 0 at ε = 1: α·I."""
    Z = np.zeros((3, 2))
    assert np.all(ct.coding_rate_hessian_eigenvalues(Z, 1e-300) == np.inf)
    np.testing.assert_allclose(ct.coding_rate_hessian_eigenvalues(Z, 1.0), 1.5, rtol=4 * U64)  # 1/(1/α): 2 roundings
    Zr = np.zeros((4, 3))
    Zr[0, 0], Zr[1, 1] = 1.0, 2.0  # singular values exactly 2, 1, 0 (a rounded rank-1 product would give ~1e-17)
    eig = ct.coding_rate_hessian_eigenvalues(Zr, 1e-300)
    assert not np.isnan(eig).any()
    # s = (2, 1, 0), α → ∞: diag −1/s_i² (−1/4, −1) and α (s = 0); pair (2, 1): ±1/(s_i s_j) = ±1/2; pairs with s_j = 0:
    # α/(1 + x_i) ± 0 = 1/s_i², twice each (1/4, 1/4, 1, 1); rect (d − n = 1): 1/s_k² (1/4, 1) and α (s = 0)
    limit = sorted([-0.25, -1.0, -0.5, 0.5, 0.25, 0.25, 1.0, 1.0, 0.25, 1.0])
    np.testing.assert_allclose(eig[np.isfinite(eig)], limit, rtol=4 * U64)
    assert np.sum(eig == np.inf) == 12 - len(limit)


# ----------------------------------------------------------------------------------------------------------------
# MSSA (36) at extreme token scales
# ----------------------------------------------------------------------------------------------------------------
def _lift(U, heads):
    return sum(U[k] @ heads[k] for k in range(U.shape[0]))


@given(shape=bases_shapes(max_d=6, max_n=6), seed=seeds, causal=st.booleans(), c=st.sampled_from([1e-150, 1e150]))
def test_mssa_homogeneity_at_1e150(shape, seed, causal, c):
    """The logits (U_k*cZ)*(U_k*cZ)/(c²τ) do not depend on c, so MSSA(cZ | U, τ = c²) = c·MSSA(Z | U, τ = 1) (β does
    not depend on Z). c·Z and c² carry one rounding each, so the logits agree to a few u relative (|logits| ≲ 50
    here: ~1e-14 absolute, and so relative in the weights); 1e-11 relative to max|MSSA| covers it with margin. A
    wrong power of c in the rescaled logits changes the weights by O(1)."""
    K, d, p, n = shape
    rng = np.random.default_rng(seed)
    U = random_bases(rng, K, d, p)
    Z = rng.standard_normal((d, n))
    moderate = ct.mssa(Z, U, 1.0, causal=causal)
    scaled = ct.mssa(c * Z, U, 1.0, temperature=c**2, causal=causal) / c
    np.testing.assert_allclose(scaled, moderate, rtol=0, atol=1e-11 * max(np.abs(moderate).max(), 1e-300))


@given(shape=bases_shapes(max_d=6, max_n=6), seed=seeds, causal=st.booleans())
def test_mssa_limits_at_1e300(shape, seed, causal):
    """Tokens 1e-300·Z: logits ≈ 1e-600 underflow, the exact weights are uniform (to 1e-599), so MSSA is
    β Σ_k U_kU_k* (cZ) M with M the (prefix-)averaging matrix. Tokens 1e300·Z: logit gaps ≈ 1e600·gap ≫ 746, the exact
    weights are one-hot on each column's argmax_i ⟨a_i, a_j⟩ (hard attention), found from the moderate Z. Both
    compared after dividing by c, to 1e-12 relative (sums of ≤ K·p·n terms, u each); the old code gave NaN at 1e300."""
    K, d, p, n = shape
    rng = np.random.default_rng(seed)
    U = random_bases(rng, K, d, p)
    Z = rng.standard_normal((d, n))
    eps = np.sqrt(p / n)  # β = 1, so |MSSA(1e300 Z)| ≲ K·max‖z‖·1e300 stays in range
    visible = np.triu(np.ones((n, n))) if causal else np.ones((n, n))
    uniform = visible / visible.sum(axis=0)
    A = np.einsum("kdp,dn->kpn", U, Z)
    expected_tiny = _lift(U, A @ uniform)
    hard = []
    for k in range(K):
        G = np.where(visible > 0, A[k].T @ A[k], -np.inf)
        top = np.sort(G, axis=0)
        gaps = top[-1] - top[-2] if n > 1 else np.ones(n)
        assume(np.all((gaps > 1e-6 * np.abs(G[np.isfinite(G)]).max()) | ~np.isfinite(gaps)))  # unique argmax
        hard.append(A[k] @ np.eye(n)[np.argmax(G, axis=0)].T)
    expected_huge = _lift(U, hard)
    for c, expected in ((1e-300, expected_tiny), (1e300, expected_huge)):
        out = ct.mssa(c * Z, U, eps, causal=causal) / c
        assert np.all(np.isfinite(out))
        np.testing.assert_allclose(out, expected, rtol=0, atol=1e-12 * max(np.abs(expected).max(), 1.0))


@pytest.mark.parametrize("c", [1e-300, 1e300])
def test_compression_step_mssa_finite_at_extreme_scales(c):
    """(27) inherits the scale-free logits: finite at 1e±300 (it was NaN at 1e300)."""
    U = synthetic.orthonormal_bases(2, 6, 3, seed=0)
    Z = c * np.random.default_rng(0).standard_normal((6, 5))
    out = ct.compression_step(Z, U, 1.0, 0.1, method="mssa")
    assert np.all(np.isfinite(out)) and np.abs(out).max() > 0
