"""``objects``: a built-in dataset of images with ground-truth object masks, for measuring emergent segmentation.

Each image holds one of scikit-learn's handwritten digits (the object; its class is the label), scaled and placed at
random on a cluttered background, with the object's pixel mask and box as ground truth. Nothing is downloaded.

An image of side S is drawn as follows (all randomness from one seeded generator per split):

* background: a smooth dark colour field (a random 4×4 RGB grid with values in [0, 0.5], upsampled bicubically
  to S×S), plus 1–3 clutter strokes — straight segments of length 0.15–0.3 S and width ≈ 0.05 S — painted in
  colours drawn like the object's, so that bright pixels alone do not single out the object;
* object: the 8×8 digit upsampled bilinearly to a random side of 0.55–0.85 S at a random position, in a random
  colour with values in [0.5, 1]; its opacity is ``clip((v − 0.25) / 0.35, 0, 1)`` of the upsampled intensity
  v ∈ [0, 1], and the ground-truth mask is where that opacity is ≥ 1/2;
* every painted colour is redrawn until its mean absolute RGB difference from the background field under it is at
  least 0.35, so every object is visible; pixel noise N(0, 0.03²) is added and the image stored as uint8.

Splits follow the digits' fixed split (`crate_nn.data.images.digits`): the objects of ``train`` / ``val`` /
``test`` are distinct digit images; ``train`` renders each of its 1,293 digits ``COPIES["train"]`` = 8 times at
different places, colours and scales (10,344 images), ``val`` 2 times (288), ``test`` once (360). The rendering
seed is fixed (``OBJECTS_SEED``), whatever the training seed, so every model of a comparison is trained and
measured on the same images. The difficulty (1–3 strokes, objects of 0.55–0.85 S) was set so that CRATE and ViT
of the ``objects_*`` presets learn the classification within minutes on a CPU: with 3–6 strokes and objects of
0.45–0.75 S, CRATE reached 35% and ViT 56% validation accuracy after 3,000 steps.
"""
from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F

from .boxes import mask_boxes
from .images import TensorImages, digits
from .registry import register_dataset

OBJECTS_SEED = 0
COPIES = {"train": 8, "val": 2, "test": 1, "trainval": 8}
SPLIT_STREAMS = {"train": 0, "val": 1, "test": 2, "trainval": 3}
MIN_CONTRAST = 0.35
STROKES = (1, 3)  # clutter strokes per image, inclusive range
OBJECT_SIDE = (0.55, 0.85)  # the object's side as a fraction of the image side
BACKGROUND = (0.0, 0.5)  # range of the background field's values
FOREGROUND = (0.5, 1.0)  # range of the object's and the strokes' colour values


class ObjectImages(TensorImages):
    """Images (N, 3, S, S) uint8 with their labels and ground truth: ``masks`` (N, S, S) bool (the object's
    pixels) and ``boxes`` (N, 4) int64 (x0, y0, x1, y1) with exclusive ends, the tight box around each mask."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, masks: torch.Tensor, classes):
        super().__init__(images, labels, classes)
        if masks.shape != (images.shape[0], *images.shape[-2:]) or masks.dtype != torch.bool:
            raise ValueError(f"masks: expected a bool tensor of shape {(images.shape[0], *images.shape[-2:])}, got "
                             f"{masks.dtype} {tuple(masks.shape)}")
        self.masks = masks
        self.boxes = mask_boxes(masks)


def _contrasting(under: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Colours (M, 3) uniform in [0, 1]³, each redrawn until its mean absolute difference from the colour ``under``
    it (M, 3) is at least MIN_CONTRAST."""
    colour = rng.uniform(*FOREGROUND, under.shape)
    while True:
        low = np.abs(colour - under).mean(axis=1) < MIN_CONTRAST
        if not low.any():
            return colour
        colour[low] = rng.uniform(*FOREGROUND, (int(low.sum()), 3))


def _paint(image: np.ndarray, background: np.ndarray, alpha: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Composite over ``image`` (M, 3, S, S), with opacity ``alpha`` (M, S, S), a colour contrasting with the
    ``background`` field (M, 3, S, S) under the painted pixels."""
    weight = alpha.sum(axis=(1, 2))
    under = np.where(weight[:, None] > 0,
                     (background * alpha[:, None]).sum(axis=(2, 3)) / np.maximum(weight, 1e-12)[:, None],
                     background.mean(axis=(2, 3)))
    colour = _contrasting(under, rng)
    return image * (1 - alpha[:, None]) + colour[:, :, None, None] * alpha[:, None]


def render(glyphs: np.ndarray, side: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Images (M, 3, S, S) float in [0, 1] holding the 8×8 ``glyphs`` (M, 8, 8) (values in [0, 1]), and the
    objects' masks (M, S, S) bool (module docstring)."""
    m = glyphs.shape[0]
    grid = torch.from_numpy(rng.uniform(*BACKGROUND, (m, 3, 4, 4)))
    background = F.interpolate(grid, size=(side, side), mode="bicubic", align_corners=False).clamp(*BACKGROUND).numpy()
    image = background
    y, x = np.mgrid[0:side, 0:side] + 0.5  # pixel centres
    strokes = rng.integers(STROKES[0], STROKES[1] + 1, m)
    for j in range(int(strokes.max(initial=0))):
        start = rng.uniform(0, side, (m, 2))
        angle, length = rng.uniform(0, np.pi, m), rng.uniform(0.15, 0.3, m) * side
        direction = length[:, None] * np.stack([np.cos(angle), np.sin(angle)], axis=1)
        dx, dy = x - start[:, 0, None, None], y - start[:, 1, None, None]
        t = np.clip((dx * direction[:, 0, None, None] + dy * direction[:, 1, None, None])
                    / (length**2)[:, None, None], 0.0, 1.0)
        distance = np.hypot(dx - t * direction[:, 0, None, None], dy - t * direction[:, 1, None, None])
        alpha = np.clip(0.025 * side + 0.5 - distance, 0.0, 1.0) * (strokes > j)[:, None, None]
        image = _paint(image, background, alpha, rng)
    size = rng.integers(round(OBJECT_SIDE[0] * side), round(OBJECT_SIDE[1] * side) + 1, m)
    left, top = (rng.integers(0, side - size + 1) for _ in range(2))
    # canvas → glyph coordinates (normalised, align_corners=False): g = (S/size)·x + (S − 2·offset)/size − 1
    theta = np.zeros((m, 2, 3))
    theta[:, 0, 0] = theta[:, 1, 1] = side / size
    theta[:, 0, 2], theta[:, 1, 2] = (side - 2 * left) / size - 1, (side - 2 * top) / size - 1
    sampling = F.affine_grid(torch.from_numpy(theta), [m, 1, side, side], align_corners=False)
    value = F.grid_sample(torch.from_numpy(glyphs)[:, None], sampling, mode="bilinear", padding_mode="zeros",
                          align_corners=False)[:, 0].numpy()
    alpha = np.clip((value - 0.25) / 0.35, 0.0, 1.0)
    image = _paint(image, background, alpha, rng)
    image = np.clip(image + rng.normal(0.0, 0.03, image.shape), 0.0, 1.0)
    return image, alpha >= 0.5


@functools.lru_cache(maxsize=8)
def objects(split: str, image_size: int = 32, seed: int = OBJECTS_SEED) -> ObjectImages:
    """The ``objects`` split ``split`` (train / val / test / trainval) at side ``image_size`` (module docstring);
    rendered once per process and argument set (the returned dataset is shared: do not modify it)."""
    if split not in COPIES:
        raise ValueError(f"split: objects has splits {sorted(COPIES)}, got {split!r}")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 8:
        raise ValueError(f"image_size: objects needs an integer side of at least 8 pixels, got {image_size!r}")
    source = digits(split)
    rng = np.random.default_rng([seed, SPLIT_STREAMS[split]])
    glyphs = np.tile(source.images[:, 0].double().numpy(), (COPIES[split], 1, 1))
    images, masks = render(glyphs, image_size, rng)
    return ObjectImages(torch.from_numpy(np.round(images * 255).astype(np.uint8)), source.labels.repeat(COPIES[split]),
                        torch.from_numpy(masks), source.info.classes)


@register_dataset("objects")
def _objects_split(split: str, *, image_size: int, **_) -> ObjectImages:
    return objects(split, image_size)
