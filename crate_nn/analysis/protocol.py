"""Compression told apart from collapse, in torch (row convention): the joint measure of "layers compress"
(Sec. 4.2, Figs. 14–15). The column-convention float64 reference, with the derivation, is ``crate_theory.protocol``.

For token sets z (..., n, d) against a layer's subspaces — its ``qkv`` weight [U_1 … U_K]* (rows of head k are
U_k*), each head orthonormalised, so ‖U‖ (weight decay) does not enter — every rate is R^c (eq. 13) of *unit*
tokens (each token divided by its norm; zero tokens stay zero), so no measure moves under any rescaling of the
tokens. ε is in units of the token norm (default 0.1, the authors' ε² = 0.01 on unit-norm vectors). The heads
must hold every direction, K·p ≥ d (every CRATE has p = d/K).

* ``specific``: R^c(ẑ | U) over its mean for the same tokens in uniformly random orientations — compression onto
  these subspaces (1 = no more than in randomly placed ones);
* ``spread``: that mean over the mean R^c of isotropic unit tokens — 1 = as unlike each other as random
  directions, < 1 = the tokens bunch together (collapse);
* ``relative`` = specific × spread: R^c against the isotropic yardstick alone, which cannot tell the two apart;
* ``alignment``: each token's energy fraction ‖P_k z_i‖²/‖z_i‖² in its own subspace (the head holding most of
  its energy), P_k the projector onto span(U_k); ``isotropic_alignment``: the same for the isotropic tokens;
* ``rate_reduction``: the paper's objective on the unit tokens, ΔR = R(ẑ) − R^c(ẑ | U) (eqs. 8, 13–14, in nats);
* ``nonnegative``: 1 when every entry of the token set is ≥ 0 (the ISTA block's non-negative codes, eq. 44), else 0.

``verify.joint.compresses`` decides "A compresses relative to B" from ``specific``, ``alignment`` and ``spread``
(a drop of spread is collapse only beyond ``crate_theory.protocol.collapse_floor`` at the measured size, which
`LayerProfile.sizes` records: the drop of every token of an input on one subspace, the worst membership law), with
``rate_reduction`` reported beside and ``nonnegative`` marking a step into the non-negative orthant (sparsification,
left to the sparsity claims unless the spread falls beyond what a ReLU of exact-subspace tokens causes).
`station_measures` measures one layer's `LayerTrace` (any model's ``forward_intermediates``) against its
attention module; `layer_profile` does it for every layer of a CRATE encoder over a set of images.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..models.blocks import LayerTrace
from ..models.registry import unwrap_model
from .diagnostics import (
    OFFICIAL_EPS,
    Stat,
    _batches,
    _encoder_layers,
    _layers_without_mssa,
    compression,
    half_logdet,
    head_codes,
    trace,
)

__all__ = ["STATIONS", "MEASURES", "LayerProfile", "alignment", "coding_rate", "isotropic_like", "joint_measures",
           "layer_profile", "measures_from_yardsticks", "orthonormalise_heads", "rotated_like", "station_measures",
           "subspace_energy", "unit_tokens"]

STATIONS = ("input", "half", "output")
"""Z^ℓ, Z^{ℓ+1/2} (after MSSA) and Z^{ℓ+1} (after ISTA)."""

MEASURES = ("relative", "specific", "spread", "alignment", "isotropic_alignment", "rate_reduction", "nonnegative")


def _check_weight(weight: torch.Tensor, heads: int) -> None:
    if weight.ndim != 2 or heads < 1 or weight.shape[0] % heads:
        raise ValueError(f"weight must be a qkv weight (K·p, d) with K = heads = {heads} dividing its rows, "
                         f"got shape {tuple(weight.shape)}")


def orthonormalise_heads(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """The qkv weight with each head's rows U_k* replaced by an orthonormal basis of the same row space (QR)."""
    _check_weight(weight, heads)
    blocks = weight.unflatten(0, (heads, weight.shape[0] // heads))  # (K, p, d)
    q, _ = torch.linalg.qr(blocks.transpose(-2, -1))  # (K, d, p), orthonormal columns spanning U_k
    return q.transpose(-2, -1).flatten(0, 1)


def subspace_energy(z: torch.Tensor, weight: torch.Tensor, heads: int) -> torch.Tensor:
    """‖P_k z_i‖²/‖z_i‖² for tokens z (..., n, d) and every head k: (..., K, n), float64 (zero tokens give 0).

    With the orthonormalised heads Q_k, ‖P_k z‖² = ‖Q_k* z‖².
    """
    z = z.to(torch.float64)
    energy = head_codes(z, orthonormalise_heads(weight.to(torch.float64), heads), heads).square().sum(-1)
    norms2 = z.square().sum(-1).unsqueeze(-2)
    return torch.where(norms2 > 0, energy / norms2.clamp_min(torch.finfo(torch.float64).tiny), 0.0)


def alignment(z: torch.Tensor, weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Mean over tokens of the largest energy fraction max_k ‖P_k z_i‖²/‖z_i‖² (own subspace): (...) ∈ [0, 1]."""
    return subspace_energy(z, weight, heads).amax(-2).mean(-1)


def unit_tokens(z: torch.Tensor) -> torch.Tensor:
    """Every token (last axis) divided by its ℓ2 norm, float64; zero tokens stay zero."""
    z = z.to(torch.float64)
    norms = z.norm(dim=-1, keepdim=True)
    return torch.where(norms > 0, z / norms.clamp_min(torch.finfo(torch.float64).tiny), 0.0)


def isotropic_like(z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Tokens with the norms of z (..., n, d) in uniformly random directions (float64): the isotropic yardstick."""
    z = z.to(torch.float64)
    gaussian = torch.randn(z.shape, generator=generator, dtype=torch.float64).to(z.device)
    return unit_tokens(gaussian) * z.norm(dim=-1, keepdim=True)


def _haar_stiefel(shape: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
    """Haar-random matrices with orthonormal columns, shape (..., d, r), r ≤ d (QR of a Gaussian, signs fixed)."""
    q, r = torch.linalg.qr(torch.randn(shape, generator=generator, dtype=torch.float64))
    return q * torch.where(r.diagonal(dim1=-2, dim2=-1) < 0, -1.0, 1.0).unsqueeze(-2)


def rotated_like(z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """The rotation yardstick: each token set z (..., n, d) rotated by its own Haar-random orthogonal O (float64).

    Only O's action on the span of the set matters: with zᵀ = E C (thin QR, E d × r orthonormal, r = min(n, d)),
    Ozᵀ = (OE) C and OE is a Haar-random d × r orthonormal frame — O(d r²) instead of a d × d QR per set.
    """
    z = z.to(torch.float64)
    frame, coords = torch.linalg.qr(z.transpose(-2, -1))  # (..., d, r), (..., r, n)
    random_frame = _haar_stiefel(tuple(frame.shape), generator).to(z.device)
    return (random_frame @ coords).transpose(-2, -1)


def measures_from_yardsticks(z: torch.Tensor, weight: torch.Tensor, heads: int, eps: float,
                             isotropic: torch.Tensor, rotated: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every measure of the module docstring, given the yardsticks' token sets (deterministic).

    Args:
        z: tokens (..., n, d); weight: [U_1 … U_K]* (K·p, d); heads: K; eps: ε of the rates of unit tokens;
        isotropic, rotated: (draws, ..., n, d) isotropic token sets and rotations of z (`isotropic_like`,
            `rotated_like`); each is normalised to unit tokens, like z.

    Returns:
        name → (...) float64.
    """
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    _check_weight(weight, heads)
    if weight.shape[0] < weight.shape[1]:
        raise ValueError(f"the heads must hold every direction, K·p >= d (crate_theory.protocol); got a weight of "
                         f"shape {tuple(weight.shape)}")
    for name, sets in (("isotropic", isotropic), ("rotated", rotated)):
        if sets.ndim != z.ndim + 1 or sets.shape[1:] != z.shape:
            raise ValueError(f"{name} must be (draws, *z.shape) = (draws, {', '.join(map(str, z.shape))}), got "
                             f"{tuple(sets.shape)}")
    ortho = orthonormalise_heads(weight.to(torch.float64), heads)

    def rate(tokens: torch.Tensor) -> torch.Tensor:
        return compression(unit_tokens(tokens), ortho, heads, eps)

    own, iso_rate, rot_rate = rate(z), rate(isotropic).mean(0), rate(rotated).mean(0)
    return {"relative": own / iso_rate, "specific": own / rot_rate, "spread": rot_rate / iso_rate,
            "alignment": alignment(z, weight, heads),
            "isotropic_alignment": alignment(isotropic, weight, heads).mean(0),
            "rate_reduction": coding_rate(unit_tokens(z), eps) - own,
            "nonnegative": (z >= 0).flatten(-2).all(-1).to(torch.float64)}


def coding_rate(z: torch.Tensor, eps: float) -> torch.Tensor:
    """R(z) = ½ logdet(I + α zᵀz), α = d/(nε²) (eq. 8), per token set z (..., n, d): (...), float64."""
    n, d = z.shape[-2:]
    return half_logdet(z, d / (n * eps**2))


def joint_measures(z: torch.Tensor, weight: torch.Tensor, heads: int, eps: float = OFFICIAL_EPS, *,
                   draws: int = 8, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """The joint measure of token sets z (..., n, d) against a qkv weight: name → (...) (module docstring).

    Args:
        z: tokens (..., n, d); weight: [U_1 … U_K]* (K·p, d); heads: K; eps: ε of the rates of unit tokens;
        draws: sets per yardstick and token set; generator: their random source.
    """
    if draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws}")
    isotropic = torch.stack([isotropic_like(z, generator) for _ in range(draws)])
    rotated = torch.stack([rotated_like(z, generator) for _ in range(draws)])
    return measures_from_yardsticks(z, weight, heads, eps, isotropic, rotated)


def station_measures(layer_trace: LayerTrace, attention: nn.Module, eps: float = OFFICIAL_EPS, *, draws: int = 8,
                     generator: torch.Generator | None = None) -> dict[str, dict[str, torch.Tensor]]:
    """`joint_measures` of one layer's three stations (``STATIONS``) against its MSSA module (``qkv.weight``,
    ``heads``): station → name → (batch,). Works on the `LayerTrace` of any model's ``forward_intermediates``."""
    return {station: joint_measures(z, attention.qkv.weight, attention.heads, eps, draws=draws, generator=generator)
            for station, z in zip(STATIONS, (layer_trace.input, layer_trace.half, layer_trace.output))}


@dataclass
class LayerProfile:
    """Output of `layer_profile`: ``stats[measure][station]`` is a list over layers ℓ = 1 … L of `Stat`
    (per-image values, mean, std); ``eps`` the ε of the rates; ``draws`` the yardstick sets per image; ``sizes``
    the size measured, ``{"d", "n", "heads", "p"}`` (dimension, tokens per input, K and the head dimension of
    layer 1's MSSA), which `verify.joint` needs for its collapse floor."""

    eps: float
    draws: int
    stats: dict[str, dict[str, list[Stat]]]
    sizes: dict[str, int]

    def means(self, measure: str, station: str) -> list[float]:
        """Per-layer means of one measure at one station."""
        return [s.mean for s in self.stats[measure][station]]

    def all_means(self) -> dict:
        """`means` of every measure and station, ``{measure: {station: [per layer]}}``, and ``"sizes"``: ``sizes``
        (JSON-serialisable)."""
        return {**{name: {station: self.means(name, station) for station in by_station}
                   for name, by_station in self.stats.items()}, "sizes": dict(self.sizes)}


@torch.no_grad()
def layer_profile(model: nn.Module, images, eps: float = OFFICIAL_EPS, *, draws: int = 8, seed: int = 0,
                  batch_size: int = 64) -> LayerProfile:
    """The joint measure at every station of every encoder layer over a set of images (in the model's mode).

    Args:
        model: any CRATE model or stack with MSSA layers, as for `crate_nn.measure_layers`: `CRATEClassifier`
            (images (B, C, H, W)), CRATE-GPT (token ids (B, T)), a `CRATEEncoder` or CRATE-MAE's decoder stack
            (token batches (B, n, d)).
        images: the model's inputs: a tensor, split into ``batch_size`` chunks, or an iterable of batches /
            ``(inputs, labels)``; floating-point batches are cast to the model's dtype, integer ones (token ids)
            kept.
        eps: ε of the rates of unit tokens (default 0.1); draws: yardstick sets per image; seed: their seed.

    Returns:
        `LayerProfile`.
    """
    layers = _encoder_layers(model)
    not_mssa = _layers_without_mssa(layers)
    if not_mssa:
        raise TypeError(f"layer_profile needs MSSA layers (their U^ℓ define the measures); layers {not_mssa} have none")
    param = next(unwrap_model(model).parameters())
    generator = torch.Generator().manual_seed(seed)
    values = {m: {s: [[] for _ in layers] for s in STATIONS} for m in MEASURES}
    sizes = {}
    for batch in _batches(images, batch_size):
        batch = batch.to(device=param.device, dtype=param.dtype if batch.is_floating_point() else None)
        for i, t in enumerate(trace(model, batch)):
            if not sizes:
                attention = layers[0].attn
                sizes = {"d": t.input.shape[-1], "n": t.input.shape[-2], "heads": attention.heads,
                         "p": attention.qkv.weight.shape[0] // attention.heads}
            for station, measured in station_measures(t, layers[i].attn, eps, draws=draws,
                                                      generator=generator).items():
                for name, v in measured.items():
                    values[name][station][i].append(v.cpu())
    stats = {m: {s: [Stat(torch.cat(v)) for v in per_layer] for s, per_layer in by_station.items()}
             for m, by_station in values.items()}
    return LayerProfile(eps=float(eps), draws=draws, stats=stats, sizes=sizes)
