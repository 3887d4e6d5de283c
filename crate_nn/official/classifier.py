"""Moved to `crate_nn.weights.adapters.classifier`; its names are kept here for one release."""
from ..weights.adapters.classifier import (
    KEYS,
    SOURCE,
    crate_nn_to_official,
    load_official_checkpoint,
    official_to_crate_nn,
)

__all__ = ["KEYS", "SOURCE", "crate_nn_to_official", "load_official_checkpoint", "official_to_crate_nn"]
