"""Moved to `crate_nn.weights.adapters.gpt`; its names are kept here for one release."""
from ..loading import load_causal_lm
from ..weights.adapters.gpt import (
    CRATE_LM_KEYS,
    FORMATS,
    NANOGPT_KEYS,
    gpt_config_of,
    load_gpt_checkpoint,
    model_args,
    to_crate_lm,
    to_nanogpt,
)

__all__ = ["CRATE_LM_KEYS", "FORMATS", "NANOGPT_KEYS", "gpt_config_of", "load_causal_lm", "load_gpt_checkpoint", "model_args", "to_crate_lm", "to_nanogpt"]
