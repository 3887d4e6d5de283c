"""CRATE-MAE: masked autoencoding with the CRATE encoder and the white-box decoder (Sec. 4.1.2, eqs. 69–71,
App. C.2, Table 9 of the long paper), in two wirings chosen by one flag, ``wiring``.

``"official"`` — the authors' ``model/crate_ae`` (trained with FAIR's MAE scripts; the default):

    T       = Conv2d_P(images)                                                       (B, N, d)
    T_Ω     = T with the tokens of the masked patches Ω replaced by one trainable z_mask ∈ R^d
    Z^1     = [z_cls, T_Ω] + E_pos        E_pos the fixed 2-D sine-cosine table, class row 0     (B, N+1, d)
    Z       = LN(f(Z^1))                  f: L CRATE encoder layers (45) with λ = 0.5; LN ε = 1e-6
    X̂       = Linear(LN(g(Z)))[:, 1:]     g: L decoder layers (64); LN ε = 1e-6; class row dropped  (B, N, P²C)
    loss    = mean over the masked patches of the per-patch pixel MSE (optionally per-patch normalised targets)

    The encoder sees all N + 1 tokens (mask tokens included), unlike FAIR's MAE encoder.

``"paper"`` — eqs. (69)–(71):

    X_Ω     = the patches X with those in Ω replaced by one trainable x_mask ∈ R^{P²C} (pixel space)
    Z^1     = W_pre X_Ω + E_pos                                        n = N tokens, no class token  (69)
    X̂       = W_post(g(f(Z^1)) − E_pos)                                 no LayerNorms            (70)
    loss    = mean over all patches of the per-patch pixel MSE (the whole image)                     (71)

    Kept from the official wiring (one flag changes the listed points only): E_pos is the
    same fixed sine-cosine table (eq. 69 calls it trainable), W_pre is the Conv2d patch embedding and W_post a
    Linear, both with biases (eqs. 69–70 print none).

Patches are flattened in (p, q, c) order (``patchify``); masks are boolean (B, N), True where a patch is masked,
drawn per image by `random_mask` (keep the int(N(1 − ratio)) positions of smallest uniform noise — the authors'
``argsort(torch.rand(B, N))``, so the same noise gives the same mask).

Registered sizes (224² images, 16² patches, 3 channels, p = d/K, encoder and decoder of the same L, d, K):

| name | L | d | K | parameters | the authors' module structure | Table 9 |
|---|---|---|---|---|---|---|
| crate_mae_tiny  | 12 | 384  | 6  | 11,256,192 | 11,555,328 | — |
| crate_mae_small | 12 | 576  | 12 | 24,846,528 | 25,405,824 | 25.4M |
| crate_mae_base  | 12 | 768  | 12 | 43,745,280 | 44,638,464 | 44.6M |
| crate_mae_large | 12 | 1024 | 16 | 77,201,152 | 78,654,208 | 78.5M |

The authors' structure also holds an unused ``decoder_embed`` Linear(d, d) and the sine-cosine table twice as
frozen parameters (d² + d + 2(N + 1)d more); Table 9 counts them (small and base agree with it to the printed
digit, large is 0.15M above its 78.5M). The authors' ``mae_crate_large`` has depth 24 (154,274,560 parameters),
Table 9 says L = 12: ``crate_mae_large`` follows the paper.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from .backbone import CRATEDecoder, CRATEEncoder, LayerStack
from .blocks import LayerTrace
from .config import BlockConfig, check_choice, check_number, check_positive_int
from .embedding import PatchEmbed, PatchGrid, check_images, patchify, sincos_pos_embed_2d, unpatchify
from .registry import register_family, register_model

WIRINGS = ("official", "paper")
DECODERS = ("white_box", "encoder")
NORM_PIX_EPS = 1e-6  # the variance floor of the per-patch target normalisation (FAIR's MAE)


@dataclass
class CRATEMAEConfig(BlockConfig, PatchGrid):
    """Hyper-parameters of a CRATE-MAE: the block options of `BlockConfig` (shared by encoder and decoder) plus

        depth: L, the number of encoder layers and of decoder layers.
        image_size, patch_size, in_channels: square images of ``image_size`` pixels, ``patch_size`` patches,
            N = (image_size / patch_size)² of them.
        wiring: ``"official"`` (the authors' code) or ``"paper"`` (eqs. 69–71); see the module docstring.
        norm_pix_loss: targets normalised per patch to mean 0, variance 1 (FAIR's ``norm_pix_loss``).
        final_norm_eps: ε of the LayerNorms after the encoder and before the pixel map (official wiring); the
            layers' own LayerNorms use ``norm_eps`` (1e-5, as the authors' blocks).
        decoder: ``"white_box"`` — the white-box decoder layers of eq. (64) (CRATE-MAE); ``"encoder"`` — L layers
            of the encoder's own kind: with ``attention="mhsa"`` and ``feedforward="mlp"`` a ViT-MAE of the same
            width and depth (FAIR's MAE decoder is a stack of ViT blocks, 8 of width 512 for MAE-Base), the
            baseline of Table 2.

    ``lam`` defaults to 0.5, the authors' CRATE-MAE encoder (the classifier's is 0.1). ``dim`` must be divisible
    by 4 (the sine-cosine table).
    """

    lam: float = 0.5
    depth: int = 12
    image_size: int = 224
    patch_size: int = 16
    in_channels: int = 3
    wiring: str = "official"
    norm_pix_loss: bool = False
    final_norm_eps: float = 1e-6
    decoder: str = "white_box"

    def __post_init__(self) -> None:
        for name in ("depth", "image_size", "patch_size", "in_channels"):
            check_positive_int(name, getattr(self, name))
        super().__post_init__()
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size={self.image_size} is not divisible by patch_size={self.patch_size}")
        if self.dim % 4:
            raise ValueError(f"dim={self.dim} must be divisible by 4 (the 2-D sine-cosine position table)")
        check_choice("wiring", self.wiring, WIRINGS)
        check_choice("decoder", self.decoder, DECODERS)
        check_number("final_norm_eps", self.final_norm_eps, minimum=0.0)
        if self.final_norm_eps == 0:
            raise ValueError("final_norm_eps must be a positive number, got 0")
        if not isinstance(self.norm_pix_loss, bool):
            raise TypeError(f"norm_pix_loss must be True or False, got {self.norm_pix_loss!r}")


def random_mask(noise: torch.Tensor, mask_ratio: float) -> torch.Tensor:
    """Per-image random masks from uniform noise (B, N): (B, N) bool, True where masked.

    Each row keeps its int(N·(1 − mask_ratio)) positions of smallest noise visible, so exactly
    N − int(N·(1 − mask_ratio)) patches of every image are masked (the authors' argsort masking).
    """
    check_mask_ratio(mask_ratio, noise.shape[-1])
    keep = int(noise.shape[-1] * (1 - mask_ratio))
    mask = torch.ones(noise.shape, dtype=torch.bool, device=noise.device)
    return mask.scatter_(1, noise.argsort(dim=1)[:, :keep], False)


def check_mask_ratio(mask_ratio: float, num_patches: int) -> None:
    """ValueError naming ``mask_ratio`` unless it lies in (0, 1) and masks at least one of ``num_patches``."""
    if isinstance(mask_ratio, bool) or not isinstance(mask_ratio, (int, float)) or not 0 < mask_ratio < 1:
        raise ValueError(f"mask_ratio: expected a number in (0, 1), got {mask_ratio!r}")
    if int(num_patches * (1 - mask_ratio)) == num_patches:
        raise ValueError(f"mask_ratio: {mask_ratio} masks no patch of {num_patches}")


class MAEOutput(NamedTuple):
    """What `CRATEMAE.forward` returns.

    ``loss``: the scalar training loss; ``pred``: predicted patches (B, N, P²C) (normalised per patch when
    ``norm_pix_loss``); ``mask``: (B, N) bool, True where masked; ``image_loss``: (B,) each image's loss (mean
    over its masked patches, or over all patches in the paper wiring), float32 or wider.
    """

    loss: torch.Tensor
    pred: torch.Tensor
    mask: torch.Tensor
    image_loss: torch.Tensor


@register_family("mae", CRATEMAEConfig)
class CRATEMAE(nn.Module):
    """CRATE masked autoencoder: images (B, C, H, W) → `MAEOutput` (loss, predicted patches, mask).

    Attributes: ``patch_embed`` (Conv2d), ``cls_token`` (1, 1, d) or None (paper wiring), ``mask_token``
    (1, 1, d) or (1, 1, P²C) (paper wiring), ``pos_embed`` buffer (1, n, d), ``encoder`` (`CRATEEncoder`), ``norm``,
    ``decoder`` (`CRATEDecoder`; a `CRATEEncoder` with ``decoder="encoder"``), ``decoder_norm``, ``decoder_pred`` Linear(d, P²C), ``config``.
    """

    def __init__(self, config: CRATEMAEConfig) -> None:
        super().__init__()
        self.config = config
        official = config.wiring == "official"
        d = config.dim
        self.patch_embed = PatchEmbed(config.patch_size, config.in_channels, d, kind="conv")
        self.register_parameter("cls_token", nn.Parameter(torch.zeros(1, 1, d)) if official else None)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, d if official else config.patch_dim))
        table = sincos_pos_embed_2d(d, config.grid, cls_token=official)
        self.register_buffer("pos_embed", torch.empty(table.shape))  # on the ambient device (e.g. meta)
        with torch.no_grad():
            self.pos_embed.copy_(table)
        self.encoder: LayerStack = CRATEEncoder(config)
        self.norm = nn.LayerNorm(d, eps=config.final_norm_eps) if official else nn.Identity()
        self.decoder: LayerStack = CRATEDecoder(config) if config.decoder == "white_box" else CRATEEncoder(config)
        self.decoder_norm = nn.LayerNorm(d, eps=config.final_norm_eps) if official else nn.Identity()
        self.decoder_pred = nn.Linear(d, config.patch_dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The authors' initialisation: xavier-uniform Linear weights with zero biases (the Conv2d's weight too,
        as a (d, C·P·P) matrix), kaiming-uniform D and E, class and mask tokens normal(0, 0.02)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for layer in self.decoder.layers if self.config.decoder == "white_box" else ():
            nn.init.kaiming_uniform_(layer.linear.weight)  # E^ℓ (a plain parameter in the authors' code)
        weight = self.patch_embed.proj.weight
        nn.init.xavier_uniform_(weight.view(weight.shape[0], -1))
        for token in (self.cls_token, self.mask_token):
            if token is not None:
                nn.init.normal_(token, std=0.02)

    def no_weight_decay(self) -> set[str]:
        """Parameter names an optimizer should not decay besides norms and biases (as the classifier's tokens)."""
        return {"cls_token", "mask_token"}

    # -- patches and masks -------------------------------------------------------------------------------------
    def patchify(self, images: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) → (B, N, P²C), pixels in (p, q, c) order."""
        return patchify(images, self.config.patch_size)

    def unpatchify(self, patches: torch.Tensor) -> torch.Tensor:
        """(B, N, P²C) → (B, C, H, W)."""
        return unpatchify(patches, self.config.patch_size, self.config.grid, self.config.in_channels)

    def check_images(self, images: torch.Tensor) -> None:
        """TypeError/ValueError naming the problem unless ``images`` is a (B, C, H, W) batch this model takes."""
        cfg = self.config
        check_images(images, in_channels=cfg.in_channels, patch_size=cfg.patch_size, image_size=cfg.image_size,
                     dtype=self.pos_embed.dtype)

    def example_inputs(self, batch_size: int, mask_ratio: float = 0.75) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch for checks and benchmarks: standard-normal images (B, C, H, W) and a `random_mask` (B, N), both
        drawn on the CPU from seed 0, so that every device and compiler masks the same patches (the GPU checks
        compare outputs across devices, precisions and ``torch.compile``, whose random streams differ)."""
        g = torch.Generator().manual_seed(0)
        cfg = self.config
        images = torch.randn(batch_size, cfg.in_channels, cfg.image_size, cfg.image_size, generator=g)
        return images, random_mask(torch.rand(batch_size, cfg.num_patches, generator=g), mask_ratio)

    def _check_mask(self, mask: torch.Tensor, batch: int) -> torch.Tensor:
        expected = (batch, self.config.num_patches)
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != expected:
            got = f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(f"mask: expected a bool tensor of shape {expected} (True = masked), got {got}")
        return mask.to(self.pos_embed.device)

    # -- encoder -----------------------------------------------------------------------------------------------
    def embed(self, images: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Z^1 = f_pre(images with the patches in ``mask`` replaced by the mask token): (B, n, d), n = N + 1
        (official) or N (paper, eq. 69). ``mask`` None masks nothing."""
        self.check_images(images)
        if mask is not None:
            mask = self._check_mask(mask, images.shape[0])
        if self.cls_token is None:  # eq. (69): the mask token lives in pixel space
            if mask is not None:
                patches = torch.where(mask[..., None], self.mask_token.to(images.dtype), self.patchify(images))
                images = self.unpatchify(patches)
            return self.patch_embed(images) + self.pos_embed
        tokens = self.patch_embed(images)
        if mask is not None:
            tokens = torch.where(mask[..., None], self.mask_token.to(tokens.dtype), tokens)
        tokens = torch.cat([self.cls_token.to(tokens.dtype).expand(tokens.shape[0], -1, -1), tokens], dim=1)
        return tokens + self.pos_embed

    def encode(self, images: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Z = LN(f(Z^1)) (official) or f(Z^1) (paper): (B, n, d)."""
        return self.norm(self.encoder(self.embed(images, mask)))

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """The encoder's tokens of unmasked images, (B, n, d): the features of linear probes and fine-tuning."""
        return self.encode(images)

    def forward_intermediates(self, images: torch.Tensor, indices=None, return_attention: bool = False,
                              mask: torch.Tensor | None = None) -> tuple[torch.Tensor, list[LayerTrace]]:
        """The encoder stack's output (B, n, d) (before the final LayerNorm) and the `LayerTrace` of its layers in
        ``indices`` (default all), for images masked by ``mask`` (default none)."""
        return self.encoder.forward_intermediates(self.embed(images, mask), indices, return_attention)

    # -- decoder -----------------------------------------------------------------------------------------------
    def decode(self, z: torch.Tensor) -> torch.Tensor:
        """Predicted patches from the encoder's tokens: (B, n, d) → (B, N, P²C); eq. (70) in the paper wiring."""
        if self.cls_token is None:
            return self.decoder_pred(self.decoder(z) - self.pos_embed)
        return self.decoder_pred(self.decoder_norm(self.decoder(z)))[:, 1:]

    def targets(self, images: torch.Tensor) -> torch.Tensor:
        """The patches the prediction is compared with, (B, N, P²C): normalised per patch if ``norm_pix_loss``."""
        target = self.patchify(images)
        if self.config.norm_pix_loss:
            mean, var = target.mean(dim=-1, keepdim=True), target.var(dim=-1, keepdim=True)
            target = (target - mean) / (var + NORM_PIX_EPS).sqrt()
        return target

    def forward(self, images: torch.Tensor, mask: torch.Tensor | None = None, *, mask_ratio: float = 0.75,
                generator: torch.Generator | None = None) -> MAEOutput:
        """Mask, encode, decode and score ``images`` (B, C, H, W).

        ``mask``: (B, N) bool, True where masked; None draws `random_mask` with ``mask_ratio`` from uniform noise
        of ``generator`` (or the global RNG) on the images' device.
        """
        if mask is None:
            self.check_images(images)
            noise = torch.rand(images.shape[0], self.config.num_patches, device=images.device, generator=generator)
            mask = random_mask(noise, mask_ratio)
        pred = self.decode(self.encode(images, mask))
        target = self.targets(images)
        wide = torch.promote_types(pred.dtype, torch.float32)  # bf16 autocast → the loss in float32
        patch_loss = (pred.to(wide) - target.to(wide)).square().mean(dim=-1)  # (B, N)
        if self.cls_token is None:  # eq. (71): the whole image
            image_loss = patch_loss.mean(dim=-1)
            loss = image_loss.mean()
        else:  # the masked patches only
            if not mask.any(dim=1).all():
                raise ValueError("mask: the official wiring's loss is over the masked patches; every image needs one")
            weight = mask.to(wide)
            image_loss = (patch_loss * weight).sum(-1) / weight.sum(-1)
            loss = (patch_loss * weight).sum() / weight.sum()
        return MAEOutput(loss, pred, mask, image_loss)

    # -- transfer ----------------------------------------------------------------------------------------------
    def classifier_state_dict(self, config) -> dict[str, torch.Tensor]:
        """The encoder as the weights of a `CRATEClassifier` of ``config`` (fine-tuning): patch embedding, class
        token, the sine-cosine table as the (then trainable) position embedding, encoder layers, and the final
        LayerNorm as ``head.norm``; ``head.fc`` is left out (freshly initialised). In the paper wiring, which has
        no class token, the class token and its position are zeros and ``head.norm`` is the identity.

        ValueError naming the options when ``config`` is not a classifier of this encoder: a Conv2d patch
        embedding of the same patch size and channels, and the same block options (``lam`` included).
        """
        mine, theirs = self.config.block_config(), config.block_config()
        differ = {f.name: (getattr(mine, f.name), getattr(theirs, f.name)) for f in dataclasses.fields(mine)
                  if getattr(mine, f.name) != getattr(theirs, f.name)}
        for key in ("patch_size", "in_channels", "depth"):
            if getattr(self.config, key) != getattr(config, key):
                differ[key] = (getattr(self.config, key), getattr(config, key))
        if config.patch_embed != "conv":
            differ["patch_embed"] = ("conv", config.patch_embed)
        if differ:
            text = ", ".join(f"{k}={a!r} (classifier {b!r})" for k, (a, b) in differ.items())
            raise ValueError(f"init_from: the CRATE-MAE encoder has {text}; give the classifier the same options "
                             f"(e.g. --model-args {' '.join(f'{k}={a!r}' for k, (a, _) in differ.items())})")
        state = {k: v for k, v in self.state_dict().items()
                 if k.startswith(("patch_embed.", "encoder."))}
        d = self.config.dim
        pos = self.pos_embed
        if self.cls_token is None:
            pos = torch.cat([torch.zeros_like(pos[:, :1]), pos], dim=1)
        state.update(cls_token=self.cls_token.detach() if self.cls_token is not None else torch.zeros(1, 1, d),
                     pos_embed=pos.clone())
        if isinstance(self.norm, nn.LayerNorm):
            state.update({"head.norm.weight": self.norm.weight.detach(), "head.norm.bias": self.norm.bias.detach()})
        else:
            state.update({"head.norm.weight": torch.ones(d), "head.norm.bias": torch.zeros(d)})
        return state


_SIZES = {
    "crate_mae_tiny": dict(dim=384, depth=12, heads=6),
    "crate_mae_small": dict(dim=576, depth=12, heads=12),
    "crate_mae_base": dict(dim=768, depth=12, heads=12),
    "crate_mae_large": dict(dim=1024, depth=12, heads=16),  # Table 9 (the authors' code: depth 24)
}
for _name, _values in _SIZES.items():
    register_model(_name, "mae", **_values)
