"""The networks: blocks (MSSA, ISTA, the baselines' MHSA and MLP, ToST's TSSA), layer stacks, model families and their
registry.

Importing this package registers every family and named size (`create_model`, `list_models`).
"""
from .backbone import CRATEDecoder, CRATEEncoder, LayerStack
from .baselines import MHSA, MLP
from .blocks import CRATEDecoderLayer, CRATELayer, LayerTrace
from .classifier import CRATEClassifier, CRATEConfig
from .config import BlockConfig
from .dino_head import DINO, DINOConfig
from .embedding import PatchEmbed, patchify, resample_pos_embed
from .ista import ISTA
from .language import CRATEBERT, CRATEGPT, BERTClassifierConfig, BERTConfig, CRATEBERTClassifier, GPTConfig
from .mae import CRATEMAE, CRATEMAEConfig
from .mssa import MSSA
from .registry import (
    build_model,
    create_model,
    get_family,
    list_models,
    model_config,
    register_family,
    register_model,
    unwrap_model,
)
from .tssa import TSSA

__all__ = [
    "BERTClassifierConfig", "BERTConfig", "BlockConfig", "CRATEBERT", "CRATEBERTClassifier", "CRATEGPT", "GPTConfig",
    "CRATEClassifier", "CRATEConfig", "CRATEDecoder", "DINO", "DINOConfig", "CRATEDecoderLayer", "CRATEEncoder", "CRATEMAE", "CRATEMAEConfig",
    "CRATELayer", "ISTA", "LayerStack", "LayerTrace", "MHSA", "MLP", "MSSA", "PatchEmbed", "TSSA", "build_model",
    "create_model", "get_family", "list_models", "model_config", "patchify", "register_family", "register_model",
    "resample_pos_embed", "unwrap_model",
]
