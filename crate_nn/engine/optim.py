"""Optimizers of the papers' recipes and their parameter groups.

Two groups: weight decay on matrices (projections, U, W, D, heads), none on norms, biases and the parameters a
model names in ``no_weight_decay()`` (timm's convention; the classifier names ``pos_embed`` and ``cls_token``) —
unless ``decay_all``. Each group records its parameters' names (``names``) and whether the engine's weight-decay
schedule applies to it (``decay``).

`Lion` is implemented here with multi-tensor (``torch._foreach_*``) kernels: one launch per operation for all
the parameters of a group instead of one per parameter and operation, which on a GPU is the difference between
a few and ~850 kernel launches per CRATE-Base step (``lion-pytorch`` loops over the parameters).
"""
from __future__ import annotations

import torch
from torch import nn

from .config import GRAD_CLIP_MODES, TrainConfig


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023, Alg. 2) with decoupled weight decay λ, for every parameter θ with gradient g::

        c = β1·m + (1 − β1)·g;   θ ← θ·(1 − lr·λ) − lr·sign(c);   m ← β2·m + (1 − β2)·g

    The momentum is stored as ``state[θ]["exp_avg"]`` (the name ``lion-pytorch`` uses, so its optimizer states
    load). Each group is updated by six multi-tensor operations.
    """

    def __init__(self, params, lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = 0.0) -> None:
        if not lr > 0:
            raise ValueError(f"lr: expected a positive learning rate, got {lr}")
        if not all(0.0 <= beta <= 1.0 for beta in betas):
            raise ValueError(f"betas: expected two values in [0, 1], got {betas}")
        if not weight_decay >= 0:
            raise ValueError(f"weight_decay: expected a non-negative value, got {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if "exp_avg" not in self.state[p]:
                    self.state[p]["exp_avg"] = torch.zeros_like(p)
            grads = [p.grad for p in params]
            moments = [self.state[p]["exp_avg"] for p in params]
            lr, weight_decay, (beta1, beta2) = group["lr"], group["weight_decay"], group["betas"]
            if weight_decay:
                torch._foreach_mul_(params, 1.0 - lr * weight_decay)
            update = torch._foreach_mul(moments, beta1)
            torch._foreach_add_(update, grads, alpha=1.0 - beta1)
            torch._foreach_sign_(update)
            torch._foreach_add_(params, update, alpha=-lr)
            torch._foreach_mul_(moments, beta2)
            torch._foreach_add_(moments, grads, alpha=1.0 - beta2)
        return loss


def param_groups(model: nn.Module, weight_decay: float, decay_all: bool) -> list[dict]:
    """[decayed group, undecayed group (if any)] of ``model``'s trainable parameters."""
    named = getattr(model, "no_weight_decay", None)
    exempt = set(named()) if callable(named) else set()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skip = not decay_all and (p.ndim < 2 or name in exempt or name.split(".")[-1] in exempt)
        (no_decay if skip else decay).append((name, p))
    groups = [{"params": [p for _, p in decay], "weight_decay": weight_decay, "names": [n for n, _ in decay],
               "decay": True}]
    if no_decay:
        groups.append({"params": [p for _, p in no_decay], "weight_decay": 0.0, "names": [n for n, _ in no_decay],
                       "decay": False})
    return groups


def build_optimizer(config: TrainConfig, model: nn.Module) -> torch.optim.Optimizer:
    """`Lion` (θ ← θ(1 − lr·wd) − lr·sign(β1·m + (1 − β1)·g), m ← β2·m + (1 − β2)·g) or AdamW.

    Every group gets ``initial_lr`` = ``config.optim.lr``; the engine sets ``lr`` and ``weight_decay`` before each step.
    """
    optim = config.optim
    groups = param_groups(model, optim.weight_decay, optim.weight_decay_all)
    for group in groups:
        group["initial_lr"] = optim.lr
    if optim.optimizer == "lion":
        return Lion(groups, lr=optim.lr, betas=tuple(optim.betas), weight_decay=optim.weight_decay)
    return torch.optim.AdamW(groups, lr=optim.lr, betas=tuple(optim.betas), weight_decay=optim.weight_decay)


@torch.no_grad()
def clip_gradients(parameters, max_norm: float, mode: str = "global") -> torch.Tensor:
    """Clip the gradients of ``parameters`` in place; return the global gradient norm before clipping.

    ``"global"``: every gradient scaled by max_norm / ‖g‖ when the norm ‖g‖ of all of them together exceeds
    max_norm (``torch.nn.utils.clip_grad_norm_``). ``"per_tensor"``: each parameter's gradient g_i scaled by
    max_norm / (‖g_i‖ + 1e-6) when that factor is below 1 (DINO's clipping: every tensor on its own).
    """
    if mode not in GRAD_CLIP_MODES:
        raise ValueError(f"grad_clip_mode: expected one of {', '.join(GRAD_CLIP_MODES)}, got {mode!r}")
    if mode == "global":
        return nn.utils.clip_grad_norm_(parameters, max_norm)
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    norms = torch.stack([g.norm(2) for g in grads])
    for g, norm in zip(grads, norms):
        g.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0))
    return norms.square().sum().sqrt()
