"""Reading and writing files so that a failure is one line naming the file: text that is not UTF-8 (with the byte
offset of the first bad byte), JSON that does not parse, and a write the operating system refuses (a full disk, a
read-only folder) — instead of an exception that names neither the file nor what was being done with it.

Two more things every writer shares: `atomic_write` (a file is replaced whole or not at all: a reader, or a run
killed mid-write, never sees part of it; `write_json` on top of it) and `FileLock` (one process at a time holds a
file, e.g. a run directory; the operating system drops the lock with its process).
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO


class WriteError(OSError):
    """A file could not be written; ``errno`` is the operating system's, the message names the file."""

    def __str__(self) -> str:
        return self.strerror


@contextlib.contextmanager
def writing(what: str, path: str | os.PathLike) -> Iterator[None]:
    """Turn an OSError raised inside the block into `WriteError` "``what``: cannot write ``path``: <OS message>"."""
    try:
        yield
    except OSError as err:
        reason = err.strerror or str(err) or type(err).__name__
        raise WriteError(err.errno, f"{what}: cannot write {os.fspath(path)}: {reason}") from err


def read_text(path: str | os.PathLike, what: str) -> str:
    """The UTF-8 text of ``path``; ValueError "``what``: <path> is not UTF-8 text (byte 0x.. at byte offset N, line
    L)" when it is not."""
    data = Path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(f"{what}: {os.fspath(path)} is not UTF-8 text (byte 0x{data[err.start]:02x} at byte offset "
                         f"{err.start}, line {line})") from err


def read_json(path: str | os.PathLike, what: str):
    """The JSON value in ``path`` (`read_text`); ValueError naming the file and the position when it does not
    parse."""
    try:
        return json.loads(read_text(path, what))
    except json.JSONDecodeError as err:
        raise ValueError(f"{what}: {os.fspath(path)} is not valid JSON ({err})") from err


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once at import (os.umask can only be read by setting it)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, what: str) -> Iterator[BinaryIO]:
    """Write ``path`` whole or not at all: the block writes to the binary file it is given (a temporary file beside
    ``path``), which is flushed, fsynced and renamed to ``path`` when the block ends, with the mode any new file
    gets. On an error the temporary file is removed and ``path`` is left as it was; an OSError (a full disk, a
    read-only folder) becomes `WriteError` "``what``: cannot write ``path``: <OS message>"."""
    path = os.fspath(path)
    with writing(what, path):
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=os.path.dirname(os.path.abspath(path)))
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


def write_json(path: str | os.PathLike, value, what: str, indent: int | None = 1) -> None:
    """``value`` as JSON text (and a final newline) in ``path``, written by `atomic_write`."""
    with atomic_write(path, what) as f:
        f.write((json.dumps(value, indent=indent) + "\n").encode())


class FileLock:
    """An exclusive lock on ``path`` (POSIX ``flock``), held inside a ``with`` block: a second process asking for it
    waits (``blocking``) or gets ``refuse(holder)`` raised, ``holder`` being what the first one wrote into the file
    (its process, host and command). The operating system drops the lock with its process, so a killed holder never
    leaves a stale lock. ``enabled=False`` (e.g. every process but the main one) and systems without ``fcntl`` take
    no lock."""

    def __init__(self, path: str | os.PathLike, *, blocking: bool = False, enabled: bool = True,
                 refuse: Callable[[str], Exception] | None = None) -> None:
        self.path, self.blocking, self.enabled = Path(path), blocking, enabled
        self.refuse = refuse or (lambda holder: ValueError(f"{self.path}: held by {holder}"))
        self._file = None

    def __enter__(self) -> FileLock:
        if not self.enabled:
            return self
        try:
            import fcntl
        except ImportError:  # not POSIX: no lock
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if self.blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise self.refuse(holder) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"process {os.getpid()} on {socket.gethostname()}: {' '.join(sys.argv)[:200]}\n")
        handle.flush()
        self._file = handle
        return self

    def __exit__(self, *exc) -> None:
        if self._file is not None:
            self._file.close()  # closing the file releases the lock
            self._file = None
