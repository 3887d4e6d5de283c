"""The one sharded evaluation map: every evaluation that runs over data split among the processes of a run (loss and
accuracy, frozen features, MAE's reconstructions, the language models' held-out loss, GLUE's predictions) is a
`map_reduce`:

    result = map_reduce(model, dataset, body, ctx, batch_size=64, sums=("loss", "images"), count="images")
    result.sums["loss"] / result.sums["images"]

The one sharding rule (`shard`): of the N items evaluated (``range(len(data))``, or the chosen ``items``), process r
of P takes the positions r, r + P, r + 2P, … in that order, in batches of ``batch_size`` — no item twice, none left
out, shards differing by one item at most. ``body(model, batch)`` maps one batch (the collated items) to named
tensors: those named in ``sums`` are added up in float64 over the batches, then over the processes in one all-reduce;
any other holds one row per sample, and the rows are concatenated and gathered from every process in the order of
their items (a row's item is the body's ``index`` when it returns one, e.g. after unreadable files were dropped, else
its place in the batch). The model, when given, runs in eval mode without gradients and gets its mode back.

Nothing evaluated — no items, or a zero ``count`` (no rows without one) over every process — is a ValueError naming
the data, never a 0 or a NaN. `map_reduce` is a collective call (every process makes it) and draws nothing from the
global generators; several processes return what one process returns, up to the order of floating-point sums.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset

from ..data.batching import collate, loader
from ..engine.distributed import Context, all_gather_objects, all_reduce_sum


def shard(items: Sequence[int], ctx: Context) -> Sequence[int]:
    """This process's share of ``items``: the positions rank, rank + world_size, … (the one sharding rule)."""
    return items[ctx.rank::ctx.world_size]


class ShardBatches:
    """This process's `shard` of ``items`` in batches of ``batch_size``: the ``batch_sampler`` of its DataLoader."""

    seed = epoch = 0
    """What `crate_nn.data.batching.loader` seeds its generator from (an evaluation draws nothing from it)."""

    def __init__(self, items: Sequence[int], batch_size: int, ctx: Context) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected a positive integer, got {batch_size!r}")
        self.mine, self.batch_size = shard(items, ctx), batch_size

    def __iter__(self) -> Iterator[list[int]]:
        for start in range(0, len(self.mine), self.batch_size):
            yield list(self.mine[start:start + self.batch_size])

    def __len__(self) -> int:
        return math.ceil(len(self.mine) / self.batch_size)


class Reduced(NamedTuple):
    """What `map_reduce` returns: the ``sums`` over every process, and the rows of every process in item order."""

    sums: dict[str, float]
    rows: dict[str, torch.Tensor]


@torch.no_grad()
def map_reduce(model: nn.Module | None, data: Dataset, body: Callable[[nn.Module | None, Any], Mapping[str, Any]],
               ctx: Context, *, batch_size: int, sums: Collection[str] = (), count: str | None = None,
               items: Sequence[int] | None = None, collate_fn: Callable = collate, num_workers: int = 0,
               what: str = "dataset") -> Reduced:
    """``body`` over this process's shard of ``data`` (module docstring), summed and gathered over the processes.

    Args:
        model: put in eval mode for the map (its mode restored after); None for a function of the inputs alone.
        data: a map-style dataset; ``items``: the indices evaluated (default: all of them).
        body: ``(model, batch) → {name: tensor or number}``: ``sums``' names are summed, other names are rows
            (first dimension: the batch's samples), ``index`` the rows' items when not the batch's own.
        ctx: this process's `Context` (its device holds the sums).
        count: the sum that counts what was evaluated (samples, tokens): zero is a ValueError naming ``what``.
    """
    items = range(len(data)) if items is None else items
    if not len(items):
        raise ValueError(f"{what}: no samples to evaluate")
    batches = ShardBatches(items, batch_size, ctx)
    totals = {name: torch.zeros((), dtype=torch.float64, device=ctx.device) for name in sums}
    parts: dict[str, list[torch.Tensor]] = {}
    was_training = model.training if model is not None else False
    if model is not None:
        model.eval()
    try:
        data_loader = loader(data, batches, num_workers, pin_memory=ctx.device.type == "cuda", collate_fn=collate_fn)
        for chosen, batch in zip(batches, data_loader):
            out = dict(body(model, batch))
            index = out.pop("index", None)
            for name, value in out.items():
                if name in totals:
                    totals[name] += torch.as_tensor(value, device=ctx.device).double()
                else:
                    value = torch.as_tensor(value).detach().cpu()
                    if not value.ndim:
                        raise ValueError(f"{what}: the evaluation returned {name} as one number, but {name} is "
                                         f"not among the sums {sorted(totals)} (rows hold one entry per sample)")
                    parts.setdefault(name, []).append(value)
            if len(out) > len(totals.keys() & out.keys()):  # rows: remember their items
                parts.setdefault("index", []).append(torch.as_tensor(chosen if index is None else index).cpu())
    finally:
        if model is not None:
            model.train(was_training)
    names = list(totals)
    reduced = dict(zip(names, all_reduce_sum(torch.stack([totals[n] for n in names]), ctx).tolist())) if names else {}
    rows = _gathered(parts, ctx, what)
    evaluated = reduced[count] if count is not None else len(rows.get("index", ()))
    if not evaluated:  # a mean over nothing is no number (not 0.0, which reads as a perfect loss)
        skipped = int(reduced.get("skipped", 0))
        unread = f" ({skipped} unreadable, named above)" if skipped else ""
        raise ValueError(f"{what}: none of its {len(items)} samples could be evaluated{unread}; a metric over none "
                         "is undefined")
    rows.pop("index", None)
    return Reduced(reduced, rows)


def _gathered(parts: dict[str, list[torch.Tensor]], ctx: Context, what: str) -> dict[str, torch.Tensor]:
    """Each name's rows of every process, concatenated in the order of their items (``index``)."""
    local = {name: torch.cat(tensors) for name, tensors in parts.items()}
    for name, tensor in local.items():
        if len(tensor) != len(local["index"]):
            raise ValueError(f"{what}: {name} holds {len(tensor)} rows for {len(local['index'])} samples")
    if ctx.distributed:
        local = _all_gather_rows(local, ctx)
    if not local:
        return {}
    order = local["index"].argsort(stable=True)
    return {name: tensor[order] for name, tensor in local.items()}


def _all_gather_rows(local: dict[str, torch.Tensor], ctx: Context) -> dict[str, torch.Tensor]:
    """The rows of every process, process after process. A process may hold none (fewer items than processes, or
    unreadable ones): the processes first exchange what they hold (shapes and dtypes), then each tensor is gathered
    padded to the longest shard (all_gather needs one shape everywhere) and trimmed."""
    described = all_gather_objects({name: (len(t), t.shape[1:], t.dtype) for name, t in local.items()}, ctx)
    layout = next((d for d in described if d), None)
    if layout is None:
        return {}
    counts = [next(iter(d.values()))[0] if d else 0 for d in described]
    gathered = {}
    for name, (_, width, dtype) in layout.items():
        tensor = local.get(name, torch.empty(0, *width, dtype=dtype))
        padded = torch.zeros(max(counts), *width, dtype=dtype, device=ctx.device)
        padded[:len(tensor)] = tensor.to(ctx.device)
        pieces = [torch.empty_like(padded) for _ in counts]
        dist.all_gather(pieces, padded)
        gathered[name] = torch.cat([piece[:n].cpu() for piece, n in zip(pieces, counts)])
    return gathered
