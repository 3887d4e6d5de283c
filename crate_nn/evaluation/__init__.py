"""Evaluation of trained models: classification metrics (top-1/top-5, ImageNet-ReaL), frozen features and the
linear probe (App. C.2), the weighted k-NN (DINO), language models (held-out loss and perplexity, masked-LM
accuracy, accuracy/F1), segmentation scores (Sec. 4.3: mIoU, CorLoc, COCO AP, VOC)."""
from .classification import evaluate, real_index
from .features import extract_features, pooled_features
from .knn import KNN_KS, KNN_TEMPERATURE, KNNResult, knn_evaluate, knn_scores
from .language import classification_metrics, lm_loss, mlm_metrics
from .linear_probe import PROBE_CS, ProbeResult, linear_probe
from .segmentation import coco_ap, corloc, evaluate_objects, jaccard, mean_iou, voc_coarse_segmentation

__all__ = ["KNN_KS", "KNN_TEMPERATURE", "KNNResult", "PROBE_CS", "ProbeResult", "classification_metrics", "coco_ap",
           "corloc", "evaluate", "evaluate_objects", "extract_features", "jaccard", "knn_evaluate", "knn_scores",
           "linear_probe", "lm_loss", "mlm_metrics", "mean_iou", "pooled_features", "real_index",
           "voc_coarse_segmentation"]
