"""Frozen features of a trained backbone, the input of the linear probe and the k-NN evaluation.

`extract_features` runs a feature function over a dataset in deterministic order (no augmentation, eval mode,
no gradients) and returns the features and labels as float64/int64 NumPy arrays on the CPU, in dataset order. Under
DDP each process extracts its shard and the shards are gathered, so every process returns the whole set.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

from ..data.batching import EpochBatches, collate, loader
from ..engine.distributed import Context, all_gather_objects


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
    """(features (N, d) float64, labels (N,) int64) of every sample of ``dataset``, in dataset order (samples that
    the collate step drops, unreadable files, are left out).

    Args:
        features: maps a batch of transformed inputs to (B, d), e.g. `pooled_features(model)`.
        dataset: yields (input, label, index) (the image datasets of `crate_nn.data`).
        transform: applied to each batch on ``device`` (e.g. the evaluation `DeviceTransform`).
        device: a device, or the `Context` of this process. With a Context of several processes this is a
            collective call (every process must make it): process r extracts the samples r, r + P, r + 2P, … of
            the P processes (`EpochBatches` without shuffling: no sample twice, none left out, shards differ by
            at most one sample) and every process returns the features of all N samples, gathered through the
            process group on the Context's device (each process then holds N × d float64 on the CPU).
    """
    ctx = device if isinstance(device, Context) else Context(0, 1, 0, torch.device(device))
    batches = EpochBatches(len(dataset), global_batch=batch_size * ctx.world_size, micro_batch=batch_size,
                           rank=ctx.rank, world_size=ctx.world_size, shuffle=False)
    chunks, labels, indices = [], [], []
    for batch in loader(dataset, batches, num_workers, collate_fn=collate_fn):
        if len(batch.indices):  # a batch of unreadable files only has no images
            chunks.append(features(transform(batch.images.to(ctx.device))).detach().cpu())
            labels.append(batch.labels)
            indices.append(batch.indices)
    mine = (torch.cat(chunks), torch.cat(labels), torch.cat(indices)) if chunks else None
    shapes = all_gather_objects(None if mine is None else (len(mine[0]), mine[0].shape[1:], mine[0].dtype), ctx)
    if all(shape is None for shape in shapes):
        raise ValueError(f"dataset: none of its {len(dataset)} samples could be read")
    if not ctx.distributed:
        return mine[0].to(torch.float64).numpy(), mine[1].numpy()
    _, width, dtype = next(shape for shape in shapes if shape is not None)
    counts = [0 if shape is None else shape[0] for shape in shapes]
    if mine is None:  # this process's shard is empty (fewer samples than processes, or unreadable ones)
        mine = (torch.empty(0, *width, dtype=dtype), torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long))
    gathered = []
    for tensor in mine:  # all_gather needs one shape on every process: padded to the largest shard, trimmed after
        padded = torch.zeros(max(counts), *tensor.shape[1:], dtype=tensor.dtype, device=ctx.device)
        padded[:len(tensor)] = tensor.to(ctx.device)
        parts = [torch.empty_like(padded) for _ in counts]
        dist.all_gather(parts, padded)
        gathered.append(torch.cat([part[:count].cpu() for part, count in zip(parts, counts)]))
    all_features, all_labels, all_indices = gathered
    order = all_indices.argsort()  # process r held the samples r, r + P, …: back to dataset order
    return all_features[order].to(torch.float64).numpy(), all_labels[order].numpy()
