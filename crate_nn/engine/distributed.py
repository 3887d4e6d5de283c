"""DistributedDataParallel set-up from the environment ``torchrun`` provides (RANK, WORLD_SIZE, LOCAL_RANK).

One process (plain ``python``/``crate-train``) needs nothing; under ``torchrun`` every process joins the default
process group with NCCL on GPUs and gloo on CPU. Multi-node runs use torchrun's standard rendezvous
(``--nnodes``, ``--rdzv-backend c10d``, ``--rdzv-endpoint HOST:PORT``); nothing here is node-specific.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
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
    """``"auto"`` → ``cuda:<local_rank>`` when CUDA is available, else ``cpu``; ``cpu``, ``cuda``, ``cuda:N``, ``mps``
    are taken as given (ValueError naming ``device`` for anything else or an unavailable CUDA)."""
    if device == "auto":
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device: expected auto, cpu, cuda or cuda:N, got {device!r}") from err
    if resolved.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device: expected auto, cpu, cuda or cuda:N, got {device!r}")
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device: {device!r} was asked for but CUDA is not available")
        if resolved.index is None:
            resolved = torch.device(f"cuda:{local_rank}")
    return resolved


def world_size() -> int:
    """Number of processes of this job (WORLD_SIZE set by torchrun; 1 otherwise)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def context(device: str = "auto") -> Context:
    """This process's rank, world size and device from the environment torchrun sets; joins nothing yet, so the
    work that can fail (checking the run directory, reading data, building the model) happens before any
    process waits for another."""
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    resolved = resolve_device(device, local_rank)
    if resolved.type == "cuda":
        torch.cuda.set_device(resolved)
    return Context(rank=rank, world_size=world_size(), local_rank=local_rank, device=resolved)


def join(ctx: Context) -> None:
    """Join the default process group (NCCL on GPUs, gloo on CPU) when launched with several processes."""
    if ctx.distributed and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if ctx.device.type == "cuda" else "gloo")


def setup(device: str = "auto") -> Context:
    """`context` then `join`: a one-process context, or this process's place in the torchrun job."""
    ctx = context(device)
    join(ctx)
    return ctx


def teardown(ctx: Context, failed: bool = False) -> None:
    """Leave the process group. After success every process first waits for the others (no rank closes its
    connections while another still uses them); after a failure it leaves at once — never entering a collective
    on an error path, where a process that will never arrive would hang the job (torchrun stops the others)."""
    if ctx.distributed and dist.is_initialized():
        if not failed:
            dist.barrier()
        dist.destroy_process_group()


@contextlib.contextmanager
def joined(ctx: Context) -> Iterator[Context]:
    """`join` for the work inside the block, then `teardown` (at once, without a barrier, if the block raised)."""
    join(ctx)
    failed = True
    try:
        yield ctx
        failed = False
    finally:
        teardown(ctx, failed)


def all_reduce_sum(tensor: torch.Tensor, ctx: Context) -> torch.Tensor:
    """Sum of ``tensor`` over all processes (the tensor itself in one process); modifies ``tensor`` in place."""
    if ctx.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_sum_differentiable(tensor: torch.Tensor, ctx: Context) -> torch.Tensor:
    """Sum of ``tensor`` over all processes as a new tensor whose backward sums the incoming gradients over the
    processes too (the tensor itself in one process). A loss of a sum over processes, f(Σ_r x_r), then gets in each
    process the gradient f′(Σ_r x_r)·∂x_r/∂θ summed over every process's f′: N copies, which DDP's gradient average
    brings back to f′'s one — the gradient of one process holding the whole batch."""
    return _SumOverProcesses.apply(tensor) if ctx.distributed else tensor


class _SumOverProcesses(torch.autograd.Function):
    """y = Σ_r x_r on every process; its vector-Jacobian product is ∂L/∂x_r = Σ_r' ∂L_r'/∂y (every process's y
    feeds that process's loss, so the incoming gradients are summed over the processes too). Both directions are one
    blocking all-reduce on a copy, in the calling thread (no asynchronous work left at exit)."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        out = tensor.clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        out = grad.contiguous().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out


def all_gather_objects(obj, ctx: Context) -> list:
    """``[obj of rank 0, obj of rank 1, …]`` (``[obj]`` in one process)."""
    if not ctx.distributed:
        return [obj]
    gathered = [None] * ctx.world_size
    dist.all_gather_object(gathered, obj)
    return gathered
