"""Weight files as bytes: atomic writes, safe torch reads, safetensors and NumPy ``.npz`` reads and writes.

Nothing here knows a format: `crate_nn.weights.ours` and the adapters decide what the dictionaries mean. A write goes
to a temporary file beside the target, is fsynced and renamed over it, so a crash or a full disk never leaves a
half-written file under the final name; the operating system's refusal is `crate_nn.files.WriteError` naming the
file, even where torch's zip writer turns it into its own ``RuntimeError``. A torch file is read with
``weights_only=True`` (no arbitrary unpickling); a file that is missing, empty, truncated or of another kind is a
ValueError naming it. Whether a file is safetensors, NumPy's ``.npz`` (JAX checkpoints: `NpzArrays`) or torch is
told from its bytes, so files without a suffix (as some published weights are) are read too.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import struct
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping

import numpy as np
import torch

from .. import files
from ..extras import require

SAFETENSORS = ".safetensors"
NPZ = ".npz"
TORCH_MAGIC = (b"PK\x03\x04", b"\x80")
"""How torch files begin: a zip archive (torch.save since 1.6), or a pickle (the legacy format)."""


def writes_safetensors(path) -> bool:
    """Whether a path to write names a safetensors file (by its suffix)."""
    return os.fspath(path).endswith(SAFETENSORS)


def is_safetensors(path: str) -> bool:
    """Whether the existing file ``path`` is safetensors: by its suffix, else by its first bytes (an 8-byte header
    length that fits the file, then ``{``), so a file without a suffix is told apart from a torch file."""
    if path.endswith(SAFETENSORS):
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(9)
        size = os.path.getsize(path)
    except OSError:
        return False
    if len(head) < 9 or head.startswith(TORCH_MAGIC):
        return False
    return head[8:9] == b"{" and struct.unpack("<Q", head[:8])[0] <= size - 8


def require_file(path: str, what: str) -> None:
    """ValueError ``<what>: '<path>' does not exist or is not a file`` unless it is one."""
    if not os.path.isfile(path):
        raise ValueError(f"{what}: {path!r} does not exist or is not a file")


def atomic_save(payload, path: str | os.PathLike) -> None:
    """``torch.save(payload)`` to a temporary file beside ``path``, fsync, then rename it to ``path``. A write the
    operating system refuses (a full disk) raises `crate_nn.files.WriteError` naming ``path``."""
    atomic_write(path, lambda f: torch.save(payload, f))


class _Recording:
    """The file a writer writes to, remembering the operating system's refusal: torch's zip writer reports a failed
    write as its own RuntimeError (``[enforce fail at inline_container.cc] unexpected pos …``), which says neither
    the file nor the reason."""

    def __init__(self, file) -> None:
        self.file, self.refusal = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as err:
            self.refusal = err
            raise

    def flush(self) -> None:
        self.file.flush()


def atomic_write(path: str | os.PathLike, write: Callable) -> None:
    """``write(file)`` into ``path`` whole or not at all (`crate_nn.files.atomic_write`); torch's zip writer's own
    RuntimeError for a write the operating system refused is that refusal, a WriteError naming ``path``."""
    with files.atomic_write(path, "checkpoint") as f:
        recording = _Recording(f)
        try:
            write(recording)
        except RuntimeError:
            if recording.refusal is None:
                raise
            raise recording.refusal from None


def read_torch(path: str, map_location="cpu", allowed: Iterable[type] = (), what: str = "checkpoint"):
    """What a torch file holds, read with ``weights_only=True`` and the types ``allowed`` beside tensors and plain
    values; ValueError naming the file when it is missing, empty, truncated or not a torch file."""
    require_file(path, what)
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(path, map_location=map_location, weights_only=True)
    except (RuntimeError, EOFError, KeyError, ValueError, pickle.UnpicklingError, UnicodeDecodeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{what}: {path!r} is not a readable torch checkpoint (empty, truncated or another kind "
                         f"of file): {type(err).__name__}: {reason[:300]}") from err


def _safetensors():
    require("safetensors", "path", "a .safetensors file")
    import safetensors.torch

    return safetensors.torch


def read_safetensors(path: str, map_location="cpu", what: str = "checkpoint") -> tuple[dict, dict[str, str]]:
    """(the tensors, the header's metadata) of a safetensors file; ValueError naming it when it is missing or not
    safetensors."""
    require_file(path, what)
    safetensors_torch = _safetensors()
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="pt") as f:
            metadata = f.metadata() or {}
        return safetensors_torch.load_file(path, device=str(map_location)), metadata
    except (SafetensorError, OSError, ValueError, json.JSONDecodeError) as err:
        raise ValueError(f"{what}: {path!r} is not a readable safetensors file: {err}") from None


def write_safetensors(path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """``tensors`` with ``metadata`` in the header, written atomically (`atomic_write`)."""
    data = _safetensors().save(tensors, metadata=metadata)
    atomic_write(path, lambda f: f.write(data))


def is_npz(path: str) -> bool:
    """Whether the existing file ``path`` is a NumPy ``.npz`` archive (``np.savez``): by its suffix, else by its
    contents — a zip archive of ``.npy`` members only (a torch file is a zip archive too, holding ``data.pkl``)."""
    if path.endswith(NPZ):
        return True
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (OSError, zipfile.BadZipFile, ValueError):
        return False
    return bool(names) and all(name.endswith(".npy") for name in names)


class NpzArrays(Mapping):
    """The arrays of a ``.npz`` file as torch tensors, by name, each read when first asked for (a training
    checkpoint's optimizer state, stored beside its parameters, is never read unless asked for) and kept.

    bfloat16 arrays, which NumPy stores as 2-byte void (JAX's checkpoints), come back as ``torch.bfloat16``, bit for
    bit; big-endian arrays come back with their values, in this machine's byte order. Reading an array that is not a
    plain numeric one (an object array, which would need unpickling) or a damaged member is a ValueError naming the
    file and the array."""

    def __init__(self, path: str, what: str = "checkpoint") -> None:
        self.path, self.what, self._read = path, what, {}
        require_file(path, what)
        try:
            with np.load(path, allow_pickle=False) as archive:
                self._names = list(archive.files)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
            raise ValueError(f"{what}: {path!r} is not a readable .npz file (empty, truncated or another kind of "
                             f"file): {type(err).__name__}: {str(err)[:300]}") from None

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._read:
            if name not in self._names:
                raise KeyError(name)
            try:
                with np.load(self.path, allow_pickle=False) as archive:
                    array = archive[name]
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
                raise ValueError(f"{self.what}: {self.path!r}: its array {name!r} is not readable: "
                                 f"{type(err).__name__}: {str(err)[:300]}") from None
            self._read[name] = _from_numpy(array, f"{self.what}: {self.path!r}: its array {name!r}")
        return self._read[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _from_numpy(array: np.ndarray, source: str) -> torch.Tensor:
    """A tensor holding ``array``'s values (a 2-byte void array as bfloat16, JAX's way of storing it)."""
    if array.dtype.kind == "V" and array.dtype.itemsize == 2:
        return torch.from_numpy(np.ascontiguousarray(array).view(np.int16)).view(torch.bfloat16)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{source} has dtype {array.dtype}, not a number type")
    if not array.dtype.isnative:  # a big-endian file: the same values in this machine's byte order
        array = array.astype(array.dtype.newbyteorder("="))
    return torch.from_numpy(np.ascontiguousarray(array))


def _to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """The inverse of `_from_numpy`: bfloat16 as 2-byte void, as JAX stores it."""
    tensor = tensor.detach().to("cpu").contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view("V2")
    return tensor.numpy()


def write_npz(path, tensors: Mapping[str, torch.Tensor]) -> None:
    """``tensors`` as the arrays of a ``.npz`` file (``np.savez``, uncompressed), written atomically."""
    buffer = io.BytesIO()
    np.savez(buffer, **{name: _to_numpy(t) for name, t in tensors.items()})
    atomic_write(path, lambda f: f.write(buffer.getbuffer()))
