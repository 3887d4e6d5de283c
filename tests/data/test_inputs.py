"""crate_nn.data.inputs: a seeded sample of a model's inputs — images of a folder (files that are not images skipped
and counted), of a built dataset, windows of a text file (non-overlapping) — normalised as the model takes them, and
each refusal one line naming its argument."""
import numpy as np
import pytest
import torch
from PIL import Image

import crate_nn
from crate_nn.data import build_dataset
from crate_nn.data.inputs import LEAST, dataset_images, folder_images, image_files, resized, text_windows

SMALL = dict(dim=32, depth=3, heads=2, image_size=32, patch_size=8, num_classes=5)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return crate_nn.create_model("crate_tiny", **SMALL).eval()


@pytest.fixture(scope="module")
def gpt():
    torch.manual_seed(0)
    return crate_nn.create_model("crate_gpt_small", dim=32, depth=3, heads=2, vocab_size=300, block_size=16)


def images(folder, count, size=(40, 44), seed=0):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(count):
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(folder / f"{i:03d}.png")
    return folder


def test_a_folder_sample_is_seeded_skips_what_is_not_an_image_and_is_normalised(model, tmp_path):
    folder = images(tmp_path / "val", 8)
    (folder / "notes.txt").write_text("labels")
    (folder / "fake.png").write_text("not an image")
    first, again, other = (folder_images(model, str(folder), 5, seed) for seed in (0, 0, 1))
    assert first.names == again.names and first.names != other.names and len(set(first.names)) == 5
    assert first.tensor.shape == (5, 3, 32, 32) and torch.equal(first.tensor, again.tensor)
    assert sorted(s["file"] for s in first.preprocessing["skipped"]) in (["notes.txt"], ["fake.png", "notes.txt"])
    assert first.preprocessing["source"].startswith("ImageNet's")  # the model records no preprocessing
    # undone, the normalisation gives pixels in [0, 1] again (float32 rounding: 1e-6)
    mean, std = (torch.tensor(first.preprocessing[k]).view(3, 1, 1) for k in ("mean", "std"))
    pixels = first.tensor * std + mean
    assert pixels.min() >= -1e-6 and pixels.max() <= 1 + 1e-6 and pixels.std() > 0.1
    every = image_files(folder, 100, 0, grid=4, all_inputs=True)
    assert len(every.chosen) == 8 and every.candidates == 9 and "2 files skipped" in every.note()


def test_a_dataset_sample_names_its_indices_and_its_resizing(model):
    size = model.config.image_size
    data = build_dataset("digits", "test", data_dir=None, train=False, image_size=size, load_size=resized(size),
                         eval_resize=resized(size))
    with pytest.raises(ValueError, match=r"channels: built-in dataset digits \(test split\) has 1 channel"):
        dataset_images(model, data, "digits", "test", 6, 0)
    taken = dataset_images(model, data, "digits", "test", 6, 0, channels=3)
    assert taken.tensor.shape == (6, 3, 32, 32) and taken.source.endswith("6 of 360, 8×8 resized to 32×32")
    assert all(n.startswith("digits/test/") for n in taken.names)
    with pytest.raises(ValueError, match=r"n: digits \(test split\) holds 360 images; pass --n 360 or less"):
        dataset_images(model, data, "digits", "test", 361, 0, channels=3)
    assert len(dataset_images(model, data, "digits", "test", 361, 0, channels=3, all_inputs=True)) == 360


def test_too_few_images_and_tiny_ones_are_refused_naming_the_argument(model, tmp_path):
    few = images(tmp_path / "few", LEAST - 1)
    with pytest.raises(ValueError) as err:
        folder_images(model, str(few), 5, 0)
    assert str(err.value) == f"images: {str(few)!r} holds 2 images; the audit's rule needs at least 3"
    tiny = images(tmp_path / "tiny", 4)
    Image.new("RGB", (3, 3)).save(tiny / "002.png")
    with pytest.raises(ValueError, match="images: '002.png' is 3×3 pixels, fewer a side than the model's 4×4 patches"):
        folder_images(model, str(tiny), 4, 0)
    with pytest.raises(ValueError, match="images: 'absent' does not exist or is not a folder"):
        folder_images(model, "absent", 4, 0)


def test_text_windows_do_not_overlap_and_a_short_text_names_n(gpt, tmp_path):
    (tmp_path / "book.txt").write_text("".join(chr(97 + i % 26) for i in range(200)))  # 12 windows of 16 bytes
    taken = text_windows(gpt, str(tmp_path / "book.txt"), 12, 0, tokenizer="bytes")
    starts = sorted(int(name.split()[1].split("–")[0]) for name in taken.names)
    assert starts == list(range(0, 192, 16))  # every non-overlapping window once
    start = int(taken.names[0].split()[1].split("–")[0])
    assert taken.tensor[0].tolist() == list((tmp_path / "book.txt").read_bytes()[start:start + 16])
    with pytest.raises(ValueError, match=r"\(200 tokens\) holds 12 non-overlapping windows of 16 tokens \(a shorter "
                                         r"--window gives more\); pass --n 12 or less"):
        text_windows(gpt, str(tmp_path / "book.txt"), 13, 0, tokenizer="bytes")
    assert len(text_windows(gpt, str(tmp_path / "book.txt"), 100, 0, tokenizer="bytes", window=8,
                            all_inputs=True)) == 25


@pytest.mark.parametrize("content, message", [
    (b"", "text: {path!r} is empty"),
    (b"some text\x00 and a binary tail", "text: {path!r} holds NUL bytes (the first at byte 9): a binary file, not text"),
])
def test_empty_and_binary_text_files_are_refused(gpt, tmp_path, content, message):
    path = tmp_path / "book.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        text_windows(gpt, str(path), 4, 0, tokenizer="bytes")
    assert str(err.value) == message.format(path=str(path))


def test_a_text_without_a_tokenizer_or_past_the_block_size_is_refused(gpt, tmp_path):
    (tmp_path / "book.txt").write_text("text " * 40)
    with pytest.raises(ValueError, match="tokenizer: the checkpoint records no tokenizer; pass --tokenizer"):
        text_windows(gpt, str(tmp_path / "book.txt"), 4, 0)
    with pytest.raises(ValueError, match="window: 17 exceeds the model's block_size 16"):
        text_windows(gpt, str(tmp_path / "book.txt"), 4, 0, tokenizer="bytes", window=17)
