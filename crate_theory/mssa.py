"""The compression half-step: Neumann approximation, SSA/MSSA and the compression step (eqs. 26–27, 32–37, 86–107).

Column convention: ``Z`` is ``(d, n)`` or ``(..., d, n)``; ``U`` is ``(K, d, p)``; softmax acts on each column
(eqs. 94–95), so column j of ``softmax(A)`` holds the weights that build output token j.

Temperature: every function divides the attention logits ``(U_k*Z)*(U_k*Z)`` by ``temperature`` before the softmax.
The paper's (35) has none (``temperature=1``, the default); the official implementation multiplies the logits by
``p^{-1/2}``, i.e. ``temperature = √p``.

Memory: the softmax acts on each column on its own, so the heads ``A_k softmax(·)`` are computed in blocks of
``block`` output columns: one ``(..., K, n, block)`` float64 temporary at a time (O(K·n·block) memory instead of
the five ``(K, n, n)`` temporaries of the whole matrices, 2.4 GiB at n = 4000), the same result to rounding. The
default block keeps that temporary near ``_BLOCK_ELEMENTS`` entries (32 MiB); with ``causal`` a block of columns
j < stop only needs the keys i < stop.
"""
from __future__ import annotations

import numpy as np

from ._checks import (
    as_float_array,
    check_bases,
    check_choice,
    check_int,
    check_positive,
    check_same_size,
    check_tokens,
)
from .coding_rate import _alpha, _lift_from_bases, compression_rate_grad, project_onto_bases

__all__ = [
    "column_softmax",
    "causal_mask",
    "neumann_compression_grad",
    "ssa",
    "ssa_attention",
    "mssa",
    "mssa_free",
    "compression_step",
]


def column_softmax(A) -> np.ndarray:
    """Softmax of each column, eqs. (94)–(95): ``softmax(A)_{ij} = e^{A_ij} / Σ_i' e^{A_i'j}`` for A ``(..., n, m)``.

    Entries equal to ``−inf`` (masked) get weight 0; every column must have at least one finite entry.
    """
    A = as_float_array(A, "A", min_ndim=2, finite=False, shape_hint="(..., n, m)")
    if np.isnan(A).any() or np.isposinf(A).any():
        raise ValueError("A must not contain NaN or +inf (only -inf, for masked entries)")
    if A.shape[-2] and np.isneginf(A).all(axis=-2).any():
        raise ValueError("A must have at least one finite entry in every column")
    return _column_softmax(A)


def _column_softmax(A: np.ndarray) -> np.ndarray:
    E = np.exp(A - A.max(axis=-2, keepdims=True, initial=-np.inf))
    return E / E.sum(axis=-2, keepdims=True)


def causal_mask(A) -> np.ndarray:
    """``CausalMask(A)_{ij} = A_ij if i ≤ j else −∞`` — eq. (87): column j (query j) sees keys i ≤ j.

    Args:
        A: logits ``(..., n, n)``.
    """
    return _causal_mask(as_float_array(A, "A", min_ndim=2, finite=False, shape_hint="(..., n, n)"))


def _causal_mask(A: np.ndarray) -> np.ndarray:
    keep = np.triu(np.ones(A.shape[-2:], dtype=bool))  # i <= j
    return np.where(keep, A, -np.inf)


def neumann_compression_grad(Z, U, eps) -> np.ndarray:
    """First-order Neumann approximation of ∇R^c — eq. (33)=(99):

    ``β Σ_k U_k (U_k*Z)(I − β(U_k*Z)*(U_k*Z)) = β Σ_k U_kU_k* Z − β² Σ_k U_k (U_k*Z)(U_k*Z)*(U_k*Z)``,

    from ``(I + βG_k)^{-1} ≈ I − βG_k`` (32), which converges only when ``β‖U_k*Z‖² < 1`` (not stated in the paper).

    Evaluated in the ``p × p`` form: with ``A_k = U_k*Z`` (p × n), ``A_k (A_k*A_k) = (A_k A_k*) A_k`` (associativity,
    the push-through identity of (32)), so the cubic term costs O(p²n) time and O(pn) memory per head instead of the
    O(pn²) time and O(n²) memory of the ``n × n`` matrix ``A_k*A_k`` — n = 200,000 tokens need megabytes, not
    hundreds of GiB. The formula holds for any U (the derivation (31)–(33) does not use orthonormality).

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; U: bases ``(K, d, p)``; eps: ε > 0.

    Returns:
        Array of Z's shape.
    """
    Z = check_tokens(Z)
    U = check_bases(U, Z.shape[-2])
    eps = check_positive(eps, "eps")
    p, n = U.shape[2], Z.shape[-1]
    beta = _alpha(p, n, eps)
    A = project_onto_bases(Z, U)  # (..., K, p, n)
    AAtA = (A @ np.swapaxes(A, -1, -2)) @ A  # (A A*) A: a p × p Gram matrix, never the n × n one
    return _lift_from_bases(beta * A - beta**2 * AAtA, U)


def _tokens_and_head(Z, Uk) -> tuple[np.ndarray, np.ndarray]:
    Z = check_tokens(Z)
    Uk = as_float_array(Uk, "Uk", ndim=2, shape_hint="(d, p)")
    check_same_size(Uk.shape[0], Z.shape[-2], "Uk", "rows (d)")
    return Z, Uk


def ssa_attention(Z, Uk, temperature=1.0, causal: bool = False) -> np.ndarray:
    """The column-stochastic attention of one head, ``softmax((U_k*Z)*(U_k*Z) / temperature)`` (eqs. 35, 94–95),
    with the causal mask (87) when ``causal``. Shape ``(..., n, n)``; column j sums to 1.

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; Uk: one basis ``(d, p)``; temperature: > 0; causal: apply (87).
    """
    Z, Uk = _tokens_and_head(Z, Uk)
    return _attention(Uk.T @ Z, check_positive(temperature, "temperature"), bool(causal))


def _attention(A: np.ndarray, temperature: float, causal: bool) -> np.ndarray:
    """The whole column-stochastic matrix softmax(A*A / τ) (..., n, n) for codes A (..., p, n): one block."""
    Ahat, factor = _scaled_codes(A, temperature)
    E = _attention_block(Ahat, factor, 0, A.shape[-1], causal)[0]
    return E / E.sum(axis=-2, keepdims=True)


def _scaled_codes(A: np.ndarray, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    """``(Â, m²/τ)`` with ``Â = A/m``, ``m = 2^⌊log2 max|A|⌋`` per token set and head (see ``_attention_block``)."""
    top = np.abs(A).max(axis=(-2, -1), keepdims=True, initial=0.0)
    m = np.where(top > 0, np.ldexp(1.0, np.frexp(top)[1] - 1), 1.0)  # the power of two ≤ max|A| (1 when A = 0)
    with np.errstate(over="ignore", under="ignore"):
        factor = m * (m / temperature)  # m²/τ: may overflow to inf or underflow to 0, both handled below
    return A / m, factor


def _attention_block(Ahat: np.ndarray, factor: np.ndarray, start: int, stop: int, causal: bool):
    """Columns ``start:stop`` of softmax over columns of ``A*A / τ`` before normalisation, finite for every finite A.

    Returns ``(E, rows)``: ``E = exp(logits − column max)`` (..., rows, stop − start) for the keys ``0:rows``
    (``rows = stop`` with ``causal``: later keys are masked for every column of the block, their weight is exactly 0;
    else n). Each column's maximum entry is exactly 1, so its sum is ≥ 1; the weights are ``E / E.sum(axis=-2)``.

    The logits ``A*A/τ`` overflow once the codes reach ~1e154 (and ``inf − inf`` then gave NaN). They are formed
    scale-free instead: with ``m = 2^⌊log2 max|A|⌋`` (a power of two, so ``Â = A/m`` and ``m²`` are exact),
    ``softmax(A*A/τ) = softmax((G − max_i G) · m²/τ)`` column by column, ``G = Â*Â``. The shift ``G − max_i G ≤ 0`` is
    exactly 0 at each column's maximum, so an overflowing factor ``m²/τ = inf`` sends every smaller logit to −inf
    and the column to the exact limit, the hard argmax (ties shared equally); an underflowing factor gives the
    exact limit for tiny codes, uniform weights. In between it equals the plain formula to rounding. Every
    operation after the product is in place, so the block's one temporary is (..., rows, stop − start) (two more
    of that size only where m²/τ over- or underflows, for the exact limits).
    """
    n = Ahat.shape[-1]
    rows = stop if causal else n
    G = np.swapaxes(Ahat[..., :rows], -1, -2) @ Ahat[..., start:stop]
    if causal:  # CausalMask (87): key i > query j is masked
        np.copyto(G, -np.inf, where=np.arange(rows)[:, None] > np.arange(start, stop)[None, :])
    G -= G.max(axis=-2, keepdims=True, initial=-np.inf)  # ≤ 0; −inf where masked (the diagonal never is)
    if np.all(np.isfinite(factor) & (factor > 0)):
        G *= factor
    else:
        with np.errstate(invalid="ignore"):
            logits = np.where(G == 0, 0.0, G * factor)  # factor = inf: 0 at the maximum, −inf elsewhere
        G = np.where(np.isneginf(G), -np.inf, logits)  # factor = 0: masked entries stay −inf
    np.exp(G, out=G)
    return G, rows


def ssa(Z, Uk, temperature=1.0, causal: bool = False, *, block: int | None = None) -> np.ndarray:
    """Subspace self-attention of one head — eq. (35)=(92):

    ``SSA(Z | U_k) = (U_k*Z) softmax((U_k*Z)*(U_k*Z) / temperature)`` — query = key = value = ``U_k*``;
    with ``causal`` the logits go through ``CausalMask`` (eqs. 86–87) first.

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; Uk: one basis ``(d, p)``; temperature: softmax temperature > 0
            (1 in the paper, √p in the official code); causal: CRATE-GPT's mask;
        block: output columns per block (memory O(n·block); default: see the module docstring).

    Returns:
        Array ``(..., p, n)``.
    """
    Z, Uk = _tokens_and_head(Z, Uk)
    return _heads((Uk.T @ Z)[..., None, :, :], check_positive(temperature, "temperature"), bool(causal), block)[
        ..., 0, :, :
    ]


_BLOCK_ELEMENTS = 1 << 22  # default size of the one (..., K, n, block) temporary: 4 Mi float64 = 32 MiB


def _block_columns(A: np.ndarray, block: int | None) -> int:
    """The number of output columns per block for codes A (..., K, p, n)."""
    if block is not None:
        return check_int(block, "block", minimum=1)
    keys_per_column = max(1, int(np.prod(A.shape[:-3], dtype=np.int64)) * A.shape[-3] * A.shape[-1])
    return max(1, _BLOCK_ELEMENTS // keys_per_column)


def _heads(A: np.ndarray, temperature: float, causal: bool, block: int | None) -> np.ndarray:
    """``A_k softmax(A_k*A_k / τ)`` for codes A (..., K, p, n), in blocks of output columns (module docstring)."""
    p, n = A.shape[-2:]
    b = _block_columns(A, block)
    Ahat, factor = _scaled_codes(A, temperature)
    A1 = np.concatenate([A, np.ones(A.shape[:-2] + (1, n))], axis=-2)  # [A; 1*]: one product gives A E and 1*E
    out = np.empty_like(A)
    for start in range(0, n, b):
        stop = min(n, start + b)
        E, rows = _attention_block(Ahat, factor, start, stop, causal)
        AE = A1[..., :rows] @ E
        out[..., start:stop] = AE[..., :p, :] / AE[..., p:, :]  # A softmax = (A E) / (column sums of E)
    return out


def _all_heads(Z: np.ndarray, U: np.ndarray, temperature: float, causal: bool, block: int | None) -> np.ndarray:
    """``[SSA(Z|U_1); …; SSA(Z|U_K)]`` as an array (..., K, p, n)."""
    return _heads(project_onto_bases(Z, U), temperature, causal, block)


def mssa(
    Z, U, eps, temperature=1.0, causal: bool = False, *, allow_nonorthonormal: bool = False, block: int | None = None
) -> np.ndarray:
    """Multi-head subspace self-attention — eq. (36)=(93):

    ``MSSA(Z | U_[K]) = β [U_1, …, U_K] [SSA(Z|U_1); …; SSA(Z|U_K)] = β Σ_k U_k SSA(Z|U_k)``, ``β = p/(nε²)``.

    Its derivation from the gradient of R^c (Approximation 9, eqs. 32–36) assumes orthonormal bases
    ``U_k*U_k = I_p``; they are checked as :func:`crate_theory.synthetic.sample_tokens` checks them (ValueError
    naming ``U`` and the deviation ``max |U_k*U_k − I_p|`` beyond ``_checks.ORTHONORMAL_ATOL`` = 1e-6). Pass
    ``allow_nonorthonormal=True`` to apply the formula to any bases (a trained model's, as CRATE's tied output
    map does).

    Finite for every finite input whose exact result is in the float64 range: the attention logits are formed
    scale-free (see ``_attention``), so tokens near 1e±300 give the exact limits (hard-argmax / uniform attention).

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; U: bases ``(K, d, p)``; eps: ε > 0; temperature, causal: as :func:`ssa`;
        allow_nonorthonormal: skip the orthonormality check;
        block: output columns per block: memory O(K·n·block) for the attention (default: a 32 MiB temporary).

    Returns:
        Array of Z's shape.
    """
    Z = check_tokens(Z)
    U = check_bases(U, Z.shape[-2], orthonormal=not allow_nonorthonormal)
    eps = check_positive(eps, "eps")
    temperature = check_positive(temperature, "temperature")
    p, n = U.shape[2], Z.shape[-1]
    beta = _alpha(p, n, eps)
    return beta * _lift_from_bases(_all_heads(Z, U, temperature, bool(causal), block), U)


def mssa_free(Z, U, W, b=None, temperature=1.0, causal: bool = False, *, block: int | None = None) -> np.ndarray:
    """MSSA with a free output map — eq. (37): ``W [SSA(Z|U_1); …; SSA(Z|U_K)] + b 1*``.

    This is the implemented operator (the official code adds a bias ``b`` and uses ``temperature = √p``).
    With ``W = β [U_1 … U_K]`` and ``b = 0`` it is eq. (36) (see :func:`crate_theory.layer.tied_output_map`).

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; U: bases ``(K, d, p)``; W: output map ``(d, K·p)`` whose column
            block k multiplies head k; b: bias ``(d,)`` or None; temperature, causal, block: as :func:`mssa`.

    Returns:
        Array of Z's shape.
    """
    Z = check_tokens(Z)
    U = check_bases(U, Z.shape[-2])
    K, d, p = U.shape
    W = as_float_array(W, "W", ndim=2, shape_hint="(d, K*p)")
    if W.shape != (d, K * p):
        raise ValueError(f"W must have shape (d, K*p) = ({d}, {K * p}), got {W.shape}")
    temperature = check_positive(temperature, "temperature")
    heads = _all_heads(Z, U, temperature, bool(causal), block)  # (..., K, p, n)
    stacked = heads.reshape(heads.shape[:-3] + (K * p, heads.shape[-1]))
    out = W @ stacked
    if b is not None:
        b = as_float_array(b, "b", ndim=1, shape_hint=f"({d},)")
        check_same_size(b.shape[0], d, "b", "entries")
        out = out + b[:, None]
    return out


def compression_step(
    Z, U, eps, kappa, method: str = "exact", temperature=1.0, causal: bool = False, *, allow_nonorthonormal: bool = False
) -> np.ndarray:
    """One compression half-step ``Z^{ℓ+1/2}`` — eq. (26) and its approximations:

    * ``"exact"``:   ``Z − κ ∇R^c(Z | U_[K])`` with the exact gradient (31) — eq. (26);
    * ``"neumann"``: ``Z − κ ∇̂R^c`` with the first-order Neumann gradient (33) (p × p form, any n);
    * ``"mssa"``:    ``(1 − κβ) Z + κβ MSSA(Z | U_[K])`` — eq. (27)=(34)=(107), Approximation 9.

    The step is derived for the signal model's orthonormal bases ``U_k*U_k = I_p`` (eqs. 10–13; Approximation 9
    uses it), so U is checked as :func:`crate_theory.synthetic.sample_tokens` checks it (ValueError naming ``U`` and
    the deviation ``max |U_k*U_k − I_p|`` beyond 1e-6) for every method; ``allow_nonorthonormal=True`` skips the
    check (the gradients (31) and (33) themselves hold for any U).

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; U: bases ``(K, d, p)``; eps: ε > 0; kappa: step κ > 0;
        method: one of the above; temperature, causal: used by ``"mssa"`` only;
        allow_nonorthonormal: skip the orthonormality check.

    Returns:
        Array of Z's shape.
    """
    Z = check_tokens(Z)
    U = check_bases(U, Z.shape[-2], orthonormal=not allow_nonorthonormal)
    eps = check_positive(eps, "eps")
    kappa = check_positive(kappa, "kappa")
    check_choice(method, "method", ("exact", "neumann", "mssa"))
    if method == "exact":
        return Z - kappa * compression_rate_grad(Z, U, eps)
    if method == "neumann":
        return Z - kappa * neumann_compression_grad(Z, U, eps)
    beta = _alpha(U.shape[2], Z.shape[-1], eps)
    return (1.0 - kappa * beta) * Z + kappa * beta * mssa(
        Z, U, eps, temperature=temperature, causal=causal, allow_nonorthonormal=True  # U checked above
    )
