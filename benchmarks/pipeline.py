"""End to end: ``crate-train --preset imagenet`` fed from a synthetic ImageNet-shaped folder, against the bare step.

In one run:

1. write ``--images`` JPEGs (``--source-size``, photograph-like, `benchmarks.data.write_jpeg`) under ``train/``
   and a small ``val/``, in ImageNet's layout;
2. pack them with ``crate-pack``'s code (`crate_nn.data.shards.pack_split`): Pillow in ``--workers`` processes,
   and nvJPEG on the GPU when torchvision is importable (with ``--jpeg``) — images/s of each;
3. the **bare step** (`benchmarks.task_step.build_step`): the imagenet preset's training step (CRATE-Base, Lion,
   bf16 on GPUs, the batched RandomResizedCrop + flip on the device, ``--compile-mode`` and ``--activations`` as
   crate-train takes them) on one fixed micro-batch of ``--batch-size`` images, data loading excluded — images/s;
4. **end to end**: `crate_nn.engine.train` on the same config for ``--steps`` steps reading the shards
   (``--dataset shards``) with each of ``--loaders`` (``threads:N``: ``--loader threads --num-workers N``;
   ``processes:N``: N DataLoader processes; ``main``: the main process reads), and, with ``--jpeg``, the JPEG
   files (``--dataset imagenet``) with each of ``--jpeg-loaders`` — the engine's own images/s from metrics.jsonl
   (log windows of ``--log-every`` steps, the first one, which holds start-up and compilation, dropped; median of
   the rest), and its ratio to the bare step. The goal is ≥ 0.9 from shards.

Evaluation and checkpoints are outside the timed windows (the engine pauses its clock for them).

    python -m benchmarks.pipeline --device cuda --batch-size 256 --steps 64 --workers 12 --compile \
        --compile-mode reduce-overhead --loaders threads:12 processes:12 main --out pipeline.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from tqdm import tqdm

from benchmarks import common
from benchmarks.data import write_jpeg_folder
from benchmarks.task_step import build_step
from crate_nn.data import jpeg
from crate_nn.data.images import image_folder
from crate_nn.data.shards import Geometry, pack_split, pillow_decoder
from crate_nn.engine import train
from crate_nn.engine.config import COMPILE_MODES, LOADERS
from crate_nn.engine.precision import ACTIVATIONS
from crate_nn.tasks import get_preset


def engine_images_per_s(run_dir: Path) -> list[float]:
    """The engine's images/s of each full log window (metrics.jsonl), in order."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [line["images_per_s"] for line in lines if "images_per_s" in line and not line.get("final")]


def loader_option(text: str) -> tuple[str, int]:
    """``threads:N`` / ``processes:N`` / ``main`` → crate-train's (``--loader``, ``--num-workers``)."""
    kind, _, count = text.partition(":")
    if text == "main":
        return "processes", 0
    if kind in LOADERS and count.isdigit() and int(count) > 0:
        return kind, int(count)
    raise ValueError(f"--loaders: expected threads:N, processes:N (N ≥ 1) or main, got {text!r}")


def loader_label(loader: str, workers: int) -> str:
    """``main process``, ``1 thread``, ``12 processes``, …"""
    if workers == 0:
        return "main process"
    return f"{workers} {loader if workers > 1 else {'threads': 'thread', 'processes': 'process'}[loader]}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pipeline", description=__doc__.splitlines()[0])
    common.add_common_args(parser, repeats=10, warmup=3)
    parser.add_argument("--batch-size", type=int, default=None, help="images per step (default 16 CPU, 256 GPU)")
    parser.add_argument("--steps", type=int, default=40, help="optimizer steps of each end-to-end run")
    parser.add_argument("--log-every", type=int, default=8, help="steps per metrics.jsonl window")
    parser.add_argument("--images", type=int, default=None,
                        help="training JPEGs (default: batch × (steps + 1), so that no epoch ends in the timing)")
    parser.add_argument("--source-size", default="500x375", help="WIDTHxHEIGHT of the JPEGs")
    parser.add_argument("--workers", type=int, default=8, help="processes writing and packing the JPEGs; N of the "
                        "default --loaders")
    parser.add_argument("--loaders", nargs="+", default=None, metavar="threads:N|processes:N|main",
                        help="how the end-to-end runs from shards read (default: threads:W processes:W main, "
                             "W = --workers)")
    parser.add_argument("--jpeg", action=argparse.BooleanOptionalAction, default=True,
                        help="also pack with nvJPEG and train from the JPEG files (--jpeg-loaders)")
    parser.add_argument("--jpeg-loaders", nargs="+", default=None, metavar="threads:N|processes:N|main",
                        help="how the end-to-end runs from JPEG files read (default: processes:W)")
    parser.add_argument("--model", default="crate_base", help="the preset's model (imagenet: crate_base)")
    parser.add_argument("--compile", action="store_true", help="torch.compile in both the bare and the engine runs")
    parser.add_argument("--compile-mode", default="default", choices=COMPILE_MODES, help="crate-train --run.compile-mode")
    parser.add_argument("--activations", default="fp32", choices=tuple(ACTIVATIONS), help="crate-train --run.activations")
    parser.add_argument("--keep", type=Path, default=None, help="write the folders here and keep them")
    args = parser.parse_args(argv)
    device = common.setup(args)
    if args.tiny:
        args.batch_size, args.steps, args.log_every, args.source_size, args.model = 4, 4, 2, "80x60", "crate_tiny"
        args.repeats, args.warmup, args.workers = 1, 1, 1
    if args.batch_size is None:
        args.batch_size = 256 if device.type == "cuda" else 16
    if args.steps < 2 * args.log_every:
        raise ValueError(f"--steps must cover at least two log windows of --log-every {args.log_every}")
    shard_loaders = [loader_option(text) for text in args.loaders or [f"threads:{args.workers}",
                                                                      f"processes:{args.workers}", "main"]]
    jpeg_loaders = [loader_option(text) for text in args.jpeg_loaders or [f"processes:{args.workers}"]]
    images = args.images or args.batch_size * (args.steps + 1)
    width, height = (int(v) for v in args.source_size.lower().split("x"))
    tiny_model = dict(image_size=32, load_size=40, eval_resize=40,
                      model_args=dict(patch_size=8, dim=32, depth=1, heads=2)) if args.tiny else {}
    common_config = dict(model=args.model, batch_size=args.batch_size, micro_batch_size=None, device=str(device),
                         compile=args.compile, compile_mode=args.compile_mode, activations=args.activations,
                         measure_epochs=(), checkpoint_every=0, progress=False, **tiny_model)
    preset = get_preset("imagenet", **common_config)
    rows = []
    with tempfile.TemporaryDirectory(prefix="crate_pipeline_") as tmp:
        root = args.keep or Path(tmp)
        source = root / "jpeg"
        started = time.perf_counter()
        write_jpeg_folder(source, images, (width, height), 100, args.seed, workers=args.workers)
        write_jpeg_folder(source, args.batch_size, (width, height), 100, args.seed + 1, split="val",
                          workers=args.workers)
        rows.append({"stage": "write JPEGs (Pillow encode)", "images": images, "workers": args.workers,
                     "img_s": images / (time.perf_counter() - started)})
        decoders = {"pack, Pillow": pillow_decoder(args.workers)}
        if args.jpeg and device.type == "cuda" and jpeg.available():
            decoders["pack, nvJPEG"] = jpeg.nvjpeg_decoder(device, args.workers)
        samples, classes = image_folder(source / "train")
        val_samples, _ = image_folder(source / "val", classes)
        for i, (label, decoder) in enumerate(decoders.items()):
            started = time.perf_counter()
            out = root / f"shards{i}"
            pack_split(samples, classes, source, out / "train", Geometry(preset.data.load_size, preset.data.load_size),
                       decoder=decoder, progress=False)
            rows.append({"stage": label, "images": images, "workers": args.workers,
                         "img_s": images / (time.perf_counter() - started)})
            pack_split(val_samples, classes, source, out / "val", Geometry(preset.data.eval_resize, preset.data.image_size),
                       decoder=decoder, progress=False)
        shards = root / "shards0"

        bare = build_step(get_preset("imagenet", **common_config, dataset="shards", data_dir=str(shards)))
        timing = common.interleaved({"bare": bare.step}, args.repeats, args.warmup, device)["bare"]
        bare_img_s = args.batch_size / timing.median
        rows.append({"stage": "bare training step (data loading excluded)", "images": args.batch_size,
                     "img_s": bare_img_s, "ratio_to_bare": 1.0, "timing": timing.summary()})
        del bare
        runs = [("shards", loader, workers) for loader, workers in shard_loaders]
        runs += [("imagenet", loader, workers) for loader, workers in jpeg_loaders] if args.jpeg else []
        for dataset, loader, workers in runs:
            run_dir = root / f"run_{dataset}_{loader}_{workers}"
            config = get_preset("imagenet", **common_config, dataset=dataset,
                                data_dir=str(shards if dataset == "shards" else source), max_steps=args.steps,
                                log_every=args.log_every, output_dir=str(run_dir), overwrite=True,
                                loader=loader, num_workers=workers)
            train(config)
            windows = engine_images_per_s(run_dir)
            rate = statistics.median(windows[1:])
            what = "crate-pack shards" if dataset == "shards" else "JPEG files (Pillow)"
            label = f"crate-train from {what}, {loader_label(loader, workers)}"
            rows.append({"stage": label, "source": dataset, "loader": loader, "workers": workers,
                         "images": args.steps * args.batch_size, "img_s": rate, "ratio_to_bare": rate / bare_img_s,
                         "windows_img_s": windows})
            tqdm.write(f"{label}: {rate:,.0f} images/s ({rate / bare_img_s:.2f} of the bare step)")
    from_shards = [row for row in rows if row.get("source") == "shards"]
    best = max(from_shards, key=lambda row: row["img_s"])
    columns: list[common.Column] = [
        ("stage", "stage", ""), ("workers", "workers", "d"), ("img_s", "images/s", ",.0f"),
        ("ratio_to_bare", "÷ bare step", ".2f"),
    ]
    notes = [
        f"imagenet preset, model {args.model}, batch {args.batch_size}, compile {args.compile} "
        f"({args.compile_mode}), activations {args.activations}, {images} JPEGs of {width}x{height}; end-to-end "
        f"images/s = the engine's metrics.jsonl windows of {args.log_every} steps, the first dropped, median of "
        f"the rest; bare step = median of {args.repeats} steps on one fixed pinned micro-batch",
        f"goal: crate-train from shards ≥ 0.9 × the bare step; best here: {best['stage']}, "
        f"{best['ratio_to_bare']:.2f}",
    ]
    extra = {"goal_ratio": 0.9, "torch_threads": torch.get_num_threads(), "bare_img_s": bare_img_s,
             "best_from_shards": {k: best[k] for k in ("stage", "loader", "workers", "img_s", "ratio_to_bare")}}
    return common.report("pipeline", device, args, rows, columns, notes, extra=extra)


if __name__ == "__main__":
    main()
