"""Per-step schedules of the papers' recipes: linear warm-up then cosine decay (learning rate, App. C.1 and the
CRATE-GPT recipe of App. C.4) or linear decay (CRATE-BERT, App. C.4), and plain cosine interpolation between two
values (weight decay and EMA momentum, DINO's eqs. 79 and App. C.3).

The authors' script steps its schedule once per epoch; here every schedule is a pure function of the optimizer
step, so a run of N steps follows the same curve whatever the batch size, a run stopped early is exactly a prefix
of the full run, and a resumed run needs no scheduler state.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

LR_SCHEDULES = ("cosine", "linear")


def warmup_cosine(step: int, warmup_steps: int, total_steps: int, min_ratio: float = 0.0) -> float:
    """`warmup_decay` with the cosine shape."""
    return warmup_decay(step, warmup_steps, total_steps, min_ratio, "cosine")


def warmup_decay(step: int, warmup_steps: int, total_steps: int, min_ratio: float = 0.0,
                 shape: str = "cosine") -> float:
    """Multiplier of the base learning rate used by optimizer step ``step`` (0-based).

    Warm-up: ``(step + 1) / warmup_steps`` for ``step < warmup_steps`` (reaches 1 at the last warm-up step, never
    0, so no step is wasted). Decay over ``t = (step - warmup_steps) / (total_steps - warmup_steps)`` in [0, 1]:
    ``min_ratio + (1 - min_ratio) * (1 + cos(pi * t)) / 2`` (``shape="cosine"``) or
    ``min_ratio + (1 - min_ratio) * (1 - t)`` (``shape="linear"``); ``min_ratio`` from ``step >= total_steps``.
    """
    if shape not in LR_SCHEDULES:
        raise ValueError(f"shape: expected one of {', '.join(LR_SCHEDULES)}, got {shape!r}")
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
    remaining = 0.5 * (1.0 + math.cos(math.pi * t)) if shape == "cosine" else 1.0 - t
    return min_ratio + (1.0 - min_ratio) * remaining


def cosine(step: int, total_steps: int, start: float, end: float) -> float:
    """``end + (start - end) * (1 + cos(pi * step / total_steps)) / 2``: ``start`` at step 0, ``end`` from
    ``total_steps`` on (DINO's weight-decay and teacher-momentum schedules)."""
    if total_steps < 1:
        raise ValueError(f"total_steps: expected a positive number of steps, got {total_steps}")
    t = min(step, total_steps) / total_steps
    return end + (start - end) * 0.5 * (1.0 + math.cos(math.pi * t))


@dataclass(frozen=True)
class Schedules:
    """The values optimizer step ``step`` uses: learning-rate multiplier, weight decay and EMA momentum.

    ``weight_decay_end`` / ``ema_momentum_end`` of None keep those values constant; ``lr_shape`` is the decay after
    the warm-up (`warmup_decay`).
    """

    warmup_steps: int
    total_steps: int
    min_lr_ratio: float = 0.0
    weight_decay: float = 0.0
    weight_decay_end: float | None = None
    ema_momentum: float = 0.0
    ema_momentum_end: float | None = None
    lr_shape: str = "cosine"

    def __post_init__(self) -> None:
        self.lr_multiplier(0)  # validates the arguments

    def lr_multiplier(self, step: int) -> float:
        return warmup_decay(step, self.warmup_steps, self.total_steps, self.min_lr_ratio, self.lr_shape)

    def weight_decay_at(self, step: int) -> float:
        if self.weight_decay_end is None:
            return self.weight_decay
        return cosine(step, self.total_steps, self.weight_decay, self.weight_decay_end)

    def ema_momentum_at(self, step: int) -> float:
        if self.ema_momentum_end is None:
            return self.ema_momentum
        return cosine(step, self.total_steps, self.ema_momentum, self.ema_momentum_end)
