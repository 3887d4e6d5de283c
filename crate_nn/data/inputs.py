"""A seeded sample of a model's inputs, as it takes them: images of a folder, of a built dataset, or windows of a text
file — what ``python -m verify.network`` measures a checkpoint on.

    from crate_nn.data import build_dataset
    from crate_nn.data.inputs import dataset_images, folder_images, resized, text_windows

    inputs = folder_images(model, "/data/imagenet/val", 256, seed=0)         # Inputs: .tensor (256, 3, S, S)
    data = build_dataset("digits", "test", data_dir=None, train=False, image_size=S, load_size=resized(S),
                         eval_resize=resized(S))
    inputs = dataset_images(model, data, "digits", "test", 64, seed=0)
    inputs = text_windows(model, "book.txt", 64, seed=0, tokenizer="bytes")   # .tensor (64, T) token ids

**Images**: a seeded order of the folder's files with an image suffix (`crate_nn.data.images.IMAGE_EXTENSIONS`), the
first ``n`` Pillow recognises from their headers (nothing decoded to choose them; files that are not images skipped
and counted), or a seeded sample of a dataset; resized (short side to S·256/224, `resized`), centre-cropped to the
model's S×S and normalised as `crate_nn.preprocessing.image_pipeline` decides (the checkpoint's record, ``mean``/
``std``/``channels``, ImageNet's). **Text**: a seeded sample of the file's non-overlapping windows of the model's
block size (overlapping windows would share tokens: an interval over them would claim more than the text holds),
tokenised by the checkpoint's tokenizer or ``tokenizer``.

Every refusal is a ValueError of one line naming the argument (``images``, ``dataset``, ``text``, ``n``,
``tokenizer``, ``window``, ``channels``) and the file: an image past Pillow's decompression-bomb limit or with fewer
pixels a side than the model has patches, an unreadable image, an empty or binary text file, fewer inputs than
``least`` (3: the audit's rule) or than an ``n`` given. ``model`` is any registered model (its ``config`` and
``preprocessing``); nothing here imports ``crate_nn.analysis``.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from crate_nn.preprocessing import image_pipeline

LEAST = 3
"""The fewest inputs a sample may hold: the audit's rule compares at least three of anything."""


@dataclass
class Inputs:
    """The sample every model sees: ``tensor``, the model inputs (normalised images (B, C, S, S) or token ids
    (B, T)), ``source`` (what they are), ``names`` (file names, dataset indices or window offsets),
    ``preprocessing`` (what was done to them: the normalisation and where it came from, the files skipped; a text's
    tokenizer)."""

    tensor: torch.Tensor
    source: str
    names: list[str]
    preprocessing: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tensor)


def _count(count: int, n: int, all_inputs: bool, argument: str, where: str, unit: str, least: int = LEAST) -> int:
    """How many of the ``count`` inputs ``where`` holds to take for ``n``: ``n``, or all ``count`` when fewer and
    ``all_inputs`` (the default of the command); ValueError naming ``argument`` when fewer than ``least`` are there,
    naming ``n`` when an ``n`` given exceeds them."""
    if count < least:
        raise ValueError(f"{argument}: {where} holds {count} {unit}; the audit's rule needs at least {least}")
    if count < n and not all_inputs:
        raise ValueError(f"n: {where} holds {count} {unit}; pass --n {count} or less")
    return min(n, count)


def resized(image_size: int) -> int:
    """The short side an image is resized to before its central ``image_size`` square is cut (S·256/224, as
    ImageNet's evaluation, and never below S)."""
    return max(image_size, round(image_size * 256 / 224))


@dataclass
class ImageSample:
    """The files of an image folder drawn: ``chosen`` (a seeded order, the first ``n`` that are images), ``skipped``
    ((name, why) of every file passed over: no image suffix, or not an image Pillow recognises) and ``candidates``
    (the files with an image suffix)."""

    chosen: list[Path]
    skipped: list[tuple[str, str]]
    candidates: int

    def note(self) -> str:
        """``; 2 files skipped, not images (notes.txt, a.png)`` or ""."""
        if not self.skipped:
            return ""
        shown = ", ".join(name for name, _ in self.skipped[:3]) + (" …" if len(self.skipped) > 3 else "")
        return f"; {len(self.skipped)} file{'s' * (len(self.skipped) != 1)} skipped, not images ({shown})"


def image_files(root: Path, n: int, seed: int, *, grid: int, all_inputs: bool = False) -> ImageSample:
    """The images of the folder ``root`` to take: in the seeded order of its files with an image suffix, the first
    ``n`` that Pillow recognises as images (read from their headers; nothing decoded). Files without an image suffix
    and files Pillow does not recognise are skipped and counted. ValueError naming the file for an image larger than
    Pillow's decompression-bomb limit or with fewer pixels a side than the model has patches (``grid``: upscaled,
    its patches would hold less than a pixel each), and naming ``n`` as `_count` does."""
    from PIL import Image, UnidentifiedImageError

    from crate_nn.data.images import IMAGE_EXTENSIONS, open_image

    files = sorted(f for f in root.rglob("*") if f.is_file())
    named = [f for f in files if f.suffix.lower() in IMAGE_EXTENSIONS]
    skipped = [(str(f.relative_to(root)), "no image suffix") for f in files if f.suffix.lower() not in IMAGE_EXTENSIONS]
    chosen: list[Path] = []
    for i in np.random.default_rng(seed).permutation(len(named)):
        if len(chosen) == n:
            break
        name = str(named[i].relative_to(root))
        try:
            with open_image(named[i]) as im:
                size = im.size
        except (Image.DecompressionBombWarning, Image.DecompressionBombError):
            raise ValueError(f"images: {name!r} is larger than Pillow's limit of {Image.MAX_IMAGE_PIXELS:,} pixels "
                             "(PIL.Image.MAX_IMAGE_PIXELS, against decompression bombs)") from None
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
            skipped.append((name, f"not an image Pillow recognises ({type(err).__name__})"))
            continue
        if min(size) < grid:
            raise ValueError(f"images: {name!r} is {size[0]}×{size[1]} pixels, fewer a side than the model's "
                             f"{grid}×{grid} patches (upscaled, each patch would hold less than a pixel); remove it")
        chosen.append(named[i])
    sample = ImageSample(chosen, skipped, len(named))
    _count(len(chosen), n, all_inputs, "images", repr(str(root)), "images" + sample.note())
    return sample


def _as_taken(model, images: torch.Tensor, source: str, drawn: str, names: list[str], skipped: list[dict], *,
              mean: Sequence[float] | None, std: Sequence[float] | None, channels: int | None) -> Inputs:
    """Decoded images (B, C, S, S) normalised as `crate_nn.preprocessing.image_pipeline` decides."""
    from crate_nn.data.transforms import DeviceTransform

    pipeline = image_pipeline(model, images.shape[1], source, mean=mean, std=std, channels=channels)
    transform = DeviceTransform(model.config.image_size, pipeline.mean, pipeline.std, train=False,
                                channels=pipeline.channels)
    return Inputs(transform(images), f"{source}, {drawn}", names, {**pipeline.to_dict(), "skipped": skipped})


def folder_images(model, folder: str, n: int, seed: int, *, all_inputs: bool = False,
                  mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                  channels: int | None = None) -> Inputs:
    """``n`` images of the folder ``folder`` (`image_files`; all of them when fewer and ``all_inputs``), as
    ``model`` takes them (module docstring)."""
    from crate_nn.data.batching import CorruptImageError
    from crate_nn.data.images import ImageFiles

    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f"images: {folder!r} does not exist or is not a folder")
    size = model.config.image_size
    sample = image_files(root, n, seed, grid=size // model.config.patch_size, all_inputs=all_inputs)
    data = ImageFiles([(str(f), 0) for f in sample.chosen], ["-"], train=False, image_size=size,
                      load_size=resized(size), eval_resize=resized(size), strict=True)
    try:
        images = torch.stack([data[i][0] for i in range(len(data))])
    except CorruptImageError as err:
        raise ValueError(f"images: {err}") from None
    return _as_taken(model, images, f"image folder {folder}",
                     f"{len(sample.chosen)} of {sample.candidates} files with an image suffix{sample.note()}",
                     [str(f.relative_to(root)) for f in sample.chosen],
                     [{"file": name, "why": why} for name, why in sample.skipped], mean=mean, std=std, channels=channels)


def dataset_images(model, data, name: str, split: str, n: int, seed: int, *, all_inputs: bool = False,
                   mean: Sequence[float] | None = None, std: Sequence[float] | None = None,
                   channels: int | None = None) -> Inputs:
    """``n`` images of ``data``, the ``split`` of the dataset ``name`` built at the model's size (its ``info``
    says the native side; `crate_nn.data.build_dataset` with ``load_size`` and ``eval_resize`` `resized`): a
    seeded sample (all of them when fewer and ``all_inputs``), as ``model`` takes them."""
    where = f"{name} ({split} split)"
    take = _count(len(data), n, all_inputs, "dataset", where, "images")
    chosen = np.random.default_rng(seed).permutation(len(data))[:take]
    images = torch.stack([data[int(i)][0] for i in chosen])
    size, native = model.config.image_size, data.info.image_size
    drawn = f"{take} of {len(data)}" + (f", {native}×{native} resized to {size}×{size}" if native and native != size
                                        else "")
    return _as_taken(model, images, f"built-in dataset {where}", drawn, [f"{name}/{split}/{i}" for i in chosen], [],
                     mean=mean, std=std, channels=channels)


def text_windows(model, path: str, n: int, seed: int, *, tokenizer: str | None = None, window: int | None = None,
                 all_inputs: bool = False) -> Inputs:
    """``n`` windows of the text file ``path`` tokenised by the model's tokenizer (or ``tokenizer``): a seeded sample
    of its non-overlapping windows of ``window`` tokens (the model's block size); ValueError naming ``n`` when it
    holds fewer (all of them taken when ``all_inputs``), naming ``text`` for an empty file and for one holding NUL
    bytes (a binary file: no text has them)."""
    from crate_nn.data.tokenizers import get_tokenizer

    recorded = getattr(getattr(model, "preprocessing", None), "tokenizer", None)
    spec = tokenizer or recorded
    if spec is None:
        raise ValueError("tokenizer: the checkpoint records no tokenizer; pass --tokenizer (bytes, tiktoken:gpt2, "
                         "hf:<name or tokenizer.json>)")
    if not Path(path).is_file():
        raise ValueError(f"text: {path!r} does not exist or is not a file")
    data = Path(path).read_bytes()
    if not data:
        raise ValueError(f"text: {path!r} is empty")
    first = data.find(b"\0")
    if first >= 0:
        raise ValueError(f"text: {path!r} holds NUL bytes (the first at byte {first:,}): a binary file, not text")
    ids = np.asarray(get_tokenizer(spec).encode(data.decode("utf-8", errors="replace")))
    block = window or model.config.block_size
    if block > model.config.block_size:
        raise ValueError(f"window: {block} exceeds the model's block_size {model.config.block_size}")
    vocab = model.config.vocab_size
    if ids.size and ids.max() >= vocab:
        raise ValueError(f"tokenizer: {spec} gives ids up to {ids.max()}, the model's vocabulary has {vocab}")
    count = ids.size // block
    take = _count(count, n, all_inputs, "text", f"{path!r} ({ids.size:,} tokens)",
                  f"non-overlapping windows of {block} tokens (a shorter --window gives more)")
    starts = block * np.random.default_rng(seed).permutation(count)[:take]
    windows = torch.from_numpy(np.stack([ids[s:s + block] for s in starts]).astype(np.int64))
    return Inputs(windows, f"text {path} ({ids.size} tokens, {spec}), {len(starts)} windows of {block}",
                  [f"tokens {s}–{s + block}" for s in starts], {"tokenizer": spec})
