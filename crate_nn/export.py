"""``crate-export``: any checkpoint `crate_nn.load` reads, written in our format or in another codebase's.

    crate-export runs/digits/checkpoints/last.pt digits.safetensors
    crate-export crate_small.pth crate_small.pt --name crate_small           the authors' file → ours
    crate-export runs/gpt_stdlib/checkpoints/last.pt gpt.pt --format crate-lm
    crate-export hf-hub:ORG/NAME alpha.safetensors --name crate_alpha_b16
    crate-export crate_alpha_B8_in1k.npz b8.pth --format crate-alpha --option head_norm_eps=1e-5
    crate-export dino_checkpoint.pth dino_student.pt --option checkpoint_key=student

INPUT is a file or ``hf-hub:ORG/NAME[@revision][:path]`` (the local Hugging Face cache only); ``--heads`` and
``--name`` are given to the adapter of another codebase's file, whose tensors do not fix the number of heads, and so
is each ``--option KEY=VALUE`` (a keyword of `crate_nn.load` for that format: the JAX CRATE-α's
``head_norm_eps=1e-5`` makes its head the PyTorch port's, DINO's ``checkpoint_key=student`` reads the student).
``--format`` (default: ``safetensors`` for a ``.safetensors`` OUTPUT, else ``ours``):

    safetensors           ours: the weights, with family, config and preprocessing in the header   every family
    ours                  ours: a torch checkpoint (family, config, preprocessing, checksum)       every family
    official-classifier   the authors' CRATE classifier: a state dict under their names           classifier
    crate-alpha           CRATE-α's PyTorch port: a state dict under their names                  classifier (CRATE-α)
    crate-alpha-jax       CRATE-α's JAX model: an .npz of its parameters (params/…)                classifier (CRATE-α)
    official-mae          the authors' CRATE-MAE: {"model": state dict, "args": its loss}         mae
    crate-lm              CRATE-GPT's crate-lm: {"model", "model_args"}                           gpt (MSSA + ISTA)
    nanogpt               nanoGPT: {"model", "model_args"}                                        gpt (MHSA + MLP)
    timm                  timm's ViT: a state dict under its names                                classifier (ViT)
    dino                  DINO's published backbone: timm's names without the classifier          classifier (ViT,
                                                                                                  head.fc = identity)

Another codebase's file is checked before it is written: read back by that format's adapter
(`crate_nn.weights.adapters`), given only what its files do not fix (the heads), it must give the same config and
every tensor bit for bit, so what the format cannot hold (the authors' classifier with ``pool="mean"``, a CRATE-α
option in the authors' format, the JAX CRATE-α's head LayerNorm ε 1e-6 in the PyTorch port's format, whose head has
PyTorch's 1e-5 …) is an error naming the options, not a file that their code reads as another model.

The model's preprocessing (mean, std, image and patch size, tokenizer: `crate_nn.preprocessing`) is kept by ours and
by the formats whose files hold entries beside the weights — the authors' classifier and timm's (then in their
training scripts' layout, ``{"state_dict", "preprocessing"}``), their CRATE-MAE, crate-lm and nanoGPT — and read
back by `crate_nn.load`; the line printed says when a format has no place for it (CRATE-α's and DINO's bare state
dicts, the JAX arrays) and how to give it back (``--mean``/``--std`` of ``crate-eval`` and ``python -m
verify.network``). Errors are one line naming the argument or file, exit status 2; a mistyped argument is told
before torch is imported.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import cli

if TYPE_CHECKING:
    from torch import nn

    from .preprocessing import Preprocessing
    from .weights import Adapter

OURS = ("safetensors", "ours")


@functools.cache
def foreign() -> dict[str, Adapter]:
    """Another codebase's formats ``--format`` writes: their `crate_nn.weights.Adapter` by export name."""
    from .weights import ADAPTERS

    return {adapter.export: adapter for adapter in ADAPTERS}


def formats() -> tuple[str, ...]:
    """Every ``--format``: ours, then `foreign`."""
    return (*OURS, *foreign())


def export(model: nn.Module, path: str | os.PathLike, format: str) -> bool:
    """Write ``model`` (a registered family's) to ``path`` in ``format`` (one of `formats`), atomically; whether the
    file keeps the model's preprocessing (False: the model records none, or the format has no place for it).
    ValueError naming the argument when the format does not fit the path's suffix or cannot hold the model."""
    from .models.registry import unwrap_model
    from .weights import save

    model, path = unwrap_model(model), os.fspath(path)
    if format not in formats():
        raise ValueError(f"format: expected one of {list(formats())}, got {format!r}")
    if format == "safetensors" and not path.endswith(".safetensors"):
        raise ValueError(f"output: --format safetensors writes a .safetensors file, not {path!r}")
    if format != "safetensors" and path.endswith(".safetensors"):
        raise ValueError(f"output: --format {format} writes a torch file, not {path!r} (a .safetensors output is "
                         "--format safetensors)")
    if format in OURS:
        save(path, model)
        return model.preprocessing is not None
    contents, kept = foreign_contents(model, format)
    (foreign()[format].write or _torch_save)(path, contents)
    return kept


def _torch_save(path: str, contents: dict) -> None:
    from .weights.storage import atomic_save

    atomic_save(contents, path)


def foreign_contents(model: nn.Module, format: str) -> tuple[dict, bool]:
    """(the file contents of ``model`` in the `foreign` format ``format``, whether they keep its preprocessing),
    checked by reading them back with the adapter that claims them, given only the options its files do not fix
    (`crate_nn.weights.Adapter.hints`): the same config (p and m resolved on both sides, `_resolved`), bit-identical
    tensors and the model's preprocessing or none, else ValueError naming what differs."""
    import torch

    from .weights.ours import recorded_preprocessing
    from .weights.reading import find_adapter

    target = foreign()[format]
    family = getattr(model, "family", None)
    if family != target.family:
        raise ValueError(f"format: {format} holds {target.family} models; this is a {family} model")
    try:
        contents = target.to_theirs(model)
        found = find_adapter(contents, format)
        config, state = found.to_ours(contents, **{name: getattr(model.config, name) for name in target.hints})
        back = recorded_preprocessing(contents, config, format) if "preprocessing" in contents else None
    except ValueError as err:
        raise ValueError(f"format: {format} cannot hold this model: {err}") from None
    ours, theirs = _resolved(model.config), _resolved(config)
    differ = {f.name: (getattr(ours, f.name), getattr(theirs, f.name)) for f in dataclasses.fields(ours)
              if getattr(ours, f.name) != getattr(theirs, f.name)}
    if found is not target or type(config) is not type(model.config) or differ:
        raise ValueError(f"format: {format} cannot hold this model's options {differ} (ours, as read back)")
    mine = model.state_dict()
    changed = sorted(k for k in mine if k not in state or state[k].dtype != mine[k].dtype
                     or not torch.equal(state[k], mine[k]))
    if changed or mine.keys() != state.keys():
        raise ValueError(f"format: {format} does not give back this model's tensors {changed[:8]}")
    if back is not None and back != model.preprocessing:
        raise ValueError(f"format: {format} gives back the preprocessing {back}, not this model's {model.preprocessing}")
    return contents, back is not None


def _resolved(config):
    """``config`` with ``dim_head`` and ``dict_width`` replaced by the p and m they give (None: p = d/K, m = 4d)."""
    return dataclasses.replace(config, dim_head=config.head_dim,
                               dict_width=config.atoms if config.ista == "overcomplete" else config.dict_width)


def _key_value(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` → (KEY, the Python literal VALUE, else the word itself)."""
    key, equals, value = text.partition("=")
    if not equals or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = cli.Parser(prog="crate-export", description=__doc__.split("\n\n")[0],
                        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", help="a checkpoint crate_nn.load reads: a file, or hf-hub:ORG/NAME[@revision][:path]")
    parser.add_argument("output", help="the file to write")
    parser.add_argument("--format", choices=cli.Choices(formats), default=None, metavar="FORMAT",
                        help="one of the formats above (default: safetensors for a .safetensors output, else ours)")
    parser.add_argument("--heads", type=int, default=None, help="heads of another codebase's file (K)")
    parser.add_argument("--name", default=None, help="a registered size for another codebase's file (gives K)")
    parser.add_argument("--option", action="append", type=_key_value, default=[], metavar="KEY=VALUE",
                        help="a crate_nn.load keyword for another codebase's file (repeatable; VALUE a Python literal "
                             "or a word): head_norm_eps=1e-5, checkpoint_key=student, in_channels=1 …")
    args = parser.parse_args(argv)
    if args.heads is not None and args.heads < 1:
        parser.error(f"argument --heads: expected a positive integer, got {args.heads}")
    return args


def run(args: argparse.Namespace) -> str:
    """Load ``args.input``, write ``args.output``; the line that says what was written."""
    if os.path.exists(args.input) and os.path.exists(args.output) and os.path.samefile(args.input, args.output):
        raise ValueError(f"output: {args.output!r} is the input file")
    from .weights import load
    from .weights.adapter import spelled

    format = args.format or ("safetensors" if args.output.endswith(".safetensors") else "ours")
    overrides = {**dict(args.option), **{k: v for k, v in (("heads", args.heads), ("name", args.name)) if v is not None}}
    with spelled(heads="--heads K", name="--name NAME", in_channels="--option in_channels=C"):
        model = load(args.input, **overrides)
    kept = export(model, args.output, format)
    count = sum(p.numel() for p in model.parameters())
    line = f"{args.output}: {format}, a {model.family} model ({count:,} parameters)"
    if model.preprocessing is None:
        return line + "; it records no preprocessing"
    if kept:
        return line + ", its preprocessing kept"
    return line + f"; {format} has no place for its preprocessing" + _given_back(model.preprocessing)


def _given_back(recorded: Preprocessing) -> str:
    """How the commands take a record a format could not keep: its mean and std as ``--mean``/``--std``
    (crate-eval, the network audit), its tokenizer as ``--tokenizer`` (the network audit)."""
    flags = []
    if recorded.mean is not None:
        flags += ["--mean", *map(repr, recorded.mean), "--std", *map(repr, recorded.std)]
    if recorded.tokenizer is not None:
        flags += ["--tokenizer", recorded.tokenizer]
    return f": give it back as {' '.join(flags)}" if flags else ""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crate-export``: prints one line naming what it wrote."""
    args = parse_args(argv)
    try:
        print(run(args))
    except cli.EXPECTED as err:
        return cli.fail("crate-export", err, 2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
