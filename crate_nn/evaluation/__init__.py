"""Evaluation of trained models: classification metrics (top-1/top-5, ImageNet-ReaL), frozen features and the
linear probe (App. C.2)."""
from .classification import evaluate, real_index
from .features import extract_features, pooled_features
from .knn import KNN_KS, KNN_TEMPERATURE, KNNResult, knn_evaluate, knn_scores
from .linear_probe import PROBE_CS, ProbeResult, linear_probe

__all__ = ["PROBE_CS", "ProbeResult", "evaluate", "extract_features", "linear_probe", "pooled_features",
           "real_index"]
