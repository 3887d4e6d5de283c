"""RandomResizedCrop + horizontal flip for a whole batch in one kernel: boxes drawn as torchvision draws them, all
crops resampled by one ``grid_sample`` call.

**Boxes** (`crop_boxes`): for each image of side H × W, torchvision's ``RandomResizedCrop.get_params``: up to
``TRIES`` = 10 tries of an area ``A = H·W·s``, s ~ U(scale), and an aspect ratio ``r = exp(t)``, t ~ U(log ratio),
giving ``w = round(√(A r))``, ``h = round(√(A / r))`` (round half to even, as Python's ``round``); the first try with
``0 < w ≤ W`` and ``0 < h ≤ H`` is placed at a uniform integer position (top ∈ [0, H − h], left ∈ [0, W − w]).
When no try fits, the central crop of the whole image clipped to the ratio range (w = W, h = round(W / min ratio)
if W/H is below the range; h = H, w = round(H · max ratio) above it; the whole image inside it). All tries of the
batch are drawn at once on the CPU (float64, from ``generator`` or torch's global generator, so that a resumed run
draws the same boxes); `boxes_from_draws` is the deterministic map from those uniform draws to the boxes.

**Pixels** (`resized_crop`): the crop (top, left, h, w) resized to S_h × S_w is what cropping and then
``F.interpolate(mode="bilinear", align_corners=False, antialias=False)`` gives: output column u reads the crop at
x = (u + ½)·w/S_w − ½ clamped to [0, w − 1] (rows alike), bilinearly. Here those coordinates, offset by the box and
reversed for flipped images, are built for the whole batch and sampled by one ``F.grid_sample`` (border padding,
which never reads outside the clamped coordinates), so a batch costs one kernel instead of one crop and one resize
per image. Like kornia's RandomResizedCrop (which it replaces in `crate_nn.data.transforms.DeviceTransform`), it
does not antialias when it shrinks; torchvision's PIL path does (a crop of a 256² square shrinks by at most
256/224 = 1.14 per side at the presets' sizes).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

TRIES = 10
RATIO = (3 / 4, 4 / 3)
"""torchvision's default aspect-ratio range, w/h (kornia's too)."""


def check_range(name: str, values: Sequence[float], upper: float | None = None) -> tuple[float, float]:
    """(low, high) of a range option with 0 < low ≤ high (≤ ``upper``), or ValueError naming ``name``."""
    low, high = (float(v) for v in values)
    if not 0 < low <= high or (upper is not None and high > upper):
        bound = f" ≤ {upper}" if upper is not None else ""
        raise ValueError(f"{name}: expected 0 < min ≤ max{bound}, got {tuple(values)}")
    return low, high


def boxes_from_draws(area: torch.Tensor, log_ratio: torch.Tensor, top: torch.Tensor, left: torch.Tensor,
                     height: int, width: int, scale: Sequence[float], ratio: Sequence[float] = RATIO) -> torch.Tensor:
    """Boxes (B, 4) int64, rows (top, left, h, w), from uniform draws in [0, 1): ``area`` and ``log_ratio`` (B, T),
    one column per try, and ``top``, ``left`` (B,), the position of the chosen box (module docstring)."""
    s0, s1 = scale
    t0, t1 = math.log(ratio[0]), math.log(ratio[1])
    target = height * width * (s0 + (s1 - s0) * area.double())
    aspect = torch.exp(t0 + (t1 - t0) * log_ratio.double())
    w = torch.round(torch.sqrt(target * aspect)).long()
    h = torch.round(torch.sqrt(target / aspect)).long()
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.long().argmax(dim=1, keepdim=True)  # the first try that fits (0 when none does)
    h, w = h.gather(1, first)[:, 0], w.gather(1, first)[:, 0]
    found = fits.any(dim=1)
    # the fallback: the central crop of the whole image, clipped to the ratio range
    if width / height < ratio[0]:
        fh, fw = round(width / ratio[0]), width
    elif width / height > ratio[1]:
        fh, fw = height, round(height * ratio[1])
    else:
        fh, fw = height, width
    h, w = torch.where(found, h, fh), torch.where(found, w, fw)

    def position(u: torch.Tensor, room: torch.Tensor) -> torch.Tensor:  # uniform on 0 … room − 1
        return torch.minimum((u.double() * room).floor().long(), room - 1)

    y = torch.where(found, position(top, height - h + 1), (height - fh) // 2)
    x = torch.where(found, position(left, width - w + 1), (width - fw) // 2)
    return torch.stack([y, x, h, w], dim=1)


def crop_boxes(count: int, height: int, width: int, scale: Sequence[float] = (0.08, 1.0),
               ratio: Sequence[float] = RATIO, generator: torch.Generator | None = None) -> torch.Tensor:
    """``count`` RandomResizedCrop boxes (top, left, h, w) of an image of ``height`` × ``width``: (count, 4) int64 on
    the CPU, drawn from ``generator`` (None: torch's global generator)."""
    draws = torch.rand(count, 2 * TRIES + 2, dtype=torch.float64, generator=generator)
    return boxes_from_draws(draws[:, :TRIES], draws[:, TRIES:2 * TRIES], draws[:, -2], draws[:, -1], height, width,
                            scale, ratio)


def _sample_positions(start: torch.Tensor, length: torch.Tensor, size: int, extent: int, dtype: torch.dtype
                      ) -> torch.Tensor:
    """(B, size) pixel coordinates along one axis where ``size`` outputs read crops [start, start + length) of an
    axis of ``extent`` pixels (interpolate's align_corners=False rule), normalised for grid_sample
    (align_corners=False: pixel i ↦ (2i + 1)/extent − 1)."""
    u = torch.arange(size, device=start.device, dtype=dtype)
    length = length.to(dtype)[:, None]
    inside = ((u + 0.5) * (length / size) - 0.5).clamp(min=0)
    inside = torch.minimum(inside, length - 1)
    return (2 * (start.to(dtype)[:, None] + inside) + 1) / extent - 1


def resized_crop(images: torch.Tensor, boxes: torch.Tensor, size: int | tuple[int, int],
                 flip: torch.Tensor | None = None) -> torch.Tensor:
    """Crop every image of ``images`` (B, C, H, W) float to its box (``boxes`` (B, 4): top, left, h, w, in
    pixels, inside the image) and resize it bilinearly to ``size`` (S or (S_h, S_w)), flipped horizontally where
    ``flip`` (B,) bool is True: (B, C, S_h, S_w), in one ``grid_sample`` (module docstring)."""
    if images.ndim != 4 or not images.is_floating_point():
        raise ValueError(f"images: expected a float (batch, channels, height, width) tensor, got {images.dtype} "
                         f"{tuple(images.shape)}")
    b, _, height, width = images.shape
    if boxes.shape != (b, 4):
        raise ValueError(f"boxes: expected shape ({b}, 4) (top, left, height, width per image), got "
                         f"{tuple(boxes.shape)}")
    top, left, h, w = boxes.unbind(dim=1)  # checked where they are (drawn on the CPU: no device sync)
    if not bool(((h >= 1) & (w >= 1) & (top >= 0) & (left >= 0) & (top + h <= height) & (left + w <= width)).all()):
        raise ValueError(f"boxes: every box must lie inside the {height}×{width} images with a positive size")
    top, left, h, w = boxes.to(images.device, non_blocking=True).unbind(dim=1)
    out_h, out_w = (size, size) if isinstance(size, int) else size
    xs = _sample_positions(left, w, out_w, width, images.dtype)
    ys = _sample_positions(top, h, out_h, height, images.dtype)
    if flip is not None:
        xs = torch.where(flip.to(images.device)[:, None], xs.flip(-1), xs)
    grid = torch.stack(torch.broadcast_tensors(xs[:, None, :], ys[:, :, None]), dim=-1)  # (B, S_h, S_w, (x, y))
    return F.grid_sample(images, grid, mode="bilinear", padding_mode="border", align_corners=False)


class RandomResizedCropFlip(nn.Module):
    """RandomResizedCrop(``size``, ``scale``, ``ratio``) and a horizontal flip with probability ``flip_p``, for a
    whole float batch (B, C, H, W) → (B, C, size, size) (boxes: `crop_boxes`, pixels: `resized_crop`). The random
    draws come from torch's global generator on the CPU, whatever the images' device."""

    def __init__(self, size: int, scale: Sequence[float] = (0.08, 1.0), ratio: Sequence[float] = RATIO,
                 flip_p: float = 0.5) -> None:
        super().__init__()
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size: expected a positive integer, got {size!r}")
        if not 0 <= flip_p <= 1:
            raise ValueError(f"flip_p: expected a probability in [0, 1], got {flip_p}")
        self.size, self.flip_p = size, float(flip_p)
        self.scale = check_range("crop_scale", scale, upper=1.0)
        self.ratio = check_range("ratio", ratio)

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        b, _, height, width = images.shape
        boxes = crop_boxes(b, height, width, self.scale, self.ratio)
        flip = torch.rand(b, dtype=torch.float64) < self.flip_p
        return resized_crop(images, boxes, self.size, flip)

    def extra_repr(self) -> str:
        return f"size={self.size}, scale={self.scale}, ratio=({self.ratio[0]:.4g}, {self.ratio[1]:.4g}), " \
               f"flip_p={self.flip_p}"
