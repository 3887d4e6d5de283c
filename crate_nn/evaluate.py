"""``crate-eval``: top-1 / top-5 accuracy and loss of a classifier checkpoint, ImageNet-ReaL top-1 with ``real.json``.

    crate-eval runs/imagenet/checkpoints/last.pt --data-dir /data/imagenet
    crate-eval runs/imagenet/checkpoints/last.pt --data-dir /data/imagenet --real-json /data/real.json
    crate-eval crate_small.pth --model crate_small --dataset imagenet --data-dir /data/imagenet
    torchrun --nproc_per_node 8 -m crate_nn.evaluate CKPT --data-dir /data/imagenet     (sharded over 8 GPUs)

Data settings (dataset, image size, eval resize) come from the training config saved in the checkpoint unless given
on the command line; the normalisation from the preprocessing the checkpoint records (`crate_nn.preprocessing`;
ImageNet's mean and std for a file that records none, such as the authors'), or from ``--mean``/``--std``; images of
other channels than the model's are refused naming ``--channels``, which converts them (gray to RGB, RGB to gray).
It prints a short table naming the data, the split, the number of images and the units (--json: the same numbers as
JSON; --output also writes them to a file). Errors are one line naming the argument or file, exit status 2; a
mistyped argument is told before torch is imported.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from . import cli, preprocessing
from .loading import add_arguments


def _datasets() -> tuple[str, ...]:
    from .data import DATASETS

    return DATASETS


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = cli.Parser(prog="crate-eval", description=__doc__.split("\n\n")[0],
                        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, "a classifier")
    parser.add_argument("--dataset", default=None, choices=cli.Choices(_datasets), metavar="NAME",
                        help="a registered dataset (default: the training config's, else imagenet)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--split", default=None, help="default: the training config's eval_split, else 'val'")
    parser.add_argument("--image-size", type=int, default=None)
    parser.add_argument("--eval-resize", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=256, help="per process")
    parser.add_argument("--num-workers", type=int, default=None,
                        help=f"data-loading processes per process (default: min({MAX_WORKERS}, the CPUs this process "
                        "may use, shared among the processes of a torchrun node))")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"))
    parser.add_argument("--real-json", default=None, help="ImageNet-ReaL labels (real.json)")
    parser.add_argument("--output", default=None, help="also write the metrics to this JSON file")
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON instead of a table")
    preprocessing.add_arguments(parser)
    args = parser.parse_args(argv)
    for name in ("image_size", "eval_resize", "batch_size"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: expected a positive integer, got {getattr(args, name)}")
    if args.num_workers is not None and args.num_workers < 0:
        parser.error(f"argument --num-workers: expected a non-negative integer, got {args.num_workers}")
    if args.heads is not None and args.heads < 1:
        parser.error(f"argument --heads: expected a positive integer, got {args.heads}")
    preprocessing.check_arguments(args, parser)
    return args


MAX_WORKERS = 8  # the default before it followed the machine


def available_cpus() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``: a container's or taskset's share), else the
    machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def default_workers() -> int:
    """min(MAX_WORKERS, the available CPUs / the processes torchrun started on this node (LOCAL_WORLD_SIZE))."""
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return min(MAX_WORKERS, available_cpus() // local)


def resolve_workers(requested: int | None) -> int:
    """``requested`` (``--num-workers``), or `default_workers`. More than the available CPUs is allowed (an
    explicit choice) and warned about once, on stderr, here: DataLoader's own warning, which says it twice, is
    silenced in `run`."""
    if requested is None:
        return default_workers()
    cpus = available_cpus()
    if requested > cpus and int(os.environ.get("RANK", "0")) == 0:
        print(f"crate-eval: warning: --num-workers {requested} exceeds the {cpus} CPUs this process may use; "
              "loading may be slower than with fewer", file=sys.stderr)
    return requested


def read_real_labels(path: str, dataset) -> list[list[int]]:
    """``real.json`` as a list of label lists, checked against the validation files (`crate_nn.data.ImageFiles`) it
    must cover."""
    from .evaluation.classification import real_index

    file = Path(path)
    if not file.is_file():
        raise ValueError(f"real_json: {path!r} does not exist")
    try:
        labels = json.loads(file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"real_json: {path!r} is not JSON ({err})") from err
    if not isinstance(labels, list) or not all(isinstance(x, list) for x in labels):
        raise ValueError(f"real_json: {path!r} must be a JSON list with one list of labels per validation image, "
                         f"got a {type(labels).__name__}")
    needed = max(real_index(p) for p, _ in dataset.samples) + 1
    if len(labels) < needed:
        raise ValueError(f"real_json: {path!r} has {len(labels)} entries but the validation files go up to "
                         f"image number {needed}")
    return labels


def run(args: argparse.Namespace) -> dict:
    """Load, build the data, evaluate; ValueError naming the problem for bad input."""
    from .data import build_dataset
    from .data.images import ImageFiles
    from .data.transforms import DeviceTransform
    from .engine import distributed
    from .evaluation.classification import evaluate
    from .loading import load_model
    from .weights import non_finite

    model, train_config = load_model(args.checkpoint, args.model, args.heads, families={"classifier": "a classifier"})
    broken = non_finite(model)
    if broken:
        raise ValueError(f"checkpoint: {args.checkpoint!r} holds non-finite weights ({broken}); its outputs would be "
                         "NaN")

    def setting(name: str, default):
        """The command line's value, else the training config's, else ``default``."""
        given = getattr(args, name)
        return given if given is not None else train_config.get(name, default)

    image_size = setting("image_size", model.config.image_size)
    ctx = distributed.context(args.device)
    name, split = setting("dataset", "imagenet"), args.split or train_config.get("eval_split", "val")
    dataset = build_dataset(
        name, split,
        data_dir=setting("data_dir", None), train=False, image_size=image_size,
        load_size=train_config.get("load_size", 256), eval_resize=setting("eval_resize", 256),
        seed=train_config.get("seed", 0), synthetic_samples=train_config.get("synthetic_samples", 1024),
        synthetic_classes=train_config.get("synthetic_classes", 10),
    )
    classes = dataset.info.num_classes
    if classes > model.config.num_classes:
        raise ValueError(f"dataset: {classes} classes, but the model predicts {model.config.num_classes}")
    real_labels = None
    if args.real_json is not None:
        if not isinstance(dataset, ImageFiles):
            raise ValueError("real_json: ReaL labels apply to the ImageNet validation image files")
        real_labels = read_real_labels(args.real_json, dataset)
    pipeline = preprocessing.image_pipeline(model, dataset.info.in_channels, f"dataset {name} ({split} split)",
                                            mean=args.mean, std=args.std, channels=args.channels)
    transform = DeviceTransform(image_size, pipeline.mean, pipeline.std, train=False,
                                channels=pipeline.channels).to(ctx.device)
    model.to(ctx.device).float()
    workers = resolve_workers(args.num_workers)
    with distributed.joined(ctx), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)
        metrics = evaluate(model, dataset, transform, ctx, batch_size=args.batch_size, num_workers=workers,
                           precision=args.precision, real_labels=real_labels)
    return {"dataset": name, "split": split, **metrics, "preprocessing": pipeline.to_dict()} if ctx.is_main else {}


def report(checkpoint: str, metrics: dict) -> str:
    """The metrics as a short table naming the data, the split, the count and the units."""
    rows = [("loss", f"{metrics['loss']:.4f}", "cross-entropy, nats per image"),
            ("top-1", f"{100 * metrics['top1']:.2f}%", ""), ("top-5", f"{100 * metrics['top5']:.2f}%", "")]
    if "real_top1" in metrics:
        rows.append(("ReaL top-1", f"{100 * metrics['real_top1']:.2f}%",
                     f"over the {metrics['real_images']:,} images with a plausible label"))
    seen = metrics["preprocessing"]
    inputs = (f"inputs: mean ({', '.join(f'{v:.4g}' for v in seen['mean'])}), std "
              f"({', '.join(f'{v:.4g}' for v in seen['std'])}), {seen['source']}"
              + (f"; converted to {preprocessing.channel_count(seen['channels'])}" if seen["channels"] else ""))
    return cli.table(f"{checkpoint} on {metrics['dataset']}, split {metrics['split']}: {metrics['images']:,} images "
                     f"({metrics['skipped']:,} unreadable, skipped)", rows) + "\n" + inputs


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crate-eval``: prints the metrics as a table, or as JSON with ``--json`` (unreadable files
    are named on stderr)."""
    args = parse_args(argv)
    try:
        metrics = run(args)
    except cli.EXPECTED as err:
        return cli.fail("crate-eval", err, 2)
    if metrics:
        print(json.dumps(metrics, indent=2) if args.json else report(args.checkpoint, metrics))
        if args.output:
            Path(args.output).write_text(json.dumps(metrics, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
