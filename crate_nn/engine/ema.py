"""Exponential moving average of a model's weights: DINO's teacher (eq. 79) and an option for any task.

    ema ← m · ema + (1 − m) · weights          (parameters; floating-point buffers are copied)

Written here rather than with ``torch.optim.swa_utils.AveragedModel`` because the momentum m follows a per-step
schedule (DINO's cosine towards 1), which AveragedModel's averaging function cannot see, and because the update
must equal its formula exactly (tests compare it bit for bit).
"""
from __future__ import annotations

import copy

import torch
from torch import nn


class EMA:
    """An averaged copy ``module`` of ``model`` (same class, no gradients, eval mode)."""

    def __init__(self, model: nn.Module) -> None:
        self.module = copy.deepcopy(model).eval()
        for p in self.module.parameters():
            p.requires_grad_(False)

    def update(self, model: nn.Module, momentum: float) -> None:
        """``ema ← momentum·ema + (1 − momentum)·model`` for every parameter; buffers are copied."""
        ema_update(self.module, model, momentum)

    def state_dict(self) -> dict:
        return self.module.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.module.load_state_dict(state)


@torch.no_grad()
def ema_update(averaged: nn.Module, model: nn.Module, momentum: float) -> None:
    """``averaged ← momentum·averaged + (1 − momentum)·model`` for every parameter (mul then add with alpha), and
    ``model``'s buffers copied; ``averaged`` has ``model``'s architecture (e.g. `EMA.module`, or DINO's teacher held
    beside its student)."""
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum: expected a value in [0, 1], got {momentum}")
    targets, currents = list(averaged.parameters()), [p.detach() for p in model.parameters()]
    if len(targets) != len(currents):
        raise ValueError(f"model: expected {len(targets)} parameters like the averaged copy, got {len(currents)}")
    torch._foreach_mul_(targets, momentum)  # multi-tensor kernels: a few launches for all parameters
    torch._foreach_add_(targets, currents, alpha=1.0 - momentum)
    for target, current in zip(averaged.buffers(), model.buffers(), strict=True):
        target.copy_(current)
