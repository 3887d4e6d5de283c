"""Other codebases' checkpoints — moved to `crate_nn.weights.adapters` (one adapter per format); this package keeps
its names for one release."""
from ..weights.adapters.alpha import crate_alpha_to_crate_nn, crate_nn_to_crate_alpha, load_crate_alpha
from ..weights.adapters.classifier import crate_nn_to_official, load_official_checkpoint, official_to_crate_nn
from ..weights.adapters.gpt import load_gpt_checkpoint, to_crate_lm, to_nanogpt
from ..weights.adapters.mae import crate_nn_to_official_mae, load_official_mae, official_mae_to_crate_nn

__all__ = ["crate_alpha_to_crate_nn", "crate_nn_to_crate_alpha", "crate_nn_to_official", "crate_nn_to_official_mae",
           "load_crate_alpha", "load_gpt_checkpoint", "load_official_checkpoint", "load_official_mae",
           "official_mae_to_crate_nn", "official_to_crate_nn", "to_crate_lm", "to_nanogpt"]
