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
import math
import os
import pickle
import re
import struct
import warnings
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
    values; ValueError naming the file when it is missing, empty, not a torch file (by its first bytes), truncated,
    or holds other Python objects (`refused_objects`: never unpickled, and torch's advice to load it unsafely is not
    passed on)."""
    require_file(path, what)
    with open(path, "rb") as f:
        head = f.read(16)
    if not head:
        raise ValueError(f"{what}: {path!r} is empty")
    if not head.startswith(TORCH_MAGIC):
        raise ValueError(f"{what}: {path!r} is not a weights file: it begins {head!r} (a torch file begins with a zip "
                         "archive's PK or a pickle's \\x80, a .safetensors file with its header's length, an .npz "
                         "file with PK)")
    try:
        with torch.serialization.safe_globals(list(allowed)), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise ValueError(f"{what}: {path!r} {refused_objects(str(err))}") from None
    except (RuntimeError, EOFError, KeyError, ValueError, UnicodeDecodeError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"{what}: {path!r} is not a readable torch checkpoint (truncated or another kind of file): "
                         f"{type(err).__name__}: {reason[:300]}") from None


def refused_objects(message: str) -> str:
    """What torch's ``weights_only`` unpickler refused, from its error ``message`` (which goes on to advise loading
    the file with ``weights_only=False``, i.e. running whatever it holds): ``holds a Python object torch reads only by
    running code (posix.system) …``."""
    found = re.search(r"GLOBAL ([\w.]+)", message)
    opcode = re.search(r"Unsupported operand (\d+)", message)
    what = found.group(1) if found else f"pickle opcode {opcode.group(1)}" if opcode else "not tensors"
    return (f"holds Python objects beyond tensors and plain values ({what}), which are never unpickled here "
            "(unpickling runs code): not a weights file this package reads")


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


MAX_EXPANSION = 1100
"""How many times its stored size a member of a zip archive may declare: DEFLATE's largest ratio is 1032:1 (runs of
one byte), so a member declaring more lies about its size."""


def memory_bytes() -> int | None:
    """This machine's physical memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _plain_name(name: str) -> bool:
    """Whether an archive member's name is a relative name without ``..`` (what NumPy writes: ``params/…/kernel.npy``)."""
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and "\\" not in name and ":" not in parts[0] \
        and all(part not in ("", "..") for part in parts)


def check_npz_members(path: str, what: str = "checkpoint") -> set[str]:
    """The arrays of the ``.npz`` archive ``path`` that hold Python objects (never read: only unpickling would,
    `NpzArrays` refuses them), after checking every member: ValueError naming the file and the member unless it has
    a relative name without ``..`` (`_plain_name`) and an ``.npy`` header (read alone, nothing else) of a number or
    void dtype, or of objects; a numeric member's declared size must be that of its header's shape and dtype, no
    more than `MAX_EXPANSION` times its stored bytes and no more than this machine's memory. So no array is
    allocated from a size the file only claims."""
    memory, objects = memory_bytes(), set()
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name, where = info.filename, f"{what}: {path!r}: its member {info.filename!r}"
            if not _plain_name(name):
                raise ValueError(f"{where} is not a plain array name (an absolute path or '..')")
            if not name.endswith(".npy"):
                raise ValueError(f"{where} is not an array (.npy)")
            stored = info.compress_size
            if (info.file_size != stored if info.compress_type == zipfile.ZIP_STORED
                    else info.file_size > MAX_EXPANSION * stored + 1024):
                raise ValueError(f"{where} declares {info.file_size:,} bytes from {stored:,} stored: more than any "
                                 "compression gives (a damaged or forged archive)")
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                if version not in ((1, 0), (2, 0)):
                    raise ValueError(f"{where} is an .npy file of version {version}, not 1.0 or 2.0")
                read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                    np.lib.format.read_array_header_2_0
                shape, _, dtype = read(member)
                header = member.tell()
            if dtype.hasobject:
                objects.add(name.removesuffix(".npy"))
                continue
            if dtype.kind not in "biufV":
                raise ValueError(f"{where} holds {dtype} values, not numbers")
            size = math.prod(shape) * dtype.itemsize
            if header + size != info.file_size:
                raise ValueError(f"{where} declares an array of shape {tuple(shape)} and {dtype} ({size:,} bytes), "
                                 f"but holds {info.file_size - header:,} bytes")
            if memory is not None and size > memory:
                raise ValueError(f"{where} declares {size:,} bytes, more than this machine's memory ({memory:,})")
    return objects


class ArrayError(ValueError):
    """An array of an ``.npz`` file that cannot be read; the message names the file and the array."""


class NpzArrays(Mapping):
    """The arrays of a ``.npz`` file as torch tensors, by name, each read when first asked for (a training
    checkpoint's optimizer state, stored beside its parameters, is never read unless asked for) and kept.

    bfloat16 arrays, which NumPy stores as 2-byte void (JAX's checkpoints), come back as ``torch.bfloat16``, bit for
    bit; big-endian arrays come back with their values, in this machine's byte order. Every member is checked when
    the file is opened (`check_npz_members`: names, dtypes, declared sizes), so a member with a forged size or a
    name with ``..`` is a ValueError naming the file and the member before any array is read; an array of Python
    objects (a training checkpoint's bookkeeping beside the parameters) is refused only if it is asked for (NumPy
    reads it with ``allow_pickle=False`` in any case); so is a damaged member when it is read."""

    def __init__(self, path: str, what: str = "checkpoint") -> None:
        self.path, self.what, self._read = path, what, {}
        require_file(path, what)
        try:
            self._objects = check_npz_members(path, what)
            with np.load(path, allow_pickle=False) as archive:
                self._names = list(archive.files)
        except (OSError, EOFError, zipfile.BadZipFile, zipfile.LargeZipFile) as err:
            raise ValueError(f"{what}: {path!r} is not a readable .npz file (empty, truncated or another kind of "
                             f"file): {type(err).__name__}: {str(err)[:300]}") from None
        except ValueError as err:
            if str(err).startswith(f"{what}: {path!r}"):
                raise
            raise ValueError(f"{what}: {path!r} is not a readable .npz file: {str(err)[:300]}") from None

    def __getitem__(self, name: str) -> torch.Tensor:
        if name not in self._read:
            if name not in self._names:
                raise KeyError(name)
            if name in self._objects:
                raise ArrayError(f"{self.what}: {self.path!r}: its array {name!r} holds Python objects, which only "
                                 "unpickling reads (never done here)")
            try:
                with np.load(self.path, allow_pickle=False) as archive:
                    array = archive[name]
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
                raise ArrayError(f"{self.what}: {self.path!r}: its array {name!r} is not readable: "
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
        raise ArrayError(f"{source} has dtype {array.dtype}, not a number type")
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
