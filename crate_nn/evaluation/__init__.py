"""Evaluation of trained models: classification metrics (top-1/top-5, ImageNet-ReaL)."""
from .classification import evaluate, real_index

__all__ = ["evaluate", "real_index"]
