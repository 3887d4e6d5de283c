"""Denoising a low-dimensional Gaussian mixture: exact score, posterior mean, Tweedie, Approximation 12.

The model of Proposition 14 (App. B.2, eqs. (10)–(11), (211)–(212)), in the column convention:

    s ~ π on [K],   α | s=k ~ N(0, Λ_k),   z = U_s α,   x = z + σ w,   w ~ N(0, I_d),

with orthonormal bases ``U`` of shape (K, d, p) (U_k*U_k = I_p; the subspaces need not be mutually
orthogonal) and diagonal code covariances ``Λ_k`` (the paper takes one Λ for all k; a per-component Λ_k is
the natural generalisation and is what breaks the normalisation (213)). Given s = k, x ~ N(0, C_k) with

    Σ_k = U_k Λ_k U_k*  (212),   C_k = Σ_k + σ² I_d,   M_k = C_k^{-1/2}  (212).

Because U_k has orthonormal columns, everything is closed form in the p-dimensional codes:
C_k^{-1} x = x/σ² − U_k [(1/σ² − 1/(λ_k + σ²)) ⊙ U_k*x] and logdet C_k = (d − p) log σ² + Σ_j log(λ_kj + σ²).
The whitening matrix M_k and the operator P_k = I − σM_k of (192) are instead computed from the dense
covariance by an eigendecomposition, which keeps them an independent route to the same objects.

Observations ``x`` are one token (d,) or a token set (d, n) (tokens are columns); every function returns the
same layout. σ is always an explicit argument (σ > 0 wherever a density is involved), so the same mixture
describes the clean codebook and all its noisy versions — in the VE diffusion of App. B.1 the marginal at
time t is the mixture at σ² = 2t (see ``crate_theory.diffusion``).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp, softmax

from ._checks import (
    as_float_array,
    check_bases,
    check_int,
    check_nonnegative,
    check_positive,
    check_same_size,
)
from .coding_rate import project_onto_bases
from .synthetic import memberships

__all__ = [
    "LowRankGaussianMixture",
    "component_covariance",
    "whitening_matrix",
    "log_density",
    "posterior_component_probabilities",
    "score",
    "score_normalised",
    "posterior_mean",
    "tweedie_denoiser",
    "approx12_denoiser",
    "denoising_projection",
]


@dataclass(frozen=True)
class LowRankGaussianMixture:
    """The low-dimensional Gaussian mixture codebook of Prop. 14 / eqs. (10), (211).

    Attributes
    ----------
    U : (K, d, p) orthonormal bases U_k (checked: U_k*U_k = I_p entrywise within 1e-8; every closed form
        below relies on it).
    lam : (K, p) diagonals of the code covariances Λ_k (non-negative). A (p,) array is one Λ shared by all
        components, as in Prop. 14.
    weights : (K,) mixture weights π (positive, summing to 1 within 1e-10); uniform when omitted.
    """

    U: np.ndarray
    lam: np.ndarray
    weights: np.ndarray | None = None

    def __post_init__(self):
        U = check_bases(self.U, name="U", orthonormal=True)
        K, d, p = U.shape
        lam = as_float_array(self.lam, "lam")
        if lam.shape == (p,):
            lam = np.broadcast_to(lam, (K, p)).copy()
        if lam.shape != (K, p):
            raise ValueError(f"lam: expected shape ({K}, {p}) or ({p},) for U of shape {U.shape}, got {lam.shape}")
        if np.any(lam < 0):
            raise ValueError("lam: code variances must be non-negative")
        if self.weights is None:
            weights = np.full(K, 1.0 / K)
        else:
            weights = as_float_array(self.weights, "weights")
            if weights.shape != (K,):
                raise ValueError(f"weights: expected shape ({K},), got {weights.shape}")
            if np.any(weights <= 0) or abs(weights.sum() - 1.0) > 1e-10:
                raise ValueError("weights: expected positive mixture weights summing to 1 (within 1e-10)")
        object.__setattr__(self, "U", U)
        object.__setattr__(self, "lam", lam)
        object.__setattr__(self, "weights", weights)

    @property
    def K(self) -> int:
        return self.U.shape[0]

    @property
    def d(self) -> int:
        return self.U.shape[1]

    @property
    def p(self) -> int:
        return self.U.shape[2]

    def sample(self, n: int, rng: np.random.Generator, sigma: float = 0.0):
        """Draw n tokens of (211) and their noisy versions (11).

        Returns ``(X, Z, s)``: X = Z + σW of shape (d, n), the clean tokens Z = [U_{s_i} α_i] (d, n), and the
        component indices s (n,). σ = 0 gives X = Z.
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
        n = check_int(n, "n")
        sigma = check_nonnegative(sigma, "sigma")
        s = memberships(n, self.K, rng, self.weights)
        codes = rng.standard_normal((self.p, n)) * np.sqrt(self.lam[s].T)
        Z = np.einsum("ndp,pn->dn", self.U[s], codes)
        X = Z + sigma * rng.standard_normal((self.d, n))
        return X, Z, s


def _check_mixture(mix) -> LowRankGaussianMixture:
    if not isinstance(mix, LowRankGaussianMixture):
        raise TypeError(f"mix: expected a LowRankGaussianMixture, got {type(mix).__name__}")
    return mix


def _tokens(x, d: int) -> tuple[np.ndarray, bool]:
    """x as a (d, n) array, and whether it was a single (d,) token."""
    x = as_float_array(x, "x", ndim=(1, 2), shape_hint="(d,) or (d, n) (tokens are columns)")
    check_same_size(x.shape[0], d, "x", "rows (d, the mixture's ambient dimension)")
    single = x.ndim == 1
    return (x[:, None] if single else x), single


def _restore(v: np.ndarray, single: bool) -> np.ndarray:
    return v[:, 0] if single else v


@dataclass(frozen=True)
class _Terms:
    """Per-component pieces of N(x; 0, C_k) for tokens x (d, n): codes U_k*x (K, p, n), x*C_k^{-1}x (K, n),
    log π_k N(x; 0, C_k) (K, n), C_k^{-1}x (K, d, n), and whether x was a single token."""

    codes: np.ndarray
    quad: np.ndarray
    log_joint: np.ndarray
    prec_x: np.ndarray
    single: bool

    @property
    def posterior(self) -> np.ndarray:
        """P[s = k | x], (K, n)."""
        return softmax(self.log_joint, axis=0)


def _component_terms(mix, x, sigma) -> _Terms:
    """Validate (mix, x, σ) and compute the closed forms of the module docstring."""
    mix = _check_mixture(mix)
    sigma = check_positive(sigma, "sigma")
    x, single = _tokens(x, mix.d)
    s2 = sigma**2
    codes = project_onto_bases(x, mix.U)                                    # U_k* x, (K, p, n)
    inv_var = 1.0 / (mix.lam + s2)                                          # (Λ_k + σ²)^{-1}, (K, p)
    sq_x = np.sum(x * x, axis=0)                                            # ‖x‖²
    sq_codes = np.sum(codes**2, axis=1)                                     # ‖U_k*x‖², (K, n)
    quad = (sq_x - sq_codes) / s2 + np.einsum("kp,kpn->kn", inv_var, codes**2)   # x* C_k^{-1} x
    logdet = (mix.d - mix.p) * np.log(s2) + np.sum(np.log(mix.lam + s2), axis=1)  # logdet C_k, (K,)
    log_normal = -0.5 * (mix.d * np.log(2 * np.pi) + logdet[:, None] + quad)
    prec_x = x[None] / s2 - np.einsum("kdp,kpn->kdn", mix.U, (1.0 / s2 - inv_var)[:, :, None] * codes)
    return _Terms(codes, quad, np.log(mix.weights)[:, None] + log_normal, prec_x, single)


def _component(mix, k) -> int:
    k = check_int(k, "k")
    if k >= mix.K:
        raise ValueError(f"k must be a component index < K = {mix.K}, got {k}")
    return k


def component_covariance(mix: LowRankGaussianMixture, k: int) -> np.ndarray:
    """Σ_k = U_k Λ_k U_k* (212), the (d, d) covariance of z given s = k."""
    mix = _check_mixture(mix)
    k = _component(mix, k)
    return (mix.U[k] * mix.lam[k]) @ mix.U[k].T


def whitening_matrix(mix: LowRankGaussianMixture, k: int, sigma: float) -> np.ndarray:
    """M_k = (Σ_k + σ²I_d)^{-1/2} (212), (d, d), from the eigendecomposition of the dense covariance."""
    sigma = check_positive(sigma, "sigma")
    evals, evecs = np.linalg.eigh(component_covariance(mix, k) + sigma**2 * np.eye(mix.d))
    return (evecs / np.sqrt(evals)) @ evecs.T


def log_density(mix: LowRankGaussianMixture, x, sigma: float) -> np.ndarray:
    """log q(x) of x = z + σw, z from the mixture (216)–(219): log Σ_k π_k N(x; 0, Σ_k + σ²I).

    x: (d,) or (d, n). Returns a scalar for one token, an (n,) array for a token set. Requires σ > 0.
    """
    terms = _component_terms(mix, x, sigma)
    out = logsumexp(terms.log_joint, axis=0)
    return out[0] if terms.single else out


def posterior_component_probabilities(mix: LowRankGaussianMixture, x, sigma: float) -> np.ndarray:
    """P[s = k | x] = π_k N(x; 0, C_k) / q(x), the exact weights of (222)–(225). Returns (K,) or (K, n)."""
    terms = _component_terms(mix, x, sigma)
    return _restore(terms.posterior, terms.single)


def score(mix: LowRankGaussianMixture, x, sigma: float) -> np.ndarray:
    """Exact score ∇_x log q(x), general weighted form (225):

        ∇ log q(x) = −Σ_k [π_k det(M_k) e^{−½‖M_k*x‖²} / Σ_j π_j det(M_j) e^{−½‖M_j*x‖²}] M_k M_k* x,

    valid for any weights and per-component Λ_k. x: (d,) or (d, n); returns the same shape. σ > 0.
    """
    terms = _component_terms(mix, x, sigma)
    return _restore(-np.einsum("kn,kdn->dn", terms.posterior, terms.prec_x), terms.single)


def score_normalised(mix: LowRankGaussianMixture, x, sigma: float) -> np.ndarray:
    """Score in the normalised form of Proposition 14, (214)–(215):

        −[M_1 … M_K] (diag(softmax(−½[‖M_1*x‖²; …; ‖M_K*x‖²])) ⊗ I_d) [M_1*x; …; M_K*x].

    The softmax drops the factors π_k det(M_k); this equals ``score`` exactly only under the normalisation
    (213) π_i det(M_i) = π_j det(M_j) (e.g. uniform π and one Λ for all k). It is computed as printed, without
    checking (213), so that its failure when (213) is broken can be measured. x: (d,) or (d, n).
    """
    terms = _component_terms(mix, x, sigma)
    w = softmax(-0.5 * terms.quad, axis=0)
    return _restore(-np.einsum("kn,kdn->dn", w, terms.prec_x), terms.single)


def posterior_mean(mix: LowRankGaussianMixture, x, sigma: float) -> np.ndarray:
    """Exact Bayes denoiser E[z | x] in closed form (Gaussian conditioning per component):

        E[z | x] = Σ_k P[s=k | x] · U_k Λ_k (Λ_k + σ²I_p)^{-1} U_k* x

    (App. B.2; the object that Tweedie's formula (46) and Approximation 12 (187) describe). x: (d,) or (d, n).
    """
    terms = _component_terms(mix, x, sigma)
    gain = mix.lam / (mix.lam + sigma**2)                                  # Λ_k (Λ_k + σ²)^{-1}
    cond_means = np.einsum("kdp,kpn->kdn", mix.U, gain[:, :, None] * terms.codes)
    return _restore(np.einsum("kn,kdn->dn", terms.posterior, cond_means), terms.single)


def tweedie_denoiser(mix: LowRankGaussianMixture, x, sigma: float) -> np.ndarray:
    """Tweedie's formula (46)/(183): E[z | x] = x + σ² ∇_x log q(x), with the exact score (225).

    x: (d,) or (d, n); returns the same shape. σ > 0.
    """
    sigma = check_positive(sigma, "sigma")
    x, single = _tokens(x, _check_mixture(mix).d)
    return _restore(x + sigma**2 * score(mix, x, sigma), single)


def approx12_denoiser(U, x, sigma: float) -> np.ndarray:
    """Approximation 12, (187)=(210): E[z | x] ≈ Σ_k softmax_k(‖U_j*x‖²/(2σ²)) U_k U_k* x.

    U: (K, d, p) orthonormal bases; x: (d,) or (d, n); σ > 0. The softmax runs over the K subspaces
    (heads) for each token, not over tokens. Needs neither Λ nor π (the normalisation (186) is assumed).
    """
    U = check_bases(U, name="U", orthonormal=True)
    sigma = check_positive(sigma, "sigma")
    x, single = _tokens(x, U.shape[1])
    codes = project_onto_bases(x, U)
    w = softmax(np.sum(codes**2, axis=1) / (2 * sigma**2), axis=0)
    return _restore(np.einsum("kn,kdp,kpn->dn", w, U, codes), single)


def denoising_projection(mix: LowRankGaussianMixture, k: int, sigma: float) -> np.ndarray:
    """P_k = I − σ M_k (192), (d, d), computed from the dense M_k of (212).

    By (193)–(200) P_k = U_k (I_p − (σ^{-2}Λ_k + I_p)^{-1/2}) U_k* → U_k U_k* as σ → 0, with
    ‖P_k − U_kU_k*‖ = (1 + λ_min(Λ_k)/σ²)^{-1/2} exactly.
    """
    sigma = check_positive(sigma, "sigma")
    return np.eye(_check_mixture(mix).d) - sigma * whitening_matrix(mix, k, sigma)
