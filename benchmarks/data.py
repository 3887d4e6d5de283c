"""Input-pipeline throughput: decode + augment from a folder of JPEGs generated on the fly, per worker count.

A temporary ImageNet-layout folder (``train/<class>/*.JPEG``, ``--source-size`` pixels, smooth random content
compressed like photographs) is written first. Then, in one run, interleaved:

* ``files``: crate_nn.data's training pipeline as `crate_nn.train` uses it — `ImageFiles` (Pillow decode,
  shorter side → ``load_size``, central square) read by ``--workers`` workers of each ``--loaders`` kind
  (DataLoader processes, or threads: ``crate-train --run.loader threads``; 0 workers: the main process), then
  `DeviceTransform` (the batched RandomResizedCrop + flip, normalisation) on ``--device``;
* ``shard``: the same augmentation fed from the folder packed by `crate_nn.data.shards` (``crate-pack``: the
  decoded ``load_size`` squares, memory-mapped by `ShardImages`): what is left when no JPEG is decoded;
* ``augment``: `DeviceTransform` alone on a ready uint8 batch, and beside it ``augment-kornia``: kornia's
  per-image RandomResizedCrop + flip (what `DeviceTransform` ran before its batched crop) on the same batch;
* ``pack``: ``crate-pack``'s decoding of the whole folder into shards, with Pillow in the largest ``--workers``
  count of processes, and with nvJPEG (`crate_nn.data.jpeg`) when torchvision is importable and the device is a
  GPU.

A fourth table compares, per image in one process, Pillow's full decode + resize with a *draft* decode
(``Image.draft``: libjpeg decodes directly at 1/2, 1/4 or 1/8 scale when that still covers ``load_size``).

images/s = images of one epoch / wall time of the epoch (worker start-up included); median of the repeats.
"images/s per core" divides by max(workers, 1). The notes state what a GPU training crate_base at a target of
40% MFU (on an H100) consumes, and how many such cores feed it.

    python -m benchmarks.data --workers 0 1 2 --images 512 --out data.json
"""
from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from tqdm import tqdm

from benchmarks import common
from benchmarks.models import forward_flops
from crate_nn import data as cdata
from crate_nn import model_config
from crate_nn.data import jpeg
from crate_nn.data.shards import Decoder, Geometry, ShardImages, pack_split, pillow_decoder
from crate_nn.engine.config import LOADERS


def kornia_crop_flip(size: int) -> torch.nn.Module:
    """kornia's RandomResizedCrop(size) + horizontal flip: one crop and resize per image (kornia's default
    cropping mode), what `DeviceTransform` ran before its batched crop."""
    import kornia.augmentation as K

    return torch.nn.Sequential(K.RandomResizedCrop((size, size)), K.RandomHorizontalFlip(p=0.5))


def write_jpeg(path: Path, size: tuple[int, int], seed: int) -> None:
    """One JPEG (quality 90) of ``size`` = (width, height): 8×-upsampled uniform noise (smooth, photograph-like
    spectra) plus mild pixel noise, so that the file has a realistic size and decode cost (a pure-noise JPEG is
    far larger than a photograph)."""
    rng = np.random.default_rng(seed)
    width, height = size
    coarse = rng.integers(0, 256, (max(height // 8, 1), max(width // 8, 1), 3), dtype=np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize((width, height), Image.BICUBIC), dtype=np.int16)
    pixels = np.clip(smooth + rng.integers(-8, 9, smooth.shape), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path, quality=90)


def write_jpeg_folder(root: Path, n_images: int, size: tuple[int, int], n_classes: int, seed: int,
                      split: str = "train", workers: int = 0) -> Path:
    """Write ``n_images`` JPEGs of ``size`` (see `write_jpeg`) under ``root/split/class_XX/``, with ``workers``
    processes (0: in this one)."""
    jobs = []
    for i in range(n_images):
        folder = root / split / f"class_{i % n_classes:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        jobs.append((folder / f"img_{i:05d}.JPEG", size, seed * 1_000_003 + i))
    if workers:
        from multiprocessing import Pool

        with Pool(workers) as pool:
            list(tqdm(pool.imap_unordered(_write_job, jobs, chunksize=16), total=len(jobs), desc="writing JPEGs",
                      unit="img", leave=False))
    else:
        for job in tqdm(jobs, desc="writing JPEGs", unit="img", leave=False):
            _write_job(job)
    return root


def _write_job(job: tuple[Path, tuple[int, int], int]) -> None:
    write_jpeg(*job)


def decode_resize(path: str, load_size: int, draft: bool) -> np.ndarray:
    """Decode one file and resize its shorter side to ``load_size`` (bilinear): the work of `ImageFiles`."""
    with Image.open(path) as im:
        if draft:
            im.draft("RGB", (load_size, load_size))  # libjpeg DCT scaling; keeps both sides >= load_size
        im = im.convert("RGB")
        scale = load_size / min(im.size)
        im = im.resize((max(load_size, round(im.width * scale)), max(load_size, round(im.height * scale))),
                       Image.BILINEAR)
        return np.asarray(im)


def epoch_runner(
    dataset, batch_size: int, workers: int, transform: Callable[[torch.Tensor], torch.Tensor] | None,
    device: torch.device, threads: bool = False,
) -> Callable[[], None]:
    """One epoch of the loader (fresh workers each time, as at every epoch of training; ``threads``: threads of
    this process instead of DataLoader processes); each uint8 batch is moved to ``device`` and, when ``transform``
    is given, augmented there."""

    def run() -> None:
        batches = cdata.EpochBatches(len(dataset), global_batch=batch_size, micro_batch=batch_size, seed=0)
        for batch in cdata.loader(dataset, batches, num_workers=workers, threads=threads):
            images = batch.images.to(device, non_blocking=True)
            if transform is not None:
                transform(images)

    return run


PIPELINES = {
    "files-decode": "JPEG files -> uint8 batch (decode only)",
    "files-augment": "JPEG files -> augmented batch",
    "shard-read": "uint8 shard -> uint8 batch (read only)",
    "shard-augment": "uint8 shard -> augmented batch",
    "augment": "augment only (DeviceTransform rrc_flip: one grid_sample, one batch)",
    "augment-kornia": "augment only (kornia RandomResizedCrop + flip per image, one batch)",
    "decode_full": "decode + resize, Pillow full (1 process)",
    "decode_draft": "decode + resize, Pillow draft (1 process)",
    "pack-pillow": "crate-pack, Pillow (workers decode)",
    "pack-nvjpeg": "crate-pack, nvJPEG on the GPU (workers read files)",
}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.data", description=__doc__.splitlines()[0])
    common.add_common_args(parser, repeats=3, warmup=1)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2], help="worker counts (0: main process)")
    parser.add_argument("--loaders", nargs="+", default=list(LOADERS), choices=LOADERS,
                        help="worker kinds: DataLoader processes, threads of this process (crate-train --run.loader)")
    parser.add_argument("--images", type=int, default=512, help="JPEGs in the generated folder (= one epoch)")
    parser.add_argument("--source-size", default="500x375", help="WIDTHxHEIGHT of the JPEGs (ImageNet-like)")
    parser.add_argument("--load-size", type=int, default=256, help="shorter side after decoding (crate_nn preset)")
    parser.add_argument("--image-size", type=int, default=224, help="crop the model sees")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--keep", type=Path, default=None, help="write the JPEG folder here and keep it")
    args = parser.parse_args(argv)
    if args.tiny:
        args.workers, args.images, args.source_size = [0, 1], 16, "80x60"
        args.load_size, args.image_size, args.batch_size, args.repeats, args.warmup = 40, 32, 8, 1, 0
    device = common.setup(args)
    try:
        width, height = (int(v) for v in args.source_size.lower().split("x"))
    except ValueError as err:
        raise ValueError(f"--source-size must be WIDTHxHEIGHT, got {args.source_size!r}") from err
    if min(args.workers) < 0 or args.images < args.batch_size:
        raise ValueError(f"--workers must be >= 0 and --images >= --batch-size, got {args.workers}, {args.images}")

    with tempfile.TemporaryDirectory(prefix="crate_data_bench_") as tmp:
        root = write_jpeg_folder(args.keep or Path(tmp), args.images, (width, height), 10, args.seed)
        files = cdata.build_dataset(
            "imagefolder", "train", data_dir=str(root), train=True, image_size=args.image_size,
            load_size=args.load_size, eval_resize=args.load_size,
        )
        geometry = Geometry(args.load_size, args.load_size)
        pack_split(files.samples, files.info.classes, root, Path(tmp) / "shards", geometry, progress=False,
                   decoder=pillow_decoder(max(args.workers)))
        shards = ShardImages(Path(tmp) / "shards")
        packs = iter(range(10**6))  # a fresh output folder for every timed pack

        def packer(decoder: Decoder) -> Callable[[], None]:
            return lambda: pack_split(files.samples, files.info.classes, root, Path(tmp) / f"pack{next(packs)}",
                                      geometry, decoder=decoder, progress=False)

        transform = cdata.DeviceTransform(
            args.image_size, cdata.IMAGENET_MEAN, cdata.IMAGENET_STD, train=True, augment="rrc_flip"
        ).to(device)
        kornia = kornia_crop_flip(args.image_size).to(device)
        ready = torch.stack([shards[i][0] for i in range(args.batch_size)]).to(device)
        paths = [path for path, _ in files.samples]
        contenders: dict[str | tuple, Callable[[], None]] = {
            "augment": lambda: transform(ready),
            "augment-kornia": lambda: kornia(ready.float() / 255),
            "decode_full": lambda: [decode_resize(p, args.load_size, draft=False) for p in paths],
            "decode_draft": lambda: [decode_resize(p, args.load_size, draft=True) for p in paths],
            ("pack-pillow", max(args.workers)): packer(pillow_decoder(max(args.workers))),
        }
        if device.type == "cuda" and jpeg.available():
            contenders["pack-nvjpeg", max(args.workers)] = packer(jpeg.nvjpeg_decoder(device, max(args.workers)))
        readers = [(w, loader) for w in args.workers for loader in (args.loaders if w else ["main"])]
        for w, loader in readers:
            for source, dataset in (("files", files), ("shard", shards)):
                read = f"{source}-decode" if source == "files" else f"{source}-read"
                for name, augment in ((read, None), (f"{source}-augment", transform)):
                    contenders[name, w, loader] = epoch_runner(dataset, args.batch_size, w, augment, device,
                                                               threads=loader == "threads")
        timings = common.interleaved(contenders, args.repeats, args.warmup, device)

    rows = []
    for key, timing in timings.items():
        pipeline, workers, loader = key if isinstance(key, tuple) and len(key) == 3 else (
            (*key, "processes") if isinstance(key, tuple) else (key, None, None))
        rate = (args.batch_size if pipeline.startswith("augment") else args.images) / timing.median
        rows.append({
            "pipeline": PIPELINES[pipeline],
            "workers": workers,
            "loader": loader,
            "img_s": rate,
            "img_s_per_core": rate / max(workers or 0, 1),
            "timing": timing.summary(),
        })
    base = model_config("crate_base")
    needed = 0.40 * common.peak_bf16_flops("H100 SXM") / (3 * forward_flops(base))
    per_core = max(r["img_s_per_core"] for r in rows if r["pipeline"] == PIPELINES["files-decode"])
    notes = [
        f"{args.images} JPEGs of {width}x{height}, load_size {args.load_size}, crop {args.image_size}, "
        f"batch {args.batch_size}, augmentation on {device}; median of {args.repeats} interleaved repeats",
        "images/s per core = images/s / max(workers, 1) (the main process, which moves and augments batches, is "
        "not counted)",
        f"crate_base at 224², 40% MFU on an H100 (989 TFLOP/s bf16) trains {needed:,.0f} images/s; at the best "
        f"JPEG decode rate per core measured here ({per_core:,.0f} images/s, augmentation left to the GPU) that "
        f"needs {needed / per_core:,.0f} cores",
    ]
    columns: list[common.Column] = [
        ("pipeline", "pipeline", ""), ("workers", "workers", "d"), ("loader", "read by", ""), ("img_s", "images/s", ".1f"),
        ("img_s_per_core", "images/s per core", ".1f"),
    ]
    extra = {"h100_crate_base_40pct_mfu_img_s": needed, "best_jpeg_decode_img_s_per_core": per_core}
    return common.report("data", device, args, rows, columns, notes, extra=extra)


if __name__ == "__main__":
    main()
