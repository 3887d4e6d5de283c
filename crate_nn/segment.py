"""``crate-segment``: emergent segmentation of a checkpoint — figures for your images, COCO/VOC scores, and the
controlled CRATE-vs-ViT experiment (Sec. 4.3, App. C.10, Tables 7 and 17).

Figures for your own images (class-token attention per head, MaskCut masks and boxes, PCA of the patch codes):
    crate-segment maps runs/objects_crate/checkpoints/last.pt photo1.jpg photo2.jpg --layer -2 --output-dir seg/
    crate-segment maps crate_small.pth --model crate_small photo.jpg
COCO val2017 (class-agnostic detection and segmentation AP of MaskCut, Table 7; needs pycocotools):
    crate-segment coco CKPT --coco-dir /data/coco --layer -1 --image-size 480 --output coco.json
PASCAL VOC 2012 coarse segmentation (attention masks, 21-class mIoU with the oracle class, Table 17):
    crate-segment voc CKPT --voc-dir /data/VOCdevkit --layer -1 --output voc.json
The laptop-scale Table 17 (trains CRATE, CRATE-MLP, CRATE-MHSA and ViT on the built-in objects dataset):
    crate-segment experiment --seeds 0 1 2 3 4 --output-dir runs/objects --report-dir results/segmentation
    crate-segment experiment --extra crate_dino=runs/dino0/checkpoints/last.pt,runs/dino1/checkpoints/last.pt

The checkpoint is any image model with a class token: a classifier, a DINO run (its teacher's backbone) or a
CRATE-MAE (official wiring; its encoder); anything else (a language model) is refused in one line. Images are
resized to --image-size (default: the model's) without keeping their aspect ratio, as MaskCut does; a size other
than the model's resamples the position embedding. Normalisation comes from the preprocessing the checkpoint records
(`crate_nn.preprocessing`; ImageNet's mean and std otherwise). Errors are one line naming the argument, exit status 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from . import cli, extras
from .data.transforms import DeviceTransform
from .loading import add_arguments, load_model
from .preprocessing import channel_count, normalisation


def _common(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, "an image model (classifier, DINO or CRATE-MAE)")
    parser.add_argument("--layer", type=int, default=-1, help="encoder layer, 0-based, negative from the end "
                        "(the papers show -2 for CRATE, -1 for ViT)")
    parser.add_argument("--image-size", type=int, default=None, help="side the images are resized to")
    parser.add_argument("--tau", type=float, default=0.2, help="MaskCut's cosine threshold of the binary graph")
    parser.add_argument("--device", default="cpu")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="crate-segment", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    maps = commands.add_parser("maps", help="attention, MaskCut and PCA figures for image files")
    _common(maps)
    maps.add_argument("images", nargs="+", help="image files")
    maps.add_argument("--num-objects", type=int, default=3)
    maps.add_argument("--output-dir", default="segmentation")
    coco = commands.add_parser("coco", help="MaskCut AP on COCO (class-agnostic)")
    _common(coco)
    coco.add_argument("--coco-dir", required=True, help="holds annotations/instances_<split>.json and <split>/")
    coco.add_argument("--split", default="val2017")
    coco.add_argument("--num-objects", type=int, default=3)
    coco.add_argument("--limit", type=int, default=None, help="only the first N images")
    coco.add_argument("--output", default=None, help="also write the metrics to this JSON file")
    voc = commands.add_parser("voc", help="coarse segmentation mIoU on PASCAL VOC 2012")
    _common(voc)
    voc.add_argument("--voc-dir", required=True, help="VOCdevkit/VOC2012 or a folder containing it")
    voc.add_argument("--split", default="val")
    voc.add_argument("--mass", type=float, default=0.6, help="attention mass kept by the threshold")
    voc.add_argument("--output", default=None, help="also write the metrics to this JSON file")
    experiment = commands.add_parser("experiment", help="the laptop-scale Table 17 on the built-in objects data")
    experiment.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    experiment.add_argument("--variants", nargs="+", default=None, help="crate crate_mlp crate_mhsa vit (default all)")
    experiment.add_argument("--output-dir", default="runs/objects", help="the training runs (one folder each)")
    experiment.add_argument("--report-dir", default=None, help="results.json, table.md and figures (default: "
                            "--output-dir; the committed table: results/segmentation)")
    experiment.add_argument("--epochs", type=int, default=None, help="override the presets' epochs")
    experiment.add_argument("--max-steps", type=int, default=None, help="stop every training early (smoke runs)")
    experiment.add_argument("--extra", action="append", default=[], metavar="NAME=CKPT[,CKPT...]",
                            help="extra backbones as rows, one checkpoint per seed (e.g. DINO-trained CRATE)")
    experiment.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    for name in ("image_size", "num_objects", "limit", "epochs", "max_steps"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            parser.error(f"argument --{name.replace('_', '-')}: expected a positive integer, got {value}")
    return args


def load_backbone(args: argparse.Namespace) -> tuple[nn.Module, DeviceTransform, int]:
    """The image backbone (`image_backbone`: a classifier, a DINO run's teacher or a CRATE-MAE's encoder; float32,
    eval mode, on ``args.device``), its input transform and the image side to use."""
    from .analysis.segmentation import image_backbone

    model, _ = load_model(args.checkpoint, args.model, args.heads)
    mean, std = normalisation(model)  # recorded on the whole model, before its backbone is taken out
    model = image_backbone(model, f"checkpoint: {args.checkpoint}")
    size = args.image_size or model.config.image_size
    if size % model.config.patch_size:
        raise ValueError(f"image_size: {size} is not divisible by the model's patch size {model.config.patch_size}")
    if size != model.config.image_size:
        model.config = dataclasses.replace(model.config, dynamic_img_size=True)
    if len(mean) != model.config.in_channels:
        raise ValueError(f"checkpoint: normalisation for {channel_count(len(mean))}, the model takes "
                         f"{model.config.in_channels}")
    device = torch.device(args.device)
    return model.float().eval().to(device), DeviceTransform(size, mean, std, train=False).to(device), size


def maps(args: argparse.Namespace) -> dict:
    """Per image: ``<stem>_attention.png``, ``<stem>_maskcut.png`` (and the boxes in ``boxes.json``); for all images
    together ``pca.png``."""
    from .analysis.maskcut import maskcut
    from .analysis.segmentation import (
        cls_attention,
        patch_codes,
        patch_grid,
        pca_images,
        plot_attention_maps,
        plot_masks,
        plot_pca,
        upsample,
    )
    from .data.boxes import mask_boxes
    from .evaluation.segmentation import load_image

    model, transform, size = load_backbone(args)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    missing = [p for p in args.images if not Path(p).is_file()]
    if missing:
        raise ValueError(f"images: {missing[0]!r} does not exist")
    images = torch.stack([load_image(p, size)[0] for p in args.images])
    batch = transform(images.to(args.device))
    grid = patch_grid(model, batch)
    attention = cls_attention(model, batch, args.layer)[0].unflatten(-1, grid).cpu()
    codes = patch_codes(model, batch, args.layer)[0].cpu()
    boxes, written = {}, {}
    for path, image, maps_, code in zip(args.images, images, attention, codes):
        stem = Path(path).stem
        written[str(out / f"{stem}_attention.png")] = f"{path}: the class token's attention per head"
        plot_attention_maps(image, upsample(maps_, size), f"{stem}: [CLS] attention, layer {args.layer}").savefig(
            out / f"{stem}_attention.png", dpi=120)
        masks = upsample(torch.from_numpy(maskcut(code, grid, args.num_objects, tau=args.tau).masks), size)
        kept = masks[masks.flatten(1).any(dim=1)]
        written[str(out / f"{stem}_maskcut.png")] = f"{path}: MaskCut's {len(kept)} object mask(s) and boxes"
        plot_masks(image, kept, mask_boxes(kept), f"{stem}: MaskCut, layer {args.layer}").savefig(
            out / f"{stem}_maskcut.png", dpi=120)
        boxes[path] = mask_boxes(kept).tolist()
    plot_pca(images, pca_images(codes, grid), f"PCA of the patch codes, layer {args.layer}").savefig(
        out / "pca.png", dpi=120)
    (out / "boxes.json").write_text(json.dumps(boxes, indent=1) + "\n")
    written[str(out / "pca.png")] = "every image: the first principal components of the patch codes"
    written[str(out / "boxes.json")] = "every image: the MaskCut boxes (x0, y0, x1, y1)"
    return {"output_dir": str(out), "images": len(args.images), "layer": args.layer, "written": written,
            "boxes": boxes}


def coco(args: argparse.Namespace) -> dict:
    from .evaluation.segmentation import coco_ap, maskcut_predictions, read_coco_images

    extras.require("pycocotools", "coco", "COCO AP")  # before minutes of MaskCut, not after
    annotations = Path(args.coco_dir) / "annotations" / f"instances_{args.split}.json"
    images = read_coco_images(annotations, Path(args.coco_dir) / args.split)[: args.limit]
    model, transform, size = load_backbone(args)
    predictions = maskcut_predictions(model, images, transform, image_size=size, layer=args.layer,
                                      num_objects=args.num_objects, tau=args.tau)
    return {"images": len(images), "predictions": len(predictions),
            **coco_ap(annotations, predictions, image_ids=[im["id"] for im in images])}


def voc(args: argparse.Namespace) -> dict:
    from .evaluation.segmentation import read_voc, voc_coarse_segmentation

    pairs = read_voc(args.voc_dir, args.split)
    model, transform, size = load_backbone(args)
    return voc_coarse_segmentation(model, pairs, transform, image_size=size, layer=args.layer, mass=args.mass)


def experiment(args: argparse.Namespace) -> dict:
    from .table17 import VARIANTS, extra_backbone, run_experiment, splits, write_report
    from .tasks import get_preset

    variants = args.variants or list(VARIANTS)
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"variants: {unknown} are not among {list(VARIANTS)}")
    extra = {}
    for item in args.extra:
        name, _, paths = item.partition("=")
        if not name or not paths:
            raise ValueError(f"extra: expected NAME=CKPT[,CKPT...], got {item!r}")
        extra[name] = paths.split(",")
        missing = [p for p in extra[name] if not Path(p).is_file()]
        if missing:
            raise ValueError(f"extra: checkpoint {missing[0]!r} does not exist")
        for path in extra[name]:  # before any training: a checkpoint that cannot be measured is refused now
            extra_backbone(path, get_preset("objects_crate"))
    overrides = {k: v for k, v in (("epochs", args.epochs), ("max_steps", args.max_steps)) if v is not None}
    results = run_experiment(args.output_dir, seeds=args.seeds, variants=variants, overrides=overrides, extra=extra,
                             progress=not args.no_progress)
    _, test = splits(get_preset("objects_crate"))
    report = args.report_dir or args.output_dir
    written = write_report(results, report, test.images[:8])
    print(Path(report, "table.md").read_text())
    return {"written": written}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crate-segment`` (``python -m crate_nn.segment``): ``maps`` lists the files it wrote, the
    other commands print their results as JSON."""
    args = parse_args(argv)
    try:
        result = {"maps": maps, "coco": coco, "voc": voc, "experiment": experiment}[args.command](args)
    except cli.EXPECTED as err:
        return cli.fail("crate-segment", err, 2)
    if args.command == "maps":  # the files it wrote, one per line (the numbers are in boxes.json)
        print(cli.table(f"crate-segment maps: layer {result['layer']} of {args.checkpoint}, {result['images']} "
                        f"image(s); wrote {len(result['written'])} files:",
                        [(path, "", what) for path, what in result["written"].items()]))
        return 0
    text = json.dumps(result, indent=2)
    print(text)
    if getattr(args, "output", None):
        Path(args.output).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
