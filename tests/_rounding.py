"""A float64 model of bfloat16's roundings (the standard model of floating-point arithmetic with random errors), the
bound of tests/models/test_bf16_activations.py and of its GPU check in tests/gpu."""
from __future__ import annotations

import copy

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

U_BF16 = 2.0**-8
"""bfloat16's unit roundoff: 8 significant bits, round to nearest: |fl(x) − x| ≤ 2^-8 |x|."""


class RoundingModel(TorchDispatchMode):
    """The standard model of floating-point arithmetic, fl(x) = x(1 + δ) with |δ| ≤ u, run in float64 with δ drawn
    uniformly in [−u, u], independently for every element of every tensor an operation writes (views excepted)."""

    def __init__(self, u: float, generator: torch.Generator) -> None:
        super().__init__()
        self.u, self.generator = u, generator

    def perturb(self, t: torch.Tensor) -> None:
        noise = torch.rand(t.shape, dtype=t.dtype, generator=self.generator).to(t.device)
        t.mul_(1 + self.u * (2 * noise - 1))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    self.perturb(t)
        return out


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double().cpu() - b.double().cpu()).norm() / b.double().cpu().norm()).item()


def modelled_errors(model: nn.Module, images: torch.Tensor, reference: torch.Tensor, draws: int = 3) -> list[float]:
    """Relative logit errors of ``model`` (a copy, on the CPU in float64) under `RoundingModel` (u = bfloat16's),
    its parameters perturbed once per draw like the bf16 copies autocast makes of them."""
    errors = []
    for seed in range(draws):
        g = torch.Generator().manual_seed(seed)
        perturbed = copy.deepcopy(model).cpu().double()
        rounding = RoundingModel(U_BF16, g)
        with torch.no_grad():
            for p in perturbed.parameters():
                rounding.perturb(p)
            with rounding:
                errors.append(rel_error(perturbed(images.cpu().double()), reference))
    return errors


def rounding_bound(model: nn.Module, images: torch.Tensor, reference: torch.Tensor) -> float:
    """Twice the root mean square of `modelled_errors`: the bound on bf16 logits' relative error (the reasoning is
    tests/models/test_bf16_activations.py's)."""
    return 2 * torch.tensor(modelled_errors(model, images, reference)).square().mean().sqrt().item()
