"""Pre-resized uint8 image shards: an image folder decoded once, read back at memory speed (``--dataset shards``).

Decoding JPEGs costs ≈ 350 images/s per CPU core; CRATE-Base on an H100 trains ≈ 10,000 images/s. A shard folder
holds every image of a split already decoded and resized, as memory-mapped NumPy arrays, so training reads bytes
instead of decoding files (augmentation then runs on the device, `crate_nn.data.transforms.DeviceTransform`).

Layout of one split (``<root>/<split>/``), written by `pack` (``crate-pack``)::

    manifest.json               format, geometry, classes, the source listing's digest, one entry per shard
    shard_00000.npy             (m, C, S, S) uint8 images, NumPy .npy (memory-mapped when read)
    shard_00000.labels.npy      (m,) int64 labels
    ...
    verified.json               what the last verification found intact: each file's size and modification time

Geometry: a training split stores each image's shorter side resized to ``load_size`` and its central square
(``resize = crop = load_size``: the square `ImageFiles` gives training, from which RandomResizedCrop draws); an
evaluation split stores the shorter side resized to ``eval_resize`` and the central ``image_size`` crop (the
evaluation protocol, so nothing is resized again). Every shard entry records the SHA-256 of both files.

Packing is resumable: the manifest is rewritten (atomically) after every shard; a run that stops — killed,
preempted, a full disk — continues from its last finished shard when started again with the same arguments, and
refuses to mix two different source listings or geometries. A finished pack is verified by reading every shard
back against its checksum (`verify_split`, also ``crate-pack --verify-only``), which records in ``verified.json``
the size and modification time of every file it found intact. Training and evaluation open a split with
``verify="changed"``: every file whose size or modification time differs from that record (all of them when there is
none) is checked against its checksum first, so a shard is hashed once after it is written or changed, not at every
run. A manifest's entries name the shard files of its own folder only (``shard_00000``, …): any other name is refused.
"""
from __future__ import annotations

import bisect
import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm import tqdm

from ..files import atomic_write, read_json, write_json
from .images import DatasetInfo
from .registry import register_dataset

FORMAT = "crate_nn.shards"
VERSION = 1
MANIFEST = "manifest.json"
STAMP = "verified.json"
FILES = ((".npy", "sha256"), (".labels.npy", "labels_sha256"))
"""A shard's two files: suffix after its name, and the manifest key of the file's SHA-256."""


@dataclass(frozen=True)
class Geometry:
    """How images were resized: shorter side → ``resize``, then the central ``crop`` × ``crop`` square."""

    resize: int
    crop: int

    def __post_init__(self) -> None:
        if not 0 < self.crop <= self.resize:
            raise ValueError(f"geometry: expected 0 < crop ≤ resize, got crop={self.crop}, resize={self.resize}")


def shard_name(index: int) -> str:
    return f"shard_{index:05d}"


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def listing_digest(samples: Sequence[tuple[str, int]], root: Path) -> str:
    """SHA-256 of the source listing: each file's path relative to ``root``, its size and its label, in order."""
    digest = hashlib.sha256()
    for path, label in samples:
        digest.update(f"{Path(path).relative_to(root).as_posix()}\t{os.path.getsize(path)}\t{label}\n".encode())
    return digest.hexdigest()


def save_npy(path: Path, array: np.ndarray) -> str:
    """Write ``array`` as ``path`` (.npy, `crate_nn.files.atomic_write`); return the file's SHA-256."""
    with atomic_write(path, "output") as f:
        np.save(f, array)
    return sha256_file(path)


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise ValueError(f"data_dir: {str(folder)!r} holds no {MANIFEST}; pack an image folder with crate-pack first")
    manifest = read_json(path, "data_dir")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
        raise ValueError(f"data_dir: {path} is not a {FORMAT} version {VERSION} manifest")
    for k, entry in enumerate(manifest.get("shards") or []):
        if entry is not None and entry.get("name") != shard_name(k):
            raise ValueError(f"data_dir: {path}: shard {k} is named {entry.get('name')!r}, expected {shard_name(k)!r} "
                             "(a manifest names the shard files of its own folder only)")
    return manifest


# ----------------------------------------------------------------------------------------------- reading
class ShardImages(Dataset):
    """A packed split: items (image (C, S, S) uint8, label, index), like `crate_nn.data.TensorImages`.

    The image arrays are memory-mapped on first use in each process (DataLoader workers map their own), so
    opening a split reads only the manifest and the labels. ``verify=True`` first checks every file against its
    SHA-256 (reads everything); ``verify="changed"`` only the files changed since the last verification (`STAMP`).
    """

    def __init__(self, folder: str | Path, verify: bool | str = False):
        self.folder = Path(folder)
        manifest = read_manifest(self.folder)
        if not manifest.get("complete"):
            raise ValueError(f"data_dir: the pack in {str(self.folder)!r} is unfinished; run the same crate-pack "
                             "command again to complete it")
        if verify:
            verify_split(self.folder, only_changed=verify == "changed")
        self.geometry = Geometry(**manifest["geometry"])
        self.shards = [entry for entry in manifest["shards"] if entry["images"]]
        self.offsets = np.cumsum([0] + [entry["images"] for entry in self.shards]).tolist()
        self.labels = torch.from_numpy(np.concatenate(
            [np.load(self.folder / f"{e['name']}.labels.npy") for e in self.shards] or [np.zeros(0, np.int64)]))
        if len(self.labels) != self.offsets[-1]:
            raise ValueError(f"data_dir: the label files in {str(self.folder)!r} hold {len(self.labels)} labels, the "
                             f"manifest counts {self.offsets[-1]} images")
        classes = len(manifest["classes"])
        if len(self.labels) and not 0 <= int(self.labels.min()) <= int(self.labels.max()) < classes:
            raise ValueError(f"data_dir: the labels in {str(self.folder)!r} run from {int(self.labels.min())} to "
                             f"{int(self.labels.max())}, outside the {classes} classes of its {MANIFEST}")
        self.info = DatasetInfo(classes, manifest["channels"], self.geometry.crop, list(manifest["classes"]))
        self._arrays: list[np.ndarray] | None = None

    def __getstate__(self) -> dict:  # memory maps are re-opened in each process, never pickled
        return {**self.__dict__, "_arrays": None}

    def _images(self) -> list[np.ndarray]:
        if self._arrays is None:
            self._arrays = [np.load(self.folder / f"{e['name']}.npy", mmap_mode="r") for e in self.shards]
        return self._arrays

    def __len__(self) -> int:
        return self.offsets[-1]

    def __getitem__(self, i: int):
        if not 0 <= i < len(self):
            raise IndexError(f"index {i} is out of range for {len(self)} images")
        shard = bisect.bisect_right(self.offsets, i) - 1
        image = np.array(self._images()[shard][i - self.offsets[shard]])  # copy out of the memory map
        return torch.from_numpy(image), self.labels[i], i


def open_split(root: str | Path, split: str, *, train: bool, image_size: int, load_size: int,
               eval_resize: int) -> ShardImages:
    """The packed ``split`` under ``root``, checked against the geometry the run expects (training:
    ``load_size`` squares; evaluation: shorter side ``eval_resize``, central ``image_size`` crop)."""
    folder = Path(root) / split
    if not folder.is_dir():
        raise ValueError(f"data_dir: {str(folder)!r} does not exist (expected crate-pack's {split}/ folder)")
    dataset = ShardImages(folder, verify="changed")
    expected = Geometry(load_size, load_size) if train else Geometry(eval_resize, image_size)
    if dataset.geometry != expected:
        flags = "--load-size" if train else "--eval-resize / --image-size"
        raise ValueError(f"data_dir: {split}/ was packed with resize {dataset.geometry.resize}, crop "
                         f"{dataset.geometry.crop}; this run expects resize {expected.resize}, crop {expected.crop} "
                         f"(pack again, or set {flags} to match)")
    return dataset



@register_dataset("shards", local=True)
def _shards_split(split: str, *, data_dir: str, train: bool, image_size: int, load_size: int, eval_resize: int,
                  **_) -> ShardImages:
    return open_split(data_dir, split, train=train, image_size=image_size, load_size=load_size,
                      eval_resize=eval_resize)

def _file_state(path: Path) -> list[int]:
    stat = path.stat()
    return [stat.st_size, stat.st_mtime_ns]


def verify_split(folder: str | Path, progress: bool = False, only_changed: bool = False) -> int:
    """Check the files of a packed split against the SHA-256 in its manifest; return the number of images.

    Every file, or with ``only_changed`` those whose size or modification time differ from `STAMP`'s record of the
    last verification (all of them when there is no record, or one of another manifest). The record is rewritten
    after a successful check (skipped, silently, where the folder is read-only: the check then repeats next time).
    Raises ValueError naming the first missing or corrupted file."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    shards = [e for e in manifest["shards"] if e is not None]
    if not manifest.get("complete") or len(shards) != len(manifest["shards"]):
        raise ValueError(f"data_dir: the pack in {str(folder)!r} is unfinished")
    manifest_sha = sha256_file(folder / MANIFEST)
    recorded: dict = {}
    if only_changed and (folder / STAMP).is_file():
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            stamp = json.loads((folder / STAMP).read_text())
            recorded = dict(stamp["files"]) if stamp.get("manifest_sha256") == manifest_sha else {}
    files = {}
    for entry in tqdm(shards, desc=f"verifying {folder.name}", unit="shard", disable=not progress):
        for suffix, key in FILES:
            name = f"{entry['name']}{suffix}"
            path = folder / name
            if not path.is_file():
                raise ValueError(f"data_dir: {path} is missing")
            files[name] = _file_state(path)
            if recorded.get(name) == files[name]:
                continue
            if sha256_file(path) != entry[key]:
                raise ValueError(f"data_dir: {path} does not match its checksum in {MANIFEST} (corrupted; delete it "
                                 "and run crate-pack again to rewrite it)")
    if files != recorded:
        with contextlib.suppress(OSError):
            write_json(folder / STAMP, {"manifest_sha256": manifest_sha, "files": files}, "output")
    return sum(e["images"] for e in shards)


# ----------------------------------------------------------------------------------------------- writing
# A decoder takes groups of files (one group per shard) and yields, group after group, the decoded uint8 images
# (m, C, S, S) of the group's readable files and {position in the group: reason} for the others.
# `pillow_decoder` (CPU, DataLoader workers) is the default; `crate_nn.data.jpeg.nvjpeg_decoder` decodes on a GPU.
Decoder = Callable[[Sequence[Sequence[str]], Geometry], Iterator[tuple[np.ndarray, dict[int, str]]]]


def pillow_decoder(workers: int = 0, batch_size: int = 64) -> Decoder:
    """Decode with Pillow in ``workers`` DataLoader processes, exactly as training does (`ImageFiles`)."""
    from torch.utils.data import DataLoader

    from .batching import Corrupt
    from .images import ImageFiles

    def decode(groups: Sequence[Sequence[str]], geometry: Geometry) -> Iterator[tuple[np.ndarray, dict[int, str]]]:
        files = [path for group in groups for path in group]
        if not files:
            return
        dataset = ImageFiles([(path, 0) for path in files], ["all"], train=False, image_size=geometry.crop,
                             load_size=geometry.resize, eval_resize=geometry.resize)
        items = (item for batch in DataLoader(dataset, batch_size=batch_size, num_workers=workers,
                                              collate_fn=list) for item in batch)
        for group in groups:
            images, failed = [], {}
            for position in range(len(group)):
                item = next(items)
                if isinstance(item, Corrupt):
                    failed[position] = item.reason
                else:
                    images.append(item[0].numpy())
            empty = np.zeros((0, 3, geometry.crop, geometry.crop), np.uint8)
            yield (np.stack(images) if images else empty), failed

    return decode


def pack_split(
    samples: Sequence[tuple[str, int]],
    classes: Sequence[str],
    source_root: str | Path,
    folder: str | Path,
    geometry: Geometry,
    *,
    shard_size: int = 1024,
    decoder: Decoder | None = None,
    strict: bool = True,
    progress: bool = True,
) -> dict:
    """Pack ``samples`` (path, label), in order, into shards of ``shard_size`` images under ``folder``; resumable.

    ``decoder``: see `Decoder` (default: `pillow_decoder` in this process). An unreadable file stops the pack
    naming it (``strict``), or is left out and listed with its reason in the manifest's ``skipped``. Shards the
    manifest records whose files are present with their recorded sizes are kept; the others are (re)written.
    Returns the manifest.
    """
    if shard_size < 1:
        raise ValueError(f"shard_size: expected a positive number of images per shard, got {shard_size}")
    if not samples:
        raise ValueError("samples: expected at least one image file, found none")
    decoder = decoder or pillow_decoder()
    folder, source_root = Path(folder), Path(source_root)
    folder.mkdir(parents=True, exist_ok=True)
    n_shards = -(-len(samples) // shard_size)
    plan = {"format": FORMAT, "version": VERSION, "geometry": {"resize": geometry.resize, "crop": geometry.crop},
            "channels": 3, "classes": list(classes), "num_files": len(samples),
            "listing_sha256": listing_digest(samples, source_root), "shard_size": shard_size}
    if (folder / MANIFEST).is_file():
        manifest = read_manifest(folder)
        changed = sorted(k for k, v in plan.items() if manifest.get(k) != v)
        if changed:
            raise ValueError(f"output: {str(folder)!r} holds a pack of other files or settings (differs in {changed}); "
                             "choose another output folder or delete it")
    else:
        manifest = {**plan, "shards": [None] * n_shards, "skipped": {}, "complete": False}
        write_json(folder / MANIFEST, manifest, "output")
    spans = [range(k * shard_size, min((k + 1) * shard_size, len(samples))) for k in range(n_shards)]
    todo = [k for k, entry in enumerate(manifest["shards"]) if entry is None or not _files_intact(folder, entry)]
    paths = [str(path) for path, _ in samples]
    labels = np.asarray([label for _, label in samples], dtype=np.int64)
    bar = tqdm(total=len(samples), initial=len(samples) - sum(len(spans[k]) for k in todo),
               desc=f"packing {folder.name}", unit="img", disable=not progress)
    decoded = decoder([[paths[i] for i in spans[k]] for k in todo], geometry)
    for k, (images, failed) in zip(todo, decoded):
        span = spans[k]
        if failed and strict:
            position, reason = next(iter(failed.items()))
            raise ValueError(f"unreadable image {paths[span[position]]}: {reason} (pass --skip-unreadable to leave "
                             "such files out)")
        keep = [span[j] for j in range(len(span)) if j not in failed]
        if images.shape[0] != len(keep):
            raise RuntimeError(f"the decoder returned {images.shape[0]} images for {len(keep)} readable files")
        name = shard_name(k)
        entry = {"name": name, "images": len(keep), "first_file": span.start}
        for suffix, key, array in ((".npy", "sha256", np.ascontiguousarray(images, dtype=np.uint8)),
                                   (".labels.npy", "labels_sha256", labels[keep])):
            entry[key] = save_npy(folder / f"{name}{suffix}", array)
            entry[f"{key}_bytes"] = (folder / f"{name}{suffix}").stat().st_size
        manifest["shards"][k] = entry
        manifest["skipped"].update({paths[span[j]]: reason for j, reason in failed.items()})
        write_json(folder / MANIFEST, manifest, "output")
        bar.update(len(span))
    bar.close()
    manifest["complete"] = all(entry is not None for entry in manifest["shards"])
    write_json(folder / MANIFEST, manifest, "output")
    return manifest


def _files_intact(folder: Path, entry: dict) -> bool:
    """A shard the manifest records counts as written when both its files exist with their recorded sizes (the
    checksums are compared by `verify_split`)."""
    return all((folder / f"{entry['name']}{suffix}").is_file()
               and (folder / f"{entry['name']}{suffix}").stat().st_size == entry[f"{key}_bytes"]
               for suffix, key in FILES)
