"""Evaluate a CRATE checkpoint: top-1 / top-5 accuracy and loss, ImageNet-ReaL top-1 when ``real.json`` is given.

    crate-eval runs/imagenet/checkpoints/last.pt --data-dir /data/imagenet
    crate-eval runs/imagenet/checkpoints/last.pt --data-dir /data/imagenet --real-json /data/real.json
    crate-eval crate_small.pth --official --model crate_small --dataset imagenet --data-dir /data/imagenet
    torchrun --nproc_per_node 8 -m crate_nn.evaluate CKPT --data-dir /data/imagenet     (sharded over 8 GPUs)

Data settings (dataset, image size, eval resize, mean/std) come from the training config saved in the checkpoint
unless given on the command line. ReaL (Beyer et al. 2020): ``real.json`` lists, for the validation images in
the order of their numbers (``ILSVRC2012_val_00000001.JPEG`` first), the set of plausible labels; an image counts
when its set is non-empty and is correct when the top-1 prediction is in it.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import re
import sys
from pathlib import Path
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import checkpoint
from . import distributed
from .data import IMAGENET_MEAN, IMAGENET_STD, DeviceTransform, EpochBatches, ImageFiles, build_dataset, loader


def autocast(device: torch.device, precision: str):
    """bf16 autocast on CUDA for ``auto``/``bf16``, on CPU only for ``bf16``; float32 otherwise."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if not use_bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


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
    ``real_images`` when ``real_labels`` is given. Draws nothing from the global RNG.
    """
    was_training = model.training
    model.eval()
    batches = EpochBatches(len(dataset), global_batch=batch_size * ctx.world_size, micro_batch=batch_size,
                           rank=ctx.rank, world_size=ctx.world_size, shuffle=False)
    # loss sum, top-1, top-5, images, skipped, ReaL correct, ReaL counted
    totals = torch.zeros(7, dtype=torch.float64, device=ctx.device)
    for batch in loader(dataset, batches, num_workers, pin_memory=ctx.device.type == "cuda"):
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
        totals[4] += len(batch.skipped)
        if real_labels is not None:
            predictions = top[:, 0].tolist()
            for i, predicted in zip(batch.indices.tolist(), predictions):
                plausible = real_labels[real_index(dataset.samples[i][0])]
                if plausible:
                    totals[5] += predicted in plausible
                    totals[6] += 1
    distributed.all_reduce_sum(totals, ctx)
    model.train(was_training)
    n = max(totals[3].item(), 1.0)
    metrics = {"loss": totals[0].item() / n, "top1": totals[1].item() / n, "top5": totals[2].item() / n,
               "images": int(totals[3].item()), "skipped": int(totals[4].item())}
    if real_labels is not None:
        metrics["real_top1"] = totals[5].item() / max(totals[6].item(), 1.0)
        metrics["real_images"] = int(totals[6].item())
    return metrics


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="crate-eval", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a crate_nn checkpoint (or the authors' with --official)")
    parser.add_argument("--official", action="store_true", help="the file is in the authors' format")
    parser.add_argument("--model", default=None, help="registered size for --official files (gives the heads)")
    parser.add_argument("--dataset", default=None)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--split", default=None, help="default: the training config's eval_split, else 'val'")
    parser.add_argument("--image-size", type=int, default=None)
    parser.add_argument("--eval-resize", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=256, help="per process")
    parser.add_argument("--num-workers", type=int, default=8)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"))
    parser.add_argument("--real-json", default=None, help="ImageNet-ReaL labels (real.json)")
    parser.add_argument("--output", default=None, help="also write the metrics to this JSON file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crate-eval``: prints the metrics as JSON."""
    args = parse_args(argv)
    if not Path(args.checkpoint).is_file():
        raise SystemExit(f"crate-eval: checkpoint: {args.checkpoint!r} does not exist")
    train_config: dict = {}
    try:
        if args.official:
            model = checkpoint.load_official_checkpoint(args.checkpoint, name=args.model)
        else:
            model = checkpoint.load(args.checkpoint)
            train_config = checkpoint.read(args.checkpoint).get("train_config") or {}
    except ValueError as err:
        raise SystemExit(f"crate-eval: {err}") from err

    def setting(name: str, default):
        """The command line's value, else the training config's, else ``default``."""
        given = getattr(args, name)
        return given if given is not None else train_config.get(name, default)

    image_size = setting("image_size", model.config.image_size)
    ctx = distributed.setup(args.device)
    try:
        dataset = build_dataset(
            setting("dataset", "imagenet"), args.split or train_config.get("eval_split", "val"),
            data_dir=setting("data_dir", None), train=False, image_size=image_size,
            load_size=train_config.get("load_size", 256), eval_resize=setting("eval_resize", 256),
            seed=train_config.get("seed", 0), synthetic_samples=train_config.get("synthetic_samples", 1024),
            synthetic_classes=train_config.get("synthetic_classes", 10),
        )
        real_labels = None
        if args.real_json is not None:
            if not isinstance(dataset, ImageFiles):
                raise SystemExit("crate-eval: real_json: ReaL labels apply to the ImageNet validation image files")
            real_labels = json.loads(Path(args.real_json).read_text())
        transform = DeviceTransform(image_size, train_config.get("mean", IMAGENET_MEAN),
                                    train_config.get("std", IMAGENET_STD), train=False).to(ctx.device)
        model.to(ctx.device).float()
        metrics = evaluate(model, dataset, transform, ctx, batch_size=args.batch_size,
                           num_workers=args.num_workers, precision=args.precision, real_labels=real_labels)
    except ValueError as err:
        raise SystemExit(f"crate-eval: {err}") from err
    finally:
        distributed.teardown(ctx)
    if ctx.is_main:
        print(json.dumps(metrics, indent=2))
        if args.output:
            Path(args.output).write_text(json.dumps(metrics, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
