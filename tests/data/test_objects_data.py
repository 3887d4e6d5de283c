"""The built-in ``objects`` dataset: its splits, ground truth and determinism; registered in build_dataset; the boxes
of masks match a naive scan."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from crate_nn.data import build_dataset, digits
from crate_nn.data.boxes import mask_boxes
from crate_nn.data.objects import COPIES, ObjectImages, objects


def test_test_split_holds_the_digits_test_objects_with_their_masks():
    data = objects("test")
    source = digits("test")
    assert isinstance(data, ObjectImages) and len(data) == 360 == COPIES["test"] * len(source)
    assert data.images.shape == (360, 3, 32, 32) and data.images.dtype == torch.uint8
    assert torch.equal(data.labels, source.labels) and data.info.num_classes == 10 and data.info.in_channels == 3
    assert data.masks.shape == (360, 32, 32) and data.masks.flatten(1).any(dim=1).all()
    assert torch.equal(data.boxes, mask_boxes(data.masks))
    fraction = data.masks.double().mean().item()
    assert 0.05 < fraction < 0.25, fraction  # objects of side 0.45–0.75 S, strokes covering part of it
    image, label, index = data[7]
    assert torch.equal(image, data.images[7]) and label == data.labels[7] and index == 7


def test_objects_stand_out_from_the_background_under_them():
    data = objects("val")
    x = data.images.double() / 255
    inside = (x * data.masks[:, None]).sum((2, 3)) / data.masks[:, None].sum((2, 3))
    ring = torch.nn.functional.max_pool2d(data.masks[:, None].double(), 5, 1, 2)[:, 0].bool() & ~data.masks
    around = (x * ring[:, None]).sum((2, 3)) / ring[:, None].sum((2, 3)).clamp_min(1)
    # objects are painted ≥ 0.35 (mean over RGB) from the smooth background field; strokes and pixel noise around
    # them blur the ring's average, so the test asks for a clear majority above 0.2
    assert ((inside - around).abs().mean(dim=1) > 0.2).double().mean() > 0.9


def test_rendering_is_deterministic_and_independent_of_the_training_seed():
    a = objects.__wrapped__("val", 24)
    b = build_dataset("objects", "val", data_dir=None, train=False, image_size=24, load_size=0, eval_resize=0, seed=5)
    assert torch.equal(a.images, b.images) and torch.equal(a.masks, b.masks) and a.images.shape[-1] == 24
    other = objects.__wrapped__("val", 24, seed=1)
    assert not torch.equal(a.images, other.images)


def test_bad_arguments():
    with pytest.raises(ValueError, match="split"):
        objects("validation")
    with pytest.raises(ValueError, match="image_size"):
        objects("test", 4)
    with pytest.raises(ValueError, match="masks"):
        ObjectImages(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.zeros(2, dtype=torch.long),
                     torch.zeros(2, 8, 8), ["a"])
    with pytest.raises(TypeError, match="masks"):
        mask_boxes(torch.zeros(3, 3))


@given(st.integers(0, 2**31 - 1))
def test_mask_boxes_match_a_naive_scan(seed):
    masks = torch.from_numpy(np.random.default_rng(seed).random((3, 7, 9)) > 0.85)
    boxes = mask_boxes(masks)
    for mask, box in zip(masks.numpy(), boxes.tolist()):
        ys, xs = np.nonzero(mask)
        assert box == ([xs.min(), ys.min(), xs.max() + 1, ys.max() + 1] if len(xs) else [0, 0, 0, 0])
