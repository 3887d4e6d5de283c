"""Where segmentation shows in a trained network (Sec. 4.3, App. C.10; Figs. 18–20, 27): the class token's attention
maps, the patch codes and the MSSA affinity, PCA images, coarse masks from attention, and their figures.

* `cls_attention` — eq. (437): for head k of layer ℓ, the class token's attention over the N patches,
  ``A_{k,i} = softmax_i(s ⟨U_k* z_i, U_k* z_[CLS]⟩)``, i = 1 … N, with z = LN1(Z^ℓ) the tokens the attention block
  reads. For an MHSA layer the same code gives eq. (438), ``softmax_i(s ⟨K_k* z_i, Q_k* z_[CLS]⟩)``. The softmax runs
  over the patches only (the class token's weight on itself is left out), so it equals the class-token row of
  the block's attention matrix restricted to the patches and renormalised. ``s`` is the block's own logit scale
  by default (p^(-1/2), what the network computes); eq. (437) as printed has none:
  ``scale=1.0`` gives the printed formula.
* `patch_codes` — per patch, the concatenated codes [U_1* z_i; …; U_K* z_i] of an MSSA layer (for MHSA the keys
  [K_1* z_i; …]): MaskCut's features (`crate_nn.analysis.maskcut`) and the PCA images' features.
* `mssa_affinity` — ``M_ij = Σ_k ⟨U_k* z_i, U_k* z_j⟩`` (App. C.10), the Gram matrix of the codes.
* `mass_mask`, `attention_masks` — coarse segmentation by thresholding attention maps as DINO does: keep the
  smallest set of patches holding a fraction ``mass`` (0.6) of a map's total attention, per head or for the map
  averaged over heads.
* `pca_images` — the three leading principal components of patch features fitted over a set of images, each
  component min-max scaled per image into an RGB image on the patch grid (the authors' PCA figures); the sign of
  each component is fixed (its largest-magnitude score is positive), so the images do not depend on the sign of
  the features.
* Figures (matplotlib ``Figure`` objects, no pyplot): `plot_attention_maps`, `plot_masks`, `plot_pca`,
  `plot_rows`.

Layers are 0-based indices into the encoder (negative ones count from the end: −1 is the last layer, −2 the
second-to-last, which the papers show for CRATE; they show the last layer for ViT).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..models.registry import unwrap_model
from .diagnostics import _encoder_layers

MASS = 0.6  # DINO's attention-mass threshold


# --------------------------------------------------------------------------------------------- image backbones
IMAGE_FAMILIES = ("classifier", "mae", "dino")


def image_backbone(model: nn.Module, source: str = "model") -> nn.Module:
    """The class-token image encoder of a model of any image family, as a `CRATEClassifier` whose ``head`` is the
    identity for the families trained without labels (the analysis here reads its layers, never its head):

    * ``classifier`` — the model itself;
    * ``dino`` — the teacher's backbone (eq. 80: the network DINO evaluates; its head is already the identity);
    * ``mae`` (official wiring) — the encoder rebuilt as a classifier by ``CRATEMAE.classifier_state_dict``: the
      same patch embedding, class token, sine-cosine position table and layers, so its tokens at every layer are
      the CRATE-MAE encoder's on unmasked images (the final LayerNorm, after the last layer, is not used).

    ValueError starting with ``source`` (e.g. ``"checkpoint: runs/x/last.pt"``) for anything else: a language model, or a CRATE-MAE in
    the paper wiring (eq. 69), which has no class token and so no class-token attention map.
    """
    from ..models.classifier import CRATEClassifier, CRATEConfig  # models import nothing from analysis

    model = unwrap_model(model)
    family = getattr(model, "family", None)
    if family == "classifier":
        return model
    if family == "dino":
        return model.backbone
    if family == "mae":
        if model.cls_token is None:
            raise ValueError(f"{source} holds a CRATE-MAE in the paper wiring (eq. 69), which has no class token; "
                             "class-token attention and MaskCut here need one (the official wiring has it)")
        mae = model.config
        config = CRATEConfig(**dataclasses.asdict(mae.block_config()), depth=mae.depth, image_size=mae.image_size,
                             patch_size=mae.patch_size, in_channels=mae.in_channels, patch_embed="conv")
        encoder = CRATEClassifier(config).to(next(model.parameters()))
        missing, unexpected = encoder.load_state_dict(model.classifier_state_dict(config), strict=False)
        if unexpected or [k for k in missing if not k.startswith("head.fc.")]:  # a bug, not bad input
            raise RuntimeError(f"CRATE-MAE → classifier: missing {missing}, unexpected {unexpected}")
        encoder.head = nn.Identity()
        return encoder.train(model.training)
    kind = f"a {family!r} model" if family else f"a {type(model).__name__}"
    raise ValueError(f"{source} holds {kind}, not an image model with patches; expected a checkpoint of one of the "
                     f"families {', '.join(IMAGE_FAMILIES)} (a classifier, a CRATE-MAE or a DINO run)")


# --------------------------------------------------------------------------------------------- tokens of a layer
def patch_grid(model: nn.Module, images: torch.Tensor) -> tuple[int, int]:
    """The (rows, columns) patch grid of ``images`` (B, C, H, W) for ``model``; ValueError when the model has no
    class token or the image sides are not multiples of its patch size."""
    inner = unwrap_model(model)
    _encoder_layers(model)
    if getattr(inner, "cls_token", None) is None or not hasattr(inner, "embed"):
        raise ValueError(f"model: class-token attention maps need a model with a class token and an image embedding "
                         f"(e.g. a CRATEClassifier); {type(inner).__name__} has none")
    if not isinstance(images, torch.Tensor) or images.ndim != 4:
        raise ValueError(f"images: expected a (B, C, H, W) tensor, got {type(images).__name__} "
                         f"{tuple(getattr(images, 'shape', ()))}")
    patch = inner.config.patch_size
    h, w = images.shape[-2:]
    if h % patch or w % patch:
        raise ValueError(f"images: size {h}×{w} is not divisible by the model's patch size {patch}; resize or crop "
                         f"to a multiple of {patch}")
    return h // patch, w // patch


def layer_indices(model: nn.Module, layers: int | Sequence[int] | None) -> list[int]:
    """``layers`` (one index, several, or None for all; negative from the end) as 0-based encoder indices."""
    depth = len(_encoder_layers(model))
    wanted = range(depth) if layers is None else [layers] if isinstance(layers, int) else list(layers)
    bad = [i for i in wanted if not -depth <= i < depth]
    if bad:
        raise ValueError(f"layers: {bad} out of range for an encoder of {depth} layers")
    return [i % depth for i in wanted]


@torch.no_grad()
def queries_keys(model: nn.Module, images: torch.Tensor, layers: int | Sequence[int] | None = None
                 ) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """For each layer in ``layers`` (default all): its attention block's queries and keys (B, K, n, p) of the
    tokens LN1(Z^ℓ) (MSSA: both are U_k* z) and its logit scale. Token 0 is the class token."""
    patch_grid(model, images)
    indices = layer_indices(model, layers)
    blocks = _encoder_layers(model)
    _, traces = unwrap_model(model).forward_intermediates(images, indices=sorted(set(indices)))
    inputs = dict(zip(sorted(set(indices)), (t.input for t in traces)))
    out = []
    for i in indices:
        q, k, _ = blocks[i].attn.qkv_heads(blocks[i].norm1(inputs[i]))
        out.append((q, k, blocks[i].attn.scale))
    return out


def cls_attention(model: nn.Module, images: torch.Tensor, layers: int | Sequence[int] | None = None,
                  scale: float | None = None) -> torch.Tensor:
    """Eq. (437) (MSSA) / (438) (MHSA): the class token's attention over the patches, (L, B, K, N) on the images'
    device (float32, or float64 for a float64 model), one map per requested layer and head; each map sums to 1
    over its N patches.

    ``scale``: the factor on the logits; ``None`` = the block's own (as the network computes), 1.0 = eq. (437) as
    printed. Use `upsample` on ``maps.unflatten(-1, patch_grid(model, images))`` to reach the image size.
    """
    maps = []
    for q, k, own in queries_keys(model, images, layers):
        logits = (k[:, :, 1:] @ q[:, :, :1].transpose(-2, -1)).squeeze(-1)  # (B, K, N): ⟨k_i, q_cls⟩
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        maps.append((logits * (own if scale is None else float(scale))).softmax(dim=-1))
    return torch.stack(maps)


def patch_codes(model: nn.Module, images: torch.Tensor, layers: int | Sequence[int] | None = None) -> torch.Tensor:
    """The patches' concatenated codes [U_1* z_i; …; U_K* z_i] (MSSA; keys for MHSA), (L, B, N, K·p) (float32, or
    float64 for a float64 model)."""
    codes = []
    for _, k, _ in queries_keys(model, images, layers):
        codes.append(k[:, :, 1:].transpose(1, 2).flatten(2).to(torch.promote_types(k.dtype, torch.float32)))
    return torch.stack(codes)


def mssa_affinity(codes: torch.Tensor) -> torch.Tensor:
    """``M_ij = Σ_k ⟨U_k* z_i, U_k* z_j⟩`` of patch codes (..., N, K·p) → (..., N, N)."""
    return codes @ codes.transpose(-2, -1)


def upsample(maps: torch.Tensor, size: int | tuple[int, int]) -> torch.Tensor:
    """Maps on the patch grid (..., h, w) → (..., H, W) by nearest-neighbour upsampling (each patch's value fills
    its pixels); boolean maps stay boolean."""
    size = (size, size) if isinstance(size, int) else tuple(size)
    flat = maps.reshape(-1, 1, *maps.shape[-2:])
    out = F.interpolate(flat.float(), size=size, mode="nearest").reshape(*maps.shape[:-2], *size)
    return out.bool() if maps.dtype == torch.bool else out


# --------------------------------------------------------------------------------------------- masks from attention
def mass_mask(maps: torch.Tensor, mass: float = MASS) -> torch.Tensor:
    """DINO's threshold: for each map (..., N) of non-negative weights, the smallest set of largest entries whose
    sum reaches ``mass`` × the map's total → bool (..., N)."""
    if not 0 < mass <= 1:
        raise ValueError(f"mass: expected a fraction in (0, 1], got {mass}")
    if (maps < 0).any():
        raise ValueError("maps: attention maps must be non-negative")
    values, order = maps.sort(dim=-1, descending=True)
    total = values.sum(dim=-1, keepdim=True)
    before = values.cumsum(dim=-1) - values  # mass of the entries strictly above each one
    keep_sorted = before < mass * total
    return torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)


def attention_masks(attention: torch.Tensor, mass: float = MASS, heads: str = "mean") -> torch.Tensor:
    """Coarse foreground masks from class-token attention (..., K, N): ``heads="mean"`` thresholds the head-averaged
    map → (..., N); ``heads="each"`` thresholds every head's map → (..., K, N)."""
    if heads == "mean":
        return mass_mask(attention.mean(dim=-2), mass)
    if heads == "each":
        return mass_mask(attention, mass)
    raise ValueError(f"heads: expected 'mean' or 'each', got {heads!r}")


# --------------------------------------------------------------------------------------------- PCA images
def pca_images(features: torch.Tensor, grid: tuple[int, int], components: int = 3) -> torch.Tensor:
    """RGB images (B, h, w, components) in [0, 1] from patch features (B, N, D), N = h·w (module docstring).

    The principal directions are fitted (float64) on the patches of all B images together; each image's scores
    are min-max scaled per component (a constant component maps to 0).
    """
    if features.ndim != 3 or features.shape[1] != grid[0] * grid[1]:
        raise ValueError(f"features: expected (B, {grid[0] * grid[1]}, D) for a {grid[0]}×{grid[1]} grid, got "
                         f"{tuple(features.shape)}")
    if not 1 <= components <= min(features.shape[-1], features.shape[0] * features.shape[1]):
        raise ValueError(f"components: expected 1 … {min(features.shape[-1], features.shape[0] * features.shape[1])}, "
                         f"got {components}")
    x = features.detach().to("cpu", torch.float64).reshape(-1, features.shape[-1])
    x = x - x.mean(dim=0)
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    scores = x @ vh[:components].T  # (B·N, components)
    flip = scores.gather(0, scores.abs().argmax(dim=0, keepdim=True)).sign()
    scores = (scores * torch.where(flip == 0, 1.0, flip)).reshape(features.shape[0], -1, components)
    low, high = scores.amin(dim=1, keepdim=True), scores.amax(dim=1, keepdim=True)
    scaled = (scores - low) / torch.where(high > low, high - low, 1.0)
    return scaled.reshape(features.shape[0], *grid, components).float()


# --------------------------------------------------------------------------------------------- figures
def _as_image(image: torch.Tensor) -> np.ndarray:
    """(C, H, W) uint8 or float in [0, 1] → (H, W, C) or (H, W) float array for imshow."""
    x = image.detach().to("cpu")
    x = x.float() / 255.0 if x.dtype == torch.uint8 else x.float().clamp(0, 1)
    x = x.permute(1, 2, 0).numpy()
    return x[..., 0] if x.shape[-1] == 1 else x


def _panels(count: int, rows: int = 1, width: float = 1.8):
    from matplotlib.figure import Figure

    cols = -(-count // rows)
    fig = Figure(figsize=(width * cols + 0.5, width * rows + 0.4), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes:
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes[count:]:
        ax.set_axis_off()
    return fig, axes


def plot_attention_maps(image: torch.Tensor, maps: torch.Tensor, title: str = ""):
    """The image and its class-token attention maps (K, H, W) (already upsampled), one panel per head plus their
    mean: Figs. 18/20/27."""
    fig, axes = _panels(maps.shape[0] + 2)
    axes[0].imshow(_as_image(image), cmap="gray")
    axes[0].set_title("image", fontsize=8)
    for k, (ax, m) in enumerate(zip(axes[1:], list(maps) + [maps.mean(dim=0)])):
        ax.imshow(m.detach().cpu().numpy(), cmap="inferno")
        ax.set_title(f"head {k}" if k < maps.shape[0] else "mean", fontsize=8)
    fig.suptitle(title, fontsize=9)
    return fig


def _overlay(ax, image: torch.Tensor, masks: torch.Tensor, boxes: torch.Tensor | None) -> None:
    """Draw ``image`` with the masks (S, H, W) tinted in distinct colours and their boxes (S, 4) outlined."""
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Rectangle

    base = _as_image(image)
    base = np.repeat(base[..., None], 3, axis=-1) if base.ndim == 2 else base
    colours = ["tab:red", "tab:cyan", "tab:orange", "tab:green", "tab:purple"]
    shown = base.copy()
    for s, mask in enumerate(masks):
        m = mask.cpu().numpy().astype(bool)
        shown[m] = 0.45 * shown[m] + 0.55 * np.array(to_rgb(colours[s % len(colours)]))
    ax.imshow(shown)
    for s, box in enumerate([] if boxes is None else boxes.tolist()):
        x0, y0, x1, y1 = box
        if x1 > x0 and y1 > y0:
            ax.add_patch(Rectangle((x0 - 0.5, y0 - 0.5), x1 - x0, y1 - y0, fill=False, lw=1.2,
                                   edgecolor=colours[s % len(colours)]))


def plot_masks(image: torch.Tensor, masks: torch.Tensor, boxes: torch.Tensor | None = None, title: str = ""):
    """The image, and the image with object masks (S, H, W) and their boxes (S, 4) drawn on it: Fig. 19."""
    fig, axes = _panels(2, width=2.6)
    axes[0].imshow(_as_image(image), cmap="gray")
    _overlay(axes[1], image, masks, boxes)
    fig.suptitle(title, fontsize=9)
    return fig


def plot_pca(images: torch.Tensor, pca: torch.Tensor, title: str = ""):
    """Images (B, C, H, W) above their PCA images (B, h, w, 3)."""
    count = images.shape[0]
    fig, axes = _panels(2 * count, rows=2)
    for i in range(count):
        axes[i].imshow(_as_image(images[i]), cmap="gray")
        axes[count + i].imshow(pca[i].cpu().numpy(), interpolation="nearest")
    fig.suptitle(title, fontsize=9)
    return fig


def plot_rows(images: torch.Tensor, rows: Mapping[str, torch.Tensor], kind: str = "map", title: str = ""):
    """A comparison grid: the images (B, C, H, W) in the first row, then one row per entry of ``rows`` — maps
    (B, H, W) drawn as heat maps (``kind="map"``) or masks (B, H, W) bool drawn over the image (``"mask"``)."""
    if kind not in ("map", "mask"):
        raise ValueError(f"kind: expected 'map' or 'mask', got {kind!r}")
    count = images.shape[0]
    fig, axes = _panels(count * (1 + len(rows)), rows=1 + len(rows))
    for i in range(count):
        axes[i].imshow(_as_image(images[i]), cmap="gray")
    for r, (name, values) in enumerate(rows.items(), start=1):
        axes[r * count].set_ylabel(name, fontsize=8)
        for i in range(count):
            ax = axes[r * count + i]
            if kind == "map":
                ax.imshow(values[i].detach().cpu().numpy(), cmap="inferno")
            else:
                _overlay(ax, images[i], values[i][None], None)
    fig.suptitle(title, fontsize=9)
    return fig
