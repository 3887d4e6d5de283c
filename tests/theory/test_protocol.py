"""The scale-free protocol (crate_theory.protocol) and the layer controls it is used with (crate_theory.layer)."""
import numpy as np
import pytest
from _theory_cases import random_bases, seeds
from hypothesis import given
from hypothesis import strategies as st

import crate_theory as ct
from crate_theory import protocol
from crate_theory.synthetic import orthonormal_bases, sample_tokens

D, N, K = 32, 64, 4


def _isotropic_spread(U, eps, rng, sets=100):
    """Relative standard deviation of R^c (raw, normalised) over independent isotropic token sets of unit norms."""
    rates = np.array([[ct.compression_rate(X, U, eps), protocol.official_compression_rate(X, U)]
                      for X in protocol.isotropic_tokens(np.ones((D, N)), rng, draws=sets)])
    return rates.std(axis=0) / rates.mean(axis=0)


def test_yardstick_is_one_on_isotropic_tokens_and_below_one_on_a_union_of_subspaces():
    rng = np.random.default_rng(0)
    U = orthonormal_bases(K, D, D // K, seed=rng)
    spread = _isotropic_spread(U, 1.0, rng)
    # A set of isotropic tokens against the mean of 16 others: the ratio deviates from 1 by the set-to-set spread
    # (times √(1 + 1/16)); 4 spreads is a bound that a correct yardstick fails with probability < 1e-4.
    tol = 4 * spread * np.sqrt(1 + 1 / 16)
    iso = protocol.isotropic_tokens(np.ones((D, N)), rng)
    profile = protocol.token_profile(iso, U, 1.0, draws=16, seed=rng)
    assert abs(profile.relative - 1) <= tol[0] and abs(profile.relative_normalised - 1) <= tol[1]
    union = sample_tokens(U, N, rng, sigma=0.0)
    on_union = protocol.token_profile(union.Z, U, 1.0, labels=union.labels, draws=16, seed=rng)
    assert on_union.relative < 1 - tol[0] and on_union.relative_normalised < 1 - tol[1]
    assert on_union.alignment == pytest.approx(1.0, abs=1e-12)  # exactly on the subspaces, float64 rounding
    # the floor of tokens already on their subspaces is the tokens themselves
    assert on_union.aligned_relative == pytest.approx(on_union.relative, rel=1e-12)


@given(seed=seeds, K=st.integers(1, 4), p=st.integers(1, 4), n=st.integers(1, 8), sigma=st.floats(0.0, 1.0))
def test_alignment_and_its_floor(seed, K, p, n, sigma):
    rng = np.random.default_rng(seed)
    d = K * p + 1
    U = orthonormal_bases(K, d, p, seed=rng)
    tokens = sample_tokens(U, n, rng, sigma=sigma)
    a = protocol.alignment(tokens.Z, U, tokens.labels)
    assert 0 <= a <= 1 + 1e-12
    assert protocol.alignment(tokens.Z, U) >= a - 1e-12  # the largest fraction is at least the labelled one
    moved = protocol.aligned_tokens(tokens.Z, U, tokens.labels)
    np.testing.assert_allclose(np.linalg.norm(moved, axis=0), np.linalg.norm(tokens.Z, axis=0), rtol=1e-12)
    kept = np.linalg.norm(np.einsum("nde,en->dn", protocol.subspace_projectors(U)[tokens.labels], tokens.Z), axis=0)
    moved_alignment = protocol.subspace_energy(moved, U)[tokens.labels, np.arange(n)]
    np.testing.assert_allclose(moved_alignment[kept > 1e-12], 1.0, atol=1e-10)  # on the subspace, up to rounding


def test_isotropic_alignment_is_p_over_d_for_given_labels():
    rng = np.random.default_rng(1)
    U = orthonormal_bases(K, D, D // K, seed=rng)
    labels = rng.integers(0, K, 400)
    X = protocol.isotropic_tokens(np.ones((D, 400)), rng)
    # mean of 400 Beta(p/2, (d−p)/2) fractions: mean p/d = 1/4, std 0.075/√400 ≈ 0.004; 5 std = 0.02
    assert protocol.alignment(X, U, labels) == pytest.approx(1 / K, abs=0.02)


@given(seed=seeds)
def test_normalised_rate_is_scale_free_and_projectors_are_orthogonal(seed):
    rng = np.random.default_rng(seed)
    U = random_bases(rng, 3, 7, 2) * rng.uniform(0.1, 10, (3, 1, 2))  # non-orthonormal bases
    Z = rng.standard_normal((7, 5))
    scaled = Z * rng.uniform(0.01, 100, 5)
    assert protocol.official_compression_rate(scaled, U) == pytest.approx(
        protocol.official_compression_rate(Z, U), rel=1e-10)  # per-head unit norms: float64 rounding of the SVD
    P = protocol.subspace_projectors(U)
    np.testing.assert_allclose(P @ P, P, atol=1e-12)
    np.testing.assert_allclose(P, np.swapaxes(P, -1, -2), atol=1e-12)
    energy = protocol.subspace_energy(Z, U)
    assert energy.shape == (3, 5) and np.all((energy >= -1e-12) & (energy <= 1 + 1e-12))


def test_protocol_rejects_bad_input():
    U = orthonormal_bases(2, 6, 3, seed=0)
    Z = np.ones((6, 4))
    with pytest.raises(ValueError, match="labels"):
        protocol.alignment(Z, U, labels=[0, 1, 2, 0])
    with pytest.raises(ValueError, match="labels"):
        protocol.alignment(Z, U, labels=[0, 1])
    with pytest.raises(ValueError, match="draws"):
        protocol.token_profile(Z, U, 1.0, draws=0)
    with pytest.raises(ValueError, match="eps"):
        protocol.token_profile(Z, U, 0.0)
    with pytest.raises(ValueError, match="U"):
        protocol.alignment(Z, np.ones((2, 5, 3)))


def test_layer_controls_differ_from_the_layer_exactly_where_they_should():
    rng = np.random.default_rng(2)
    U = orthonormal_bases(K, D, D // K, seed=rng)
    params = ct.CrateLayerParams(U=U, D=U.transpose(1, 0, 2).reshape(D, D))
    Z = rng.standard_normal((D, N))
    half, out = ct.crate_layer(Z, params, eps=1.0)
    attention = half - Z
    # attention only: the ISTA block is the identity
    a_half, a_out = ct.crate_layer(Z, params, eps=1.0, sparsify="none")
    np.testing.assert_array_equal(a_half, half)
    np.testing.assert_array_equal(a_out, half)
    # ISTA only: no MSSA term, the same ISTA block
    i_half, i_out = ct.crate_layer(Z, params, eps=1.0, compress=False)
    np.testing.assert_array_equal(i_half, Z)
    np.testing.assert_allclose(i_out, ct.ista(ct.layer_norm(Z), params.D), atol=1e-14)  # same ops, same order
    # eq. (27)'s shrink: (1 − s)Z + MSSA; s = 1 keeps the attention term alone
    s_half, _ = ct.crate_layer(Z, params, eps=1.0, shrink=0.25)
    np.testing.assert_allclose(s_half, 0.75 * Z + attention, atol=1e-13)  # one extra rounding of Z + MSSA − Z
    np.testing.assert_allclose(ct.crate_layer(Z, params, eps=1.0, shrink=1.0)[0], attention, atol=1e-13)
    with pytest.raises(ValueError, match="shrink"):
        ct.crate_layer(Z, params, eps=1.0, shrink=1.5)
    with pytest.raises(ValueError, match="sparsify"):
        ct.crate_layer(Z, params, eps=1.0, sparsify="identity")


@given(seed=seeds, scale=st.floats(0.1, 10.0))
def test_yardstick_ratios_see_only_the_spans_of_the_bases(seed, scale):
    """Rescaling or re-mixing each basis within its span (as weight decay and training do to U) leaves the ratios
    and the alignment unchanged; the paper's R^c moves."""
    rng = np.random.default_rng(seed)
    U = orthonormal_bases(3, 12, 4, seed=rng)
    mixed = scale * U @ (np.eye(4) + 0.3 * rng.standard_normal((3, 4, 4)))  # same spans, not orthonormal
    Z = rng.standard_normal((12, 9))
    a = protocol.token_profile(Z, U, 1.0, draws=3, seed=seed)
    b = protocol.token_profile(Z, mixed, 1.0, draws=3, seed=seed)
    for name in ("relative", "relative_normalised", "alignment", "aligned_relative", "isotropic_alignment"):
        # the same numbers up to the rounding of a QR / pseudo-inverse of a 4-column basis (condition ≲ 10)
        assert getattr(b, name) == pytest.approx(getattr(a, name), rel=1e-9), name
