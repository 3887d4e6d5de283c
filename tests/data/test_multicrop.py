"""DINO's multi-crop augmentation: shapes and counts, view order, value ranges, the operations of each view,
determinism under a seed, and bad input."""
import pytest
import torch

from crate_nn.data.multicrop import MultiCrop

GRAY = dict(mean=(0.5,), std=(0.5,))
RGB = dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))


@pytest.mark.parametrize("global_crops, local_crops", [(2, 8), (2, 0), (1, 3), (3, 2)])
def test_shapes_and_counts(global_crops, local_crops):
    crops = MultiCrop(32, 16, global_crops=global_crops, local_crops=local_crops, **RGB)
    images = torch.randint(0, 256, (5, 3, 40, 40), dtype=torch.uint8)
    globals_, locals_ = crops(images)
    assert globals_.shape == (global_crops * 5, 3, 32, 32) and globals_.dtype == torch.float32
    if local_crops:
        assert locals_.shape == (local_crops * 5, 3, 16, 16)
    else:
        assert locals_ is None


def test_views_are_stacked_view_after_view():
    """Rows v·B + b are view v of image b: images with distinct constant values stay identifiable (a constant
    image is a constant crop whatever the box; no photometric operation, no flip, to keep the values)."""
    crops = MultiCrop(8, 4, global_crops=2, local_crops=3, flip_p=0.0, color_jitter_p=0.0, grayscale_p=0.0,
                      blur_p=(0.0, 0.0, 0.0), solarize_p=0.0, mean=(0.0,), std=(1.0,))
    values = torch.tensor([0.1, 0.3, 0.7, 0.9])
    images = values.view(4, 1, 1, 1).expand(4, 1, 12, 12).clone()
    globals_, locals_ = crops(images)
    # bicubic resampling of a constant reproduces it up to float32 rounding of the kernel weights (sum to 1)
    torch.testing.assert_close(globals_.mean(dim=(1, 2, 3)), values.repeat(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(locals_.mean(dim=(1, 2, 3)), values.repeat(3), atol=1e-5, rtol=0)


def test_normalised_values_come_from_clamped_unit_range():
    """Bicubic overshoot is clamped to [0, 1] before normalisation, so (x·std + mean) lies in [0, 1]."""
    crops = MultiCrop(16, 8, local_crops=4, **RGB)
    images = (torch.rand(6, 3, 24, 24) > 0.5).float()  # sharp edges make bicubic overshoot
    mean, std = torch.tensor(RGB["mean"]).view(1, 3, 1, 1), torch.tensor(RGB["std"]).view(1, 3, 1, 1)
    for crop in crops(images):
        unit = crop * std + mean
        assert unit.min() >= -1e-6 and unit.max() <= 1 + 1e-6  # float32 round trip of the normalisation


def test_only_the_second_global_view_solarises():
    """Solarisation maps values ≥ 0.5 to 1 − value: with every other operation off, a constant image of 0.8 stays 0.8
    in the first global view and becomes 0.2 in the second when solarize_p = 1."""
    crops = MultiCrop(8, 4, global_crops=2, local_crops=2, flip_p=0.0, color_jitter_p=0.0, grayscale_p=0.0,
                      blur_p=(0.0, 0.0, 0.0), solarize_p=1.0, mean=(0.0,), std=(1.0,))
    globals_, locals_ = crops(torch.full((3, 1, 12, 12), 0.8))
    torch.testing.assert_close(globals_[:3], torch.full((3, 1, 8, 8), 0.8), atol=1e-5, rtol=0)
    torch.testing.assert_close(globals_[3:], torch.full((3, 1, 8, 8), 0.2), atol=1e-5, rtol=0)
    torch.testing.assert_close(locals_, torch.full((6, 1, 4, 4), 0.8), atol=1e-5, rtol=0)


def test_first_global_view_is_always_blurred():
    """blur_p = (1, 0, 0): only the first global view is smoothed; a checkerboard loses contrast there only."""
    crops = MultiCrop(16, 8, global_crops=2, local_crops=1, global_crop_scale=(1.0, 1.0), flip_p=0.0, color_jitter_p=0.0,
                      blur_sigma=(1.5, 2.0), blur_p=(1.0, 0.0, 0.0), solarize_p=0.0, mean=(0.0,), std=(1.0,))
    board = ((torch.arange(16)[:, None] + torch.arange(16)[None]) % 2).float().expand(4, 1, 16, 16)
    globals_, _ = crops(board)
    first, second = globals_[:4].std(dim=(1, 2, 3)), globals_[4:].std(dim=(1, 2, 3))
    assert (first < 0.5 * second).all(), (first, second)


def test_load_size_upsamples_before_cropping():
    crops = MultiCrop(16, 8, load_size=32, local_crops=1, **GRAY)
    assert crops(torch.rand(2, 1, 8, 8))[0].shape == (4, 1, 16, 16)


def test_same_seed_same_crops_and_gray_images_work():
    crops = MultiCrop(16, 8, local_crops=2, **GRAY)
    images = torch.rand(4, 1, 20, 20)
    torch.manual_seed(3)
    a = crops(images)
    torch.manual_seed(3)
    b = crops(images)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])  # the same operations in the same order


@pytest.mark.parametrize("kwargs, match", [
    (dict(global_crops=0), "global_crops: expected a positive integer"),
    (dict(global_crops=1, local_crops=0), "global_crops, local_crops: the loss compares two crops"),
    (dict(local_crops=-1), "local_crops: expected a non-negative integer"),
    (dict(local_crop_size=64), r"local_crop_size: a local crop \(64\) larger than the global crops \(image_size=32\)"),
    (dict(global_crop_scale=(0.5, 0.4)), "global_crop_scale: expected 0 < min ≤ max ≤ 1"),
    (dict(local_crop_scale=(0.0, 0.4)), "local_crop_scale: expected 0 < min ≤ max ≤ 1"),
    (dict(blur_sigma=(2.0, 1.0)), r"blur_sigma: expected 0 < min ≤ max, got \(2.0, 1.0\)"),
    (dict(mean=(0.5, 0.5)), "mean, std: expected one value per channel"),
])
def test_bad_arguments_name_themselves(kwargs, match):
    arguments = dict(image_size=32, local_crop_size=16, **GRAY)
    with pytest.raises(ValueError, match=match):
        MultiCrop(**{**arguments, **kwargs})


def test_images_of_the_wrong_shape_are_refused():
    with pytest.raises(ValueError, match=r"images: expected \(batch, 1, height, width\)"):
        MultiCrop(16, 8, **GRAY)(torch.rand(2, 3, 16, 16))


def test_crops_touching_the_border_read_no_padding():
    """A constant image gives constant crops wherever the box lies: bicubic taps beyond the image's edge read its
    border pixels (as PIL's resize and interpolate's clamped taps do), not zeros. 64 images × (2 global + 4 local)
    boxes with small scales and random positions: many touch an edge (kornia's zero padding gave 0.756 for 0.8)."""
    crops = MultiCrop(8, 4, global_crops=2, local_crops=4, global_crop_scale=(0.2, 1.0), flip_p=0.0, color_jitter_p=0.0,
                      blur_p=(0.0, 0.0, 0.0), solarize_p=0.0, mean=(0.0,), std=(1.0,))
    torch.manual_seed(0)
    for crop in crops(torch.full((64, 1, 12, 12), 0.8)):
        # the 16 bicubic weights of a tap sum to 1 up to float32 rounding
        torch.testing.assert_close(crop, torch.full_like(crop, 0.8), atol=1e-5, rtol=0)
