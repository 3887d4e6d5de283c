"""crate_nn: the production PyTorch CRATE (row convention, x is (batch, tokens, dim)).

Sub-packages:
    models      the networks: MSSA, ISTA, the baselines' MHSA/MLP, ToST's TSSA, layers, stacks, model families,
                the registry
    data        dataset layouts from local paths, deterministic batch order, on-device augmentation
    engine      the one training loop, its config, optimizers, schedules, EMA, checkpoints of runs
    tasks       one task per system (classification, ...) and their presets
    evaluation  metrics of trained models
    analysis    the white-box measurements: layer-wise R^c, sparsity, coherence, figures
    weights     every weights file: ours and other codebases' (one adapter each), read_state (which a file is),
                load/save, init_from (fine-tuning), hf-hub: names in the local Hugging Face cache
Modules: `preprocessing` (what a model's inputs went through, saved with it), `train` (``crate-train``), `evaluate`
(``crate-eval``), `export` (``crate-export``); `checkpoint`, `official` and `hub` keep the names they had before
`weights` held them, for one release.

``import crate_nn`` loads the models, checkpoints and measurements only (no kornia, lion-pytorch or matplotlib).
"""
from . import checkpoint, official, weights
from .analysis.diagnostics import coherence, measure_layers, thresholded_sparsity, trace
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
                     list_models,
                     model_config,
                     patchify,
                     resample_pos_embed,
)
from .weights import create_model, load, save
from .weights.adapters.classifier import load_official_checkpoint

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
    "official",
    "patchify",
    "resample_pos_embed",
    "save",
    "thresholded_sparsity",
    "trace",
    "weights",
]
