"""Seeded samplers of the signal model (10)–(11): a mixture of low-dimensional Gaussians on K subspaces.

``z_i = U_{s_i} α_i + σ w_i`` with bases ``U_[K]`` (``(K, d, p)``, orthonormal columns), memberships ``s_i ∈ [K]``,
Gaussian codes ``α_i ∈ R^p`` and noise ``w_i ~ N(0, I_d)`` (eq. 11). Theorem 16 (App. B.3) instead draws
``α_i ~ N(0, I_p/p)`` and noise ``δ_i ~ N(0, (σ²/d) I_d)``; both scalings are offered.

Every sampler takes ``seed``: an int, None, or a ``numpy.random.Generator`` (used as is, so a sequence of calls
with one Generator draws fresh samples).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import as_float_array, check_bases, check_choice, check_int, check_labels, check_nonnegative

__all__ = [
    "as_generator",
    "random_orthogonal",
    "random_stiefel",
    "orthonormal_bases",
    "coherence",
    "gaussian_codes",
    "memberships",
    "TokenSet",
    "sample_tokens",
    "normalize_columns",
]


def as_generator(seed=None) -> np.random.Generator:
    """A ``numpy.random.Generator`` from an int / None / SeedSequence seed, or the Generator itself."""
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, (bool, np.bool_)) or not (seed is None or isinstance(seed, (int, np.integer, np.random.SeedSequence))):
        raise TypeError(f"seed must be an int, None, a SeedSequence or a numpy Generator, got {type(seed).__name__}")
    return np.random.default_rng(seed)


def random_stiefel(d: int, p: int, seed=None) -> np.ndarray:
    """A Haar-random ``d × p`` matrix with orthonormal columns (QR of a Gaussian matrix, signs fixed), p ≤ d."""
    d, p = check_int(d, "d", minimum=1), check_int(p, "p", minimum=0)
    if p > d:
        raise ValueError(f"p must be <= d for orthonormal columns, got p={p}, d={d}")
    G = as_generator(seed).standard_normal((d, p))
    Q, R = np.linalg.qr(G)
    return Q * np.where(np.diag(R) < 0, -1.0, 1.0)


def random_orthogonal(d: int, seed=None) -> np.ndarray:
    """A Haar-random ``d × d`` orthogonal matrix (QR of a Gaussian matrix with the sign fix)."""
    return random_stiefel(d, d, seed)


def orthonormal_bases(K: int, d: int, p: int, seed=None, coherence=0.0) -> np.ndarray:
    """Subspace bases ``U_[K]`` of shape ``(K, d, p)``, each with orthonormal columns.

    Args:
        K, d, p: number of subspaces, ambient and subspace dimensions.
        seed: int, None or Generator.
        coherence: the mutual coherence ``μ = max_{k≠k'} ‖U_k*U_k'‖`` to realise exactly:
            * ``0.0`` (default): mutually orthogonal subspaces (Assumption 15), needs ``Kp ≤ d``;
            * ``0 < μ < 1``: ``U_k = cos θ Q_k + sin θ S`` with ``Q_1..Q_K, S`` mutually orthogonal orthonormal
              blocks and ``sin²θ = μ``, so that ``U_k*U_k' = μ I_p`` for every k ≠ k' (all principal angles equal);
              needs ``(K+1)p ≤ d``;
            * ``None``: independent Haar-random bases (any K, p ≤ d; coherence whatever it turns out to be).
    """
    K, d, p = check_int(K, "K", minimum=1), check_int(d, "d", minimum=1), check_int(p, "p", minimum=1)
    rng = as_generator(seed)
    if coherence is None:
        return np.stack([random_stiefel(d, p, rng) for _ in range(K)])
    mu = check_nonnegative(coherence, "coherence")
    if mu >= 1.0:
        raise ValueError(f"coherence must be < 1 (or None for independent random bases), got {mu}")
    blocks = K if mu == 0.0 else K + 1
    if blocks * p > d:
        need = "K*p" if mu == 0.0 else "(K+1)*p"
        raise ValueError(f"{need} = {blocks * p} exceeds d = {d}: cannot build bases with coherence {mu}")
    Q = random_stiefel(d, blocks * p, rng).T.reshape(blocks, p, d).transpose(0, 2, 1)  # (blocks, d, p)
    if mu == 0.0:
        return np.ascontiguousarray(Q)
    sin = np.sqrt(mu)
    cos = np.sqrt(1.0 - mu)
    return cos * Q[:K] + sin * Q[K][None]


def coherence(U) -> float:
    """Mutual coherence ``max_{k≠k'} ‖U_k*U_k'‖`` (largest cosine of a principal angle between two subspaces)
    of bases ``U`` ``(K, d, p)`` with orthonormal columns; 0 for K = 1."""
    U = check_bases(U)
    K = U.shape[0]
    best = 0.0
    for k in range(K):
        for j in range(k + 1, K):
            best = max(best, float(np.linalg.norm(U[k].T @ U[j], 2)))
    return best


def gaussian_codes(p: int, n: int, seed=None, variance=1.0) -> np.ndarray:
    """Codes ``α_i ~ N(0, variance · I_p)`` i.i.d., shape ``(p, n)`` (eq. 10; Theorem 16 uses variance 1/p)."""
    p, n = check_int(p, "p"), check_int(n, "n")
    variance = check_nonnegative(variance, "variance")
    return np.sqrt(variance) * as_generator(seed).standard_normal((p, n))


def memberships(n: int, K: int, seed=None, probs=None) -> np.ndarray:
    """Subspace indices ``s_i ∈ {0..K−1}`` i.i.d. categorical (uniform by default, as in Theorem 16), shape ``(n,)``."""
    n, K = check_int(n, "n"), check_int(K, "K", minimum=1)
    if probs is not None:
        probs = as_float_array(probs, "probs", ndim=1)
        if probs.shape[0] != K or np.any(probs < 0) or not np.isclose(probs.sum(), 1.0):
            raise ValueError(f"probs must be {K} non-negative numbers summing to 1, got {probs}")
    return as_generator(seed).choice(K, size=n, p=probs)


def normalize_columns(Z) -> np.ndarray:
    """Each column divided by its ℓ2 norm (zero columns are left at zero) — Approximation 9's unit-norm tokens."""
    Z = as_float_array(Z, "Z", min_ndim=2)
    norms = np.linalg.norm(Z, axis=-2, keepdims=True)
    return np.divide(Z, norms, out=np.zeros_like(Z), where=norms > 0)


@dataclass
class TokenSet:
    """A sampled token set of the signal model.

    Attributes:
        Z: tokens ``(d, n)`` (after noise and optional normalisation).
        labels: memberships ``s_i``, ``(n,)``.
        signal: the noise-free part ``X_♮ = [U_{s_i} α_i]_i``, ``(d, n)``.
        noise: the noise ``Δ`` added, ``(d, n)`` (``Z = signal + noise`` unless ``unit_norm``).
        codes: the codes ``α_i``, ``(p, n)``.
        U: the bases used, ``(K, d, p)``.
    """

    Z: np.ndarray
    labels: np.ndarray
    signal: np.ndarray
    noise: np.ndarray
    codes: np.ndarray
    U: np.ndarray


def sample_tokens(
    U,
    n: int,
    seed=None,
    *,
    sigma=0.0,
    code_variance=1.0,
    noise: str = "eq11",
    labels=None,
    probs=None,
    unit_norm: bool = False,
) -> TokenSet:
    """Sample ``n`` tokens of the (noisy) mixture-of-subspaces model — eqs. (10)–(11).

    ``z_i = U_{s_i} α_i + noise_i``, ``α_i ~ N(0, code_variance · I_p)``; ``noise="eq11"``: ``σ w_i``,
    ``w_i ~ N(0, I_d)`` (eq. 11); ``noise="theorem16"``: ``δ_i ~ N(0, (σ²/d) I_d)`` (App. B.3).

    Args:
        U: bases ``(K, d, p)``; n: number of tokens; seed: int, None or Generator.
        sigma: noise level σ ≥ 0; code_variance: variance of each code entry (Theorem 16: ``1/p``).
        noise: ``"eq11"`` or ``"theorem16"``; labels: given memberships ``(n,)`` instead of sampling them;
        probs: membership probabilities (uniform by default); unit_norm: normalise every token to unit ℓ2 norm
            after adding the noise (Approximation 9's hypothesis).
    """
    U = check_bases(U, orthonormal=True)  # ValueError beyond _checks.ORTHONORMAL_ATOL
    n = check_int(n, "n")
    sigma = check_nonnegative(sigma, "sigma")
    check_choice(noise, "noise", ("eq11", "theorem16"))
    K, d, p = U.shape
    rng = as_generator(seed)
    if labels is None:
        labels = memberships(n, K, rng, probs)
    else:
        labels = check_labels(labels, n)
        if labels.size and labels.max() >= K:
            raise ValueError(f"labels must be < K = {K}, got maximum {labels.max()}")
    codes = gaussian_codes(p, n, rng, code_variance)
    signal = np.einsum("idp,pi->di", U[labels], codes) if n else np.zeros((d, 0))
    scale = sigma if noise == "eq11" else sigma / np.sqrt(d)
    Delta = scale * rng.standard_normal((d, n))
    Z = signal + Delta
    if unit_norm:
        Z = normalize_columns(Z)
    return TokenSet(Z=Z, labels=labels, signal=signal, noise=Delta, codes=codes, U=U)

