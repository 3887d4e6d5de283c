"""Data: dataset layouts read from local paths (`images`), deterministic batch order (`batching`) and on-device
augmentation (`transforms`). Nothing is downloaded."""
from .batching import Batch, Corrupt, CorruptImageError, EpochBatches, collate, loader
from .images import (
                     DATASETS,
                     IMAGENET_MEAN,
                     IMAGENET_STD,
                     DatasetInfo,
                     ImageFiles,
                     TensorImages,
                     build_dataset,
                     cifar,
                     digits,
                     flowers102,
                     image_folder,
                     mnist5k,
                     pets,
                     synthetic,
)
from .transforms import AUGMENTATIONS, DeviceTransform

__all__ = [
    "AUGMENTATIONS", "Batch", "Corrupt", "CorruptImageError", "DATASETS", "DatasetInfo", "DeviceTransform",
    "EpochBatches", "IMAGENET_MEAN", "IMAGENET_STD", "ImageFiles", "TensorImages", "build_dataset", "cifar", "collate",
    "digits", "flowers102", "image_folder", "loader", "mnist5k", "pets", "synthetic",
]
