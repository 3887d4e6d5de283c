"""The CRATE encoder layer and an unrolled CRATE in NumPy — eqs. (45)=(57)/(60), Fig. 10, Appendix D Alg. 4.

One layer, column convention (``Z`` is ``(d, n)`` or ``(..., d, n)``)::

    Y        = LN1(Z)                                     (per token, affine weight/bias)
    Z^{ℓ+½}  = S + W [SSA(Y|U_1); …; SSA(Y|U_K)] + b 1*   S = Z (skip="official") or Y (skip="paper")   (37)
    Z^{ℓ+1}  = ReLU(Y' − η D*(DY' − Y') − ηλ 1),          Y' = LN2(Z^{ℓ+½})                          (44)

``skip="official"`` is the authors' code (skip from the un-normalised input, the default); ``skip="paper"`` is the
Appendix D pseudocode (skip from LN1(Z)); crate_nn's names ``"input"``/``"normed"`` are accepted as aliases.
There is no skip around the ISTA block in either. The output map is free (W, b) or tied to the bases,
``W = β[U_1 … U_K]`` with ``β = p/(nε²)`` (eq. 36; pass ``W=None`` and ``eps``), see :func:`tied_output_map`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import (
    check_bases,
    check_choice,
    check_nonnegative,
    check_positive,
    check_square,
    check_tokens,
    check_vector,
)
from .coding_rate import _alpha
from .ista import _mm_closed_form, _prox_grad_step
from .mssa import mssa, mssa_free

__all__ = ["layer_norm", "tied_output_map", "CrateLayerParams", "CrateTrace", "crate_layer", "crate_forward"]

_SKIPS = {"official": "official", "input": "official", "paper": "paper", "normed": "paper"}


def layer_norm(Z, weight=None, bias=None, eps=1e-5) -> np.ndarray:
    """LayerNorm of every token (column): ``(z − mean(z)) / sqrt(var(z) + eps) ⊙ weight + bias``.

    Same as ``torch.nn.LayerNorm(d)`` (biased variance, ``eps = 1e-5``) applied to ``Z.T``; without weight and bias
    it has no affine part.

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; weight, bias: ``(d,)`` or None; eps: > 0.

    Returns:
        Array of Z's shape.
    """
    Z = check_tokens(Z)
    eps = check_positive(eps, "eps")
    d = Z.shape[-2]
    mean = Z.mean(axis=-2, keepdims=True)
    centred = Z - mean
    var = (centred * centred).mean(axis=-2, keepdims=True)
    out = centred / np.sqrt(var + eps)
    if weight is not None:
        out = out * check_vector(weight, "weight", d)[:, None]
    if bias is not None:
        out = out + check_vector(bias, "bias", d)[:, None]
    return out


def tied_output_map(U, beta, *, allow_nonorthonormal: bool = False) -> np.ndarray:
    """The tied output map of eq. (36), ``β [U_1, …, U_K]`` of shape ``(d, K·p)``, for bases ``U`` ``(K, d, p)``.

    ``mssa_free(Z, U, tied_output_map(U, p/(nε²)))`` equals ``mssa(Z, U, eps)``. Eq. (36) is derived for
    orthonormal bases, so U is checked as :func:`crate_theory.synthetic.sample_tokens` checks it (ValueError naming
    ``U`` and the deviation ``max |U_k*U_k − I_p|`` beyond 1e-6); ``allow_nonorthonormal=True`` skips the check.
    """
    U = check_bases(U, orthonormal=not allow_nonorthonormal)
    beta = check_positive(beta, "beta")
    K, d, p = U.shape
    return beta * U.transpose(1, 0, 2).reshape(d, K * p)


@dataclass
class CrateLayerParams:
    """Parameters of one CRATE layer (column convention).

    Attributes:
        U: bases ``U^ℓ_[K]``, ``(K, d, p)`` — the qkv map is ``[U_1 … U_K]*``.
        D: ISTA dictionary ``D^ℓ``, ``(d, d)``.
        W: free output map ``(d, K·p)`` (eq. 37), or None for the tied map ``β[U_1 … U_K]`` (eq. 36).
        b: output bias ``(d,)`` or None (no bias).
        ln1_weight, ln1_bias, ln2_weight, ln2_bias: LayerNorm affine parameters ``(d,)``; None = 1 / 0.
    """

    U: np.ndarray
    D: np.ndarray
    W: np.ndarray | None = None
    b: np.ndarray | None = None
    ln1_weight: np.ndarray | None = None
    ln1_bias: np.ndarray | None = None
    ln2_weight: np.ndarray | None = None
    ln2_bias: np.ndarray | None = None


@dataclass
class CrateTrace:
    """Every intermediate of :func:`crate_forward` (lists over layers ℓ = 1..L).

    Attributes:
        inputs: ``Z^ℓ`` (the input of layer ℓ); halves: ``Z^{ℓ+1/2}``; outputs: ``Z^{ℓ+1}`` (input of layer ℓ+1).
        output: ``Z^{L+1}``, the encoder's output (``Z^1`` itself when there are no layers).
    """

    inputs: list[np.ndarray]
    halves: list[np.ndarray]
    outputs: list[np.ndarray]
    output: np.ndarray


def _sparsify(Y: np.ndarray, D: np.ndarray, eta: float, lam: float, kind: str, eps: float | None) -> np.ndarray:
    if kind == "ista":
        return _prox_grad_step(Y, Y, D, eta, lam, nonneg=True)
    if kind == "soft":
        return _prox_grad_step(Y, Y, D, eta, lam, nonneg=False)
    return _mm_closed_form(D.T @ Y, _alpha(*Y.shape[-2:], eps), lam)


def crate_layer(
    Z,
    params: CrateLayerParams,
    *,
    eta=0.1,
    lam=0.1,
    temperature=None,
    eps=None,
    skip: str = "official",
    causal: bool = False,
    sparsify: str = "ista",
    compress: bool = True,
    shrink=0.0,
    ln_eps=1e-5,
) -> tuple[np.ndarray, np.ndarray]:
    """One CRATE encoder layer ``Z^ℓ ↦ (Z^{ℓ+1/2}, Z^{ℓ+1})`` — eq. (45) with the LayerNorms of Fig. 10.

    Args:
        Z: ``Z^ℓ``, ``(d, n)`` or ``(..., d, n)``.
        params: :class:`CrateLayerParams`.
        eta, lam: η > 0 and λ ≥ 0 of the ISTA step (44) (defaults 0.1, 0.1).
        temperature: softmax temperature of SSA (logits divided by it); None = ``√p`` (the official code);
            1 = eq. (35).
        eps: ε for the tied output map (``params.W is None``: β = p/(nε²)) and for ``sparsify="mm"``.
        skip: ``"official"`` (default) or ``"paper"`` (Appendix D); aliases ``"input"``, ``"normed"``.
        causal: causal mask (87).
        sparsify: ``"ista"`` — eq. (44) (default); ``"soft"`` — Table 13's soft-threshold variant
            ``S_{ηλ}(Y − ηD*(DY − Y))``; ``"mm"`` — eq. (123) ``ReLU((1 + 4/(9(1+α))) D*Y − (4λ/(9α))1)``,
            applied as printed (its derivation assumes ``Y*Y = I``, which a LayerNorm output does not satisfy);
            ``"none"`` — no ISTA block (Table 15's ablation): ``Z^{ℓ+1} = Z^{ℓ+1/2}``, no LN2 either.
        compress: False drops the MSSA term (an ISTA-only control): ``Z^{ℓ+1/2} = S``.
        shrink: s ∈ [0, 1], the ``(1 − κβ)`` factor of eq. (27) on the skip: ``Z^{ℓ+1/2} = (1 − s)·S + MSSA``
            with s = κβ; 0 (default) is the implemented layer (45), which has no shrink.
        ln_eps: LayerNorm epsilon (torch's 1e-5).

    Returns:
        ``(Z^{ℓ+1/2}, Z^{ℓ+1})``, each of Z's shape.
    """
    Z = check_tokens(Z)
    d = Z.shape[-2]
    U = check_bases(params.U, d, "params.U")
    D = check_square(params.D, "params.D", d)
    eta = check_positive(eta, "eta")
    lam = check_nonnegative(lam, "lam")
    check_choice(skip, "skip", tuple(_SKIPS))
    check_choice(sparsify, "sparsify", ("ista", "soft", "mm", "none"))
    shrink = check_nonnegative(shrink, "shrink")
    if shrink > 1:
        raise ValueError(f"shrink must be in [0, 1] (it is κβ of eq. 27), got {shrink}")
    temperature = np.sqrt(U.shape[2]) if temperature is None else check_positive(temperature, "temperature")
    if (params.W is None or sparsify == "mm") and eps is None:
        raise ValueError("eps must be given for the tied output map (params.W is None) or sparsify='mm'")
    if eps is not None:
        eps = check_positive(eps, "eps")
    Y = layer_norm(Z, params.ln1_weight, params.ln1_bias, ln_eps)
    if not compress:
        attended = 0.0
    elif params.W is None:
        # the implemented layer: learned bases, not orthonormal in general (eq. 36 applied as is)
        attended = mssa(Y, U, eps, temperature=temperature, causal=causal, allow_nonorthonormal=True)
        if params.b is not None:
            attended = attended + check_vector(params.b, "params.b", d)[:, None]
    else:
        attended = mssa_free(Y, U, params.W, params.b, temperature=temperature, causal=causal)
    half = (1.0 - shrink) * (Z if _SKIPS[skip] == "official" else Y) + attended
    if sparsify == "none":
        return half, half
    Y2 = layer_norm(half, params.ln2_weight, params.ln2_bias, ln_eps)
    return half, _sparsify(Y2, D, eta, lam, sparsify, eps)


def crate_forward(Z, layers, **kwargs) -> CrateTrace:
    """An unrolled CRATE encoder ``Z^1 → Z^{3/2} → Z^2 → … → Z^{L+1}`` — eqs. (20), (30), (45).

    Args:
        Z: ``Z^1``, ``(d, n)`` or ``(..., d, n)``.
        layers: a sequence of :class:`CrateLayerParams`, one per layer (``U^ℓ``, ``W^ℓ``, ``D^ℓ``, LayerNorms).
        **kwargs: passed to :func:`crate_layer` for every layer (eta, lam, temperature, eps, skip, causal,
            sparsify, compress, shrink, ln_eps).

    Returns:
        :class:`CrateTrace` with every ``Z^ℓ``, ``Z^{ℓ+1/2}``, ``Z^{ℓ+1}``.
    """
    Z = check_tokens(Z)
    inputs, halves, outputs = [], [], []
    for i, params in enumerate(layers):
        if not isinstance(params, CrateLayerParams):
            raise TypeError(f"layers[{i}] must be a CrateLayerParams, got {type(params).__name__}")
        inputs.append(Z)
        half, Z = crate_layer(Z, params, **kwargs)
        halves.append(half)
        outputs.append(Z)
    return CrateTrace(inputs=inputs, halves=halves, outputs=outputs, output=Z)

