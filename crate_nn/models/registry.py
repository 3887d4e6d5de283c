"""The model registry: model families register themselves once, named sizes are built by name.

    model = create_model("crate_base", num_classes=10, image_size=32, patch_size=4)

A *family* is a model class with its configuration dataclass (``@register_family("classifier", CRATEConfig)``);
its instances carry ``preprocessing`` (`crate_nn.preprocessing`; None until a training run or a checkpoint sets
it). A *model* is a family plus the keyword values of one size (`register_model`). Checkpoints store the family's
name beside the config, so `crate_nn.load` rebuilds whatever architecture a file names (`build_model`).
`list_models()` lists every registered size; the tests loop over it. The registry reads no files:
``crate_nn.create_model(name, checkpoint=…)`` (`crate_nn.weights.create_model`) builds a size holding a file's
weights.
"""
from __future__ import annotations

import dataclasses
import fnmatch
from dataclasses import dataclass

from torch import nn


@dataclass(frozen=True)
class Family:
    """A model class and the dataclass that configures it."""

    name: str
    model_class: type[nn.Module]
    config_class: type


_FAMILIES: dict[str, Family] = {}
_MODELS: dict[str, tuple[str, dict]] = {}


def register_family(name: str, config_class: type):
    """Class decorator: register ``cls`` as the family ``name`` built from ``config_class`` (``cls(config)``)."""

    def wrap(cls: type[nn.Module]) -> type[nn.Module]:
        if name in _FAMILIES and _FAMILIES[name].model_class is not cls:
            raise ValueError(f"model family {name!r} is already registered by {_FAMILIES[name].model_class}")
        cls.family = name
        cls.preprocessing = None  # the class default; training and crate_nn.load set an instance's
        _FAMILIES[name] = Family(name, cls, config_class)
        return cls

    return wrap


def register_model(name: str, family: str, **values) -> None:
    """Register the size ``name`` of ``family`` with its config ``values`` (validated now, once)."""
    if family not in _FAMILIES:
        raise ValueError(f"unknown model family {family!r}; registered: {sorted(_FAMILIES)}")
    if name in _MODELS:
        raise ValueError(f"model name {name!r} is already registered")
    _FAMILIES[family].config_class(**values)
    _MODELS[name] = (family, values)


def get_family(name: str) -> Family:
    """The registered family ``name`` (ValueError naming the registered ones otherwise)."""
    if name not in _FAMILIES:
        raise ValueError(f"unknown model family {name!r}; registered: {sorted(_FAMILIES)}")
    return _FAMILIES[name]


def families() -> tuple[Family, ...]:
    """Every registered family, in registration order."""
    return tuple(_FAMILIES.values())


def list_models(pattern: str | None = None, family: str | None = None) -> list[str]:
    """Names accepted by `create_model`, in registration order: those matching the shell-style ``pattern`` (e.g.
    ``"crate_*"``, ``"*_s8"``) and of ``family`` (``"classifier"``, ``"mae"``, ``"gpt"``, …), each when given.
    A pattern that matches nothing but names a family is an error (``family=`` was meant), not an empty list."""
    if family is not None and family not in _FAMILIES:
        raise ValueError(f"family: expected one of {sorted(_FAMILIES)}, got {family!r}")
    names = [name for name, (fam, _) in _MODELS.items() if family is None or fam == family]
    if pattern is None:
        return names
    found = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
    if not found and pattern in _FAMILIES:
        raise ValueError(f"pattern: {pattern!r} is a model family, not a name pattern; use "
                         f"list_models(family={pattern!r})")
    return found


def model_config(name: str, **overrides):
    """The config of a registered size with ``overrides`` applied (unknown option names raise TypeError)."""
    if name not in _MODELS:
        raise ValueError(f"unknown model name {name!r}; registered: {list_models()}")
    family, values = _MODELS[name]
    config_class = _FAMILIES[family].config_class
    known = {f.name for f in dataclasses.fields(config_class)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"unknown {config_class.__name__} option(s) {unknown} for {name!r}; known: {sorted(known)}")
    return config_class(**{**values, **overrides})


def family_of(config) -> Family:
    """The family whose config class ``config`` is an instance of (TypeError naming the class otherwise)."""
    for family in _FAMILIES.values():
        if type(config) is family.config_class:
            return family
    raise TypeError(f"no registered model family is configured by {type(config).__name__}")


def build_model(config) -> nn.Module:
    """The model of the family whose config class ``config`` is an instance of."""
    return family_of(config).model_class(config)


def create_model(name: str, **overrides) -> nn.Module:
    """Build the registered model ``name`` (e.g. ``"crate_tiny"``) with keyword overrides of its config (freshly
    initialised; `crate_nn.create_model` also takes ``checkpoint=``)."""
    return build_model(model_config(name, **overrides))


def unwrap_model(model: nn.Module) -> nn.Module:
    """The underlying model of a ``torch.compile``d and/or DistributedDataParallel-wrapped model."""
    while True:
        for attribute in ("_orig_mod", "module"):
            inner = getattr(model, attribute, None)
            if isinstance(inner, nn.Module):
                model = inner
                break
        else:
            return model
