"""The CRATE image classifier, eqs. (65)–(66) with the authors' pre- and post-processing, and its sizes.

    patches  = images cut into P×P patches                                                  (B, N, P²C)
    Z^1      = [z_cls, PatchEmbed(images)] + E_pos                                          (65), (B, N+1, d)
    Z^{L+1}  = encoder(Z^1)
    logits   = Linear(LN(pool(Z^{L+1})))            pool = class token (66) or token mean (72)

``keep_activations(torch.bfloat16)`` keeps the tokens in bfloat16 between layers under a bfloat16 autocast: Z^1 is
rounded to bfloat16 once, the residual stream, the LayerNorms' outputs and every block's output stay bfloat16, so
autocast's float32 copies around the LayerNorms disappear; the parameters, their gradients and the optimizer state
stay float32 (``crate-train --run.activations bf16``). Outside such an autocast, and by default, nothing changes.

The position embedding is stored for the configured grid; `resample_pos_embed` moves it to another grid
(bicubic on the patch grid, class token kept), used on the fly when ``config.dynamic_img_size`` is set and by
`crate_nn.load_official_checkpoint(..., image_size=...)`.

Registered sizes (``create_model(name)``; 224² images, 16² patches unless the name says /8, 1000 classes, p = d/K):

| name | blocks | d | L | K | parameters |
|---|---|---|---|---|---|
| crate_tiny / small / base / large | MSSA + ISTA | 384 / 576 / 768 / 1024 | 12 / 12 / 12 / 24 | 6 / 12 / 12 / 16 | 6,090,856 / 13,116,328 / 22,796,008 / 77,641,192 (Table 8) |
| vit_tiny / small / base / large | MHSA + MLP | 192 / 384 / 768 / 1024 | 12 / 12 / 12 / 24 | 3 / 6 / 12 / 16 | 5,719,336 / 22,052,968 / 86,570,728 / 304,330,216 |
| crate_s8 / crate_mlp_s8 / crate_mhsa_s8 / vit_s8 (patch 8) | Table 17's four | 384 | 12 | 6 | 6,094,312 / 18,503,656 / 9,647,080 / 22,056,424 |
| crate_b8 (patch 8) | CRATE-B/8 (Table 4, Sec. 4.3) | 768 | 12 | 12 | 22,804,072 |
| crate_t8_in21k / crate_s8_in21k / crate_b8_in21k (patch 8, 21,841 classes) | Table 14's CRATE | 192 / 384 / 768 | 12 | 3 / 6 / 12 | 5,743,057 / 14,118,097 / 38,830,801 |
| vit_t8_in21k / vit_b8_in21k (patch 8, 21,841 classes) | Table 14's ViT | 192 / 768 | 12 | 3 / 12 | 9,742,801 / 102,605,521 |
| tost_tiny / small / medium / large | TSSA + MLP (ToST) | 192 / 384 / 512 / 768 | 12 / 12 / 24 / 24 | 4 / 8 / 8 / 16 | 4,827,736 / 18,500,296 / 64,049,320 / 143,258,728 |
| crate_alpha_b32 / b16 / b8 (patch 32 / 16 / 8) | CRATE-α (`_ALPHA`) | 768 | 12 | 12 | 73,985,512 / 72,328,936 / 72,338,152 |
| crate_alpha_l32 / l14 / l8 (patch 32 / 14 / 8) | CRATE-α (`_ALPHA`) | 1024 | 24 | 16 | 255,982,568 / 253,650,920 / 253,786,088 |

The baselines share everything with CRATE but the block (same stem, head, LayerNorms and initialisation), so a
comparison differs in what it compares. Table 8 prints ViT-T 5.72M and ViT-S 22.05M for timm's ViTs, whose
Conv2d stem lacks our stem's two LayerNorms (1,536 + 2d parameters). Table 14's ImageNet-21K models (App. C.5:
21,841 classes, patch 8) have the widths their printed counts give, those of ViT-T/S/B (192 / 384 / 768), not Table
8's; the counts match the print (5.74M, 14.12M, 38.83M, 102.61M) but ViT-T's, printed 10.36M: this d = 192 ViT has
9.74M, 0.62M fewer (a finding; the paper does not say what else its ViT-T/8 had). ``crate_b8`` is CRATE-B/8 with
ImageNet-1K's head, Table 4's CRATE-Base/8 (22.80M). The papers print no CRATE-L/8, so none is registered. The ToST sizes are those of ToST's public
vision code (``tost_cab_{tiny_12, small_12, medium_24, large_24}_p16``: d, L, K as above, MLP ratio 4) with our
stem and head; the authors' models are XCiT's (a convolutional stem, Fourier position encoding, two class-attention
layers, LayerScale), so their counts differ from these, and the paper's tables were not available to compare.
"""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import nn

from .backbone import CRATEEncoder, LayerStack
from .blocks import LayerNorm, LayerTrace
from .config import BlockConfig, check_choice, check_positive_int
from .embedding import PATCH_EMBEDS, PatchEmbed, PatchGrid, check_images, resample_pos_embed
from .registry import register_family, register_model

POOLS = ("cls", "mean")


@dataclass
class CRATEConfig(BlockConfig, PatchGrid):
    """Hyper-parameters of a CRATE image classifier: the block options of `BlockConfig` plus

    Sizes:
        depth: number of layers L.
        image_size, patch_size: square images of ``image_size`` pixels cut into ``patch_size`` patches,
            N = (image_size / patch_size)² patches, n = N + 1 tokens with the class token.
        num_classes, in_channels: head width C and image channels.
        pool: ``"cls"`` (eq. 66, the class token's output) or ``"mean"`` (eq. 72, mean over all tokens).
        patch_embed: ``"linear"`` (LN → Linear → LN, the authors' CRATE) or ``"conv"`` (Conv2d, CRATE-α).
        head_norm_eps: the head LayerNorm's ε; None: ``norm_eps`` (CRATE-α: 1e-5 in the head, 1e-6 in the layers).

    Input:
        dynamic_img_size: accept any image size divisible by the patch size, resampling the position
            embedding bicubically on the fly (class token kept). When False, other sizes are an error.

    The defaults are the authors' CRATE-Tiny (224² images, 16² patches, 1000 classes, d = 384, L = 12, K = 6).
    """

    depth: int = 12
    image_size: int = 224
    patch_size: int = 16
    num_classes: int = 1000
    in_channels: int = 3
    pool: str = "cls"
    patch_embed: str = "linear"
    dynamic_img_size: bool = False
    head_norm_eps: float | None = None

    def __post_init__(self) -> None:
        for name in ("depth", "image_size", "patch_size", "num_classes", "in_channels"):
            check_positive_int(name, getattr(self, name))
        super().__post_init__()
        if self.head_norm_eps is not None and not (isinstance(self.head_norm_eps, (int, float))
                                                   and not isinstance(self.head_norm_eps, bool)
                                                   and self.head_norm_eps > 0):
            raise ValueError(f"head_norm_eps must be a positive number or None, got {self.head_norm_eps!r}")
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size={self.image_size} is not divisible by patch_size={self.patch_size}")
        check_choice("pool", self.pool, POOLS)
        check_choice("patch_embed", self.patch_embed, PATCH_EMBEDS)
        if self.causal and self.pool == "cls":
            raise ValueError("causal=True with pool='cls' gives logits that do not depend on the image (the class "
                             "token at position 0 attends only to itself); use pool='mean' or causal=False")


@register_family("classifier", CRATEConfig)
class CRATEClassifier(nn.Module):
    """CRATE classifier: images (B, C, H, W) → logits (B, num_classes).

    Attributes: ``patch_embed``, ``cls_token`` (1, 1, d), ``pos_embed`` (1, N+1, d), ``encoder``
    (`CRATEEncoder`), ``head`` (``head.norm`` LayerNorm(d), ``head.fc`` Linear(d, C)), ``config``.
    """

    def __init__(self, config: CRATEConfig) -> None:
        super().__init__()
        self.config = config
        self.patch_embed = PatchEmbed(config.patch_size, config.in_channels, config.dim, config.patch_embed)
        self.cls_token = nn.Parameter(torch.randn(1, 1, config.dim))  # std 1, as the authors
        self.pos_embed = nn.Parameter(torch.randn(1, config.num_patches + 1, config.dim))
        self.encoder: LayerStack = CRATEEncoder(config)
        self.activation_dtype: torch.dtype | None = None  # keep_activations
        self.head = nn.Sequential(
            OrderedDict(norm=LayerNorm(config.dim, eps=config.norm_eps if config.head_norm_eps is None
                                          else config.head_norm_eps),
                        fc=nn.Linear(config.dim, config.num_classes))
        )

    @property
    def grid_size(self) -> tuple[int, int]:
        side = self.config.image_size // self.config.patch_size
        return side, side

    def no_weight_decay(self) -> set[str]:
        """Parameter names an optimizer should not decay besides norms and biases (timm's convention)."""
        return {"pos_embed", "cls_token"}

    def check_images(self, images: torch.Tensor) -> None:
        """Raise TypeError/ValueError naming the problem if ``images`` is not a (B, C, H, W) batch this model takes."""
        cfg = self.config
        check_images(images, in_channels=cfg.in_channels, patch_size=cfg.patch_size,
                     image_size=None if cfg.dynamic_img_size else cfg.image_size, dtype=self.pos_embed.dtype,
                     hint=" (set dynamic_img_size=True to resample the position embedding)")

    def embed(self, images: torch.Tensor) -> torch.Tensor:
        """Z^1 = f_pre(images), eq. (65): (B, C, H, W) → (B, N+1, d)."""
        self.check_images(images)
        x = self.patch_embed(images)
        grid = (images.shape[-2] // self.config.patch_size, images.shape[-1] // self.config.patch_size)
        pos = resample_pos_embed(self.pos_embed, grid, self.grid_size)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + pos
        if self.activation_dtype is not None and torch.is_autocast_enabled(x.device.type) \
                and torch.get_autocast_dtype(x.device.type) == self.activation_dtype:
            return x.to(self.activation_dtype)
        return x

    def keep_activations(self, dtype: torch.dtype | None) -> None:
        """Under an autocast of ``dtype`` (bfloat16), keep the tokens in ``dtype`` from Z^1 to the logits (the
        encoder's and the head's LayerNorms return their input's dtype, `crate_nn.models.blocks.LayerNorm`);
        None: autocast's float32 activations (the default). The parameters stay float32 either way, and outside
        such an autocast the model computes as without this setting."""
        if dtype not in (None, torch.bfloat16, torch.float16):
            raise ValueError(f"dtype: expected torch.bfloat16, torch.float16 or None, got {dtype!r}")
        self.activation_dtype = dtype
        for module in self.modules():
            if isinstance(module, LayerNorm):
                module.keep_dtype = dtype is not None

    def pool(self, z: torch.Tensor) -> torch.Tensor:
        """(B, n, d) → (B, d): the class token (eq. 66) or the mean over tokens (eq. 72)."""
        return z.mean(dim=1) if self.config.pool == "mean" else z[:, 0]

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """Z^{L+1}, the encoder's output tokens: (B, C, H, W) → (B, N+1, d)."""
        return self.encoder(self.embed(images))

    def forward_intermediates(self, images: torch.Tensor, indices=None, return_attention: bool = False
                              ) -> tuple[torch.Tensor, list[LayerTrace]]:
        """Z^{L+1} (B, N+1, d) and the `LayerTrace` of the encoder layers in ``indices`` (default all)."""
        return self.encoder.forward_intermediates(self.embed(images), indices, return_attention)

    def forward_head(self, features: torch.Tensor) -> torch.Tensor:
        """Logits from the encoder's output tokens: (B, N+1, d) → (B, C)."""
        return self.head(self.pool(features))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(images))

    def reset_classifier(self, num_classes: int) -> None:
        """Replace ``head.fc`` by a freshly initialised Linear(d, num_classes) (fine-tuning, Sec. 4.1)."""
        self.config = dataclasses.replace(self.config, num_classes=num_classes)
        fc = self.head.fc
        self.head.fc = nn.Linear(self.config.dim, num_classes, device=fc.weight.device, dtype=fc.weight.dtype)


_VIT = dict(attention="mhsa", feedforward="mlp")
_TOST = dict(attention="tssa", feedforward="mlp")
_S8 = dict(dim=384, depth=12, heads=6, patch_size=8)
_IN21K = dict(patch_size=8, num_classes=21841)  # ImageNet-21K's classes as the long paper counts them (App. C.5)
_ALPHA = dict(patch_embed="conv", ista="overcomplete", ista_skip=True, out_bias=False, norm_eps=1e-6,
              head_norm_eps=1e-5)
"""CRATE-α (UCSC-VLAA/CRATE-alpha, torch_inference/model/crate_alpha.py): a Conv2d stem, the over-complete ISTA
block (m = 4d, a separate decoding dictionary D₁) with a skip, a bias-free MSSA output, LayerNorm ε 1e-6 in the
layers and PyTorch's 1e-5 in the head."""
for _name, _values in {
    "crate_tiny": dict(dim=384, depth=12, heads=6),
    "crate_small": dict(dim=576, depth=12, heads=12),
    "crate_base": dict(dim=768, depth=12, heads=12),
    "crate_large": dict(dim=1024, depth=24, heads=16),
    "vit_tiny": dict(dim=192, depth=12, heads=3, **_VIT),
    "vit_small": dict(dim=384, depth=12, heads=6, **_VIT),
    "vit_base": dict(dim=768, depth=12, heads=12, **_VIT),
    "vit_large": dict(dim=1024, depth=24, heads=16, **_VIT),
    "crate_s8": dict(_S8),
    "crate_mlp_s8": dict(_S8, feedforward="mlp"),
    "crate_mhsa_s8": dict(_S8, attention="mhsa"),
    "vit_s8": dict(_S8, **_VIT),
    "crate_b8": dict(dim=768, depth=12, heads=12, patch_size=8),
    "crate_t8_in21k": dict(dim=192, depth=12, heads=3, **_IN21K),
    "crate_s8_in21k": dict(_S8, **_IN21K),
    "crate_b8_in21k": dict(dim=768, depth=12, heads=12, **_IN21K),
    "vit_t8_in21k": dict(dim=192, depth=12, heads=3, **_IN21K, **_VIT),
    "vit_b8_in21k": dict(dim=768, depth=12, heads=12, **_IN21K, **_VIT),
    "tost_tiny": dict(dim=192, depth=12, heads=4, **_TOST),
    "tost_small": dict(dim=384, depth=12, heads=8, **_TOST),
    "tost_medium": dict(dim=512, depth=24, heads=8, **_TOST),
    "tost_large": dict(dim=768, depth=24, heads=16, **_TOST),
    **{f"crate_alpha_{size}{patch}": dict(_ALPHA, **dims, patch_size=patch)
       for size, dims in (("b", dict(dim=768, depth=12, heads=12)), ("l", dict(dim=1024, depth=24, heads=16)))
       for patch in ((32, 16, 8) if size == "b" else (32, 14, 8))},
}.items():
    register_model(_name, "classifier", **_values)
