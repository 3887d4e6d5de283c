"""One task per system, each with its config and presets; importing this package registers them all.

    classification   supervised image classification (CRATE and the ViT-family baselines)
    mae              masked autoencoding with CRATE-MAE (pre-training, reconstructions, linear probe)
"""
from ..engine.task import PRESETS, get_preset, list_presets
from . import classification
from .classification import ClassificationConfig, ClassificationTask
from . import mae

__all__ = ["PRESETS", "ClassificationConfig", "ClassificationTask", "classification", "get_preset", "list_presets"]
