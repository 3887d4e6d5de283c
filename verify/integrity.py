"""Checksums of the numbers the audit stores and reads back: one mechanism for every JSON file it keeps.

A stored JSON document is *sealed*: beside its content it carries ``"sha256"``, the SHA-256 of the rest of the
document written canonically (keys sorted, no spaces, UTF-8: `canonical`), and every read checks it. This covers
the audit's cache (a run's ``run.json``, ``metrics.json``, ``measurements/*.json`` and ``derived/*.json``;
``run.json`` also holds the SHA-256 of the run's model files, `file_digest`) and the committed replications
(``results/NAME/runs.json``, the Table 17 file ``results/segmentation/results.json``, `verify.committed`). A file
that does not parse, carries no checksum or does not match it raises `Damaged`, whose message is one line naming
the file: the cache deletes such an entry and measures it again, a committed file is refused.

Files are written atomically (a temporary file beside the target, renamed over it): an interrupted write leaves
the previous file or none, never half of one.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from crate_nn.files import atomic_write

KEY = "sha256"
"""The key of a sealed document's checksum."""


class StoredDataError(Exception):
    """A stored file refused, or lacking what a claim asks of it: the message is one line naming the file and
    what to do (the audit reports it without a traceback)."""


class Damaged(StoredDataError, ValueError):
    """A sealed file that does not parse, carries no checksum, or whose content does not match it."""

    def __init__(self, path: Path | str, reason: str, remedy: str = ""):
        self.path, self.reason = Path(path), reason
        super().__init__(f"{path}: {reason}" + (f"; {remedy}" if remedy else ""))


def canonical(value: Any) -> bytes:
    """``value`` as canonical JSON: keys sorted, no spaces, UTF-8 (what a checksum is taken of)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def digest(value: Any) -> str:
    """The SHA-256 (hex) of ``value`` written canonically."""
    return hashlib.sha256(canonical(value)).hexdigest()


def file_digest(path: Path | str) -> str:
    """The SHA-256 (hex) of a file's bytes."""
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def sealed(doc: dict) -> dict:
    """``doc`` (a JSON object) with its checksum first: ``{"sha256": digest(doc), **doc}``, the checksum taken of
    ``doc`` as JSON reads it back (tuples as lists, keys as strings, other objects as their ``str``)."""
    doc = json.loads(json.dumps(doc, default=str))
    if not isinstance(doc, dict) or KEY in doc:
        raise ValueError(f"sealed: expected a JSON object without a {KEY!r} key")
    return {KEY: digest(doc), **doc}


def opened(doc: Any, path: Path | str) -> dict:
    """The content of the sealed document ``doc`` read from ``path`` (its checksum removed), after checking it;
    `Damaged` when it carries no checksum or does not match it."""
    if not isinstance(doc, dict):
        raise Damaged(path, f"expected a sealed JSON object, found a JSON {type(doc).__name__}")
    if KEY not in doc:
        raise Damaged(path, "carries no SHA-256 checksum (written before checksums, or by hand)")
    content = {k: v for k, v in doc.items() if k != KEY}
    if digest(content) != doc[KEY]:
        raise Damaged(path, f"its content does not match its SHA-256 checksum {str(doc[KEY])[:12]}… (edited or "
                            "damaged)")
    return content


def parse(path: Path | str) -> Any:
    """The JSON in ``path``; `Damaged` (one line naming the file) when it is not valid JSON."""
    try:
        return json.loads(Path(path).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise Damaged(path, f"is not UTF-8 text (byte {err.start}): damaged") from None
    except json.JSONDecodeError as err:
        raise Damaged(path, f"is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}): truncated or "
                            "damaged") from None


def read(path: Path | str) -> dict:
    """The content of the sealed JSON file ``path``, checked (`opened`)."""
    return opened(parse(path), path)


def write(path: Path | str, doc: dict, indent: int | None = None) -> Path:
    """Write ``doc`` sealed (`sealed`) to ``path`` atomically; ``indent`` as `json.dumps` (a committed file is
    indented to read and diff)."""
    text = json.dumps(sealed(doc), indent=indent, ensure_ascii=False) + "\n"
    return write_text(path, text)


def write_text(path: Path | str, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (`crate_nn.files.atomic_write`: a temporary file beside it, removed on
    any exception, a signal's included, flushed to disk, then renamed over ``path``)."""
    path = Path(path)
    with atomic_write(path, "the audit's stored numbers") as f:
        f.write(text.encode("utf-8"))
    return path
