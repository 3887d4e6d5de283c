"""Evaluation of trained models: classification metrics (top-1/top-5, ImageNet-ReaL), frozen features and the
linear probe (App. C.2), segmentation scores (Sec. 4.3: mIoU, CorLoc, COCO AP, VOC)."""
from .classification import evaluate, real_index
from .features import extract_features, pooled_features
from .linear_probe import PROBE_CS, ProbeResult, linear_probe
from .segmentation import coco_ap, corloc, evaluate_objects, jaccard, mean_iou, voc_coarse_segmentation

__all__ = ["PROBE_CS", "ProbeResult", "coco_ap", "corloc", "evaluate", "evaluate_objects", "extract_features",
           "jaccard", "linear_probe", "mean_iou", "pooled_features", "real_index", "voc_coarse_segmentation"]
