"""Frozen features of a trained backbone, the input of the linear probe and the k-NN evaluation.

`extract_features` runs a feature function over a dataset in deterministic order (no augmentation, eval mode,
no gradients) and returns the features and labels as float64/int64 NumPy arrays on the CPU, in dataset order. Under
DDP each process extracts its shard and the shards are gathered (`crate_nn.evaluation.sharded.map_reduce`), so every
process returns the whole set.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from ..data.batching import collate
from ..engine.distributed import Context
from .sharded import map_reduce


def pooled_features(model: nn.Module, pool: str = "cls") -> Callable[[torch.Tensor], torch.Tensor]:
    """A feature function: the model's output tokens ``forward_features`` (B, n, d) pooled to (B, d) by the class
    token (``"cls"``, eq. 80) or the mean over tokens (``"mean"``, eq. 72)."""
    if pool not in ("cls", "mean"):
        raise ValueError(f"pool: expected 'cls' or 'mean', got {pool!r}")

    def features(images: torch.Tensor) -> torch.Tensor:
        tokens = model.forward_features(images)
        return tokens[:, 0] if pool == "cls" else tokens.mean(dim=1)

    return features


def first_images(dataset: Dataset, samples: int, purpose: str) -> torch.Tensor:
    """The first ``samples`` images of ``dataset`` (all when it holds fewer), collated un-transformed: the fixed
    held-out images an evaluator measures at every call. ValueError naming the argument for a non-positive
    ``samples`` or an empty ``dataset`` (``purpose`` says what the images are for)."""
    if not isinstance(samples, int) or samples < 1:
        raise ValueError(f"samples: expected a positive integer, got {samples!r}")
    if len(dataset) == 0:
        raise ValueError(f"dataset: no images {purpose}")
    return collate([dataset[i] for i in range(min(samples, len(dataset)))]).images


def raw_pixels(images: torch.Tensor) -> torch.Tensor:
    """The raw-pixel control's feature function: the (B, C, H, W) images as the network receives them (after the
    evaluation transform), flattened to (B, C·H·W). A frozen evaluation of pre-trained features names it as its
    strongest trivial control: features worth learning beat it."""
    return images.flatten(1)


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
    """(features (N, d) float64, labels (N,) int64) of every sample of ``dataset``, in dataset order (samples that
    the collate step drops, unreadable files, are left out; none left is a ValueError).

    Args:
        features: maps a batch of transformed inputs to (B, d), e.g. `pooled_features(model)`.
        dataset: yields (input, label, index) (the image datasets of `crate_nn.data`).
        transform: applied to each batch on ``device`` (e.g. the evaluation `DeviceTransform`).
        device: a device, or the `Context` of this process. With a Context of several processes this is a
            collective call (every process must make it): each process extracts its shard of the samples
            (`crate_nn.evaluation.sharded.map_reduce`) and every process returns the features of all N samples,
            gathered through the process group on the Context's device (each process then holds N × d float64 on
            the CPU).
    """
    ctx = device if isinstance(device, Context) else Context(0, 1, 0, torch.device(device))

    def body(_, batch) -> dict:
        if not len(batch.indices):  # a batch of unreadable files only has no images
            return {}
        return {"features": features(transform(batch.images.to(ctx.device))).detach().cpu(), "labels": batch.labels,
                "index": batch.indices}

    rows = map_reduce(None, dataset, body, ctx, batch_size=batch_size, num_workers=num_workers,
                      collate_fn=collate_fn).rows
    return rows["features"].to(torch.float64).numpy(), rows["labels"].numpy()
