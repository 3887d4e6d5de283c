"""Moved to `crate_nn.weights.adapters.mae`; its names are kept here for one release."""
from ..weights.adapters.mae import (
    KEYS,
    SOURCE,
    UNUSED,
    crate_nn_to_official_mae,
    load_official_mae,
    official_mae_to_crate_nn,
    read_official_mae,
)

__all__ = ["KEYS", "SOURCE", "UNUSED", "crate_nn_to_official_mae", "load_official_mae", "official_mae_to_crate_nn", "read_official_mae"]
