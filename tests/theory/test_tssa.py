"""ToST's compression step (crate_theory.tssa): the membership Π, the token statistics, the variational compression
term against the coding rate it replaces, its gradient (closed form vs finite differences vs torch autograd), TSSA as
that gradient step (bidirectional and per prefix), and the public code's two variants."""
import numpy as np
import pytest
import torch
from _theory_cases import bases_shapes, random_bases, seeds
from hypothesis import given
from hypothesis import strategies as st

import crate_theory as ct
from crate_theory import tssa as T
from crate_theory.synthetic import orthonormal_bases, sample_tokens
from verify.numerics import finite_difference_gradient, rel_err

eps_values = st.sampled_from([0.5, 1.0, 3.0])
temperatures = st.sampled_from([0.3, 1.0, 4.0])
# Finite differences: 4th-order central stencil, h = 1e-3 on tokens of size O(1): truncation O(h⁴ f⁽⁵⁾) ~ 1e-12 and
# rounding O(ε_mach |R| / h) ~ 1e-13 against gradients of size ≥ 1e-3; 1e-7 relative to the largest entry leaves
# room for the d/ε² = 32 curvature of f at the small-ε draws (measured worst 2e-9).
FD_RTOL = 1e-7
# Two float64 evaluations of the same sums in another order (NumPy vs torch, closed form vs a loop): ~1e-15 each.
SAME_SUMS = 1e-12


def _problem(seed, K, d, p, n, temperature=1.0):
    rng = np.random.default_rng(seed)
    U = random_bases(rng, K, d, p)
    Z = rng.standard_normal((d, n))
    return Z, U, T.membership(Z, U, temperature)


def _torch_variational(Z, U, Pi, eps):
    """R^c_var written again in torch (column convention): ½ Σ_k (n_k/n) Σ_i log(1 + (d/ε²) s_ki)."""
    d, n = Z.shape
    A = torch.einsum("kdp,dn->kpn", U, Z)
    nk = Pi.sum(0)
    s = torch.einsum("kpn,nk->kp", A**2, Pi) / nk[:, None]
    return 0.5 * (nk / n * torch.log1p(d / eps**2 * s).sum(1)).sum()


# ----------------------------------------------------------------------------------------------- the membership Π
@given(shape=bases_shapes(max_d=6, max_n=7), seed=seeds, temperature=temperatures, normalize=st.booleans(),
       causal=st.booleans())
def test_membership_rows_are_distributions_over_the_groups(shape, seed, temperature, normalize, causal):
    """Π (n, K): entries in [0, 1], every row sums to 1 (a token's membership over the K groups), so the columns'
    sums n_k add up to n; the same rule applied token by token."""
    K, d, p, n = shape
    rng = np.random.default_rng(seed)
    U, Z = random_bases(rng, K, d, p), 3 * rng.standard_normal((d, n))
    Pi = T.membership(Z, U, temperature, normalize=normalize, causal=causal)
    assert Pi.shape == (n, K) and (Pi >= 0).all() and (Pi <= 1).all()
    np.testing.assert_allclose(Pi.sum(axis=1), 1.0, rtol=0, atol=1e-15 * K)  # softmax rounding
    np.testing.assert_allclose(Pi.sum(axis=0).sum(), n, rtol=1e-14)
    for j in range(n):
        A = np.stack([U[k].T @ Z for k in range(K)])  # (K, p, n)
        seen = A[:, :, : j + 1] if causal else A
        energy = (A[:, :, j] ** 2 / (seen**2).sum(-1) if normalize else A[:, :, j] ** 2).sum(-1)
        logits = temperature * energy
        expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        np.testing.assert_allclose(Pi[j], expected, rtol=1e-12, atol=1e-15)


def test_membership_locality_scale_invariance_and_hard_limit():
    """The energy rule depends on token j alone; the normalised rule on the tokens j sees (all, or j' ≤ j when
    causal) and not on the tokens' scale; as the temperature grows, a token lying in one subspace belongs to it."""
    rng = np.random.default_rng(0)
    U = orthonormal_bases(3, 12, 4, seed=rng)
    Z = sample_tokens(U, 9, rng, sigma=0.05).Z
    moved = Z.copy()
    moved[:, 6] += rng.standard_normal(12)
    for normalize, causal, unchanged in [(False, False, [j for j in range(9) if j != 6]), (True, True, range(6)),
                                         (True, False, [])]:
        a = T.membership(Z, U, 2.0, normalize=normalize, causal=causal)
        b = T.membership(moved, U, 2.0, normalize=normalize, causal=causal)
        np.testing.assert_array_equal(a[list(unchanged)], b[list(unchanged)])
        assert np.abs(a[6] - b[6]).max() > 1e-3  # the moved token's own membership does change
    np.testing.assert_allclose(T.membership(7.0 * Z, U, 1.0, normalize=True), T.membership(Z, U, 1.0, normalize=True),
                               rtol=1e-13)
    clean = sample_tokens(U, 9, rng)  # noise-free: token j lies in U_{label j}, orthogonal to the other subspaces
    hard = T.membership(clean.Z, U, 1e3)
    np.testing.assert_array_equal(hard.argmax(1), clean.labels)
    assert hard.max(1).min() > 1 - 1e-12


# Extreme token scales: the reference values are written in the log domain from the statistics of the unscaled
# tokens; exp of a log-domain sum whose terms reach |2 log c| ≈ 1,400 carries ~1,400·u ≈ 3e-13 relative, and
# scaling the tokens by a c that is not a power of two rounds each entry once (u relative).
EXTREME_RTOL = 1e-11
EXTREME_SCALES = [1e155, 1e160, 1e300, 1e-155, 1e-300]


def _log1p_scaled(log_a):
    """log(1 + e^{log_a}) without overflow: the reference's log-domain form."""
    return np.logaddexp(0.0, log_a)


@pytest.mark.parametrize("scale", EXTREME_SCALES)
def test_tssa_functions_are_finite_and_exact_at_extreme_token_scales(scale):
    """Π, R^c_var, R^c_U, ∇R^c_var and the TSSA heads at tokens scaled by 1e±155 … 1e±300, against their exact values
    from the unscaled tokens (Π of the normalised rule does not depend on the scale; the energy rule's logits scale
    by c², so Π goes to the hard argmax at large scales and to uniform at small ones). The energies overflowed at
    ~1e154 before: Π was NaN, R^c_var inf, the heads 0."""
    rng = np.random.default_rng(3)
    K, d, p, n, eps = 3, 8, 2, 7, 0.7
    U = random_bases(rng, K, d, p)
    Z = rng.standard_normal((d, n))
    big = scale * Z
    log_c, log_ceps = np.log(scale), np.log(d / eps**2)
    for causal in (False, True):
        np.testing.assert_allclose(T.membership(big, U, 1.5, normalize=True, causal=causal),
                                   T.membership(Z, U, 1.5, normalize=True, causal=causal), rtol=EXTREME_RTOL)
    energies = (np.einsum("kdp,dn->kpn", U, Z) ** 2).sum(1)  # (K, n)
    limit = np.eye(K)[energies.argmax(0)] if scale > 1 else np.full((n, K), 1 / K)
    np.testing.assert_allclose(T.membership(big, U, 1.5), limit, rtol=0, atol=1e-300)
    Pi = T.membership(Z, U, 1.0, normalize=True)
    A = np.einsum("kdp,dn->kpn", U, Z)
    nk = Pi.sum(0)
    s = np.einsum("kpn,nk->kp", A**2, Pi) / nk[:, None]
    variational = 0.5 * (nk / n * _log1p_scaled(log_ceps + 2 * log_c + np.log(s)).sum(1)).sum()
    assert rel_err(T.variational_compression(big, U, Pi, eps), variational) < EXTREME_RTOL
    M = np.einsum("kpn,kqn,nk->kpq", A, A, Pi) / nk[:, None, None]
    projected = 0.5 * (nk / n * _log1p_scaled(log_ceps + 2 * log_c + np.log(np.linalg.eigvalsh(M))).sum(1)).sum()
    assert rel_err(T.projected_compression(big, U, Pi, eps), projected) < EXTREME_RTOL
    # the coefficient of each code in the gradient: c_ε·c/(1 + c_ε c² s), in the log domain
    factor = np.exp(log_ceps + log_c - _log1p_scaled(log_ceps + 2 * log_c + np.log(s)))
    grad = np.einsum("kdp,kpn->dn", U, factor[:, :, None] * A * Pi.T[:, None, :]) / n
    assert rel_err(T.variational_compression_grad(big, U, Pi, eps), grad) < EXTREME_RTOL
    for causal in (False, True):
        stats = T.token_statistics(Z, U, Pi, causal)  # (K, p, n)
        factor = np.exp(log_ceps + log_c - _log1p_scaled(log_ceps + 2 * log_c + np.log(stats)))
        heads = -Pi.T[:, None, :] * factor * A
        assert rel_err(T.tssa_heads(big, U, Pi, d / eps**2, causal), heads) < EXTREME_RTOL
        counts = np.arange(1, n + 1) if causal else n
        assert rel_err(T.tssa(big, U, Pi, eps, causal=causal), np.einsum("kdp,kpn->dn", U, heads) / counts) < EXTREME_RTOL


# ----------------------------------------------------------------------------------------------- the objective
@given(shape=bases_shapes(max_d=6, max_n=7), seed=seeds, causal=st.booleans())
def test_token_statistics_are_weighted_mean_squares(shape, seed, causal):
    K, d, p, n = shape
    Z, U, Pi = _problem(seed, K, d, p, n)
    s = T.token_statistics(Z, U, Pi, causal)
    for t in range(n):
        seen = range(t + 1) if causal else range(n)
        for k in range(K):
            codes = U[k].T @ Z[:, list(seen)]
            w = Pi[list(seen), k]
            np.testing.assert_allclose(s[k, :, t], (codes**2 @ w) / w.sum(), rtol=SAME_SUMS, atol=1e-300)


@given(shape=bases_shapes(max_d=6, max_n=8), seed=seeds, eps=eps_values, temperature=temperatures)
def test_variational_form_upper_bounds_the_coding_rate(shape, seed, eps, temperature):
    """R^c_var ≥ R^c_U (Hadamard), with equality when each U_k spans eigenvectors of its group's second moment
    M_k = Z diag(π_k) Z*/n_k (then U_k*M_kU_k is diagonal)."""
    K, d, p, n = shape
    Z, U, Pi = _problem(seed, K, d, p, n, temperature)
    bound, rate = T.variational_compression(Z, U, Pi, eps), T.projected_compression(Z, U, Pi, eps)
    assert bound >= rate - 1e-12 * max(1.0, abs(rate))  # rounding of two float64 sums of logs
    nk = Pi.sum(0)
    eig = np.stack([np.linalg.eigh(Z @ np.diag(Pi[:, k]) @ Z.T / nk[k])[1][:, -p:] for k in range(K)])
    tight, exact = T.variational_compression(Z, eig, Pi, eps), T.projected_compression(Z, eig, Pi, eps)
    # eigh's eigenvectors diagonalise M_k to ~1e-15 relative; the logs then agree to that
    assert abs(tight - exact) <= 1e-11 * max(1.0, abs(exact))


def test_projected_rate_is_mcr2s_compression_term():
    """With U_k = I_d (or any orthogonal d × d basis) and hard memberships, R^c_U is MCR²'s weighted compression
    term Σ_k (n_k/n) R(Z_k) (crate_theory.label_compression_rate, weighting 'mcr2')."""
    rng = np.random.default_rng(3)
    d, n, K, eps = 5, 12, 3, 0.7
    Z, labels = rng.standard_normal((d, n)), rng.integers(0, K, n)
    Pi = np.eye(K)[labels]
    mcr2 = ct.label_compression_rate(Z, labels, eps, weighting="mcr2")
    identity = np.stack([np.eye(d)] * K)
    rotations = np.stack([np.linalg.qr(rng.standard_normal((d, d)))[0] for _ in range(K)])
    assert rel_err(T.projected_compression(Z, identity, Pi, eps), mcr2) < SAME_SUMS
    assert rel_err(T.projected_compression(Z, rotations, Pi, eps), mcr2) < 1e-11  # logdet of a rotated matrix


# ----------------------------------------------------------------------------------------------- the gradient step
@given(shape=bases_shapes(max_d=5, max_n=5), seed=seeds, eps=eps_values)
def test_gradient_matches_finite_differences_and_autograd(shape, seed, eps):
    K, d, p, n = shape
    Z, U, Pi = _problem(seed, K, d, p, n)
    G = T.variational_compression_grad(Z, U, Pi, eps)
    fd = finite_difference_gradient(lambda X: T.variational_compression(X, U, Pi, eps), Z, 1e-3, "five_point")
    assert np.abs(G - fd).max() <= FD_RTOL * max(np.abs(G).max(), 1e-3)
    Zt = torch.tensor(Z, requires_grad=True)
    value = _torch_variational(Zt, torch.tensor(U), torch.tensor(Pi), eps)
    (auto,) = torch.autograd.grad(value, Zt)
    assert rel_err(value.item(), T.variational_compression(Z, U, Pi, eps)) < SAME_SUMS
    assert np.abs(G - auto.numpy()).max() <= SAME_SUMS * np.abs(G).max() + 1e-300


@given(shape=bases_shapes(max_d=5, max_n=6), seed=seeds, eps=eps_values, step=st.sampled_from([0.1, 1.0, 5.0]))
def test_tssa_is_the_gradient_step_and_its_causal_form_the_prefix_gradient(shape, seed, eps, step):
    """TSSA = −τ∇_Z R^c_var (Π fixed); causal column t = −τ ∂R^c_var(Z_{≤t}, Π_{≤t})/∂z_t, equal to the
    bidirectional one at t = n; the free-output form with W = (τ/n)[U_1 … U_K] is the same operator."""
    K, d, p, n = shape
    Z, U, Pi = _problem(seed, K, d, p, n)
    out = T.tssa(Z, U, Pi, eps, step)
    G = T.variational_compression_grad(Z, U, Pi, eps)
    np.testing.assert_allclose(out, -step * G, rtol=SAME_SUMS, atol=SAME_SUMS * np.abs(G).max() * step)
    causal = T.tssa(Z, U, Pi, eps, step, causal=True)
    for t in range(n):
        prefix = Pi[: t + 1] / 1.0  # rows already sum to 1
        last = T.variational_compression_grad(Z[:, : t + 1], U, prefix, eps)[:, -1]
        np.testing.assert_allclose(causal[:, t], -step * last, rtol=SAME_SUMS, atol=SAME_SUMS * step)
    np.testing.assert_allclose(causal[:, -1], out[:, -1], rtol=SAME_SUMS, atol=SAME_SUMS * step)
    W = step / n * U.transpose(1, 0, 2).reshape(d, K * p)
    np.testing.assert_allclose(T.tssa_free(Z, U, W, Pi, d / eps**2), out, rtol=SAME_SUMS, atol=1e-15 * step)


def test_causal_prefix_gradient_by_finite_differences():
    """The causal column t against a finite-difference derivative of the prefix objective in its last token."""
    Z, U, Pi = _problem(5, 2, 6, 3, 7)
    causal = T.tssa(Z, U, Pi, 1.0, causal=True)
    for t in (0, 3, 6):
        def prefix_rate(zt, t=t):
            X = Z[:, : t + 1].copy()
            X[:, -1] = zt[:, 0]
            return T.variational_compression(X, U, Pi[: t + 1], 1.0)
        fd = finite_difference_gradient(prefix_rate, Z[:, t : t + 1], 1e-3, "five_point")[:, 0]
        assert np.abs(causal[:, t] + fd).max() <= FD_RTOL * np.abs(fd).max()


@given(seed=seeds, normalize=st.booleans())
def test_causal_tssa_leaks_nothing_from_later_tokens(seed, normalize):
    """With Π from the tokens (the energy rule, or the causally normalised one), changing token t+1 leaves the
    outputs at positions ≤ t bit-for-bit unchanged."""
    rng = np.random.default_rng(seed)
    U, Z = random_bases(rng, 3, 9, 3), rng.standard_normal((9, 8))
    moved = Z.copy()
    moved[:, 5:] += rng.standard_normal((9, 3))

    def op(X):
        return T.tssa(X, U, T.membership(X, U, 1.5, normalize=normalize, causal=True), 1.0, causal=True)

    np.testing.assert_array_equal(op(Z)[:, :5], op(moved)[:, :5])
    assert np.abs(op(Z)[:, 5] - op(moved)[:, 5]).max() > 1e-6


@given(seed=seeds, eps=eps_values)
def test_small_steps_descend_the_variational_rate(seed, eps):
    """A TSSA step is a descent step: R^c_var(Z + TSSA(Z), Π) < R^c_var(Z, Π) at a small step (first order:
    −τ‖∇R^c_var‖² < 0)."""
    Z, U, Pi = _problem(seed, 3, 8, 2, 10)
    before = T.variational_compression(Z, U, Pi, eps)
    after = T.variational_compression(Z + T.tssa(Z, U, Pi, eps, step=1e-3), U, Pi, eps)
    assert after < before


# ----------------------------------------------------------------------------------------------- the public code
@given(shape=bases_shapes(max_d=6, max_n=7), seed=seeds, temperature=temperatures)
def test_public_variants_are_the_derived_heads_for_their_own_membership(shape, seed, temperature):
    """The vision code = `tssa_heads` (c = 1) with Π = membership(normalize=True); the language code with its
    position bias at 0 = the causal heads with the causally normalised Π. The codes' guards (+1e-8 on n_k,
    max(·, 1e-12) on norms) move the result by ≤ 1e-8/n_k relative; n_k ≥ 1e-3 here, hence 1e-4."""
    K, d, p, n = shape
    Z, U, _ = _problem(seed, K, d, p, n)
    vision = T.public_vision_heads(Z, U, temperature)
    derived = T.tssa_heads(Z, U, T.membership(Z, U, temperature, normalize=True), 1.0)
    assert np.abs(vision - derived).max() <= 1e-4 * np.abs(derived).max() + 1e-300
    language = T.public_language_heads(Z, U, temperature, np.zeros((K, n)))
    causal = T.tssa_heads(Z, U, T.membership(Z, U, temperature, normalize=True, causal=True), 1.0, causal=True)
    assert np.abs(language - causal).max() <= 1e-4 * np.abs(causal).max() + 1e-300


def test_language_position_bias_enters_the_membership_only():
    """A constant bias per group shifts every token's logits of that group alike; a bias constant over the groups
    changes nothing (softmax over groups)."""
    Z, U, _ = _problem(2, 3, 6, 2, 5)
    zero = T.public_language_heads(Z, U, 1.0, np.zeros((3, 5)))
    np.testing.assert_allclose(T.public_language_heads(Z, U, 1.0, np.full((3, 5), 0.7)), zero, rtol=1e-13)
    assert np.abs(T.public_language_heads(Z, U, 1.0, np.diag([1.0, 0, 0]) @ np.ones((3, 5))) - zero).max() > 1e-3


@pytest.mark.parametrize("bad, message", [
    (dict(Pi=np.ones((4, 2))), "rows must sum to 1"),
    (dict(Pi=np.full((5, 2), 0.5)), "Pi has 5 rows"),
    (dict(Pi=np.full((4, 3), 1 / 3)), "Pi has 3 columns"),
    (dict(Pi=np.array([[1.5, -0.5]] * 4)), "non-negative"),
    (dict(eps=0.0), "eps must be > 0"),
])
def test_bad_arguments_are_named(bad, message):
    rng = np.random.default_rng(0)
    args = dict(Z=rng.standard_normal((4, 4)), U=random_bases(rng, 2, 4, 2), Pi=np.full((4, 2), 0.5), eps=1.0)
    with pytest.raises(ValueError, match=message):
        T.variational_compression(**{**args, **bad})
