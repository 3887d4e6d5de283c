"""``crate-pack``: decode an image folder once into pre-resized uint8 shards (`crate_nn.data.shards`).

    crate-pack /data/imagenet /data/imagenet-shards                     train/ and val/, 16 Pillow workers
    crate-pack /data/imagenet /data/imagenet-shards --decode gpu        nvJPEG (needs torchvision and CUDA)
    crate-pack /data/imagenet /data/imagenet-shards --verify-only       check every shard against its checksum
    crate-train --preset imagenet --data.dataset shards --data.data-dir /data/imagenet-shards

The source is the ImageNet layout, ``SOURCE/<split>/<class>/<image>``; the classes are the first split's
sub-folders. Training splits (``--train-splits``) are stored as ``--load-size`` squares (shorter side resized,
central square: what training crops from), the others with the evaluation geometry (shorter side
``--eval-resize``, central ``--image-size`` crop); the training run checks that its flags match. An interrupted
pack continues where it stopped when the same command is run again; a finished one is verified by reading every
shard back against its SHA-256. Errors are one line naming the argument or file, exit status 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from . import cli
from .data import jpeg
from .data.images import image_folder
from .data.shards import Geometry, pack_split, pillow_decoder, verify_split


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="crate-pack", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="image folder: SOURCE/<split>/<class>/<image>")
    parser.add_argument("output", type=Path, help="shard folder: OUTPUT/<split>/ (created)")
    parser.add_argument("--splits", nargs="+", default=["train", "val"], help="splits to pack (default: train val)")
    parser.add_argument("--train-splits", nargs="*", default=["train"],
                        help="splits stored with the training geometry (default: train)")
    parser.add_argument("--load-size", type=int, default=256,
                        help="training squares' side (crate-train's --data.load-size)")
    parser.add_argument("--eval-resize", type=int, default=256, help="evaluation: shorter side before the crop")
    parser.add_argument("--image-size", type=int, default=224, help="evaluation: central crop")
    parser.add_argument("--shard-size", type=int, default=1024, help="images per shard file")
    parser.add_argument("--workers", type=int, default=8, help="processes reading (and with Pillow decoding) files")
    parser.add_argument("--decode", choices=("cpu", "gpu"), default="cpu",
                        help="cpu: Pillow in the workers; gpu: nvJPEG through torchvision on --device")
    parser.add_argument("--device", default="cuda", help="the GPU for --decode gpu (default cuda)")
    parser.add_argument("--skip-unreadable", action="store_true",
                        help="leave unreadable files out (listed in the manifest) instead of stopping")
    parser.add_argument("--verify-only", action="store_true", help="only check existing shards against their checksums")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    args = parser.parse_args(argv)
    for name in ("load_size", "eval_resize", "image_size", "shard_size"):
        if getattr(args, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: expected a positive integer, got {getattr(args, name)}")
    if args.workers < 0:
        parser.error(f"argument --workers: expected a non-negative integer, got {args.workers}")
    if args.image_size > args.eval_resize:
        parser.error(f"argument --image-size: the crop {args.image_size} exceeds --eval-resize {args.eval_resize}")
    if args.decode == "gpu" and not jpeg.available():
        parser.error("argument --decode: gpu needs torchvision, which is not installed")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    summary = {}
    try:
        if args.verify_only:
            for split in args.splits:
                summary[split] = {"images": verify_split(args.output / split, progress=args.progress), "verified": True}
            print(json.dumps(summary, indent=2))
            return 0
        decoder = (jpeg.nvjpeg_decoder(args.device, workers=args.workers) if args.decode == "gpu"
                   else pillow_decoder(workers=args.workers))
        classes = None
        for split in args.splits:
            samples, classes = image_folder(args.source / split, classes)
            train = split in args.train_splits
            geometry = Geometry(args.load_size, args.load_size) if train else Geometry(args.eval_resize, args.image_size)
            manifest = pack_split(samples, classes, args.source, args.output / split, geometry,
                                  shard_size=args.shard_size, decoder=decoder, strict=not args.skip_unreadable,
                                  progress=args.progress)
            images = verify_split(args.output / split, progress=args.progress)
            summary[split] = {"images": images, "skipped": len(manifest["skipped"]), "shards": len(manifest["shards"]),
                              "geometry": manifest["geometry"], "verified": True}
    except cli.EXPECTED as err:
        return cli.fail("crate-pack", err, 2)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
