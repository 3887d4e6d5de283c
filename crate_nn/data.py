"""Datasets, deterministic batch order and on-device augmentation for training CRATE.

Everything reads local paths; nothing is downloaded. Layouts understood (``--dataset``):

* ``imagenet`` / ``imagefolder``: ``<root>/<split>/<class>/*.JPEG`` (ImageNet layout; any image extension).
* ``cifar10``: ``<root>/data_batch_{1..5}``, ``test_batch``, ``batches.meta`` (the python-pickle release,
  ``root`` may also be the folder that contains ``cifar-10-batches-py``); ``cifar100``: ``<root>/train``,
  ``test``, ``meta`` (or inside ``cifar-100-python``).
* ``flowers102``: the Oxford release (``<root>/jpg/image_XXXXX.jpg``, ``imagelabels.mat``, ``setid.mat``;
  splits train/val/test) or image folders ``<root>/<split>/<class>/``.
* ``pets``: the Oxford-IIIT release (``<root>/images/*.jpg``, ``<root>/annotations/{trainval,test}.txt``) or
  image folders ``<root>/<split>/<class>/``.
* ``digits``: scikit-learn's built-in 8×8 handwritten digits (1,797 images, values 0..16), split once with a fixed
  seed into train/val/test (stratified; 20% test, then 10% of the rest for validation: 1,293 / 144 / 360).
* ``synthetic``: seeded random images of any size with random labels, for smoke and throughput runs.

Image files are decoded with Pillow in DataLoader workers into fixed-size uint8 tensors: for training the shorter
side is resized to ``load_size`` and the central square kept (so batches can be augmented on the device; random
crops are drawn from that square), for evaluation the shorter side is resized to ``eval_resize`` and the central
``image_size`` square kept. Augmentation (kornia) and normalisation run in batches on the training device
(``DeviceTransform``). A corrupt or unreadable file is reported by name and skipped (``Batch.skipped``), or raises
``CorruptImageError`` naming it when ``strict``.

The order of the training data is a deterministic function of (seed, epoch) (``EpochBatches``), so a resumed run
skips exactly the batches it has already seen.
"""
from __future__ import annotations

import math
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
DATASETS = ("imagenet", "imagefolder", "cifar10", "cifar100", "flowers102", "pets", "digits", "synthetic")


class CorruptImageError(RuntimeError):
    """An image file that Pillow cannot decode (raised only under ``strict``; the message names the file)."""


class Corrupt(NamedTuple):
    """Placeholder a dataset returns for an unreadable file, so the collate step can skip and count it."""

    path: str
    reason: str


class Batch(NamedTuple):
    """A micro-batch: images (B, C, H, W) uint8 or float, labels (B,) int64, their dataset indices (B,) int64,
    and the file names skipped."""

    images: torch.Tensor
    labels: torch.Tensor
    indices: torch.Tensor
    skipped: tuple[str, ...]


@dataclass
class DatasetInfo:
    """What the model needs to know about a dataset: classes, channels and the native image side."""

    num_classes: int
    in_channels: int
    image_size: int | None  # side of the stored images, None for files of varying size
    classes: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- datasets
class TensorImages(Dataset):
    """Images held in memory: ``images`` (N, C, H, W) uint8 (0..255) or float (0..1), ``labels`` (N,) int64."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, classes: Sequence[str]):
        if images.ndim != 4 or labels.shape != (images.shape[0],):
            raise ValueError(
                f"images, labels: expected shapes (N, C, H, W) and (N,), got {tuple(images.shape)} and "
                f"{tuple(labels.shape)}"
            )
        self.images, self.labels = images, labels.long()
        self.info = DatasetInfo(len(classes), images.shape[1], images.shape[-1], list(classes))

    def __len__(self) -> int:
        return self.images.shape[0]

    def __getitem__(self, i: int):
        return self.images[i], self.labels[i], i


class ImageFiles(Dataset):
    """Image files decoded with Pillow: ``samples`` is a list of (path, label).

    ``train=True``: shorter side resized to ``load_size``, central square kept (augmented later on the device).
    ``train=False``: shorter side resized to ``eval_resize``, central ``image_size`` square kept.
    """

    def __init__(
        self,
        samples: Sequence[tuple[str, int]],
        classes: Sequence[str],
        *,
        train: bool,
        image_size: int,
        load_size: int,
        eval_resize: int,
        strict: bool = False,
    ):
        if not samples:
            raise ValueError("samples: expected at least one image file, found none")
        self.samples, self.strict = list(samples), strict
        self.resize, self.crop = (load_size, load_size) if train else (eval_resize, image_size)
        if self.crop > self.resize:
            raise ValueError(f"image_size: the crop {self.crop} is larger than the resized side {self.resize}")
        self.info = DatasetInfo(len(classes), 3, self.crop, list(classes))

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int):
        from PIL import Image  # imported in the worker

        path, label = self.samples[i]
        try:
            with Image.open(path) as im:
                im = im.convert("RGB")
                w, h = im.size
                scale = self.resize / min(w, h)
                im = im.resize((max(self.resize, round(w * scale)), max(self.resize, round(h * scale))),
                               Image.BILINEAR)
                w, h = im.size
                left, top = (w - self.crop) // 2, (h - self.crop) // 2
                im = im.crop((left, top, left + self.crop, top + self.crop))
                array = np.asarray(im, dtype=np.uint8)
        except Exception as err:  # Pillow raises OSError, SyntaxError, ValueError... for broken files
            if self.strict:
                raise CorruptImageError(f"unreadable image {path}: {type(err).__name__}: {err}") from err
            return Corrupt(str(path), f"{type(err).__name__}: {err}")
        return torch.from_numpy(array.copy()).permute(2, 0, 1), label, i


def collate(items: list) -> Batch:
    """Stack (image, label, index) triples, dropping and naming the ``Corrupt`` placeholders."""
    skipped = tuple(item.path for item in items if isinstance(item, Corrupt))
    good = [item for item in items if not isinstance(item, Corrupt)]
    if not good:
        raise CorruptImageError(f"every image of a batch was unreadable: {', '.join(skipped)}")
    images = torch.stack([image for image, _, _ in good])
    labels = torch.as_tensor([int(label) for _, label, _ in good], dtype=torch.long)
    indices = torch.as_tensor([int(i) for _, _, i in good], dtype=torch.long)
    return Batch(images, labels, indices, skipped)


# --------------------------------------------------------------------------------------------- layouts
def _require_dir(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise ValueError(f"data_dir: {what} {str(path)!r} does not exist or is not a directory")
    return path


def image_folder(root: str | Path) -> tuple[list[tuple[str, int]], list[str]]:
    """``root/<class>/<image>`` → (sorted (path, label) list, sorted class names)."""
    root = _require_dir(Path(root), "the image folder")
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise ValueError(f"data_dir: {str(root)!r} has no class sub-folders (expected {root}/<class>/<image>)")
    samples = [
        (str(f), label)
        for label, name in enumerate(classes)
        for f in sorted((root / name).rglob("*"))
        if f.is_file() and f.suffix.lower() in IMAGE_EXTENSIONS
    ]
    return samples, classes


def _unpickle(path: Path) -> dict:
    if not path.is_file():
        raise ValueError(f"data_dir: expected the CIFAR file {str(path)!r}, it does not exist")
    with open(path, "rb") as f:
        return pickle.load(f, encoding="bytes")


def cifar(root: str | Path, num_classes: int, split: str) -> TensorImages:
    """CIFAR-10/100 from the python-pickle release; ``split`` is ``train`` or ``test``."""
    folder_name, files = (
        ("cifar-10-batches-py", {"train": [f"data_batch_{i}" for i in range(1, 6)], "test": ["test_batch"]})
        if num_classes == 10
        else ("cifar-100-python", {"train": ["train"], "test": ["test"]})
    )
    if split not in files:
        raise ValueError(f"split: CIFAR-{num_classes} has splits 'train' and 'test', got {split!r}")
    root = _require_dir(Path(root), "the CIFAR folder")
    if (root / folder_name).is_dir():
        root = root / folder_name
    label_key = b"labels" if num_classes == 10 else b"fine_labels"
    parts = [_unpickle(root / name) for name in files[split]]
    images = np.concatenate([np.asarray(p[b"data"], dtype=np.uint8) for p in parts]).reshape(-1, 3, 32, 32)
    labels = np.concatenate([np.asarray(p[label_key], dtype=np.int64) for p in parts])
    meta = _unpickle(root / ("batches.meta" if num_classes == 10 else "meta"))
    names = [n.decode() for n in meta[b"label_names" if num_classes == 10 else b"fine_label_names"]]
    return TensorImages(torch.from_numpy(images), torch.from_numpy(labels), names)


def flowers102(root: str | Path, split: str) -> tuple[list[tuple[str, int]], list[str]]:
    """Oxford Flowers-102: the release's ``jpg/`` + ``imagelabels.mat`` + ``setid.mat``, or image folders."""
    root = _require_dir(Path(root), "the Flowers-102 folder")
    if not (root / "setid.mat").is_file():
        return image_folder(root / split)
    from scipy.io import loadmat

    keys = {"train": "trnid", "val": "valid", "test": "tstid"}
    if split not in keys:
        raise ValueError(f"split: Flowers-102 has splits {sorted(keys)}, got {split!r}")
    labels = loadmat(root / "imagelabels.mat")["labels"].ravel().astype(int) - 1
    ids = loadmat(root / "setid.mat")[keys[split]].ravel().astype(int)
    samples = [(str(root / "jpg" / f"image_{i:05d}.jpg"), int(labels[i - 1])) for i in sorted(ids)]
    return samples, [str(c) for c in range(102)]


def pets(root: str | Path, split: str) -> tuple[list[tuple[str, int]], list[str]]:
    """Oxford-IIIT Pets: the release's ``images/`` + ``annotations/{trainval,test}.txt``, or image folders."""
    root = _require_dir(Path(root), "the Pets folder")
    if not (root / "annotations").is_dir():
        return image_folder(root / split)
    if split not in ("trainval", "test"):
        raise ValueError(f"split: Oxford-IIIT Pets has splits 'trainval' and 'test', got {split!r}")
    rows = [line.split() for line in (root / "annotations" / f"{split}.txt").read_text().splitlines()]
    rows = [r for r in rows if r and not r[0].startswith("#")]
    breeds: dict[int, str] = {int(r[1]) - 1: r[0].rsplit("_", 1)[0] for r in rows}
    samples = [(str(root / "images" / f"{r[0]}.jpg"), int(r[1]) - 1) for r in rows]
    return samples, [breeds.get(i, str(i)) for i in range(max(breeds) + 1)]


DIGITS_SPLIT_SEED = 0


def digits(split: str) -> TensorImages:
    """scikit-learn's 8×8 digits as float images in [0, 1] (values / 16), split once and for all (stratified,
    ``random_state=DIGITS_SPLIT_SEED`` whatever the training seed): 20% of the 1,797 images are the test split
    (360), 10% of the rest the validation split used for tuning (144), the remaining 1,293 the training split.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if split not in ("train", "val", "test", "trainval"):
        raise ValueError(f"split: digits has splits 'train', 'val', 'test' and 'trainval', got {split!r}")
    data = load_digits()
    index = np.arange(len(data.target))
    trainval, test = train_test_split(index, test_size=0.2, random_state=DIGITS_SPLIT_SEED, stratify=data.target)
    train, val = train_test_split(trainval, test_size=0.1, random_state=DIGITS_SPLIT_SEED,
                                  stratify=data.target[trainval])
    chosen = {"train": train, "val": val, "test": test, "trainval": trainval}[split]
    images = torch.from_numpy(data.images[np.sort(chosen)].astype(np.float32) / 16.0).unsqueeze(1)
    labels = torch.from_numpy(data.target[np.sort(chosen)].astype(np.int64))
    return TensorImages(images, labels, [str(c) for c in range(10)])


def synthetic(num_samples: int, image_size: int, num_classes: int, seed: int, channels: int = 3) -> TensorImages:
    """Seeded random uint8 images (``num_samples``, ``channels``, ``image_size``, ``image_size``), random labels."""
    if num_samples < 1 or image_size < 1 or num_classes < 1:
        raise ValueError(
            f"num_samples, image_size, num_classes: expected positive values, got {num_samples}, {image_size}, "
            f"{num_classes}"
        )
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (num_samples, channels, image_size, image_size), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, num_classes, (num_samples,), generator=g)
    return TensorImages(images, labels, [str(c) for c in range(num_classes)])


def build_dataset(
    name: str,
    split: str,
    *,
    data_dir: str | None,
    train: bool,
    image_size: int,
    load_size: int,
    eval_resize: int,
    seed: int = 0,
    strict: bool = False,
    synthetic_samples: int = 1024,
    synthetic_classes: int = 10,
) -> TensorImages | ImageFiles:
    """The dataset ``name`` (one of ``DATASETS``), split ``split``, from the local folder ``data_dir``."""
    if name not in DATASETS:
        raise ValueError(f"dataset: expected one of {', '.join(DATASETS)}, got {name!r}")
    if name == "digits":
        return digits(split)
    if name == "synthetic":
        # Different splits are different random images (offset seeds), like a real train/val pair.
        offset = {"train": 0, "val": 1, "test": 2}.get(split, 3)
        return synthetic(synthetic_samples, image_size, synthetic_classes, seed * 10 + offset)
    if data_dir is None:
        raise ValueError(f"data_dir: dataset {name!r} reads a local folder; pass --data-dir")
    if name in ("cifar10", "cifar100"):
        return cifar(data_dir, 10 if name == "cifar10" else 100, split)
    if name == "flowers102":
        samples, classes = flowers102(data_dir, split)
    elif name == "pets":
        samples, classes = pets(data_dir, split)
    else:
        samples, classes = image_folder(Path(_require_dir(Path(data_dir), "the dataset folder")) / split)
    return ImageFiles(samples, classes, train=train, image_size=image_size, load_size=load_size,
                      eval_resize=eval_resize, strict=strict)


# --------------------------------------------------------------------------------------------- order
class EpochBatches:
    """Index lists of this rank's micro-batches for one epoch, a deterministic function of (seed, epoch).

    Training (``shuffle=True``): a permutation of ``range(n)`` drawn from ``torch.Generator(seed, epoch)``; optimizer
    step s of the epoch takes the global batch ``perm[s*B:(s+1)*B]`` (``B = global_batch``; an incomplete last
    batch is dropped); rank r takes every ``world_size``-th element of it starting at r, split into consecutive
    micro-batches of ``micro_batch``. ``start_step`` skips the epoch's first steps (resume). Evaluation
    (``shuffle=False``): rank r takes ``range(r, n, world_size)`` in micro-batches, the last one possibly short.
    """

    def __init__(
        self,
        n: int,
        *,
        global_batch: int,
        micro_batch: int,
        rank: int = 0,
        world_size: int = 1,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        start_step: int = 0,
    ):
        if global_batch % (micro_batch * world_size):
            raise ValueError(
                f"batch_size: the global batch {global_batch} is not divisible by micro_batch_size × world size "
                f"= {micro_batch} × {world_size}"
            )
        if shuffle and global_batch > n:
            raise ValueError(f"batch_size: the global batch {global_batch} exceeds the {n} training samples")
        self.n, self.global_batch, self.micro_batch = n, global_batch, micro_batch
        self.rank, self.world_size, self.shuffle = rank, world_size, shuffle
        self.seed, self.epoch, self.start_step = seed, epoch, start_step

    @property
    def steps(self) -> int:
        """Optimizer steps in one epoch (training)."""
        return self.n // self.global_batch

    def __iter__(self) -> Iterator[list[int]]:
        if not self.shuffle:
            mine = list(range(self.rank, self.n, self.world_size))
            for i in range(0, len(mine), self.micro_batch):
                yield mine[i:i + self.micro_batch]
            return
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        perm = torch.randperm(self.n, generator=g).tolist()
        for step in range(self.start_step, self.steps):
            mine = perm[step * self.global_batch:(step + 1) * self.global_batch][self.rank::self.world_size]
            for i in range(0, len(mine), self.micro_batch):
                yield mine[i:i + self.micro_batch]

    def __len__(self) -> int:
        if not self.shuffle:
            return math.ceil(len(range(self.rank, self.n, self.world_size)) / self.micro_batch)
        per_step = self.global_batch // (self.world_size * self.micro_batch)
        return (self.steps - self.start_step) * per_step


def loader(dataset: Dataset, batches: EpochBatches, num_workers: int = 0, pin_memory: bool = False) -> DataLoader:
    """A DataLoader over ``batches`` that draws nothing from the global RNG (resume stays exact)."""
    return DataLoader(
        dataset,
        batch_sampler=batches,
        num_workers=num_workers,
        collate_fn=collate,
        pin_memory=pin_memory,
        persistent_workers=False,
        generator=torch.Generator().manual_seed(batches.seed * 1_000_003 + batches.epoch),
    )


# --------------------------------------------------------------------------------------------- device side
AUGMENTATIONS = ("none", "flip", "shift", "rrc_flip", "randaugment")


class DeviceTransform(nn.Module):
    """Batch augmentation and normalisation on the training device (kornia), (B, C, H, W) → float (B, C, S, S).

    uint8 input is scaled by 1/255, float input is taken as [0, 1]. ``augment``:

    * ``none``; ``flip`` (horizontal flip, p = 0.5);
    * ``shift`` (zero-pad by ``shift`` pixels, random crop back: integer translations, for images that are not
      flip-invariant such as digits);
    * ``rrc_flip`` (RandomResizedCrop(S, scale) + flip: the papers' pre-training augmentation);
    * ``randaugment`` (rrc_flip followed by RandAugment(n, m): fine-tuning).


    ``randaugment_m`` is on timm's scale (levels out of 10, which the paper's "timm auto_augment" m = 14 refers
    to); kornia's magnitude is out of 30, so it receives ``min(3 m, 29.9)``. Evaluation (``train=False``) only
    resizes to S when the input differs, then normalises.
    """

    def __init__(
        self,
        image_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        train: bool,
        augment: str = "none",
        crop_scale: tuple[float, float] = (0.08, 1.0),
        randaugment_n: int = 2,
        randaugment_m: float = 14.0,
        shift: int = 1,
    ):
        super().__init__()
        import kornia.augmentation as K

        if augment not in AUGMENTATIONS:
            raise ValueError(f"augment: expected one of {', '.join(AUGMENTATIONS)}, got {augment!r}")
        self.image_size = image_size
        ops: list[nn.Module] = []
        if train and augment in ("rrc_flip", "randaugment"):
            ops.append(K.RandomResizedCrop((image_size, image_size), scale=tuple(crop_scale)))
        if train and augment == "shift":
            ops.append(K.RandomCrop((image_size, image_size), padding=shift))
        if train and augment in ("flip", "rrc_flip", "randaugment"):
            ops.append(K.RandomHorizontalFlip(p=0.5))
        if train and augment == "randaugment":
            from kornia.augmentation.auto import RandAugment

            ops.append(RandAugment(n=randaugment_n, m=min(3.0 * randaugment_m, 29.9)))
        self.augment = nn.Sequential(*ops)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1), persistent=False)

    @torch.no_grad()
    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.float() / 255.0 if images.dtype == torch.uint8 else images.float()
        if len(self.augment):
            x = self.augment(x)
        if x.shape[-1] != self.image_size or x.shape[-2] != self.image_size:
            x = nn.functional.interpolate(x, size=(self.image_size, self.image_size), mode="bilinear",
                                          align_corners=False, antialias=True)
        return (x - self.mean) / self.std

