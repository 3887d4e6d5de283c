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

``import crate_nn`` imports nothing but this file: each name below (and each sub-package, ``crate_nn.weights`` …) is
imported when it is first used (PEP 562), so that a command line parses its arguments, and says what is wrong with
them, before torch is loaded. The names load the models, checkpoints and measurements only (no kornia, lion-pytorch
or matplotlib).
"""
from __future__ import annotations

import importlib

_NAMES = {
    **{name: "crate_nn.models" for name in (
        "BlockConfig", "CRATEClassifier", "CRATEConfig", "CRATEDecoder", "CRATEDecoderLayer", "CRATEEncoder",
        "CRATELayer", "ISTA", "LayerTrace", "MHSA", "MLP", "MSSA", "PatchEmbed", "TSSA", "list_models",
        "model_config", "patchify", "resample_pos_embed")},
    **{name: "crate_nn.analysis.diagnostics" for name in ("coherence", "measure_layers", "thresholded_sparsity",
                                                          "trace")},
    **{name: "crate_nn.weights" for name in ("create_model", "load", "save")},
    "load_official_checkpoint": "crate_nn.weights.adapters.classifier",
}
"""The public names: name → the module that defines it."""

__all__ = sorted([*_NAMES, "checkpoint", "official", "weights"])


def __getattr__(name: str):
    """A public name (`_NAMES`), imported from its module, or a sub-module of crate_nn (``crate_nn.engine``),
    imported; AttributeError for anything else."""
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    else:
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise  # the sub-module exists but needs a package that is missing
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
