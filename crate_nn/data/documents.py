"""Documents of a text corpus: where each one's text lives, their order, the split by documents, and their
tokens.

Every input file is a document, except ``.jsonl`` files, where each line's ``"text"`` is one (the usual export of
OpenWebText, Wikipedia, BookCorpus). Documents are ordered by the CRC-32 of their identifier (relative path,
``path:line`` for JSONL; ties by name): deterministic, and independent of the order in which the files are listed
or found. `split_ids` holds out whole documents in that order (the built-in corpus's split, and ``crate-prepare-text
--split-by documents``; the split by tokens is `crate_nn.data.preparation.token_split`).

The built-in corpus (`stdlib_documents`; its tokens: `crate_nn.data.corpus.builtin_corpus`): every ``*.py`` file of
the running interpreter's standard library (``sysconfig``'s ``stdlib`` path, ``site-packages`` excluded), sorted by
relative path, read as UTF-8 (undecodable bytes replaced) — real text that exists on every machine (≈ 31M bytes,
1,790 files on CPython 3.11; other versions differ). Split by documents with val_fraction 0.01
(`BUILTIN_VAL_FRACTION`).
"""
from __future__ import annotations

import functools
import json
import math
import multiprocessing
import os
import re
import sysconfig
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from .tokenizers import Tokenizer, get_tokenizer

BUILTIN_VAL_FRACTION = 0.01


def split_ids(doc_ids: Sequence[str], val_fraction: float) -> set[str]:
    """The validation documents: the ⌈val_fraction·N⌉ (≥ 1) identifiers with the smallest CRC-32 (ties by name)."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction: expected a value in (0, 1), got {val_fraction}")
    if len(doc_ids) < 2:
        raise ValueError(f"corpus: {len(doc_ids)} document(s); a train/val split needs at least 2 (one file per "
                         "document, or one JSON line per document)")
    count = min(len(doc_ids) - 1, max(1, math.ceil(val_fraction * len(doc_ids))))
    return set(sorted(doc_ids, key=lambda d: (zlib.crc32(d.encode("utf-8")), d))[:count])


@dataclass(frozen=True, slots=True)
class Document:
    """Where one document's text lives: the file ``path`` (``name`` relative to its input), or line ``line``
    (0-based) of a JSONL file. Sorted by (name, line), so one JSONL file's documents follow each other in order."""

    name: str
    path: str
    line: int | None = None

    @property
    def id(self) -> str:
        """The identifier the split hashes: ``name``, or ``name:line`` for a JSONL line."""
        return self.name if self.line is None else f"{self.name}:{self.line}"

    def key(self) -> tuple[str, int]:
        return self.name, -1 if self.line is None else self.line


DECODE_ERRORS = ("strict", "replace")
_ESCAPED = re.compile("[\udc80-\udcff]")  # the bytes surrogateescape could not decode, one character each


def decode(data: bytes, where: str, errors: str = "strict") -> tuple[str, int]:
    """``data`` read as UTF-8 and the number of its bytes that are not UTF-8 (``where`` names it in errors).

    ``errors="strict"``: ValueError naming ``where``, the first such byte and its offset; ``"replace"``: each
    undecodable sequence becomes U+FFFD (Python's ``errors="replace"``)."""
    try:
        return data.decode("utf-8"), 0
    except UnicodeDecodeError as err:
        if errors == "strict":
            raise ValueError(f"corpus: {where} is not UTF-8 (byte {data[err.start]:#04x} at offset {err.start}); "
                             "--errors replace reads it with U+FFFD for each undecodable sequence, counting the "
                             "bytes") from None
    return data.decode("utf-8", errors="replace"), len(_ESCAPED.findall(data.decode("utf-8", "surrogateescape")))


def read_texts(documents: Iterable[Document], errors: str = "strict",
               undecodable: dict[str, int] | None = None) -> Iterator[str]:
    """The text of each document in order, reading each JSONL file once (documents sorted by `Document.key`).

    Bytes that are not UTF-8 are refused (``errors="strict"``) or replaced (``"replace"``; `decode`); with
    ``undecodable``, the number replaced is recorded under the id of each document that had any."""
    if errors not in DECODE_ERRORS:
        raise ValueError(f"errors: expected one of {', '.join(DECODE_ERRORS)}, got {errors!r}")
    handle, current, position = None, None, -1
    try:
        for document in documents:
            if document.line is None:
                text, bad = decode(Path(document.path).read_bytes(), document.path, errors)
            else:
                if document.path != current or document.line <= position:
                    if handle is not None:
                        handle.close()
                    handle, current, position = open(document.path, "rb"), document.path, -1
                row = b""
                while position < document.line:
                    row, position = handle.readline(), position + 1
                row, bad = decode(row, f"line {document.line + 1} of {document.path}", errors)
                text = _jsonl_text(row, document.path, document.line)
            if bad and undecodable is not None:
                undecodable[document.id] = bad
            yield text
    finally:
        if handle is not None:
            handle.close()


def _jsonl_text(row: str, path: str, line: int) -> str:
    try:
        text = json.loads(row)["text"]
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise ValueError(f"corpus: line {line + 1} of {path} is not a JSON object with a 'text' field") from err
    if not isinstance(text, str):
        raise ValueError(f"corpus: the 'text' of line {line + 1} of {path} is not a string")
    return text


def find_documents(inputs: Sequence[str | os.PathLike], pattern: str = "*") -> list[Document]:
    """The documents of ``inputs`` (files, or folders searched recursively for ``pattern``), sorted by identifier:
    one per file, one per non-empty line of a ``.jsonl`` file. Missing inputs and an empty result raise ValueError."""
    documents: list[Document] = []
    for item in inputs:
        root = Path(item)
        if not root.exists():
            raise ValueError(f"corpus: {str(root)!r} does not exist")
        files = sorted(p for p in root.rglob(pattern) if p.is_file()) if root.is_dir() else [root]
        for path in files:
            name = str(path.relative_to(root)) if root.is_dir() else path.name
            if path.suffix == ".jsonl":
                with open(path, "rb") as f:  # lines split at b"\n" only, as read_texts reads them
                    documents += [Document(name, str(path), i) for i, row in enumerate(f) if row.strip()]
            else:
                documents.append(Document(name, str(path)))
    if not documents:
        raise ValueError(f"corpus: no documents found in {[str(i) for i in inputs]} (pattern {pattern!r})")
    documents.sort(key=Document.key)
    if any(a.key() == b.key() for a, b in zip(documents, documents[1:])):
        raise ValueError("corpus: two inputs hold documents of the same relative name; pass their common parent")
    return documents


def stdlib_root() -> Path:
    """The running interpreter's standard-library folder."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_documents() -> list[Document]:
    """The built-in corpus: every ``*.py`` of the standard library outside ``site-packages``/``dist-packages``."""
    root = stdlib_root()
    files = []
    for folder, subfolders, names in os.walk(root):
        subfolders[:] = [s for s in subfolders if s not in ("site-packages", "dist-packages", "__pycache__")]
        files += [Path(folder, n) for n in names if n.endswith(".py")]
    if not files:
        raise ValueError(f"corpus: no Python source files under the standard library {str(root)!r} (an installation "
                         "without its .py files); prepare a corpus with crate-prepare-text and pass its data_dir")
    return sorted((Document(str(p.relative_to(root)), str(p)) for p in files), key=Document.key)


# ------------------------------------------------------------------------------------------------ tokens
_WORKER_TOKENIZER: Tokenizer | None = None


def _init_worker(tokenizer: Tokenizer | str) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = get_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer


def _encode_text(text: str) -> np.ndarray:
    ids = _WORKER_TOKENIZER.encode(text)
    eot = _WORKER_TOKENIZER.eot_id
    return ids if eot is None else np.append(ids, eot)


def encode_documents(documents: Sequence[Document], tokenizer: Tokenizer, workers: int = 1,
                     progress: bool = False, errors: str = "strict",
                     undecodable: dict[str, int] | None = None) -> Iterator[np.ndarray]:
    """Each document's ids followed by the end-of-text id, in order (``workers`` processes when > 1); ``errors``
    and ``undecodable``: bytes that are not UTF-8, as in `read_texts`."""
    bar = functools.partial(tqdm, total=len(documents), disable=not progress, unit="doc", desc="tokenizing")
    texts = read_texts(documents, errors, undecodable)
    if workers <= 1:
        _init_worker(tokenizer)
        yield from bar(map(_encode_text, texts))
        return
    with multiprocessing.get_context("spawn").Pool(workers, _init_worker, (tokenizer.spec,)) as pool:
        yield from bar(pool.imap(_encode_text, texts, chunksize=64))
