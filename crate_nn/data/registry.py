"""The dataset switch: ``--dataset NAME`` → the function that builds that layout's split.

Each data module registers the layouts it reads (`register_dataset`), and `build_dataset` looks the name up here,
so no data module imports another to reach its datasets. A module's layouts exist once it is imported: the package
(`crate_nn.data`) imports every module that registers one, and `crate_nn.data.DATASETS` lists them in the order
they registered (``tests/test_architecture.py`` checks both).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch.utils.data import Dataset


@dataclass(frozen=True)
class DatasetEntry:
    """A registered layout: ``build(split, **arguments of build_dataset)`` and whether it reads ``data_dir``."""

    build: Callable[..., Dataset]
    local: bool


_ENTRIES: dict[str, DatasetEntry] = {}


def register_dataset(name: str, *, local: bool = False) -> Callable:
    """Decorator: ``build`` (called as ``build(split, data_dir=…, train=…, image_size=…, load_size=…,
    eval_resize=…, seed=…, strict=…, synthetic_samples=…, synthetic_classes=…, classes=…)``, taking what it needs
    and ignoring the rest) builds the dataset ``name``. ``local``: the layout reads a folder, so ``data_dir`` is
    required. One name, one builder: a second module registering it is an error."""

    def decorate(build: Callable[..., Dataset]) -> Callable[..., Dataset]:
        held = _ENTRIES.get(name)
        if held is not None and held.build.__module__ != build.__module__:
            raise ValueError(f"dataset {name!r}: registered by {held.build.__module__} and again by {build.__module__}")
        _ENTRIES[name] = DatasetEntry(build, local)
        return build

    return decorate


def dataset_names() -> tuple[str, ...]:
    """The registered layouts, in the order they registered."""
    return tuple(_ENTRIES)


def build_dataset(
    name: str,
    split: str,
    *,
    data_dir: str | None,
    train: bool,
    image_size: int,
    load_size: int,
    eval_resize: int,
    seed: int = 0,
    strict: bool = False,
    synthetic_samples: int = 1024,
    synthetic_classes: int = 10,
    classes: Sequence[str] | None = None,
) -> Dataset:
    """The dataset ``name`` (one of `dataset_names`), split ``split``, from the local folder ``data_dir``.

    ``classes``: the training split's class names, so that folder layouts label an evaluation split by name.
    """
    if name not in _ENTRIES:
        raise ValueError(f"dataset: expected one of {', '.join(_ENTRIES)}, got {name!r}")
    entry = _ENTRIES[name]
    if entry.local and data_dir is None:
        raise ValueError(f"data_dir: dataset {name!r} reads a local folder; pass --data-dir")
    return entry.build(split, data_dir=data_dir, train=train, image_size=image_size, load_size=load_size,
                       eval_resize=eval_resize, seed=seed, strict=strict, synthetic_samples=synthetic_samples,
                       synthetic_classes=synthetic_classes, classes=classes)
