"""Tokenizers of the language models, by spec (`get_tokenizer`); nothing is downloaded at run time.

* ``bytes`` — built in, needs nothing: UTF-8 bytes 0–255, ``<|endoftext|>`` = 256, ``<mask>`` = 257 (V = 258).
* ``tiktoken:<encoding>`` — e.g. ``tiktoken:gpt2`` (the GPT-2 BPE of CRATE-GPT; V = 50,257, padded to 50,304 in
  the model); needs ``pip install tiktoken``, which downloads the encoding once into its cache.
* ``hf:<name>`` or ``hf:<path/to/tokenizer.json>`` — a Hugging Face ``tokenizers`` tokenizer, e.g. ``hf:roberta-base``
  (the RoBERTa BPE of CRATE-BERT; V = 50,265); needs ``pip install tokenizers``, which downloads it once.
  A tokenizer that cannot be obtained (not installed, offline and not cached) raises ValueError saying how.
"""
from __future__ import annotations

import abc
import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..extras import install_hint

BYTE_EOT, BYTE_MASK = 256, 257
_HF_SPECIALS = ("<s>", "</s>", "<pad>", "<unk>", "<mask>", "[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]",
                "<|endoftext|>", "<eos>", "<bos>")


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
