"""Batches and their order: the deterministic per-epoch index lists every task trains on, and the collate step
that stacks samples while naming (and dropping) unreadable files.

The order of the training data is a deterministic function of (seed, epoch) (`EpochBatches`), so a resumed run
skips exactly the batches it has already seen. Nothing here draws from the global RNG. The batches are read in the
main process, by DataLoader worker processes, or by threads of the main process (`ThreadedBatches`: the same
batches in the same order, without the copy of every batch from a worker process to the main one).
"""
from __future__ import annotations

import collections
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import NamedTuple

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data._utils.pin_memory import pin_memory as pin_batch

from ..errors import CorruptImageError  # noqa: F401 - raised by the data modules, imported from here


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


class ThreadedBatches:
    """The micro-batches of ``batches`` read by ``workers`` threads of this process, yielded in order: each thread
    reads one batch's items (``dataset.__getitems__`` when the dataset has it, else one ``dataset[i]`` each),
    collates them (and pins them with ``pin_memory``); at most ``prefetch`` batches per thread are read ahead.

    For data whose reading releases the GIL — memory-mapped shards (NumPy copies), Pillow's decoding — threads read
    in parallel, and a batch reaches the training step without the copy through shared memory that a DataLoader
    worker process needs. An exception of a reader is raised where its batch is taken; a loop that stops early
    (closing or dropping its iterator) cancels the reads not yet started."""

    def __init__(self, dataset: Dataset, batches: EpochBatches, workers: int, pin_memory: bool = False,
                 collate_fn: Callable = collate, prefetch: int = 2):
        if workers < 1 or prefetch < 1:
            raise ValueError(f"workers, prefetch: expected positive counts, got {workers}, {prefetch}")
        self.dataset, self.batches, self.workers, self.prefetch = dataset, batches, workers, prefetch
        self.pin_memory, self.collate_fn = pin_memory, collate_fn

    def __len__(self) -> int:
        return len(self.batches)

    def read(self, indices: list[int]):
        getitems = getattr(self.dataset, "__getitems__", None)
        batch = self.collate_fn(getitems(indices) if getitems else [self.dataset[i] for i in indices])
        return pin_batch(batch) if self.pin_memory else batch

    def __iter__(self) -> Iterator:
        todo = iter(self.batches)
        executor = ThreadPoolExecutor(self.workers, thread_name_prefix="crate-batches")
        pending = collections.deque(executor.submit(self.read, indices)
                                    for indices in islice(todo, self.workers * self.prefetch))
        try:
            while pending:
                batch = pending.popleft().result()
                for indices in islice(todo, 1):
                    pending.append(executor.submit(self.read, indices))
                yield batch
        finally:
            executor.shutdown(wait=False, cancel_futures=True)


def loader(dataset: Dataset, batches: EpochBatches, num_workers: int = 0, pin_memory: bool = False,
           collate_fn: Callable = collate, threads: bool = False) -> DataLoader | ThreadedBatches:
    """The micro-batches of ``batches`` (`EpochBatches`, or any batch sampler with a ``seed`` and an ``epoch``, such
    as `crate_nn.evaluation.sharded.ShardBatches`), read by ``num_workers`` DataLoader processes (0: in this process),
    or by that many threads (`ThreadedBatches`) with ``threads``; the same batches in the same order either way, and
    nothing drawn from the global RNG (resume stays exact)."""
    if threads and num_workers:
        return ThreadedBatches(dataset, batches, num_workers, pin_memory, collate_fn)
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
