"""What a model's inputs went through in training, recorded beside its weights so that whoever loads them feeds the
model what it was trained on.

    model = crate_nn.load("runs/digits/checkpoints/last.pt")
    model.preprocessing          # Preprocessing(mean=(…), std=(…), image_size=8, patch_size=4, tokenizer=None)

Every registered model has a ``preprocessing`` attribute: None until something sets it. A training run sets it from
its task (`crate_nn.engine.task.Task.preprocessing`), `crate_nn.save` writes it (a ``"preprocessing"`` entry of our
checkpoints, a ``"preprocessing"`` JSON field of a ``.safetensors`` header) and `crate_nn.load` restores it; a file
written before it existed gets it from the training config it holds (`from_training`), or None. Another codebase's
checkpoint records none, so its model's is None (``crate-export`` keeps it in the formats that have room for it:
the authors' classifier, their CRATE-MAE, timm's, crate-lm's and nanoGPT's files), and the command lines then use ImageNet's mean
and std (`normalisation`), what they always did.

The command lines that feed images to a model (``crate-eval``, ``python -m verify.network``) take ``--mean``,
``--std`` and ``--channels`` (`add_arguments`) for a file that records none, or to override what it records;
`image_pipeline` decides what they feed, and refuses data whose channels do not fit the model in one line that names
these options and ``model.preprocessing``. Nothing here imports torch.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CONVERTIBLE = (1, 3)
"""Image channels converted into each other (`crate_nn.data.transforms.to_channels`): gray repeated to RGB, RGB to
gray by ITU-R 601-2 luma."""


@dataclass(frozen=True)
class Preprocessing:
    """The input pipeline of a trained model; a field the training did not fix is None.

    mean, std: per-channel normalisation (C values each) of images scaled to [0, 1]: ``(x - mean) / std``.
    image_size: side of the square images (H = W) the model was trained on. patch_size: side P of its patches.
    tokenizer: the `crate_nn.data.tokenizers.get_tokenizer` spec of a language model's tokens (``"bytes"``,
    ``"tiktoken:gpt2"``, ``"hf:roberta-base"``).
    """

    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    image_size: int | None = None
    patch_size: int | None = None
    tokenizer: str | None = None

    def __post_init__(self) -> None:
        for name in ("mean", "std"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(float(v) for v in value))
        if (self.mean is None) != (self.std is None) or (self.mean is not None and len(self.mean) != len(self.std)):
            raise ValueError(f"mean, std: expected both or neither, one value per channel in each; got mean "
                             f"{self.mean} and std {self.std}")

    def to_dict(self) -> dict:
        """The fields that are set, as plain values (lists for the tuples): what a checkpoint stores."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, values: Mapping, source: str) -> Preprocessing:
        """The inverse of `to_dict`; ValueError naming ``source`` (the file) for an entry it does not know."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{source}: unknown preprocessing entries {unknown}; known: {sorted(known)}")
        return cls(**values)


def from_training(train_config: Mapping, model_config) -> Preprocessing:
    """The preprocessing a training config (`crate_nn.engine.config.TrainConfig.to_dict`) fixes: its ``mean``,
    ``std``, ``image_size`` and ``tokenizer`` where it has them, the patch size of ``model_config``."""
    return Preprocessing(mean=train_config.get("mean"), std=train_config.get("std"),
                         image_size=train_config.get("image_size", getattr(model_config, "image_size", None)),
                         patch_size=getattr(model_config, "patch_size", None), tokenizer=train_config.get("tokenizer"))


def normalisation(model) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(mean, std) of ``model.preprocessing`` when it records them, else ImageNet's (what the command lines used
    before checkpoints recorded them)."""
    recorded = getattr(model, "preprocessing", None)
    if recorded is not None and recorded.mean is not None:
        return recorded.mean, recorded.std
    return IMAGENET_MEAN, IMAGENET_STD


def channel_count(n: int) -> str:
    """``"1 channel"``, ``"3 channels"``."""
    return f"{n} channel{'' if n == 1 else 's'}"


def _statistic(text: str) -> float:
    """One ``--mean``/``--std`` value: a finite number."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--mean``, ``--std`` and ``--channels``: what an image command feeds a model whose file records no
    preprocessing (``model.preprocessing`` None), or instead of what it records (`image_pipeline`)."""
    group = parser.add_argument_group(
        "preprocessing", "for a file that records none (model.preprocessing is None; the authors' and other "
        "codebases' files), or to override what it records")
    group.add_argument("--mean", type=_statistic, nargs="+", default=None, metavar="M",
                       help="per-channel mean of the images scaled to [0, 1]: one value per channel of the model, or "
                            "one for all (default: the file's, else ImageNet's for 3 channels)")
    group.add_argument("--std", type=_statistic, nargs="+", default=None, metavar="S",
                       help="per-channel standard deviation, as --mean (positive)")
    group.add_argument("--channels", type=int, default=None, choices=CONVERTIBLE,
                       help="convert the images to this many channels, the model's: 3 repeats a gray image's "
                            "channel, 1 takes an RGB image's luma (ITU-R 601-2)")


def check_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``parser.error`` unless ``--mean`` and ``--std`` come together, with as many values, every std positive."""
    if (args.mean is None) != (args.std is None):
        parser.error("arguments --mean, --std: give both (the normalisation is (x − mean)/std)")
    if args.mean is not None and len(args.mean) != len(args.std):
        parser.error(f"arguments --mean, --std: {len(args.mean)} means and {len(args.std)} stds; give as many of "
                     "each")
    if args.std is not None and min(args.std) <= 0:
        parser.error(f"argument --std: expected positive values, got {args.std}")


@dataclass(frozen=True)
class ImagePipeline:
    """What a command feeds an image model: images converted to ``channels`` (None: as they are), then normalised
    by ``mean``/``std`` (one value per channel of the model); ``source`` says where the normalisation came from."""

    mean: tuple[float, ...]
    std: tuple[float, ...]
    channels: int | None
    source: str

    def to_dict(self) -> dict:
        return {"mean": list(self.mean), "std": list(self.std), "channels": self.channels, "source": self.source}


def image_pipeline(model, data_channels: int, data: str, *, mean: Sequence[float] | None = None,
                   std: Sequence[float] | None = None, channels: int | None = None) -> ImagePipeline:
    """What ``crate-eval`` and the network audit feed ``model`` (which takes ``model.config.in_channels``) from
    images of ``data_channels`` (``data`` names them): converted to ``channels`` when given (``--channels``), then
    normalised by ``mean``/``std`` when given (``--mean``/``--std``; one value stands for every channel), else by what
    the file records (``model.preprocessing``), else by ImageNet's (3 channels).

    ValueError in one line, naming the options and ``model.preprocessing``, when the images' channels do not fit the
    model, when ``channels`` is not the model's, and when a normalisation has another number of values than the
    model has channels (a gray model whose file records none has no default)."""
    wanted = model.config.in_channels
    recorded = getattr(model, "preprocessing", None)
    if channels is not None and channels != wanted:
        raise ValueError(f"channels: --channels {channels}, but the model takes {channel_count(wanted)}")
    if channels is not None and data_channels not in CONVERTIBLE:
        raise ValueError(f"channels: {data} has {channel_count(data_channels)}; --channels converts "
                         f"{' and '.join(map(str, CONVERTIBLE))} into each other only")
    if (channels or data_channels) != wanted:
        what = ("its file records no preprocessing (model.preprocessing is None)" if recorded is None else
                f"its file records {_describe(recorded)}")
        raise ValueError(f"channels: {data} has {channel_count(data_channels)}, the model takes {wanted}, and {what}; "
                         f"pass --channels {wanted} to convert the images"
                         + (" (gray repeated to RGB)" if wanted == 3 else " (RGB to gray)") + _normalised(recorded, wanted))
    if mean is not None:
        values = {"mean": tuple(mean), "std": tuple(std)}
        for name, given in values.items():
            if len(given) not in (1, wanted):
                raise ValueError(f"{name}: {len(given)} values, the model takes {channel_count(wanted)}: give "
                                 f"{wanted} (or one for all)")
        return ImagePipeline(*(v * (wanted // len(v)) for v in values.values()), channels,
                             "given (--mean, --std)")
    if recorded is not None and recorded.mean is not None:
        if len(recorded.mean) != wanted:
            raise ValueError(f"mean, std: the file records {len(recorded.mean)} values each, the model takes "
                             f"{channel_count(wanted)}; pass --mean/--std")
        return ImagePipeline(recorded.mean, recorded.std, channels, "recorded in the checkpoint (model.preprocessing)")
    if wanted != len(IMAGENET_MEAN):
        raise ValueError(f"mean, std: the file records no preprocessing (model.preprocessing is None) and ImageNet's "
                         f"mean and std are for 3 channels, the model takes {wanted}: pass --mean/--std (e.g. "
                         "--mean 0.5 --std 0.5)")
    return ImagePipeline(IMAGENET_MEAN, IMAGENET_STD, channels,
                         "ImageNet's (the checkpoint records none: model.preprocessing is None)")


def _normalised(recorded: Preprocessing | None, wanted: int) -> str:
    """What the mismatch message adds about the normalisation: nothing when the file records one."""
    if recorded is not None and recorded.mean is not None:
        return ""
    if wanted == len(IMAGENET_MEAN):
        return "; --mean/--std set their normalisation (ImageNet's otherwise)"
    return ", with --mean/--std for their normalisation"


def _describe(recorded: Preprocessing) -> str:
    """What a record says about images, for a message: ``mean (0.5,), std (0.5,)``."""
    if recorded.mean is None:
        return "no mean or std"
    return f"mean {recorded.mean} and std {recorded.std}"
