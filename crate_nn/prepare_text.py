"""``crate-prepare-text`` (python -m crate_nn.prepare_text): tokenize a text corpus into token files.

The preparation itself is `crate_nn.data.preparation` (its docstring gives the split rules); the files' format is
`crate_nn.data.corpus`'s, the tokenizers `crate_nn.data.tokenizers`'.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import cli
from .data.documents import BUILTIN_VAL_FRACTION, DECODE_ERRORS, find_documents, stdlib_documents
from .data.preparation import SPLIT_BY, prepare, split_warnings
from .data.tokenizers import get_tokenizer


def main(argv: Sequence[str] | None = None) -> int:
    """``crate-prepare-text``: tokenize a corpus into token files (`crate_nn.data.preparation`)."""
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
                        help="tokens per training sequence you plan (crate-train's --data.block-size): warn when a "
                        "split holds fewer than one window (default 1024)")
    parser.add_argument("--workers", type=int, default=1, help="tokenizing processes")
    parser.add_argument("--errors", choices=DECODE_ERRORS, default=None,
                        help="bytes that are not UTF-8: strict refuses the file naming the byte (the default), "
                        "replace reads each undecodable sequence as U+FFFD and counts the bytes (the default with "
                        "--builtin, whose standard-library files are read so)")
    args = parser.parse_args(argv)
    if args.block_size < 1:
        parser.error(f"argument --block-size: expected a positive integer, got {args.block_size}")

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
                       source="stdlib" if args.builtin else " ".join(args.input), split_by=split_by,
                       errors=args.errors or ("replace" if args.builtin else "strict"))
    except cli.EXPECTED as err:
        return cli.fail("crate-prepare-text", err, 1)
    for warning in split_warnings(meta, args.block_size):
        print(f"crate-prepare-text: warning: {warning}", file=sys.stderr)
    bad = meta["undecodable"]
    if bad["bytes"]:
        print(f"crate-prepare-text: warning: {bad['bytes']:,} bytes that are not UTF-8 (in {bad['documents']:,} of "
              f"{len(documents):,} documents) were replaced by U+FFFD", file=sys.stderr)
    print(json.dumps({"output_dir": args.output_dir, **{k: meta[k] for k in ("tokenizer", "vocab_size", "dtype",
                                                                            "split_by", "val_fraction", "train",
                                                                            "val", "undecodable")}}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
