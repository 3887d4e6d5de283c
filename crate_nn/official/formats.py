"""Which codebase wrote a checkpoint, told from its keys: the one place `crate_nn.load` asks.

Formats recognised (`FORMATS`, in the order they are tried; a file that two of them claim is refused as
ambiguous, one that none claims is refused naming the keys it holds):

* ``authors' CRATE classifier`` — Ma-Lab-Berkeley/CRATE ``model/crate.py`` (``main.py``/``finetune.py`` dicts, the
  Colab's ``crate-demo.pth``; `load_official_checkpoint`, which needs ``heads=`` or ``name=``: the tensors fix K·p
  only);
* ``authors' CRATE-MAE`` — their FAIR-MAE checkpoints (`load_official_mae`; the heads come from the file's
  ``args.model`` when it has one);
* ``CRATE-α`` — UCSC-VLAA/CRATE-alpha's PyTorch port (`load_crate_alpha`; ``name="crate_alpha_b16"`` or
  ``heads=``);
* ``crate-lm`` and ``nanoGPT`` — CRATE-GPT and GPT-2 language models (`load_gpt_checkpoint`; ``heads=`` unless the
  file has ``model_args['n_head']``).

Our own files (``format: crate_nn``) are read by `crate_nn.checkpoint.load` before any of these is tried.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from .alpha import load_crate_alpha
from .classifier import load_official_checkpoint
from .gpt import load_gpt_checkpoint
from .keys import state_dict_of
from .mae import load_official_mae


@dataclass(frozen=True)
class Format:
    """A foreign checkpoint format: its name, the test on its (unwrapped) state dict and its loader
    (``loader(payload, **overrides)``)."""

    name: str
    claims: Callable[[Mapping[str, torch.Tensor]], bool]
    loader: Callable[..., nn.Module]


def _prefixed(state: Mapping, prefix: str) -> bool:
    return any(k.startswith(prefix) for k in state)


FORMATS = (
    Format("authors' CRATE classifier",
           lambda s: "to_patch_embedding.2.weight" in s and _prefixed(s, "transformer.layers."),
           load_official_checkpoint),
    Format("authors' CRATE-MAE", lambda s: "decoder_pred.weight" in s and _prefixed(s, "blocks."), load_official_mae),
    Format("CRATE-α", lambda s: "conv1.weight" in s and any(k.endswith(".1.fn.D1") for k in s), load_crate_alpha),
    Format("crate-lm", lambda s: "transformer.wte.weight" in s and any(".prenorm_1." in k for k in s),
           load_gpt_checkpoint),
    Format("nanoGPT", lambda s: "transformer.wte.weight" in s and any(".ln_1." in k for k in s), load_gpt_checkpoint),
)


def sniff(payload: Mapping, source: str = "checkpoint") -> Format:
    """The one `Format` whose test the payload's state dict passes; ValueError naming ``source`` and what it saw
    when none or several do."""
    try:
        state = state_dict_of(payload)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{source}: not a state dict of a known format ({err})") from None
    found = [f for f in FORMATS if f.claims(state)]
    if len(found) > 1:
        raise ValueError(f"{source}: ambiguous, its keys fit {' and '.join(f.name for f in found)}")
    if not found:
        raise ValueError(f"{source}: no known checkpoint format (crate_nn, {', '.join(f.name for f in FORMATS)}); "
                         f"its keys begin {sorted(state)[:6]}")
    return found[0]


def load_foreign(payload: Mapping, source: str = "checkpoint", **overrides) -> nn.Module:
    """The model of a foreign checkpoint (`sniff`), built by its format's loader with ``overrides``."""
    return sniff(payload, source).loader(payload, **overrides)
