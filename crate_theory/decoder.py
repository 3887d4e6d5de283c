"""The white-box CRATE decoder (Sec. 3.3): eqs. (62)–(64), Fig. 10, Appendix D Alg. 5, Remark 7.

One decoder layer g^ℓ, column convention (``Z̃`` is ``(d, n)`` or ``(..., d, n)``):

    (64)  Z̃^{ℓ+1} = E^ℓ Z̃^ℓ − MSSA(E^ℓ Z̃^ℓ | V^ℓ_[K])                       (norm=False)

and, with the LayerNorms of Fig. 10 (H = E^ℓ LN1(Z̃^ℓ)):

    skip="official":  Z̃^{ℓ+1} = H − MSSA(LN2(H) | V^ℓ)        (the authors' code: skip from H)
    skip="paper":     Z̃^{ℓ+1} = LN2(H) − MSSA(LN2(H) | V^ℓ)    (Appendix D Alg. 5: skip from LN2(H))

MSSA has the free output map (37) ``W [SSA(·|V_1); …; SSA(·|V_K)] + b`` or, with ``W=None``, the tied map
β[V_1 … V_K] of (36) (β = p/(nε²), needs ``eps``). Temperature as in ``crate_theory.layer``: None = √p (the
code), 1 = eq. (35). The decoder stack is g = g^{L−1} ∘ … ∘ g^0, and g^ℓ (partially) inverts the encoder
layer f^{L−ℓ} (Fig. 4, Fig. 10).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import check_bases, check_choice, check_positive, check_square, check_tokens, check_vector
from .layer import CrateLayerParams, layer_norm
from .mssa import mssa, mssa_free

__all__ = ["DecoderLayerParams", "decoder_layer", "crate_decode", "decoder_presets", "REMARK7_PRESETS"]

_SKIPS = {"official": "official", "input": "official", "paper": "paper", "normed": "paper"}
REMARK7_PRESETS = ("printed", "inverse", "first-order", "linear-inverse")


@dataclass
class DecoderLayerParams:
    """Parameters of one decoder layer g^ℓ (column convention).

    Attributes:
        E: synthesis dictionary E^ℓ, (d, d) (63).
        V: bases V^ℓ_[K] to anti-compress against, (K, d, p) — the qkv map is [V_1 … V_K]*.
        W: free output map (d, K·p) (37), or None for the tied β[V_1 … V_K] (36).
        b: output bias (d,) or None.
        ln1_weight, ln1_bias, ln2_weight, ln2_bias: LayerNorm affine parameters (d,); None = 1 / 0.
    """

    E: np.ndarray
    V: np.ndarray
    W: np.ndarray | None = None
    b: np.ndarray | None = None
    ln1_weight: np.ndarray | None = None
    ln1_bias: np.ndarray | None = None
    ln2_weight: np.ndarray | None = None
    ln2_bias: np.ndarray | None = None


def _mssa(Y, params: DecoderLayerParams, V, eps, temperature, causal):
    if params.W is None:
        # learned bases V, not orthonormal in general: the tied map (36) applied as is
        out = mssa(Y, V, eps, temperature=temperature, causal=causal, allow_nonorthonormal=True)
        if params.b is not None:
            out = out + check_vector(params.b, "params.b", Y.shape[-2])[:, None]
        return out
    return mssa_free(Y, V, params.W, params.b, temperature=temperature, causal=causal)


def decoder_layer(
    Z,
    params: DecoderLayerParams,
    *,
    temperature=None,
    eps=None,
    skip: str = "official",
    norm: bool = True,
    causal: bool = False,
    ln_eps=1e-5,
) -> tuple[np.ndarray, np.ndarray]:
    """One decoder layer ``Z̃^ℓ ↦ (Z̃^{ℓ+1/2}, Z̃^{ℓ+1})`` — eqs. (63)–(64) with the LayerNorms of Fig. 10.

    Args:
        Z: Z̃^ℓ, (d, n) or (..., d, n).
        params: :class:`DecoderLayerParams`.
        temperature: SSA softmax temperature; None = √p (the authors' code), 1 = eq. (35).
        eps: ε of the tied output map (params.W is None): β = p/(nε²).
        skip: "official" (default; skip from H = E LN1(Z̃)) or "paper" (Alg. 5; skip from LN2(H));
            aliases "input" / "normed" as in crate_nn.
        norm: False drops both LayerNorms, giving eq. (64) exactly (``skip`` is then irrelevant).
        causal: causal mask (87). ln_eps: LayerNorm epsilon (torch's 1e-5).

    Returns:
        (Z̃^{ℓ+1/2}, Z̃^{ℓ+1}): Z̃^{ℓ+1/2} = E Z̃^ℓ (resp. H = E LN1(Z̃^ℓ)) of (63), and the layer output.
    """
    Z = check_tokens(Z)
    d = Z.shape[-2]
    E = check_square(params.E, "params.E", d)
    V = check_bases(params.V, d, "params.V")
    check_choice(skip, "skip", tuple(_SKIPS))
    temperature = np.sqrt(V.shape[2]) if temperature is None else check_positive(temperature, "temperature")
    if params.W is None:
        if eps is None:
            raise ValueError("eps must be given for the tied output map (params.W is None)")
        eps = check_positive(eps, "eps")
    if not norm:
        H = E @ Z
        return H, H - _mssa(H, params, V, eps, temperature, causal)
    H = E @ layer_norm(Z, params.ln1_weight, params.ln1_bias, ln_eps)
    Y = layer_norm(H, params.ln2_weight, params.ln2_bias, ln_eps)
    return H, (H if _SKIPS[skip] == "official" else Y) - _mssa(Y, params, V, eps, temperature, causal)


def crate_decode(Z, layers, **kwargs) -> list[np.ndarray]:
    """The decoder g = g^{L−1} ∘ … ∘ g^0 (Sec. 3.3): returns [Z̃^0, Z̃^1, …, Z̃^L] (each of Z's shape).

    layers: a sequence of :class:`DecoderLayerParams` (g^0 first); kwargs go to :func:`decoder_layer`.
    """
    Z = check_tokens(Z)
    path = [Z]
    for i, params in enumerate(layers):
        if not isinstance(params, DecoderLayerParams):
            raise TypeError(f"layers[{i}] must be a DecoderLayerParams, got {type(params).__name__}")
        path.append(decoder_layer(path[-1], params, **kwargs)[1])
    return path


def decoder_presets(encoder_layers, preset: str = "inverse", eta=1.0) -> list[DecoderLayerParams]:
    """Decoder parameters from encoder parameters, the pre-sets of Remark 7 (not enforced by the paper).

    Decoder layer g^ℓ (ℓ = 0 … L−1) is paired with encoder layer f^{L−ℓ} (Fig. 10), i.e. the decoder list is
    the encoder list reversed; V^ℓ = U^{L−ℓ} and the output map (W, b) is copied from that encoder layer, so
    that −MSSA(·|V^ℓ) undoes its +MSSA(·|U^{L−ℓ}) to first order. LayerNorm parameters are left at the
    identity (None).

    preset:
        "printed" — E^ℓ = (D^{L−ℓ})*, the transpose printed in Remark 7. (The paper writes (D^ℓ)*, whose
            index is undefined for ℓ = 0 since encoder layers are numbered 1 … L; we pair it like V.)
        "inverse" — E^ℓ = D^{L−ℓ}: inverting the sparse coding Z^{ℓ+1/2} ≈ D Z^{ℓ+1} of (28)/(41) is
            multiplication by D, not D* (Remark 7's E^ℓ = (D^ℓ)* reads as a typo; for orthogonal D, ISTA with η = 1, λ = 0 is
            ReLU(D*Z), whose inverse on its range is D).
        "first-order" — E^ℓ = I − η(D* − D*D), the first-order (in η) inverse of ISTA's linear part
            A = I + η(D* − D*D) at λ = 0 (eq. 44 without its ReLU); (1 + η)I − ηD* for orthogonal D.
        "linear-inverse" — E^ℓ = A^{-1}, the exact inverse of that linear part (= D for orthogonal D at η = 1).

    encoder_layers: a sequence of ``crate_theory.layer.CrateLayerParams`` (f^1 first); eta: the encoders' ISTA
    step η > 0 (used by "first-order" and "linear-inverse").
    """
    check_choice(preset, "preset", REMARK7_PRESETS)
    eta = check_positive(eta, "eta")
    encoder_layers = list(encoder_layers)
    layers = []
    for i in reversed(range(len(encoder_layers))):
        enc = encoder_layers[i]
        if not isinstance(enc, CrateLayerParams):
            raise TypeError(f"encoder_layers[{i}] must be a CrateLayerParams, got {type(enc).__name__}")
        D = check_square(enc.D, f"encoder_layers[{i}].D")
        step = eta * (D.T - D.T @ D)  # ISTA's linear part at λ = 0 is I + step
        if preset == "printed":
            E = D.T.copy()
        elif preset == "inverse":
            E = D.copy()
        elif preset == "first-order":
            E = np.eye(len(D)) - step
        else:  # linear-inverse
            E = np.linalg.inv(np.eye(len(D)) + step)
        layers.append(DecoderLayerParams(E=E, V=np.array(enc.U, dtype=float), W=enc.W, b=enc.b))
    return layers
