"""crate_nn: the production PyTorch CRATE (row convention, x is (batch, tokens, dim)).

Modules: `config` (CRATEConfig), `mssa` (MSSA, eqs. 35–37), `ista` (ISTA, eq. 44 and variants), `layers`
(CRATELayer, CRATEEncoder, CRATEDecoder), `classifier` (CRATEClassifier), `registry` (create_model),
`checkpoint` (save, load, read, load_official_checkpoint), `diagnostics` (trace, measure_layers,
coherence), `plots` (Figs. 14–17 style; import it explicitly, it loads matplotlib).
"""
from . import checkpoint
from .checkpoint import load, load_official_checkpoint, save
from .classifier import CRATEClassifier, PatchEmbed, patchify, resample_pos_embed
from .config import CRATEConfig
from .diagnostics import coherence, measure_layers, thresholded_sparsity, trace
from .ista import ISTA
from .layers import CRATEDecoder, CRATEDecoderLayer, CRATEEncoder, CRATELayer
from .mssa import MSSA
from .registry import create_model, list_models, model_config

__all__ = [
    "CRATEClassifier",
    "CRATEConfig",
    "CRATEDecoder",
    "CRATEDecoderLayer",
    "CRATEEncoder",
    "CRATELayer",
    "ISTA",
    "MSSA",
    "PatchEmbed",
    "checkpoint",
    "coherence",
    "create_model",
    "load",
    "load_official_checkpoint",
    "measure_layers",
    "save",
    "thresholded_sparsity",
    "trace",
    "list_models",
    "model_config",
    "patchify",
    "resample_pos_embed",
]
