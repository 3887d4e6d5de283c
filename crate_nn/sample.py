"""``crate-sample``: text from a causal language model — CRATE-GPT, its GPT baseline, or a crate-lm / nanoGPT
checkpoint — with temperature and top-k sampling (nanoGPT's ``sample.py``).

    crate-sample runs/gpt_stdlib/checkpoints/last.pt --prompt "def " --max-new-tokens 300
    crate-sample ckpt.pt --tokenizer tiktoken:gpt2 --prompt "When Mary and John went to the store," --top-k 200
    crate-sample ckpt.pt --prompt-file prompt.txt --num-samples 3 --temperature 0.8 --seed 1

The tokenizer is the one the checkpoint records (`crate_nn.preprocessing`; for a file written before checkpoints
recorded it, that of the run that trained it: the built-in corpus's bytes, or its data_dir's meta.json) unless
``--tokenizer`` names one (needed for crate-lm and nanoGPT files). Errors are one line naming the
argument or file, exit status 2.
"""
from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

import torch
from torch import nn

from . import cli
from .data.corpus import load_corpus
from .data.tokenizers import Tokenizer, get_tokenizer
from .engine.distributed import resolve_device
from .files import read_text
from .loading import CAUSAL_LM, load_model


@torch.no_grad()
def generate(model: nn.Module, tokens: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Extend ``tokens`` (B, T₀) by ``max_new_tokens`` sampled tokens: (B, T₀ + max_new_tokens).

    Each step feeds the last ``block_size`` tokens, divides the last position's logits by ``temperature``, keeps
    the ``top_k`` largest (all if None) and samples from their softmax with ``generator``. ``top_k=1`` is greedy
    (argmax) decoding whatever the temperature and the generator. The model is used in its current mode.

    Any temperature ≥ 0 is exact: the logits are shifted so that the largest is 0 and divided in float64, so a tiny
    temperature gives the softmax's limit instead of an overflow (inf/inf = NaN) — every probability on the
    largest logit. ``temperature=0`` is that limit itself: greedy (argmax) decoding. (Either way, tokens tied for
    the largest logit share its probability, as with ``top_k=1``.)
    """
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens: expected a non-negative integer, got {max_new_tokens!r}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not (
            math.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"temperature: expected a number ≥ 0 (0: greedy decoding), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k: expected None or a positive integer, got {top_k!r}")
    block = model.config.block_size
    for _ in range(max_new_tokens):
        logits = model(tokens[:, -block:])[:, -1, :].double()
        logits = logits - logits.amax(dim=-1, keepdim=True)  # ≤ 0, the largest 0: finite after any division
        logits = logits / temperature if temperature > 0 else torch.where(logits == 0, 0.0, float("-inf"))
        if top_k is not None and top_k < logits.shape[-1]:
            kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        following = torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)
        tokens = torch.cat([tokens, following], dim=1)
    return tokens


def tokenizer_for(spec: str | None, model: nn.Module, train_config: dict, path: str) -> Tokenizer:
    """``spec``, else the tokenizer ``model`` (loaded from ``path``) records in its preprocessing, else that of the
    run whose training config ``train_config`` is (a checkpoint written before they recorded it; {} for another
    codebase's file)."""
    if spec:
        return get_tokenizer(spec)
    recorded = model.preprocessing.tokenizer if model.preprocessing is not None else None
    if recorded is not None:
        return get_tokenizer(recorded)
    if "data_dir" not in train_config:
        raise ValueError(f"tokenizer: {path!r} does not record the run that trained it; pass --tokenizer")
    data_dir = train_config["data_dir"]
    return get_tokenizer("bytes" if data_dir is None else load_corpus(data_dir).tokenizer)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="crate-sample", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", help="a causal LM in any format crate_nn.load reads (ours, crate-lm, nanoGPT; "
                                           "a file or hf-hub:ORG/NAME[@revision][:path])")
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", default="", help="text to continue (default: the end-of-text token)")
    prompt.add_argument("--prompt-file", default=None, help="a file whose text to continue")
    parser.add_argument("--num-samples", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=0.8, help="0 (or anything tiny): greedy decoding")
    parser.add_argument("--top-k", type=int, default=200, help="0 keeps every token")
    parser.add_argument("--seed", type=int, default=1337)
    parser.add_argument("--tokenizer", default=None, help="bytes | tiktoken:<encoding> | hf:<name or path>")
    parser.add_argument("--heads", type=int, default=None, help="heads of a crate-lm/nanoGPT file without model_args")
    parser.add_argument("--device", default="auto")
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> list[str]:
    """The samples ``args`` ask for (prompt included)."""
    if args.num_samples < 1:
        raise ValueError(f"num_samples: expected a positive integer, got {args.num_samples}")
    device = resolve_device(args.device)
    model, train_config = load_model(args.checkpoint, heads=args.heads, families=CAUSAL_LM)
    model = model.to(device).eval()
    tokenizer = tokenizer_for(args.tokenizer, model, train_config, args.checkpoint)
    text = read_text(args.prompt_file, "prompt_file") if args.prompt_file else args.prompt
    ids = tokenizer.encode(text).tolist() if text else ([tokenizer.eot_id] if tokenizer.eot_id is not None else [])
    if not ids:
        raise ValueError("prompt: empty, and the tokenizer has no end-of-text token to start from")
    tokens = torch.tensor([ids] * args.num_samples, dtype=torch.int64, device=device)
    generator = torch.Generator(device=device).manual_seed(args.seed)
    out = generate(model, tokens, args.max_new_tokens, args.temperature, args.top_k or None, generator)
    return [tokenizer.decode(row.tolist()) for row in out]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crate-sample``: prints the samples separated by lines of dashes."""
    args = parse_args(argv)
    try:
        samples = run(args)
    except cli.EXPECTED as err:
        return cli.fail("crate-sample", err, 2)
    print(("\n" + "-" * 40 + "\n").join(samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
