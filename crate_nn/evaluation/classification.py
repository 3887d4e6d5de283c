"""Classification metrics of a model on a dataset: loss, top-1 / top-5 accuracy, ImageNet-ReaL top-1.

ReaL (Beyer et al. 2020): ``real.json`` lists, for the validation images in the order of their numbers
(``ILSVRC2012_val_00000001.JPEG`` first), the set of plausible labels; an image counts when its set is non-empty
and is correct when the top-1 prediction is in it. The command line is ``crate-eval`` (`crate_nn.evaluate`).
"""
from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from ..data.batching import EpochBatches, loader
from ..data.transforms import DeviceTransform
from ..engine import distributed
from ..engine.precision import autocast


def real_index(path: str) -> int:
    """Position of an ImageNet validation file in ``real.json``: ``ILSVRC2012_val_00000042.JPEG`` → 41."""
    match = re.search(r"ILSVRC2012_val_(\d{8})", Path(path).name)
    if not match:
        raise ValueError(f"real_json: cannot find the validation image number in the file name {path!r}")
    return int(match.group(1)) - 1


@torch.no_grad()
def evaluate(
    model: nn.Module,
    dataset,
    transform: DeviceTransform,
    ctx: distributed.Context,
    *,
    batch_size: int = 256,
    num_workers: int = 0,
    precision: str = "auto",
    real_labels: Sequence[Sequence[int]] | None = None,
) -> dict[str, float]:
    """Loss (plain cross-entropy) and top-1/top-5 accuracy (fractions) of ``model`` on ``dataset``.

    Under torchrun each process evaluates every ``world_size``-th image and the sums are all-reduced. Returns
    ``loss``, ``top1``, ``top5``, ``images`` and ``skipped`` (unreadable files), plus ``real_top1`` and
    ``real_images`` when ``real_labels`` is given. Draws nothing from the global RNG. ValueError when no image could
    be read (or, with ``real_labels``, none has a plausible label): a mean over no image is undefined.
    """
    was_training = model.training
    model.eval()
    batches = EpochBatches(len(dataset), global_batch=batch_size * ctx.world_size, micro_batch=batch_size,
                           rank=ctx.rank, world_size=ctx.world_size, shuffle=False)
    # loss sum, top-1, top-5, images, skipped, ReaL correct, ReaL counted
    totals = torch.zeros(7, dtype=torch.float64, device=ctx.device)
    for batch in loader(dataset, batches, num_workers, pin_memory=ctx.device.type == "cuda"):
        totals[4] += len(batch.skipped)
        for path in batch.skipped:
            tqdm.write(f"skipped unreadable image {path}", file=sys.stderr)
        if not batch.labels.numel():  # every file of this batch was unreadable
            continue
        images = transform(batch.images.to(ctx.device, non_blocking=True))
        labels = batch.labels.to(ctx.device)
        with autocast(ctx.device, precision):
            logits = model(images)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        top = logits.topk(min(5, logits.shape[-1]), dim=-1).indices
        totals[0] += F.cross_entropy(logits, labels, reduction="sum").double()
        totals[1] += (top[:, 0] == labels).sum()
        totals[2] += (top == labels[:, None]).any(dim=-1).sum()
        totals[3] += labels.numel()
        if real_labels is not None:
            predictions = top[:, 0].tolist()
            for i, predicted in zip(batch.indices.tolist(), predictions):
                plausible = real_labels[real_index(dataset.samples[i][0])]
                if plausible:
                    totals[5] += predicted in plausible
                    totals[6] += 1
    distributed.all_reduce_sum(totals, ctx)
    model.train(was_training)
    n, skipped = int(totals[3].item()), int(totals[4].item())
    if n == 0:  # a mean over no image is no number (not 0.0, which reads as a perfect loss)
        raise ValueError(f"none of the {len(dataset)} images could be read ({skipped} unreadable, named above); a "
                         "metric over no image is undefined")
    metrics = {"loss": totals[0].item() / n, "top1": totals[1].item() / n, "top5": totals[2].item() / n,
               "images": n, "skipped": skipped}
    if real_labels is not None:
        if totals[6] == 0:
            raise ValueError(f"real_json: none of the {n} evaluated images has a plausible label; ReaL top-1 over no "
                             "image is undefined")
        metrics["real_top1"] = totals[5].item() / totals[6].item()
        metrics["real_images"] = int(totals[6].item())
    return metrics
