"""Pre-resized uint8 shards (`crate_nn.data.shards`) and ``crate-pack``, on small JPEG/PNG folders the tests write.

The Pillow pack runs the same code as training's `ImageFiles`, so its pixels must equal what training decodes
from the files, bit for bit; the GPU (nvJPEG) decoder is compared in ``tests/gpu``.
"""
from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image

from crate_nn.data import build_dataset, jpeg, shards
from crate_nn.data.images import ImageFiles, image_folder
from crate_nn.data.shards import Geometry, ShardImages, open_split, pack_split, pillow_decoder, shard_name, verify_split
from crate_nn.pack import main as pack_main
from crate_nn.train import main as train_main

SIZES = [(50, 40), (40, 56), (48, 48), (70, 44), (36, 60)]


def write_folder(root, split: str, per_class: int, classes=("cat", "dog"), seed: int = 0) -> None:
    """JPEGs (and one PNG per class) of the sizes in SIZES under root/split/<class>/."""
    rng = np.random.default_rng(seed)
    for c in classes:
        folder = root / split / c
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            w, h = SIZES[i % len(SIZES)]
            pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(folder / (f"{i:03d}.png" if i == 0 else f"{i:03d}.JPEG"), quality=90)


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "images"
    write_folder(root, "train", 7)
    write_folder(root, "val", 3, seed=1)
    return root


SMALL = Geometry(32, 32)


def pack(source, out, split="train", geometry=SMALL, **kwargs) -> dict:
    samples, classes = image_folder(source / split)
    return pack_split(samples, classes, source, out / split, geometry, shard_size=4, progress=False, **kwargs)


def test_shards_hold_exactly_what_training_decodes(source, tmp_path):
    manifest = pack(source, tmp_path / "shards")
    assert manifest["complete"] and len(manifest["shards"]) == 4 and [e["images"] for e in manifest["shards"]] == [
        4, 4, 4, 2]
    shards = ShardImages(tmp_path / "shards" / "train")
    files = ImageFiles(*image_folder(source / "train"), train=True, image_size=24, load_size=32, eval_resize=32)
    assert len(shards) == len(files) == 14 and shards.info.classes == ["cat", "dog"]
    for i in range(len(files)):
        image, label, index = shards[i]
        expected, expected_label, _ = files[i]
        assert image.dtype == torch.uint8 and image.shape == (3, 32, 32)
        assert torch.equal(image, expected) and int(label) == expected_label and index == i
    assert verify_split(tmp_path / "shards" / "train") == 14


def test_an_interrupted_pack_resumes_to_the_same_bytes(source, tmp_path):
    decoded: list[int] = []

    def stops_after_two_shards(groups, geometry):
        for n, result in enumerate(pillow_decoder()(groups, geometry)):
            if n == 2:
                raise KeyboardInterrupt("killed")
            decoded.append(len(groups[n]))
            yield result

    with pytest.raises(KeyboardInterrupt):
        pack(source, tmp_path / "a", decoder=stops_after_two_shards)
    manifest = json.loads((tmp_path / "a" / "train" / "manifest.json").read_text())
    assert not manifest["complete"] and sum(entry is not None for entry in manifest["shards"]) == 2
    with pytest.raises(ValueError, match="unfinished"):
        ShardImages(tmp_path / "a" / "train")
    counting = pillow_decoder()

    def count(groups, geometry):
        decoded.append(-sum(map(len, groups)))  # files asked for on resume
        yield from counting(groups, geometry)

    resumed = pack(source, tmp_path / "a", decoder=count)
    assert decoded == [4, 4, -6]  # the two finished shards were not decoded again
    straight = pack(source, tmp_path / "b")
    assert [e["sha256"] for e in resumed["shards"]] == [e["sha256"] for e in straight["shards"]]


def test_a_corrupted_shard_fails_verification(source, tmp_path):
    pack(source, tmp_path / "s")
    target = tmp_path / "s" / "train" / f"{shard_name(1)}.npy"
    data = bytearray(target.read_bytes())
    data[-5] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{shard_name(1)}.npy does not match its checksum"):
        verify_split(tmp_path / "s" / "train")
    with pytest.raises(ValueError, match="does not match its checksum"):
        ShardImages(tmp_path / "s" / "train", verify=True)


def test_unreadable_files_stop_the_pack_or_are_listed(source, tmp_path):
    broken = source / "train" / "dog" / "004.JPEG"
    broken.write_bytes(b"not a jpeg")
    with pytest.raises(ValueError, match="unreadable image .*004.JPEG"):
        pack(source, tmp_path / "strict")
    manifest = pack(source, tmp_path / "lenient", strict=False)
    assert list(manifest["skipped"]) == [str(broken)]
    shards = ShardImages(tmp_path / "lenient" / "train")
    files = ImageFiles(*image_folder(source / "train"), train=True, image_size=24, load_size=32, eval_resize=32)
    readable = [i for i, (path, _) in enumerate(files.samples) if path != str(broken)]
    assert len(shards) == 13
    for j, i in enumerate(readable):  # labels stay aligned with their images after the gap
        assert torch.equal(shards[j][0], files[i][0]) and int(shards[j][1]) == files[i][1]


def test_a_pack_refuses_another_listing_or_geometry(source, tmp_path):
    pack(source, tmp_path / "s")
    with pytest.raises(ValueError, match="geometry"):
        pack(source, tmp_path / "s", geometry=Geometry(40, 40))
    Image.new("RGB", (40, 40)).save(source / "train" / "cat" / "zzz.JPEG")
    with pytest.raises(ValueError, match="listing_sha256"):
        pack(source, tmp_path / "s")


def test_training_and_evaluation_read_their_geometry(source, tmp_path):
    pack(source, tmp_path / "s")
    pack(source, tmp_path / "s", split="val", geometry=Geometry(36, 28))
    common = dict(data_dir=str(tmp_path / "s"), image_size=28, load_size=32, eval_resize=36)
    assert isinstance(build_dataset("shards", "train", train=True, **common), ShardImages)
    assert build_dataset("shards", "val", train=False, **common).info.image_size == 28
    with pytest.raises(ValueError, match="--load-size"):
        open_split(tmp_path / "s", "train", train=True, image_size=28, load_size=40, eval_resize=36)
    with pytest.raises(ValueError, match="--eval-resize / --image-size"):
        open_split(tmp_path / "s", "val", train=False, image_size=24, load_size=32, eval_resize=36)
    with pytest.raises(ValueError, match="does not exist"):
        open_split(tmp_path / "s", "test", train=False, image_size=28, load_size=32, eval_resize=36)


def test_crate_pack_then_crate_train_on_the_shards(source, tmp_path, capsys):
    out = tmp_path / "shards"
    args = [str(source), str(out), "--load-size", "40", "--eval-resize", "40", "--image-size", "32",
            "--shard-size", "5", "--workers", "0", "--no-progress"]
    assert pack_main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["train"]["images"] == 14 and summary["val"]["images"] == 6 and summary["val"]["verified"]
    assert pack_main(args) == 0  # already complete: nothing to decode, verified again
    assert pack_main([str(source), str(out), "--verify-only", "--no-progress"]) == 0
    capsys.readouterr()
    code = train_main(["--preset", "synthetic", "--dataset", "shards", "--data-dir", str(out), "--image-size", "32",
                       "--load-size", "40", "--eval-resize", "40", "--model-args", "patch_size=8", "dim=32", "depth=1",
                       "heads=2", "--batch-size", "7", "--epochs", "1", "--output-dir", str(tmp_path / "run"),
                       "--no-progress"])
    assert code == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())  # what the run printed at its end
    assert summary["steps"] == 2 and summary["metrics"]["val_images"]["final"] == 6


def test_crate_pack_names_bad_arguments(source, tmp_path, capsys):
    assert pack_main([str(tmp_path / "nowhere"), str(tmp_path / "out"), "--no-progress"]) == 2
    assert "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        pack_main([str(source), str(tmp_path / "out"), "--image-size", "300"])
    assert "--image-size" in capsys.readouterr().err
    assert pack_main([str(source), str(tmp_path / "out"), "--verify-only", "--no-progress"]) == 2
    assert "manifest.json" in capsys.readouterr().err


def test_labels_outside_the_classes_are_refused(source, tmp_path):
    """Labels ≥ the manifest's class count used to reach the loss and fail there with an index error."""
    pack(source, tmp_path / "shards")
    folder = tmp_path / "shards" / "train"
    labels = folder / f"{shard_name(1)}.labels.npy"
    np.save(labels, np.load(labels) + 5)
    with pytest.raises(ValueError, match=r"data_dir: the labels in .*train' run from 0 to 6, outside the 2 classes"):
        ShardImages(folder)


def test_crate_pack_names_the_file_a_full_disk_stopped(source, tmp_path, capsys, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "save", disk_full)
    out = tmp_path / "shards"
    assert pack_main([str(source), str(out), "--shard-size", "5", "--workers", "0", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err == f"crate-pack: output: cannot write {out / 'train' / shard_name(0)}.npy: No space left on device\n"


def test_device_resize_matches_pillow_within_one_grey_level(source):
    # The GPU decoder's resize (torch bilinear + antialias, float) against Pillow's (fixed-point integers): the
    # same triangle filter, so they differ by rounding only: at most 1 grey level, rarely.
    samples, classes = image_folder(source / "train")
    for geometry in (Geometry(32, 32), Geometry(36, 28)):
        files = ImageFiles(samples, classes, train=False, image_size=geometry.crop, load_size=geometry.resize,
                           eval_resize=geometry.resize)
        for i, (path, _) in enumerate(samples):
            with Image.open(path) as im:
                pixels = torch.from_numpy(np.asarray(im.convert("RGB")).copy()).permute(2, 0, 1)
            diff = (jpeg.resize_center_crop(pixels, geometry).int() - files[i][0].int()).abs()
            assert diff.max() <= 1 and diff.float().mean() < 0.5, path


def test_torchvision_decoder_matches_pillow_on_the_cpu(source, tmp_path):
    pytest.importorskip("torchvision")
    # libjpeg-turbo through torchvision vs Pillow's libjpeg: the same decoder family, resize within 1 level
    samples, classes = image_folder(source / "train")
    ours = pack_split(samples, classes, source, tmp_path / "tv", Geometry(32, 32), shard_size=4, progress=False,
                      decoder=jpeg.nvjpeg_decoder("cpu", workers=0))
    assert ours["complete"] and not ours["skipped"]  # the PNG went through Pillow
    reference = ImageFiles(samples, classes, train=True, image_size=32, load_size=32, eval_resize=32)
    shards = ShardImages(tmp_path / "tv")
    for i in range(len(shards)):
        assert (shards[i][0].int() - reference[i][0].int()).abs().max() <= 2


def test_training_checks_a_changed_shard_once_and_an_unchanged_one_never(source, tmp_path, monkeypatch):
    """A flipped byte in a shard used to train silently (only crate-pack --verify-only caught it): opening a split
    for training checks every file changed since the last verification against its checksum, and only those."""
    pack(source, tmp_path / "s")
    verify_split(tmp_path / "s" / "train")  # what crate-pack does at the end: records every file as intact
    hashed = []
    real = shards.sha256_file
    monkeypatch.setattr(shards, "sha256_file", lambda path, *a: hashed.append(path.name) or real(path, *a))
    common = dict(train=True, image_size=32, load_size=32, eval_resize=32)
    open_split(tmp_path / "s", "train", **common)
    assert hashed == ["manifest.json"]  # nothing changed: sizes and times compared, no shard read
    target = tmp_path / "s" / "train" / f"{shard_name(1)}.npy"
    data = bytearray(target.read_bytes())
    data[-5] ^= 0xFF
    target.write_bytes(bytes(data))
    hashed.clear()
    with pytest.raises(ValueError, match=f"{shard_name(1)}.npy does not match its checksum"):
        open_split(tmp_path / "s", "train", **common)
    assert hashed == ["manifest.json", f"{shard_name(1)}.npy"]


def test_a_manifest_naming_a_file_outside_its_folder_is_refused(source, tmp_path):
    pack(source, tmp_path / "s")
    path = tmp_path / "s" / "train" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["shards"][1]["name"] = "../../outside"
    path.write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"shard 1 is named '../../outside', expected 'shard_00001'"):
        ShardImages(tmp_path / "s" / "train")
