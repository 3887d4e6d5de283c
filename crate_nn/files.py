"""Reading and writing files so that a failure is one line naming the file: text that is not UTF-8 (with the byte
offset of the first bad byte), JSON that does not parse, and a write the operating system refuses (a full disk, a
read-only folder) — instead of an exception that names neither the file nor what was being done with it.
"""
from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path


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
