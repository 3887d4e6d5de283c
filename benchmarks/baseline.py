"""The authors' computation, re-implemented as the yardstick of the speed benchmarks.

Written from the documented behaviour of the authors' code (github.com/Ma-Lab-Berkeley/CRATE) and the long paper's
Appendix D pseudocode, not copied from the authors' code. It computes what their published model computes, the
way it computes it, so that a speed ratio against it measures our implementation choices and nothing else:

* MSSA: one bias-free projection ``w = y Uᵀ`` split into K heads of width p, an **explicit** softmax
  attention per head ``softmax(w_k w_kᵀ · p^-1/2) @ w_k`` (the (B, K, n, n) score tensor is materialised),
  heads concatenated and mapped by ``to_out`` (Linear with bias).
* ISTA: the published three-GEMM form ``x1 = y Dᵀ``; ``grad = η (x1 D − y D)``; ``relu(y − grad − ηλ)``
  (i.e. ``η (x1 − y) D`` distributed into two products: three d×d products per token).
* PreNorm wiring: ``x_half = x + MSSA(LN1(x))`` (skip from the un-normalised x), ``x_next = ISTA(LN2(x_half))``
  with no skip.
* Patch embedding: ``b c (h p1) (w p2) -> b (h w) (p1 p2 c)``, LayerNorm(P²C), Linear(P²C, d), LayerNorm(d);
  class token prepended, position embedding added; head: LayerNorm(d), Linear(d, classes) on the pooled token.

Parameter names are the authors' state-dict keys (``to_patch_embedding.1.weight``, ``transformer.layers.0.0.fn.qkv
.weight``, ...), so ``Baseline(...).state_dict()`` *is* a checkpoint in their format and can be loaded into
``crate_nn`` with ``crate_nn.load_official_checkpoint``: both models then hold the same weights.

Training precision as in the published script: fp16 autocast with a GradScaler on GPUs, float32 on CPUs
(:func:`autocast_dtype`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Patchify(nn.Module):
    """(B, C, H, W) -> (B, N, P·P·C), patches flattened in (row, column, channel) order."""

    def __init__(self, patch_size: int):
        super().__init__()
        self.patch_size = patch_size

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        b, c, h, w = img.shape
        p = self.patch_size
        x = img.reshape(b, c, h // p, p, w // p, p)  # b c h p1 w p2
        return x.permute(0, 2, 4, 3, 5, 1).reshape(b, (h // p) * (w // p), p * p * c)


class PreNorm(nn.Module):
    """``fn(LayerNorm(x))``; the caller adds the skip (or not)."""

    def __init__(self, dim: int, fn: nn.Module):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(self.norm(x))


class Attention(nn.Module):
    """MSSA with explicit softmax attention: (B, n, d) -> (B, n, d)."""

    def __init__(self, dim: int, heads: int, dim_head: int):
        super().__init__()
        self.heads = heads
        self.scale = dim_head**-0.5
        self.qkv = nn.Linear(dim, heads * dim_head, bias=False)
        self.to_out = nn.Sequential(nn.Linear(heads * dim_head, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        w = self.qkv(x).reshape(b, n, self.heads, -1).transpose(1, 2)  # b h n p
        attn = torch.softmax(w @ w.transpose(-1, -2) * self.scale, dim=-1)  # b h n n
        out = (attn @ w).transpose(1, 2).reshape(b, n, -1)  # b n (h p)
        return self.to_out(out)


class FeedForward(nn.Module):
    """The ISTA step of eq. (44) in the published three-GEMM form: (B, n, d) -> (B, n, d), non-negative."""

    def __init__(self, dim: int, step_size: float = 0.1, lambd: float = 0.1):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(dim, dim))
        nn.init.kaiming_uniform_(self.weight)
        self.step_size = step_size
        self.lambd = lambd

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = F.linear(x, self.weight)  # y Dᵀ
        grad_1 = F.linear(x1, self.weight.t())  # y Dᵀ D
        grad_2 = F.linear(x, self.weight.t())  # y D
        grad_update = self.step_size * (grad_1 - grad_2)
        return F.relu(x - grad_update - self.step_size * self.lambd)


class Transformer(nn.Module):
    def __init__(self, dim: int, depth: int, heads: int, dim_head: int, step_size: float, lambd: float):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.ModuleList(
                [PreNorm(dim, Attention(dim, heads, dim_head)), PreNorm(dim, FeedForward(dim, step_size, lambd))]
            )
            for _ in range(depth)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x)
        return x


class Baseline(nn.Module):
    """The authors' CRATE image classifier: images (B, C, H, W) -> logits (B, num_classes)."""

    def __init__(
        self,
        image_size: int,
        patch_size: int,
        num_classes: int,
        dim: int,
        depth: int,
        heads: int,
        dim_head: int,
        in_channels: int = 3,
        pool: str = "cls",
        eta: float = 0.1,
        lam: float = 0.1,
    ):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} must be a multiple of patch_size={patch_size}")
        if pool not in ("cls", "mean"):
            raise ValueError(f"pool must be 'cls' or 'mean', got {pool!r}")
        num_patches = (image_size // patch_size) ** 2
        patch_dim = in_channels * patch_size**2
        self.pool = pool
        self.to_patch_embedding = nn.Sequential(
            Patchify(patch_size), nn.LayerNorm(patch_dim), nn.Linear(patch_dim, dim), nn.LayerNorm(dim)
        )
        self.pos_embedding = nn.Parameter(torch.randn(1, num_patches + 1, dim))
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.transformer = Transformer(dim, depth, heads, dim_head, eta, lam)
        self.mlp_head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, num_classes))

    def forward(self, img: torch.Tensor) -> torch.Tensor:
        x = self.to_patch_embedding(img)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls, x), dim=1) + self.pos_embedding[:, : x.shape[1] + 1]
        x = self.transformer(x)
        x = x.mean(dim=1) if self.pool == "mean" else x[:, 0]
        return self.mlp_head(x)

    @classmethod
    def from_config(cls, config) -> Baseline:
        """Build from any object with CRATEConfig's field names (``crate_nn``'s ``model.config``);
        ``dim_head=None`` means p = d / K, as in CRATEConfig."""
        return cls(
            image_size=config.image_size,
            patch_size=config.patch_size,
            num_classes=config.num_classes,
            dim=config.dim,
            depth=config.depth,
            heads=config.heads,
            dim_head=config.dim_head or config.dim // config.heads,
            in_channels=config.in_channels,
            pool=config.pool,
            eta=config.eta,
            lam=config.lam,
        )


def autocast_dtype(device: torch.device) -> torch.dtype | None:
    """The published script's training precision: fp16 autocast (with a GradScaler) on GPUs, none on CPUs."""
    return torch.float16 if device.type == "cuda" else None
