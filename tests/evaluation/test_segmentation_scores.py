"""Segmentation scores: metrics against naive formulas, known scores on hand-made COCO and VOC annotations (perfect
masks → AP 100 / mIoU 100, empty → 0), the evaluators end to end on tiny files with a small random model."""
import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import crate_nn
from crate_nn.data import DeviceTransform
from crate_nn.data.objects import ObjectImages
from crate_nn.evaluation.segmentation import (
    box_iou,
    class_iou,
    coco_ap,
    confusion,
    corloc,
    evaluate_objects,
    jaccard,
    maskcut_predictions,
    oracle_labels,
    read_coco_images,
    read_label_png,
    read_voc,
    score_masks,
    voc_coarse_segmentation,
    voc_scores,
)


@given(st.integers(0, 2**31 - 1))
def test_jaccard_confusion_and_miou_match_naive_formulas(seed):
    rng = np.random.default_rng(seed)
    pred, gt = rng.random((4, 6, 7)) > 0.6, rng.random((4, 6, 7)) > 0.7
    inter, union = (pred & gt).sum((1, 2)), (pred | gt).sum((1, 2))
    expected = np.where(union > 0, inter / np.maximum(union, 1), 1.0)
    np.testing.assert_allclose(jaccard(torch.from_numpy(pred), torch.from_numpy(gt)).numpy(), expected, rtol=1e-15)
    labels_p, labels_g = rng.integers(0, 3, 50), rng.integers(0, 4, 50)
    labels_g[:5] = 255
    m = confusion(torch.from_numpy(labels_p), torch.from_numpy(labels_g), 4).numpy()
    keep = labels_g != 255
    for c in range(4):
        tp = np.sum((labels_p == c) & (labels_g == c) & keep)
        union_c = np.sum(((labels_p == c) | (labels_g == c)) & keep)
        assert m[c].sum() == np.sum((labels_g == c) & keep)
        assert class_iou(torch.from_numpy(m))[c].item() == pytest.approx(tp / union_c if union_c else np.nan,
                                                                         nan_ok=True, rel=1e-15)


def test_box_iou_and_corloc():
    a = torch.tensor([[0, 0, 4, 4], [0, 0, 4, 4], [0, 0, 0, 0]])
    b = torch.tensor([[2, 2, 6, 6], [0, 0, 4, 4], [0, 0, 0, 0]])
    torch.testing.assert_close(box_iou(a, b), torch.tensor([4 / 28, 1.0, 0.0], dtype=torch.float64))
    assert corloc(a, b) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="pred_boxes"):
        corloc(a[:, :3], b[:, :3])


def test_score_masks_perfect_and_empty():
    gt = torch.zeros(3, 8, 8, dtype=torch.bool)
    gt[:, 2:5, 1:6] = True
    assert score_masks(gt, gt) == {"miou": 1.0, "jaccard": 1.0, "corloc": 1.0}
    empty = score_masks(torch.zeros_like(gt), gt)
    assert empty["jaccard"] == 0 and empty["corloc"] == 0
    assert empty["miou"] == pytest.approx((64 - 15) / 64 / 2)  # background IoU 49/64, object IoU 0
    with pytest.raises(TypeError, match="pred"):
        score_masks(gt.long(), gt)


# --------------------------------------------------------------------------------------------- COCO
def write_coco(root, masks_per_image):
    """A COCO instances file and images for hand-made object masks (each (H, W) bool)."""
    from pycocotools import mask as coco_mask

    (root / "val").mkdir(parents=True)
    images, annotations = [], []
    for image_id, masks in enumerate(masks_per_image, start=1):
        h, w = masks[0].shape
        Image.fromarray(np.random.default_rng(image_id).integers(0, 256, (h, w, 3), dtype=np.uint8)).save(
            root / "val" / f"{image_id}.png")
        images.append({"id": image_id, "file_name": f"{image_id}.png", "height": h, "width": w})
        for m in masks:
            rle = coco_mask.encode(np.asfortranarray(m.astype(np.uint8)))
            annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": 7, "iscrowd": 0,
                                "area": float(m.sum()), "bbox": coco_mask.toBbox(rle).tolist(),
                                "segmentation": {"size": rle["size"], "counts": rle["counts"].decode("ascii")}})
    path = root / "instances_val.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations,
                                "categories": [{"id": 7, "name": "thing"}]}))
    return path


def boxes(h, w, *spans):
    masks = []
    for y0, y1, x0, x1 in spans:
        m = np.zeros((h, w), dtype=bool)
        m[y0:y1, x0:x1] = True
        masks.append(m)
    return masks


def test_coco_ap_known_scores(tmp_path):
    pytest.importorskip("pycocotools")
    truth = [boxes(32, 40, (2, 14, 3, 20), (18, 30, 22, 38)), boxes(24, 24, (4, 20, 4, 20))]
    path = write_coco(tmp_path, truth)
    perfect = [{"image_id": i, "mask": m, "score": 1.0} for i, ms in enumerate(truth, start=1) for m in ms]
    for value in coco_ap(path, perfect).values():
        assert value == pytest.approx(100.0)
    assert all(v == 0 for v in coco_ap(path, []).values())
    wrong = [{"image_id": 1, "mask": boxes(32, 40, (0, 2, 0, 2))[0], "score": 1.0}]
    assert all(v == 0 for v in coco_ap(path, wrong).values())
    # two of the three objects found, with the highest scores: precision 1 up to recall 2/3, then nothing —
    # COCO's 101-point interpolated AP is 67/101 (recall thresholds 0, 0.01, …, 0.66 reached)
    found = perfect[:1] + perfect[2:]
    for value in coco_ap(path, found).values():
        assert value == pytest.approx(100 * 67 / 101)
    with pytest.raises(ValueError, match="image_id"):
        coco_ap(path, [{"image_id": 9, "mask": truth[0][0], "score": 1.0}])
    assert read_coco_images(path, tmp_path / "val")[1]["height"] == 24
    with pytest.raises(ValueError, match="missing"):
        read_coco_images(path, tmp_path)


def test_coco_image_sizes_must_match_the_files(tmp_path):
    """A downscaled copy of the images used to score predictions equal to the ground truth at segmentation AP 44."""
    pytest.importorskip("pycocotools")
    path = write_coco(tmp_path, [boxes(32, 40, (2, 14, 3, 20)), boxes(24, 24, (4, 20, 4, 20))])
    with Image.open(tmp_path / "val" / "1.png") as im:
        im.resize((20, 16)).save(tmp_path / "val" / "1.png")
    with pytest.raises(ValueError, match=r"image_dir: .*1.png is 20×16 pixels, .*instances_val.json annotates it as "
                                         r"40×32"):
        read_coco_images(path, tmp_path / "val")


@pytest.mark.parametrize("kind, field", [("images", "file_name"), ("annotations", "bbox"), ("annotations", "iscrowd")])
def test_coco_records_missing_a_field_are_named(tmp_path, kind, field):
    pytest.importorskip("pycocotools")
    path = write_coco(tmp_path, [boxes(32, 40, (2, 14, 3, 20), (18, 30, 22, 38))])
    data = json.loads(path.read_text())
    del data[kind][-1][field]
    path.write_text(json.dumps(data))
    last = len(data[kind]) - 1
    with pytest.raises(ValueError, match=rf"annotations: {kind}\[{last}\] of .*instances_val.json has no {field}"):
        read_coco_images(path, tmp_path / "val")
    with pytest.raises(ValueError, match=rf"{kind}\[{last}\] .* has no {field}"):
        coco_ap(path, [])


def tiny_model(image_size=16):
    torch.manual_seed(0)
    return crate_nn.create_model("crate_tiny", image_size=image_size, patch_size=4, dim=16, depth=2, heads=2,
                                 num_classes=3).eval()


def test_maskcut_predictions_end_to_end(tmp_path):
    pytest.importorskip("pycocotools")
    path = write_coco(tmp_path, [boxes(20, 28, (2, 10, 3, 12)), boxes(24, 24, (4, 20, 4, 20))])
    images = read_coco_images(path, tmp_path / "val")
    transform = DeviceTransform(16, (0.5,) * 3, (0.5,) * 3, train=False)
    predictions = maskcut_predictions(tiny_model(), images, transform, image_size=16, num_objects=2, progress=False)
    assert predictions and all(p["mask"].shape == (im["height"], im["width"]) for p in predictions
                               for im in images if im["id"] == p["image_id"])
    metrics = coco_ap(path, predictions)
    assert set(metrics) == {"det_ap", "det_ap50", "det_ap75", "seg_ap", "seg_ap50", "seg_ap75"}
    assert all(0 <= v <= 100 for v in metrics.values())


# --------------------------------------------------------------------------------------------- VOC
def write_voc(root, labels):
    base = root / "VOCdevkit" / "VOC2012"
    for folder in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        (base / folder).mkdir(parents=True)
    names = []
    for i, label in enumerate(labels):
        name = f"2007_{i:06d}"
        Image.fromarray(np.random.default_rng(i).integers(0, 256, (*label.shape, 3), dtype=np.uint8)).save(
            base / "JPEGImages" / f"{name}.jpg")
        png = Image.fromarray(label.astype(np.uint8), mode="P")
        png.putpalette([v for c in range(256) for v in (c, 255 - c, (7 * c) % 256)])
        png.save(base / "SegmentationClass" / f"{name}.png")
        names.append(name)
    (base / "ImageSets" / "Segmentation" / "val.txt").write_text("\n".join(names) + "\n")
    return root


def voc_labels():
    a = np.zeros((20, 24), dtype=np.int64)
    a[4:12, 5:15] = 15  # a person
    a[3, 4:16] = 255  # boundary
    b = np.zeros((16, 16), dtype=np.int64)
    b[2:9, 2:9], b[10:14, 10:14] = 7, 3  # a car and a smaller boat
    return [a, b]


def test_voc_known_scores_and_reader(tmp_path):
    labels = [torch.from_numpy(x) for x in voc_labels()]
    root = write_voc(tmp_path, voc_labels())
    pairs = read_voc(root, "val")
    assert len(pairs) == 2 and all(torch.equal(read_label_png(p[1]), x) for p, x in zip(pairs, labels))
    perfect = [(x > 0) & (x != 255) for x in labels[:1]]
    assert voc_scores(perfect, labels[:1]) == {"miou": 100.0, "jaccard": 100.0, "images": 1}
    empty = voc_scores([torch.zeros_like(x, dtype=torch.bool) for x in labels], labels)
    assert empty["jaccard"] == 0
    # only background predicted: background IoU = background pixels / all valid pixels, every object class 0
    valid = sum(int((x != 255).sum()) for x in labels)
    background = sum(int((x == 0).sum()) for x in labels)
    assert empty["miou"] == pytest.approx(100 * background / valid / 4)  # classes 0, 3, 7, 15 occur
    # the oracle class is the image's most frequent object class: image b's foreground becomes "car" (7)
    assert set(oracle_labels(torch.ones(16, 16, dtype=torch.bool), labels[1]).unique().tolist()) == {7}
    with pytest.raises(ValueError, match="split list"):
        read_voc(root, "train")


def test_an_empty_voc_split_is_refused(tmp_path):
    """An empty split list used to score mIoU NaN and exit 0."""
    root = write_voc(tmp_path, voc_labels())
    (root / "VOCdevkit" / "VOC2012" / "ImageSets" / "Segmentation" / "val.txt").write_text("\n")
    with pytest.raises(ValueError, match="data_dir: the val split list .*val.txt' names no images"):
        read_voc(root, "val")


def test_voc_coarse_segmentation_end_to_end(tmp_path):
    pairs = read_voc(write_voc(tmp_path, voc_labels()), "val")
    transform = DeviceTransform(16, (0.5,) * 3, (0.5,) * 3, train=False)
    scores = voc_coarse_segmentation(tiny_model(), pairs, transform, image_size=16, progress=False)
    assert scores["images"] == 2 and 0 <= scores["miou"] <= 100 and 0 <= scores["jaccard"] <= 100


# --------------------------------------------------------------------------------------------- objects
def test_evaluate_objects_scores_every_layer():
    rng = np.random.default_rng(0)
    masks = torch.zeros(6, 16, 16, dtype=torch.bool)
    for m in masks:
        y, x = rng.integers(0, 9, 2)
        m[y:y + 6, x:x + 7] = True
    images = torch.from_numpy(rng.integers(0, 256, (6, 3, 16, 16), dtype=np.uint8))
    data = ObjectImages(images, torch.zeros(6, dtype=torch.long), masks, ["a"])
    transform = DeviceTransform(16, (0.5,) * 3, (0.5,) * 3, train=False)
    scores = evaluate_objects(tiny_model(), data, transform, batch_size=4)
    assert [s.layer for s in scores] == [0, 1]
    for s in scores:
        for method in (s.attention, s.maskcut):
            assert set(method) == {"miou", "jaccard", "corloc"} and all(0 <= v <= 1 for v in method.values())
    assert [s.layer for s in evaluate_objects(tiny_model(), data, transform, layers=-1)] == [1]


def test_load_image_reads_16_bit_gray_scaled_and_refuses_float_images_naming_the_file(tmp_path):
    """crate-segment's reader: a 16-bit gray PNG is scaled by 255/65535, not clipped to white as Pillow's own
    conversion does; a floating-point TIFF (range unknown) is refused in one line naming the file."""
    from PIL import Image

    from crate_nn.evaluation.segmentation import load_image

    path = tmp_path / "sixteen.png"
    Image.fromarray(np.array([[0, 32768], [65535, 257]], np.uint16)).save(path)
    image, original = load_image(path, 2)
    # resized 2 → 2 (the identity); 8-bit rounding of v·255/65535 over 255: within 1/255 + float32 round-off
    assert original == (2, 2)
    np.testing.assert_allclose(image[0].numpy(), [[0, 0.5], [1, 1 / 255]], atol=1 / 255 + 1e-6)
    floats = tmp_path / "float.tiff"
    Image.fromarray(np.zeros((2, 2), np.float32)).save(floats)
    with pytest.raises(ValueError, match=r"^image: .*float\.tiff: a floating-point image"):
        load_image(floats, 2)
