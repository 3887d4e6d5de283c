"""What the command lines load: the weights file a command names → its model and the training config it records
(``crate-eval``, ``crate-segment``, ``crate-sample``, ``crate-eval-lm``). Every format `crate_nn.load` reads is
accepted, told from the file by `crate_nn.weights.read_state`; a model of a family the command cannot use is refused
in one line. Importing it imports no torch (`add_arguments` runs before a command's arguments are checked)."""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

CAUSAL_LM = {"gpt": "a causal LM"}
"""What ``crate-sample`` and ``crate-eval-lm`` take (`load_model`'s ``families``)."""


def load_model(path: str, name: str | None = None, heads: int | None = None,
               families: dict[str, str] | None = None) -> tuple[nn.Module, dict]:
    """(model, its training config or {}) of the weights file ``path`` — a file or ``hf-hub:ORG/NAME[@revision]
    [:path]`` in the local Hugging Face cache —, ours or another codebase's (whose number of heads comes from
    ``heads`` or the registered size ``name``). ``families``: the families the command takes (family → what it is
    to the command); another is refused naming it (`crate_nn.weights.read_state`). A file lacking its heads is
    refused naming the commands' flags, ``--heads`` and ``--model`` (`add_arguments`)."""
    from .weights import read_state
    from .weights.adapter import spelled

    with spelled(heads="--heads K", name="--model NAME"):
        stored = read_state(path, families=families, name=name, heads=heads)
        return stored.build(), stored.train_config


def load_causal_lm(path: str, heads: int | None = None) -> nn.Module:
    """A causal LM (the ``gpt`` family) from any weights file: ours, crate-lm's or nanoGPT's."""
    return load_model(path, heads=heads, families=CAUSAL_LM)[0]


def add_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """The arguments naming the weights a command loads: ``checkpoint`` (``what`` it must hold), and ``--model`` /
    ``--heads`` for another codebase's file, whose tensors do not fix the number of heads."""
    parser.add_argument("checkpoint", help=f"{what}, in any format crate_nn.load reads (ours, the authors', CRATE-α …): "
                                           "a file or hf-hub:ORG/NAME[@revision][:path]")
    parser.add_argument("--model", default=None, help="another codebase's file: a registered size giving its heads "
                                                      "(e.g. crate_small)")
    parser.add_argument("--heads", type=int, default=None, help="another codebase's file: its number of heads")
