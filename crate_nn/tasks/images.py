"""What the image tasks share: the data fields of their configs, their datasets and their on-device transforms.

The config sections (`crate_nn.engine.config.Section`) of the image tasks: `ImageDataSection` (the dataset, its splits,
image sizes and normalisation; ``data_dir`` is `DataSection`'s), `AugmentSection` (the one-view training augmentation
of `DeviceTransform`), `MeasureSection` (layer-wise measurements) and `FrozenEvaluationSection` (the probe's solver).
A task's config holds those it uses beside its own (`ClassificationConfig` and `MAEConfig`: ``data``,
``augmentation``; `DINOTrainConfig`: ``data`` and its own ``crops``). The functions below take such a config (its
``data`` section and its seed): `image_splits` builds the training, evaluation and (optional) test splits,
`image_split` any split as evaluation data, `image_transforms` the training and evaluation `DeviceTransform`,
`evaluation_data` what evaluating a trained model needs without its training task (the splits without augmentation,
the evaluation transform).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..data import DATASETS, build_dataset
from ..data.batching import CorruptImageError
from ..data.images import IMAGENET_MEAN, IMAGENET_STD, ImageFiles
from ..data.transforms import AUGMENTATIONS, DeviceTransform
from ..engine.config import DataSection, Section, TrainConfig, option
from ..evaluation.cadence import Cadence
from ..evaluation.linear_probe import PROBE_SOLVERS
from ..preprocessing import channel_count

DATA_LAYOUTS = """Data layouts (--data.data-dir): imagenet/imagefolder: <dir>/<split>/<class>/<image> (ImageNet's
val/ must be in class folders too); cifar10: data_batch_1..5, test_batch, batches.meta (or the folder holding
cifar-10-batches-py); cifar100: train, test, meta (or cifar-100-python/); flowers102: jpg/, imagelabels.mat,
setid.mat (splits train/val/test) or <split>/<class>/ folders; pets: images/, annotations/{trainval,test}.txt
or <split>/<class>/ folders; shards: <dir>/<split>/ written by crate-pack; digits and synthetic are built in."""


@dataclass
class ImageDataSection(DataSection):
    """An image dataset (``data_dir`` is `DataSection`'s), its splits, sizes and normalisation."""

    dataset: str = option("synthetic", "dataset layout", choices=DATASETS)
    train_split: str = option("train", "training split (also the frozen evaluations' training features: k-NN, probe)")
    eval_split: str = option("val", "split evaluated every eval_every epochs (DINO: monitors, k-NN, probe)")
    test_split: str | None = option(None, "split evaluated once at the end of training")
    image_size: int = option(224, "side of the model's input images (DINO: of the global crops and of the evaluation "
                             "images)", minimum=1)
    load_size: int = option(256, "training images: shorter side → load_size, central square, then augmentation or "
                            "crops (DINO: images of another size, e.g. digits, are resized to load_size² on the "
                            "device)", minimum=1)
    eval_resize: int = option(256, "evaluation images: shorter side → eval_resize, central image_size crop",
                              minimum=1)
    mean: tuple[float, ...] = option(IMAGENET_MEAN, "per-channel normalisation mean (one value per channel)")
    std: tuple[float, ...] = option(IMAGENET_STD, "per-channel normalisation std (one value per channel)",
                                    above=0.0)
    synthetic_samples: int = option(1024, "images of the synthetic dataset", minimum=1)
    synthetic_classes: int = option(10, "classes of the synthetic dataset", minimum=1)
    strict: bool = option(False, "stop at the first unreadable image instead of skipping it", resume_free=True)
    pixel_control: bool = option(
        False, "also run the final frozen evaluation (k-NN, probe) on the raw pixels, the strongest trivial control "
        "(off by default: at ImageNet size the pixel features take N·C·H·W float64)", resume_free=True)

    def validate(self) -> None:
        if len(self.mean) != len(self.std):
            raise ValueError(f"mean, std: expected one value per channel in each, got {len(self.mean)} means "
                             f"{self.mean} and {len(self.std)} stds {self.std}")

    def smoke(self, batch_size: int) -> dict:
        """A dataset read from a folder becomes the built-in synthetic images of the same size, one batch of them
        (every step sees the same images, so the loss must fall)."""
        changes: dict = {}
        if self.dataset not in ("digits", "synthetic"):
            changes.update(dataset="synthetic", data_dir=None, test_split=None)
            if len(self.mean) == 1:  # a gray-scale set (mnist5k): the synthetic images are RGB
                changes.update(mean=self.mean * 3, std=self.std * 3)
        if changes.get("dataset", self.dataset) == "synthetic":
            changes.update(synthetic_samples=batch_size)
        return changes


@dataclass
class AugmentSection(Section):
    """The training augmentation of one view per image: the options of the training `DeviceTransform`, which this
    section builds (DINO's multi-crop is its own section)."""

    component = DeviceTransform
    reads = ("image_size", "mean", "std")

    augment: str = option("rrc_flip", "training augmentation", choices=AUGMENTATIONS)
    crop_scale: tuple[float, float] = option((0.08, 1.0), "RandomResizedCrop area range (min max)", above=0.0,
                                             maximum=1.0)
    randaugment_n: int = option(2, "RandAugment operations per image", minimum=0)
    randaugment_m: float = option(14.0, "RandAugment magnitude on timm's 0–10 scale (m14 as in the papers)",
                                  minimum=0.0)
    shift: int = option(1, "pixels of random translation for augment=shift", minimum=0)

    def validate(self) -> None:
        if self.crop_scale[0] > self.crop_scale[1]:
            raise ValueError(f"crop_scale: expected min ≤ max, got {self.crop_scale}")


@dataclass
class MeasureSection(Section):
    """Layer-wise white-box measurements (R^c, sparsity; `crate_nn.analysis.snapshots`) saved during training."""

    measure_epochs: tuple[int, ...] = option((), "epochs after which the layer-wise R^c/sparsity are saved (0 = init; "
                                             "DINO: of the teacher; a classifier without MSSA layers, e.g. a ViT "
                                             "baseline, is not measured)", minimum=0, span="epochs")
    measure_samples: int = option(256, "held-out images of the layer-wise measurements", minimum=1,
                                  resume_free=True)

    @property
    def evals(self) -> dict[str, Cadence]:
        """The run's evaluators named with their cadence (`crate_nn.evaluation.cadence`): ``layers``
        (`crate_nn.evaluation.layers.LayerMeasurements`) after ``measure_epochs``."""
        return {"layers": Cadence(self.measure_epochs)}


@dataclass
class FrozenEvaluationSection(Section):
    """What every frozen evaluation of an image task's features shares (`crate_nn.evaluation.frozen`): the linear
    probe's solver. DINO's k-NN and MAE's probe extend it."""

    probe_solver: str = option(
        "sklearn", "linear probe: sklearn (C by 3-fold cross-validation, the papers' protocol; small data), or torch "
        "on the device with lbfgs (full batch) or adam (minibatches: ImageNet scale), its weight decay chosen on a "
        "held-out 10% of train_split", choices=PROBE_SOLVERS, resume_free=True)


def dataset_args(config: TrainConfig) -> dict:
    """The keyword arguments of `crate_nn.data.build_dataset` that ``config`` (a config with an `ImageDataSection`
    as ``data``) fixes: all but the split."""
    data = config.data
    return dict(data_dir=data.data_dir, image_size=data.image_size, load_size=data.load_size,
                eval_resize=data.eval_resize, seed=config.run.seed, strict=data.strict,
                synthetic_samples=data.synthetic_samples, synthetic_classes=data.synthetic_classes)


def image_split(config: TrainConfig, split: str, classes):
    """Split ``split`` of ``config``'s dataset as evaluation data (no augmentation), labelled by ``classes``."""
    return build_dataset(config.data.dataset, split, train=False, classes=classes, **dataset_args(config))


def refuse_model_args(model_args: dict, keys: set[str],
                      set_by: str = "come from the data (--data.image-size and the dataset)") -> None:
    """ValueError, in one line, naming the ``keys`` in ``model_args`` that the task sets itself (``set_by`` says
    how)."""
    given = sorted(keys & set(model_args))
    if given:
        raise ValueError(f"model_args: {given} {set_by}, not model_args")


def check_channels(data, channels: int) -> None:
    """ValueError, in one line, unless the data section's ``mean`` (and ``std``) hold one value per image channel."""
    if len(data.mean) != channels:
        raise ValueError(f"mean, std: {len(data.mean)} value{'s' * (len(data.mean) != 1)} for images with "
                         f"{channel_count(channels)}")


def image_splits(config: TrainConfig):
    """(training, evaluation, test or None) datasets of ``config``; the evaluation splits are labelled by the
    training split's class names. ValueError when ``mean``/``std`` do not have one value per image channel; under
    ``strict``, `CorruptImageError` naming every unreadable file of the splits (`check_readable`)."""
    data = config.data
    train_set = build_dataset(data.dataset, data.train_split, train=True, **dataset_args(config))
    info = train_set.info
    eval_set = image_split(config, data.eval_split, info.classes)
    test_set = image_split(config, data.test_split, info.classes) if data.test_split else None
    check_channels(data, info.in_channels)
    if data.strict:
        check_readable([train_set, eval_set, test_set])
    return train_set, eval_set, test_set


class EvaluationData(NamedTuple):
    """What evaluating a model trained on a config's data needs (`evaluation_data`)."""

    memory: object
    """``train_split`` without augmentation: the k-NN's neighbours and the probe's training set."""
    eval_set: object
    test_set: object | None
    transform: DeviceTransform
    """The evaluation transform (central crop, normalisation), on the device."""


def evaluation_data(config: TrainConfig, device: torch.device | str = "cpu") -> EvaluationData:
    """The splits of ``config``'s dataset as evaluation data (labelled by the training split's class names) and its
    evaluation `DeviceTransform` on ``device``: a checkpoint is evaluated as its training run evaluated it, without
    building the training task."""
    data = config.data
    memory = image_split(config, data.train_split, None)
    classes = memory.info.classes
    eval_set = image_split(config, data.eval_split, classes)
    test_set = image_split(config, data.test_split, classes) if data.test_split else None
    check_channels(data, memory.info.in_channels)
    return EvaluationData(memory, eval_set, test_set, evaluation_transform(data).to(device))


STRICT_SCAN_LIMIT = 20_000  # files per split checked before training under --data.strict (≈ 1 ms each)


def check_readable(datasets) -> None:
    """Under ``strict``: verify every image file of the splits small enough to scan cheaply and raise
    `CorruptImageError` naming all unreadable ones before training starts (larger splits fail at the first)."""
    bad = [entry for ds in datasets if isinstance(ds, ImageFiles) and len(ds) <= STRICT_SCAN_LIMIT
           for entry in ds.scan()]
    if bad:
        listed = "; ".join(f"{path} ({reason})" for path, reason in bad[:20])
        more = f" and {len(bad) - 20} more" if len(bad) > 20 else ""
        raise CorruptImageError(f"{len(bad)} unreadable image(s): {listed}{more}")


def evaluation_transform(data: ImageDataSection) -> DeviceTransform:
    """The evaluation `DeviceTransform` of ``data`` (central crop, normalisation), on the CPU."""
    return DeviceTransform(data.image_size, data.mean, data.std, train=False)


def image_transforms(config: TrainConfig, device: torch.device) -> tuple[DeviceTransform, DeviceTransform]:
    """(training, evaluation) `DeviceTransform` of ``config`` (a config with an `AugmentSection` as
    ``augmentation``) on ``device``."""
    return config.build("augmentation", train=True).to(device), evaluation_transform(config.data).to(device)
