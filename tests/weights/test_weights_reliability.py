"""What a weights file can do to a loader, one test per defect, each on small files the test writes: a flipped bit
in a ``.safetensors`` weight, a file whose config declares far more than its tensors, malformed metadata, a full
disk while saving, ``--resume`` from a model-only file, a grayscale model in the authors' format."""
import dataclasses
import errno
import io
import json
import os

import pytest
import torch
from _train_cases import tiny
from safetensors import safe_open
from safetensors.torch import save_file

import crate_nn
from crate_nn.checkpoint import payload_digest
from crate_nn.engine import train
from crate_nn.export import main as crate_export

SIZES = dict(image_size=8, patch_size=4, num_classes=3, dim=8, depth=1, heads=2)


def classifier(**overrides):
    torch.manual_seed(0)
    return crate_nn.create_model("crate_tiny", **{**SIZES, **overrides})


def header(path) -> tuple[dict, dict]:
    """(tensors, metadata) of a safetensors file."""
    with safe_open(str(path), framework="pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata())


def test_a_flipped_bit_in_a_safetensors_weight_is_refused(tmp_path):
    """Our .safetensors carry a checksum (a flipped exponent bit used to load, the weight off by 2^±64, where the
    same damage in a .pt file was refused)."""
    model = classifier()
    with torch.no_grad():
        model.head.fc.bias.copy_(torch.tensor([1.2345, 2.5, -7.0]))
    path = tmp_path / "model.safetensors"
    crate_nn.save(path, model)
    data = bytearray(path.read_bytes())
    at = data.find(torch.tensor([1.2345, 2.5, -7.0]).numpy().tobytes())
    assert at > 0  # safetensors stores the raw little-endian bytes
    data[at + 3] ^= 0x40  # the exponent's high bit of 1.2345
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"checkpoint: '{path}' does not match the checksum written with it"):
        crate_nn.load(path)
    assert crate_nn.load(path, verify=False).head.fc.bias[0].item() != pytest.approx(1.2345)  # forensic reading


def test_the_checksum_covers_the_metadata_too(tmp_path):
    path = tmp_path / "model.safetensors"
    crate_nn.save(path, classifier())
    tensors, metadata = header(path)
    config = json.loads(metadata["config"])
    save_file(tensors, str(path), metadata={**metadata, "config": json.dumps({**config, "lam": 0.2})})
    with pytest.raises(ValueError, match="does not match the checksum"):
        crate_nn.load(path)


def deep_files(tmp_path) -> list:
    """A classifier's tensors (one layer) under a config declaring 10⁶ layers: a .pt file with a valid checksum
    (whoever writes a file writes its checksum) and a .safetensors file without one (as files written before
    checksums existed)."""
    model = classifier()
    config = {**dataclasses.asdict(model.config), "depth": 10**6}
    payload = {"format": "crate_nn", "family": "classifier", "config": config, "model": model.state_dict()}
    torch.save({**payload, "checksum": payload_digest(payload)}, tmp_path / "deep.pt")
    save_file(dict(model.state_dict()), str(tmp_path / "deep.safetensors"),
              metadata={"format": "crate_nn", "family": "classifier", "config": json.dumps(config), "tied": "{}"})
    return [tmp_path / "deep.pt", tmp_path / "deep.safetensors"]


def test_a_config_declaring_far_more_than_its_tensors_is_refused_before_it_is_built(tmp_path):
    """Built on the meta device layer by layer, a depth of 10⁶ took minutes and gigabytes before any tensor was
    compared; building stops as soon as the model outgrows the file's tensors."""
    for path in deep_files(tmp_path):
        with pytest.raises(ValueError, match=rf"'{path}' does not hold the model its config describes: its config "
                                             r"declares a model larger than its \d+ tensors") as raised:
            crate_nn.load(path)
        assert "\n" not in str(raised.value)


def rewritten(tmp_path, change) -> str:
    """Our .safetensors file of a tiny classifier with its metadata changed by ``change`` (without a checksum, as
    files written before checksums existed, so that the change itself is what the loader meets)."""
    source = tmp_path / "good.safetensors"
    crate_nn.save(source, classifier())
    tensors, metadata = header(source)
    metadata.pop("checksum", None)
    path = tmp_path / "bad.safetensors"
    save_file(tensors, str(path), metadata=change(metadata))
    return str(path)


MALFORMED = {
    "no family": lambda m: {k: v for k, v in m.items() if k != "family"},
    "unknown family": lambda m: {**m, "family": "nope"},
    "no config": lambda m: {k: v for k, v in m.items() if k != "config"},
    "config not JSON": lambda m: {**m, "config": "{depth: 1"},
    "config a list": lambda m: {**m, "config": "[1, 2]"},
    "unknown option": lambda m: {**m, "config": json.dumps({**json.loads(m["config"]), "wings": 2})},
    "config against the tensors": lambda m: {**m, "config": json.dumps({**json.loads(m["config"]), "depth": 2})},
    "tied not JSON": lambda m: {**m, "tied": "{"},
    "tied to an absent tensor": lambda m: {**m, "tied": json.dumps({"head.fc.weight": "nowhere"})},
    "preprocessing unknown": lambda m: {**m, "preprocessing": json.dumps({"gamma": 2.2})},
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_metadata_is_one_line_naming_the_file(case, tmp_path, capsys):
    path = rewritten(tmp_path, MALFORMED[case])
    with pytest.raises(ValueError, match=path) as raised:
        crate_nn.load(path)
    assert "\n" not in str(raised.value)
    assert crate_export([path, str(tmp_path / "out.pt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"crate-export: checkpoint: '{path}'") and err.count("\n") == 1, err
    assert not (tmp_path / "out.pt").exists()


class FullDisk(io.RawIOBase):
    """A file whose device fills up after ``room`` bytes."""

    def __init__(self, file, room: int) -> None:
        super().__init__()
        self.file, self.room = file, room

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def fileno(self) -> int:
        return self.file.fileno()

    def close(self) -> None:
        super().close()  # flushes first
        self.file.close()


@pytest.mark.parametrize("name", ["last.pt", "model.safetensors"])
def test_a_full_disk_while_saving_names_the_file_and_leaves_nothing(name, tmp_path, monkeypatch):
    """torch's zip writer reports the refused write as its own RuntimeError ("[enforce fail at
    inline_container.cc] unexpected pos"), which named neither the file nor the full disk."""
    real = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, *args, **kwargs: FullDisk(real(fd, *args, **kwargs), room=1000))
    with pytest.raises(OSError) as raised:
        crate_nn.save(tmp_path / name, classifier())
    assert str(raised.value) == f"checkpoint: cannot write {tmp_path / name}: No space left on device"
    assert raised.value.errno == errno.ENOSPC and os.listdir(tmp_path) == []


def test_resume_from_a_model_only_checkpoint_is_one_line(tmp_path):
    run = train(tiny(tmp_path, max_steps=2))
    crate_nn.save(run.checkpoint, crate_nn.load(run.checkpoint))  # the model alone, as crate-export writes it
    with pytest.raises(ValueError, match=r"resume: .*last.pt holds no training run's state \(train_config, "
                                         r"optimizer, position, rng missing: a model-only checkpoint") as raised:
        train(tiny(tmp_path, max_steps=3, resume=True))
    assert "\n" not in str(raised.value)


def test_a_grayscale_model_in_the_authors_format_loads_back_without_its_channels(tmp_path):
    """Their files fix P²·C, not C: C is the one of 3 and 1 that fits (no P²·C fits both); another channel count
    is an error naming the option that fixes it."""
    gray = classifier(in_channels=1)
    crate_nn.save(tmp_path / "gray.pt", gray)
    assert crate_export([str(tmp_path / "gray.pt"), str(tmp_path / "gray.pth"), "--format", "official-classifier"]) == 0
    back = crate_nn.load(tmp_path / "gray.pth", heads=2)
    assert back.config.in_channels == 1 and back.config.patch_size == 4
    assert all(torch.equal(back.state_dict()[k], v) for k, v in gray.state_dict().items())
    two = crate_nn.checkpoint.read(tmp_path / "gray.pth")
    two["to_patch_embedding.1.weight"] = torch.ones(32)  # P²·C = 32: C = 2 with P = 4
    two["to_patch_embedding.1.bias"] = torch.zeros(32)
    two["to_patch_embedding.2.weight"] = torch.zeros(8, 32)
    torch.save(two, tmp_path / "two.pth")
    with pytest.raises(ValueError, match=r"in_channels: the patch dimension 32 \(P²·C\) fits neither 3 nor 1 image "
                                         r"channels; pass the channels as in_channels="):
        crate_nn.load(tmp_path / "two.pth", heads=2)
    assert crate_nn.load(tmp_path / "two.pth", heads=2, in_channels=2).config.patch_size == 4
