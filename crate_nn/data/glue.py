"""Sequence-classification data of the language models: GLUE-format TSV files (`read_glue_tsv`) and a built-in
sentence-pair task drawn from the built-in corpus (`stdlib_next_lines`)."""
from __future__ import annotations

import os
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..files import read_text
from .documents import BUILTIN_VAL_FRACTION, read_texts, split_ids, stdlib_documents


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
