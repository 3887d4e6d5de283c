"""Trained CRATEs for the layer-wise claims: the ``digits`` preset of crate_nn, several seeds, cached.

Each run is the preset trained by `verify.experiments.run` (its seed sets the initialisation, as the engine seeds
it, and the data order) and is measured once, on the 360 held-out test digits, for both the trained model and its
initialisation. Runs and measurements are cached by `verify.experiments` (under a hash of the config and of
crate_nn's code; the measurements also under this module's source), so a warm audit reads JSON; a cold one trains
(≈ 0.43 s per epoch on one core).

Quick mode trains 8 of the preset's 30 epochs (warm-up scaled alike; test accuracy 96.7–97.8%, and every verdict
the same as at 6 or 10 epochs) and measures the scale-free protocol on the first 40 test images with 2 isotropic
draws per image (the 12-layer random CRATEs on 16); ``--full`` trains the preset's 30 epochs and measures all 360
images with 8 draws.
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

import numpy as np
import torch

import crate_nn
from crate_nn.analysis.protocol import layer_profile
from crate_nn.data import DeviceTransform, build_dataset
from crate_nn.tasks import get_preset
from crate_nn.tasks.classification import ClassificationConfig
from verify import experiments

SEEDS = 5
"""Independent runs (initialisation and data order) per configuration."""


@dataclass(frozen=True)
class Budget:
    """What a mode spends: training epochs, images and isotropic draws of the scale-free protocol, images for the
    12-layer random CRATEs."""

    epochs: int
    profile_images: int
    draws: int
    depth_images: int


BUDGETS = {"quick": Budget(epochs=8, profile_images=40, draws=2, depth_images=16),
           "full": Budget(epochs=30, profile_images=360, draws=8, depth_images=360)}


def recipe(epochs: int | None = None, weight_decay: float | None = None, preset: str = "digits"
           ) -> ClassificationConfig:
    """The digits preset (silent, no in-training measurements, validation only at the end — evaluation runs under
    its own RNG, so the trained weights are those of the preset), optionally with fewer epochs (warm-up scaled in
    proportion) or another weight decay; ``preset``: another preset of the same task (``tost_digits``)."""
    base = get_preset(preset, progress=False, measure_epochs=())
    schedule = base.schedule
    epochs = schedule.epochs if epochs is None else epochs
    return base.replace(epochs=epochs, warmup_epochs=schedule.warmup_epochs * epochs / schedule.epochs,
                        weight_decay=base.optim.weight_decay if weight_decay is None else weight_decay,
                        eval_every=epochs)


@functools.lru_cache(maxsize=2)
def test_digits(image_size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """The 360 held-out digits, normalised as in training (resized to ``image_size``), and their labels."""
    config = recipe()
    test = build_dataset("digits", "test", data_dir=None, train=False, image_size=config.data.image_size,
                         load_size=config.data.image_size, eval_resize=config.data.image_size)
    images = torch.stack([test[i][0] for i in range(len(test))])
    labels = torch.as_tensor([int(test[i][1]) for i in range(len(test))])
    return DeviceTransform(image_size, config.data.mean, config.data.std, train=False)(images), labels


def effective_rank(z: torch.Tensor) -> torch.Tensor:
    """Entropy effective rank (Roy & Vetterli) of token sets z (..., n, d) over min(n, d): (...) in (0, 1]."""
    s = torch.linalg.svdvals(z.to(torch.float64))
    p = s / s.sum(-1, keepdim=True).clamp_min(1e-300)
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    return torch.exp(entropy) / min(z.shape[-2:])


def off_block_coherence(model) -> list[float]:
    """Per layer, mean |cosine| between basis vectors of *different* heads (Fig. 17; 0 = incoherent subspaces)."""
    grams = crate_nn.coherence(model)  # (L, K·p, K·p)
    heads = model.encoder.layers[0].mssa.heads
    p = grams.shape[-1] // heads
    head = torch.arange(grams.shape[-1]) // p
    other = head[:, None] != head[None, :]
    return [float(g.abs()[other].mean()) for g in grams]


def projector_sum_deviation(model, images: torch.Tensor) -> list[float]:
    """Per layer, ‖Y(S/s − I)‖_F / ‖Y‖_F averaged over images, S = Σ_k U_kU_k* = WᵀW of the qkv weight W, s = tr S/d,
    Y = LN1(Z^ℓ) the tokens MSSA receives: how far (104)→(105)'s Σ_k U_kU_k* ≈ I is from true on them."""
    out = []
    for layer, t in zip(model.encoder.layers, crate_nn.trace(model, images)):
        W = layer.mssa.qkv.weight.to(torch.float64)
        S = W.T @ W
        S = S / (torch.trace(S) / S.shape[0])
        Y = layer.norm1(t.input).to(torch.float64)
        gap = Y @ (S - torch.eye(S.shape[0], dtype=torch.float64))
        out.append(float((gap.flatten(1).norm(dim=1) / Y.flatten(1).norm(dim=1)).mean()))
    return out


def measure_model(model, budget: Budget, seed: int) -> dict:
    """Every number the layer-wise claims read, for one model (lists over layers)."""
    images, labels = test_digits()
    subset = images[: budget.profile_images]
    model = model.eval()
    out: dict = {}
    with torch.no_grad():
        for protocol in ("paper", "official"):
            m = crate_nn.measure_layers(model, images, protocol=protocol)
            out[protocol] = [s.mean for s in m.compression]
        out["sparsity"] = [s.mean for s in m.sparsity]
        out["test_accuracy"] = float((model(images).argmax(-1) == labels).float().mean())
        profile = layer_profile(model, subset, draws=budget.draws, seed=seed)
        out["profile"] = profile.all_means()
        out["u_norm"] = [float(layer.mssa.qkv.weight.norm()) for layer in model.encoder.layers]
        out["coherence"] = off_block_coherence(model)
        out["effective_rank"] = [float(effective_rank(t.output).mean()) for t in crate_nn.trace(model, subset)]
        out["projector_sum_deviation"] = projector_sum_deviation(model, subset)
    return out


def measured_run(run: experiments.Run, budget: Budget) -> dict:
    """``{"init": …, "trained": …, "metrics": …}`` for one run (measured once per run, budget and measurement code)."""
    def measure(run: experiments.Run) -> dict:
        result = {name: measure_model(run.model(name), budget, run.config.run.seed) for name in experiments.MODELS}
        return {**result, "metrics": run.metrics}

    return run.derived("measurements", measure, sys.modules[__name__], images=budget.profile_images,
                       draws=budget.draws)


def runs(ctx, weight_decay: float | None = None) -> list[dict]:
    """The measured runs of this mode and base seed (``SEEDS`` of them) at ``weight_decay`` (default: the preset's)."""
    return _runs(ctx.mode, ctx.seed, weight_decay)


@functools.cache
def _runs(mode: str, seed: int, weight_decay: float | None) -> list[dict]:
    budget = BUDGETS[mode]
    trained = experiments.runs(recipe(budget.epochs, weight_decay), experiments.seeds(seed, SEEDS))
    return [measured_run(run, budget) for run in trained]


def per_seed(runs_: list[dict], model: str, path: tuple[str, ...]) -> np.ndarray:
    """(seeds, layers) array of one measured quantity, e.g. ``path=("profile", "relative", "half")``."""
    rows = []
    for run in runs_:
        value = run[model]
        for key in path:
            value = value[key]
        rows.append(value)
    return np.array(rows, dtype=float)
