"""``crate-eval-lm``: held-out cross-entropy and perplexity of a causal language model, Table 6's protocol
(`crate_nn.evaluation.language.lm_loss`: the mean loss per token over ``--batches`` batches of ``--batch-size``
full windows of ``--block-size`` + 1 tokens).

    crate-eval-lm runs/gpt_stdlib/checkpoints/last.pt                      (its training run's validation split)
    crate-eval-lm runs/gpt_owt/checkpoints/last.pt --data-dir data/owt --batch-size 4 --batches 1000
    crate-eval-lm ckpt.pt --tokens data/wikitext/val.bin --block-size 1024       (any token file: see --dtype)
    torchrun --nproc_per_node 8 -m crate_nn.evaluate_lm ckpt.pt --data-dir data/owt     (windows shared by 8 GPUs)

The corpus defaults to the one the checkpoint's run trained on (the built-in corpus when it had no data_dir). It
prints a short table naming the data, the split, the number of predicted tokens and the units (--json: the same
numbers as JSON). Errors are one line naming the argument or file, exit status 2.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import cli
from .data.corpus import SPLITS, TOKEN_DTYPES, corpus, read_tokens
from .engine import distributed
from .evaluation.language import lm_loss
from .loading import CAUSAL_LM, load_model


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="crate-eval-lm", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a causal LM in any format crate_nn.load reads (ours, crate-lm, nanoGPT; "
                                           "a file or hf-hub:ORG/NAME[@revision][:path])")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data-dir", default=None, help="a corpus prepared by crate-prepare-text")
    source.add_argument("--tokens", default=None, help="a token file (.bin) to evaluate on")
    parser.add_argument("--builtin", action="store_true", help="the built-in corpus, whatever the run used")
    parser.add_argument("--split", default="val", choices=SPLITS)
    parser.add_argument("--dtype", default=None, choices=TOKEN_DTYPES,
                        help="ids' dtype in --tokens (default: the meta.json beside it records it; without one, "
                        "uint16 as nanoGPT's files)")
    parser.add_argument("--block-size", type=int, default=None, help="default: the model's")
    parser.add_argument("--batch-size", type=int, default=4, help="windows per batch and process (Table 6: 4)")
    parser.add_argument("--batches", type=int, default=1000, help="batches (Table 6: 1,000)")
    parser.add_argument("--heads", type=int, default=None, help="heads of a crate-lm/nanoGPT file without model_args")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"))
    parser.add_argument("--json", action="store_true", help="print the metrics as JSON instead of a table")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> dict:
    if args.dtype and not args.tokens:
        raise ValueError("dtype: --dtype applies to --tokens (a prepared corpus records its dtype in meta.json)")
    model, train_config = load_model(args.checkpoint, heads=args.heads, families=CAUSAL_LM)
    if args.tokens:
        tokens, source, tokenizer, split = read_tokens(args.tokens, args.dtype), args.tokens, None, None
    else:
        data_dir = args.data_dir
        if data_dir is None and not args.builtin:
            data_dir = train_config.get("data_dir")
        text = corpus(data_dir)
        tokens, source, tokenizer, split = text.split(args.split), text.source, text.tokenizer, args.split
    block = args.block_size or model.config.block_size
    if block > model.config.block_size:
        raise ValueError(f"block_size: {block} exceeds the model's block_size={model.config.block_size}")
    ctx = distributed.context(args.device)
    model.to(ctx.device)
    with distributed.joined(ctx):
        metrics = lm_loss(model, tokens, block, ctx, batch_size=args.batch_size, batches=args.batches,
                          precision=args.precision)
    return {**metrics, "unit": "nats per token", "block_size": block, "split": split, "source": source,
            "tokenizer": tokenizer} if ctx.is_main else {}


def report(checkpoint: str, metrics: dict) -> str:
    """The metrics as a short table naming the data, the split, the count and the units."""
    data = metrics["source"] if metrics["split"] is None else f"split {metrics['split']} of {metrics['source']}"
    per = " (bytes tokenizer: nats per byte)" if metrics["tokenizer"] == "bytes" else ""
    return cli.table(f"{checkpoint} on {data}: {metrics['tokens']:,} predicted tokens in windows of "
                     f"{metrics['block_size']:,}",
                     [("loss", f"{metrics['loss']:.4f}", f"cross-entropy, {metrics['unit']}{per}"),
                      ("perplexity", f"{metrics['perplexity']:.2f}", "e^loss")])


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crate-eval-lm``: prints the loss (nats per token), the perplexity and the count as a table,
    or as JSON with ``--json``."""
    args = parse_args(argv)
    try:
        metrics = run(args)
    except cli.EXPECTED as err:
        return cli.fail("crate-eval-lm", err, 2)
    if metrics:
        print(json.dumps(metrics, indent=2) if args.json else report(args.checkpoint, metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
