"""One task per system, each with its config and presets; importing this package registers them all.

    classification   supervised image classification (CRATE and the ViT-family baselines)
"""
from ..engine.task import PRESETS, get_preset, list_presets
from . import classification
from .classification import ClassificationConfig, ClassificationTask
from .dino import DINOTask, DINOTrainConfig

__all__ = ["PRESETS", "ClassificationConfig", "ClassificationTask", "classification", "get_preset", "list_presets"]
