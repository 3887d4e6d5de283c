"""Text data of the language models (nothing is downloaded at run time): tokenizers, nanoGPT-style token files, the
built-in corpus (the Python standard library's own source), datasets of token blocks, GLUE-format TSV files.

Tokenizers (`get_tokenizer`, by spec):

* ``bytes`` — built in, needs nothing: UTF-8 bytes 0–255, ``<|endoftext|>`` = 256, ``<mask>`` = 257 (V = 258).
* ``tiktoken:<encoding>`` — e.g. ``tiktoken:gpt2`` (the GPT-2 BPE of CRATE-GPT; V = 50,257, padded to 50,304 in
  the model); needs ``pip install tiktoken``, which downloads the encoding once into its cache.
* ``hf:<name>`` or ``hf:<path/to/tokenizer.json>`` — a Hugging Face ``tokenizers`` tokenizer, e.g. ``hf:roberta-base``
  (the RoBERTa BPE of CRATE-BERT; V = 50,265); needs ``pip install tokenizers``, which downloads it once.
  A tokenizer that cannot be obtained (not installed, offline and not cached) raises ValueError saying how.

Token files (``crate-prepare-text``, `prepare`): ``<dir>/train.bin`` and ``<dir>/val.bin`` hold the token ids of
every document followed by the end-of-text id, as a flat array (uint16 when V ≤ 65,536, as nanoGPT; else uint32),
memory-mapped by `load_corpus`; ``<dir>/meta.json`` records the tokenizer, V, the dtype, the special ids, the
document and token counts (it is written last: its presence marks a complete preparation).

Documents and the split: every input file is a document, except ``.jsonl`` files, where each line's ``"text"``
is one (the usual export of OpenWebText, Wikipedia, BookCorpus). Documents are ordered by the CRC-32 of their
identifier (relative path, ``path:line`` for JSONL; ties by name): deterministic, and independent of the order in
which the files are listed or found. Two rules (``crate-prepare-text --split-by``):

* by tokens (the default, `token_split`): validation holds round(val_fraction · T) of the T tokens (at least 1,
  at most T − 1, val_fraction 0.1 by default): documents in that order go to validation whole while they fit, and
  the one that crosses the mark gives its last tokens (its head stays in training). One file is enough (it is
  split 90/10, as nanoGPT's Shakespeare), and files of very different sizes still give the fraction asked for.
* by documents (`split_ids`): validation holds the first ⌈val_fraction · N⌉ documents in that order (at least
  one, at most N − 1), whatever their lengths — nanoGPT's OpenWebText split (val_fraction 0.0005) and the
  built-in corpus's; with few documents of unequal sizes the token shares can be anything.

``crate-prepare-text`` prints the split sizes (documents, tokens, share of the tokens) and warns on stderr when a
split holds fewer tokens than one training window (``--block-size`` + 1) or validation holds most of the tokens.

The built-in corpus (`builtin_corpus`, `stdlib_documents`): every ``*.py`` file of the running interpreter's
standard library (``sysconfig``'s ``stdlib`` path, ``site-packages`` excluded), sorted by relative path, read as
UTF-8 (undecodable bytes replaced) — real text that exists on every machine (≈ 31M bytes, 1,790 files on
CPython 3.11; other versions differ). Split by documents with val_fraction 0.01.
"""
from __future__ import annotations

import abc
import argparse
import functools
import json
import math
import multiprocessing
import os
import re
import sys
import sysconfig
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset
from tqdm import tqdm

from ..extras import install_hint
from ..files import read_json, read_text

BYTE_EOT, BYTE_MASK = 256, 257
SPLITS = ("train", "val")
BUILTIN_VAL_FRACTION = 0.01
_HF_SPECIALS = ("<s>", "</s>", "<pad>", "<unk>", "<mask>", "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]",
                "<|endoftext|>", "<eos>", "<bos>")


# ------------------------------------------------------------------------------------------------ tokenizers
class Tokenizer(abc.ABC):
    """Text ↔ token ids. ``spec`` names it for `get_tokenizer`; ``eot_id`` ends every document in the token files;
    ``mask_id`` is the masked-LM ``<mask>`` (None if the vocabulary has none); ``special_ids`` are never masked."""

    spec: str
    vocab_size: int
    eot_id: int | None
    mask_id: int | None
    special_ids: tuple[int, ...]

    @abc.abstractmethod
    def encode(self, text: str) -> np.ndarray:
        """The ids of ``text`` (no special tokens added): (n,) int64."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (special tokens written out)."""


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes as tokens 0–255, ``<|endoftext|>`` = 256, ``<mask>`` = 257: V = 258, no download, no training."""

    spec = "bytes"
    vocab_size = 258
    eot_id, mask_id = BYTE_EOT, BYTE_MASK
    special_ids = (BYTE_EOT, BYTE_MASK)

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def decode(self, ids: Sequence[int]) -> str:
        names = {BYTE_EOT: b"<|endoftext|>", BYTE_MASK: b"<mask>"}
        return b"".join(names.get(int(i), bytes([int(i)]) if 0 <= int(i) < 256 else b"\xef\xbf\xbd")
                        for i in ids).decode("utf-8", errors="replace")


class TiktokenTokenizer(Tokenizer):
    """A ``tiktoken`` encoding (``tiktoken:gpt2``): ordinary text only, ``<|endoftext|>`` as the document end."""

    def __init__(self, name: str) -> None:
        try:
            import tiktoken
        except ImportError as err:
            raise ValueError(f"tokenizer: 'tiktoken:{name}' needs the tiktoken package: "
                             f"{install_hint('tiktoken')}") from err
        try:
            self.encoding = tiktoken.get_encoding(name)
        except Exception as err:  # noqa: BLE001 - unknown name, no network, no cache: one clear message
            raise ValueError(
                f"tokenizer: cannot obtain the tiktoken encoding {name!r} ({type(err).__name__}: {err}); tiktoken "
                "downloads an encoding once and caches it — run once with network access, or point "
                "TIKTOKEN_CACHE_DIR at a folder holding its cached files") from err
        self.spec, self.vocab_size = f"tiktoken:{name}", self.encoding.n_vocab
        self.eot_id, self.mask_id = self.encoding.eot_token, None
        self.special_ids = tuple(sorted(self.encoding.encode(t, allowed_special="all")[0]
                                        for t in self.encoding.special_tokens_set))

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.encoding.encode_ordinary(text), dtype=np.int64)

    def decode(self, ids: Sequence[int]) -> str:
        return self.encoding.decode([int(i) for i in ids])


class HFTokenizer(Tokenizer):
    """A Hugging Face ``tokenizers`` tokenizer by hub name (``hf:roberta-base``) or ``tokenizer.json`` path."""

    def __init__(self, name: str) -> None:
        try:
            from tokenizers import Tokenizer as HubTokenizer
        except ImportError as err:
            raise ValueError(f"tokenizer: 'hf:{name}' needs the tokenizers package: "
                             f"{install_hint('tokenizers')}") from err
        try:
            self.tokenizer = (HubTokenizer.from_file(name) if Path(name).is_file()
                              else HubTokenizer.from_pretrained(name))
        except Exception as err:  # noqa: BLE001 - unknown name, no network, no cache: one clear message
            raise ValueError(
                f"tokenizer: cannot obtain the Hugging Face tokenizer {name!r} ({type(err).__name__}: {err}); it is "
                "downloaded once from the hub and cached — run once with network access (HF_HUB_OFFLINE=1 then "
                "uses the cache), or pass the path of a tokenizer.json") from err
        self.spec, self.vocab_size = f"hf:{name}", self.tokenizer.get_vocab_size()
        vocab = self.tokenizer.get_vocab()
        self.special_ids = tuple(sorted(vocab[t] for t in _HF_SPECIALS if t in vocab))
        self.eot_id = next((vocab[t] for t in ("</s>", "<|endoftext|>", "[SEP]", "<eos>") if t in vocab), None)
        self.mask_id = next((vocab[t] for t in ("<mask>", "[MASK]") if t in vocab), None)

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.int64)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)


@functools.lru_cache(maxsize=8)
def get_tokenizer(spec: str) -> Tokenizer:
    """The tokenizer ``spec`` names: ``bytes``, ``tiktoken:<encoding>``, ``hf:<name or tokenizer.json>``."""
    if not isinstance(spec, str):
        raise TypeError(f"tokenizer: expected a string such as 'bytes', 'tiktoken:gpt2' or 'hf:roberta-base', got "
                        f"{spec!r}")
    kind, _, name = spec.partition(":")
    if spec == "bytes":
        return ByteTokenizer()
    if kind == "tiktoken" and name:
        return TiktokenTokenizer(name)
    if kind == "hf" and name:
        return HFTokenizer(name)
    raise ValueError(f"tokenizer: expected 'bytes', 'tiktoken:<encoding>' or 'hf:<name or tokenizer.json>', got "
                     f"{spec!r}")


# ------------------------------------------------------------------------------------------------ documents
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


def read_texts(documents: Iterable[Document]) -> Iterator[str]:
    """The text of each document in order, reading each JSONL file once (documents sorted by `Document.key`)."""
    handle, current, position = None, None, -1
    try:
        for document in documents:
            if document.line is None:
                yield Path(document.path).read_bytes().decode("utf-8", errors="replace")
                continue
            if document.path != current or document.line <= position:
                if handle is not None:
                    handle.close()
                handle, current, position = open(document.path, encoding="utf-8", errors="replace"), document.path, -1
            row = ""
            while position < document.line:
                row, position = handle.readline(), position + 1
            yield _jsonl_text(row, document.path, document.line)
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
                with open(path, encoding="utf-8", errors="replace") as f:
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


# ------------------------------------------------------------------------------------------------ token files
TOKEN_DTYPES = ("uint16", "uint32")  # what token files hold; read as anything else, the ids are garbage
META_FIELDS = ("tokenizer", "vocab_size", "dtype", "eot_id", "mask_id", "special_ids")  # what load_corpus reads


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (V ≤ 65,536, nanoGPT's files), else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


_WORKER_TOKENIZER: Tokenizer | None = None


def _init_worker(tokenizer: Tokenizer | str) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = get_tokenizer(tokenizer) if isinstance(tokenizer, str) else tokenizer


def _encode_text(text: str) -> np.ndarray:
    ids = _WORKER_TOKENIZER.encode(text)
    eot = _WORKER_TOKENIZER.eot_id
    return ids if eot is None else np.append(ids, eot)


def encode_documents(documents: Sequence[Document], tokenizer: Tokenizer, workers: int = 1,
                     progress: bool = False) -> Iterator[np.ndarray]:
    """Each document's ids followed by the end-of-text id, in order (``workers`` processes when > 1)."""
    bar = functools.partial(tqdm, total=len(documents), disable=not progress, unit="doc", desc="tokenizing")
    if workers <= 1:
        _init_worker(tokenizer)
        yield from bar(map(_encode_text, read_texts(documents)))
        return
    with multiprocessing.get_context("spawn").Pool(workers, _init_worker, (tokenizer.spec,)) as pool:
        yield from bar(pool.imap(_encode_text, read_texts(documents), chunksize=64))


@dataclass
class TokenCorpus:
    """Token ids of the two splits (memory-mapped or in memory) and how they were made."""

    train: np.ndarray
    val: np.ndarray
    tokenizer: str
    vocab_size: int
    eot_id: int | None
    mask_id: int | None
    special_ids: tuple[int, ...]
    source: str

    def split(self, name: str) -> np.ndarray:
        if name not in SPLITS:
            raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {name!r}")
        return self.train if name == "train" else self.val


def token_split(lengths: Sequence[int], doc_ids: Sequence[str], val_fraction: float) -> np.ndarray:
    """The validation tokens of each document (N,) int64, for documents of ``lengths`` tokens (N,): a split by
    tokens (module docstring). The target is round(val_fraction · T) of the T tokens, at least 1 and at most
    T − 1; documents in CRC-32 order of their identifiers (ties by name) go to validation whole while they fit,
    the one that crosses the target gives its last tokens (its head stays in training), the rest are training.
    ValueError when T < 2 (no split of one token)."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction: expected a value in (0, 1), got {val_fraction}")
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if total < 2:
        raise ValueError(f"corpus: {total} token(s); a train/val split needs at least 2")
    target = min(total - 1, max(1, math.floor(val_fraction * total + 0.5)))  # halves round up
    order = sorted(range(len(doc_ids)), key=lambda i: (zlib.crc32(doc_ids[i].encode("utf-8")), doc_ids[i]))
    val = np.zeros(len(lengths), dtype=np.int64)
    for i in order:
        val[i] = min(int(lengths[i]), target)
        target -= int(val[i])
        if target == 0:
            break
    return val


SPLIT_BY = ("tokens", "documents")


def _copy_bytes(source, target, offset: int, size: int, chunk: int = 1 << 24) -> None:
    """Copy ``size`` bytes of the open file ``source`` from ``offset`` to the open file ``target``, in chunks."""
    source.seek(offset)
    while size > 0:
        data = source.read(min(chunk, size))
        target.write(data)
        size -= len(data)


def prepare(documents: Sequence[Document], tokenizer: Tokenizer, output_dir: str | os.PathLike,
            val_fraction: float = 0.1, workers: int = 1, progress: bool = True, source: str = "",
            split_by: str = "tokens") -> dict:
    """Tokenize ``documents`` into ``output_dir``/{train,val}.bin and meta.json (module docstring); returns the meta.

    ``split_by="tokens"`` (the default): validation holds round(``val_fraction`` · T) of the T tokens
    (`token_split`; one document is enough). ``split_by="documents"``: validation holds ⌈``val_fraction`` · N⌉
    whole documents (`split_ids`; the built-in corpus, and nanoGPT's OpenWebText split with 0.0005), whatever
    their lengths. The meta records per split its ``documents`` (a document cut in two counts in both), its
    ``tokens`` and its ``share`` of the tokens. ValueError when the documents hold no text, or a split would be
    empty.
    """
    if split_by not in SPLIT_BY:
        raise ValueError(f"split_by: expected one of {', '.join(SPLIT_BY)}, got {split_by!r}")
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction: expected a value in (0, 1), got {val_fraction}")
    ids = [d.id for d in documents]
    val_documents = split_ids(ids, val_fraction) if split_by == "documents" else None
    out = Path(output_dir)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").unlink(missing_ok=True)  # an interrupted preparation leaves no meta.json behind
    dtype = token_dtype(tokenizer.vocab_size)
    stream, lengths, texts = out / ".all.bin.tmp", [], 0
    try:
        with open(stream, "wb") as f:  # every document's ids in order; the split is cut from this file
            for ids_ in encode_documents(documents, tokenizer, workers, progress):
                ids_.astype(dtype).tofile(f)
                lengths.append(len(ids_))
                texts += len(ids_) - (tokenizer.eot_id is not None)
        if texts == 0:
            raise ValueError(f"corpus: no text in {source or 'the documents'} (every document is empty)")
        if split_by == "tokens":
            val = token_split(lengths, ids, val_fraction)
        else:
            val = np.array([n if i in val_documents else 0 for i, n in zip(ids, lengths)], dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        counts = {"train": {"documents": int((lengths - val > 0).sum() + (lengths == 0).sum()),
                            "tokens": int((lengths - val).sum())},
                  "val": {"documents": int((val > 0).sum()), "tokens": int(val.sum())}}
        ends = np.cumsum(lengths)
        held = np.flatnonzero(val)  # the validation pieces: the last val[i] tokens of document i
        pieces = [(int(ends[i] - val[i]), int(ends[i])) for i in held]
        gaps = [(a, b) for a, b in zip([0] + [e for _, e in pieces], [b for b, _ in pieces] + [int(ends[-1])])
                if b > a]
        with open(stream, "rb") as source_file:
            for split, spans in (("train", gaps), ("val", pieces)):
                with open(out / f".{split}.bin.tmp", "wb") as f:
                    for a, b in spans:
                        _copy_bytes(source_file, f, a * dtype.itemsize, (b - a) * dtype.itemsize)
        empty = [s for s in SPLITS if counts[s]["tokens"] == 0]
        if empty:
            raise ValueError(f"corpus: the {' and '.join(empty)} split holds no tokens (empty documents)")
        for s in SPLITS:
            os.replace(out / f".{s}.bin.tmp", out / f"{s}.bin")
    finally:
        for leftover in (stream, *(out / f".{s}.bin.tmp" for s in SPLITS)):
            leftover.unlink(missing_ok=True)
        if created and not any(out.iterdir()):  # a failed preparation leaves no folder it made
            out.rmdir()
    total = sum(counts[s]["tokens"] for s in SPLITS)
    for s in SPLITS:
        counts[s]["share"] = counts[s]["tokens"] / total
    meta = {"tokenizer": tokenizer.spec, "vocab_size": tokenizer.vocab_size, "dtype": dtype.name,
            "eot_id": tokenizer.eot_id, "mask_id": tokenizer.mask_id, "special_ids": list(tokenizer.special_ids),
            "val_fraction": val_fraction, "split_by": split_by, "source": source, **{s: counts[s] for s in SPLITS}}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def split_warnings(meta: dict, block_size: int) -> list[str]:
    """What makes a prepared split unfit for training (one line each): a split with fewer than ``block_size`` + 1
    tokens (one window of the causal LM, which `TokenBlocks` refuses), a validation split holding most tokens."""
    warnings = []
    for split in SPLITS:
        tokens = meta[split]["tokens"]
        if tokens < block_size + 1:
            warnings.append(f"the {split} split holds {tokens:,} tokens, fewer than one window of --block-size "
                            f"{block_size} + 1: training with that block size refuses it (raise "
                            f"--val-fraction or add text, or train with a smaller --block-size)")
    if meta["val"]["share"] > 0.5:
        warnings.append(f"the validation split holds {meta['val']['share']:.1%} of the tokens (split by "
                        f"{meta.get('split_by', 'documents')}); --split-by tokens holds out --val-fraction of them")
    return warnings


def read_meta(data_dir: str | os.PathLike) -> dict:
    """The ``meta.json`` of a prepared corpus, checked: it has every field `load_corpus` reads, and its dtype is a
    token dtype wide enough for the vocabulary (ValueError naming the file otherwise)."""
    path = Path(data_dir) / "meta.json"
    if not path.is_file():
        raise ValueError(f"data_dir: {str(path)!r} does not exist; prepare the corpus with crate-prepare-text "
                         "(an interrupted preparation has no meta.json)")
    meta = read_json(path, "data_dir")
    missing = [k for k in META_FIELDS if k not in meta] if isinstance(meta, dict) else list(META_FIELDS)
    if missing:
        raise ValueError(f"data_dir: {path} has no {', '.join(missing)}; crate-prepare-text writes them all "
                         "(prepare the corpus again)")
    if meta["dtype"] not in TOKEN_DTYPES:
        raise ValueError(f"data_dir: {path} gives dtype {meta['dtype']!r}; token files hold {' or '.join(TOKEN_DTYPES)} "
                         "ids")
    if not isinstance(meta["vocab_size"], int) or not 0 < meta["vocab_size"] <= np.iinfo(meta["dtype"]).max + 1:
        raise ValueError(f"data_dir: {path} gives vocab_size {meta['vocab_size']!r}, not a positive number of ids "
                         f"that {meta['dtype']} holds")
    return meta


def read_tokens(path: str | os.PathLike, dtype: str | None = None) -> np.ndarray:
    """The token ids of a ``.bin`` file, memory-mapped read-only. ``dtype`` (uint16 or uint32) defaults to the one
    the ``meta.json`` beside the file records, else uint16 (nanoGPT's files, which have none). A dtype that
    contradicts that meta.json, and a missing or malformed file, raise ValueError naming it."""
    path = Path(path)
    if dtype is not None and str(dtype) not in TOKEN_DTYPES:
        raise ValueError(f"dtype: expected {' or '.join(TOKEN_DTYPES)}, got {str(dtype)!r}")
    if not path.is_file():
        raise ValueError(f"token file: {str(path)!r} does not exist (prepare it with crate-prepare-text)")
    recorded = read_meta(path.parent)["dtype"] if (path.parent / "meta.json").is_file() else None
    if dtype is not None and recorded is not None and str(dtype) != recorded:
        raise ValueError(f"dtype: {dtype} contradicts {path.parent / 'meta.json'}, which records {recorded} for "
                         f"{path.name}")
    dtype = np.dtype(str(dtype or recorded or "uint16"))
    size = path.stat().st_size
    if size == 0 or size % dtype.itemsize:
        raise ValueError(f"token file: {str(path)!r} holds {size} bytes, not a whole non-zero number of {dtype.name} "
                         "ids")
    return np.memmap(path, dtype=dtype, mode="r")


def load_corpus(data_dir: str | os.PathLike) -> TokenCorpus:
    """The token files of a prepared corpus (``meta.json``, ``train.bin``, ``val.bin``)."""
    root = Path(data_dir)
    meta = read_meta(root)
    return TokenCorpus(*(read_tokens(root / f"{s}.bin") for s in SPLITS), meta["tokenizer"],
                       meta["vocab_size"], meta["eot_id"], meta["mask_id"], tuple(meta["special_ids"]),
                       meta.get("source") or str(root))


@functools.lru_cache(maxsize=1)
def builtin_corpus() -> TokenCorpus:
    """The standard library's source as byte tokens, split as the module docstring says, in memory (≈ 2 s)."""
    documents = stdlib_documents()
    val = split_ids([d.id for d in documents], BUILTIN_VAL_FRACTION)
    tokenizer = ByteTokenizer()
    parts: dict[str, list[np.ndarray]] = {s: [] for s in SPLITS}
    for document, ids in zip(documents, encode_documents(documents, tokenizer)):
        parts["val" if document.id in val else "train"].append(ids.astype(np.uint16))
    train, val_ids = (np.concatenate(parts[s]) for s in SPLITS)
    return TokenCorpus(train, val_ids, tokenizer.spec, tokenizer.vocab_size, tokenizer.eot_id, tokenizer.mask_id,
                       tokenizer.special_ids, f"stdlib {stdlib_root()} (Python {sys.version.split()[0]})")


def corpus(data_dir: str | os.PathLike | None) -> TokenCorpus:
    """`load_corpus` of ``data_dir``, or the built-in corpus when it is None."""
    return builtin_corpus() if data_dir is None else load_corpus(data_dir)


# ------------------------------------------------------------------------------------------------ datasets
class TokenBlocks(Dataset):
    """Consecutive non-overlapping windows of a token array: item i is ``tokens[i·B : i·B + B + extra]`` as int64.

    ``extra=1`` (causal LM): B inputs and their B next tokens share one window of B + 1 ids (the last id of window
    i is the first of window i + 1); ``extra=0`` (masked LM): windows of exactly B ids. The tail shorter than a
    window is not used. With ``vocab_size``, a window holding an id outside [0, vocab_size) raises ValueError naming
    the token file and the position: the model checks its inputs, but a window's targets (its last id, the masked
    positions) reach only the loss, which would fail with an index error deep inside it.
    """

    def __init__(self, tokens: np.ndarray, block_size: int, extra: int = 1, vocab_size: int | None = None) -> None:
        if block_size < 1:
            raise ValueError(f"block_size: expected a positive integer, got {block_size}")
        if len(tokens) < block_size + extra:
            raise ValueError(f"block_size: {block_size} (+{extra}) exceeds the {len(tokens)} tokens of the split")
        self.tokens, self.block_size, self.extra, self.vocab_size = tokens, block_size, extra, vocab_size

    def __len__(self) -> int:
        return (len(self.tokens) - self.extra) // self.block_size

    def __getitem__(self, i: int) -> torch.Tensor:
        start = int(i) * self.block_size
        window = np.asarray(self.tokens[start:start + self.block_size + self.extra], dtype=np.int64)
        if self.vocab_size is not None and (window.min() < 0 or window.max() >= self.vocab_size):
            where = start + int(np.argmax((window < 0) | (window >= self.vocab_size)))
            source = getattr(self.tokens, "filename", None) or "the token array"
            raise ValueError(f"tokens: id {int(self.tokens[where])} at position {where} of {source} is outside the "
                             f"vocabulary [0, {self.vocab_size})")
        return torch.from_numpy(window)


def stack_blocks(items: list[torch.Tensor]) -> torch.Tensor:
    """Collate token windows into a (batch, length) int64 batch."""
    return torch.stack(items)


IGNORE = -100  # the label of a position that is not predicted (F.cross_entropy's ignore_index)


@dataclass(frozen=True)
class Masking:
    """BERT's masking (Devlin et al. 2019; RoBERTa's dynamic masking draws a new mask every time a sequence is used).

    Every token that is not special (``special_ids`` and ``mask_id``) is selected with probability ``probability``
    (0.15); a selected token becomes
    ``<mask>`` with probability ``mask_fraction`` (0.8), a random non-special token with probability
    ``random_fraction`` (0.1), and stays itself otherwise (0.1). The labels are the original ids at the selected
    positions and `IGNORE` elsewhere: the loss of eq. (85) is taken over the selected set Ω.
    """

    mask_id: int
    vocab_size: int
    special_ids: tuple[int, ...] = ()
    probability: float = 0.15
    mask_fraction: float = 0.8
    random_fraction: float = 0.1

    def __post_init__(self) -> None:
        if not 0 <= self.mask_id < self.vocab_size:
            raise ValueError(f"mask_id: {self.mask_id} is not an id of the {self.vocab_size}-token vocabulary")
        if not 0 < self.probability <= 1:
            raise ValueError(f"mask_probability: expected a value in (0, 1], got {self.probability}")
        if min(self.mask_fraction, self.random_fraction) < 0 or self.mask_fraction + self.random_fraction > 1:
            raise ValueError(f"mask_fraction, random_fraction: expected non-negative values summing to at most 1, got "
                             f"{self.mask_fraction} and {self.random_fraction}")

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, labels), each like ``tokens`` (B, T) int64 on the CPU; ``generator`` None draws from torch's
        global generator (which the training engine saves and restores, so a resumed run masks identically)."""
        excluded = sorted({*self.special_ids, self.mask_id})
        special = torch.isin(tokens, torch.tensor(excluded, dtype=tokens.dtype))
        selected = (torch.rand(tokens.shape, generator=generator) < self.probability) & ~special
        action = torch.rand(tokens.shape, generator=generator)
        allowed = torch.ones(self.vocab_size, dtype=torch.bool)
        allowed[excluded] = False
        candidates = allowed.nonzero()[:, 0]
        random_ids = candidates[torch.randint(len(candidates), tokens.shape, generator=generator)]
        masked = selected & (action < self.mask_fraction)
        randomised = selected & (action >= self.mask_fraction) & (action < self.mask_fraction + self.random_fraction)
        inputs = torch.where(masked, self.mask_id, torch.where(randomised, random_ids, tokens))
        return inputs, torch.where(selected, tokens, IGNORE)


# ------------------------------------------------------------------------------------------------ GLUE TSV
@dataclass
class TextPairs:
    """A sequence-classification split: ``texts`` (one or two strings per example), ``labels`` (ids into
    ``classes``)."""

    texts: list[tuple[str, ...]]
    labels: list[int]
    classes: list[str]


def read_glue_tsv(path: str | os.PathLike, text_columns: Sequence[str], label_column: str,
                  classes: Sequence[str] | None = None) -> TextPairs:
    """A GLUE-format TSV with a header row (SST-2: ``sentence``, ``label``; MRPC: ``#1 String``, ``#2 String``,
    ``Quality``), UTF-8, split at tabs and line ends without quote handling as GLUE's files need, fields of any length.
    Every row must have the header's number of fields and a non-empty label (a stray tab would shift a text into the
    label column and make a class of it): ValueError naming the file and the line otherwise; blank lines are
    skipped. Labels map to ``classes`` (default: the sorted distinct labels, numerically when they are integers)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"glue file: {str(path)!r} does not exist")
    if not 1 <= len(text_columns) <= 2:
        raise ValueError(f"text_columns: expected one or two column names, got {list(text_columns)}")
    lines = re.split(r"\r\n|\r|\n", read_text(path, "glue file"))
    rows = [(number, line.split("\t")) for number, line in enumerate(lines, start=1) if line]
    if len(rows) < 2:
        raise ValueError(f"glue file: {str(path)!r} has no examples below its header")
    (_, header), body = rows[0], rows[1:]
    missing = [c for c in (*text_columns, label_column) if c not in header]
    if missing:
        raise ValueError(f"glue file: {str(path)!r} has no column(s) {missing}; its header is {header}")
    where = [header.index(c) for c in text_columns]
    label_at = header.index(label_column)
    for number, row in body:
        if len(row) != len(header):
            raise ValueError(f"glue file: line {number} of {path} has {len(row)} tab-separated fields, its header "
                             f"{len(header)}")
        if not row[label_at].strip():
            raise ValueError(f"glue file: line {number} of {path} has an empty {label_column!r}")
    raw = [r[label_at] for _, r in body]
    if classes is None:
        distinct = set(raw)
        numeric = all(v.lstrip("-").isdigit() for v in distinct)
        classes = sorted(distinct, key=int) if numeric else sorted(distinct)
    unknown = sorted(set(raw) - set(classes))
    if unknown:
        raise ValueError(f"glue file: {str(path)!r} has labels {unknown[:5]} outside the classes {list(classes)}")
    index = {c: i for i, c in enumerate(classes)}
    return TextPairs([tuple(r[i] for i in where) for _, r in body], [index[v] for v in raw], list(classes))


def stdlib_next_lines(split: str, count: int, seed: int = 0) -> TextPairs:
    """A built-in sentence-pair task (MRPC-style) from the built-in corpus's ``split`` files: two non-blank source
    lines, label 1 when the second follows the first in the same file, 0 when it is a random line of another file
    (balanced, seeded)."""
    documents = stdlib_documents()
    val = split_ids([d.id for d in documents], BUILTIN_VAL_FRACTION)
    chosen = [d for d in documents if (d.id in val) == (split == "val")]
    lines = [[line.strip() for line in text.splitlines() if line.strip()] for text in read_texts(chosen)]
    lines = [ls for ls in lines if len(ls) >= 2]
    rng = np.random.default_rng([seed, zlib.crc32(split.encode())])
    texts, labels = [], []
    for i in range(count):
        f = int(rng.integers(len(lines)))
        j = int(rng.integers(len(lines[f]) - 1))
        if i % 2:
            texts.append((lines[f][j], lines[f][j + 1]))
        else:
            g = (f + 1 + int(rng.integers(len(lines) - 1))) % len(lines)
            texts.append((lines[f][j], lines[g][int(rng.integers(len(lines[g])))]))
        labels.append(i % 2)
    return TextPairs(texts, labels, ["0", "1"])


# ------------------------------------------------------------------------------------------------ command
def main(argv: Sequence[str] | None = None) -> int:
    """``crate-prepare-text``: tokenize a corpus into token files (module docstring)."""
    parser = argparse.ArgumentParser(
        prog="crate-prepare-text", description="Tokenize a text corpus into train.bin/val.bin/meta.json (nanoGPT "
        "style). Examples:\n  crate-prepare-text --builtin --output-dir data/stdlib\n  crate-prepare-text --input "
        "input.txt --output-dir data/shakespeare        (one file: 90% train, 10% validation)\n  crate-prepare-text "
        "--input /data/openwebtext.jsonl --tokenizer tiktoken:gpt2 --output-dir data/owt --workers 8 --split-by "
        "documents --val-fraction 0.0005\n  crate-prepare-text "
        "--input /data/wiki.jsonl /data/books.jsonl --tokenizer hf:roberta-base --output-dir data/wiki --val-fraction "
        "0.001", formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", nargs="+", help="text files, .jsonl files ({\"text\": …} per line) or folders")
    source.add_argument("--builtin", action="store_true", help="the standard library's source (the built-in corpus)")
    parser.add_argument("--pattern", default="*", help="file pattern inside folders (default: every file)")
    parser.add_argument("--tokenizer", default="bytes", help="bytes | tiktoken:<encoding> | hf:<name or path>")
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--val-fraction", type=float, default=None,
                        help=f"share held out for validation: of the tokens with --split-by tokens (default 0.1), of "
                        f"the documents with --split-by documents (default 0.0005; {BUILTIN_VAL_FRACTION} with "
                        "--builtin)")
    parser.add_argument("--split-by", choices=SPLIT_BY, default=None,
                        help="tokens (default: any number of files, the fraction of tokens asked for) or documents "
                        "(whole documents, nanoGPT's OpenWebText split; the default with --builtin)")
    parser.add_argument("--block-size", type=int, default=1024,
                        help="tokens per training sequence you plan (crate-train's --block-size): warn when a split "
                        "holds fewer than one window (default 1024)")
    parser.add_argument("--workers", type=int, default=1, help="tokenizing processes")
    args = parser.parse_args(argv)
    if args.block_size < 1:
        parser.error(f"argument --block-size: expected a positive integer, got {args.block_size}")
    from .. import cli  # the command lines' shared error path (it imports the engine, which the data need not)

    split_by = args.split_by or ("documents" if args.builtin else "tokens")
    fraction = args.val_fraction
    if fraction is None:
        fraction = BUILTIN_VAL_FRACTION if args.builtin else 0.1 if split_by == "tokens" else 0.0005
    try:
        if not 0 < fraction < 1:
            raise ValueError(f"val_fraction: expected a value in (0, 1), got {fraction}")
        tokenizer = get_tokenizer(args.tokenizer)
        documents = stdlib_documents() if args.builtin else find_documents(args.input, args.pattern)
        meta = prepare(documents, tokenizer, args.output_dir, fraction, args.workers,
                       source="stdlib" if args.builtin else " ".join(args.input), split_by=split_by)
    except cli.EXPECTED as err:
        return cli.fail("crate-prepare-text", err, 1)
    for warning in split_warnings(meta, args.block_size):
        print(f"crate-prepare-text: warning: {warning}", file=sys.stderr)
    print(json.dumps({"output_dir": args.output_dir, **{k: meta[k] for k in ("tokenizer", "vocab_size", "dtype",
                                                                            "split_by", "val_fraction", "train",
                                                                            "val")}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
