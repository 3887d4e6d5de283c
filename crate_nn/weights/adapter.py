"""`Adapter`: another codebase's weights format, as `crate_nn.weights` reads and writes it; and how its errors name
the options a file lacks (`option`: ``heads=…`` to `crate_nn.load`, ``--heads K`` on a command line, `spelled`)."""
from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class Adapter:
    """Another codebase's weights format.

    Attributes:
        name: the format's name, as `crate_nn.weights.sniff` gives it (``"CRATE-α"``).
        family: the model family its files hold (``"classifier"``).
        claims: the sniff: whether a file's state dict (unwrapped, `crate_nn.weights.keys.state_dict_of`) is of this
            format; a file that two adapters claim is refused as ambiguous.
        to_ours: ``to_ours(payload, **options) → (config, state)``: the config the file determines (completed by
            ``options``: a registered ``name=``, ``heads=`` …) and its tensors under our names, every key and shape
            checked (ValueError naming them); ``payload`` is the file's whole dictionary.
        to_theirs: ``to_theirs(model) → contents``: what the file of a model of ``family`` holds (``crate-export
            --format <export>``; written by ``write``); ValueError naming what the format cannot hold.
        export: the name ``crate-export --format`` gives the format.
        hints: the config options its files do not fix, which reading them needs given (``heads``: the tensors fix
            K·p only); ``crate-export`` passes them when it reads a file back.
        allowed: types its torch files hold beside tensors and plain values, allowed when reading them
            (``weights_only=True``; FAIR-MAE's ``argparse.Namespace``).
        write: ``write(path, contents)`` writes them whole or not at all; default ``torch.save`` (atomically,
            `crate_nn.weights.storage.atomic_save`); JAX's ``.npz``: `crate_nn.weights.storage.write_npz`.
    """

    name: str
    family: str
    claims: Callable[[Mapping[str, torch.Tensor]], bool]
    to_ours: Callable[..., tuple[Any, dict[str, torch.Tensor]]]
    to_theirs: Callable[[nn.Module], dict]
    export: str
    hints: tuple[str, ...] = ("heads",)
    allowed: tuple[type, ...] = ()
    write: Callable[[str, Any], None] | None = None


def prefixed(state: Mapping, prefix: str) -> bool:
    """Whether some key of ``state`` begins with ``prefix`` (for `Adapter.claims`)."""
    return any(k.startswith(prefix) for k in state)


_SPELLING: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("spelling", default=None)


def option(name: str) -> str:
    """How the caller gives the loading option ``name`` (a keyword of `crate_nn.load`): ``heads=…``, or within
    `spelled` the command line's flag (``--heads K``)."""
    return (_SPELLING.get() or {}).get(name, f"{name}=…")


@contextlib.contextmanager
def spelled(**flags: str) -> Iterator[None]:
    """Within the block, errors name the loading options as a command line takes them: ``spelled(heads="--heads K",
    name="--model NAME")``."""
    token = _SPELLING.set({**(_SPELLING.get() or {}), **flags})
    try:
        yield
    finally:
        _SPELLING.reset(token)


def heads_needed(sizes: str = "") -> ValueError:
    """The error of a file whose tensors fix K·p but not the number of heads K (``sizes``: registered sizes and
    their K, as a hint)."""
    return ValueError(f"heads cannot be inferred from the tensors; pass {option('heads')} or a registered "
                      f"{option('name')}{f' ({sizes})' if sizes else ''}")
