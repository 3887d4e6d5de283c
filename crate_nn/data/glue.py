"""Sequence-classification data of the language models: GLUE-format TSV files (`read_glue_tsv`), a built-in
sentence-pair task drawn from the built-in corpus (`stdlib_next_lines`), and the examples tokenized
(`EncodedExamples`) and padded into batches (`pad_examples`)."""
from __future__ import annotations

import os
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ..files import read_text
from .documents import BUILTIN_VAL_FRACTION, read_texts, split_ids, stdlib_documents
from .tokenizers import get_tokenizer


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
    lines = [[line.strip() for line in text.splitlines() if line.strip()] for text in read_texts(chosen, errors="replace")]
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


class EncodedExamples(Dataset):
    """Tokenized examples: item i is (ids (n_i,) int64, label)."""

    def __init__(self, pairs: TextPairs, tokenizer_spec: str, max_length: int) -> None:
        tokenizer = get_tokenizer(tokenizer_spec)
        separator = [] if tokenizer.eot_id is None else [tokenizer.eot_id]
        self.examples = [(encode_example(parts, tokenizer, separator, max_length), label)
                         for parts, label in zip(pairs.texts, pairs.labels)]
        self.classes = pairs.classes

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        ids, label = self.examples[i]
        return torch.as_tensor(ids, dtype=torch.int64), label


def encode_example(parts: tuple[str, ...], tokenizer, separator: list[int], max_length: int) -> list[int]:
    """``a`` or ``a <sep> b`` (the end-of-text id separates a pair), cut to ``max_length`` by removing tokens from
    the end of the longer text first (Hugging Face's "longest_first"); an empty example keeps one separator."""
    ids = [list(tokenizer.encode(text)) for text in parts]
    budget = max_length - (len(separator) if len(ids) == 2 else 0)
    while sum(map(len, ids)) > budget:
        longest = max(range(len(ids)), key=lambda k: len(ids[k]))
        ids[longest].pop()
    out = ids[0] + (separator + ids[1] if len(ids) == 2 else [])
    return out or (separator or [0])


def pad_examples(items: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tokens (B, n) padded with id 0, attention_mask (B, n) bool, labels (B,)) with n the longest example."""
    length = max(len(ids) for ids, _ in items)
    tokens = torch.zeros(len(items), length, dtype=torch.int64)
    mask = torch.zeros(len(items), length, dtype=torch.bool)
    for row, (ids, _) in enumerate(items):
        tokens[row, :len(ids)], mask[row, :len(ids)] = ids, True
    return tokens, mask, torch.as_tensor([label for _, label in items], dtype=torch.int64)
