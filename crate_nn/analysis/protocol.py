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

The yardsticks are drawn per head, as ``crate_theory.protocol`` derives ("Drawing the yardsticks": the same
expectations, a Monte-Carlo error within 0.8–1.7× of drawing a whole rotation): the isotropic rates on coordinate
blocks of isotropic sets (`head_blocks`), the isotropic alignment from their first `ALIGNMENT_TOKENS` tokens, the
rotated rates from the spectrum of the unit tokens' Gram matrix (`unit_spectrum`) and one Gaussian frame per head
(`rotation_frames`, `rotated_rates`), with a control variate. At the network audit's sizes (d 768, K 12, 2 draws)
a set of 1,024 tokens costs 3.1× less CPU time than with the tokens rotated whole (218 against 666 ms of CPU on a
2-core AMD EPYC) and one of 197 tokens 2.1× less (``python -m benchmarks.joint_measure``,
benchmarks/results/cpu/joint_measure.json).

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
    by_head,
    half_logdet,
    subspace_rates,
    trace,
)

__all__ = ["STATIONS", "MEASURES", "ALIGNMENT_TOKENS", "LayerProfile", "alignment", "coding_rate", "head_blocks",
           "isotropic_like", "joint_measures", "layer_profile", "measures_from_yardsticks", "orthonormalise_heads",
           "rotated_rates", "rotation_frames", "station_measures", "subspace_energy", "unit_spectrum", "unit_tokens"]

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


def _largest_fraction(codes: torch.Tensor, heads: int) -> torch.Tensor:
    """Mean over tokens of max_k ‖Q_k* ẑ_i‖², the own-subspace energy fraction, from the codes (..., n, K·p) of
    unit tokens on orthonormalised heads: (...)."""
    return codes.square().unflatten(-1, (heads, -1)).sum(-1).amax(-1).mean(-1)


def subspace_energy(z: torch.Tensor, weight: torch.Tensor, heads: int) -> torch.Tensor:
    """‖P_k z_i‖²/‖z_i‖² for tokens z (..., n, d) and every head k: (..., K, n), float64 (zero tokens give 0).

    With the orthonormalised heads Q_k, ‖P_k z‖² = ‖Q_k* z‖².
    """
    codes = unit_tokens(z) @ orthonormalise_heads(weight.to(torch.float64), heads).mT
    return codes.square().unflatten(-1, (heads, -1)).sum(-1).transpose(-2, -1)


def alignment(z: torch.Tensor, weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Mean over tokens of the largest energy fraction max_k ‖P_k z_i‖²/‖z_i‖² (own subspace): (...) ∈ [0, 1]."""
    return _largest_fraction(unit_tokens(z) @ orthonormalise_heads(weight.to(torch.float64), heads).mT, heads)


def unit_tokens(z: torch.Tensor) -> torch.Tensor:
    """Every token (last axis) divided by its ℓ2 norm, float64; zero tokens stay zero."""
    z = z.to(torch.float64)
    norms = z.norm(dim=-1, keepdim=True)
    return z * torch.where(norms > 0, 1 / norms.clamp_min(torch.finfo(torch.float64).tiny), 0.0)


# ------------------------------------------------------------------------------------------------ the yardsticks
ALIGNMENT_TOKENS = 256
"""Tokens of each isotropic set whose energies give ``isotropic_alignment`` (``crate_theory.protocol``'s constant)."""


def _gaussian(shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device) -> torch.Tensor:
    """Standard normals drawn in float32 (4× faster than float64 on the CPU; their rounding, 6e-8 relative, lies far
    below any yardstick's Monte-Carlo error) and returned in float64 on ``device``."""
    return torch.randn(shape, generator=generator).to(device=device, dtype=torch.float64)


def isotropic_like(z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Tokens with the norms of z (..., n, d) in uniformly random directions (float64): the isotropic yardstick."""
    z = z.to(torch.float64)
    gaussian = _gaussian(z.shape, generator, z.device)
    return gaussian * (z.norm(dim=-1, keepdim=True) / gaussian.norm(dim=-1, keepdim=True))


def head_blocks(d: int, heads: int, p: int) -> torch.Tensor:
    """The coordinates on which the isotropic yardstick takes head k's rate, (K, p): ``kp … kp + p − 1`` modulo d
    (``crate_theory.protocol.head_blocks``)."""
    return (torch.arange(heads)[:, None] * p + torch.arange(p)) % d


def _isotropic_rates(unit: torch.Tensor, heads: int, p: int, eps: float) -> torch.Tensor:
    """R^c of unit isotropic token sets (..., n, d), head k on the coordinates `head_blocks` gives it: (...)."""
    d = unit.shape[-1]
    columns = unit if heads * p == d else unit[..., head_blocks(d, heads, p).flatten().to(unit.device)]
    return subspace_rates(by_head(columns, heads), eps).sum(-1)  # Kp = d: the K blocks as they lie


def rotation_frames(z: torch.Tensor, heads: int, p: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """The rotation yardstick's random orientations for each token set z (..., n, d): (..., K, m, p) float64, one
    frame per head in the eigenbasis of `unit_spectrum` (``crate_theory.protocol``, "Drawing the yardsticks").

    The first r = min(n, d) rows, those of the eigenvalues that can be non-zero, are standard Gaussian; the other
    d − r rows of a Gaussian d × p matrix enter only through their Gram matrix, so they are replaced by the
    triangular factor of their QR — Bartlett's: χ_{d−r−j} on the diagonal (j = 0 … p − 1), standard Gaussians above
    it — or kept when there are at most p of them: m = r + min(d − r, p).
    """
    *batch, n, d = z.shape
    r = min(n, d)
    rest = d - r
    top = _gaussian((*batch, heads, r, p), generator, z.device)
    if rest == 0:
        return top
    if rest <= p:
        return torch.cat([top, _gaussian((*batch, heads, rest, p), generator, z.device)], dim=-2)
    half_degrees = (rest - torch.arange(p, dtype=torch.float64)).expand(*batch, heads, p) / 2
    chi2 = 2 * torch._standard_gamma(half_degrees, generator=generator)  # χ²_k = 2·Gamma(k/2), torch's own sampler
    bartlett = _gaussian((*batch, heads, p, p), generator, z.device).triu(1) + torch.diag_embed(chi2.sqrt().to(z.device))
    return torch.cat([top, bartlett], dim=-2)


def _spectrum(unit: torch.Tensor) -> torch.Tensor:
    """`unit_spectrum` of unit tokens (..., n, d)."""
    gram = unit.mT @ unit if unit.shape[-2] >= unit.shape[-1] else unit @ unit.mT
    return torch.linalg.eigvalsh(gram).clamp_min(0.0)


def unit_spectrum(z: torch.Tensor) -> torch.Tensor:
    """The eigenvalues of the unit tokens' Gram matrix for token sets z (..., n, d) that can be non-zero: (..., r),
    r = min(n, d), ascending, float64 (from the smaller Gram matrix; rounding below 0 set to 0)."""
    return _spectrum(unit_tokens(z))


def _control_weights(spectrum: torch.Tensor, d: int, p: int, beta: float) -> torch.Tensor:
    """φ_i = ½βλ_i t / (1 + βλ_i t p/d) per spectrum (..., r), t ∈ (0, 1] the root of
    t (1 + (β/d) Σ_i λ_i / (1 + βλ_i t p/d)) = 1 by 64 halvings of [0, 1] (``crate_theory.protocol``)."""
    low = torch.zeros(spectrum.shape[:-1], dtype=torch.float64, device=spectrum.device)
    high = torch.ones_like(low)
    for _ in range(64):
        t = (low + high) / 2
        below = t * (1 + beta / d * (spectrum / (1 + beta * spectrum * t[..., None] * p / d)).sum(-1)) < 1
        low, high = torch.where(below, t, low), torch.where(below, high, t)
    t = ((low + high) / 2)[..., None]
    return 0.5 * beta * spectrum * t / (1 + beta * spectrum * t * p / d)


def rotated_rates(spectrum: torch.Tensor, frames: torch.Tensor, d: int, n: int, eps: float) -> torch.Tensor:
    """The rotation yardstick's estimates of E_O R^c(Oẑ | U): ``Σ_k [½ logdet(I + β V_kᵀΛV_k) − Σ_i φ_i (‖row_i V_k‖²
    − p/d)]``, V_k an orthonormal basis of frame F_k's span, β = p/(nε²) (``crate_theory.protocol.rotated_rates``).

    V = F L⁻ᵀ with LLᵀ = FᵀF (Cholesky; the reference orthonormalises by Householder QR): only its first r rows are
    formed, and ½ logdet(I + βVᵀΛV) is taken from the smaller of the p × p and r × r Gram matrices (`half_logdet`).

    Args:
        spectrum: (..., r) from `unit_spectrum`; frames: (draws, ..., K, m, p), r ≤ m ≤ d, from `rotation_frames`;
            d, n: the tokens' dimension and number; eps: ε > 0.

    Returns:
        (draws, ...) float64.
    """
    r, p = spectrum.shape[-1], frames.shape[-1]
    beta = p / (n * eps**2)
    frames = frames.to(torch.float64)
    factor = torch.linalg.cholesky(frames.mT @ frames)
    top = torch.linalg.solve_triangular(factor, frames[..., :r, :].mT, upper=False).mT  # (draws, ..., K, r, p)
    rates = half_logdet(spectrum.sqrt()[..., None, :, None] * top, beta)
    energy = top.square().sum(-1) - p / d
    return (rates - (energy * _control_weights(spectrum, d, p, beta)[..., None, :]).sum(-1)).sum(-1)


def measures_from_yardsticks(z: torch.Tensor, weight: torch.Tensor, heads: int, eps: float,
                             isotropic: torch.Tensor, frames: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every measure of the module docstring, given the yardsticks' random draws (deterministic).

    Args:
        z: tokens (..., n, d); weight: [U_1 … U_K]* (K·p, d); heads: K; eps: ε of the rates of unit tokens;
        isotropic: (draws, ..., n, d) isotropic token sets (`isotropic_like`), normalised to unit tokens;
        frames: (draws', ..., K, m, p) orientations of the rotation yardstick (`rotation_frames`; any m with
            min(n, d) ≤ m ≤ d, m ≥ p).

    Returns:
        name → (...) float64.
    """
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    _check_weight(weight, heads)
    if weight.shape[0] < weight.shape[1]:
        raise ValueError(f"the heads must hold every direction, K·p >= d (crate_theory.protocol); got a weight of "
                         f"shape {tuple(weight.shape)}")
    *batch, n, d = z.shape
    p = weight.shape[0] // heads
    if isotropic.ndim != z.ndim + 1 or isotropic.shape[1:] != z.shape:
        raise ValueError(f"isotropic must be (draws, *z.shape) = (draws, {', '.join(map(str, z.shape))}), got "
                         f"{tuple(isotropic.shape)}")
    if (frames.ndim != z.ndim + 2 or list(frames.shape[1:-3]) != batch or frames.shape[-3] != heads
            or frames.shape[-1] != p or not max(min(n, d), p) <= frames.shape[-2] <= d):
        raise ValueError(f"frames must be (draws, {', '.join(map(str, batch))}{', ' if batch else ''}K = {heads}, m, "
                         f"p = {p}) with min(n, d) <= m <= d, got {tuple(frames.shape)}")
    ortho = orthonormalise_heads(weight.to(torch.float64), heads).mT  # (d, K·p)
    unit, iso = unit_tokens(z), unit_tokens(isotropic)
    codes = unit @ ortho
    own = subspace_rates(by_head(codes, heads), eps).sum(-1)
    spectrum = _spectrum(unit)
    rate = 0.5 * torch.log1p(d / (n * eps**2) * spectrum).sum(-1)  # R(ẑ) of eq. (8) from its eigenvalues
    rot_rate = rotated_rates(spectrum, frames, d, n, eps).mean(0)
    iso_rate = _isotropic_rates(iso, heads, p, eps).mean(0)
    return {"relative": own / iso_rate, "specific": own / rot_rate, "spread": rot_rate / iso_rate,
            "alignment": _largest_fraction(codes, heads),
            "isotropic_alignment": _largest_fraction(iso[..., :ALIGNMENT_TOKENS, :] @ ortho, heads).mean(0),
            "rate_reduction": rate - own,
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
    _check_weight(weight, heads)
    isotropic = torch.stack([isotropic_like(z, generator) for _ in range(draws)])
    frames = torch.stack([rotation_frames(z, heads, weight.shape[0] // heads, generator) for _ in range(draws)])
    return measures_from_yardsticks(z, weight, heads, eps, isotropic, frames)


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
