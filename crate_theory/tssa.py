"""The Token Statistics Transformer's compression step: variational rate, membership Π and TSSA (column convention).

ToST (Wu, Ding, Lu, Pai, Zhang, Wang, Yu, Ma, Haeffele, "Token Statistics Transformer: Linear-Time Attention via
Variational Rate Reduction", ICLR 2025, arXiv 2412.17810). **Source note:** the paper's text could not be reached
from this project — only its abstract, the project page and the authors' public code (RobinWu218/ToST: its vision
``AttentionTSSA`` and language ``CausalSelfAttention_TSSA``). The derivation below is therefore written out in full
from the MCR² compression term and the abstract's description ("a variational form of the MCR² objective ... whose
unrolled gradient descent ... is Token Statistics Self-Attention"), and the docstrings cite ToST's equation numbers
only where a public source anchors them (the code's comment "Pi from Eq. 10"); elsewhere they name the object.

Notation. Tokens ``Z`` (d, n) or (..., d, n); subspace bases ``U`` (K, d, p); a membership matrix ``Π`` (n, K) or
(..., n, K) whose row j is token j's soft assignment to the K groups (each row on the simplex), column k is ``π_k``
and ``n_k = ⟨π_k, 1⟩`` (so ``Σ_k n_k = n``). ``c = d/ε²`` and ``f(x) = log(1 + c x)``.

1. The MCR² compression term with soft memberships (Yu et al. 2020; CRATE's long paper, eq. 9, with MCR²'s weights
   n_k/n) is ``R^c(Z, Π) = ½ Σ_k (n_k/n) logdet(I + c M_k)``, ``M_k = Z diag(π_k) Z*/n_k`` — the second moment of
   group k. Its projected form on the bases is ``R^c_U(Z, Π) = ½ Σ_k (n_k/n) logdet(I_p + c U_k*M_k U_k)``
   (`projected_compression`); with ``U_k = I_d`` (or any orthogonal d × d) it is R^c(Z, Π) itself.
2. **Variational form.** For concave f and a symmetric M ⪰ 0, ``Σ_i f(λ_i(M)) ≤ Σ_i f((Q*MQ)_ii)`` for every
   orthogonal Q (the diagonal of Q*MQ is majorised by the eigenvalues, Schur–Horn, and Σ f is Schur-concave), with
   equality when Q diagonalises M. On the bases it gives ToST's variational compression term
   (`variational_compression`)

       R^c_var(Z, Π | U_[K]) = ½ Σ_k (n_k/n) Σ_{i=1}^{p} f( [(U_k*Z)^{⊙2} π_k]_i / n_k ) ≥ R^c_U(Z, Π)

   — a function of the *token statistics* ``s_k = (U_k*Z)^{⊙2} π_k / n_k`` (the π-weighted mean square of each
   projected coordinate) instead of a log-determinant. For p × p ``M'_k = U_k*M_k U_k`` the inequality is
   Hadamard's ``det(I + cM'_k) ≤ Π_i (1 + c (M'_k)_ii)`` (Q = I_p above): it holds for any U_k, and is an equality
   exactly when every M'_k is diagonal (U_k spanned by eigenvectors of M_k); with orthogonal d × d bases the right
   side is MCR²'s R^c(Z, Π).
3. **Gradient.** With Π held fixed, ``∂s_ki/∂z_j = (2/n_k) π_kj (u_ki*z_j) u_ki``, so (`variational_compression_grad`)

       ∇_Z R^c_var = (1/n) Σ_k U_k D_k (U_k*Z) diag(π_k),     D_k = diag(f'(s_k)) = diag(c / (1 + c s_k)).

4. **TSSA** is one gradient-descent step of size τ on R^c_var (`tssa`): ``Z⁺ = Z + TSSA(Z)``,
   ``TSSA(Z | U_[K]) = −(τ/n) Σ_k U_k D_k (U_k*Z) diag(π_k)``: every projected token is rescaled coordinate-wise by a
   factor read off the group's statistics, so the cost is O(K p n) — linear in n — and no n × n matrix appears.
5. **Causal TSSA.** Token t may only use tokens ≤ t. The derived step for it is the gradient of the variational rate
   of its prefix with respect to its own (last) token: ``−τ ∂R^c_var(Z_{≤t}, Π_{≤t})/∂z_t =
   −(τ/t) Σ_k π_kt U_k D_k^{(t)} U_k*z_t`` with the prefix statistics ``s_k^{(t)} = Σ_{j≤t} π_kj (U_k*z_j)^{⊙2} /
   Σ_{j≤t} π_kj`` (running sums: still linear). It equals the bidirectional TSSA at t = n.
6. **Π** is computed from the tokens. The public code computes it as a softmax over the K groups of each token's
   energies in the subspaces times a learned inverse temperature, each coordinate's energy normalised by its sum over
   the tokens (its comment: "Pi from Eq. 10"; the paper's eq. 10 itself was not available to us):
   `membership(normalize=True)`. Without the normalisation (`membership`, the "energy" rule ``‖U_k*z_j‖²``) π_j
   depends on token j alone, so it is causal as it stands; the normalised rule needs the prefix sums when causal.

Step size. The network's free output map absorbs τ/n (as CRATE's absorbs MSSA's β = p/(nε²)); the public code thus
takes the step τ ∝ n (τ_t ∝ t causally), i.e. every token moves by O(1) whatever the number of tokens.

The public code's two variants, re-derived here from reading it (`public_vision_heads`, `public_language_heads`):
both compute the per-head term ``−π_k ⊙ D_k (U_k*Z)`` of item 4 with c = 1 for their own Π (vision: energies
normalised per coordinate by their sum over all tokens; language: by their sum over the prefix, plus a learned
per-position bias, with the prefix statistics of item 5). With the bias at 0 the language variant is the causal form
of the vision one: every sum the vision variant takes over all tokens, it takes over the prefix.

Scale. The energies and statistics are squares of the codes and overflow once the tokens reach ~1e154 (underflow
below ~1e-154), where Π, R^c_var and the heads are still finite numbers. Every function therefore works on
``Ẑ = Z/m`` with ``m = 2^⌊log2 max|Z|⌋`` (a power of two: exact, and equal to the plain formulas bit for bit
wherever those do not overflow) and carries m apart: Π's logits are shifted before m² multiplies them (so a
product beyond the float64 range gives the exact limit), ``log(1 + c m² ŝ)`` is taken in the log domain where
``c m² ŝ`` overflows, and the gradient's coefficient ``c m/(1 + c m² ŝ)`` as ``1/(1/(c m) + m ŝ)`` there.
"""
from __future__ import annotations

import numpy as np

from ._checks import as_float_array, check_bases, check_positive, check_same_size, check_tokens
from .coding_rate import _lift_from_bases, _power_of_two_scale, project_onto_bases

__all__ = [
    "membership",
    "token_statistics",
    "variational_compression",
    "projected_compression",
    "variational_compression_grad",
    "tssa_heads",
    "tssa",
    "tssa_free",
    "public_vision_heads",
    "public_language_heads",
]

MEMBERSHIP_ATOL = 1e-9
"""How far a row of Π may be from summing to 1 (float64 softmax rows sum to 1 within ~1e-16 · K)."""


def _inputs(Z, U) -> tuple[np.ndarray, np.ndarray]:
    Z = check_tokens(Z)
    return Z, check_bases(U, Z.shape[-2])


def _check_membership(Pi, Z: np.ndarray, K: int) -> np.ndarray:
    """Π of shape (..., n, K) (batch axes broadcast with Z's), entries ≥ 0, rows summing to 1."""
    Pi = as_float_array(Pi, "Pi", min_ndim=2, shape_hint="(..., n, K): row j is token j's membership")
    check_same_size(Pi.shape[-2], Z.shape[-1], "Pi", "rows (one per token, n)")
    check_same_size(Pi.shape[-1], K, "Pi", "columns (one per subspace, K)")
    if (Pi < 0).any():
        raise ValueError(f"Pi must be non-negative, got minimum {Pi.min():.3g}")
    worst = np.abs(Pi.sum(axis=-1) - 1.0).max(initial=0.0)
    if worst > MEMBERSHIP_ATOL:
        raise ValueError(f"Pi's rows must sum to 1 (each token's membership over the K groups); off by {worst:.3g}")
    return Pi


def _visible_sums(X: np.ndarray, causal: bool) -> np.ndarray:
    """Per token t, the sum of X over the tokens t sees (all, or j ≤ t): X (..., n) → (..., n)."""
    return np.cumsum(X, axis=-1) if causal else np.broadcast_to(X.sum(axis=-1, keepdims=True), X.shape)


def _softmax_groups(logits: np.ndarray, m: np.ndarray | float = 1.0) -> np.ndarray:
    """Softmax over the K groups (axis −2 of (..., K, n)) of ``logits · m²``, returned as Π (..., n, K). The shift by
    the maximum comes first, so a product beyond the float64 range gives the exact limit: −inf, weight 0, for every
    group below the maximum (m finite: the maximum's own logit stays exactly 0)."""
    shifted = logits - logits.max(axis=-2, keepdims=True)
    with np.errstate(over="ignore", under="ignore"):
        E = np.exp(shifted * m * m)
    return np.swapaxes(E / E.sum(axis=-2, keepdims=True), -1, -2)


def _scaled(Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(Z/m, m)``, ``m = 2^⌊log2 max|Z|⌋`` per token set (..., 1, 1): the module docstring's "Scale"."""
    m = _power_of_two_scale(Z)
    return Z / m, m


def _log1p_scaled(c: float, m: np.ndarray, s_hat: np.ndarray) -> np.ndarray:
    """``log(1 + c·m²·ŝ)`` for ŝ ≥ 0: ``log1p`` of the product where it is finite (the plain formula's value bit for
    bit), ``logaddexp(0, log c + 2 log m + log ŝ)`` where it overflows."""
    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        x = c * (m * (m * s_hat))
        direct = np.isfinite(x)
        return np.where(direct, np.log1p(np.where(direct, x, 0.0)),
                        np.logaddexp(0.0, np.log(c) + 2.0 * np.log(m) + np.log(s_hat)))


def _codes_times_factor(c: float, m: np.ndarray, A_hat: np.ndarray, s_hat: np.ndarray, weights=1.0) -> np.ndarray:
    """``w ⊙ D ⊙ A``, ``D = c/(1 + c s)``, for codes ``A = m·Â`` and statistics ``s = m²·ŝ`` (broadcasting): the plain
    formula where ``c s`` is finite, ``w Â/(1/(c m) + m ŝ)`` where it overflows (the exact value, ~Â/(m ŝ), is
    finite)."""
    with np.errstate(over="ignore", divide="ignore", under="ignore"):
        s = m * (m * s_hat)
        overflow = ~np.isfinite(c * s)
        plain = weights * (c / (1.0 + c * s)) * (m * A_hat)
        if not overflow.any():
            return plain
        return np.where(overflow, weights * (A_hat / (1.0 / (c * m) + m * s_hat)), plain)


def membership(Z, U, temperature=1.0, *, normalize: bool = False, causal: bool = False) -> np.ndarray:
    """The membership matrix Π (..., n, K) — item 6 of the module docstring (the public code's "Eq. 10"):
    ``π_j = softmax_k(t_k · e_kj)``, a softmax over the K groups of token j's energies in the subspaces.

    ``normalize=False``: ``e_kj = ‖U_k*z_j‖²``, the energy of token j alone (causal as it stands).
    ``normalize=True``: ``e_kj = Σ_i (u_ki*z_j)² / Σ_{j' visible} (u_ki*z_j')²``, each coordinate's energy over its
    sum on the tokens j sees — all of them (the public vision code), or j' ≤ j with ``causal`` (the public language
    code, without its learned per-position bias). A coordinate that is 0 on every visible token adds 0.

    Args:
        Z: tokens (..., d, n); U: bases (K, d, p); temperature: the inverse temperature t_k that multiplies the
            energies, a number or one per group (K,) (the code's learned ``temp``, initialised to 1);
        normalize, causal: as above (``causal`` only matters with ``normalize``).

    Returns:
        Π, rows on the simplex: shape (..., n, K).
    """
    Z, U = _inputs(Z, U)
    K = U.shape[0]
    t = np.broadcast_to(as_float_array(temperature, "temperature", ndim=(0, 1), shape_hint="() or (K,)"), (K,))
    Z_hat, m = _scaled(Z)
    squares = project_onto_bases(Z_hat, U) ** 2  # (..., K, p, n): the energies / m²
    if normalize:  # the ratios do not depend on m
        totals = _visible_sums(squares, causal)
        squares = np.divide(squares, totals, out=np.zeros_like(squares), where=totals > 0)
        m = 1.0
    return _softmax_groups(t[:, None] * squares.sum(axis=-2), m)


def token_statistics(Z, U, Pi, causal: bool = False) -> np.ndarray:
    """The token statistics ``s_k = (U_k*Z)^{⊙2} π_k / n_k`` per token (..., K, p, n): for each token t, the π-weighted
    mean square of every projected coordinate over the tokens t sees (all; or j ≤ t with ``causal``, item 5 of the
    module docstring). A group with no weight among the visible tokens gets 0 (its terms carry the factor π = 0).
    """
    Z, U = _inputs(Z, U)
    Pi = _check_membership(Pi, Z, U.shape[0])
    weights = np.swapaxes(Pi, -1, -2)[..., None, :]  # (..., K, 1, n)
    weighted = _visible_sums(weights * project_onto_bases(Z, U) ** 2, causal)
    counts = _visible_sums(np.broadcast_to(weights, weighted.shape), causal)
    return np.divide(weighted, counts, out=np.zeros_like(weighted), where=counts > 0)


def _global(Z, U, Pi, eps):
    """Checked (U, Π), the scaled codes Â = U_k*Z/m (..., K, p, n), the scaled statistics ŝ_k = s_k/m² (..., K, p),
    n_k (..., K), c = d/ε² and m (..., 1, 1) (the module docstring's "Scale")."""
    Z, U = _inputs(Z, U)
    Pi = _check_membership(Pi, Z, U.shape[0])
    c = Z.shape[-2] / check_positive(eps, "eps") ** 2
    Z_hat, m = _scaled(Z)
    A = project_onto_bases(Z_hat, U)
    nk = Pi.sum(axis=-2)
    weighted = np.einsum("...kpn,...nk->...kp", A**2, Pi)
    s = np.divide(weighted, nk[..., None], out=np.zeros_like(weighted), where=nk[..., None] > 0)
    return U, Pi, A, s, nk, c, m


def _scalar(out: np.ndarray) -> np.ndarray | float:
    return float(out) if out.ndim == 0 else out


def variational_compression(Z, U, Pi, eps) -> np.ndarray | float:
    """ToST's variational compression term ``R^c_var(Z, Π | U_[K]) = ½ Σ_k (n_k/n) Σ_i log(1 + c s_ki)``,
    ``c = d/ε²``, ``s_k = (U_k*Z)^{⊙2} π_k / n_k`` (item 2 of the module docstring).

    Args:
        Z: tokens (..., d, n); U: bases (K, d, p); Pi: membership (..., n, K), rows on the simplex; eps: ε > 0.

    Returns:
        A float, or (...) for a batch; never below `projected_compression` (Hadamard's inequality, item 2).
    """
    _, Pi, _, s, nk, c, m = _global(Z, U, Pi, eps)
    return _scalar(0.5 * (nk / max(Pi.shape[-2], 1) * _log1p_scaled(c, m, s).sum(axis=-1)).sum(axis=-1))


def projected_compression(Z, U, Pi, eps) -> np.ndarray | float:
    """The coding rate R^c_var replaces: ``R^c_U(Z, Π) = ½ Σ_k (n_k/n) logdet(I_p + c U_k*Z diag(π_k) Z*U_k / n_k)``
    — MCR²'s compression term with soft memberships (CRATE's long paper eq. 9 with the weights n_k/n) of the
    tokens projected on each U_k; with ``U_k = I_d`` it is that term for Z itself. Empty groups contribute 0.

    Args and returns as `variational_compression`.
    """
    Z, U = _inputs(Z, U)
    Pi = _check_membership(Pi, Z, U.shape[0])
    c = Z.shape[-2] / check_positive(eps, "eps") ** 2
    Z_hat, m = _scaled(Z)
    A = project_onto_bases(Z_hat, U)  # (..., K, p, n): the codes / m
    nk = Pi.sum(axis=-2)  # (..., K)
    weighted = A * np.swapaxes(Pi, -1, -2)[..., None, :]
    M = weighted @ np.swapaxes(A, -1, -2)  # (..., K, p, p): Σ_j π_kj a_kj a_kj* / m²
    scale = np.divide(c, nk, out=np.zeros_like(nk), where=nk > 0)[..., None, None]
    m = m[..., None]  # (..., 1, 1, 1)
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = scale * (m * (m * M))  # c M/n_k, as the plain formula where it is finite
        logdet = np.linalg.slogdet(np.eye(U.shape[2]) + np.where(np.isfinite(scaled), scaled, 0.0))[1]
    overflow = ~np.isfinite(scaled).all(axis=(-2, -1))
    if overflow.any():  # Σ_i log(1 + (c/n_k) m² λ_i(M̂)) in the log domain, from M̂'s eigenvalues
        lam = np.clip(np.linalg.eigvalsh(M[overflow]), 0.0, None)
        full = lambda x: np.broadcast_to(x[..., 0, 0], overflow.shape)[overflow][:, None]  # noqa: E731
        logdet[overflow] = _log1p_scaled(full(scale), full(m), lam).sum(axis=-1)
    n = Pi.shape[-2]
    return _scalar(0.5 * (nk / max(n, 1) * logdet).sum(axis=-1))


def variational_compression_grad(Z, U, Pi, eps) -> np.ndarray:
    """``∇_Z R^c_var = (1/n) Σ_k U_k D_k (U_k*Z) diag(π_k)``, ``D_k = diag(c/(1 + c s_k))``, with Π held fixed
    (item 3 of the module docstring). Shape of Z."""
    U, Pi, A, s, _, c, m = _global(Z, U, Pi, eps)
    DA = _codes_times_factor(c, m[..., None], A, s[..., None])  # D_k (U_k*Z), (..., K, p, n)
    return _lift_from_bases(DA * np.swapaxes(Pi, -1, -2)[..., None, :], U) / max(Pi.shape[-2], 1)


def tssa_heads(Z, U, Pi, scale, causal: bool = False) -> np.ndarray:
    """The per-head TSSA terms ``−π_k ⊙ D_k (U_k*Z)`` (..., K, p, n), ``D_k = diag(c/(1 + c s_k))`` with ``c = scale``
    and the token statistics of `token_statistics` (bidirectional, or over the prefix with ``causal``).

    These are what a network maps back to d dimensions (by ``τ/n [U_1 … U_K]`` in `tssa`, by a free W in
    `tssa_free`). ``scale`` is c: d/ε² in the derivation, 1 in the public code.
    """
    Z, U = _inputs(Z, U)
    c = check_positive(scale, "scale")
    Z_hat, m = _scaled(Z)
    s = token_statistics(Z_hat, U, Pi, causal)  # the statistics / m²
    weights = np.swapaxes(np.asarray(Pi, dtype=float), -1, -2)[..., None, :]
    return _codes_times_factor(c, m[..., None], project_onto_bases(Z_hat, U), s, -weights)


def tssa(Z, U, Pi, eps, step=1.0, causal: bool = False) -> np.ndarray:
    """Token Statistics Self-Attention — one gradient step of size τ on R^c_var (items 4 and 5):

    * bidirectional: ``TSSA(Z | U_[K]) = −(τ/n) Σ_k U_k D_k (U_k*Z) diag(π_k) = −τ ∇_Z R^c_var(Z, Π | U_[K])``;
    * ``causal``: column t is ``−τ ∂R^c_var(Z_{≤t}, Π_{≤t})/∂z_t = −(τ/t) Σ_k π_kt U_k D_k^{(t)} U_k*z_t``.

    ``Z + tssa(...)`` is the step. Linear in n: running sums, no n × n matrix.

    Args:
        Z: tokens (..., d, n); U: bases (K, d, p); Pi: membership (..., n, K); eps: ε > 0 (c = d/ε²);
        step: τ > 0; causal: the prefix form.

    Returns:
        Array of Z's shape.
    """
    Z = check_tokens(Z)
    c = Z.shape[-2] / check_positive(eps, "eps") ** 2
    heads = tssa_heads(Z, U, Pi, c, causal)
    n = Z.shape[-1]
    counts = np.arange(1, n + 1) if causal else np.full(n, max(n, 1))
    return check_positive(step, "step") * _lift_from_bases(heads, np.asarray(U, dtype=float)) / counts


def tssa_free(Z, U, W, Pi, scale, b=None, causal: bool = False) -> np.ndarray:
    """TSSA with a free output map, as a network implements it: ``W [heads_1; …; heads_K] + b 1*``, the heads of
    `tssa_heads` stacked in head order (τ/n absorbed into W, see "Step size" in the module docstring).

    Args:
        Z, U, Pi, scale, causal: as `tssa_heads`; W: output map (d, K·p); b: bias (d,) or None.
    """
    Z, U = _inputs(Z, U)
    K, d, p = U.shape
    W = as_float_array(W, "W", ndim=2, shape_hint="(d, K*p)")
    if W.shape != (d, K * p):
        raise ValueError(f"W must have shape (d, K*p) = ({d}, {K * p}), got {W.shape}")
    heads = tssa_heads(Z, U, Pi, scale, causal)
    out = W @ heads.reshape(heads.shape[:-3] + (K * p, heads.shape[-1]))
    if b is not None:
        b = as_float_array(b, "b", ndim=1, shape_hint=f"({d},)")
        check_same_size(b.shape[0], d, "b", "entries")
        out = out + b[:, None]
    return out


# ----------------------------------------------------------------------------------------------------------------
# what the public code computes (RobinWu218/ToST), re-derived from reading it, before its output Linear
# ----------------------------------------------------------------------------------------------------------------
def public_vision_heads(Z, U, temperature) -> np.ndarray:
    """The heads of ``tost_vision/tost.py``'s ``AttentionTSSA`` (its qkv bias at 0), column convention (..., K, p, n).

    With ``A_k = U_k*Z``: each coordinate of A_k is divided by its ℓ2 norm over the tokens (``max(‖·‖, 1e-12)``),
    ``π = softmax_k(t_k Σ_i (normalised A_k)²_i)``, ``s_k = A_k^{⊙2} π_k / (n_k + 1e-8)``, output
    ``−π_k ⊙ A_k / (1 + s_k)``: `tssa_heads` with c = 1 and Π = ``membership(normalize=True)``, up to the guards.
    """
    Z, U = _inputs(Z, U)
    K = U.shape[0]
    t = np.broadcast_to(as_float_array(temperature, "temperature", ndim=(0, 1)), (K,))
    A = project_onto_bases(Z, U)  # (..., K, p, n)
    unit = A / np.maximum(np.linalg.norm(A, axis=-1, keepdims=True), 1e-12)
    Pi = _softmax_groups(t[:, None] * (unit**2).sum(axis=-2))  # (..., n, K)
    weights = np.swapaxes(Pi, -1, -2)[..., None, :]  # (..., K, 1, n)
    s = (A**2 * weights).sum(axis=-1, keepdims=True) / (weights.sum(axis=-1, keepdims=True) + 1e-8)
    return -weights * A / (1.0 + s)


def public_language_heads(Z, U, temperature, position_bias) -> np.ndarray:
    """The heads of ``tost_lang/model_TSSA.py``'s ``CausalSelfAttention_TSSA`` (c_attn bias at 0), (..., K, p, n).

    With ``A_k = U_k*Z``: ``e_kt = Σ_i (A_kit² / max(Σ_{j≤t} A_kij², 1e-12) + b_kt)`` (b: the learned
    ``denom_bias`` (K, n), added to every coordinate, so p·b_kt in total), ``π_t = softmax_k(t_k e_kt)``, prefix
    statistics ``s_kt = Σ_{j≤t} π_kj A_kj² / (Σ_{j≤t} π_kj + 1e-8)``, output ``−π_k ⊙ A_k / (1 + s_k)``.
    """
    Z, U = _inputs(Z, U)
    K, _, p = U.shape
    t = np.broadcast_to(as_float_array(temperature, "temperature", ndim=(0, 1)), (K,))
    b = as_float_array(position_bias, "position_bias", ndim=2, shape_hint="(K, n)")
    if b.shape != (K, Z.shape[-1]):
        raise ValueError(f"position_bias must have shape (K, n) = ({K}, {Z.shape[-1]}), got {b.shape}")
    A = project_onto_bases(Z, U)
    squares = A**2
    energies = (squares / np.maximum(np.cumsum(squares, axis=-1), 1e-12)).sum(axis=-2) + p * b
    Pi = _softmax_groups(t[:, None] * energies)
    weights = np.swapaxes(Pi, -1, -2)[..., None, :]
    s = np.cumsum(squares * weights, axis=-1) / (np.cumsum(weights, axis=-1) + 1e-8)
    return -weights * A / (1.0 + s)
