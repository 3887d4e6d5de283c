"""On-device augmentation and normalisation, applied to whole batches on the training device: RandomResizedCrop +
flip in one kernel for the batch (`crate_nn.data.resized_crop`), kornia for the other operations."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..preprocessing import channel_count
from .resized_crop import RandomResizedCropFlip

AUGMENTATIONS = ("none", "flip", "shift", "rrc_flip", "randaugment")
KORNIA_MAX_MAGNITUDE = 29.9  # kornia's RandAugment takes m strictly inside (0, 30)


def kornia_magnitude(m: float) -> float:
    """kornia's RandAugment magnitude for the magnitude ``m`` of timm's ``rand-m{m}`` policy (the papers' m = 14).

    timm scales every operation by ``m / 10`` of its range (``_LEVEL_DENOM = 10``); kornia by ``m / 30`` of its own
    ranges, which are timm's (rotate ±30°, shear ±0.3, translate ±0.1 of the side, colour/contrast/brightness/
    sharpness factors 0.1–1.9, posterize, solarize). The same fraction of each range is therefore ``3 m``. timm lets
    m exceed 10 and so leaves its ranges (m = 14: rotations up to 42°); kornia cannot, so m ≥ 10 is clipped to
    kornia's largest magnitude, 29.9, i.e. 99.7% of each range (m = 14: rotations of ±29.9°). That clipping is the
    one difference from timm's m14, and it makes the fine-tuning augmentation slightly milder than the papers'.
    """
    if not m > 0:
        raise ValueError(f"randaugment_m: expected a positive magnitude, got {m}")
    return min(3.0 * m, KORNIA_MAX_MAGNITUDE)


LUMA = (0.299, 0.587, 0.114)
"""ITU-R 601-2 luma weights of R, G, B: Pillow's conversion of RGB to gray ("L")."""


def to_channels(images: torch.Tensor, channels: int) -> torch.Tensor:
    """(B, C, H, W) float images as (B, ``channels``, H, W): unchanged when C is ``channels``; a gray image's
    channel repeated (1 → 3); an RGB image's luma, `LUMA` (3 → 1); ValueError for any other pair."""
    have = images.shape[1]
    if have == channels:
        return images
    if (have, channels) == (1, 3):
        return images.expand(-1, 3, -1, -1)
    if (have, channels) == (3, 1):
        return torch.einsum("bchw,c->bhw", images, images.new_tensor(LUMA)).unsqueeze(1)
    raise ValueError(f"channels: images of {channel_count(have)} are not converted to {channels} (only 1 and 3 into each "
                     "other)")


class DeviceTransform(nn.Module):
    """Batch augmentation and normalisation on the training device, (B, C, H, W) → float (B, C, S, S).

    uint8 input is scaled by 1/255, float input is taken as [0, 1]. ``augment``:

    * ``none``; ``flip`` (horizontal flip, p = 0.5);
    * ``shift`` (zero-pad by ``shift`` pixels, random crop back: integer translations, for images that are not
      flip-invariant such as digits);
    * ``rrc_flip`` (RandomResizedCrop(S, scale) + flip: the papers' pre-training augmentation; boxes drawn as
      torchvision draws them, all crops of the batch resampled by one ``grid_sample``,
      `crate_nn.data.resized_crop.RandomResizedCropFlip`);
    * ``randaugment`` (rrc_flip followed by kornia's RandAugment(n, m): fine-tuning).


    ``randaugment_m`` is on timm's scale (see `kornia_magnitude`). Evaluation (``train=False``) only resizes to S
    when the input differs, then normalises. ``channels`` converts the images to that many channels first
    (`to_channels`: a command's ``--channels``); the images must then have one channel per value of ``mean`` (a
    ValueError otherwise: broadcasting a gray batch against three means would feed the model three channels
    silently).
    """

    def __init__(
        self,
        image_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        train: bool,
        augment: str = "none",
        crop_scale: tuple[float, float] = (0.08, 1.0),
        randaugment_n: int = 2,
        randaugment_m: float = 14.0,
        shift: int = 1,
        channels: int | None = None,
    ):
        super().__init__()
        import kornia.augmentation as K

        if augment not in AUGMENTATIONS:
            raise ValueError(f"augment: expected one of {', '.join(AUGMENTATIONS)}, got {augment!r}")
        if len(mean) != len(std):
            raise ValueError(f"mean, std: one value per channel in each, got {len(mean)} and {len(std)}")
        self.image_size, self.channels = image_size, channels
        ops: list[nn.Module] = []
        if train and augment in ("rrc_flip", "randaugment"):
            ops.append(RandomResizedCropFlip(image_size, scale=tuple(crop_scale), flip_p=0.5))
        if train and augment == "shift":
            ops.append(K.RandomCrop((image_size, image_size), padding=shift))
        if train and augment == "flip":
            ops.append(K.RandomHorizontalFlip(p=0.5))
        if train and augment == "randaugment":
            from kornia.augmentation.auto import RandAugment

            ops.append(RandAugment(n=randaugment_n, m=kornia_magnitude(randaugment_m)))
        self.augment = nn.Sequential(*ops)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
        if self.channels is not None:
            x = to_channels(x, self.channels)
        if x.shape[1] != self.mean.shape[1]:
            raise ValueError(f"images have {channel_count(x.shape[1])}, the normalisation (mean, std) "
                             f"{self.mean.shape[1]} values each")
        if len(self.augment):
            x = self.augment(x)
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            x = nn.functional.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear",
                                          align_corners=False, antialias=True)
        return (x - self.mean) / self.std

