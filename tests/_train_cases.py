"""Shared pieces of the training tests: a tiny CPU configuration that trains in well under a second, tiny
fake versions of the ImageNet, CIFAR-10/100, Flowers-102 and Pets layouts, and a torchrun launcher."""
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from scipy.io import savemat

from crate_nn.tasks import ClassificationConfig, get_preset

TINY_MODEL = dict(patch_size=4, dim=16, depth=2, heads=2)
ROOT = Path(__file__).resolve().parents[1]


def torchrun(*args: str, nproc: int = 2, path: tuple[Path, ...] = (),
             timeout: float = 240) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --standalone --nproc_per_node nproc *args`` from the repository root (gloo
    processes on the CPU), one intra-op thread each, the repository and ``path`` importable; output captured."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(map(str, (ROOT, *path)))}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def tiny(output_dir, **overrides) -> ClassificationConfig:
    """The synthetic preset shrunk to 8×8 images, 32 samples, batch 8 (4 steps per epoch), CPU, float32."""
    base = dict(image_size=8, model_args=dict(TINY_MODEL), batch_size=8, synthetic_samples=32, epochs=3,
                warmup_epochs=1.0, progress=False, device="cpu", precision="fp32", output_dir=str(output_dir),
                num_workers=0, augment="none", checkpoint_every=0)
    return get_preset("synthetic", **{**base, **overrides})


SMALL = dict(image_size=16, load_size=20, eval_resize=20, batch_size=4, epochs=1, warmup_epochs=0.0, max_steps=2,
             model_args=dict(patch_size=8, dim=16, depth=1, heads=2))


def image_file(path, size, mode="RGB", seed=0):
    rng = np.random.default_rng(seed)
    shape = (size[1], size[0]) + ((3,) if mode == "RGB" else ())
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(path)


def fake_imagenet(root):
    sizes = [(40, 30), (30, 50), (64, 64), (25, 33)]
    for split, count in (("train", 4), ("val", 2)):
        for c, name in enumerate(("n01440764", "n01443537")):
            for i in range(count):
                number = c * count + i + 1
                file = f"ILSVRC2012_val_{number:08d}.JPEG" if split == "val" else f"{name}_{i}.JPEG"
                image_file(root / split / name / file, sizes[i % 4], mode="L" if i == 3 else "RGB", seed=number)
    return root


def _pickle(path, payload):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(payload))


def fake_cifar(root, classes):
    rng = np.random.default_rng(0)
    batch = lambda n: {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),  # noqa: E731
                       (b"labels" if classes == 10 else b"fine_labels"): list(rng.integers(0, classes, n))}
    if classes == 10:
        folder = root / "cifar-10-batches-py"
        for i in range(1, 6):
            _pickle(folder / f"data_batch_{i}", batch(4))
        _pickle(folder / "test_batch", batch(6))
        _pickle(folder / "batches.meta", {b"label_names": [f"c{i}".encode() for i in range(10)]})
    else:
        folder = root / "cifar-100-python"
        _pickle(folder / "train", batch(12))
        _pickle(folder / "test", batch(6))
        _pickle(folder / "meta", {b"fine_label_names": [f"c{i}".encode() for i in range(100)]})
    return root


def fake_flowers(root):
    for i in range(1, 13):
        image_file(root / "jpg" / f"image_{i:05d}.jpg", (30 + i, 28), seed=i)
    savemat(root / "imagelabels.mat", {"labels": np.array([[1 + i % 102 for i in range(12)]])})
    savemat(root / "setid.mat", {"trnid": np.array([[1, 2, 3, 4, 5, 6, 7, 8]]), "valid": np.array([[9, 10]]),
                                 "tstid": np.array([[11, 12]])})
    return root


def fake_pets(root):
    rows = {"trainval": [], "test": []}
    for i, breed in enumerate(["Abyssinian", "american_bulldog", "Bengal"]):
        for j in range(1, 5):
            image_file(root / "images" / f"{breed}_{j}.jpg", (36, 30), seed=10 * i + j)
            rows["trainval" if j <= 3 else "test"].append(f"{breed}_{j} {i + 1} {1 + i % 2} {j}")
    (root / "annotations").mkdir()
    for split, lines in rows.items():
        (root / "annotations" / f"{split}.txt").write_text("\n".join(lines) + "\n")
    return root


def assert_same(a, b, where="checkpoint"):
    """Every tensor bit-for-bit equal (torch.equal), every other value equal, recursively."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where
