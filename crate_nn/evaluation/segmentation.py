"""Scores of the masks that attention maps and MaskCut give, against ground truth (Sec. 4.3, Tables 7 and 17).

Metrics (NumPy/torch, no extra dependency):

* `jaccard` — per image, |P ∩ G| / |P ∪ G| of a predicted and a true foreground mask (1 when both are empty; the
  Jaccard index DINO reports).
* `confusion` / `mean_iou` — the PASCAL VOC definition: a confusion matrix accumulated over the whole dataset
  (pixels labelled ``ignore`` = 255 skipped), per class IoU = TP / (TP + FP + FN), averaged over the classes that
  occur in the ground truth or the predictions. For binary masks the classes are background and object.
* `box_iou`, `corloc` — CorLoc: the fraction of images whose predicted box overlaps a true box with IoU ≥ 0.5.

Evaluators:

* `score_masks` — all of the above for foreground masks against an `crate_nn.data.objects.ObjectImages` split.
* `evaluate_objects` — per encoder layer, the masks of a model's class-token attention (`attention_masks`,
  mean over heads, 60% of the mass) and of MaskCut on its patch codes (one object per image), scored by
  `score_masks`: the numbers of the controlled experiment (`crate_nn.table17`).
* COCO (``pycocotools``, installed by the ``seg`` extra): `read_coco_images`, `maskcut_predictions` (MaskCut on
  every image: boxes and masks, class-agnostic) and `coco_ap` (COCO detection and segmentation AP, AP50, AP75 in
  percent, every ground-truth category mapped to one "object" class as unsupervised detectors are scored).
* PASCAL VOC 2012 (``VOCdevkit/VOC2012``: ``JPEGImages``, ``SegmentationClass`` palette PNGs,
  ``ImageSets/Segmentation/<split>.txt``): `read_voc`, `voc_coarse_segmentation`. The papers call this "coarse
  segmentation" and do not describe the protocol (Table 17). Here: the class token's
  attention at one layer, averaged over heads and thresholded at 60% of its mass (DINO's threshold) gives a
  foreground mask at patch resolution, upsampled to the image; its pixels receive the image's most frequent
  ground-truth object class (an oracle label: the score measures localisation, not recognition, since the
  classifier's classes are not VOC's), all other pixels background; the 21-class mIoU and the foreground Jaccard
  are reported.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from ..analysis.maskcut import TAU, mask_boxes, maskcut
from ..analysis.segmentation import (
    MASS,
    attention_masks,
    cls_attention,
    layer_indices,
    patch_codes,
    patch_grid,
    upsample,
)
from ..data.images import to_rgb
from ..extras import install_hint
from ..files import read_json, read_text

VOC_CLASSES = 21  # background + 20 object classes
IGNORE = 255


# --------------------------------------------------------------------------------------------- metrics
def _check_masks(pred: torch.Tensor, gt: torch.Tensor) -> None:
    for name, m in (("pred", pred), ("gt", gt)):
        if not isinstance(m, torch.Tensor) or m.dtype != torch.bool or m.ndim < 2:
            raise TypeError(f"{name}: expected a bool tensor (..., H, W), got {type(m).__name__} "
                            f"{getattr(m, 'dtype', '')}")
    if pred.shape != gt.shape:
        raise ValueError(f"pred, gt: expected masks of one shape, got {tuple(pred.shape)} and {tuple(gt.shape)}")


def jaccard(pred: torch.Tensor, gt: torch.Tensor) -> torch.Tensor:
    """|P ∩ G| / |P ∪ G| per mask of bool masks (..., H, W) → (...) float64 (1 where both masks are empty)."""
    _check_masks(pred, gt)
    inter = (pred & gt).sum(dim=(-2, -1)).double()
    union = (pred | gt).sum(dim=(-2, -1)).double()
    return torch.where(union > 0, inter / union.clamp_min(1), 1.0)


def confusion(pred: torch.Tensor, gt: torch.Tensor, num_classes: int, ignore: int = IGNORE) -> torch.Tensor:
    """Confusion matrix (num_classes, num_classes) int64, rows = ground truth, of integer label maps of one shape;
    ground-truth pixels equal to ``ignore`` are skipped. Labels outside [0, num_classes) raise ValueError."""
    if pred.shape != gt.shape:
        raise ValueError(f"pred, gt: expected label maps of one shape, got {tuple(pred.shape)} and {tuple(gt.shape)}")
    keep = gt != ignore
    p, g = pred[keep].long(), gt[keep].long()
    for name, labels in (("pred", p), ("gt", g)):
        if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
            raise ValueError(f"{name}: labels must lie in [0, {num_classes}) (or be {ignore} in gt), got "
                             f"{labels.min().item()} … {labels.max().item()}")
    return torch.bincount(g * num_classes + p, minlength=num_classes**2).reshape(num_classes, num_classes)


def class_iou(matrix: torch.Tensor) -> torch.Tensor:
    """Per-class IoU TP / (TP + FP + FN) of a confusion matrix, NaN for a class absent from both maps."""
    m = matrix.double()
    tp = m.diagonal()
    union = m.sum(0) + m.sum(1) - tp
    return torch.where(union > 0, tp / union.clamp_min(1), float("nan"))


def mean_iou(matrix: torch.Tensor) -> float:
    """The VOC mIoU of a confusion matrix: per-class IoU averaged over the classes that occur."""
    iou = class_iou(matrix)
    present = ~iou.isnan()
    return float(iou[present].mean()) if present.any() else float("nan")


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of boxes (x0, y0, x1, y1) (..., 4) with exclusive ends, elementwise after broadcasting → (...) float64
    (0 when both are empty)."""
    a, b = a.double(), b.double()
    w = (torch.minimum(a[..., 2], b[..., 2]) - torch.maximum(a[..., 0], b[..., 0])).clamp_min(0)
    h = (torch.minimum(a[..., 3], b[..., 3]) - torch.maximum(a[..., 1], b[..., 1])).clamp_min(0)
    inter = w * h
    area = lambda x: (x[..., 2] - x[..., 0]).clamp_min(0) * (x[..., 3] - x[..., 1]).clamp_min(0)  # noqa: E731
    union = area(a) + area(b) - inter
    return torch.where(union > 0, inter / union.clamp_min(1e-12), 0.0)


def corloc(pred_boxes: torch.Tensor, gt_boxes: torch.Tensor, threshold: float = 0.5) -> float:
    """Fraction of images whose predicted box (B, 4) has IoU ≥ ``threshold`` with its true box (B, 4)."""
    if pred_boxes.shape != gt_boxes.shape or pred_boxes.shape[-1:] != (4,):
        raise ValueError(f"pred_boxes, gt_boxes: expected two (B, 4) tensors, got {tuple(pred_boxes.shape)} and "
                         f"{tuple(gt_boxes.shape)}")
    return float((box_iou(pred_boxes, gt_boxes) >= threshold).double().mean())


def score_masks(pred: torch.Tensor, gt: torch.Tensor) -> dict[str, float]:
    """mIoU (object/background, VOC definition), mean Jaccard of the object and CorLoc of the masks' tight boxes,
    for predicted and true foreground masks (B, H, W) bool."""
    _check_masks(pred, gt)
    return {"miou": mean_iou(confusion(pred.long(), gt.long(), 2)), "jaccard": float(jaccard(pred, gt).mean()),
            "corloc": corloc(mask_boxes(pred), mask_boxes(gt))}


# --------------------------------------------------------------------------------------------- the objects dataset
@dataclass
class LayerScores:
    """The scores (`score_masks`) of attention-derived and MaskCut-derived masks at one encoder layer."""

    layer: int
    attention: dict[str, float]
    maskcut: dict[str, float]


def maskcut_masks(codes: torch.Tensor, grid: tuple[int, int], num_objects: int = 1, tau: float = TAU) -> torch.Tensor:
    """The first MaskCut mask of each image from patch features (B, N, D) → (B, h, w) bool."""
    return torch.stack([torch.from_numpy(maskcut(c, grid, num_objects=num_objects, tau=tau).masks[0]) for c in codes])


@torch.no_grad()
def evaluate_objects(model: nn.Module, dataset, transform: Callable[[torch.Tensor], torch.Tensor], *,
                     layers: int | Sequence[int] | None = None, mass: float = MASS, tau: float = TAU,
                     batch_size: int = 128, progress: bool = False) -> list[LayerScores]:
    """Per encoder layer, the scores of the class-token attention masks and of MaskCut masks of ``model`` on an
    `ObjectImages` split (images ``dataset.images``, true masks ``dataset.masks``); evaluation mode, on the device
    of the model's parameters, ``transform`` maps a uint8 batch to the model's input."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    attention, cut = [], []
    for start in tqdm(range(0, len(dataset), batch_size), disable=not progress, desc="segmentation"):
        images = transform(dataset.images[start:start + batch_size].to(device))
        grid = patch_grid(model, images)
        attention.append(attention_masks(cls_attention(model, images, layers), mass).unflatten(-1, grid).cpu())
        codes = patch_codes(model, images, layers).cpu()
        cut.append(torch.stack([maskcut_masks(c, grid, tau=tau) for c in codes]))
    model.train(was_training)
    size = dataset.masks.shape[-2:]
    attention, cut = upsample(torch.cat(attention, dim=1), size), upsample(torch.cat(cut, dim=1), size)
    return [LayerScores(i, score_masks(a, dataset.masks), score_masks(c, dataset.masks))
            for i, a, c in zip(layer_indices(model, layers), attention, cut)]


# --------------------------------------------------------------------------------------------- image files
def open_image(path: str | Path, what: str):
    """``path`` opened and decoded by Pillow; ValueError "``what``: <path> cannot be decoded (<Pillow's reason>)" for
    a truncated, corrupt or oversized file (more pixels than ``PIL.Image.MAX_IMAGE_PIXELS`` allows)."""
    from PIL import Image

    try:
        image = Image.open(path)
        image.load()
    except Exception as err:  # Pillow raises OSError, SyntaxError, DecompressionBombError... for such files
        raise ValueError(f"{what}: {path} cannot be decoded ({type(err).__name__}: {err})") from err
    return image


def load_image(path: str | Path, size: int) -> tuple[torch.Tensor, tuple[int, int]]:
    """An image file as a float tensor (3, size, size) in [0, 1] (resized, aspect not kept, as MaskCut does) and
    its original (height, width); any mode as `crate_nn.data.images.to_rgb` reads it (16-bit gray scaled, not
    clipped to white); `open_image`'s ValueError for a file Pillow cannot decode, a ValueError naming the file for a
    mode `to_rgb` refuses."""
    from PIL import Image

    with open_image(path, "image") as im:
        try:
            im = to_rgb(im)
        except ValueError as err:
            raise ValueError(f"image: {path}: {err}") from None
        original = (im.height, im.width)
        array = np.asarray(im.resize((size, size), Image.BICUBIC), dtype=np.float32) / 255.0
    return torch.from_numpy(array.copy()).permute(2, 0, 1), original


# --------------------------------------------------------------------------------------------- COCO
def _coco():
    try:
        from pycocotools import mask as coco_mask
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval
    except ImportError as err:
        raise ImportError(f"COCO evaluation needs pycocotools: {install_hint('pycocotools')}") from err
    return COCO, COCOeval, coco_mask


COCO_IMAGE_FIELDS = ("id", "file_name", "height", "width")
COCO_ANNOTATION_FIELDS = ("id", "image_id", "bbox", "segmentation", "area", "iscrowd")  # what COCOeval reads


def read_coco(annotation_file: str | Path) -> dict:
    """A COCO instances file, checked: every image has `COCO_IMAGE_FIELDS`, every annotation
    `COCO_ANNOTATION_FIELDS` (a box of four numbers) and the id of a listed image; ValueError naming the file and
    the first record that does not."""
    path = Path(annotation_file)
    if not path.is_file():
        raise ValueError(f"annotations: {str(path)!r} does not exist")
    data = read_json(path, "annotations")
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("images", "annotations")):
        raise ValueError(f"annotations: {str(path)!r} is not a COCO instances file (no images/annotations lists)")
    for kind, fields in (("images", COCO_IMAGE_FIELDS), ("annotations", COCO_ANNOTATION_FIELDS)):
        for k, record in enumerate(data[kind]):
            missing = [f for f in fields if f not in record] if isinstance(record, dict) else list(fields)
            if missing:
                raise ValueError(f"annotations: {kind}[{k}] of {path} has no {', '.join(missing)}")
    known = {im["id"] for im in data["images"]}
    for k, a in enumerate(data["annotations"]):
        box = a["bbox"]
        if not (isinstance(box, list) and len(box) == 4 and all(isinstance(v, (int, float)) for v in box)):
            raise ValueError(f"annotations: annotations[{k}] of {path} has bbox {box!r}, not [x, y, width, height]")
        if a["image_id"] not in known:
            raise ValueError(f"annotations: annotations[{k}] of {path} refers to image_id {a['image_id']!r}, which "
                             "is not among its images")
    return data


def read_coco_images(annotation_file: str | Path, image_dir: str | Path) -> list[dict]:
    """The images of a COCO annotation file (`read_coco`): ``id``, ``file`` path, ``height``, ``width``, sorted by
    id. A missing file, or one whose size (read from its header) is not the annotated size — the masks and boxes
    are in the annotated pixels, so a resized copy of the images would score wrong numbers — raises ValueError
    naming it."""
    from PIL import Image

    data, image_dir = read_coco(annotation_file), Path(image_dir)
    images = [{"id": int(im["id"]), "file": str(image_dir / im["file_name"]), "height": int(im["height"]),
               "width": int(im["width"])} for im in sorted(data["images"], key=lambda im: im["id"])]
    missing = [im["file"] for im in images if not Path(im["file"]).is_file()]
    if missing:
        raise ValueError(f"image_dir: {len(missing)} image(s) of the annotations are missing, e.g. {missing[0]!r}")
    for im in images:
        with Image.open(im["file"]) as file:  # reads the header only
            width, height = file.size
        if (width, height) != (im["width"], im["height"]):
            raise ValueError(f"image_dir: {im['file']} is {width}×{height} pixels, {annotation_file} annotates it "
                             f"as {im['width']}×{im['height']} (a resized copy? the masks are in the annotated size)")
    return images


@torch.no_grad()
def maskcut_predictions(model: nn.Module, images: Sequence[dict], transform: Callable[[torch.Tensor], torch.Tensor],
                        *, image_size: int, layer: int = -1, num_objects: int = 3, tau: float = TAU,
                        progress: bool = True) -> list[dict]:
    """MaskCut on each image (``read_coco_images`` records): every non-empty mask, upsampled to the original image
    size, as a prediction ``{"image_id", "mask" (H, W) bool, "score"}``. MaskCut has no confidence: the score is
    1 − 0.1·(its rank in the image), so an image's earlier cuts rank first."""
    model.eval()
    device = next(model.parameters()).device
    predictions = []
    for record in tqdm(images, disable=not progress, desc="MaskCut"):
        image, (h, w) = load_image(record["file"], image_size)
        batch = transform(image[None].to(device))
        grid = patch_grid(model, batch)
        codes = patch_codes(model, batch, layer)[0, 0]
        result = maskcut(codes, grid, num_objects=num_objects, tau=tau)
        for rank, mask in enumerate(result.masks):
            if mask.any():
                full = upsample(torch.from_numpy(mask), (h, w)).numpy()
                predictions.append({"image_id": record["id"], "mask": full, "score": 1.0 - 0.1 * rank})
    return predictions


def coco_ap(annotation_file: str | Path, predictions: Sequence[dict], image_ids: Sequence[int] | None = None
            ) -> dict[str, float]:
    """Class-agnostic COCO AP, AP50, AP75 (percent) of predicted masks and their tight boxes: ``det_*`` for boxes,
    ``seg_*`` for masks (Table 7), over ``image_ids`` (default: every image of the file). ``predictions`` as from
    `maskcut_predictions`; no predictions scores 0."""
    COCO, COCOeval, coco_mask = _coco()
    data = read_coco(annotation_file)
    data = {**data, "categories": [{"id": 1, "name": "object", "supercategory": "object"}],
            "annotations": [{**a, "category_id": 1} for a in data["annotations"]]}
    gt = COCO()
    gt.dataset = data
    gt.createIndex()
    known = {im["id"] for im in data["images"]}
    scored = sorted(known if image_ids is None else set(image_ids))
    if not set(scored) <= known:
        raise ValueError(f"image_ids: {sorted(set(scored) - known)[:5]} are not in {annotation_file}")
    metrics = {f"{kind}_{name}": 0.0 for kind in ("det", "seg") for name in ("ap", "ap50", "ap75")}
    if not predictions:
        return metrics
    results = []
    for p in predictions:
        if p["image_id"] not in known:
            raise ValueError(f"predictions: image_id {p['image_id']} is not in {annotation_file}")
        rle = coco_mask.encode(np.asfortranarray(np.asarray(p["mask"], dtype=np.uint8)))
        rle["counts"] = rle["counts"].decode("ascii")
        results.append({"image_id": p["image_id"], "category_id": 1, "segmentation": rle,
                        "bbox": coco_mask.toBbox(rle).tolist(), "score": float(p["score"])})
    for kind, iou_type in (("det", "bbox"), ("seg", "segm")):
        detections = gt.loadRes([{k: v for k, v in r.items() if k != ("segmentation" if kind == "det" else "bbox")}
                                 for r in results])
        evaluation = COCOeval(gt, detections, iou_type)
        evaluation.params.imgIds = scored
        evaluation.evaluate()
        evaluation.accumulate()
        evaluation.summarize()
        stats = [max(float(s), 0.0) * 100 for s in evaluation.stats[:3]]  # −1 (no ground truth) reads as 0
        metrics.update({f"{kind}_ap": stats[0], f"{kind}_ap50": stats[1], f"{kind}_ap75": stats[2]})
    return metrics


# --------------------------------------------------------------------------------------------- PASCAL VOC
def read_voc(root: str | Path, split: str = "val") -> list[tuple[str, str]]:
    """(image file, label PNG) pairs of a VOC2012 segmentation split; ``root`` is ``VOCdevkit/VOC2012`` or a folder
    containing it."""
    root = Path(root)
    if (root / "VOCdevkit" / "VOC2012").is_dir():
        root = root / "VOCdevkit" / "VOC2012"
    listing = root / "ImageSets" / "Segmentation" / f"{split}.txt"
    if not listing.is_file():
        raise ValueError(f"data_dir: expected the VOC2012 split list {str(listing)!r}, it does not exist")
    names = [line.strip() for line in read_text(listing, "data_dir").splitlines() if line.strip()]
    if not names:
        raise ValueError(f"data_dir: the {split} split list {str(listing)!r} names no images")
    pairs = [(str(root / "JPEGImages" / f"{n}.jpg"), str(root / "SegmentationClass" / f"{n}.png")) for n in names]
    missing = [p for pair in pairs for p in pair if not Path(p).is_file()]
    if missing:
        raise ValueError(f"data_dir: {len(missing)} file(s) of the {split} split are missing, e.g. {missing[0]!r}")
    return pairs


def read_label_png(path: str | Path) -> torch.Tensor:
    """A VOC label image (palette PNG: class indices, 255 = boundary/ignore) → (H, W) int64."""
    with open_image(path, "labels") as im:
        if im.mode not in ("P", "L"):
            raise ValueError(f"labels: {str(path)!r} is a {im.mode} image; VOC labels are palette (P) PNGs of indices")
        return torch.from_numpy(np.asarray(im, dtype=np.int64).copy())


def oracle_labels(foreground: torch.Tensor, labels: torch.Tensor, ignore: int = IGNORE) -> torch.Tensor:
    """A label map from a foreground mask (H, W): foreground pixels get the most frequent object class (1 … 20) of
    the true labels (H, W), everything else background 0 (all background when the image has no object)."""
    objects = labels[(labels != ignore) & (labels > 0)]
    cls = int(torch.bincount(objects).argmax()) if objects.numel() else 0
    return torch.where(foreground, cls, 0)


def voc_scores(foregrounds: Sequence[torch.Tensor], labels: Sequence[torch.Tensor]) -> dict[str, float]:
    """Coarse-segmentation scores (percent) of foreground masks (H, W) bool against VOC label maps (H, W): the
    21-class ``miou`` of `oracle_labels`, and the mean foreground ``jaccard`` (boundary pixels ignored)."""
    matrix = torch.zeros(VOC_CLASSES, VOC_CLASSES, dtype=torch.int64)
    scores = []
    for foreground, truth in zip(foregrounds, labels, strict=True):
        if foreground.shape != truth.shape:
            raise ValueError(f"foregrounds, labels: shapes {tuple(foreground.shape)} and {tuple(truth.shape)} differ")
        matrix += confusion(oracle_labels(foreground, truth), truth, VOC_CLASSES)
        valid = truth != IGNORE
        scores.append(float(jaccard(foreground & valid, (truth > 0) & valid)))
    return {"miou": mean_iou(matrix) * 100, "jaccard": float(np.mean(scores)) * 100 if scores else float("nan"),
            "images": len(scores)}


@torch.no_grad()
def voc_coarse_segmentation(model: nn.Module, pairs: Sequence[tuple[str, str]],
                            transform: Callable[[torch.Tensor], torch.Tensor], *, image_size: int, layer: int = -1,
                            mass: float = MASS, progress: bool = True) -> dict[str, float]:
    """Coarse segmentation of VOC images (module docstring) scored by `voc_scores`."""
    model.eval()
    device = next(model.parameters()).device
    foregrounds, labels = [], []
    for image_file, label_file in tqdm(pairs, disable=not progress, desc="VOC"):
        image, (h, w) = load_image(image_file, image_size)
        truth = read_label_png(label_file)
        if truth.shape != (h, w):
            raise ValueError(f"labels: {label_file!r} is {tuple(truth.shape)}, its image {(h, w)}")
        batch = transform(image[None].to(device))
        grid = patch_grid(model, batch)
        mask = attention_masks(cls_attention(model, batch, layer)[0, 0], mass).unflatten(-1, grid).cpu()
        foregrounds.append(upsample(mask, (h, w)))
        labels.append(truth)
    return voc_scores(foregrounds, labels)
