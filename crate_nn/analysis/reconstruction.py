"""What a trained CRATE-MAE reconstructs, and how far its decoder layers are from inverting its encoder layers.

* `reconstruct`: original, masked input, reconstruction and reconstruction with the visible patches pasted back
  (Fig. 11), in the model's input space.
* `reconstruction_figure`: those four columns for a few images, as a matplotlib `Figure` (no pyplot);
  `show_reconstructions` does both for your own images (uint8 or [0, 1] floats of any size).
* `round_trip_errors`: per encoder layer f^ℓ, the relative error ‖g^{L−ℓ}(f^ℓ(Z^ℓ)) − Z^ℓ‖_F / ‖Z^ℓ‖_F of the
  paired decoder layer (Sec. 3: g^{L−ℓ} is meant to (partially) invert f^ℓ; Fig. 10), also up to each token's
  offset and scale, and of the whole stack.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from ..models.mae import NORM_PIX_EPS
from ..models.registry import unwrap_model
from .diagnostics import Stat

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass
class Reconstruction:
    """Images (B, C, H, W) in the model's input space and the mask (B, N) bool (True = masked)."""

    original: torch.Tensor
    masked: torch.Tensor  # masked patches set to NaN
    reconstruction: torch.Tensor
    pasted: torch.Tensor  # the visible patches of the original, the reconstruction elsewhere
    mask: torch.Tensor


@torch.no_grad()
def reconstruct(model: nn.Module, images: torch.Tensor, mask: torch.Tensor | None = None, *,
                mask_ratio: float = 0.75, generator: torch.Generator | None = None) -> Reconstruction:
    """Mask ``images`` (normalised as the model was trained; (B, C, H, W)), reconstruct them, in eval mode.

    ``mask`` (B, N) bool, or None to draw one with ``mask_ratio`` and ``generator``. A model trained with
    ``norm_pix_loss`` predicts each patch normalised; it is shown with the mean and variance of the original patch,
    which the model does not see for masked patches (as FAIR's MAE visualisation does).
    """
    model = unwrap_model(model)
    was_training = model.training
    model.eval()
    out = model(images, mask, mask_ratio=mask_ratio, generator=generator)
    model.train(was_training)
    pred = out.pred.to(images.dtype)
    if model.config.norm_pix_loss:
        target = model.patchify(images)
        pred = pred * (target.var(dim=-1, keepdim=True) + NORM_PIX_EPS).sqrt() + target.mean(dim=-1, keepdim=True)
    hidden = model.unpatchify(out.mask[..., None].expand_as(pred).to(images.dtype)).bool()
    reconstruction = model.unpatchify(pred)
    return Reconstruction(images, images.masked_fill(hidden, float("nan")), reconstruction,
                          torch.where(hidden, reconstruction, images), out.mask)


def reconstruction_figure(rec: Reconstruction, mean: Sequence[float], std: Sequence[float], *,
                          title: str | None = None, max_images: int = 8) -> Figure:
    """Fig. 11-style grid: one row per image (at most ``max_images``), columns original / masked input /
    reconstruction / reconstruction + visible patches; pixels un-normalised with ``mean``, ``std`` and clipped to
    [0, 1]; masked patches are left blank."""
    from matplotlib.figure import Figure

    columns = {"original": rec.original, f"masked ({rec.mask[0].float().mean():.0%})": rec.masked,
               "reconstruction": rec.reconstruction, "reconstruction + visible": rec.pasted}
    rows = min(max_images, rec.original.shape[0])
    fig = Figure(figsize=(1.6 * len(columns), 1.6 * rows + (0.4 if title else 0.2)), layout="constrained")
    axes = fig.subplots(rows, len(columns), squeeze=False)
    mean_, std_ = (torch.tensor(v, dtype=torch.float64).view(-1, 1, 1) for v in (mean, std))
    for j, (name, images) in enumerate(columns.items()):
        axes[0, j].set_title(name, fontsize=8)
        for i in range(rows):
            image = (images[i].detach().cpu().double() * std_ + mean_).clamp(0, 1)
            rgba = torch.cat([image.expand(3, -1, -1) if image.shape[0] == 1 else image[:3],
                              (~image[:1].isnan()).double()]).nan_to_num(0.0)
            ax = axes[i, j]
            ax.imshow(rgba.permute(1, 2, 0).numpy(), interpolation="nearest")
            ax.set_facecolor("#c9d6e3")  # the colour of masked patches
            ax.set_xticks([])
            ax.set_yticks([])
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def show_reconstructions(model: nn.Module, images: torch.Tensor, mean: Sequence[float], std: Sequence[float], *,
                         mask_ratio: float = 0.75, seed: int = 0, title: str | None = None) -> Figure:
    """`reconstruction_figure` of your own ``images`` (B, C, H, W): uint8 (0–255) or floats in [0, 1], of any size
    (resized to the model's image size), normalised with ``mean``/``std`` (those the model was trained with), masked
    at ``mask_ratio`` with masks drawn from ``seed``."""
    from ..data.transforms import DeviceTransform

    model = unwrap_model(model)
    param = next(model.parameters())
    prepare = DeviceTransform(model.config.image_size, mean, std, train=False).to(param.device)
    inputs = prepare(images.to(param.device)).to(param.dtype)
    generator = torch.Generator(param.device).manual_seed(seed)
    return reconstruction_figure(reconstruct(model, inputs, mask_ratio=mask_ratio, generator=generator), mean, std,
                                 title=title, max_images=images.shape[0])


@dataclass
class RoundTrip:
    """`round_trip_errors`: ``layers[ℓ−1]`` the per-image relative error of g^{L−ℓ}∘f^ℓ at Z^ℓ (ℓ = 1 … L),
    ``standardised[ℓ−1]`` the same with every token standardised first (mean 0, variance 1: the error up to each
    token's offset and scale, which the next layer's LayerNorm removes), and ``stack`` the whole autoencoder's
    ‖g(Z) − Z^1‖/‖Z^1‖ in feature space, Z the encoder's output."""

    layers: list[Stat]
    standardised: list[Stat]
    stack: Stat


def _relative(x: torch.Tensor, reference: torch.Tensor, standardise: bool = False) -> torch.Tensor:
    """‖x − reference‖_F / ‖reference‖_F per batch element, float64: (B, n, d) → (B,); with ``standardise`` each
    token of both is first shifted and scaled to mean 0, variance 1."""
    x, reference = x.double(), reference.double()
    if standardise:
        x, reference = (F.layer_norm(t, t.shape[-1:], eps=1e-12) for t in (x, reference))
    return (x - reference).flatten(1).norm(dim=1) / reference.flatten(1).norm(dim=1)


@torch.no_grad()
def round_trip_errors(model: nn.Module, images: torch.Tensor, mask: torch.Tensor | None = None) -> RoundTrip:
    """Per-layer round-trip errors of a CRATE-MAE on ``images`` (masked by ``mask``, default none), eval mode.

    Encoder layer f^ℓ (ℓ = 1 … L) maps its input tokens Z^ℓ to Z^{ℓ+1}; the decoder layer paired with it is
    g^{L−ℓ} (decoder layers g^0 … g^{L−1}, Fig. 10). Returns ‖g^{L−ℓ}(Z^{ℓ+1}) − Z^ℓ‖_F/‖Z^ℓ‖_F per image, and
    the whole stack's ‖g(Z) − Z^1‖_F/‖Z^1‖_F (Z after the final LayerNorm of the official wiring).
    """
    model = unwrap_model(model)
    was_training = model.training
    model.eval()
    tokens, traces = model.forward_intermediates(images, mask=mask)
    decoder = model.decoder.layers
    back = [decoder[len(traces) - 1 - i](t.output) for i, t in enumerate(traces)]
    layers = [Stat(_relative(b, t.input).cpu()) for b, t in zip(back, traces)]
    standardised = [Stat(_relative(b, t.input, standardise=True).cpu()) for b, t in zip(back, traces)]
    stack = Stat(_relative(model.decoder(model.norm(tokens)), traces[0].input).cpu())
    model.train(was_training)
    return RoundTrip(layers, standardised, stack)
