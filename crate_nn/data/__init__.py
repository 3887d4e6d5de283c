"""Data: dataset layouts read from local paths (`images`, `shards`, `objects`; the ``--dataset`` switch in
`registry`), deterministic batch order (`batching`) and on-device augmentation (`transforms`); the language models'
text (`tokenizers`, `documents`, `corpus`, `masking`, `glue`; writing token files: `preparation`). Nothing is
downloaded.

Importing the package imports every module that registers a layout, so `DATASETS` (the registered names) and
`build_dataset` know them all."""
from .batching import Batch, Corrupt, CorruptImageError, EpochBatches, collate, loader
from .images import (
                     IMAGENET_MEAN,
                     IMAGENET_STD,
                     DatasetInfo,
                     ImageFiles,
                     TensorImages,
                     cifar,
                     digits,
                     flowers102,
                     image_folder,
                     mnist5k,
                     pets,
                     synthetic,
)
from .objects import ObjectImages
from .registry import build_dataset, dataset_names, register_dataset
from .shards import ShardImages
from .transforms import AUGMENTATIONS, DeviceTransform

DATASETS = dataset_names()
"""Every ``--dataset`` layout, in the order the modules above registered them."""

__all__ = [
    "AUGMENTATIONS", "Batch", "Corrupt", "CorruptImageError", "DATASETS", "DatasetInfo", "DeviceTransform",
    "EpochBatches", "IMAGENET_MEAN", "IMAGENET_STD", "ImageFiles", "ObjectImages", "ShardImages", "TensorImages",
    "build_dataset", "cifar", "collate", "dataset_names", "digits", "flowers102", "image_folder", "loader", "mnist5k",
    "pets", "register_dataset", "synthetic",
]
