"""One task per system, each with its config and presets; importing this package registers them all.

    classification   supervised image classification (CRATE and the ViT-family baselines)
    segmentation     presets and runner of the emergent-segmentation experiment (laptop-scale Table 17)
"""
from ..engine.task import PRESETS, get_preset, list_presets
from . import classification
from . import segmentation
from .classification import ClassificationConfig, ClassificationTask

__all__ = ["PRESETS", "ClassificationConfig", "ClassificationTask", "classification", "get_preset", "list_presets"]
