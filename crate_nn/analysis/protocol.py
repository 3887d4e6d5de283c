"""A scale-free measurement protocol for "layers decrease R^c" (Sec. 4.2, Figs. 14–15), in torch (row convention).

``crate_nn.measure_layers`` reports R^c(Z^{ℓ+1/2} | U^ℓ) (eq. 13), which grows with the tokens' energy and with
‖U^ℓ‖ (weight decay shrinks U, LayerNorms rescale tokens), and the authors' per-head unit-norm protocol. This
module separates compression from scale. For every encoder layer ℓ it measures three *stations* — the layer input
Z^ℓ, the MSSA output Z^{ℓ+1/2} and the ISTA output Z^{ℓ+1} — all against the layer's own U^ℓ (the ``qkv`` weight
[U_1 … U_K]*, rows of head k are U_k*), per image:

* ``rate``: R^c(z | U^ℓ) at ε (eq. 13, the paper's measure, as in ``measure_layers(protocol="paper")``);
* ``rate_orthonormal``: the same with each head's U_k orthonormalised (removes ‖U‖, keeps the tokens' scale);
* ``normalised``: R^c of per-head unit-norm codes — the authors' figures' normalisation (ε = 0.1);
* ``relative`` / ``relative_normalised``: ``rate_orthonormal`` / the normalised rate with the orthonormalised
  heads, each divided by its mean over isotropic token sets with the same count, dimension and norms (uniformly
  random directions): 1 = no structure, the ceiling. Neither the tokens' scale nor ‖U‖ (weight decay) enters;
* ``alignment``: each token's energy fraction in its own subspace, ‖P_k z_i‖²/‖z_i‖² with P_k the projector onto
  span(U_k) and k the subspace holding most of the token's energy; 1 = on a subspace (the ceiling);
* ``norm``: mean token ℓ2 norm;
* floors: ``isotropic_alignment`` (the alignment of the isotropic tokens) and ``aligned_relative`` (``relative`` of
  the tokens moved onto their own subspaces with their norms kept — what perfect alignment would give).

Everything is computed in float64 from ``crate_nn.analysis.diagnostics`` (`trace`, `head_codes`, and `compression`, which
rests on `subspace_rates`). The column-convention reference is ``crate_theory.protocol``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint import unwrap_model
from .diagnostics import OFFICIAL_EPS, Stat, _batches, _encoder_layers, compression, head_codes, trace

__all__ = ["STATIONS", "MEASURES", "LayerProfile", "aligned_like", "alignment", "isotropic_like", "layer_profile",
           "orthonormalise_heads", "subspace_energy", "token_measures"]

STATIONS = ("input", "half", "output")
"""Z^ℓ, Z^{ℓ+1/2} (after MSSA) and Z^{ℓ+1} (after ISTA)."""

MEASURES = ("rate", "rate_orthonormal", "normalised", "relative", "relative_normalised", "alignment", "norm",
            "isotropic_alignment", "aligned_relative")


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


def _heads(z: torch.Tensor, weight: torch.Tensor, heads: int):
    """float64 tokens, per-head blocks U_k* (K, p, d), (U_k*U_k)^+ (K, p, p) and codes U_k*z (..., K, n, p)."""
    _check_weight(weight, heads)
    z, weight = z.to(torch.float64), weight.to(torch.float64)
    blocks = weight.unflatten(0, (heads, weight.shape[0] // heads))
    return z, blocks, torch.linalg.pinv(blocks @ blocks.transpose(-2, -1)), head_codes(z, weight, heads)


def subspace_energy(z: torch.Tensor, weight: torch.Tensor, heads: int) -> torch.Tensor:
    """‖P_k z_i‖²/‖z_i‖² for tokens z (..., n, d) and every head k: (..., K, n), float64 (zero tokens give 0).

    P_k = U_k (U_k*U_k)^+ U_k* projects onto span(U_k), so ``‖P_k z‖² = c (U_k*U_k)^+ cᵀ`` with c = U_k*z.
    """
    z, _, inverse_gram, codes = _heads(z, weight, heads)
    energy = torch.einsum("...knp,kpq,...knq->...kn", codes, inverse_gram, codes)
    norms2 = z.square().sum(-1).unsqueeze(-2)
    return torch.where(norms2 > 0, energy / norms2.clamp_min(torch.finfo(torch.float64).tiny), 0.0)


def alignment(z: torch.Tensor, weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Mean over tokens of the largest energy fraction max_k ‖P_k z_i‖²/‖z_i‖² (own subspace): (...) ∈ [0, 1]."""
    return subspace_energy(z, weight, heads).amax(-2).mean(-1)


def isotropic_like(z: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Tokens with the norms of z (..., n, d) in uniformly random directions (float64): the yardstick."""
    z = z.to(torch.float64)
    directions = F.normalize(torch.randn(z.shape, generator=generator, dtype=torch.float64).to(z.device), dim=-1)
    return directions * z.norm(dim=-1, keepdim=True)


def aligned_like(z: torch.Tensor, weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Each token moved onto its own subspace (largest energy fraction) with its norm kept (float64): the floor."""
    z, blocks, inverse_gram, codes = _heads(z, weight, heads)
    own = subspace_energy(z, weight, heads).argmax(-2)  # (..., n)
    own_codes = codes.gather(-3, own[..., None, :, None].expand(*own.shape[:-1], 1, own.shape[-1],
                                                                 codes.shape[-1])).squeeze(-3)  # (..., n, p)
    # row form of P_k z = U_k (U_k*U_k)^+ U_k* z: c (U_k*U_k)^+ U_k*, with k the token's own head
    projected = torch.einsum("...np,...npq,...nqd->...nd", own_codes, inverse_gram[own], blocks[own])
    kept = projected.norm(dim=-1, keepdim=True)
    return torch.where(kept > 0, projected * (z.norm(dim=-1, keepdim=True) / kept.clamp_min(1e-300)), z)


def token_measures(z: torch.Tensor, weight: torch.Tensor, heads: int, eps: float = OFFICIAL_EPS, *,
                   draws: int = 8, generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Every measure of the module docstring for token sets z (..., n, d) against a qkv weight: name → (...).

    Args:
        z: tokens (..., n, d); weight: [U_1 … U_K]* (K·p, d); heads: K; eps: ε of R^c (both rates);
        draws: isotropic token sets per token set for the yardstick; generator: their random source.
    """
    if draws < 1:
        raise ValueError(f"draws must be a positive integer, got {draws}")
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    _check_weight(weight, heads)
    z, weight = z.to(torch.float64), weight.to(torch.float64)
    ortho = orthonormalise_heads(weight, heads)
    isotropic = torch.stack([isotropic_like(z, generator) for _ in range(draws)])
    rate_ortho = compression(z, ortho, heads, eps)
    iso_rate = compression(isotropic, ortho, heads, eps).mean(0)
    iso_normalised = compression(isotropic, ortho, heads, eps, normalize=True).mean(0)
    return {
        "rate": compression(z, weight, heads, eps),
        "rate_orthonormal": rate_ortho,
        "normalised": compression(z, weight, heads, eps, normalize=True),
        "relative": rate_ortho / iso_rate,
        "relative_normalised": compression(z, ortho, heads, eps, normalize=True) / iso_normalised,
        "alignment": alignment(z, weight, heads),
        "norm": z.norm(dim=-1).mean(-1),
        "isotropic_alignment": alignment(isotropic, weight, heads).mean(0),
        "aligned_relative": compression(aligned_like(z, weight, heads), ortho, heads, eps) / iso_rate,
    }


@dataclass
class LayerProfile:
    """Output of `layer_profile`: ``stats[measure][station]`` is a list over layers ℓ = 1 … L of `Stat`
    (per-image values, mean, std); ``eps`` the ε of the rates; ``draws`` the isotropic sets per image."""

    eps: float
    draws: int
    stats: dict[str, dict[str, list[Stat]]]

    def means(self, measure: str, station: str) -> list[float]:
        """Per-layer means of one measure at one station."""
        return [s.mean for s in self.stats[measure][station]]


@torch.no_grad()
def layer_profile(model: nn.Module, images, eps: float = OFFICIAL_EPS, *, draws: int = 8, seed: int = 0,
                  batch_size: int = 64) -> LayerProfile:
    """The protocol at every station of every encoder layer over a set of images (measured in the model's mode).

    Args:
        model: `CRATEClassifier` (images (B, C, H, W)) or `CRATEEncoder` (token batches (B, n, d)).
        images: a tensor, split into ``batch_size`` chunks, or an iterable of batches / ``(images, labels)``.
        eps: ε of the rates (default 0.1, the authors'); draws: isotropic sets per image; seed: their seed.

    Returns:
        `LayerProfile`.
    """
    layers = _encoder_layers(model)
    param = next(unwrap_model(model).parameters())
    generator = torch.Generator().manual_seed(seed)
    values = {m: {s: [[] for _ in layers] for s in STATIONS} for m in MEASURES}
    for batch in _batches(images, batch_size):
        for i, t in enumerate(trace(model, batch.to(device=param.device, dtype=param.dtype))):
            mssa = layers[i].mssa
            for station, z in zip(STATIONS, (t.input, t.half, t.output)):
                measured = token_measures(z, mssa.qkv.weight, mssa.heads, eps, draws=draws, generator=generator)
                for name, v in measured.items():
                    values[name][station][i].append(v.cpu())
    stats = {m: {s: [Stat(torch.cat(v)) for v in per_layer] for s, per_layer in by_station.items()}
             for m, by_station in values.items()}
    return LayerProfile(eps=float(eps), draws=draws, stats=stats)

