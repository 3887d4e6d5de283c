"""Numerical precision of forward passes: bf16 autocast on GPUs, float32 on CPUs unless asked otherwise.

Training takes ``auto``, ``bf16`` or ``fp32``; ``fp16`` exists for measurements against the authors' fp16 code
(``benchmarks/``), since training in fp16 would need a gradient scaler.
"""
from __future__ import annotations

import contextlib

import torch

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The autocast dtype of ``precision`` on ``device``: ``auto`` is bf16 on CUDA and none (float32) elsewhere."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    if precision not in DTYPES:
        raise ValueError(f"precision: expected auto or one of {', '.join(DTYPES)}, got {precision!r}")
    return DTYPES[precision]


def autocast(device: torch.device, precision: str | torch.dtype | None):
    """``torch.autocast`` for a precision name (see `autocast_dtype`) or a dtype; nothing for float32/None."""
    dtype = autocast_dtype(device, precision) if isinstance(precision, str) else precision
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)
