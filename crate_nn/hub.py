"""``hf-hub:`` names — moved to `crate_nn.weights.hub`; this module keeps its names for one release."""
from .weights.hub import PREFIX, cache_dir, is_hub, parse, repo_folder, resolve, snapshot, weights_file

__all__ = ["PREFIX", "cache_dir", "is_hub", "parse", "repo_folder", "resolve", "snapshot", "weights_file"]
