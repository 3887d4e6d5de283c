"""DINO's multi-crop augmentation (Caron et al. 2020, 2021; footnote 13 of the long paper), on the device with kornia.

Every image of a batch gives G global crops and N local crops:

    global crop i   RandomResizedCrop(S, scale (0.4, 1)) → flip → colour jitter → grayscale → blur (p = 1.0 for even i,
                    0.1 for odd i) → solarisation (odd i only, p = 0.2) → normalise
    local crop      RandomResizedCrop(s, scale (0.05, 0.4)) → flip → colour jitter → grayscale → blur (p = 0.5) → normalise

with DINO's values as defaults: S = 224, s = 96, G = 2, N = 8, horizontal flip p = 0.5, colour jitter (brightness
0.4, contrast 0.4, saturation 0.2, hue 0.1) with p = 0.8, grayscale p = 0.2, Gaussian blur σ ∈ [0.1, 2] pixels,
solarisation at 0.5 (PIL's ``solarize``: values ≥ 0.5 become 1 − value). Crops are resampled bicubically (DINO),
all crops of a view in one batched warp (kornia's ``resample`` mode, without antialiasing) whose bicubic taps
outside the image repeat its border pixels, and clamped to [0, 1] (PIL does so in uint8). Kornia's own resample mode
pads with zeros: a crop touching the image's edge then mixes in black (a constant 0.8 image gave crop pixels
of 0.756), which neither PIL's resize nor kornia's slice mode (crop, then ``interpolate``, which clamps its taps to
the image) does; `BorderResizedCrop` keeps the batched warp with border padding. Differences from DINO's
per-image PIL pipeline, all forced by
batching on the device: kornia draws one order of the four jitter operations per batch (torchvision one per
image); the blur kernel is truncated at ±3σ_max (13 taps for σ_max = 2; PIL's box approximation has no fixed
support), and at ±(side − 1) on crops too small for that. All local crops of a batch go through one call
(the images tiled N times), so their random parameters are drawn per crop but the jitter order per batch.
Single-channel images skip saturation, hue and grayscale (each is the identity on a gray image).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


def _border_resized_crop():
    """kornia's RandomResizedCrop whose ``resample`` mode pads with the border pixels instead of zeros."""
    import kornia.augmentation as K
    from kornia.geometry.transform import crop_by_transform_mat

    class BorderResizedCrop(K.RandomResizedCrop):
        def apply_transform(self, input, params, flags, transform=None):
            output = crop_by_transform_mat(input, transform[:, :2, :], flags["size"],
                                           mode=flags["resample"].name.lower(), padding_mode="border",
                                           align_corners=flags["align_corners"])
            # a box one pixel wide along an axis: kornia's matrix puts that pixel at output index 0; repeat it
            # along the axis, as kornia does (with border padding the other indices would read its neighbours)
            src = params["src"].to(input.device)
            one_pixel = (src[:, 2] - src[:, 0]) == 0  # (B, 2): x, y
            output = torch.where(one_pixel[:, 0, None, None, None], output[..., :1].expand_as(output), output)
            return torch.where(one_pixel[:, 1, None, None, None], output[..., :1, :].expand_as(output), output)

    return BorderResizedCrop


class MultiCrop(nn.Module):
    """Images (B, C, H, W) (uint8, or float in [0, 1]) → (global crops (G·B, C, S, S), local crops (N·B, C, s, s) or
    None when N = 0), normalised with ``mean``/``std``, stacked view after view (rows v·B … (v+1)·B − 1 are view v
    of images 0 … B − 1). The arguments are named as the options of DINO's config that set them (its crops
    section builds this module: `crate_nn.tasks.dino.CropsSection`).

    Args:
        image_size, local_crop_size: S and s, the crops' sides (s ≤ S).
        global_crops, local_crops: G ≥ 1 and N ≥ 0, with at least two crops in all (the loss pairs views).
        global_crop_scale, local_crop_scale: area fractions (min, max) of the RandomResizedCrops, in (0, 1].
        load_size: resize the images to load_size² first (bilinear, antialiased) when their size differs, so that
            crops of tiny images (8×8 digits) are drawn on a finer grid; None keeps the input size.
        flip_p, color_jitter, color_jitter_p, grayscale_p, blur_sigma, blur_p, solarize_p: the photometric
            operations (module docstring); ``color_jitter`` = (brightness, contrast, saturation, hue); ``blur_p`` =
            (first global crop, second global crop, local crops).
    """

    def __init__(
        self,
        image_size: int = 224,
        local_crop_size: int = 96,
        *,
        mean: Sequence[float],
        std: Sequence[float],
        global_crops: int = 2,
        local_crops: int = 8,
        global_crop_scale: tuple[float, float] = (0.4, 1.0),
        local_crop_scale: tuple[float, float] = (0.05, 0.4),
        load_size: int | None = None,
        flip_p: float = 0.5,
        color_jitter: tuple[float, float, float, float] = (0.4, 0.4, 0.2, 0.1),
        color_jitter_p: float = 0.8,
        grayscale_p: float = 0.2,
        blur_sigma: tuple[float, float] = (0.1, 2.0),
        blur_p: tuple[float, float, float] = (1.0, 0.1, 0.5),
        solarize_p: float = 0.2,
    ) -> None:
        super().__init__()
        self.check(image_size, local_crop_size, mean=mean, std=std, global_crops=global_crops,
                   local_crops=local_crops, global_crop_scale=global_crop_scale, local_crop_scale=local_crop_scale,
                   load_size=load_size, blur_sigma=blur_sigma)
        import kornia.augmentation as K

        self.global_crops, self.local_crops, self.load_size = global_crops, local_crops, load_size
        color = len(mean) == 3
        brightness, contrast, saturation, hue = color_jitter
        if not color:
            saturation, hue = 0.0, 0.0
        support = math.ceil(3 * blur_sigma[1])  # kernel half-width: ±3σ_max
        resized_crop = _border_resized_crop()

        def view(size: int, scale: tuple[float, float], blur: float, solarize: float) -> nn.Sequential:
            """One view's operations; those that can never apply (probability or strength 0) are left out."""
            ops: list[nn.Module] = [resized_crop((size, size), scale=tuple(scale), resample="BICUBIC",
                                                 cropping_mode="resample"),
                                    nn.Hardtanh(0.0, 1.0)]
            if flip_p:
                ops.append(K.RandomHorizontalFlip(p=flip_p))
            if color_jitter_p and any((brightness, contrast, saturation, hue)):
                ops.append(K.ColorJitter(brightness, contrast, saturation, hue, p=color_jitter_p))
            if color and grayscale_p:
                ops.append(K.RandomGrayscale(p=grayscale_p))
            if blur:  # reflect padding needs a half-width below the side
                ops.append(K.RandomGaussianBlur(2 * min(support, size - 1) + 1, tuple(blur_sigma), p=blur))
            if solarize:
                ops.append(K.RandomSolarize(thresholds=0.0, additions=0.0, p=solarize))
            return nn.Sequential(*ops)

        self.global_views = nn.ModuleList(
            view(image_size, global_crop_scale, blur_p[i % 2], solarize_p if i % 2 else 0.0)
            for i in range(global_crops))
        self.local_view = view(local_crop_size, local_crop_scale, blur_p[2], 0.0)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)

    @staticmethod
    def check(image_size: int = 224, local_crop_size: int = 96, *, mean: Sequence[float], std: Sequence[float],
              global_crops: int = 2, local_crops: int = 8, global_crop_scale: tuple[float, float] = (0.4, 1.0),
              local_crop_scale: tuple[float, float] = (0.05, 0.4), load_size: int | None = None,
              blur_sigma: tuple[float, float] = (0.1, 2.0), **photometric) -> None:
        """ValueError naming the first argument `MultiCrop` cannot use: the constructor's checks, which DINO's config
        runs on its options before any work (the photometric probabilities are checked by their declarations)."""
        for name, value in (("image_size", image_size), ("local_crop_size", local_crop_size),
                            ("global_crops", global_crops), ("load_size", load_size or 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        if isinstance(local_crops, bool) or not isinstance(local_crops, int) or local_crops < 0:
            raise ValueError(f"local_crops: expected a non-negative integer, got {local_crops!r}")
        if global_crops + local_crops < 2:
            raise ValueError(f"global_crops, local_crops: the loss compares two crops at least, got {global_crops} "
                             f"global and {local_crops} local")
        if local_crop_size > image_size:
            raise ValueError(f"local_crop_size: a local crop ({local_crop_size}) larger than the global crops "
                             f"(image_size={image_size})")
        for name, (low, high) in (("global_crop_scale", global_crop_scale), ("local_crop_scale", local_crop_scale)):
            if not 0 < low <= high <= 1:
                raise ValueError(f"{name}: expected 0 < min ≤ max ≤ 1, got {(low, high)}")
        if not 0 < blur_sigma[0] <= blur_sigma[1]:
            raise ValueError(f"blur_sigma: expected 0 < min ≤ max, got {tuple(blur_sigma)}")
        if len(mean) != len(std):
            raise ValueError(f"mean, std: expected one value per channel in each, got {mean} and {std}")


    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if images.ndim != 4 or images.shape[1] != self.mean.shape[1]:
            raise ValueError(f"images: expected (batch, {self.mean.shape[1]}, height, width), got "
                             f"{tuple(images.shape)}")
        x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
        if self.load_size is not None and x.shape[-2:] != (self.load_size, self.load_size):
            x = F.interpolate(x, size=(self.load_size, self.load_size), mode="bilinear", align_corners=False,
                              antialias=True)
        globals_ = self._normalise(torch.cat([view(x) for view in self.global_views]))
        if not self.local_crops:
            return globals_, None
        return globals_, self._normalise(self.local_view(x.repeat(self.local_crops, 1, 1, 1)))

    def _normalise(self, crops: torch.Tensor) -> torch.Tensor:
        return (crops - self.mean) / self.std
