"""crate_nn: the production PyTorch CRATE (row convention, x is (batch, tokens, dim)).

Sub-packages:
    models      the networks: MSSA, ISTA, the baselines' MHSA/MLP, ToST's TSSA, layers, stacks, model families,
                the registry
    data        dataset layouts from local paths, deterministic batch order, on-device augmentation
    engine      the one training loop, its config, optimizers, schedules, EMA, checkpoints of runs
    tasks       one task per system (classification, ...) and their presets
    evaluation  metrics of trained models
    analysis    the white-box measurements: layer-wise R^c, sparsity, coherence, figures
    official    checkpoints in other codebases' formats (the authors')
Modules: `checkpoint` (save, load, read), `preprocessing` (what a model's inputs went through, saved with it), `hub`
(``hf-hub:`` names in the local Hugging Face cache), `train` (``crate-train``), `evaluate` (``crate-eval``), `export`
(``crate-export``).

``import crate_nn`` loads the models, checkpoints and measurements only (no kornia, lion-pytorch or matplotlib).
"""
from . import checkpoint
from .analysis.diagnostics import coherence, measure_layers, thresholded_sparsity, trace
from .checkpoint import load, save
from .models import (
                     ISTA,
                     MHSA,
                     MLP,
                     MSSA,
                     TSSA,
                     BlockConfig,
                     CRATEClassifier,
                     CRATEConfig,
                     CRATEDecoder,
                     CRATEDecoderLayer,
                     CRATEEncoder,
                     CRATELayer,
                     LayerTrace,
                     PatchEmbed,
                     create_model,
                     list_models,
                     model_config,
                     patchify,
                     resample_pos_embed,
)
from .official import load_official_checkpoint

__all__ = [
    "BlockConfig",
    "CRATEClassifier",
    "CRATEConfig",
    "CRATEDecoder",
    "CRATEDecoderLayer",
    "CRATEEncoder",
    "CRATELayer",
    "ISTA",
    "LayerTrace",
    "MHSA",
    "MLP",
    "MSSA",
    "PatchEmbed",
    "TSSA",
    "checkpoint",
    "coherence",
    "create_model",
    "list_models",
    "load",
    "load_official_checkpoint",
    "measure_layers",
    "model_config",
    "patchify",
    "resample_pos_embed",
    "save",
    "thresholded_sparsity",
    "trace",
]
