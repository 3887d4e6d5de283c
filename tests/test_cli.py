"""The command lines' shared error path (`crate_nn.cli`): an expected failure is one line naming the file or the
flag — an exception raised in a DataLoader worker, a full disk, a truncated or oversized image, a prompt file that
is not UTF-8 — never a traceback."""
import errno
import os

import numpy as np
import pytest
import torch
from _train_cases import TINY_MODEL
from PIL import Image
from torch.utils.data import DataLoader

import crate_nn
from crate_nn import cli
from crate_nn.sample import main as sample_main
from crate_nn.segment import main as segment_main
from crate_nn.train import main as train_main


class _Refuses(torch.utils.data.Dataset):
    def __len__(self):
        return 2

    def __getitem__(self, i):
        raise ValueError(f"tokens: id 300 at position {i} of val.bin is outside the vocabulary [0, 258)")


def test_one_line_of_a_worker_exception_and_of_an_os_error():
    with pytest.raises(ValueError) as raised:  # torch re-raises it with the worker's whole traceback
        next(iter(DataLoader(_Refuses(), num_workers=1)))
    assert "Original Traceback" in str(raised.value)
    assert cli.one_line(raised.value) == "tokens: id 300 at position 0 of val.bin is outside the vocabulary [0, 258)"
    assert cli.one_line(FileNotFoundError(errno.ENOENT, "No such file or directory", "p.txt")) == (
        "p.txt: No such file or directory")
    assert cli.one_line(ValueError("two\nlines")) == "two lines"


def test_crate_train_names_the_checkpoint_a_full_disk_stopped(tmp_path, capsys, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", disk_full)
    code = train_main(["--preset", "synthetic", "--image-size", "8", "--model-args",
                       *[f"{k}={v}" for k, v in TINY_MODEL.items()], "--batch-size", "8", "--synthetic-samples", "16",
                       "--epochs", "1", "--no-progress", "--device", "cpu", "--augment", "none", "--output-dir",
                       str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and err == (f"crate-train: checkpoint: cannot write {tmp_path / 'checkpoints' / 'step_0000002.pt'}"
                                 ": No space left on device\n")


@pytest.fixture
def classifier(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "crate.pt"
    crate_nn.save(path, crate_nn.create_model("crate_tiny", image_size=16, patch_size=4, dim=16, depth=2, heads=2,
                                              num_classes=3))
    return str(path)


def _photo(path, size=(50, 40)):
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(path)
    return path


def test_crate_segment_names_a_truncated_image(classifier, tmp_path, capsys):
    photo = _photo(tmp_path / "photo.png")
    photo.write_bytes(photo.read_bytes()[:len(photo.read_bytes()) // 2])
    assert segment_main(["maps", classifier, str(photo), "--output-dir", str(tmp_path / "maps")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"crate-segment: image: {photo} cannot be decoded (") and err.count("\n") == 1, err


def test_crate_segment_names_an_oversized_image(classifier, tmp_path, capsys, monkeypatch):
    """Pillow refuses more than 2 · MAX_IMAGE_PIXELS pixels (a decompression bomb); lowered here so that a 50×40
    image is one, instead of writing a 180-megapixel file."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 900)
    photo = _photo(tmp_path / "photo.png")
    assert segment_main(["maps", classifier, str(photo), "--output-dir", str(tmp_path / "maps")]) == 2
    assert capsys.readouterr().err == (f"crate-segment: image: {photo} cannot be decoded (DecompressionBombError: "
                                       "Image size (2000 pixels) exceeds limit of 1800 pixels, could be decompression "
                                       "bomb DOS attack.)\n")


@pytest.fixture
def gpt(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "gpt.pt"
    crate_nn.save(path, crate_nn.create_model("crate_gpt_small", dim=16, heads=2, depth=1, vocab_size=258,
                                              block_size=16))
    return str(path)


def test_crate_sample_names_a_prompt_file_that_is_not_utf8(gpt, tmp_path, capsys):
    prompt = tmp_path / "prompt.txt"
    prompt.write_bytes(b"def f(x):\n    return \xe9\n")
    assert sample_main([gpt, "--tokenizer", "bytes", "--prompt-file", str(prompt), "--device", "cpu"]) == 2
    assert capsys.readouterr().err == (f"crate-sample: prompt_file: {prompt} is not UTF-8 text (byte 0xe9 at byte "
                                       "offset 21, line 2)\n")


def test_crate_sample_at_a_tiny_temperature_decodes_greedily(gpt, capsys):
    common = [gpt, "--tokenizer", "bytes", "--prompt", "def ", "--max-new-tokens", "8", "--device", "cpu"]
    assert sample_main([*common, "--temperature", "1e-40", "--seed", "1"]) == 0
    cold = capsys.readouterr().out
    assert sample_main([*common, "--top-k", "1", "--seed", "2"]) == 0
    assert capsys.readouterr().out == cold
