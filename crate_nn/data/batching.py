"""Batches and their order: the deterministic per-epoch index lists every task trains on, and the collate step
that stacks samples while naming (and dropping) unreadable files.

The order of the training data is a deterministic function of (seed, epoch) (`EpochBatches`), so a resumed run
skips exactly the batches it has already seen. Nothing here draws from the global RNG.
"""
from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from typing import NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset


class CorruptImageError(RuntimeError):
    """An image file that Pillow cannot decode (raised only under ``strict``; the message names the file)."""


class Corrupt(NamedTuple):
    """Placeholder an evaluation dataset returns for an unreadable file, so the collate step can skip and count it."""

    path: str
    reason: str


class Batch(NamedTuple):
    """A micro-batch: images (B, C, H, W) uint8 or float, labels (B,) int64, their dataset indices (B,) int64,
    and the file names skipped."""

    images: torch.Tensor
    labels: torch.Tensor
    indices: torch.Tensor
    skipped: tuple[str, ...]


def collate(items: list) -> Batch:
    """Stack (image, label, index) samples into a `Batch`, naming the files skipped: ``Corrupt`` placeholders are
    dropped (evaluation), refilled samples (image, label, index, skipped names) keep their substitute (training).
    A batch whose every file was unreadable has no images (``images`` of shape (0,))."""
    skipped: list[str] = []
    good = []
    for item in items:
        if isinstance(item, Corrupt):
            skipped.append(item.path)
            continue
        if len(item) == 4:
            skipped.extend(item[3])
        good.append(item[:3])
    if not good:
        empty = torch.empty(0, dtype=torch.long)
        return Batch(torch.empty(0), empty, empty, tuple(skipped))
    images = torch.stack([image for image, _, _ in good])
    labels = torch.as_tensor([int(label) for _, label, _ in good], dtype=torch.long)
    indices = torch.as_tensor([int(i) for _, _, i in good], dtype=torch.long)
    return Batch(images, labels, indices, tuple(skipped))


class EpochBatches:
    """Index lists of this rank's micro-batches for one epoch, a deterministic function of (seed, epoch).

    A permutation of ``range(n)`` drawn from ``torch.Generator(seed, epoch)``; optimizer step s of the epoch takes
    the global batch ``perm[s*B:(s+1)*B]`` (``B = global_batch``; an incomplete last batch is dropped); rank r takes
    every ``world_size``-th element of it starting at r, split into consecutive micro-batches of ``micro_batch``.
    ``start_step`` skips the epoch's first steps (resume). Evaluation shards its data by one rule of its own
    (`crate_nn.evaluation.sharded`).
    """

    def __init__(
        self,
        n: int,
        *,
        global_batch: int,
        micro_batch: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        epoch: int = 0,
        start_step: int = 0,
    ):
        if global_batch % (micro_batch * world_size):
            raise ValueError(
                f"batch_size: the global batch {global_batch} is not divisible by micro_batch_size × world size "
                f"= {micro_batch} × {world_size}"
            )
        if global_batch > n:
            raise ValueError(f"batch_size: the global batch {global_batch} exceeds the {n} training samples")
        self.n, self.global_batch, self.micro_batch = n, global_batch, micro_batch
        self.rank, self.world_size = rank, world_size
        self.seed, self.epoch, self.start_step = seed, epoch, start_step

    @property
    def steps(self) -> int:
        """Optimizer steps in one epoch."""
        return self.n // self.global_batch

    def __iter__(self) -> Iterator[list[int]]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        perm = torch.randperm(self.n, generator=g).tolist()
        for step in range(self.start_step, self.steps):
            mine = perm[step * self.global_batch:(step + 1) * self.global_batch][self.rank::self.world_size]
            for i in range(0, len(mine), self.micro_batch):
                yield mine[i:i + self.micro_batch]

    def __len__(self) -> int:
        per_step = self.global_batch // (self.world_size * self.micro_batch)
        return (self.steps - self.start_step) * per_step


def _ignore_stop_signals(worker_id: int) -> None:
    """DataLoader workers ignore SIGINT/SIGTERM: the main process decides when to stop (after the current optimizer
    step, with a checkpoint) and then shuts its workers down; a worker killed by the signal first would break it."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


def loader(dataset: Dataset, batches: EpochBatches, num_workers: int = 0, pin_memory: bool = False,
           collate_fn: Callable = collate) -> DataLoader:
    """A DataLoader over ``batches`` (`EpochBatches`, or any batch sampler with a ``seed`` and an ``epoch``, such as
    `crate_nn.evaluation.sharded.ShardBatches`) that draws nothing from the global RNG (resume stays exact)."""
    return DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=num_workers,
        collate_fn=collate_fn,
        pin_memory=pin_memory,
        persistent_workers=False,
        worker_init_fn=_ignore_stop_signals if num_workers else None,
        generator=torch.Generator().manual_seed(batches.seed * 1_000_003 + batches.epoch),
    )
