"""Train a CRATE classifier from a preset (``crate_nn.presets``); every preset value can be overridden.

One process (CPU or one GPU):
    crate-train --preset digits
    crate-train --preset imagenet --data-dir /data/imagenet --micro-batch-size 256
One node, 8 GPUs (DistributedDataParallel, NCCL):
    torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset imagenet --data-dir /data/imagenet
Two nodes, 8 GPUs each (run on both nodes; HOST:PORT reachable from both):
    torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m crate_nn.train --preset imagenet --data-dir /data/imagenet
Fine-tuning:
    crate-train --preset finetune --init-from runs/imagenet/checkpoints/last.pt --dataset cifar10 --data-dir D
Resume an interrupted run (same command plus --resume):
    crate-train --preset imagenet --data-dir /data/imagenet --resume

Programmatic: ``train(get_preset("digits", epochs=20)) -> TrainResult``.

The run directory ``--output-dir`` receives ``config.json`` (the resolved config), ``metrics.jsonl`` (epoch, step,
train_loss, lr, images_per_s; val_loss, val_top1, val_top5 at evaluations), ``checkpoints/step_XXXXXXX.pt`` and
``checkpoints/last.pt`` (model, optimizer, scheduler, RNG states, data position, config: readable with
``crate_nn.load`` for the model and ``--resume`` for everything) and, at ``measure_epochs``, the layer-wise
measurements of ``crate_nn.measure_layers`` (both protocols) under ``measurements/``.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import shutil
import sys
import time
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from . import checkpoint, distributed
from .checkpoint import load_official_checkpoint
from .classifier import resample_pos_embed
from .data import DeviceTransform, EpochBatches, build_dataset, collate, loader
from .evaluate import autocast, evaluate
from .presets import PRESETS, TrainConfig, get_preset
from .registry import create_model
from .schedule import build_scheduler

NO_DECAY_NAMES = ("pos_embed", "cls_token")
# Fields that may differ between an interrupted run and its --resume without changing the result.
RESUME_FREE_FIELDS = {"resume", "max_steps", "output_dir", "device", "num_workers", "progress", "log_every",
                      "eval_every", "checkpoint_every", "keep_checkpoints", "tensorboard", "strict", "data_dir",
                      "compile", "measure_samples"}


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; the run stopped before updating the weights."""


@dataclass
class TrainResult:
    """What ``train`` returns: the run directory, the final checkpoint and the final metrics."""

    output_dir: str
    checkpoint: str
    metrics: dict
    steps: int
    seconds: float


# --------------------------------------------------------------------------------------------- pieces
def param_groups(model: nn.Module, weight_decay: float, decay_all: bool) -> list[dict]:
    """Two optimizer groups: weight decay on matrices (patch projection, U, W, D, head), none on norms, biases
    and the embeddings ``pos_embed`` and ``cls_token`` — unless ``decay_all``."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skip = not decay_all and (p.ndim < 2 or name.split(".")[-1] in NO_DECAY_NAMES)
        (no_decay if skip else decay).append((name, p))
    groups = [{"params": [p for _, p in decay], "weight_decay": weight_decay, "names": [n for n, _ in decay]}]
    if no_decay:
        groups.append({"params": [p for _, p in no_decay], "weight_decay": 0.0, "names": [n for n, _ in no_decay]})
    return groups


def build_optimizer(config: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """Lion (``lion-pytorch``: θ ← θ(1 − lr·wd) − lr·sign(β1·m + (1 − β1)·g), m ← β2·m + (1 − β2)·g) or AdamW."""
    groups = param_groups(model, config.weight_decay, config.weight_decay_all)
    if config.optimizer == "lion":
        from lion_pytorch import Lion

        return Lion(groups, lr=config.lr, betas=tuple(config.betas), weight_decay=config.weight_decay)
    return torch.optim.AdamW(groups, lr=config.lr, betas=tuple(config.betas), weight_decay=config.weight_decay)


def micro_step(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, label_smoothing: float,
               accumulation: int, precision_context=contextlib.nullcontext()) -> torch.Tensor:
    """Forward and backward of one micro-batch: adds grad(loss / accumulation) to the parameters' ``.grad`` and
    returns the (detached) label-smoothed cross-entropy, so ``accumulation`` equal micro-batches accumulate the
    gradient of their mean loss, i.e. of one batch of the total size."""
    with precision_context:
        logits = model(images)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 autocast → loss in float32
    loss = F.cross_entropy(logits, labels, label_smoothing=label_smoothing)
    (loss / accumulation).backward()
    return loss.detach()


def rng_state() -> dict:
    """Python, NumPy, torch and CUDA generator states in weights_only-safe types (numpy's array as a tensor)."""
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": list(random.getstate()[1]) + [random.getstate()[2]],
        "python_version": random.getstate()[0],
        "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    """Inverse of ``rng_state``."""
    python = state["python"]
    random.setstate((state["python_version"], tuple(python[:-1]), python[-1]))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def initialise_from(model: nn.Module, path: str) -> list[str]:
    """Copy the weights of a crate_nn or authors' checkpoint into ``model`` (fine-tuning).

    The head's final Linear is left freshly initialised when the class count differs; the position embedding is
    resampled (bicubic) when the patch grid differs; any other mismatch raises ValueError. Returns the names of
    the parameters left at their initialisation.
    """
    if not Path(path).is_file():
        raise ValueError(f"init_from: {path!r} does not exist")
    payload = checkpoint.read(path)
    if isinstance(payload, dict) and payload.get("format") == checkpoint.FORMAT:
        source = payload["model"]
    else:
        source = load_official_checkpoint(payload, heads=model.config.heads).state_dict()
    target = model.state_dict()
    copied, reinitialised = {}, []
    for key, value in target.items():
        if key not in source:
            raise ValueError(f"init_from: {path} has no tensor {key!r}")
        incoming = source[key]
        if key == "pos_embed" and incoming.shape != value.shape:
            side = math.isqrt(value.shape[1] - 1)
            incoming = resample_pos_embed(incoming, (side, side))
        if key.startswith("head.fc.") and incoming.shape != value.shape:
            reinitialised.append(key)
            continue
        if incoming.shape != value.shape:
            raise ValueError(f"init_from: {key} has shape {tuple(incoming.shape)} in {path}, the model needs "
                             f"{tuple(value.shape)}")
        copied[key] = incoming
    model.load_state_dict(copied, strict=False)
    return reinitialised


def resolve_batches(config: TrainConfig, world_size: int) -> tuple[int, int]:
    """(micro-batch per process, accumulation steps) such that micro × accumulation × processes = batch_size."""
    if config.batch_size % world_size:
        raise ValueError(f"batch_size: {config.batch_size} is not divisible across {world_size} processes")
    per_process = config.batch_size // world_size
    micro = config.micro_batch_size or per_process
    if per_process % micro:
        raise ValueError(
            f"micro_batch_size: {micro} does not divide the per-process batch {per_process} "
            f"(batch_size {config.batch_size} / {world_size} processes)"
        )
    return micro, per_process // micro


def check_resumable(saved: dict, config: TrainConfig) -> None:
    """Refuse to resume with a config that changes the run (anything but ``RESUME_FREE_FIELDS``)."""
    current = json.loads(json.dumps(dataclasses.asdict(config)))
    saved = json.loads(json.dumps(saved))
    changed = sorted(k for k in current if k not in RESUME_FREE_FIELDS and saved.get(k) != current[k])
    if changed:
        details = "; ".join(f"{k}: saved {saved.get(k)!r}, now {current[k]!r}" for k in changed)
        raise ValueError(f"resume: the config differs from the checkpoint's in {details}")


class RunFiles:
    """The run directory: config.json, metrics.jsonl, checkpoints/ (written by the main process only)."""

    def __init__(self, output_dir: str, enabled: bool, keep: int, tensorboard: bool):
        self.root = Path(output_dir)
        self.checkpoints = self.root / "checkpoints"
        self.last = self.checkpoints / "last.pt"
        self.enabled, self.keep = enabled, keep
        self.writer = None
        if enabled:
            self.checkpoints.mkdir(parents=True, exist_ok=True)
            if tensorboard:
                try:
                    from torch.utils.tensorboard import SummaryWriter
                except ImportError as err:
                    raise ValueError("tensorboard: the tensorboard package is not installed") from err
                self.writer = SummaryWriter(str(self.root / "tensorboard"))

    def forget_after(self, step: int) -> None:
        """Drop the metrics.jsonl lines of steps after ``step`` (a resumed run writes them again)."""
        path = self.root / "metrics.jsonl"
        if self.enabled and path.is_file():
            kept = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= step]
            path.write_text("".join(line + "\n" for line in kept))

    def log(self, record: dict) -> None:
        if not self.enabled:
            return
        with open(self.root / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.writer is not None:
            for key, value in record.items():
                if key not in ("epoch", "step") and isinstance(value, (int, float)):
                    self.writer.add_scalar(key, value, record["step"])

    def save(self, model: nn.Module, step: int, extra: dict) -> None:
        """``step_XXXXXXX.pt`` then an atomic copy to ``last.pt``; keeps the newest ``keep`` step files."""
        if not self.enabled:
            return
        path = self.checkpoints / f"step_{step:07d}.pt"
        checkpoint.save(path, model, extra)
        tmp = self.checkpoints / ".last.pt.tmp"
        shutil.copyfile(path, tmp)
        os.replace(tmp, self.last)
        if self.keep > 0:
            for old in sorted(self.checkpoints.glob("step_*.pt"))[:-self.keep]:
                old.unlink()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def measure(model: nn.Module, images: torch.Tensor, directory: Path, epoch: int) -> dict:
    """Layer-wise R^c and sparsity (``crate_nn.measure_layers``, both protocols) of ``model`` after ``epoch``
    epochs: ``directory/epoch_XXXX.json`` (per-image values, mean, std) and ``directory/layers_<protocol>.png``
    with one curve per measured epoch so far (Fig. 15: random init vs trained)."""
    from .diagnostics import PROTOCOLS, LayerMeasurements, Stat, measure_layers
    from .plots import plot_layer_curves

    directory.mkdir(parents=True, exist_ok=True)
    record = {"epoch": epoch}
    for protocol in PROTOCOLS:
        result = measure_layers(model, images, protocol=protocol)
        record[protocol] = {"eps": result.eps, **{
            kind: [{"mean": s.mean, "std": s.std, "values": s.values.tolist()} for s in getattr(result, kind)]
            for kind in ("compression", "sparsity")}}
    (directory / f"epoch_{epoch:04d}.json").write_text(json.dumps(record) + "\n")
    saved = [json.loads(p.read_text()) for p in sorted(directory.glob("epoch_*.json"))]
    for protocol in PROTOCOLS:
        curves = {
            f"epoch {r['epoch']}" if r["epoch"] else "random init": LayerMeasurements(
                protocol, r[protocol]["eps"],
                *([Stat(torch.tensor(s["values"], dtype=torch.float64)) for s in r[protocol][kind]]
                  for kind in ("compression", "sparsity")),
                thresholded={},
            )
            for r in saved
        }
        plot_layer_curves(curves).savefig(directory / f"layers_{protocol}.png", dpi=120)
    return record


# --------------------------------------------------------------------------------------------- the loop
def train(config: TrainConfig) -> TrainResult:
    """Run (or resume) the training described by ``config``; returns the final metrics and checkpoint path."""
    config.validate()
    resolve_batches(config, int(os.environ.get("WORLD_SIZE", "1")))  # fail before joining a process group
    ctx = distributed.setup(config.device)
    try:
        return _train(config, ctx)
    finally:
        distributed.teardown(ctx)


def _train(config: TrainConfig, ctx: distributed.Context) -> TrainResult:
    started = time.perf_counter()
    micro, accumulation = resolve_batches(config, ctx.world_size)
    seed_everything(config.seed)
    data = dict(data_dir=config.data_dir, image_size=config.image_size, load_size=config.load_size,
                eval_resize=config.eval_resize, seed=config.seed, strict=config.strict,
                synthetic_samples=config.synthetic_samples, synthetic_classes=config.synthetic_classes)
    train_set = build_dataset(config.dataset, config.train_split, train=True, **data)
    eval_set = build_dataset(config.dataset, config.eval_split, train=False, **data)
    info = train_set.info
    steps_per_epoch = len(train_set) // config.batch_size
    if steps_per_epoch < 1:
        raise ValueError(f"batch_size: {config.batch_size} exceeds the {len(train_set)} training images")
    total_steps = config.epochs * steps_per_epoch
    warmup_steps = round(config.warmup_epochs * steps_per_epoch)

    model = create_model(config.model, **{**config.model_args, "image_size": config.image_size,
                                          "num_classes": info.num_classes, "in_channels": info.in_channels})
    reinitialised = initialise_from(model, config.init_from) if config.init_from else []
    model.to(ctx.device)
    raw_model = model
    optimizer = build_optimizer(config, model)
    scheduler = build_scheduler(optimizer, warmup_steps, total_steps, config.min_lr_ratio)
    # Augmentation randomness differs between processes; the initialisation above is the same everywhere.
    torch.manual_seed(config.seed * 1000 + 1 + ctx.rank)
    run = RunFiles(config.output_dir, ctx.is_main, config.keep_checkpoints, config.tensorboard)

    epoch, step_in_epoch, step = 0, 0, 0
    if config.resume:
        if not run.last.is_file():
            raise ValueError(f"resume: no checkpoint {run.last} to resume from")
        state = checkpoint.read(run.last, map_location="cpu")
        check_resumable(state["train_config"], config)
        raw_model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        epoch, step_in_epoch, step = (state["position"][k] for k in ("epoch", "step_in_epoch", "step"))
        set_rng_state(state["rng"][ctx.rank] if ctx.rank < len(state["rng"]) else state["rng"][0])
        run.forget_after(step)
    if ctx.is_main:
        resolved = {**dataclasses.asdict(config), "world_size": ctx.world_size, "micro_batch_size": micro,
                    "accumulation_steps": accumulation, "steps_per_epoch": steps_per_epoch,
                    "total_steps": total_steps, "warmup_steps": warmup_steps,
                    "no_weight_decay": [n for g in optimizer.param_groups if g["weight_decay"] == 0
                                        for n in g["names"]],
                    "reinitialised_from_init": reinitialised, "model_config": dataclasses.asdict(model.config)}
        (run.root / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")

    if config.compile:
        model = torch.compile(model)
    if ctx.distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    train_transform = DeviceTransform(
        config.image_size, config.mean, config.std, train=True, augment=config.augment,
        crop_scale=config.crop_scale, randaugment_n=config.randaugment_n, randaugment_m=config.randaugment_m,
        shift=config.shift,
    ).to(ctx.device)
    eval_transform = DeviceTransform(config.image_size, config.mean, config.std, train=False).to(ctx.device)
    measure_images = None
    if ctx.is_main and config.measure_epochs:
        count = min(config.measure_samples, len(eval_set))
        measure_images = eval_transform(collate([eval_set[i] for i in range(count)]).images.to(ctx.device))

    def evaluate_now(dataset) -> dict:
        with torch.random.fork_rng(devices=[ctx.device] if ctx.device.type == "cuda" else []):
            return evaluate(model, dataset, eval_transform, ctx, batch_size=micro,
                            num_workers=config.num_workers, precision=config.precision)

    def measure_now(done_epochs: int) -> None:
        if measure_images is not None and done_epochs in config.measure_epochs:
            with torch.random.fork_rng(devices=[ctx.device] if ctx.device.type == "cuda" else []):
                raw_model.eval()
                measure(raw_model, measure_images, run.root / "measurements", done_epochs)
                raw_model.train()

    def save_checkpoint() -> None:
        states = [rng_state()]
        if ctx.distributed:
            states = [None] * ctx.world_size
            torch.distributed.all_gather_object(states, rng_state())
        run.save(raw_model, step, {
            "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "scaler": None,
            "rng": states, "train_config": dataclasses.asdict(config),
            "position": {"epoch": epoch, "step_in_epoch": step_in_epoch, "step": step},
        })

    last_step = total_steps if config.max_steps is None else min(total_steps, config.max_steps)
    if step == 0:
        measure_now(0)
    metrics: dict = {}
    skipped_total = 0
    bar = tqdm(total=last_step, initial=step, disable=not (ctx.is_main and config.progress), unit="step",
               dynamic_ncols=True)
    model.train()
    window_loss, window_steps, window_images, window_start = 0.0, 0, 0, time.perf_counter()
    while step < last_step:
        batches = EpochBatches(len(train_set), global_batch=config.batch_size, micro_batch=micro, rank=ctx.rank,
                               world_size=ctx.world_size, seed=config.seed, epoch=epoch, start_step=step_in_epoch)
        micro_batches = iter(loader(train_set, batches, config.num_workers, pin_memory=ctx.device.type == "cuda"))
        while step_in_epoch < steps_per_epoch and step < last_step:
            lr = optimizer.param_groups[0]["lr"]
            loss_sum = torch.zeros((), device=ctx.device)
            images_seen, skipped = 0, 0
            for i in range(accumulation):
                batch = next(micro_batches)
                if batch.skipped:
                    skipped += len(batch.skipped)
                    for path in batch.skipped:
                        tqdm.write(f"crate-train: skipped unreadable image {path}", file=sys.stderr)
                images = train_transform(batch.images.to(ctx.device, non_blocking=True))
                labels = batch.labels.to(ctx.device, non_blocking=True)
                sync = model.no_sync() if ctx.distributed and i < accumulation - 1 else contextlib.nullcontext()
                with sync:
                    loss_sum += micro_step(model, images, labels, config.label_smoothing, accumulation,
                                           autocast(ctx.device, config.precision))
                images_seen += labels.numel()
            # one all-reduce for the mean loss over processes and the unreadable files of this step
            summed = distributed.all_reduce_sum(torch.stack([loss_sum / accumulation, loss_sum.new_tensor(skipped)]),
                                                ctx)
            loss_value, skipped_total = summed[0].item() / ctx.world_size, skipped_total + int(summed[1].item())
            grad_norm = (nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                         if config.grad_clip is not None else torch.zeros(()))
            if not (math.isfinite(loss_value) and torch.isfinite(grad_norm)):
                optimizer.zero_grad(set_to_none=True)
                where = run.last if run.last.is_file() else "none written yet"
                raise NonFiniteLossError(
                    f"training loss is {loss_value} (gradient norm {grad_norm.item()}) at optimizer step {step + 1} "
                    f"(epoch {epoch}); stopped without updating the weights; last good checkpoint: {where}"
                )
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            step_in_epoch += 1
            window_loss += loss_value
            window_steps += 1
            window_images += images_seen * ctx.world_size
            bar.update(1)
            if step % config.log_every == 0 or step == last_step:
                elapsed = time.perf_counter() - window_start
                record = {"epoch": step / steps_per_epoch, "step": step, "train_loss": window_loss / window_steps,
                          "lr": lr, "images_per_s": window_images / max(elapsed, 1e-9),
                          "skipped_images": skipped_total}
                run.log(record)
                bar.set_postfix(loss=f"{record['train_loss']:.4f}", lr=f"{lr:.2e}",
                                img_s=f"{record['images_per_s']:.0f}")
                window_loss, window_steps, window_images, window_start = 0.0, 0, 0, time.perf_counter()
            if config.checkpoint_every and step % config.checkpoint_every == 0 and step_in_epoch < steps_per_epoch:
                save_checkpoint()
        if step_in_epoch == steps_per_epoch:
            paused = time.perf_counter()  # evaluation and checkpoints do not count against images/s
            epoch, step_in_epoch = epoch + 1, 0
            finished = step == last_step
            if epoch % config.eval_every == 0 or finished:
                metrics = {f"val_{k}": v for k, v in evaluate_now(eval_set).items()}
                run.log({"epoch": float(epoch), "step": step, **metrics})
                if ctx.is_main:
                    tqdm.write(f"epoch {epoch}: val_loss {metrics['val_loss']:.4f} "
                               f"val_top1 {metrics['val_top1']:.4f} val_top5 {metrics['val_top5']:.4f}")
            measure_now(epoch)
            save_checkpoint()
            window_start += time.perf_counter() - paused
    bar.close()
    if step_in_epoch:  # stopped inside an epoch (max_steps)
        save_checkpoint()
        metrics = {f"val_{k}": v for k, v in evaluate_now(eval_set).items()}
        run.log({"epoch": step / steps_per_epoch, "step": step, **metrics})
    if not metrics:  # resumed a finished run
        metrics = {f"val_{k}": v for k, v in evaluate_now(eval_set).items()}
    if config.test_split:
        test_set = build_dataset(config.dataset, config.test_split, train=False, **data)
        metrics.update({f"test_{k}": v for k, v in evaluate_now(test_set).items()})
        run.log({"epoch": step / steps_per_epoch, "step": step,
                 **{k: v for k, v in metrics.items() if k.startswith("test_")}})
    metrics["skipped_images"] = skipped_total
    seconds = time.perf_counter() - started
    run.close()
    return TrainResult(str(run.root), str(run.last), metrics, step, seconds)


# --------------------------------------------------------------------------------------------- command line
def _field_parser(hint) -> tuple[dict, bool]:
    """argparse keyword arguments for a TrainConfig field of type ``hint``; (kwargs, accepts None)."""
    args = typing.get_args(hint)
    optional = (typing.get_origin(hint) in (typing.Union, types.UnionType)) and type(None) in args
    if optional:
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint)
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction}, optional
    if origin is tuple:
        inner = typing.get_args(hint)[0]
        return {"nargs": "*", "type": inner}, optional
    if hint is dict or origin is dict:
        return {"nargs": "*", "type": _key_value, "metavar": "KEY=VALUE"}, optional
    return {"type": _none_or(hint) if optional else hint}, optional


def _none_or(kind):
    def convert(text: str):
        return None if text.lower() == "none" else kind(text)

    convert.__name__ = kind.__name__
    return convert


def _key_value(text: str) -> tuple[str, object]:
    import ast

    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    """``--preset NAME`` then any ``--field-name VALUE`` of TrainConfig (tuples: several values; dicts: KEY=VALUE)."""
    first = argparse.ArgumentParser(add_help=False)
    first.add_argument("--preset", default="synthetic")
    known, _ = first.parse_known_args(argv)
    parser = argparse.ArgumentParser(prog="crate-train", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="synthetic", choices=sorted(PRESETS),
                        help="the experiment whose values the other flags override (default: synthetic)")
    if known.preset not in PRESETS:
        parser.error(f"argument --preset: invalid choice: {known.preset!r} (choose from {', '.join(PRESETS)})")
    defaults = PRESETS[known.preset]()
    hints = typing.get_type_hints(TrainConfig)
    for f in dataclasses.fields(TrainConfig):
        if f.name == "preset":
            continue
        kwargs, _ = _field_parser(hints[f.name])
        parser.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=argparse.SUPPRESS,
                            help=f"{known.preset}: {getattr(defaults, f.name)!r}", **kwargs)
    overrides = vars(parser.parse_args(argv))
    preset = overrides.pop("preset")
    for name, value in overrides.items():
        if isinstance(value, list):
            overrides[name] = dict(value) if hints[name] is dict else tuple(value)
    return get_preset(preset, **overrides)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crate-train`` and ``python -m crate_nn.train``."""
    config = parse_args(argv)
    try:
        result = train(config)
    except (ValueError, NonFiniteLossError) as err:
        print(f"crate-train: {err}", file=sys.stderr)
        return 1
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps({"output_dir": result.output_dir, "checkpoint": result.checkpoint, "steps": result.steps,
                          "seconds": round(result.seconds, 1), **result.metrics}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
