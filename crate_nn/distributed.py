"""DistributedDataParallel set-up from the environment ``torchrun`` provides (RANK, WORLD_SIZE, LOCAL_RANK).

One process (plain ``python``/``crate-train``) needs nothing; under ``torchrun`` every process joins the default
process group with NCCL on GPUs and gloo on CPU. Multi-node runs use torchrun's standard rendezvous
(``--nnodes``, ``--rdzv-backend c10d``, ``--rdzv-endpoint HOST:PORT``); nothing here is node-specific.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Context:
    """Where this process runs: its rank among ``world_size`` processes and its torch device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """``"auto"`` → ``cuda:<local_rank>`` when CUDA is available, else ``cpu``; anything else is taken as given."""
    if device == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} was asked for but CUDA is not available")
        if resolved.index is None:
            resolved = torch.device(f"cuda:{local_rank}")
    return resolved


def setup(device: str = "auto") -> Context:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1); otherwise a one-process context."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    resolved = resolve_device(device, local_rank)
    if world_size > 1 and not dist.is_initialized():
        if resolved.type == "cuda":
            torch.cuda.set_device(resolved)
        dist.init_process_group(backend="nccl" if resolved.type == "cuda" else "gloo")
    return Context(rank=rank, world_size=world_size, local_rank=local_rank, device=resolved)


def teardown(ctx: Context) -> None:
    """Leave the process group joined by ``setup``, after every process has arrived (no rank closes its
    connections while another still uses them)."""
    if ctx.distributed and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, ctx: Context) -> torch.Tensor:
    """Sum of ``tensor`` over all processes (the tensor itself in one process); modifies ``tensor`` in place."""
    if ctx.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def barrier(ctx: Context) -> None:
    if ctx.distributed:
        dist.barrier()
