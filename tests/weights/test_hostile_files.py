"""Files made to attack a loader, each refused in one line naming the file, with nothing of theirs executed and no
memory allocated from a size they only claim: a torch file whose pickle would run a command (``weights_only=True``),
an ``.npz`` holding object arrays (``allow_pickle=False``; one beside the parameters is never read), ``.npz`` members
with forged sizes, with names that climb out (``..``) or that are not arrays, and a file that is no weights file at
all. The proof that nothing ran: each payload would create a file, and the test asserts it does not exist."""
import io
import os
import struct
import zipfile

import numpy as np
import pytest
import torch

import crate_nn
from crate_nn.export import main as crate_export


class Creates:
    """An object whose unpickling creates the file ``path`` (``os.system("touch …")``)."""

    def __init__(self, path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return os.system, (f"touch {self.path}",)


def refused(path, match: str) -> str:
    """``crate_nn.load(path)`` raises one line naming the file and matching ``match``; the line."""
    with pytest.raises(ValueError, match=match) as raised:
        crate_nn.load(path)
    message = str(raised.value)
    assert "\n" not in message and str(path) in message and "weights_only=False" not in message, message
    return message


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=True)
    return buffer.getvalue()


def archive(path, members: dict[str, bytes], compression=zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def test_a_torch_file_whose_pickle_would_run_a_command_is_refused_unexecuted(tmp_path, capsys):
    witness = tmp_path / "executed"
    torch.save({"model": {"weight": torch.zeros(2)}, "hook": Creates(witness)}, tmp_path / "model.pth")
    message = refused(tmp_path / "model.pth", r"holds Python objects beyond tensors and plain values \(posix.system|"
                                              r"holds Python objects beyond tensors and plain values \(nt.system")
    assert message.endswith("which are never unpickled here (unpickling runs code): not a weights file this package "
                            "reads")
    assert crate_export([str(tmp_path / "model.pth"), str(tmp_path / "out.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "weights_only" not in err  # torch's advice to unpickle it is not passed on
    assert not witness.exists() and not (tmp_path / "out.pt").exists()


def test_object_arrays_are_never_unpickled(tmp_path):
    witness = tmp_path / "executed"
    payload = np.empty(1, dtype=object)
    payload[0] = Creates(witness)
    archive(tmp_path / "objects.npz", {"params/embedding/kernel.npy": npy(payload)})
    refused(tmp_path / "objects.npz", r"its array 'params/embedding/kernel' holds Python objects, which only "
                                      r"unpickling reads \(never done here\)")
    assert not witness.exists()


def test_a_forged_npy_header_allocates_nothing(tmp_path):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    archive(tmp_path / "huge.npz", {"params/embedding/kernel.npy": header.getvalue() + bytes(16)})
    refused(tmp_path / "huge.npz", r"its member 'params/embedding/kernel.npy' declares an array of shape "
                                   r"\(1000000000000,\) and float32 \(4,000,000,000,000 bytes\), but holds 16 bytes")


def test_a_member_declaring_more_than_any_compression_gives_is_refused(tmp_path):
    path = tmp_path / "forged.npz"
    archive(path, {"params/embedding/kernel.npy": npy(np.zeros(64, np.float32))}, zipfile.ZIP_DEFLATED)
    data = bytearray(path.read_bytes())
    for signature, offset in ((b"PK\x01\x02", 24), (b"PK\x03\x04", 22)):  # central directory, local header
        at = data.find(signature)
        data[at + offset:at + offset + 4] = struct.pack("<I", 0xF0000000)  # its uncompressed size: 4 GB
    path.write_bytes(bytes(data))
    refused(path, r"its member 'params/embedding/kernel.npy' declares 4,026,531,840 bytes from \d+ stored: more than "
                  r"any compression gives")


@pytest.mark.parametrize("name", ["../../etc/params/x.npy", "/params/x.npy", "params/../../x.npy"])
def test_a_member_whose_name_climbs_out_is_refused(tmp_path, name):
    archive(tmp_path / "climbs.npz", {name: npy(np.zeros(3, np.float32))})
    refused(tmp_path / "climbs.npz", "is not a plain array name")


def test_a_member_that_is_not_an_array_is_refused(tmp_path):
    """It used to come back as bytes, and converting them was an AttributeError with a traceback."""
    archive(tmp_path / "text.npz", {"params/embedding/kernel.npy": npy(np.zeros(3, np.float32)),
                                    "params/notes": b"not an array"})
    refused(tmp_path / "text.npz", r"its member 'params/notes' is not an array \(.npy\)")


@pytest.mark.parametrize("content, match", [
    (b"", "is empty"),
    (b"hello, world", r"is not a weights file: it begins b'hello, world'"),
    (b"\x89PNG\r\n\x1a\n" + bytes(16), r"is not a weights file: it begins b'\\x89PNG"),
])
def test_a_file_that_is_no_weights_file_says_what_it_begins_with(tmp_path, content, match):
    (tmp_path / "model.pt").write_bytes(content)
    refused(tmp_path / "model.pt", match)


def test_a_plain_pickle_is_one_line_and_no_warning(tmp_path, recwarn):
    """A pickle of a newer protocol made torch print a UserWarning (two more lines on stderr) before its error."""
    import pickle

    witness = tmp_path / "executed"
    with open(tmp_path / "model.pkl", "wb") as f:
        pickle.dump({"model": Creates(witness)}, f, protocol=4)
    refused(tmp_path / "model.pkl", r"model.pkl' (holds Python objects|is not a readable torch checkpoint)")
    assert not [w for w in recwarn if "pickle protocol" in str(w.message)]
    assert not witness.exists()


def test_dinov2s_layout_is_one_line_naming_its_keys_on_the_command_line(tmp_path, capsys):
    model = crate_nn.create_model("vit_small", image_size=8, patch_size=4, dim=8, depth=1, heads=2, num_classes=3,
                                  patch_embed="conv", norm_eps=1e-6)
    state = {**crate_nn.weights.adapters.vit.to_timm(model), "mask_token": torch.zeros(1, 8),
             "register_tokens": torch.zeros(1, 4, 8), "blocks.0.ls1.gamma": torch.ones(8)}
    torch.save(state, tmp_path / "dinov2.pth")
    assert crate_export([str(tmp_path / "dinov2.pth"), str(tmp_path / "out.pt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "['mask_token', 'register_tokens', 'blocks.0.ls1.gamma']: LayerScale, register " \
                                    "tokens or a mask token (DINOv2's layout" in err, err
