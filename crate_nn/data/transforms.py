"""On-device augmentation and normalisation (kornia), applied to whole batches on the training device."""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

AUGMENTATIONS = ("none", "flip", "shift", "rrc_flip", "randaugment")


class DeviceTransform(nn.Module):
    """Batch augmentation and normalisation on the training device (kornia), (B, C, H, W) → float (B, C, S, S).

    uint8 input is scaled by 1/255, float input is taken as [0, 1]. ``augment``:

    * ``none``; ``flip`` (horizontal flip, p = 0.5);
    * ``shift`` (zero-pad by ``shift`` pixels, random crop back: integer translations, for images that are not
      flip-invariant such as digits);
    * ``rrc_flip`` (RandomResizedCrop(S, scale) + flip: the papers' pre-training augmentation);
    * ``randaugment`` (rrc_flip followed by RandAugment(n, m): fine-tuning).


    ``randaugment_m`` is on timm's scale (levels out of 10, which the paper's "timm auto_augment" m = 14 refers
    to); kornia's magnitude is out of 30, so it receives ``min(3 m, 29.9)``. Evaluation (``train=False``) only
    resizes to S when the input differs, then normalises.
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
    ):
        super().__init__()
        import kornia.augmentation as K

        if augment not in AUGMENTATIONS:
            raise ValueError(f"augment: expected one of {', '.join(AUGMENTATIONS)}, got {augment!r}")
        self.image_size = image_size
        ops: list[nn.Module] = []
        if train and augment in ("rrc_flip", "randaugment"):
            ops.append(K.RandomResizedCrop((image_size, image_size), scale=tuple(crop_scale)))
        if train and augment == "shift":
            ops.append(K.RandomCrop((image_size, image_size), padding=shift))
        if train and augment in ("flip", "rrc_flip", "randaugment"):
            ops.append(K.RandomHorizontalFlip(p=0.5))
        if train and augment == "randaugment":
            from kornia.augmentation.auto import RandAugment

            ops.append(RandAugment(n=randaugment_n, m=min(3.0 * randaugment_m, 29.9)))
        self.augment = nn.Sequential(*ops)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
        if len(self.augment):
            x = self.augment(x)
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            x = nn.functional.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear",
                                          align_corners=False, antialias=True)
        return (x - self.mean) / self.std

