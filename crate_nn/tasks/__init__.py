"""One task per system, each with its config and presets; importing this package registers them all.

    classification   supervised image classification (CRATE and the ViT-family baselines; Table 17's objects_* presets)
    causal_lm        causal language modelling (CRATE-GPT and the GPT-2 baseline)
    masked_lm        masked language modelling (CRATE-BERT and the BERT baseline)
    sequence_classification   GLUE fine-tuning of a CRATE-BERT encoder
    language         what the three language tasks share (corpus, evaluation section, start from a checkpoint)
    dino             self-distillation with CRATE-DINO (student, EMA teacher, multi-crop, k-NN)
    mae              masked autoencoding with CRATE-MAE (pre-training, reconstructions, linear probe)
"""
from ..engine.task import PRESETS, get_preset, list_presets
from . import (
           causal_lm,  # noqa: F401 - registers the causal LM task and presets
           classification,
           mae,  # noqa: F401 - registers the MAE task and presets
           masked_lm,  # noqa: F401 - registers the masked LM task and presets
           sequence_classification,  # noqa: F401 - registers the fine-tuning task and presets
)
from .classification import ClassificationConfig, ClassificationTask
from .dino import DINOTask, DINOTrainConfig

__all__ = ["PRESETS", "ClassificationConfig", "ClassificationTask", "DINOTask", "DINOTrainConfig", "classification",
           "get_preset", "list_presets"]
