"""What the model tests feed every registered model and read back (`tests/models/test_contract.py` on the CPU at a
tiny size, `tests/gpu/test_gpu.py` at the registered sizes on a GPU).

A model's inputs come from its ``example_inputs(batch_size)`` method when it has one; otherwise from its config:
images for a config with ``image_size`` and ``in_channels``, token ids for one with ``vocab_size`` and a sequence
length. Outputs may be a tensor or any nesting of tuples, lists, dicts and dataclasses of tensors.
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

SEQUENCE_FIELDS = ("block_size", "context_length", "max_seq_len", "seq_len")


def example_inputs(model: nn.Module, batch: int, device) -> tuple[torch.Tensor, ...]:
    """A batch of inputs for one forward pass of ``model`` (see the module docstring)."""
    g = torch.Generator().manual_seed(0)
    own = getattr(model, "example_inputs", None)
    if callable(own):
        return tuple(t.to(device) for t in own(batch))
    config = model.config
    if hasattr(config, "image_size") and hasattr(config, "in_channels"):
        size = config.image_size
        return (torch.randn(batch, config.in_channels, size, size, generator=g).to(device),)
    length = next((getattr(config, k) for k in SEQUENCE_FIELDS if hasattr(config, k)), None)
    if hasattr(config, "vocab_size") and length:
        return (torch.randint(0, config.vocab_size, (batch, length), generator=g).to(device),)
    raise TypeError(f"{type(model).__name__} ({model.family}): its config has neither image fields nor a vocabulary "
                    "and a sequence length; give the model an example_inputs(batch_size) method")


def float_tensors(output) -> list[torch.Tensor]:
    """Every floating-point tensor in a model's output (a tensor or tuples, lists, dicts of them)."""
    if isinstance(output, torch.Tensor):
        return [output] if output.is_floating_point() else []
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in float_tensors(item)]
    if dataclasses.is_dataclass(output):
        return float_tensors([getattr(output, f.name) for f in dataclasses.fields(output)])
    return []


def library_families() -> set[str]:
    """The model families crate_nn registers (tests may register their own, e.g. the engine's toy regression, in the
    same worker process before a test that counts families runs)."""
    from crate_nn.models.registry import _FAMILIES

    return {f.name for f in _FAMILIES.values() if f.model_class.__module__.startswith("crate_nn.")}
