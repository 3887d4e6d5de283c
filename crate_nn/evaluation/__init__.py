"""Evaluation of trained models, every one over data split among processes through one sharded map (`map_reduce`):
classification metrics (top-1/top-5, ImageNet-ReaL), frozen features (sharded
under DDP), the frozen-feature evaluator (k-NN and probe of a model or of the raw pixels), the collapse monitors of a
self-distillation model, the layer-wise measurements saved during training, the linear probes (App.
C.2: scikit-learn's, and a torch one for ImageNet scale), the weighted k-NN (DINO), language models (held-out loss
and perplexity, masked-LM accuracy, accuracy/F1), segmentation scores (Sec. 4.3: mIoU, CorLoc, COCO AP, VOC)."""
from .classification import evaluate, real_index
from .collapse import CollapseMonitors
from .features import extract_features, pooled_features, raw_pixels
from .frozen import FrozenEvaluator, FrozenResult, model_features
from .knn import KNN_KS, KNN_TEMPERATURE, KNNResult, knn_evaluate, knn_scores
from .language import classification_metrics, lm_loss, mlm_metrics
from .layers import LayerMeasurements
from .linear_probe import (
    PROBE_CS,
    PROBE_SOLVERS,
    PROBE_WEIGHT_DECAYS,
    LinearProbe,
    ProbeResult,
    ProbeSolver,
    fit_linear_probe,
    holdout_split,
    linear_probe,
    run_linear_probe,
    torch_linear_probe,
)
from .segmentation import coco_ap, corloc, evaluate_objects, jaccard, mean_iou, voc_coarse_segmentation
from .sharded import Reduced, map_reduce

__all__ = ["CollapseMonitors", "FrozenEvaluator", "FrozenResult", "KNN_KS", "KNN_TEMPERATURE", "KNNResult", "LayerMeasurements", "LinearProbe", "PROBE_CS",
           "PROBE_SOLVERS", "PROBE_WEIGHT_DECAYS", "ProbeResult", "Reduced", "ProbeSolver", "classification_metrics", "coco_ap",
           "corloc", "evaluate", "evaluate_objects", "extract_features", "fit_linear_probe", "holdout_split",
           "jaccard", "knn_evaluate", "knn_scores", "linear_probe", "lm_loss", "map_reduce", "mlm_metrics", "mean_iou",
           "model_features", "pooled_features", "raw_pixels", "real_index", "run_linear_probe", "torch_linear_probe",
           "voc_coarse_segmentation"]
