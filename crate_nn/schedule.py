"""Learning-rate schedule of the papers' recipe (App. C.1): linear warm-up, then cosine decay, per optimizer step.

The authors' script steps its schedule once per epoch; the paper's recipe (5-epoch linear warm-up, cosine decay
over 150 epochs) is reproduced here at the granularity of optimizer steps, so a run of N steps follows the same
curve whatever the batch size, and a run stopped early is exactly a prefix of the full run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float = 0.0) -> float:
    """Multiplier of the base learning rate used by optimizer step ``step`` (0-based).

    Warm-up: ``(step + 1) / warmup_steps`` for ``step < warmup_steps`` (reaches 1 at the last warm-up step, never
    0, so no step is wasted). Cosine: ``min_ratio + (1 - min_ratio) * (1 + cos(pi * t)) / 2`` with
    ``t = (step - warmup_steps) / (total_steps - warmup_steps)`` in [0, 1]; ``min_ratio`` from ``step >= total_steps``.
    """
    if warmup_steps < 0 or total_steps < 1 or warmup_steps > total_steps:
        raise ValueError(
            f"warmup_steps and total_steps: expected 0 <= warmup_steps <= total_steps and total_steps >= 1, "
            f"got warmup_steps={warmup_steps}, total_steps={total_steps}"
        )
    if not 0.0 <= min_ratio <= 1.0:
        raise ValueError(f"min_ratio: expected a value in [0, 1], got {min_ratio}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if step >= total_steps:
        return min_ratio
    t = (step - warmup_steps) / (total_steps - warmup_steps)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * t))


@dataclass
class WarmupCosine:
    """``warmup_cosine`` as a picklable callable (its fields go into the scheduler's state dict)."""

    warmup_steps: int
    total_steps: int
    min_ratio: float = 0.0

    def __call__(self, step: int) -> float:
        return warmup_cosine(step, self.warmup_steps, self.total_steps, self.min_ratio)


def build_scheduler(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int, min_ratio: float = 0.0
) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` to be stepped after every optimizer step: step s runs at ``lr * warmup_cosine(s, ...)``."""
    schedule = WarmupCosine(warmup_steps, total_steps, min_ratio)
    schedule(0)  # validates the arguments before the optimizer's learning rates are touched
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
