"""The compression half-step (crate_theory.mssa): column softmax (94)–(95), causal mask (87), SSA/MSSA (35)–(37),
Neumann gradient (32)–(33), compression step (26)–(27)."""
import numpy as np
import pytest
import torch
from _theory_cases import bases_shapes, random_bases, seeds
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import softmax

import crate_theory as ct
from crate_theory import synthetic
from verify.numerics import rel_err

temperatures = st.sampled_from([1.0, 0.5, 2.0, 8.0])


def _naive_ssa(Z, Uk, temperature, causal):
    """Token by token from (35)/(87): output j = Σ_{i visible to j} w_ij a_i, w_·j ∝ exp(⟨a_i, a_j⟩/τ)."""
    A = Uk.T @ Z
    n = Z.shape[1]
    out = np.zeros_like(A)
    for j in range(n):
        visible = range(j + 1) if causal else range(n)
        logits = np.array([A[:, i] @ A[:, j] / temperature for i in visible])
        weights = np.exp(logits - logits.max())
        weights /= weights.sum()
        out[:, j] = sum(w * A[:, i] for w, i in zip(weights, visible))
    return out


def test_column_softmax_is_columnwise_and_shift_invariant():
    """(94)–(95): each column is a softmax (sums to 1), equal to scipy's softmax along axis 0, and invariant to
    adding a constant to a column; −inf entries get weight 0."""
    rng = np.random.default_rng(0)
    A = 5 * rng.standard_normal((4, 6))
    S = ct.column_softmax(A)
    np.testing.assert_allclose(S.sum(axis=0), 1.0, rtol=0, atol=1e-15)  # normalisation: rounding only
    np.testing.assert_allclose(S, softmax(A, axis=0), rtol=1e-14)
    np.testing.assert_allclose(ct.column_softmax(A + rng.standard_normal(6)), S, rtol=1e-13)
    masked = ct.causal_mask(rng.standard_normal((5, 5)))
    W = ct.column_softmax(masked)
    assert np.all(W[np.tril_indices(5, -1)] == 0.0)  # i > j: keys after the query get no weight
    np.testing.assert_array_equal(W[:, 0], np.eye(5)[0])  # the first query sees only itself
    np.testing.assert_allclose(W.sum(axis=0), 1.0, rtol=0, atol=1e-15)


@given(shape=bases_shapes(max_d=6, max_n=6), seed=seeds, temperature=temperatures, causal=st.booleans())
def test_ssa_matches_token_by_token_definition_and_torch(shape, seed, temperature, causal):
    """SSA(Z|U_k) = (U_k*Z) softmax((U_k*Z)*(U_k*Z)/τ) (35) with the causal mask (87), vs the token-by-token sum
    and vs PyTorch's row convention: softmax(W Wᵀ/τ, dim=-1) W with W = ZᵀU_k (mask: tril)."""
    K, d, p, n = shape
    rng = np.random.default_rng(seed)
    U = random_bases(rng, K, d, p)
    Z = 2 * rng.standard_normal((d, n))
    ours = ct.ssa(Z, U[0], temperature=temperature, causal=causal)
    assert ours.shape == (p, n)
    np.testing.assert_allclose(ours, _naive_ssa(Z, U[0], temperature, causal), rtol=1e-11, atol=1e-13)
    W = torch.tensor(Z.T @ U[0])
    logits = W @ W.T / temperature
    if causal:
        logits = logits.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    # row convention = column convention transposed; agreement limited by exp/sum rounding (≈1e-15 relative)
    np.testing.assert_allclose(ours, (logits.softmax(dim=-1) @ W).numpy().T, rtol=1e-11, atol=1e-13)
    maps = ct.ssa_attention(Z, U[0], temperature=temperature, causal=causal)
    np.testing.assert_allclose(maps.sum(axis=0), 1.0, rtol=0, atol=1e-14)


@given(shape=bases_shapes(max_d=6, max_n=5), seed=seeds, temperature=temperatures, causal=st.booleans())
def test_mssa_is_beta_sum_of_heads_and_tied_free_map(shape, seed, temperature, causal):
    """MSSA(Z|U) = β[U_1..U_K][SSA_1; ..; SSA_K] = βΣ_k U_k SSA_k (36); the free map (37) with W = β[U_1..U_K]
    and b = 0 gives the same; a bias adds b1*; a batch equals the loop."""
    K, d, p, n = shape
    rng = np.random.default_rng(seed)
    U = random_bases(rng, K, d, p)
    Z = rng.standard_normal((d, n))
    eps = 0.7
    beta = p / (n * eps**2)
    heads = [ct.ssa(Z, U[k], temperature=temperature, causal=causal) for k in range(K)]
    expected = beta * np.hstack(list(U)) @ np.vstack(heads)
    ours = ct.mssa(Z, U, eps, temperature=temperature, causal=causal)
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=1e-14)  # same sums, different order
    W = ct.tied_output_map(U, beta)
    np.testing.assert_allclose(ct.mssa_free(Z, U, W, temperature=temperature, causal=causal), ours, rtol=1e-12, atol=1e-14)
    b = rng.standard_normal(d)
    np.testing.assert_allclose(
        ct.mssa_free(Z, U, W, b, temperature=temperature, causal=causal), ours + b[:, None], rtol=1e-12, atol=1e-13
    )
    Zs = rng.standard_normal((2, d, n))
    batched = ct.mssa(Zs, U, eps, temperature=temperature, causal=causal)
    for Zi, out in zip(Zs, batched):
        np.testing.assert_allclose(out, ct.mssa(Zi, U, eps, temperature=temperature, causal=causal), rtol=1e-13, atol=1e-15)


def test_causal_prefix_property():
    """Under the causal mask (87) token j's output depends only on tokens 1..j: changing later tokens leaves the
    earlier outputs unchanged (and it does not without the mask)."""
    rng = np.random.default_rng(1)
    U = random_bases(rng, 2, 5, 2)
    Z = rng.standard_normal((5, 6))
    Z2 = Z.copy()
    Z2[:, 4:] = rng.standard_normal((5, 2))
    np.testing.assert_array_equal(ct.mssa(Z, U, 1.0, causal=True)[:, :4], ct.mssa(Z2, U, 1.0, causal=True)[:, :4])
    assert not np.allclose(ct.mssa(Z, U, 1.0)[:, :4], ct.mssa(Z2, U, 1.0)[:, :4])


def test_neumann_gradient_formula_and_second_order_accuracy():
    """(33): βΣU_kA_k − β²ΣU_kA_kA_k*A_k (A_k = U_k*Z). Its error vs the exact (31) is O((β‖A_k‖²)²): halving
    the token scale (β‖G_k‖ ÷ 4) divides the relative error by ≈ 16."""
    rng = np.random.default_rng(2)
    U = random_bases(rng, 3, 9, 3)
    Z = rng.standard_normal((9, 7))
    eps = 1.0
    beta = 3 / 7
    expected = sum(beta * U[k] @ (U[k].T @ Z) - beta**2 * U[k] @ (U[k].T @ Z) @ (U[k].T @ Z).T @ (U[k].T @ Z) for k in range(3))
    assert rel_err(ct.neumann_compression_grad(Z, U, eps), expected) < 1e-13
    errors = []
    for c in (0.05, 0.025, 0.0125):
        exact = ct.compression_rate_grad(c * Z, U, eps)
        errors.append(rel_err(ct.neumann_compression_grad(c * Z, U, eps), exact))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    assert np.all((ratios > 14) & (ratios < 17)), ratios  # → 16 as the scale → 0 (fourth power of the scale)


def test_neumann_fails_beyond_its_radius_while_mssa_stays_a_descent_direction():
    """Not stated in the paper: the Neumann series needs β‖U_k*Z‖² < 1. On unit-norm
    union-of-subspace tokens (d=16, K=4, p=4, n=20) at β‖G‖ ≈ 2.7 the Neumann gradient points against the exact
    one (cos < 0), while the MSSA direction βZ − βMSSA(Z) of Approximation 9 keeps cos > 0.9 and a small
    compression step (27) lowers R^c."""
    U = synthetic.orthonormal_bases(4, 16, 4, seed=0)
    Z = synthetic.sample_tokens(U, 20, seed=1, sigma=0.05, unit_norm=True).Z
    eps = 0.5
    beta = 4 / (20 * eps**2)
    radius = beta * max(np.linalg.norm(U[k].T @ Z, 2) ** 2 for k in range(4))
    assert radius > 1
    exact = ct.compression_rate_grad(Z, U, eps)

    def cos(a, b):
        return float(np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b)))

    assert cos(ct.neumann_compression_grad(Z, U, eps), exact) < 0
    assert cos(beta * Z - beta * ct.mssa(Z, U, eps), exact) > 0.9
    stepped = ct.compression_step(Z, U, eps, 1e-2, method="mssa")
    assert ct.compression_rate(stepped, U, eps) < ct.compression_rate(Z, U, eps)


def test_compression_step_methods():
    """(26): Z − κ∇R^c; "neumann": Z − κ∇̂R^c (33); "mssa": (1 − κβ)Z + κβ MSSA(Z) (27); and the exact step
    decreases R^c for a small κ (gradient descent)."""
    rng = np.random.default_rng(3)
    U = random_bases(rng, 2, 6, 3)
    Z = rng.standard_normal((6, 5))
    eps, kappa = 0.8, 0.05
    beta = 3 / (5 * eps**2)
    np.testing.assert_allclose(
        ct.compression_step(Z, U, eps, kappa), Z - kappa * ct.compression_rate_grad(Z, U, eps), rtol=1e-15
    )
    np.testing.assert_allclose(
        ct.compression_step(Z, U, eps, kappa, method="neumann"),
        Z - kappa * ct.neumann_compression_grad(Z, U, eps),
        rtol=1e-15,
    )
    np.testing.assert_allclose(
        ct.compression_step(Z, U, eps, kappa, method="mssa", temperature=2.0),
        (1 - kappa * beta) * Z + kappa * beta * ct.mssa(Z, U, eps, temperature=2.0),
        rtol=1e-15,
    )
    assert ct.compression_rate(ct.compression_step(Z, U, eps, kappa), U, eps) < ct.compression_rate(Z, U, eps)


@pytest.mark.parametrize("method", ["exact", "neumann", "mssa"])
def test_compression_step_batch_equals_loop(method):
    rng = np.random.default_rng(4)
    U = random_bases(rng, 2, 5, 2)
    Zs = rng.standard_normal((3, 5, 4))
    batched = ct.compression_step(Zs, U, 1.0, 0.1, method=method)
    for Z, out in zip(Zs, batched):
        np.testing.assert_allclose(out, ct.compression_step(Z, U, 1.0, 0.1, method=method), rtol=1e-13, atol=1e-15)


# ----------------------------------------------------------------------------------------------------------------
# orthonormality of the bases: the check sample_tokens uses, shared via _checks.check_bases
# ----------------------------------------------------------------------------------------------------------------
def _bad_bases():
    """Orthonormal bases with U_1 scaled by 1.001: U_1*U_1 − I = (1.001² − 1) I, deviation 2.001e-3 at k = 1."""
    U = synthetic.orthonormal_bases(2, 6, 3, seed=0)
    U[1] *= 1.001
    return U


ORTHO_CALLS = {
    "mssa": lambda Z, U, **kw: ct.mssa(Z, U, 1.0, **kw),
    "compression_step-exact": lambda Z, U, **kw: ct.compression_step(Z, U, 1.0, 0.1, **kw),
    "compression_step-neumann": lambda Z, U, **kw: ct.compression_step(Z, U, 1.0, 0.1, method="neumann", **kw),
    "compression_step-mssa": lambda Z, U, **kw: ct.compression_step(Z, U, 1.0, 0.1, method="mssa", **kw),
    "tied_output_map": lambda Z, U, **kw: ct.tied_output_map(U, 0.5, **kw),
}


@pytest.mark.parametrize("name", sorted(ORTHO_CALLS))
def test_non_orthonormal_bases_are_refused_like_sample_tokens(name):
    """mssa, compression_step and tied_output_map refuse non-orthonormal U with the same ValueError as
    sample_tokens (one shared helper): it names U, the deviation max|U_k*U_k − I| and the worst k; the explicit
    allow_nonorthonormal=True computes the formula anyway."""
    call = ORTHO_CALLS[name]
    Z = np.random.default_rng(0).standard_normal((6, 5))
    U = _bad_bases()
    with pytest.raises(ValueError) as theirs:
        synthetic.sample_tokens(U, 5, seed=0)
    with pytest.raises(ValueError) as ours:
        call(Z, U)
    assert str(ours.value) == str(theirs.value)
    assert "U must have orthonormal columns" in str(ours.value) and "= 0.002 (at k = 1)" in str(ours.value)
    allowed = call(Z, U, allow_nonorthonormal=True)
    assert np.all(np.isfinite(allowed))
    if name == "tied_output_map":
        np.testing.assert_array_equal(allowed, 0.5 * np.hstack(list(U)))
    elif name == "mssa":
        beta = 3 / 5
        np.testing.assert_allclose(allowed, beta * sum(U[k] @ ct.ssa(Z, U[k]) for k in range(2)), rtol=1e-13)


@given(seed=seeds, size=st.floats(min_value=-12, max_value=-1))
def test_orthonormality_tolerance_is_sample_tokens_one(seed, size):
    """A perturbation of size 10^size passes iff the measured deviation is within 1e-6 (ORTHONORMAL_ATOL, the
    tolerance sample_tokens has always used), for mssa exactly as for sample_tokens."""
    rng = np.random.default_rng(seed)
    U = random_bases(rng, 2, 5, 2) + 10.0**size * rng.standard_normal((2, 5, 2))
    deviation = max(np.abs(U[k].T @ U[k] - np.eye(2)).max() for k in range(2))
    Z = rng.standard_normal((5, 3))
    if deviation <= 1e-6:
        ct.mssa(Z, U, 1.0)
        synthetic.sample_tokens(U, 3, seed=0)
    else:
        with pytest.raises(ValueError, match=f"{deviation:.3g}"):
            ct.mssa(Z, U, 1.0)
        with pytest.raises(ValueError, match=f"{deviation:.3g}"):
            synthetic.sample_tokens(U, 3, seed=0)


def test_layer_and_decoder_still_take_learned_non_orthonormal_bases():
    """The implemented layer (45) and decoder (64) with the tied map use learned bases, which are not orthonormal:
    they keep working and equal mssa(..., allow_nonorthonormal=True)."""
    from crate_theory.decoder import DecoderLayerParams, decoder_layer

    rng = np.random.default_rng(7)
    U = rng.standard_normal((2, 6, 3))  # deviation O(1)
    Z = rng.standard_normal((6, 5))
    params = ct.CrateLayerParams(U=U, D=np.eye(6))
    half, _ = ct.crate_layer(Z, params, eps=0.8, temperature=1.0)
    expected = Z + ct.mssa(ct.layer_norm(Z), U, 0.8, allow_nonorthonormal=True)
    np.testing.assert_allclose(half, expected, rtol=1e-14, atol=1e-15)
    _, out = decoder_layer(Z, DecoderLayerParams(E=np.eye(6), V=U), eps=0.8, temperature=1.0, norm=False)
    np.testing.assert_allclose(out, Z - ct.mssa(Z, U, 0.8, allow_nonorthonormal=True), rtol=1e-14, atol=1e-15)


# ----------------------------------------------------------------------------------------------------------------
# MSSA in column blocks
# ----------------------------------------------------------------------------------------------------------------
@given(shape=bases_shapes(max_d=6, max_n=9), seed=seeds, causal=st.booleans(), block=st.integers(1, 11),
       c=st.sampled_from([1e-300, 1e-150, 1.0, 1e150, 1e300]), batch=st.booleans())
def test_mssa_blocks_equal_one_block(shape, seed, causal, block, c, batch):
    """Any block size (1 … > n) gives the one-block result: each column's softmax is the same elementwise arithmetic
    on the same logits; only the products (the block's logits Â*Â_J, and A·weights) may be summed in another order
    by BLAS for another block width, a few u relative per entry (sums of ≤ max(p, n) ≤ 9 terms) — 1e-13 relative
    to the largest entry leaves a margin of ~50. Also at 1e±150 and 1e±300 (the exact limits) and for a batch;
    ssa and mssa_free take the same blocks."""
    K, d, p, n = shape
    rng = np.random.default_rng(seed)
    U = random_bases(rng, K, d, p)
    Z = c * rng.standard_normal((2, d, n) if batch else (d, n))
    whole = ct.mssa(Z, U, 1.0, causal=causal, block=n)
    blocked = ct.mssa(Z, U, 1.0, causal=causal, block=block)
    assert np.all(np.isfinite(blocked))
    scale = max(np.abs(whole).max(), np.finfo(float).tiny)
    np.testing.assert_allclose(blocked, whole, rtol=0, atol=1e-13 * scale)
    W = rng.standard_normal((d, K * p))
    free_whole = ct.mssa_free(Z, U, W, causal=causal, block=n)
    np.testing.assert_allclose(ct.mssa_free(Z, U, W, causal=causal, block=block), free_whole, rtol=0,
                               atol=1e-13 * max(np.abs(free_whole).max(), np.finfo(float).tiny))
    one = ct.ssa(Z, U[0], causal=causal, block=n)
    np.testing.assert_allclose(ct.ssa(Z, U[0], causal=causal, block=block), one, rtol=0,
                               atol=1e-13 * max(np.abs(one).max(), np.finfo(float).tiny))


def test_mssa_block_argument_is_checked():
    U = synthetic.orthonormal_bases(2, 4, 2, seed=0)
    Z = np.ones((4, 3))
    for bad, err in ((0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(err, match="block"):
            ct.mssa(Z, U, 1.0, block=bad)


@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_mssa_peak_memory_is_K_n_block(causal):
    """n = 8000, K = 2, block = 256: the one attention temporary is K·n·block float64 = 32 MiB (the previous
    whole-matrix form held five K·n·n arrays, 4.8 GiB). Measured with tracemalloc (NumPy reports its buffers to it):
    the peak stays below 2 × K·n·block·8 bytes (the temporary plus its bool causal mask, n·block bytes, and the
    per-column maxima and sums) + 8 Z-sized arrays (Z, the codes A and Â, the heads, the lifted output: here
    K·p = d, so each is Z.nbytes). Equality with other block sizes is the test above."""
    import tracemalloc

    K, d, p, n, block = 2, 16, 8, 8000, 256
    U = synthetic.orthonormal_bases(K, d, p, seed=0)
    Z = np.random.default_rng(0).standard_normal((d, n)) / 4
    tracemalloc.start()
    try:
        out = ct.mssa(Z, U, 1.0, causal=causal, block=block)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    bound = 2 * K * n * block * 8 + 8 * Z.nbytes
    assert peak < bound, (peak / 2**20, bound / 2**20)
    assert np.all(np.isfinite(out))
