"""Moved to `crate_nn.weights.keys`; its names are kept here for one release."""
from ..weights.build import check_matches
from ..weights.keys import (
    PREFIXES,
    KeyMap,
    layer_count,
    state_dict_of,
)

__all__ = ["KeyMap", "PREFIXES", "check_matches", "layer_count", "state_dict_of"]
