"""``init_from``: a model starting from a pre-trained file's weights (fine-tuning), one function for every task.

The file is any that `crate_nn.weights.read_state` reads — ours, another codebase's, an ``hf-hub:`` name. What the
model takes from it is its family's `FineTuning` policy (`POLICIES`): the head it may leave freshly initialised,
the tensors fitted when their shapes differ (a classifier's position embedding resampled to its patch grid, a
language model's ``wpe`` cropped to its block size, as nanoGPT's ``crop_block_size``), the parameters tied to
another. A file of the model's own family (or of a family the policy reads by name) gives its tensors key by key;
a file of another family gives them through its model's ``<family>_state_dict(config)`` when it has one (a
CRATE-MAE's encoder as a classifier: `crate_nn.models.mae.CRATEMAE.classifier_state_dict`).
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from ..models.embedding import resample_pos_embed
from ..models.registry import families
from .reading import read_state


def resample_grid(incoming: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A position embedding (1, 1 + n, d) resampled to ``target``'s square patch grid (bicubic, class token kept)."""
    side = math.isqrt(target.shape[1] - 1)
    return resample_pos_embed(incoming, (side, side))


def crop_rows(incoming: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The first rows of a longer position table (a model with a shorter block size); others unchanged."""
    return incoming[:target.shape[0]] if incoming.shape[0] > target.shape[0] else incoming


@dataclass(frozen=True)
class FineTuning:
    """What a model of one family takes from a pre-trained file.

    Attributes:
        head: key prefixes left at their initialisation when the file lacks them or holds another shape (reported);
            every other tensor must come from the file with the model's shape (after ``fit``), else ValueError.
        fit: key → ``fit(incoming, model's tensor)``, applied when the shapes differ.
        tied: keys tied to another parameter: copied with it, never reported as left at initialisation.
        read_by_name: other families whose files give their tensors key by key (the model's own always does).
    """

    head: tuple[str, ...]
    fit: Mapping[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = field(default_factory=dict)
    tied: tuple[str, ...] = ()
    read_by_name: tuple[str, ...] = ()


LANGUAGE = ("gpt", "bert", "bert_classifier")
_TEXT = {"wpe.weight": crop_rows}
POLICIES = {
    "classifier": FineTuning(head=("head.fc.",), fit={"pos_embed": resample_grid}),
    "gpt": FineTuning(head=("lm_head.",), fit=_TEXT, tied=("lm_head.weight",), read_by_name=LANGUAGE),
    "bert": FineTuning(head=("head.",), fit=_TEXT, tied=("head.decoder.weight",), read_by_name=LANGUAGE),
    "bert_classifier": FineTuning(head=("classifier.",), fit=_TEXT, read_by_name=LANGUAGE),
}
"""Each family that fine-tunes: its policy (a family without one cannot start from a file)."""


def starting_points(family: str) -> dict[str, str]:
    """The families whose files a model of ``family`` can start from (`crate_nn.weights.read_state`'s
    ``families``): its own, those its policy reads by name, those whose models offer ``<family>_state_dict``."""
    policy = POLICIES.get(family)
    if policy is None:
        raise ValueError(f"init_from: a {family} model does not start from a file (families that do: "
                         f"{sorted(POLICIES)})")
    offer = f"{family}_state_dict"
    names = [family, *policy.read_by_name, *(f.name for f in families() if hasattr(f.model_class, offer))]
    return {name: f"a {name} model" for name in dict.fromkeys(names)}


def init_from(model: nn.Module, path: str | os.PathLike) -> list[str]:
    """Copy the weights of the file ``path`` into ``model`` by its family's `FineTuning` policy; the names of the
    parameters left at their initialisation. ValueError naming ``init_from`` and the file for a tensor the model
    needs that the file lacks or holds in another shape, and for a file of a family that has nothing to offer (told
    before the file's tensors are converted)."""
    families_read = starting_points(model.family)
    policy = POLICIES[model.family]
    stored = read_state(path, what="init_from", families=families_read,
                        heads=getattr(model.config, "heads", None))
    source = stored.state
    if stored.family != model.family and stored.family not in policy.read_by_name:
        source = getattr(stored.build(), f"{model.family}_state_dict")(model.config)
    copied, fresh = {}, []
    for key, value in model.state_dict().items():
        incoming = source.get(key)
        if incoming is not None and incoming.shape != value.shape and key in policy.fit:
            incoming = policy.fit[key](incoming, value)
        if incoming is not None and incoming.shape == value.shape:
            copied[key] = incoming
        elif key.startswith(policy.head):
            if key not in policy.tied:
                fresh.append(key)
        else:
            found = "missing" if incoming is None else f"of shape {tuple(incoming.shape)}"
            raise ValueError(f"init_from: {key} is {found} in {stored.path}; the model needs {tuple(value.shape)}")
    model.load_state_dict(copied, strict=False)
    return fresh
