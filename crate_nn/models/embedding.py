"""Patch embeddings and position embeddings of the image models (f_pre of eqs. 65, 69, 74).

* `patchify`: (B, C, H, W) → (B, N, P·P·C), patches in row-major grid order, each flattened as (p1 p2 c) — the
  authors' ``b c (h p1) (w p2) -> b (h w) (p1 p2 c)``.
* `PatchEmbed`: ``kind="linear"`` — LN(P²C) → Linear(P²C, d) → LN(d), the authors' CRATE classifier;
  ``kind="conv"`` — Conv2d(C, d, kernel = stride = P) with bias, no LayerNorm (CRATE-α, CRATE-MAE, ViT). The two
  flatten patches in different orders ((p1 p2 c) vs the convolution's (c p1 p2)); converting weights between
  them is a permutation.
* `resample_pos_embed`: move a (1, 1 + N, d) position embedding to another patch grid (bicubic, class token kept).
* `unpatchify`: the inverse of `patchify`; `check_images`: the input checks every image model makes; `PatchGrid`:
  the grid, patch count and patch length of a config.
* `sincos_pos_embed_2d`: the fixed 2-D sine-cosine position table of CRATE-MAE (and FAIR's MAE).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..preprocessing import channel_count

PATCH_EMBEDS = ("linear", "conv")


class PatchGrid:
    """The patch grid of a model config with ``image_size``, ``patch_size`` and ``in_channels`` (square images)."""

    @property
    def grid(self) -> tuple[int, int]:
        """(rows, columns) of patches."""
        side = self.image_size // self.patch_size
        return side, side

    @property
    def num_patches(self) -> int:
        """N = (image_size / patch_size)²."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def patch_dim(self) -> int:
        """P²·C, the length of a flattened patch."""
        return self.patch_size**2 * self.in_channels


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(B, C, H, W) → (B, (H/P)(W/P), P·P·C), patches in row-major grid order, each flattened as (p1 p2 c)."""
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // patch_size, patch_size, w // patch_size, patch_size)
    return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // patch_size) * (w // patch_size), patch_size * patch_size * c)


def unpatchify(patches: torch.Tensor, patch_size: int, grid: tuple[int, int], channels: int) -> torch.Tensor:
    """(B, rows·cols, P·P·C) patches flattened as (p1 p2 c), row-major → (B, C, rows·P, cols·P); inverts `patchify`."""
    b = patches.shape[0]
    rows, cols = grid
    x = patches.reshape(b, rows, cols, patch_size, patch_size, channels)
    return x.permute(0, 5, 1, 3, 2, 4).reshape(b, channels, rows * patch_size, cols * patch_size)


def sincos_pos_embed_2d(dim: int, grid: tuple[int, int], cls_token: bool = True) -> torch.Tensor:
    """The fixed 2-D sine-cosine position table, (1, [1 +] rows·cols, dim), float64 on the CPU, patches in row-major
    order.

    For the patch in row r and column c: channels [0, d/2) encode the column c and [d/2, d) the row r, each half as
    ``[sin(c ω_0) … sin(c ω_{d/4−1}), cos(c ω_0) … cos(c ω_{d/4−1})]`` with ω_k = 10000^(−4k/d). With ``cls_token``
    a zero row is prepended for the class token. ``dim`` must be divisible by 4.
    """
    if dim % 4:
        raise ValueError(f"dim: the 2-D sine-cosine table needs a multiple of 4, got {dim}")
    rows, cols = grid
    cpu = dict(dtype=torch.float64, device="cpu")  # computed on the CPU whatever the ambient default device
    omega = 10000.0 ** (-torch.arange(dim // 4, **cpu) / (dim // 4))
    row, col = torch.meshgrid(torch.arange(rows, **cpu), torch.arange(cols, **cpu), indexing="ij")

    def half(position: torch.Tensor) -> torch.Tensor:
        angles = position.reshape(-1, 1) * omega  # (rows·cols, d/4)
        return torch.cat([angles.sin(), angles.cos()], dim=1)

    table = torch.cat([half(col), half(row)], dim=1)
    if cls_token:
        table = torch.cat([torch.zeros(1, dim, **cpu), table])
    return table.unsqueeze(0)


def check_images(images, *, in_channels: int, patch_size: int, image_size: int | None, dtype: torch.dtype,
                 hint: str = "") -> None:
    """Raise TypeError/ValueError naming the problem unless ``images`` is a floating (B, C, H, W) batch of ``dtype``
    (any dtype under autocast) with ``in_channels`` channels, sides divisible by ``patch_size`` and, unless
    ``image_size`` is None, ``image_size`` pixels square (``hint`` is appended to that message)."""
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"images must be a torch.Tensor, got {type(images).__name__}")
    if images.ndim != 4:
        raise ValueError(f"images must have shape (batch, channels, height, width), got rank {images.ndim} shape {tuple(images.shape)}")
    if not images.is_floating_point():
        raise TypeError(f"images must be a floating-point tensor, got dtype {images.dtype}")
    if images.dtype != dtype and not torch.is_autocast_enabled(images.device.type):
        raise TypeError(f"images have dtype {images.dtype} but the model's parameters are {dtype}")
    if images.shape[1] != in_channels:
        raise ValueError(f"images have {channel_count(images.shape[1])}, the model expects in_channels={in_channels}")
    h, w = images.shape[-2:]
    if h % patch_size or w % patch_size:
        raise ValueError(f"image size {h}x{w} is not divisible by patch_size={patch_size}")
    if image_size is not None and (h, w) != (image_size, image_size):
        raise ValueError(f"image size {h}x{w} differs from image_size={image_size}{hint}")


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
    """Patch embedding: (B, C, H, W) → (B, N, d).

    ``kind="linear"``: LN(Linear(LN(patchify(images)))) (``norm_in``, ``proj``, ``norm_out``; the authors' CRATE).
    ``kind="conv"``: ``proj`` = Conv2d(C, d, P, stride=P) with bias (CRATE-α, CRATE-MAE, ViT).
    """

    def __init__(self, patch_size: int, in_channels: int, dim: int, kind: str = "linear") -> None:
        super().__init__()
        if kind not in PATCH_EMBEDS:
            raise ValueError(f"patch_embed must be one of {PATCH_EMBEDS}, got {kind!r}")
        self.patch_size, self.in_channels, self.kind = patch_size, in_channels, kind
        if kind == "conv":
            self.proj = nn.Conv2d(in_channels, dim, kernel_size=patch_size, stride=patch_size)
            return
        patch_dim = patch_size * patch_size * in_channels
        self.norm_in = nn.LayerNorm(patch_dim)
        self.proj = nn.Linear(patch_dim, dim)  # W_pre of eq. (65), with bias
        self.norm_out = nn.LayerNorm(dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if self.kind == "conv":
            return self.proj(images).flatten(2).transpose(1, 2)
        return self.norm_out(self.proj(self.norm_in(patchify(images, self.patch_size))))
