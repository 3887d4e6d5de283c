"""Frozen features of a trained backbone, the input of the linear probe and the k-NN evaluation.

`extract_features` runs a feature function over a dataset in deterministic order (no augmentation, eval mode,
no gradients) and returns the features and labels as float64/int64 NumPy arrays on the CPU.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from ..data.batching import EpochBatches, collate, loader
from ..engine.distributed import Context


def pooled_features(model: nn.Module, pool: str = "cls") -> Callable[[torch.Tensor], torch.Tensor]:
    """A feature function: the model's output tokens ``forward_features`` (B, n, d) pooled to (B, d) by the class
    token (``"cls"``, eq. 80) or the mean over tokens (``"mean"``, eq. 72)."""
    if pool not in ("cls", "mean"):
        raise ValueError(f"pool: expected 'cls' or 'mean', got {pool!r}")

    def features(images: torch.Tensor) -> torch.Tensor:
        tokens = model.forward_features(images)
        return tokens[:, 0] if pool == "cls" else tokens.mean(dim=1)

    return features


@torch.no_grad()
def extract_features(
    features: Callable[[torch.Tensor], torch.Tensor],
    dataset: Dataset,
    transform: Callable[[torch.Tensor], torch.Tensor],
    device: torch.device | Context,
    *,
    batch_size: int = 256,
    num_workers: int = 0,
    collate_fn: Callable = collate,
) -> tuple[np.ndarray, np.ndarray]:
    """(features (N, d) float64, labels (N,) int64) of every sample of ``dataset``, in dataset order.

    Args:
        features: maps a batch of transformed inputs to (B, d), e.g. `pooled_features(model)`.
        dataset: yields (input, label, index) (the image datasets of `crate_nn.data`).
        transform: applied to each batch on ``device`` (e.g. the evaluation `DeviceTransform`).
    """
    device = device.device if isinstance(device, Context) else torch.device(device)
    batches = EpochBatches(len(dataset), global_batch=batch_size, micro_batch=batch_size, shuffle=False)
    chunks, labels = [], []
    for batch in loader(dataset, batches, num_workers, collate_fn=collate_fn):
        out = features(transform(batch.images.to(device)))
        chunks.append(out.detach().to("cpu", torch.float64))
        labels.append(batch.labels)
    return torch.cat(chunks).numpy(), torch.cat(labels).numpy()
