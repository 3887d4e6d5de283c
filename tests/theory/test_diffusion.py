"""Diffusion processes and structured ODEs (crate_theory.diffusion): (178)–(183), (51)–(54), (434)–(436).

Monte Carlo checks use fixed seeds and state their error bound: 5 standard errors, with the standard error of each
statistic estimated from the same samples (a 5-sigma miss has probability ~6e-7 per statistic).
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crate_theory.coding_rate import compression_rate, compression_rate_grad
from crate_theory.denoising import LowRankGaussianMixture, posterior_component_probabilities, posterior_mean, score
from crate_theory.diffusion import (
    ODE_METHODS,
    euler_coefficients,
    geometric_time_grid,
    integrate_ode,
    probability_flow_ode,
    reverse_ve_sde,
    structured_denoising_ode,
    structured_diffusion_ode,
    ve_score,
    ve_sde,
)
from crate_theory.synthetic import orthonormal_bases, sample_tokens

SEEDS = st.integers(0, 2**32 - 1)
N_MC = 4000  # Monte Carlo sample size of the law checks


def lines_mixture():
    """K = 2 lines in R^3 with unequal variances and weights, so that the mixture is far from Gaussian."""
    U = orthonormal_bases(2, 3, 1, np.random.default_rng(0), coherence=None)
    return LowRankGaussianMixture(U, np.array([[4.0], [1.0]]), np.array([0.3, 0.7]))


def assert_law_is_mixture_at(mix, X, t):
    """X (d, N) is a sample of q_t = mixture ⊛ N(0, 2tI) (182): two families of exact expectations, 5 SE each.

    E[P(s = k | x)] = π_k for x ~ q_t (posterior probabilities average to the prior), which probes the whole mixture
    structure; E[x x*] = Σ_k π_k U_kΛ_kU_k* + 2t I checks the second moments entrywise.
    """
    N = X.shape[1]
    w = posterior_component_probabilities(mix, X, np.sqrt(2 * t))
    se = w.std(axis=1) / np.sqrt(N)
    assert np.all(np.abs(w.mean(axis=1) - mix.weights) < 5 * se), (w.mean(axis=1), mix.weights, se)
    cov = sum(mix.weights[k] * (mix.U[k] * mix.lam[k]) @ mix.U[k].T for k in range(mix.K)) + 2 * t * np.eye(mix.d)
    products = np.einsum("in,jn->ijn", X, X)
    se = products.std(axis=2) / np.sqrt(N)
    assert np.all(np.abs(products.mean(axis=2) - cov) < 5 * se), (products.mean(axis=2), cov)


def test_ve_sde_marginals_are_the_mixture_convolved_with_n_0_2t():
    mix = lines_mixture()
    rng = np.random.default_rng(1)
    _, Z0, _ = mix.sample(N_MC, rng)
    times = np.linspace(0.0, 0.5, 6)
    path = ve_sde(Z0, times, rng)
    for i in (2, 5):
        t = times[i]
        increments = (path[i] - Z0).ravel()  # z(t) − z(0) ~ N(0, 2tI) (182)
        assert abs(increments.mean()) < 5 * np.sqrt(2 * t / increments.size)
        assert abs(increments.var() - 2 * t) < 5 * 2 * t * np.sqrt(2 / increments.size)
        assert_law_is_mixture_at(mix, path[i], t)


def test_law_check_detects_a_wrong_time():
    # The statistic above is not vacuous: samples of q_t fail the check for q_{1.5 t}.
    mix = lines_mixture()
    X, _, _ = mix.sample(N_MC, np.random.default_rng(2), sigma=np.sqrt(2 * 0.2))
    assert_law_is_mixture_at(mix, X, 0.2)
    with pytest.raises(AssertionError):
        assert_law_is_mixture_at(mix, X, 0.3)


def single_component_flow(lam, x0, t0, t):
    """Closed-form PF-ODE (180) for K = 1: each eigendirection of variance v scales by √((v + 2t)/(v + 2t0))."""
    return lambda U: (U[0] @ ((U[0].T @ x0) * np.sqrt((lam + 2 * t) / (lam + 2 * t0))[:, None])
                      + (x0 - U[0] @ (U[0].T @ x0)) * np.sqrt(t / t0))


@pytest.mark.parametrize("method,order", [("euler", 1), ("heun", 2), ("rk4", 4)])
@pytest.mark.parametrize("direction", [1, -1])
def test_ode_solvers_have_their_order_on_the_closed_form_flow(method, order, direction):
    rng = np.random.default_rng(3)
    U = orthonormal_bases(1, 5, 2, rng)
    lam = np.array([0.5, 2.0])
    mix = LowRankGaussianMixture(U, lam)
    t0, t1 = (0.2, 1.0)[::direction]
    X, _, _ = mix.sample(3, rng, sigma=np.sqrt(2 * t0))
    exact = single_component_flow(lam, X, t0, t1)(U)
    errors = [np.abs(probability_flow_ode(mix, X, np.linspace(t0, t1, m + 1), method)[-1] - exact).max()
              for m in (40, 80)]
    # Halving h divides the global error by 2^order, up to O(h) relative corrections (±15% of the exponent).
    assert abs(np.log2(errors[0] / errors[1]) - order) < 0.15 * order
    if method == "rk4":  # the accuracy the transport checks below rely on (they need ≪ 5 SE ≈ 1e-2)
        assert errors[1] < 1e-7 * np.abs(exact).max()


def test_probability_flow_transports_the_mixture_both_ways():
    mix = lines_mixture()
    t0, t1 = 0.05, 0.5
    X, _, _ = mix.sample(N_MC, np.random.default_rng(4), sigma=np.sqrt(2 * t0))
    forward = probability_flow_ode(mix, X, np.geomspace(t0, t1, 41))[-1]
    assert_law_is_mixture_at(mix, forward, t1)  # RK4 error (≲1e-7) is far below the 5-SE band
    back = probability_flow_ode(mix, forward, np.geomspace(t1, t0, 41))[-1]  # the reverse flow (181)
    np.testing.assert_allclose(back, X, atol=1e-6 * np.abs(X).max())  # a bijection: round trip to RK4 accuracy
    Y, _, _ = mix.sample(N_MC, np.random.default_rng(5), sigma=np.sqrt(2 * t1))
    assert_law_is_mixture_at(mix, probability_flow_ode(mix, Y, np.geomspace(t1, t0, 41))[-1], t0)


def test_reverse_sde_returns_to_the_less_noisy_law():
    mix = lines_mixture()
    rng = np.random.default_rng(6)
    T, t_end = 0.5, 0.1
    X, _, _ = mix.sample(N_MC, rng, sigma=np.sqrt(2 * T))
    taus = np.linspace(0.0, T - t_end, 201)
    # Euler–Maruyama has an O(h) bias, h = 2e-3: well inside the 5-SE band at N = 4000.
    assert_law_is_mixture_at(mix, reverse_ve_sde(mix, X, T, taus, rng)[-1], t_end)


def test_ve_score_is_the_mixture_score_at_sigma_squared_2t():
    mix = lines_mixture()
    x = np.array([0.3, -1.0, 2.0])
    np.testing.assert_array_equal(ve_score(mix, x, 0.125), score(mix, x, 0.5))
    # Tweedie in the App. B.1 clock (183): E[z(0) | z(t)] = z(t) + 2t s(z(t), t).
    np.testing.assert_allclose(x + 2 * 0.125 * ve_score(mix, x, 0.125), posterior_mean(mix, x, 0.5), atol=1e-14)
    np.testing.assert_array_equal(ve_score(mix, x, 0.1, sigma0=0.3), score(mix, x, np.sqrt(0.09 + 0.2)))


@st.composite
def noisy_tokens(draw):
    rng = np.random.default_rng(draw(SEEDS))
    K, p = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    d, n = K * p + draw(st.integers(0, 3)), draw(st.integers(2, 10))
    U = orthonormal_bases(K, d, p, rng)
    return sample_tokens(U, n, rng, sigma=0.3), U


@given(noisy_tokens(), st.sampled_from([0.5, 1.0]))
def test_compression_rate_decreases_along_the_structured_denoising_ode(case, eps):
    tokens, U = case
    T = 1.0
    path = structured_denoising_ode(tokens.Z, U, eps, T, np.linspace(0.0, 0.9 * T, 31))
    rc = np.array([compression_rate(Z, U, eps) for Z in path])
    # The exact flow is a time-changed gradient flow of R^c; RK4 steps are small (h·β/(2(T−t)) ≤ 0.6), so the
    # discrete path must be non-increasing too, up to round-off of R^c (1e-12 relative).
    assert np.all(np.diff(rc) <= 1e-12 * (1 + np.abs(rc[:-1])))
    own = U[tokens.labels]  # (n, d, p): each token's own basis

    def off_subspace(Z):  # Σ_i ‖(I − U_{s_i}U_{s_i}*) z_i‖²
        return np.sum((Z - np.einsum("ndp,nep,en->dn", own, own, Z)) ** 2)

    assert off_subspace(path[-1]) <= off_subspace(path[0]) + 1e-12  # tokens move towards their own subspaces
    rd = np.array([compression_rate(Z, U, eps) for Z in structured_diffusion_ode(path[-1], U, eps, T,
                                                                                 np.linspace(0.1 * T, T, 31))])
    assert np.all(np.diff(rd) >= -1e-12 * (1 + np.abs(rd[:-1])))  # (52) is its reversal: R^c non-decreasing


@given(st.floats(1e-3, 10.0), st.floats(1e-3, 2.0), st.integers(2, 30))
def test_geometric_grid_has_constant_step_kappa(T, kappa, L):
    t = geometric_time_grid(T, kappa, L)
    assert t.shape == (L,) and t[-1] == T
    np.testing.assert_allclose(t[0], T / (1 + 2 * kappa) ** (L - 1), rtol=1e-12)  # the corrected (436)
    np.testing.assert_allclose(euler_coefficients(t), kappa, rtol=1e-10)  # (434)–(435): constant step κ


def test_euler_on_the_geometric_grid_is_the_decoder_iteration_434():
    tokens = sample_tokens(orthonormal_bases(2, 6, 3, 0), 5, 1, sigma=0.2)
    U, kappa, T, L, eps = tokens.U, 0.05, 1.0, 6, 0.8
    grid = geometric_time_grid(T, kappa, L)
    seen = []
    U_of_t = lambda s: seen.append(s) or U  # noqa: E731 — records where (54) evaluates U_[K](·)
    path = structured_diffusion_ode(tokens.Z, U_of_t, eps, T, grid, method="euler")
    Z = tokens.Z
    for ell in range(L - 1):
        Z = Z + kappa * compression_rate_grad(Z, U, eps)  # Z̃^{ℓ+1} = Z̃^ℓ + κ∇R^c(Z̃^ℓ) (434)
        np.testing.assert_allclose(path[ell + 1], Z, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(seen, T - grid[:-1], rtol=1e-14)  # U_[K](T − t_ℓ), as in (54)


def test_time_dependent_bases_are_used_and_constant_ones_agree():
    tokens = sample_tokens(orthonormal_bases(2, 6, 2, 0), 4, 1, sigma=0.2)
    times = np.linspace(0.0, 0.5, 6)
    fixed = structured_denoising_ode(tokens.Z, tokens.U, 1.0, 1.0, times)
    np.testing.assert_array_equal(structured_denoising_ode(tokens.Z, lambda t: tokens.U, 1.0, 1.0, times), fixed)
    other = orthonormal_bases(2, 6, 2, 5)
    switched = structured_denoising_ode(tokens.Z, lambda t: tokens.U if t < 0.25 else other, 1.0, 1.0, times)
    assert np.abs(switched[-1] - fixed[-1]).max() > 1e-3


def test_bad_input_raises_named_errors():
    mix = lines_mixture()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3, 4))
    with pytest.raises(ValueError, match="times"):
        probability_flow_ode(mix, X, [0.1, 0.3, 0.2])
    with pytest.raises(ValueError, match="times"):
        probability_flow_ode(mix, X, [0.0, 0.3])
    with pytest.raises(ValueError, match="method"):
        integrate_ode(lambda t, Z: Z, X, [0.0, 1.0], method="rk45")
    assert set(ODE_METHODS) == {"euler", "heun", "rk4"}
    with pytest.raises(TypeError, match="rng"):
        ve_sde(X, [0.0, 1.0], 0)
    with pytest.raises(ValueError, match="times"):
        ve_sde(X, [1.0, 0.0], rng)
    with pytest.raises(ValueError, match="t "):
        ve_score(mix, X, 0.0)
    with pytest.raises(ValueError, match="taus"):
        reverse_ve_sde(mix, X, 0.5, [0.0, 0.5], rng)
    U = orthonormal_bases(2, 3, 1, 0)
    with pytest.raises(ValueError, match="times"):
        structured_denoising_ode(X, U, 1.0, 1.0, [0.0, 1.0])
    with pytest.raises(ValueError, match="times"):
        structured_diffusion_ode(X, U, 1.0, 1.0, [0.0, 1.0])
    with pytest.raises(ValueError, match="U"):
        structured_denoising_ode(X, U[:, :2], 1.0, 1.0, [0.0, 0.5])
    with pytest.raises(ValueError, match="kappa"):
        geometric_time_grid(1.0, 0.0, 3)
    with pytest.raises(ValueError, match="L"):
        geometric_time_grid(1.0, 0.1, 1)
