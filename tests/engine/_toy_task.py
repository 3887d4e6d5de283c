"""A toy task for the engine's own tests: linear regression in float64 with every kind of engine input.

It has a registered model family (so checkpoints rebuild it), a task state (resume must restore it), logged
metrics and run-long counters, optional input noise from the global RNG (resume must restore the RNG), a NaN
switch read from the engine's clock (``self.clock``: resume must restore it too), and a switch that sends this
process a signal after a given optimizer step (preemption and hard kills, deterministically). Run as a script
with a JSON file of `ToyConfig`'s fields (its ``to_dict()``) (for torchrun and subprocess tests):

    python tests/engine/_toy_task.py config.json
"""
from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from crate_nn.engine import LossOutput, Task, TrainConfig, option, register_task, train
from crate_nn.engine.config import Section, section
from crate_nn.engine.distributed import all_reduce_sum
from crate_nn.models.registry import register_family


@dataclass
class ToyNetConfig:
    dim: int = 4


@register_family("toy_regression", ToyNetConfig)
class ToyNet(nn.Module):
    def __init__(self, config: ToyNetConfig):
        super().__init__()
        self.config = config
        self.linear = nn.Linear(config.dim, 1)
        self.scale = nn.Parameter(torch.ones(config.dim))

    def forward(self, x):
        return self.linear(x * self.scale).squeeze(-1)


@dataclass
class ToySection(Section):
    """The toy data and the switches of the engine's tests."""

    samples: int = option(64, "training samples", minimum=1)
    dim: int = option(4, "input dimension", minimum=1)
    noise: float = option(0.0, "std of input noise drawn from the global RNG at every micro-batch", minimum=0.0)
    nan_at_step: int | None = option(None, "make the loss NaN at this optimizer step (0-based)", minimum=0)
    signal_at_step: int | None = option(None, "after this optimizer step (1-based), send signal_name to this process "
                                        "(rank 0 only)", minimum=1, resume_free=True)
    signal_name: str = option("SIGTERM", "the signal", choices=("SIGTERM", "SIGINT", "SIGKILL"), resume_free=True)


@dataclass
class ToyConfig(TrainConfig):
    task = "toy"

    toy: ToySection = section(ToySection)


class Pairs(Dataset):
    def __init__(self, x: torch.Tensor, y: torch.Tensor):
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i]


@register_task(ToyConfig)
class ToyTask(Task):
    unit = "pairs"

    def __init__(self, config: ToyConfig, ctx):
        super().__init__(config, ctx)
        toy = config.toy
        g = torch.Generator().manual_seed(1234)
        w = torch.randn(toy.dim, generator=g, dtype=torch.float64)
        x = torch.randn(toy.samples + 32, toy.dim, generator=g, dtype=torch.float64)
        y = x @ w + 0.1 * torch.randn(len(x), generator=g, dtype=torch.float64)
        self.train_set, self.val = Pairs(x[:toy.samples], y[:toy.samples]), (x[toy.samples:], y[toy.samples:])
        self.model = ToyNet(ToyNetConfig(toy.dim)).double()
        self.calls = 0  # task state: micro-batches seen by this process, restored on resume

    def collate(self, items):
        return torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])

    def loss(self, model, batch) -> LossOutput:
        x, y = (t.to(self.ctx.device) for t in batch)
        if self.config.toy.noise:
            x = x + self.config.toy.noise * torch.randn_like(x)
        pred = model(x)
        loss = F.mse_loss(pred, y)
        if self.config.toy.nan_at_step is not None and self.clock.step == self.config.toy.nan_at_step:
            loss = loss * float("nan")
        self.calls += 1
        return LossOutput(loss, metrics={"abs_err": (pred - y).abs().mean()}, counts={"pairs_seen": len(y)})

    def after_optimizer_step(self, model, step: int) -> None:
        if self.config.toy.signal_at_step == step + 1 and self.ctx.rank == 0:
            os.kill(os.getpid(), getattr(signal, self.config.toy.signal_name))

    def evaluate(self, model) -> dict:
        with torch.no_grad():
            x, y = (t.to(self.ctx.device) for t in self.val)
            total = all_reduce_sum(F.mse_loss(model(x), y, reduction="sum").detach(), self.ctx)
        return {"val_mse": total.item() / (len(y) * self.ctx.world_size)}

    def state_dict(self) -> dict:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.calls = state["calls"]


def toy(output_dir, **overrides) -> ToyConfig:
    """A fast toy run: 64 samples, batch 8 (8 steps per epoch), 3 epochs, CPU, float32 autocast off."""
    base = dict(optimizer="adamw", lr=0.05, weight_decay=0.01, betas=(0.9, 0.99), batch_size=8, epochs=3,
                warmup_epochs=1.0, device="cpu", precision="fp32", num_workers=0, progress=False,
                checkpoint_every=0, log_every=3, output_dir=str(output_dir))
    return ToyConfig().replace(**{**base, **overrides})


if __name__ == "__main__":
    fields = json.loads(Path(sys.argv[1]).read_text())
    from crate_nn.engine import Preempted

    try:
        train(ToyConfig.from_dict(fields))
    except Preempted as stop:
        print(f"preempted: {stop}", file=sys.stderr)
        sys.exit(128 + int(stop.signum))
