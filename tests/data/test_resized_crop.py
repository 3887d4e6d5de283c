"""The batched RandomResizedCrop + flip (`crate_nn.data.resized_crop`) against per-image references.

* boxes: the same uniform draws give exactly the boxes of a sequential port of torchvision's
  ``RandomResizedCrop.get_params`` (first try that fits, else the central fallback); the sampler's boxes follow the
  distribution of that port drawing its own numbers as torchvision does (two-sample Kolmogorov–Smirnov tests);
* pixels: one ``grid_sample`` for the batch equals cropping each image and resizing it with ``F.interpolate``
  (bilinear, align_corners=False, no antialiasing), then flipping, in float64 to rounding and in float32 within a
  bound derived from float32's unit roundoff.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import ks_2samp

from crate_nn.data import IMAGENET_MEAN, IMAGENET_STD, DeviceTransform
from crate_nn.data.resized_crop import (
    RATIO,
    TRIES,
    RandomResizedCropFlip,
    boxes_from_draws,
    crop_boxes,
    resized_crop,
)


# ----------------------------------------------------------------------------------------------- references
def reference_box(height: int, width: int, scale, ratio, uniform, randint) -> tuple[int, int, int, int]:
    """torchvision's ``RandomResizedCrop.get_params`` (v0.15–0.21), one image at a time, drawing from ``uniform()``
    (U[0, 1)) and ``randint(n)`` (uniform on 0 … n − 1)."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(TRIES):
        target_area = area * (scale[0] + (scale[1] - scale[0]) * uniform())
        aspect_ratio = math.exp(log_ratio[0] + (log_ratio[1] - log_ratio[0]) * uniform())
        w = int(round(math.sqrt(target_area * aspect_ratio)))
        h = int(round(math.sqrt(target_area / aspect_ratio)))
        if 0 < w <= width and 0 < h <= height:
            return randint(height - h + 1), randint(width - w + 1), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def reference_crop(images: torch.Tensor, boxes: torch.Tensor, size: tuple[int, int], flip: torch.Tensor
                   ) -> torch.Tensor:
    """Per image: crop, ``F.interpolate`` (bilinear, align_corners=False, no antialiasing), flip."""
    out = []
    for image, (top, left, h, w), flipped in zip(images, boxes.tolist(), flip.tolist()):
        crop = image[None, :, top:top + h, left:left + w]
        resized = F.interpolate(crop, size=size, mode="bilinear", align_corners=False, antialias=False)[0]
        out.append(resized.flip(-1) if flipped else resized)
    return torch.stack(out)


@st.composite
def images_and_boxes(draw):
    batch, channels = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    height, width = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    size = (draw(st.integers(1, 24)), draw(st.integers(1, 24)))
    boxes = []
    for _ in range(batch):
        h, w = draw(st.integers(1, height)), draw(st.integers(1, width))
        boxes.append((draw(st.integers(0, height - h)), draw(st.integers(0, width - w)), h, w))
    flip = [draw(st.booleans()) for _ in range(batch)]
    seed = draw(st.integers(0, 2**16))
    images = torch.rand(batch, channels, height, width, dtype=torch.float64,
                        generator=torch.Generator().manual_seed(seed))
    return images, torch.tensor(boxes), size, torch.tensor(flip)


# ----------------------------------------------------------------------------------------------- boxes
@given(height=st.integers(1, 300), width=st.integers(1, 300),
       scale=st.tuples(st.floats(0.01, 1.0), st.floats(0.01, 1.0)).map(sorted),
       ratio=st.sampled_from([RATIO, (1.0, 1.0), (0.2, 0.5), (2.0, 5.0), (0.5, 3.0)]),
       seed=st.integers(0, 2**16))
def test_the_same_draws_give_torchvisions_boxes(height, width, scale, ratio, seed):
    """Vectorised over the batch and the tries, the boxes are those of the sequential algorithm consuming the same
    uniform draws (tries in order, then the position), including its fallback (ratio ranges that cannot fit)."""
    count = 16
    g = torch.Generator().manual_seed(seed)
    area, log_ratio = torch.rand(count, TRIES, dtype=torch.float64, generator=g), torch.rand(
        count, TRIES, dtype=torch.float64, generator=g)
    top, left = torch.rand(count, dtype=torch.float64, generator=g), torch.rand(count, dtype=torch.float64, generator=g)
    boxes = boxes_from_draws(area, log_ratio, top, left, height, width, scale, ratio)
    assert boxes.dtype == torch.int64 and boxes.shape == (count, 4)
    for b in range(count):
        tries = iter(torch.stack([area[b], log_ratio[b]], dim=1).flatten().tolist())
        positions = iter([top[b].item(), left[b].item()])
        expected = reference_box(height, width, scale, ratio, tries.__next__,
                                 lambda n, positions=positions: min(math.floor(next(positions) * n), n - 1))
        assert tuple(boxes[b].tolist()) == expected


def test_a_range_that_never_fits_falls_back_to_the_central_crop():
    # a 40×100 image (W/H = 2.5 above every ratio ≤ 2) with crops of at least the whole area never fits: h = H,
    # w = round(40 · 2) = 80, centred
    boxes = crop_boxes(5, 40, 100, scale=(1.0, 1.0), ratio=(1.5, 2.0), generator=torch.Generator().manual_seed(0))
    assert boxes.tolist() == [[0, 10, 40, 80]] * 5


def box_statistics(boxes: torch.Tensor, height: int, width: int) -> dict[str, torch.Tensor]:
    top, left, h, w = boxes.double().unbind(dim=1)
    return {"area": h * w / (height * width), "log_aspect": torch.log(w / h), "centre_y": (top + h / 2) / height,
            "centre_x": (left + w / 2) / width}


def torchvision_boxes(count: int, height: int, width: int, scale, ratio, seed: int,
                      log_uniform_ratio: bool = True) -> torch.Tensor:
    """Boxes drawn one image at a time as torchvision draws them: float32 uniforms (``torch.empty(1).uniform_``),
    ``torch.randint`` for the position. ``log_uniform_ratio=False`` is a wrong sampler, to show the test's power:
    its ratio is uniform on [r0, r1] instead of log-uniform (the draw handed to `reference_box` is mapped so)."""
    g = torch.Generator().manual_seed(seed)
    t0, t1 = math.log(ratio[0]), math.log(ratio[1])
    calls = iter(range(10**9))

    def uniform() -> float:
        u = torch.empty(1).uniform_(0, 1, generator=g).item()
        if log_uniform_ratio or next(calls) % 2 == 0:  # tries draw the area first, then the ratio
            return u
        return (math.log(ratio[0] + (ratio[1] - ratio[0]) * u) - t0) / (t1 - t0)

    def randint(n: int) -> int:
        return int(torch.randint(0, n, (1,), generator=g))

    return torch.tensor([reference_box(height, width, scale, ratio, uniform, randint) for _ in range(count)])


# Four two-sample KS tests, each at α = 2.5e-4: if the sampler draws torchvision's distribution, a seed fails with
# probability ≤ 4 × 2.5e-4 = 1e-3 (Bonferroni; the statistics are discrete, which makes the KS p-value conservative).
# The seeds are fixed, so the test is deterministic; the wrong sampler below is rejected at the same level.
KS_ALPHA = 2.5e-4
DISTRIBUTION_CASE = dict(count=4000, height=48, width=64, scale=(0.08, 1.0), ratio=RATIO)


def ks_p_values(ours: torch.Tensor, reference: torch.Tensor, height: int, width: int) -> dict[str, float]:
    a, b = box_statistics(ours, height, width), box_statistics(reference, height, width)
    return {name: ks_2samp(a[name].numpy(), b[name].numpy()).pvalue for name in a}


def test_the_sampler_draws_torchvisions_box_distribution():
    case = DISTRIBUTION_CASE
    ours = crop_boxes(case["count"], case["height"], case["width"], case["scale"], case["ratio"],
                      generator=torch.Generator().manual_seed(1))
    reference = torchvision_boxes(seed=2, **case)
    p = ks_p_values(ours, reference, case["height"], case["width"])
    assert min(p.values()) > KS_ALPHA, p
    wrong = torchvision_boxes(seed=3, log_uniform_ratio=False, **case)
    assert ks_p_values(wrong, reference, case["height"], case["width"])["log_aspect"] < KS_ALPHA


# ----------------------------------------------------------------------------------------------- pixels
@given(images_and_boxes())
def test_one_grid_sample_equals_crop_then_interpolate_in_float64(case):
    # float64: the sampling coordinates (≤ 24 px, ~10 roundings of ≤ ½ ulp(64) = 7e-15) agree to < 1e-13 px, and
    # bilinear interpolation of values in [0, 1] is 1-Lipschitz in each coordinate: |Δ| < 2e-13 ≪ 1e-12.
    images, boxes, size, flip = case
    ours = resized_crop(images, boxes, size, flip)
    torch.testing.assert_close(ours, reference_crop(images, boxes, size, flip), rtol=0, atol=1e-12)


def test_float32_stays_within_its_rounding_bound_at_imagenet_sizes():
    """256² squares cropped to 224² (the imagenet preset) in float32, against the float64 reference."""
    g = torch.Generator().manual_seed(0)
    side, size = 256, 224
    images = torch.rand(8, 3, side, side, dtype=torch.float64, generator=g)
    boxes = crop_boxes(8, side, side, generator=g)
    flip = torch.rand(8, generator=g) < 0.5
    reference = reference_crop(images, boxes, (size, size), flip)
    ours = resized_crop(images.float(), boxes, size, flip).double()
    # Each sampling coordinate passes ≤ 10 float32 roundings (scale, product, offsets, normalisation and
    # grid_sample's unnormalisation), each ≤ ½ ulp of a value ≤ 2·side + 1 (in pixel units): |Δx| ≤ 10·(2·side+1)·
    # 2^-24. Interpolation is 1-Lipschitz per axis for values in [0, 1], plus ≤ 8 roundings of values ≤ 1 in the
    # weighted sum (and the images' own rounding to float32, ≤ 2^-24).
    bound = 2 * 10 * (2 * side + 1) * 2**-24 + 9 * 2**-24
    error = (ours - reference).abs().max().item()
    assert error <= bound, f"{error:.2e} > {bound:.2e}"


def test_flipping_reverses_the_columns_exactly():
    g = torch.Generator().manual_seed(0)
    images = torch.rand(4, 3, 30, 40, generator=g)
    boxes = crop_boxes(4, 30, 40, generator=g)
    plain = resized_crop(images, boxes, 16, torch.zeros(4, dtype=torch.bool))
    flip = torch.tensor([True, False, True, False])
    assert torch.equal(resized_crop(images, boxes, 16, flip), torch.where(flip[:, None, None, None],
                                                                          plain.flip(-1), plain))


def test_bad_boxes_and_images_are_refused():
    images = torch.rand(2, 3, 10, 10)
    with pytest.raises(ValueError, match="boxes: expected shape"):
        resized_crop(images, torch.zeros(3, 4, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="inside the 10×10 images"):
        resized_crop(images, torch.tensor([[0, 0, 10, 10], [5, 5, 6, 2]]), 4)
    with pytest.raises(ValueError, match="float"):
        resized_crop(images.to(torch.uint8), torch.tensor([[0, 0, 10, 10]] * 2), 4)
    with pytest.raises(ValueError, match="crop_scale"):
        RandomResizedCropFlip(8, scale=(0.5, 0.2))


def test_the_device_transform_crops_from_the_global_generator():
    """``rrc_flip`` draws its boxes and flips from torch's global generator (what the engine seeds and restores on
    resume): the same seed gives the same batch, and the batch is the crop of those boxes, normalised."""
    images = torch.randint(0, 256, (6, 3, 20, 20), dtype=torch.uint8)
    transform = DeviceTransform(16, IMAGENET_MEAN, IMAGENET_STD, train=True, augment="rrc_flip",
                                crop_scale=(0.3, 1.0))
    torch.manual_seed(5)
    first = transform(images)
    torch.manual_seed(5)
    assert torch.equal(transform(images), first)
    torch.manual_seed(5)
    boxes = crop_boxes(6, 20, 20, scale=(0.3, 1.0))
    flip = torch.rand(6, dtype=torch.float64) < 0.5
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    expected = (reference_crop(images.double() / 255, boxes, (16, 16), flip) - mean.double()) / std.double()
    torch.testing.assert_close(first.double(), expected, rtol=0, atol=1e-5)  # float32 of values of size ≤ 3
