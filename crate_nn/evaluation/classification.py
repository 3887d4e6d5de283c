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

from ..data.transforms import DeviceTransform
from ..engine import distributed
from ..engine.precision import autocast
from .sharded import map_reduce


def real_index(path: str) -> int:
    """Position of an ImageNet validation file in ``real.json``: ``ILSVRC2012_val_00000042.JPEG`` → 41."""
    match = re.search(r"ILSVRC2012_val_(\d{8})", Path(path).name)
    if not match:
        raise ValueError(f"real_json: cannot find the validation image number in the file name {path!r}")
    return int(match.group(1)) - 1


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
    what: str = "dataset",
) -> dict[str, float]:
    """Loss (plain cross-entropy) and top-1/top-5 accuracy (fractions) of ``model`` on ``dataset``.

    Under torchrun each process evaluates its shard of the images and the sums are all-reduced
    (`crate_nn.evaluation.sharded.map_reduce`). Returns ``loss``, ``top1``, ``top5``, ``images`` and ``skipped``
    (unreadable files), plus ``real_top1`` and ``real_images`` when ``real_labels`` is given. ValueError naming
    ``what`` (the data) when no image could be evaluated, naming ``real_json`` when none has a plausible label.
    Draws nothing from the global RNG.
    """

    def body(net: nn.Module, batch) -> dict:
        for path in batch.skipped:
            tqdm.write(f"skipped unreadable image {path}", file=sys.stderr)
        sums = {"skipped": len(batch.skipped)}
        if not batch.labels.numel():  # every file of this batch was unreadable
            return sums
        images = transform(batch.images.to(ctx.device, non_blocking=True))
        labels = batch.labels.to(ctx.device)
        with autocast(ctx.device, precision):
            logits = net(images)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        top = logits.topk(min(5, logits.shape[-1]), dim=-1).indices
        sums.update(loss=F.cross_entropy(logits, labels, reduction="sum"), top1=(top[:, 0] == labels).sum(),
                    top5=(top == labels[:, None]).any(dim=-1).sum(), images=labels.numel())
        if real_labels is not None:
            plausible = [real_labels[real_index(dataset.samples[i][0])] for i in batch.indices.tolist()]
            hits = [predicted in allowed for predicted, allowed in zip(top[:, 0].tolist(), plausible) if allowed]
            sums.update(real_correct=sum(hits), real_images=len(hits))
        return sums

    names = ("loss", "top1", "top5", "images", "skipped", "real_correct", "real_images")
    totals = map_reduce(model, dataset, body, ctx, batch_size=batch_size, num_workers=num_workers, sums=names,
                        count="images", what=what).sums
    n = totals["images"]
    metrics = {"loss": totals["loss"] / n, "top1": totals["top1"] / n, "top5": totals["top5"] / n,
               "images": int(n), "skipped": int(totals["skipped"])}
    if real_labels is not None:
        if not totals["real_images"]:
            raise ValueError(f"real_json: none of the {int(n)} images evaluated has a plausible label in it")
        metrics["real_top1"] = totals["real_correct"] / totals["real_images"]
        metrics["real_images"] = int(totals["real_images"])
    return metrics
