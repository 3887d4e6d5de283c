"""Token files of the language models at run time: a prepared corpus or the built-in one (`corpus`), and datasets
of token blocks (`TokenBlocks`).

Token files (written by ``crate-prepare-text``, `crate_nn.data.preparation.prepare`): ``<dir>/train.bin`` and
``<dir>/val.bin`` hold the token ids of every document followed by the end-of-text id, as a flat array (uint16 when
V ≤ 65,536, as nanoGPT; else uint32), memory-mapped by `load_corpus`; ``<dir>/meta.json`` records the tokenizer, V,
the dtype, the special ids, the document and token counts (it is written last: its presence marks a complete
preparation).

The built-in corpus (`builtin_corpus`): the standard library's source (`crate_nn.data.documents.stdlib_documents`)
as byte tokens, split by documents with val_fraction 0.01, tokenized in memory.
"""
from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..files import read_json
from .documents import BUILTIN_VAL_FRACTION, encode_documents, split_ids, stdlib_documents, stdlib_root
from .tokenizers import ByteTokenizer

SPLITS = ("train", "val")
TOKEN_DTYPES = ("uint16", "uint32")  # what token files hold; read as anything else, the ids are garbage
META_FIELDS = ("tokenizer", "vocab_size", "dtype", "eot_id", "mask_id", "special_ids")  # what load_corpus reads


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits (V ≤ 65,536, nanoGPT's files), else uint32."""
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


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
    for document, ids in zip(documents, encode_documents(documents, tokenizer, errors="replace")):
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
