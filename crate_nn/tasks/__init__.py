"""One task per system, each with its config and presets; importing this package registers them all.

    classification   supervised image classification (CRATE and the ViT-family baselines)
    language         causal and masked language modelling (CRATE-GPT, CRATE-BERT), GLUE fine-tuning
    dino             self-distillation with CRATE-DINO (student, EMA teacher, multi-crop, k-NN)
    mae              masked autoencoding with CRATE-MAE (pre-training, reconstructions, linear probe)
    segmentation     presets and runner of the emergent-segmentation experiment (laptop-scale Table 17)
"""
from ..engine.task import PRESETS, get_preset, list_presets
from . import (
           classification,
           language,  # noqa: F401 - registers the language tasks and presets
           mae,  # noqa: F401 - registers the MAE task and presets
           segmentation,  # noqa: F401 - registers the objects_* presets
)
from .classification import ClassificationConfig, ClassificationTask
from .dino import DINOTask, DINOTrainConfig

__all__ = ["PRESETS", "ClassificationConfig", "ClassificationTask", "DINOTask", "DINOTrainConfig", "classification",
           "get_preset", "list_presets"]
