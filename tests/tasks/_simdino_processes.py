"""SimDINO's objective split over the processes of a torchrun job, for test_simdino.py.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/tasks/_simdino_processes.py OUT

Every process takes its shard of one batch of `batch` images, maps them through the shared linear map θ (the
"network"), computes `simdino_loss` and its gradient, and averages the gradient over the processes as DDP does;
rank 0 saves (loss averaged over the processes, averaged gradient) to OUT. `one_process` gives the reference.
"""
from __future__ import annotations

import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from crate_nn.engine.distributed import Context, context, joined
from crate_nn.tasks.simdino import simdino_loss

VIEWS, GLOBALS, IMAGES, IN, DIM, EPS = 4, 2, 6, 5, 8, 0.5  # 6 images: 3 per process; fewer than p = 8 features


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(θ (IN, DIM), student inputs (V, IMAGES, IN), teacher inputs (G, IMAGES, IN)), float64, fixed."""
    g = torch.Generator().manual_seed(0)
    return (torch.randn(IN, DIM, generator=g, dtype=torch.float64),
            torch.randn(VIEWS, IMAGES, IN, generator=g, dtype=torch.float64),
            torch.randn(GLOBALS, IMAGES, IN, generator=g, dtype=torch.float64))


def loss_and_grad(ctx: Context, images: slice) -> tuple[torch.Tensor, torch.Tensor]:
    """This process's loss and the gradient of θ of the images ``images``."""
    theta, student_in, teacher_in = batch()
    theta.requires_grad_(True)
    student = F.normalize(student_in[:, images] @ theta, dim=-1)
    teacher = F.normalize(teacher_in[:, images] @ theta.detach(), dim=-1)
    out = simdino_loss(student, teacher, EPS, alignment_coeff=0.7, ctx=ctx)
    out.loss.backward()
    return out.loss.detach(), theta.grad


def one_process() -> tuple[torch.Tensor, torch.Tensor]:
    return loss_and_grad(context("cpu"), slice(None))


def main(out: str) -> None:
    with joined(context("cpu")) as ctx:
        share = IMAGES // ctx.world_size
        loss, grad = loss_and_grad(ctx, slice(ctx.rank * share, (ctx.rank + 1) * share))
        both = torch.cat([loss[None], grad.flatten()])
        dist.all_reduce(both)  # DDP averages the gradients; the logged loss is the mean over processes
        both /= ctx.world_size
        if ctx.is_main:
            torch.save((both[0], both[1:].view_as(grad)), out)


if __name__ == "__main__":
    main(sys.argv[1])
