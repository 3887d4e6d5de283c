"""Coding rates and rate reduction, their gradients and the Hessian of R (long paper eqs. 7–17, 31, 109, 127).

Column convention: a token set is ``Z`` of shape ``(d, n)`` (tokens are columns); every function here also accepts
a leading batch axis ``(..., d, n)`` and then returns one value per batch element. Subspace bases ``U_[K]`` are one
array ``U`` of shape ``(K, d, p)``. ``eps`` is ε (not ε²): ``α = d/(nε²)``, ``β = p/(nε²)``.

Numerical choice (documented once here, used everywhere): all of R, ∇R and ∇²R are functions of the singular values
``s_i`` of ``Z`` and its singular vectors, and these are computed from the *smaller* Gram matrix (``ZZ*``, d × d,
when d ≤ n; ``Z*Z``, n × n, otherwise — Sylvester's identity ``det(I_n + αZ*Z) = det(I_d + αZZ*)`` in spectral
form), so time and memory are linear in the larger side (O(r²·N + r³) time, O(r·N) memory, r = min(d, n),
N = max(d, n)); :func:`_gram_svd` does it in four steps:

1. scale: ``Ẑ = Z / m`` with ``m = 2^⌊log2 max|Z|⌋`` (a power of two, so the division is exact and max|Ẑ| ∈ [1, 2)):
   the Gram matrix of Ẑ has entries ≤ 4N and cannot overflow for any finite Z (that of Z itself overflows once
   the tokens reach ~1e154), and m is carried separately (in the log domain where it matters);
2. ``Ĝ = ẐẐ*`` and its eigenvectors ``W`` (``eigh``, O(r³)): the left singular vectors of Z;
3. ``Y = W*Ẑ`` (r × N): its rows are ``ŝ_i q_i*`` with q_i the right singular vectors; the scaled singular values
   are the row norms ``ŝ_i = ‖Y_i‖`` (Rayleigh quotients of the *exact* Gram matrix, evaluated through Ẑ), not
   ``√λ_i(Ĝ)``: the eigenvalues of the rounded Gram matrix carry an absolute error ~u·‖Ẑ‖² (u the unit roundoff),
   which for the small singular values of a rank-deficient Z (duplicated tokens) at large α would add
   ~½ log(1 + α u ‖Z‖²) per zero singular value to R; the row norms are accurate to ~u·‖Ẑ‖ absolute, as an SVD;
4. ``s_i = m ŝ_i`` and ``log s_i = log m + log ŝ_i`` (the rate uses the latter, so s beyond the float64 range
   still gives the finite R).

Accuracy: against a LAPACK SVD of Z (2000 Gaussian draws, d, n ≤ 5, token scales 1e-3–30, ε 0.1–2) R agreed to
1.4e-15 relative and ∇R to 3.6e-14; in general the singular *vectors* of the small singular values inherit the
rounding of the Gram matrix, so ∇R and ∇²R[V] may differ from the SVD's by up to ~u·h(s_min)·s_max, u the unit
roundoff and h(s) = α/(1+αs²) — i.e. ~u·κ relative, κ = 1 + α‖Z‖² the condition number of ``I + αZZ*``; the tests
(tests/theory/test_coding_rate.py) bound every difference by such propagated-rounding terms, on
rank-deficient, duplicated and zero tokens, n < d and n ≫ d and scales 1e±300. The previous implementation (a thin
SVD of the wide ``(d, n)`` array, super-linear in n: 7.8 s for R and 24.8 s for ∇R^c at d = 384, n = 1e5 on one
core, benchmarks/RESULTS.md "float64 reference") is kept in the tests as that reference.

* ``R(Z) = ½ Σ_i log(1 + α s_i²)``, evaluated as ``½ log1p(α s_i²)`` where ``α s_i²`` is a normal float64 and as
  ``½ logaddexp(0, log α + 2 log s_i)`` where it would overflow (huge tokens or tiny ε) or underflow. This is
  exact (0) for zero singular values (zero tokens, or an exactly rank-deficient Gram matrix).
* ``∇R`` and ``∇²R`` use the bounded spectral functions ``αs/(1+αs²) = 1/(s + 1/(αs))`` and
  ``1/(1+αs²)`` (both ≤ max(1, √α/2)), so they are finite for every finite ``Z``.
"""
from __future__ import annotations

import numpy as np

from ._checks import check_bases, check_choice, check_labels, check_nonnegative, check_positive, check_tokens

__all__ = [
    "coding_rate",
    "compression_rate",
    "rate_reduction",
    "sparse_rate_reduction",
    "label_compression_rate",
    "coding_rate_grad",
    "compression_rate_grad",
    "coding_rate_hvp",
    "coding_rate_hessian",
    "coding_rate_hessian_eigenvalues",
    "coding_rate_hessian_norm",
    "project_onto_bases",
]


# ----------------------------------------------------------------------------------------------------------------
# spectral building blocks
# ----------------------------------------------------------------------------------------------------------------
def _log_alpha(d: int, n: int, eps: float) -> float:
    """log α = log(d / (n ε²)), computed in the log domain so that tiny or huge ε cannot overflow."""
    return float(np.log(d) - np.log(n) - 2.0 * np.log(eps))


def _alpha(d: int, n: int, eps: float) -> float:
    """α = d/(nε²) (eq. 8), or β = p/(nε²) with d → p; +inf only beyond the float64 range. With no tokens or no
    dimensions (d·n = 0) every array it multiplies is empty, and 0 is returned."""
    if d == 0 or n == 0:
        return 0.0
    with np.errstate(over="ignore"):
        return float(np.exp(_log_alpha(d, n, eps)))


def _half_log1p_alpha_s2(s: np.ndarray, log_s: np.ndarray, alpha: float, log_alpha: float) -> np.ndarray:
    """½ log(1 + α s²) for singular values s ≥ 0 given with ``log s`` (−inf at s = 0; s may be +inf where only log s
    is finite): ``½ log1p(αs·s)`` where that product is a normal float64 (relative error a few u), else
    ``½ logaddexp(0, log α + 2 log s)``, which cannot overflow and is exactly 0 at s = 0. The log form alone carries
    an absolute error ~u·|log α s²| in its argument, i.e. up to ~1e-13 relative for tiny α s² (hence both)."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        x = (alpha * s) * s
    direct = np.isfinite(x) & (x >= np.finfo(float).tiny)
    with np.errstate(divide="ignore"):
        return np.where(direct, 0.5 * np.log1p(np.where(direct, x, 0.0)), 0.5 * np.logaddexp(0.0, log_alpha + 2.0 * log_s))


def _spectral_functions(s: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``a = 1/(1+αs²)``, ``c = αs²/(1+αs²) = 1 − a`` and ``f = αs/(1+αs²)`` without overflow."""
    with np.errstate(over="ignore", divide="ignore", under="ignore", invalid="ignore"):
        x = np.where(s > 0, alpha * s * s, 0.0)  # exactly 0 at s = 0, also when α overflowed to inf
        a = np.where(np.isinf(x), 0.0, 1.0 / (1.0 + x))
        c = np.where(x > 0, 1.0 / (1.0 + 1.0 / x), 0.0)
        f = np.where(s > 0, 1.0 / (s + 1.0 / (alpha * s)), 0.0)
    return a, c, f


def _power_of_two_scale(X: np.ndarray) -> np.ndarray:
    """``m = 2^⌊log2 max|X|⌋`` over the last two axes (1 where X = 0), shape (..., 1, 1): X/m is exact."""
    top = np.abs(X).max(axis=(-2, -1), keepdims=True, initial=0.0)
    return np.where(top > 0, np.ldexp(1.0, np.frexp(top)[1] - 1), 1.0)


_TINY_NORM = 1e-140  # a row norm below this may have lost squares to underflow (entries below ~1e-154)


def _row_norms(Y: np.ndarray) -> np.ndarray:
    """Euclidean norms of the rows of Y (..., r, N) with no temporary of Y's size; the few rows whose sum of squares
    may have lost terms to underflow are recomputed after scaling by their largest entry (exactly 0 for zero rows)."""
    norms = np.sqrt(np.einsum("...ij,...ij->...i", Y, Y))
    small = norms < _TINY_NORM
    if small.any():
        rows = Y[small]
        top = np.abs(rows).max(axis=-1, initial=0.0)
        scaled = rows / np.where(top > 0, top, 1.0)[:, None]
        norms[small] = top * np.sqrt(np.einsum("ij,ij->i", scaled, scaled))
    return norms


def _wide_svd(X: np.ndarray, vectors: bool = True):
    """``X = W diag(s) Q*`` for a stack X (..., r, N) with r ≤ N, from the r × r Gram matrix (module docstring).

    Returns ``(log_s, s)`` without ``vectors``, else ``(W, s, log_s, Qt)``: W (..., r, r) orthogonal (a complete
    basis), s and log_s (..., r), Qt (..., r, N) with unit rows where s > 0 (orthogonal up to the rounding described
    in the module docstring) and zero rows where s = 0;
    s ≥ 0 descending up to rounding (``log s = −inf`` where s = 0; s = +inf only where the singular value itself is
    beyond the float64 range).
    """
    m = _power_of_two_scale(X)
    Xh = X / m
    W = np.linalg.eigh(Xh @ np.swapaxes(Xh, -1, -2))[1][..., ::-1]  # eigenvectors of Ĝ = X̂X̂* (r × r), descending
    Y = np.swapaxes(W, -1, -2) @ Xh  # rows ŝ_i q_i*
    del Xh
    rho = _row_norms(Y)
    with np.errstate(divide="ignore", over="ignore"):
        log_s = np.log(m[..., 0]) + np.log(rho)
        s = m[..., 0] * rho
    if not vectors:
        return log_s, s
    Y /= np.where(rho > 0, rho, 1.0)[..., None]  # unit rows q_i* (zero rows stay zero)
    return W, s, log_s, Y


def _transpose(X: np.ndarray) -> np.ndarray:
    return np.swapaxes(X, -1, -2)


def _gram_svd(Z: np.ndarray, vectors: bool = True):
    """Thin SVD ``Z = P diag(s) Q*`` of a stack ``(..., d, n)`` (d, n ≥ 1) from the smaller Gram matrix: that of
    ``Z`` when d ≤ n, else that of ``Z*``. Returns what :func:`_wide_svd` returns, with P (..., d, r) and
    Qt (..., r, n), r = min(d, n)."""
    d, n = Z.shape[-2:]
    if d <= n:
        return _wide_svd(Z, vectors)
    if not vectors:
        return _wide_svd(_transpose(Z), False)
    W, s, log_s, Qt = _wide_svd(_transpose(Z))
    return _transpose(Qt), s, log_s, _transpose(W)


def _batch_shape(Z: np.ndarray) -> tuple[int, ...]:
    return Z.shape[:-2]


def _stacked_bases(U: np.ndarray) -> np.ndarray:
    """``[U_1, …, U_K]`` as one ``(d, K·p)`` matrix."""
    K, d, p = U.shape
    return np.swapaxes(U, 0, 1).reshape(d, K * p)


def project_onto_bases(Z: np.ndarray, U: np.ndarray) -> np.ndarray:
    """The per-subspace codes ``U_k* Z`` for all k (eq. 12): shape ``(..., K, p, n)`` from Z (..., d, n), U (K, d, p).

    One matrix product ``[U_1, …, U_K]* Z`` (BLAS; an ``einsum`` here ran without BLAS: 7 s at d = 384, n = 1e5)."""
    K, _, p = U.shape
    return (_stacked_bases(U).T @ Z).reshape(Z.shape[:-2] + (K, p, Z.shape[-1]))


def _lift_from_bases(A: np.ndarray, U: np.ndarray) -> np.ndarray:
    """``Σ_k U_k A_k`` for A of shape (..., K, p, n): back to (..., d, n), as one product ``[U_1, …, U_K] A``."""
    K, _, p = U.shape
    return _stacked_bases(U) @ A.reshape(A.shape[:-3] + (K * p, A.shape[-1]))


def _tokens_and_bases(Z, U, name_Z: str = "Z", name_U: str = "U") -> tuple[np.ndarray, np.ndarray]:
    Z = check_tokens(Z, name_Z)
    U = check_bases(U, Z.shape[-2], name_U)
    return Z, U


# ----------------------------------------------------------------------------------------------------------------
# values
# ----------------------------------------------------------------------------------------------------------------
def coding_rate(Z, eps) -> np.ndarray | float:
    """Coding rate ``R(Z) = ½ logdet(I_n + α Z*Z) = ½ logdet(I_d + α ZZ*)``, ``α = d/(nε²)`` — eq. (8).

    Args:
        Z: tokens, shape ``(d, n)`` or ``(..., d, n)``.
        eps: the precision ε > 0.

    Returns:
        R(Z): a float for one token set, an array of shape ``(...)`` for a batch. ``n = 0`` (or ``d = 0``) gives 0.
        Computed as ``½ Σ_i log(1 + α s_i²)`` over the singular values of Z, from the smaller Gram matrix (see the
        module docstring): O(min(d, n)²·max(d, n)) time, O(dn) memory, finite for every finite Z.
    """
    Z = check_tokens(Z)
    eps = check_positive(eps, "eps")
    d, n = Z.shape[-2:]
    if d == 0 or n == 0:
        out = np.zeros(_batch_shape(Z))
    else:
        log_s, s = _gram_svd(Z, vectors=False)
        out = _half_log1p_alpha_s2(s, log_s, _alpha(d, n, eps), _log_alpha(d, n, eps)).sum(axis=-1)
    return float(out) if out.ndim == 0 else out


def compression_rate(Z, U, eps) -> np.ndarray | float:
    """Subspace compression term ``R^c(Z | U_[K]) = Σ_k R(U_k*Z) = ½ Σ_k logdet(I_n + β (U_k*Z)*(U_k*Z))`` — eq. (13).

    ``β = p/(nε²)`` (eq. 12) is exactly the α of eq. (8) for the ``p × n`` matrix ``U_k*Z``.

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``.
        U: bases ``(K, d, p)`` (orthonormality is the paper's assumption but not required by the formula).
        eps: ε > 0.

    Returns:
        R^c: float, or ``(...)`` for a batch.
    """
    Z, U = _tokens_and_bases(Z, U)
    eps = check_positive(eps, "eps")
    out = np.asarray(coding_rate(project_onto_bases(Z, U), eps)).sum(axis=-1)
    return float(out) if out.ndim == 0 else out


def rate_reduction(Z, U, eps) -> np.ndarray | float:
    """Rate reduction ``ΔR(Z | U_[K]) = R(Z) − R^c(Z | U_[K])`` — eqs. (7), (14). Shapes as :func:`compression_rate`."""
    Z, U = _tokens_and_bases(Z, U)
    eps = check_positive(eps, "eps")
    out = np.asarray(coding_rate(Z, eps)) - np.asarray(compression_rate(Z, U, eps))
    return float(out) if out.ndim == 0 else out


def sparse_rate_reduction(Z, U, eps, lam, norm: str = "l1") -> np.ndarray | float:
    """Sparse rate reduction ``R(Z) − R^c(Z | U_[K]) − λ‖Z‖`` (the objective maximised in eqs. 16/17).

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; U: bases ``(K, d, p)``; eps: ε > 0; lam: λ ≥ 0.
        norm: ``"l1"`` (eq. 17, entrywise ℓ1 norm — the relaxation CRATE optimises) or ``"l0"`` (eq. 16, the number
            of non-zero entries, counted exactly).

    Returns:
        The objective (to be maximised): float, or ``(...)`` for a batch. Its negative is the energy E of eq. (19).
    """
    Z, U = _tokens_and_bases(Z, U)
    eps = check_positive(eps, "eps")
    lam = check_nonnegative(lam, "lam")
    check_choice(norm, "norm", ("l1", "l0"))
    sparsity = np.abs(Z).sum(axis=(-2, -1)) if norm == "l1" else np.count_nonzero(Z, axis=(-2, -1)).astype(float)
    out = np.asarray(rate_reduction(Z, U, eps)) - lam * sparsity
    return float(out) if out.ndim == 0 else out


def label_compression_rate(Z, labels, eps, weighting: str = "paper", num_classes: int | None = None) -> float:
    """Label-based compression term ``R^c(Z | Π_[K]) = ½ Σ_k logdet(I + γ_k Z Π_k Z*)``, ``γ_k = d/(n_k ε²)`` — eq. (9).

    ``Z Π_k Z* = Z_k Z_k*`` with ``Z_k`` the ``n_k`` tokens of group k, so each term is the coding rate (8) of
    ``Z_k`` on its own (its α is exactly γ_k). Empty groups contribute 0.

    Args:
        Z: tokens ``(d, n)`` (no batch axis: groups differ per set).
        labels: integer group of each token, shape ``(n,)``, values in ``0 .. K−1``.
        eps: ε > 0.
        weighting: ``"paper"`` — eq. (9) of this paper, unweighted sum; ``"mcr2"`` — the original MCR² (Yu et al.
            2020) weights term k by ``tr(Π_k)/n = n_k/n`` (the long paper drops these weights).
        num_classes: K (default ``labels.max() + 1``); only matters for documenting empty groups.

    Returns:
        The compression term, a float.
    """
    Z = check_tokens(Z, batch=False)
    labels = check_labels(labels, Z.shape[1])
    eps = check_positive(eps, "eps")
    check_choice(weighting, "weighting", ("paper", "mcr2"))
    n = Z.shape[1]
    K = int(labels.max()) + 1 if labels.size else 0
    if num_classes is not None:
        if num_classes < K:
            raise ValueError(f"num_classes must be >= labels.max() + 1 = {K}, got {num_classes}")
        K = int(num_classes)
    total = 0.0
    for k in range(K):
        Zk = Z[:, labels == k]
        weight = 1.0 if weighting == "paper" else Zk.shape[1] / n
        total += weight * coding_rate(Zk, eps)
    return float(total)


# ----------------------------------------------------------------------------------------------------------------
# gradients
# ----------------------------------------------------------------------------------------------------------------
def coding_rate_grad(Z, eps) -> np.ndarray:
    """Gradient ``∇_Z R(Z) = α Z (I_n + αZ*Z)^{-1} = α (I_d + αZZ*)^{-1} Z`` — eq. (109) (Lemma 10).

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; eps: ε > 0.

    Returns:
        Array of Z's shape. Computed as ``P diag(αs/(1+αs²)) Q*`` from the thin SVD ``Z = P diag(s) Q*`` of the
        smaller Gram matrix (module docstring; linear in max(d, n)), finite for every finite Z (each singular value
        of the gradient is at most √α/2).
    """
    Z = check_tokens(Z)
    eps = check_positive(eps, "eps")
    d, n = Z.shape[-2:]
    if d == 0 or n == 0:
        return np.zeros_like(Z)
    Uz, s, _, Vt = _gram_svd(Z)
    _, _, f = _spectral_functions(s, _alpha(d, n, eps))
    return (Uz * f[..., None, :]) @ Vt


def compression_rate_grad(Z, U, eps) -> np.ndarray:
    """Gradient ``∇_Z R^c(Z | U_[K]) = β Σ_k U_k (U_k*Z) (I_n + β(U_k*Z)*(U_k*Z))^{-1}`` — eqs. (31)=(96), (235).

    By the chain rule it is ``Σ_k U_k ∇R(U_k*Z)`` with ∇R of eq. (109) at ``α = β = p/(nε²)``.

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; U: bases ``(K, d, p)``; eps: ε > 0.

    Returns:
        Array of Z's shape.
    """
    Z, U = _tokens_and_bases(Z, U)
    eps = check_positive(eps, "eps")
    return _lift_from_bases(coding_rate_grad(project_onto_bases(Z, U), eps), U)


# ----------------------------------------------------------------------------------------------------------------
# Hessian of R
# ----------------------------------------------------------------------------------------------------------------
def coding_rate_hvp(Z, V, eps) -> np.ndarray:
    """Hessian operator of R applied to a direction V — eq. (127):

    ``∇²R(Z)[V] = α V (I+αZ*Z)^{-1} − α² Z (I+αZ*Z)^{-1} (Z*V + V*Z) (I+αZ*Z)^{-1}``.

    Using ``αZ(I+αZ*Z)^{-1} = ∇R(Z) =: G`` and ``I − αZ(I+αZ*Z)^{-1}Z* = (I+αZZ*)^{-1}``, this equals the manifestly
    symmetric form ``α (I_d + αZZ*)^{-1} V (I_n + αZ*Z)^{-1} − G V* G``, which is what is evaluated, on the smaller
    side: for d ≤ n, with ``Z = W diag(s) Q*`` (W a complete d × d basis, module docstring),

    * ``α(I_d + αZZ*)^{-1} V = W diag(h) W*V``, ``h = α/(1+αs²) = 1/(1/α + s²)`` (bounded; no cancellation);
    * ``Y (I_n + αZ*Z)^{-1} = Y − (YQ)Q* + (YQ) diag(a) Q*``, ``a = 1/(1+αs²)``: (projection onto the n − d
      dimensional complement) + (scaled part in the span), so nothing cancels when a is tiny (huge tokens);
    * ``G V* G = (G V*) G`` with ``G V*`` d × d.

    For d > n the same is done for Z* (``∇²R(Z)[V] = (∇²R(Z*)[V*])*`` with the same α). Time O(d n min(d, n)), memory
    O(dn) per direction.

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; V: directions ``(..., d, n)`` whose batch axes broadcast against
            Z's (e.g. one Z and a stack of directions); eps: ε > 0.

    Returns:
        Array of the broadcast shape.
    """
    Z = check_tokens(Z)
    V = check_tokens(V, "V")
    if V.shape[-2:] != Z.shape[-2:]:
        raise ValueError(f"V must have the shape of Z's token matrices {Z.shape[-2:]}, got {V.shape[-2:]}")
    eps = check_positive(eps, "eps")
    d, n = Z.shape[-2:]
    if d == 0 or n == 0:
        return np.zeros(np.broadcast_shapes(Z.shape, V.shape))
    alpha = _alpha(d, n, eps)
    if d > n:
        return _transpose(_wide_hvp(_transpose(Z), _transpose(V), alpha))
    return _wide_hvp(Z, V, alpha)


def _wide_hvp(X: np.ndarray, V: np.ndarray, alpha: float) -> np.ndarray:
    """``∇²R(X)[V]`` (127) for X (..., r, N), r ≤ N, V broadcasting against X, as in :func:`coding_rate_hvp`."""
    W, s, _, Qt = _wide_svd(X)
    a, _, f = _spectral_functions(s, alpha)
    with np.errstate(divide="ignore", over="ignore"):
        h = 1.0 / (1.0 / alpha + s * s) if alpha > 0 else np.zeros_like(s)  # α/(1 + αs²), no α·0
    Wt, Q = _transpose(W), _transpose(Qt)
    left = W @ (h[..., :, None] * (Wt @ V))  # α (I + αXX*)^{-1} V
    LQ = left @ Q
    both = left - LQ @ Qt + (LQ * a[..., None, :]) @ Qt  # · (I + αX*X)^{-1}
    G = (W * f[..., None, :]) @ Qt
    return both - (G @ _transpose(V)) @ G


def coding_rate_hessian(Z, eps) -> np.ndarray:
    """The Hessian of R at Z as a dense symmetric ``(dn, dn)`` matrix (eq. 127), in the row-major order of
    ``Z.reshape(-1)``: column j is ``∇²R(Z)[E_j]`` for the j-th unit matrix ``E_j``. For small d·n only.

    Args:
        Z: tokens ``(d, n)`` (no batch axis); eps: ε > 0.
    """
    Z = check_tokens(Z, batch=False)
    eps = check_positive(eps, "eps")
    d, n = Z.shape
    basis = np.eye(d * n).reshape(d * n, d, n)
    H = coding_rate_hvp(Z, basis, eps).reshape(d * n, d * n).T  # one decomposition of Z, broadcast over the basis
    return 0.5 * (H + H.T)  # symmetric up to rounding; symmetrise the rounding away


def coding_rate_hessian_eigenvalues(Z, eps) -> np.ndarray:
    """All ``d·n`` eigenvalues of the Hessian operator ∇²R(Z) (eq. 127) in closed form, sorted ascending.

    Derivation (ours; checked against :func:`coding_rate_hessian` in the tests). Write ``Z = P S Q*`` (full SVD),
    ``x_i = α s_i²`` for the ``r = min(d, n)`` singular values, and ``V' = P* V Q``. In these coordinates the
    operator ``α(I+αZZ*)^{-1} V (I+αZ*Z)^{-1} − G V* G`` acts entrywise, coupling only ``V'_ij`` with ``V'_ji``:

    * ``(i, i)``, i ≤ r:                  ``α (1 − x_i) / (1 + x_i)²``            ∈ [−α/8, α];
    * ``{(i, j), (j, i)}``, i < j ≤ r:    ``α (1 ± √(x_i x_j)) / ((1 + x_i)(1 + x_j))``;
    * ``(i, j)`` with i > r or j > r:     ``α / (1 + x_k)``, k the index ≤ r, with multiplicity |d − n|.

    Hence the spectrum lies in ``[−α/8, α]``: ``‖∇²R(Z)‖ ≤ α`` with equality iff Z has a zero singular value
    (and is approached as Z → 0), and ``−∇²R(Z) ⪯ (α/8) I``. Lemma 11 bounds ‖∇²R‖/α by 9/4.

    Extreme scales. Each eigenvalue is evaluated with α multiplied *into* a bounded factor, never as ``α · (…)``:
    with ``h_i = α/(1+x_i) = 1/(1/α + s_i²)``, ``c_i = x_i/(1+x_i)``, ``a_i = 1/(1+x_i)`` and
    ``f_i = αs_i/(1+x_i)``, the three kinds are ``h_i (a_i − c_i)``, ``h_i a_j ± f_i f_j`` and ``h_k``. As ε → 0
    (α → ∞, even past the float64 range) they tend to ``−1/s_i²``, ``±1/(s_i s_j)`` and ``1/s_k²``: finite for
    full-rank Z (the exact values at ε = 1e-300), where ``α · (…)`` gave ``inf · 0 = NaN``, and no product of two
    underflowing factors is formed (which silently zeroed the pair eigenvalues near ε = 1e-150). As α → 0 they are
    ``α (1 + O(α s²))``, 0 once α underflows. Only a rank-deficient Z with α beyond the float64 range gives +inf,
    which is then the exact value α rounded.

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; eps: ε > 0.

    Returns:
        Array ``(..., d·n)``.
    """
    Z = check_tokens(Z)
    eps = check_positive(eps, "eps")
    d, n = Z.shape[-2:]
    r = min(d, n)
    alpha = _alpha(d, n, eps)
    s = -np.sort(-_gram_svd(Z, vectors=False)[1], axis=-1) if r else np.zeros(Z.shape[:-2] + (0,))  # descending
    a, c, f = _spectral_functions(s, alpha)
    with np.errstate(divide="ignore", over="ignore"):
        h = 1.0 / (1.0 / alpha + s * s) if alpha > 0 else np.zeros_like(s)  # α/(1 + αs²), no α·0
    diag = h * (a - c)  # α(1 − x)/(1 + x)²
    iu, ju = np.triu_indices(r, k=1)
    with np.errstate(invalid="ignore"):  # inf · 0 when both x_i, x_j overflow: the exact value is ≤ 1/x_j → 0
        prod = np.where(a[..., ju] > 0, h[..., iu] * a[..., ju], 0.0)  # α/((1+x_i)(1+x_j))
    with np.errstate(over="ignore"):  # only when the exact value (≈ 1/(s_i s_j)) is beyond the float64 range
        cross = f[..., iu] * f[..., ju]  # α√(x_i x_j)/((1+x_i)(1+x_j)) = f_i f_j
    rect = np.repeat(h, abs(d - n), axis=-1)  # α/(1 + x_k)
    with np.errstate(over="ignore"):
        eig = np.concatenate([diag, prod + cross, prod - cross, rect], axis=-1)
    return np.sort(eig, axis=-1)


def coding_rate_hessian_norm(Z, eps) -> np.ndarray | float:
    """Operator norm ``‖∇²R(Z)‖ = sup_{‖V‖_F ≤ 1} ‖∇²R(Z)[V]‖_F`` of the Hessian (127) — the quantity that
    Lemma 11 (eq. 136) bounds by ``9α/4``.

    Computed exactly from the closed-form spectrum (:func:`coding_rate_hessian_eigenvalues`): the largest absolute
    eigenvalue of the symmetric operator. It never exceeds α (see that function), so the constant 9/4 is loose.
    Finite at every scale for full-rank Z (→ 1/s_min² as ε → 0; see the eigenvalue function).

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; eps: ε > 0.

    Returns:
        float, or ``(...)`` for a batch.
    """
    eig = coding_rate_hessian_eigenvalues(Z, eps)
    out = np.abs(eig).max(axis=-1, initial=0.0)
    return float(out) if np.ndim(out) == 0 else out
