"""Diffusion processes (App. B.1) and the structured denoising / diffusion ODEs (Sec. 3.2–3.3, App. B.4).

Time convention: App. B.1's variance-exploding process (176)–(178) ``dz = √2 dw``, so that
z(t) ~ N(z(0), 2t I) (182): the marginal at time t of data drawn from a ``LowRankGaussianMixture`` is that
mixture at noise level σ² = 2t (plus any noise σ_0² the data already carries), and its score is
``crate_theory.denoising.score`` at σ = √(σ_0² + 2t). (The main text (48) uses variance t instead; Tweedie's
factor is then σ² = t rather than 2t (183).)

Token sets are ``(d, n)`` arrays (tokens are columns); a path over a time grid of T_s times is returned as one
array of shape ``(T_s, d, n)`` whose entry 0 is the initial condition. ODEs are integrated by ``integrate_ode``
(Euler, Heun or classical RK4 on the given grid); the SDEs by Euler–Maruyama.

Structured ODEs (eqs. (51)–(54)) replace the score by −∇R^c/σ_t² (432), with ∇R^c from
``crate_theory.coding_rate.compression_rate_grad`` (eq. (31)). Their subspaces ``U`` may be a fixed
(K, d, p) array ((51)/(52)) or a callable t ↦ (K, d, p) array ((53)/(54), "layer and time merged").
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._checks import as_float_array, check_bases, check_choice, check_int, check_nonnegative, check_positive
from .coding_rate import compression_rate_grad
from .denoising import LowRankGaussianMixture, score

__all__ = [
    "ODE_METHODS",
    "integrate_ode",
    "euler_maruyama",
    "ve_sde",
    "ve_score",
    "reverse_ve_sde",
    "probability_flow_ode",
    "structured_denoising_ode",
    "structured_diffusion_ode",
    "geometric_time_grid",
    "euler_coefficients",
]

ODE_METHODS = ("euler", "heun", "rk4")


def _time_grid(times, name: str = "times") -> np.ndarray:
    """A strictly monotone 1-D grid of at least two finite times."""
    times = as_float_array(times, name, ndim=1, shape_hint="(T_s,)")
    if times.shape[0] < 2:
        raise ValueError(f"{name} must contain at least two times, got {times.shape[0]}")
    steps = np.diff(times)
    if not (np.all(steps > 0) or np.all(steps < 0)):
        raise ValueError(f"{name} must be strictly increasing or strictly decreasing")
    return times


def integrate_ode(drift: Callable, Z0, times, method: str = "rk4") -> np.ndarray:
    """Integrate dZ/dt = drift(t, Z) on a given monotone grid of times; returns the path (T_s, *Z0.shape).

    method: "euler" (first order: Z + h f(t, Z)), "heun" (explicit trapezoid, second order) or "rk4"
    (classical Runge–Kutta, fourth order). Every stage evaluates the drift at times inside [times[i],
    times[i+1]] (RK4 also at the midpoint), so a drift singular at an end point of the interval of definition
    needs a grid that stops short of it.
    """
    method = check_choice(method, "method", ODE_METHODS)
    times = _time_grid(times)
    Z = as_float_array(Z0, "Z0")
    path = np.empty((times.shape[0],) + Z.shape)
    path[0] = Z
    for i, (t, t_next) in enumerate(zip(times[:-1], times[1:])):
        h = t_next - t
        k1 = drift(t, Z)
        if method == "euler":
            Z = Z + h * k1
        elif method == "heun":
            k2 = drift(t_next, Z + h * k1)
            Z = Z + (h / 2) * (k1 + k2)
        else:
            k2 = drift(t + h / 2, Z + (h / 2) * k1)
            k3 = drift(t + h / 2, Z + (h / 2) * k2)
            k4 = drift(t_next, Z + h * k3)
            Z = Z + (h / 6) * (k1 + 2 * k2 + 2 * k3 + k4)
        path[i + 1] = Z
    return path


def euler_maruyama(drift: Callable, Z0, times, rng: np.random.Generator, noise_scale: float = np.sqrt(2.0)):
    """Euler–Maruyama for dZ = drift(t, Z) dt + noise_scale · dW on an increasing grid (151).

    Z_{i+1} = Z_i + h_i drift(t_i, Z_i) + noise_scale √h_i ξ_i, ξ_i i.i.d. N(0, I). Returns the path
    (T_s, *Z0.shape). With drift 0 the scheme is exact in law.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    times = _time_grid(times)
    if times[1] < times[0]:
        raise ValueError("times must be increasing for an SDE (run a reverse-time SDE in its own clock)")
    noise_scale = check_nonnegative(noise_scale, "noise_scale")
    Z = as_float_array(Z0, "Z0")
    path = np.empty((times.shape[0],) + Z.shape)
    path[0] = Z
    for i, (t, h) in enumerate(zip(times[:-1], np.diff(times))):
        Z = Z + h * drift(t, Z) + noise_scale * np.sqrt(h) * rng.standard_normal(Z.shape)
        path[i + 1] = Z
    return path


def ve_sde(Z0, times, rng: np.random.Generator) -> np.ndarray:
    """The variance-exploding SDE (176)–(178) dz = √2 dw, simulated by Euler–Maruyama (exact in law).

    Z0: (d, n) tokens at times[0]; times increasing. Returns the path (T_s, d, n); Z(t) − Z(times[0]) ~
    N(0, 2(t − times[0]) I) (182).
    """
    return euler_maruyama(lambda t, Z: np.zeros_like(Z), Z0, times, rng)


def _mixture(mix) -> LowRankGaussianMixture:
    if not isinstance(mix, LowRankGaussianMixture):
        raise TypeError(f"mix must be a LowRankGaussianMixture, got {type(mix).__name__}")
    return mix


def ve_score(mix: LowRankGaussianMixture, X, t: float, sigma0: float = 0.0) -> np.ndarray:
    """s(x, t) = ∇ log q_t(x) for data from ``mix`` (carrying noise σ_0) diffused by (178) to time t > 0.

    q_t is the mixture at σ² = σ_0² + 2t (182), so this is the exact score (225) at that σ. X: (d,) or (d, n).
    """
    t = check_positive(t, "t")
    sigma0 = check_nonnegative(sigma0, "sigma0")
    return score(_mixture(mix), X, np.sqrt(sigma0**2 + 2 * t))


def reverse_ve_sde(mix: LowRankGaussianMixture, X_T, T: float, taus, rng: np.random.Generator,
                   sigma0: float = 0.0) -> np.ndarray:
    """The reverse-time VE SDE (179) dz̃ = 2 s(z̃, T − τ) dτ + √2 dw̃, by Euler–Maruyama in reverse time τ.

    X_T: (d, n) samples of q_T; taus: increasing reverse times in [0, T) (τ = T − t; the drift is evaluated at
    diffusion times T − τ > 0). z̃(τ) has law q_{T−τ} up to the O(h) error of the scheme. Returns the path
    (T_s, d, n).
    """
    T = check_positive(T, "T")
    taus = _time_grid(taus, "taus")
    if taus[0] < 0 or taus[-1] >= T:
        raise ValueError(f"taus must lie in [0, T) = [0, {T}): the score at diffusion time T − τ must exist")
    return euler_maruyama(lambda tau, Z: 2 * ve_score(mix, Z, T - tau, sigma0), X_T, taus, rng)


def probability_flow_ode(mix: LowRankGaussianMixture, X, times, method: str = "rk4",
                         sigma0: float = 0.0) -> np.ndarray:
    """The probability-flow ODE (180) dz̄ = −s(z̄, t) dt of the VE SDE, with the exact mixture score.

    X: (d, n) samples of q_{times[0]}; times: a monotone grid of diffusion times > 0. Increasing times push
    q_{t_0} forward to q_t (noising); decreasing times run the reverse flow (181) dz = s(z, T − τ) dτ in the
    diffusion clock t = T − τ (denoising). Returns the path (T_s, d, n) whose entry i has law q_{times[i]}
    up to the discretisation error of ``method`` (see ``integrate_ode``).
    """
    _mixture(mix)
    times = _time_grid(times)
    if np.min(times) <= 0:
        raise ValueError("times must be > 0 (the score of noise-free mixture data is singular at t = 0)")
    return integrate_ode(lambda t, Z: -ve_score(mix, Z, t, sigma0), X, times, method)


def _bases_at(U, t: float) -> np.ndarray:
    return U(t) if callable(U) else U


def _structured_drift(U, eps, sign: float, rate: Callable, when: Callable, d: int):
    """t ↦ sign · rate(t) · ∇R^c(Z | U(when(t)))."""
    eps = check_positive(eps, "eps")
    if not callable(U):
        U = check_bases(U, d, name="U")

    def drift(t, Z):
        return sign * rate(t) * compression_rate_grad(Z, _bases_at(U, when(t)), eps)

    return drift


def structured_denoising_ode(Z0, U, eps: float, T: float, times, method: str = "rk4") -> np.ndarray:
    """Structured denoising ODE (51)/(53): dZ(t) = −(1/(2(T − t))) ∇R^c(Z(t) | U_[K](t)) dt, t ∈ [0, T).

    The probability-flow ODE (50) with the score replaced by −∇R^c/σ², σ²_{T−t} = T − t (432): it starts from
    the noisy tokens at t = 0 and compresses them towards the subspaces as t → T (the text after (51) states
    the opposite direction). Z0: (d, n); U: (K, d, p) or a callable t ↦ U_[K](t);
    times: increasing grid in [0, T) (the drift is singular at T). Returns the path (T_s, d, n).
    """
    T = check_positive(T, "T")
    times = _time_grid(times)
    if times[0] < 0 or times[-1] >= T or times[1] < times[0]:
        raise ValueError(f"times must increase within [0, T) = [0, {T}): the drift is singular at t = T")
    Z0 = as_float_array(Z0, "Z0", ndim=2, shape_hint="(d, n)")
    drift = _structured_drift(U, eps, -1.0, lambda t: 1 / (2 * (T - t)), lambda t: t, Z0.shape[0])
    return integrate_ode(drift, Z0, times, method)


def structured_diffusion_ode(Z0, U, eps: float, T: float, times, method: str = "rk4") -> np.ndarray:
    """Structured diffusion ODE (52)/(54)=(61): dZ̃(t) = (1/(2t)) ∇R^c(Z̃(t) | U_[K](T − t)) dt, t ∈ (0, T].

    The time reversal of (51)/(53): ``U`` is the denoising flow's U_[K](·) (array or callable), evaluated at
    T − t as in (54). Z0: (d, n) at t = times[0] > 0; times: increasing in (0, T]. Euler on the geometric grid
    of ``geometric_time_grid`` is the discretisation (434) with constant step κ. Returns the path (T_s, d, n).
    """
    T = check_positive(T, "T")
    times = _time_grid(times)
    if times[0] <= 0 or times[-1] > T or times[1] < times[0]:
        raise ValueError(f"times must increase within (0, T] = (0, {T}]: the drift is singular at t = 0")
    Z0 = as_float_array(Z0, "Z0", ndim=2, shape_hint="(d, n)")
    drift = _structured_drift(U, eps, 1.0, lambda t: 1 / (2 * t), lambda t: T - t, Z0.shape[0])
    return integrate_ode(drift, Z0, times, method)


def geometric_time_grid(T: float, kappa: float, L: int) -> np.ndarray:
    """Times t_1 < … < t_L = T with t_{ℓ+1} = (1 + 2κ) t_ℓ (436), so every Euler step (434) has coefficient
    (t_{ℓ+1} − t_ℓ)/(2t_ℓ) = κ. Returns an (L,) array.

    Erratum (App. B.4, after (436)): the paper writes t_1 = T/(1 + 2κ)^L; with L times t_1 … t_L there are
    L − 1 ratios, so the consistent value — used here — is t_1 = T/(1 + 2κ)^{L−1} (giving L − 1 steps).
    """
    T = check_positive(T, "T")
    kappa = check_positive(kappa, "kappa")
    L = check_int(L, "L", minimum=2)
    return T * (1 + 2 * kappa) ** (np.arange(L) - (L - 1))


def euler_coefficients(times) -> np.ndarray:
    """The step coefficients (t_{ℓ+1} − t_ℓ)/(2t_ℓ) of the first-order discretisation (434), shape (T_s − 1,)."""
    times = _time_grid(times)
    if np.any(times <= 0):
        raise ValueError("times must be > 0")
    return np.diff(times) / (2 * times[:-1])
