"""Moved to `crate_nn.weights.adapters.alpha`; its names are kept here for one release."""
from ..weights.adapters.alpha import (
    KEYS,
    SOURCE,
    crate_alpha_to_crate_nn,
    crate_nn_to_crate_alpha,
    load_crate_alpha,
)

__all__ = ["KEYS", "SOURCE", "crate_alpha_to_crate_nn", "crate_nn_to_crate_alpha", "load_crate_alpha"]
