"""What the adapters of other codebases' files share: unwrapping a state dict and renaming keys by templates with a
layer index.

`KeyMap` holds (their key, our key) template pairs in which ``{i}`` stands for a layer index; it renames in both
directions and names every key without a counterpart. `state_dict_of` accepts a path or a dict: a bare state dict,
or one wrapped under one of `WRAPPERS`, or a JAX tree's ``params/`` subtree, with or without the ``module.`` prefix of
DistributedDataParallel and the ``_orig_mod.`` prefix of ``torch.compile``.
"""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

import torch

from . import ours

PREFIXES = ("module.", "_orig_mod.")
"""Prefixes every key of a state dict may carry, in any order and number: DistributedDataParallel's and
``torch.compile``'s (SimDINO's students are both: ``_orig_mod.module.``)."""
WRAPPERS = ("state_dict", "model", "teacher")
"""Entries of a checkpoint dictionary that hold its state dict, the first one present taken: training scripts'
``state_dict`` and ``model``; DINO's and SimDINO's ``teacher`` (beside ``student``, `crate_nn.weights.adapters.vit`)."""
JAX_PARAMS = "params/"
"""A JAX checkpoint's parameters (flax's ``{"params", "opt", …}`` tree saved with ``/``-joined names, as CRATE-α's
``.npz`` files): the state dict is that subtree, and the optimizer's arrays beside it are not read."""


class KeyMap:
    """Renaming rules between another codebase's state-dict keys and ours (``{i}`` = a layer index)."""

    def __init__(self, pairs: Iterable[tuple[str, str]]):
        self.pairs = list(pairs)
        self._to_ours = [(self._regex(theirs), ours) for theirs, ours in self.pairs]
        self._to_theirs = [(self._regex(ours), theirs) for theirs, ours in self.pairs]

    @staticmethod
    def _regex(template: str) -> re.Pattern:
        return re.compile("^" + re.escape(template).replace(r"\{i\}", r"(?P<i>\d+)") + "$")

    @staticmethod
    def _rename(key: str, rules) -> str | None:
        for pattern, target in rules:
            match = pattern.match(key)
            if match:
                return target.replace("{i}", match.groupdict().get("i") or "")
        return None

    def to_ours(self, state: Mapping[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
        """Rename ``state`` to our keys; keys without a counterpart raise ValueError naming them."""
        renamed, unknown = {}, []
        for key, value in state.items():
            name = self._rename(key, self._to_ours)
            if name is None:
                unknown.append(key)
            else:
                renamed[name] = value
        if unknown:
            raise ValueError(f"unexpected keys in the {source} checkpoint: {sorted(unknown)}")
        return renamed

    def to_theirs(self, state: Mapping[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
        """Rename our ``state`` to their keys; parameters without a counterpart raise ValueError naming them."""
        renamed = {key: self._rename(key, self._to_theirs) for key in state}
        missing = sorted(k for k, v in renamed.items() if v is None)
        if missing:
            raise ValueError(f"these parameters have no counterpart in the {source} format: {missing}")
        return {renamed[k]: v for k, v in state.items()}


def state_dict_of(source, wrappers: tuple[str, ...] = WRAPPERS, **load_options) -> dict[str, torch.Tensor]:
    """A flat state dict without wrapper prefixes from a path (read with ``weights_only=True``) or a dict."""
    if isinstance(source, (str, os.PathLike)):
        source = ours.read(source, **load_options)
    if not isinstance(source, Mapping):
        raise TypeError(f"source must be a path or a dict, got {type(source).__name__}")
    if ours.is_ours(source):
        raise ValueError("source is a crate_nn checkpoint; load it with crate_nn.load")
    for wrapper in wrappers:
        if isinstance(source.get(wrapper), Mapping):
            source = source[wrapper]
            break
    if any(k.startswith(JAX_PARAMS) for k in source):  # only these are read (a lazy mapping: `storage.NpzArrays`)
        state = {k[len(JAX_PARAMS):]: source[k] for k in source if k.startswith(JAX_PARAMS)}
    else:
        state = dict(source)
    while state and (prefix := next((p for p in PREFIXES if all(k.startswith(p) for k in state)), None)):
        state = {k[len(prefix):]: v for k, v in state.items()}
    not_tensors = sorted(k for k, v in state.items() if not isinstance(v, torch.Tensor))
    if not_tensors:
        raise ValueError(f"not a state dict: entries {not_tensors[:5]} are not tensors")
    return state


def layer_count(state: Mapping[str, torch.Tensor], pattern: str) -> int:
    """1 + the largest layer index captured by the regex ``pattern`` (group 1) in the keys; 0 when none match."""
    ids = {int(m.group(1)) for k in state for m in [re.match(pattern, k)] if m}
    return max(ids) + 1 if ids else 0
