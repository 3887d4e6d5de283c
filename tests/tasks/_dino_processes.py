"""DINO's centre update split over the processes of a torchrun job, for test_dino.py.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/tasks/_dino_processes.py

Every process gives `DINOLoss` its shard of the images of one step's two micro-batches of teacher outputs, then
calls ``update`` (the all-reduce of the sums); each writes its centre to a file of its own. `one_process_centre`
gives the reference: one process with every image.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from crate_nn.engine.distributed import Context, context, joined
from crate_nn.tasks.dino_loss import DINOLoss

GLOBALS, IMAGES, K, MOMENTUM = 2, 6, 5, 0.8  # two micro-batches of 6 images: 3 + 3 per process


def outputs() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(student (3, IMAGES, K), teacher (GLOBALS, IMAGES, K)) of two micro-batches, float32, fixed."""
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(3, IMAGES, K, generator=g), torch.randn(GLOBALS, IMAGES, K, generator=g)) for _ in range(2)]


def centre(ctx: Context, images: slice) -> torch.Tensor:
    """The centre after one update from the zero centre, given the images ``images`` of each micro-batch."""
    loss = DINOLoss(K, center_momentum=MOMENTUM, ctx=ctx)
    for student, teacher in outputs():
        loss(student[:, images], teacher[:, images], epoch=0)
    loss.update()
    return loss.center


def one_process_centre() -> torch.Tensor:
    return centre(context("cpu"), slice(None))


def main() -> None:
    """Each process writes its centre to ``<folder>/centre-<rank>.json`` (the folder is the first argument): the
    processes' prints would share one stdout and could interleave."""
    folder = Path(sys.argv[1])
    with joined(context("cpu")) as ctx:
        share = IMAGES // ctx.world_size
        found = centre(ctx, slice(ctx.rank * share, (ctx.rank + 1) * share)).tolist()
        (folder / f"centre-{ctx.rank}.json").write_text(json.dumps(found))


if __name__ == "__main__":
    main()
