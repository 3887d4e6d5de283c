"""Seeded samplers of the signal model (10)–(11) (crate_theory.synthetic)."""
import numpy as np
import pytest
from _theory_cases import seeds
from hypothesis import given
from hypothesis import strategies as st

from crate_theory import synthetic


@given(seed=seeds, K=st.integers(1, 4), p=st.integers(1, 3), extra=st.integers(0, 3))
def test_orthogonal_bases_are_orthonormal_and_mutually_orthogonal(seed, K, p, extra):
    """coherence=0: U_k*U_j = δ_kj I_p (Assumption 15), including Kp = d."""
    d = K * p + extra
    U = synthetic.orthonormal_bases(K, d, p, seed=seed)
    assert U.shape == (K, d, p)
    gram = np.einsum("kdp,jdq->kpjq", U, U).reshape(K * p, K * p)
    np.testing.assert_allclose(gram, np.eye(K * p), rtol=0, atol=1e-14)  # QR: orthonormal to rounding
    assert synthetic.coherence(U) < 1e-14


@given(seed=seeds, K=st.integers(2, 4), p=st.integers(1, 3), mu=st.sampled_from([0.01, 0.2, 0.5, 0.9]))
def test_bases_with_controlled_coherence(seed, K, p, mu):
    """0 < μ < 1: every U_k is orthonormal and U_k*U_j = μ I_p for k ≠ j, so the coherence is exactly μ."""
    U = synthetic.orthonormal_bases(K, (K + 1) * p, p, seed=seed, coherence=mu)
    for k in range(K):
        np.testing.assert_allclose(U[k].T @ U[k], np.eye(p), rtol=0, atol=1e-14)
        for j in range(k + 1, K):
            np.testing.assert_allclose(U[k].T @ U[j], mu * np.eye(p), rtol=0, atol=1e-14)
    assert synthetic.coherence(U) == pytest.approx(mu, abs=1e-14)


def test_independent_random_bases_and_size_errors():
    U = synthetic.orthonormal_bases(5, 6, 3, seed=0, coherence=None)  # Kp > d is fine for independent bases
    for k in range(5):
        np.testing.assert_allclose(U[k].T @ U[k], np.eye(3), atol=1e-14)
    assert 0 < synthetic.coherence(U) <= 1 + 1e-12
    with pytest.raises(ValueError, match="K\\*p = 6 exceeds d = 5"):
        synthetic.orthonormal_bases(2, 5, 3)
    with pytest.raises(ValueError, match="\\(K\\+1\\)\\*p"):
        synthetic.orthonormal_bases(2, 6, 3, coherence=0.3)
    with pytest.raises(ValueError, match="coherence must be < 1"):
        synthetic.orthonormal_bases(2, 9, 3, coherence=1.0)
    with pytest.raises(ValueError, match="p must be <= d"):
        synthetic.random_stiefel(3, 4)


def test_seeding_is_reproducible_and_generators_advance():
    a = synthetic.orthonormal_bases(3, 9, 2, seed=7)
    np.testing.assert_array_equal(a, synthetic.orthonormal_bases(3, 9, 2, seed=7))
    assert not np.allclose(a, synthetic.orthonormal_bases(3, 9, 2, seed=8))
    rng = np.random.default_rng(0)
    first, second = synthetic.gaussian_codes(3, 4, rng), synthetic.gaussian_codes(3, 4, rng)
    assert not np.allclose(first, second)
    t1 = synthetic.sample_tokens(a, 10, seed=3, sigma=0.1)
    t2 = synthetic.sample_tokens(a, 10, seed=3, sigma=0.1)
    np.testing.assert_array_equal(t1.Z, t2.Z)
    with pytest.raises(TypeError, match="seed"):
        synthetic.as_generator("zero")
    Q = synthetic.random_orthogonal(5, seed=1)
    np.testing.assert_allclose(Q.T @ Q, np.eye(5), atol=1e-14)


def test_sample_tokens_structure():
    """(10)–(11): Z = signal + noise, each signal token lies in its own subspace, codes are its coordinates;
    given labels are used; unit_norm normalises every token."""
    U = synthetic.orthonormal_bases(3, 12, 4, seed=0)
    t = synthetic.sample_tokens(U, 50, seed=1, sigma=0.3)
    assert t.Z.shape == (12, 50) and t.labels.shape == (50,) and t.codes.shape == (4, 50)
    np.testing.assert_allclose(t.Z, t.signal + t.noise, rtol=0, atol=1e-15)
    for i in range(50):
        np.testing.assert_allclose(t.signal[:, i], U[t.labels[i]] @ t.codes[:, i], atol=1e-14)
    labels = np.arange(50) % 3
    np.testing.assert_array_equal(synthetic.sample_tokens(U, 50, seed=1, labels=labels).labels, labels)
    unit = synthetic.sample_tokens(U, 50, seed=1, sigma=0.3, unit_norm=True).Z
    np.testing.assert_allclose(np.linalg.norm(unit, axis=0), 1.0, atol=1e-15)
    assert np.all(synthetic.sample_tokens(U, 20, seed=2).noise == 0)  # σ = 0: noise-free model (10)
    with pytest.raises(ValueError, match="labels must be < K"):
        synthetic.sample_tokens(U, 3, labels=[0, 1, 3])


def test_sample_tokens_statistics():
    """Noise variance σ² per coordinate for (11) and σ²/d for Theorem 16; code variance; uniform memberships.
    Tolerances: 5 standard errors of the sample statistic (chi-square / binomial), so a correct sampler fails
    with probability < 1e-6 — and the seed is fixed."""
    d, n, sigma = 16, 4000, 0.5
    U = synthetic.orthonormal_bases(4, d, 4, seed=0)
    eq11 = synthetic.sample_tokens(U, n, seed=1, sigma=sigma, code_variance=0.25)
    thm = synthetic.sample_tokens(U, n, seed=2, sigma=sigma, noise="theorem16")
    N = d * n
    for noise, var in [(eq11.noise, sigma**2), (thm.noise, sigma**2 / d)]:
        assert abs(noise.var() / var - 1) < 5 * np.sqrt(2 / N)
    assert abs(eq11.codes.var() / 0.25 - 1) < 5 * np.sqrt(2 / eq11.codes.size)
    counts = np.bincount(eq11.labels, minlength=4)
    assert np.all(np.abs(counts - n / 4) < 5 * np.sqrt(n * 0.25 * 0.75))
    skewed = synthetic.memberships(n, 2, seed=3, probs=[0.9, 0.1])
    assert abs(skewed.mean() - 0.1) < 5 * np.sqrt(0.09 / n)
