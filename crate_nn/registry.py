"""Model registry: the four CRATE classifier sizes of Table 8, built by name with keyword overrides.

    model = crate_nn.create_model("crate_base", num_classes=10, image_size=32, patch_size=4)

Every size uses 224² images, 16² patches, 1000 classes and p = d/K; parameter counts (authors' module structure):
tiny 6,090,856 · small 13,116,328 · base 22,796,008 · large 77,641,192.
"""
from __future__ import annotations

from .classifier import CRATEClassifier
from .config import CRATEConfig

_SIZES: dict[str, dict] = {
    "crate_tiny": dict(dim=384, depth=12, heads=6),
    "crate_small": dict(dim=576, depth=12, heads=12),
    "crate_base": dict(dim=768, depth=12, heads=12),
    "crate_large": dict(dim=1024, depth=24, heads=16),
}


def list_models() -> list[str]:
    """Names accepted by `create_model`, smallest first."""
    return list(_SIZES)


def model_config(name: str, **overrides) -> CRATEConfig:
    """The `CRATEConfig` of a registered size with ``overrides`` applied (unknown option names raise TypeError)."""
    if name not in _SIZES:
        raise ValueError(f"unknown model name {name!r}; registered: {list_models()}")
    return CRATEConfig().replace(**{**_SIZES[name], **overrides})


def create_model(name: str, **overrides) -> CRATEClassifier:
    """Build the registered classifier ``name`` (e.g. ``"crate_tiny"``) with keyword overrides of `CRATEConfig`."""
    return CRATEClassifier(model_config(name, **overrides))
