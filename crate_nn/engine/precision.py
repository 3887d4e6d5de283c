"""Numerical precision of forward passes: bf16 autocast on GPUs, float32 on CPUs unless asked otherwise."""
from __future__ import annotations

import contextlib

import torch


def autocast(device: torch.device, precision: str):
    """bf16 autocast on CUDA for ``auto``/``bf16``, on CPU only for ``bf16``; float32 otherwise."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda")
    if not use_bf16:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
