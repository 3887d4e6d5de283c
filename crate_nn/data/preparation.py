"""Preparing token files (``crate-prepare-text``, `crate_nn.prepare_text`): documents → ``train.bin``, ``val.bin``,
``meta.json`` (the format: `crate_nn.data.corpus`). Apart from the run-time data path: training reads the files.

Two rules split the documents (``crate-prepare-text --split-by``), both in their CRC-32 order
(`crate_nn.data.documents`):

* by tokens (the default, `token_split`): validation holds round(val_fraction · T) of the T tokens (at least 1,
  at most T − 1, val_fraction 0.1 by default): documents in that order go to validation whole while they fit, and
  the one that crosses the mark gives its last tokens (its head stays in training). One file is enough (it is
  split 90/10, as nanoGPT's Shakespeare), and files of very different sizes still give the fraction asked for.
* by documents (`crate_nn.data.documents.split_ids`): validation holds the first ⌈val_fraction · N⌉ documents in
  that order (at least one, at most N − 1), whatever their lengths — nanoGPT's OpenWebText split (val_fraction
  0.0005) and the built-in corpus's; with few documents of unequal sizes the token shares can be anything.

``crate-prepare-text`` prints the split sizes (documents, tokens, share of the tokens) and warns on stderr when a
split holds fewer tokens than one training window (``--block-size`` + 1) or validation holds most of the tokens
(`split_warnings`).
"""
from __future__ import annotations

import json
import math
import os
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .corpus import SPLITS, token_dtype
from .documents import Document, encode_documents, split_ids
from .tokenizers import Tokenizer


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
            split_by: str = "tokens", errors: str = "strict") -> dict:
    """Tokenize ``documents`` into ``output_dir``/{train,val}.bin and meta.json (module docstring); returns the meta.

    ``split_by="tokens"`` (the default): validation holds round(``val_fraction`` · T) of the T tokens
    (`token_split`; one document is enough). ``split_by="documents"``: validation holds ⌈``val_fraction`` · N⌉
    whole documents (`split_ids`; the built-in corpus, and nanoGPT's OpenWebText split with 0.0005), whatever
    their lengths. The meta records per split its ``documents`` (a document cut in two counts in both), its
    ``tokens`` and its ``share`` of the tokens, and ``undecodable`` the ``bytes`` that were not UTF-8 and the
    ``documents`` holding them. ValueError when the documents hold no text, a split would be empty, or (``errors=
    "strict"``, the default) a document is not UTF-8; ``errors="replace"`` reads each undecodable sequence as U+FFFD.
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
    stream, lengths, texts, undecodable = out / ".all.bin.tmp", [], 0, {}
    try:
        with open(stream, "wb") as f:  # every document's ids in order; the split is cut from this file
            for ids_ in encode_documents(documents, tokenizer, workers, progress, errors, undecodable):
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
            "val_fraction": val_fraction, "split_by": split_by, "source": source, **{s: counts[s] for s in SPLITS},
            "undecodable": {"bytes": sum(undecodable.values()), "documents": len(undecodable)}}
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
