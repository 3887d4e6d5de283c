"""A scale-free measurement protocol for "layers decrease R^c" (Sec. 4.2, Figs. 14–15; paper-notes §2.24).

R^c(Z | U_[K]) of eq. (13) grows with the tokens' energy: at a fixed ε it cannot tell a layer that compresses the
tokens towards the subspaces from one that merely shrinks them. This module measures a token set ``Z`` (d, n)
against bases ``U`` (K, d, p) with quantities that separate structure from scale (column convention):

* :func:`official_compression_rate` — R^c of per-subspace unit-norm codes, as the authors' figures are measured
  (official-implementation.md: ``Σ_k R(normalize(U_k*Z))`` at ε² = 0.01); scale-free by construction.
* :func:`isotropic_tokens` — the yardstick: tokens with the same count, dimension and norms as ``Z`` but uniformly
  random directions. ``R^c(Z) / E R^c(isotropic)`` is 1 for tokens without structure (:func:`token_profile`).
* :func:`alignment` — each token's energy fraction ``‖P_k z_i‖²/‖z_i‖²`` in its own subspace (its label when known,
  else the subspace holding most of its energy), P_k the orthogonal projector onto span(U_k); 1 = on the subspace.
* :func:`aligned_tokens` — the floor: every token moved onto its own subspace with its norm kept, i.e. what perfect
  alignment would give under the same measures.

``U`` need not be orthonormal (a trained model's U is not): the paper's R^c and the authors' normalised R^c use it
as is (eq. 13); the yardstick ratios and the projectors use only its span (each basis orthonormalised), so that
neither the tokens' norms nor ‖U‖ enters them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ._checks import check_bases, check_int, check_labels, check_positive, check_tokens
from .coding_rate import coding_rate, compression_rate, project_onto_bases
from .synthetic import as_generator, normalize_columns

__all__ = [
    "official_compression_rate",
    "subspace_projectors",
    "subspace_energy",
    "own_subspace",
    "alignment",
    "isotropic_tokens",
    "aligned_tokens",
    "TokenProfile",
    "token_profile",
]

OFFICIAL_EPS = 0.1
"""ε of the authors' measurement code (ε² = 0.01)."""


def _tokens_bases(Z, U) -> tuple[np.ndarray, np.ndarray]:
    Z = check_tokens(Z, batch=False)
    return Z, check_bases(U, Z.shape[0])


def official_compression_rate(Z, U, eps=OFFICIAL_EPS) -> float:
    """R^c of per-subspace unit-norm codes — the authors' figure protocol: ``Σ_k ½ logdet(I + β Ŵ_k*Ŵ_k)`` with
    ``Ŵ_k`` the columns of ``U_k*Z`` scaled to unit norm, β = p/(nε²) (eqs. 12–13; ε = 0.1 by default).

    Args:
        Z: tokens (d, n); U: bases (K, d, p); eps: ε > 0.
    """
    Z, U = _tokens_bases(Z, U)
    return float(_official(Z, U, check_positive(eps, "eps")))


def _official(Z: np.ndarray, U: np.ndarray, eps: float) -> np.ndarray:
    """official_compression_rate of a stack Z (..., d, n): (...)."""
    return np.sum(coding_rate(normalize_columns(project_onto_bases(Z, U)), eps), axis=-1)


def subspace_projectors(U) -> np.ndarray:
    """Orthogonal projectors onto span(U_k), (K, d, d): ``U_k U_k^+`` (= U_kU_k* for orthonormal U_k)."""
    U = check_bases(U)
    return np.einsum("kdp,kpe->kde", U, np.linalg.pinv(U))


def subspace_energy(Z, U) -> np.ndarray:
    """Fractions ``‖P_k z_i‖² / ‖z_i‖²`` of every token's energy in every subspace, (K, n); zero tokens give 0."""
    Z, U = _tokens_bases(Z, U)
    return _energy(Z, subspace_projectors(U))


def _energy(Z: np.ndarray, P: np.ndarray) -> np.ndarray:
    """subspace_energy of a stack Z (..., d, n) with projectors P (K, d, d): (..., K, n)."""
    norms2 = np.sum(Z * Z, axis=-2)[..., None, :]
    Zk = Z[..., None, :, :]
    energy = np.sum((P @ Zk) * Zk, axis=-2)  # z*P_k z = ‖P_k z‖² (P_k symmetric, idempotent)
    return np.divide(energy, norms2, out=np.zeros(energy.shape), where=norms2 > 0)


def own_subspace(Z, U) -> np.ndarray:
    """Each token's own subspace when no labels are known: the k with the largest energy fraction, (n,)."""
    return np.argmax(subspace_energy(Z, U), axis=0)


def _labels(Z: np.ndarray, U: np.ndarray, labels) -> np.ndarray | None:
    if labels is None:
        return None
    labels = check_labels(labels, Z.shape[1])
    if labels.size and labels.max() >= U.shape[0]:
        raise ValueError(f"labels must be < K = {U.shape[0]}, got maximum {labels.max()}")
    return labels


def _own_energy(energy: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    """The own-subspace fraction of every token from energies (..., K, n): labels, or the largest fraction."""
    if labels is None:
        return energy.max(axis=-2)
    return np.take_along_axis(energy, np.broadcast_to(labels, energy.shape[:-2] + (1, labels.size)), axis=-2)[..., 0, :]


def alignment(Z, U, labels=None) -> float:
    """Mean over tokens of the energy fraction in the token's own subspace, ``‖P_{s_i} z_i‖²/‖z_i‖²`` ∈ [0, 1].

    Args:
        Z: tokens (d, n); U: bases (K, d, p); labels: memberships s_i (n,), or None for :func:`own_subspace`.
    """
    Z, U = _tokens_bases(Z, U)
    if not Z.shape[1]:
        return float("nan")
    return float(np.mean(_own_energy(_energy(Z, subspace_projectors(U)), _labels(Z, U, labels))))


def isotropic_tokens(Z, seed=None, draws: int | None = None) -> np.ndarray:
    """The yardstick's tokens: uniformly random directions with the column norms of ``Z`` (d, n); with ``draws``,
    a stack (draws, d, n) of independent sets."""
    Z = check_tokens(Z, batch=False)
    shape = Z.shape if draws is None else (check_int(draws, "draws", minimum=1),) + Z.shape
    directions = normalize_columns(as_generator(seed).standard_normal(shape))
    return directions * np.linalg.norm(Z, axis=0)


def aligned_tokens(Z, U, labels=None) -> np.ndarray:
    """The floor: each token projected onto its own subspace and rescaled to its original norm (d, n).

    A token with no energy in its own subspace is left unchanged.
    """
    Z, U = _tokens_bases(Z, U)
    return _aligned(Z, subspace_projectors(U), _labels(Z, U, labels))


def _aligned(Z: np.ndarray, P: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    own = np.argmax(_energy(Z, P), axis=0) if labels is None else labels
    projected = np.empty_like(Z)
    for k, P_k in enumerate(P):
        projected[:, own == k] = P_k @ Z[:, own == k]
    kept = np.linalg.norm(projected, axis=0)
    scale = np.divide(np.linalg.norm(Z, axis=0), kept, out=np.zeros_like(kept), where=kept > 0)
    return np.where(kept > 0, projected * scale, Z)


@dataclass
class TokenProfile:
    """The protocol's numbers for one token set (see :func:`token_profile`).

    Attributes:
        rate: R^c(Z | U) at ε (eq. 13, the paper's measure; grows with the tokens' energy and with ‖U‖).
        normalised: :func:`official_compression_rate` (per-subspace unit-norm codes) at the authors' ε = 0.1.
        relative: R^c(Z | Q) / isotropic_rate with Q the orthonormalised bases — 1 means no more structure than
            random directions of the same norms.
        relative_normalised: the normalised rate with Q over isotropic_normalised.
        alignment: mean own-subspace energy fraction; norm: mean token ℓ2 norm.
        isotropic_rate, isotropic_normalised, isotropic_alignment: the yardstick (means over the isotropic draws,
            rates with Q): the ceiling of the rates, the floor of the alignment.
        aligned_relative, aligned_relative_normalised: relative and relative_normalised of :func:`aligned_tokens` —
            the floor perfect alignment would reach (the alignment ceiling is 1).
    """

    rate: float
    normalised: float
    relative: float
    relative_normalised: float
    alignment: float
    norm: float
    isotropic_rate: float
    isotropic_normalised: float
    isotropic_alignment: float
    aligned_relative: float
    aligned_relative_normalised: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def token_profile(Z, U, eps, *, labels=None, official_eps=OFFICIAL_EPS, draws: int = 8, seed=None) -> TokenProfile:
    """Every measure of the protocol for one token set, with its isotropic yardstick and aligned floor.

    Args:
        Z: tokens (d, n); U: bases (K, d, p); eps: ε of R^c (eq. 13); labels: memberships (n,) or None
            (:func:`own_subspace`); official_eps: ε of the authors' protocol; draws: isotropic token sets averaged
            for the yardstick (its Monte-Carlo error shrinks as 1/√draws); seed: int, None or Generator.

    Returns:
        :class:`TokenProfile`.
    """
    Z, U = _tokens_bases(Z, U)
    eps, official_eps = check_positive(eps, "eps"), check_positive(official_eps, "official_eps")
    labels = _labels(Z, U, labels)
    P, Q = subspace_projectors(U), np.linalg.qr(U)[0]  # Q_k: an orthonormal basis of span(U_k)
    iso = isotropic_tokens(Z, seed, draws)
    sets = np.concatenate([Z[None], _aligned(Z, P, labels)[None], iso])  # the tokens, the floor, the yardstick
    rates, normalised = compression_rate(sets, Q, eps), _official(sets, Q, official_eps)
    iso_rate, iso_normalised = float(np.mean(rates[2:])), float(np.mean(normalised[2:]))
    own = _own_energy(_energy(np.concatenate([Z[None], iso]), P), labels)
    return TokenProfile(
        rate=float(compression_rate(Z, U, eps)),
        normalised=float(_official(Z, U, official_eps)),
        relative=float(rates[0]) / iso_rate,
        relative_normalised=float(normalised[0]) / iso_normalised,
        alignment=float(np.mean(own[0])),
        norm=float(np.mean(np.linalg.norm(Z, axis=0))),
        isotropic_rate=iso_rate,
        isotropic_normalised=iso_normalised,
        isotropic_alignment=float(np.mean(own[1:])),
        aligned_relative=float(rates[1]) / iso_rate,
        aligned_relative_normalised=float(normalised[1]) / iso_normalised,
    )
