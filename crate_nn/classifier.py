"""The CRATE image classifier, eqs. (65)–(66) with the authors' pre- and post-processing.

    patches  = images cut into P×P patches, each flattened in (row, column, channel) order   (B, N, P²C)
    Z^1      = [z_cls, LN(Linear(LN(patches)))] + E_pos                                     (65), (B, N+1, d)
    Z^{L+1}  = encoder(Z^1)
    logits   = Linear(LN(pool(Z^{L+1})))            pool = class token (66) or token mean (72)

The position embedding is stored for the configured grid; `resample_pos_embed` moves it to another grid
(bicubic on the patch grid, class token kept), used on the fly when ``config.dynamic_img_size`` is set and by
`crate_nn.load_official_checkpoint(..., image_size=...)`.
"""
from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict

import torch
import torch.nn.functional as F
from torch import nn

from .config import CRATEConfig
from .layers import CRATEEncoder


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(B, C, H, W) → (B, (H/P)(W/P), P·P·C), patches in row-major grid order, each flattened as (p1 p2 c)."""
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // patch_size, patch_size, w // patch_size, patch_size)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // patch_size) * (w // patch_size), patch_size * patch_size * c)


def resample_pos_embed(pos_embed: torch.Tensor, new_grid: tuple[int, int], old_grid: tuple[int, int] | None = None) -> torch.Tensor:
    """Resample a (1, 1 + N, d) position embedding (class token first) to a ``new_grid`` = (rows, cols) of patches.

    The patch part is reshaped to its grid (``old_grid``, default square) and interpolated bicubically
    (align_corners=False); the class token's embedding is kept as is. Returns (1, 1 + rows·cols, d).
    """
    if pos_embed.ndim != 3 or pos_embed.shape[0] != 1:
        raise ValueError(f"pos_embed must have shape (1, 1 + N, d), got {tuple(pos_embed.shape)}")
    cls_pos, grid_pos = pos_embed[:, :1], pos_embed[:, 1:]
    n = grid_pos.shape[1]
    if old_grid is None:
        side = math.isqrt(n)
        if side * side != n:
            raise ValueError(f"pos_embed has {n} patch positions, not a square grid; pass old_grid")
        old_grid = (side, side)
    if old_grid[0] * old_grid[1] != n:
        raise ValueError(f"old_grid={old_grid} does not hold the {n} patch positions of pos_embed")
    if tuple(new_grid) == tuple(old_grid):
        return pos_embed
    d = pos_embed.shape[-1]
    grid = grid_pos.reshape(1, *old_grid, d).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=tuple(new_grid), mode="bicubic", align_corners=False)
    return torch.cat([cls_pos, grid.permute(0, 2, 3, 1).reshape(1, -1, d)], dim=1)


class PatchEmbed(nn.Module):
    """Patch embedding: (B, C, H, W) → (B, N, d) = LN(Linear(LN(patchify(images)))), the authors' f_pre part."""

    def __init__(self, patch_size: int, in_channels: int, dim: int) -> None:
        super().__init__()
        self.patch_size, self.in_channels = patch_size, in_channels
        patch_dim = patch_size * patch_size * in_channels
        self.norm_in = nn.LayerNorm(patch_dim)
        self.proj = nn.Linear(patch_dim, dim)  # W_pre of eq. (65), with bias
        self.norm_out = nn.LayerNorm(dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.norm_out(self.proj(self.norm_in(patchify(images, self.patch_size))))


class CRATEClassifier(nn.Module):
    """CRATE classifier: images (B, C, H, W) → logits (B, num_classes).

    Attributes: ``patch_embed``, ``cls_token`` (1, 1, d), ``pos_embed`` (1, N+1, d), ``encoder``
    (`CRATEEncoder`), ``head`` (``head.norm`` LayerNorm(d), ``head.fc`` Linear(d, C)), ``config``.
    """

    def __init__(self, config: CRATEConfig) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = PatchEmbed(config.patch_size, config.in_channels, config.dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, config.dim))  # std 1, as the authors
        self.pos_embed = nn.Parameter(torch.randn(1, config.num_patches + 1, config.dim))
        self.encoder = CRATEEncoder(config)
        self.head = nn.Sequential(
            OrderedDict(norm=nn.LayerNorm(config.dim), fc=nn.Linear(config.dim, config.num_classes))
        )

    @property
    def grid_size(self) -> tuple[int, int]:
        side = self.config.image_size // self.config.patch_size
        return side, side

    def check_images(self, images: torch.Tensor) -> None:
        """Raise TypeError/ValueError naming the problem if ``images`` is not a (B, C, H, W) batch this model takes."""
        cfg = self.config
        if not isinstance(images, torch.Tensor):
            raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
        if images.ndim != 4:
            raise ValueError(f"images must have shape (batch, channels, height, width), got rank {images.ndim} shape {tuple(images.shape)}")
        if not images.is_floating_point():
            raise TypeError(f"images must be a floating-point tensor, got dtype {images.dtype}")
        expected = self.pos_embed.dtype
        if images.dtype != expected and not torch.is_autocast_enabled(images.device.type):
            raise TypeError(f"images have dtype {images.dtype} but the model's parameters are {expected}")
        if images.shape[1] != cfg.in_channels:
            raise ValueError(f"images have {images.shape[1]} channels, the model expects in_channels={cfg.in_channels}")
        h, w = images.shape[-2:]
        if h % cfg.patch_size or w % cfg.patch_size:
            raise ValueError(f"image size {h}x{w} is not divisible by patch_size={cfg.patch_size}")
        if not cfg.dynamic_img_size and (h, w) != (cfg.image_size, cfg.image_size):
            raise ValueError(
                f"image size {h}x{w} differs from image_size={cfg.image_size} (set dynamic_img_size=True to resample "
                "the position embedding)"
            )

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """Z^1 = f_pre(images), eq. (65): (B, C, H, W) → (B, N+1, d)."""
        self.check_images(images)
        x = self.patch_embed(images)
        grid = (images.shape[-2] // self.config.patch_size, images.shape[-1] // self.config.patch_size)
        pos = resample_pos_embed(self.pos_embed, grid, self.grid_size)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return x + pos

    def pool(self, z: torch.Tensor) -> torch.Tensor:
        """(B, n, d) → (B, d): the class token (eq. 66) or the mean over tokens (eq. 72)."""
        return z.mean(dim=1) if self.config.pool == "mean" else z[:, 0]

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """Z^{L+1}, the encoder's output tokens: (B, C, H, W) → (B, N+1, d)."""
        return self.encoder(self.embed(images))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(self.pool(self.forward_features(images)))

    def reset_classifier(self, num_classes: int) -> None:
        """Replace ``head.fc`` by a freshly initialised Linear(d, num_classes) (fine-tuning, Sec. 4.1)."""
        self.config = dataclasses.replace(self.config, num_classes=num_classes)
        fc = self.head.fc
        self.head.fc = nn.Linear(self.config.dim, num_classes, device=fc.weight.device, dtype=fc.weight.dtype)
