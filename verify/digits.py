"""Trained CRATEs for the layer-wise claims: the ``digits`` preset of crate_nn, several seeds, cached.

Each run trains the preset from a saved random initialisation (its own torch seed; the preset's ``seed`` sets the
data order) and is measured once, on the 360 held-out test digits, for both the trained model and its
initialisation. Checkpoints and measurements are cached in ``verify.context.cache_dir()/verify`` under a key of
the run's configuration, so a warm audit reads JSON; a cold one trains (≈ 0.43 s per epoch on one core).

Quick mode trains 8 of the preset's 30 epochs (warm-up scaled alike; test accuracy 96.7–97.8%, and every verdict
the same as at 6 or 10 epochs) and measures the scale-free protocol on the first 40 test images with 2 isotropic
draws per image (the 12-layer random CRATEs on 16); ``--full`` trains the preset's 30 epochs and measures all 360
images with 8 draws.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

import crate_nn
from crate_nn.analysis.protocol import layer_profile
from crate_nn.data import DeviceTransform, build_dataset
from crate_nn.engine import train
from crate_nn.tasks import get_preset
from crate_nn.tasks.classification import ClassificationConfig
from verify.context import Context, cache_dir

SEEDS = 5
"""Independent runs (initialisation and data order) per configuration."""

MEASUREMENT_VERSION = 3
"""Bumped whenever the measurement below changes, so cached numbers are never stale."""


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
    epochs = base.epochs if epochs is None else epochs
    return dataclasses.replace(base, epochs=epochs, warmup_epochs=base.warmup_epochs * epochs / base.epochs,
                               weight_decay=base.weight_decay if weight_decay is None else weight_decay,
                               eval_every=epochs)


def _key(config: ClassificationConfig, torch_seed: int) -> str:
    text = json.dumps(dataclasses.asdict(config), sort_keys=True, default=str) + str(torch_seed)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def train_cached(config: ClassificationConfig, torch_seed: int) -> Path:
    """Folder holding ``init.pt``, ``trained.pt`` and ``metrics.json`` of ``config`` from the initialisation drawn
    with ``torch_seed`` (trained when absent; ``trained.pt`` is renamed into place last, so its presence marks a
    complete entry)."""
    folder = cache_dir() / "verify" / f"digits-{_key(config, torch_seed)}"
    if (folder / "trained.pt").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(torch_seed)
    init = crate_nn.create_model(config.model, **{**config.model_args, "image_size": config.image_size,
                                                  "num_classes": 10, "in_channels": 1})
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        crate_nn.save(Path(tmp) / "init.pt", init)
        run = dataclasses.replace(config, output_dir=str(Path(tmp) / "run"), init_from=str(Path(tmp) / "init.pt"))
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = train(run)
        (folder / "metrics.json").write_text(json.dumps(result.metrics))
        os.replace(Path(tmp) / "init.pt", folder / "init.pt")
        shutil.copyfile(result.checkpoint, Path(tmp) / "trained.pt")
        os.replace(Path(tmp) / "trained.pt", folder / "trained.pt")
    return folder


@functools.lru_cache(maxsize=2)
def test_digits(image_size: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """The 360 held-out digits, normalised as in training (resized to ``image_size``), and their labels."""
    config = recipe()
    test = build_dataset("digits", "test", data_dir=None, train=False, image_size=config.image_size,
                         load_size=config.image_size, eval_resize=config.image_size)
    images = torch.stack([test[i][0] for i in range(len(test))])
    labels = torch.as_tensor([int(test[i][1]) for i in range(len(test))])
    return DeviceTransform(image_size, config.mean, config.std, train=False)(images), labels


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
        out["profile"] = {name: {station: profile.means(name, station) for station in by_station}
                          for name, by_station in profile.stats.items()}
        out["u_norm"] = [float(layer.mssa.qkv.weight.norm()) for layer in model.encoder.layers]
        out["coherence"] = off_block_coherence(model)
        out["effective_rank"] = [float(effective_rank(t.output).mean()) for t in crate_nn.trace(model, subset)]
        out["projector_sum_deviation"] = projector_sum_deviation(model, subset)
    return out


def measured_run(config: ClassificationConfig, torch_seed: int, budget: Budget) -> dict:
    """``{"init": …, "trained": …, "metrics": …}`` for one run, from the cache when present."""
    folder = train_cached(config, torch_seed)
    path = folder / f"measurements-v{MEASUREMENT_VERSION}-{budget.profile_images}-{budget.draws}.json"
    if not path.exists():
        result = {name: measure_model(crate_nn.load(folder / f"{name}.pt"), budget, torch_seed)
                  for name in ("init", "trained")}
        result["metrics"] = json.loads((folder / "metrics.json").read_text())
        path.write_text(json.dumps(result))
    return json.loads(path.read_text())


def runs(ctx, weight_decay: float | None = None) -> list[dict]:
    """The measured runs of this mode and base seed (``SEEDS`` of them) at ``weight_decay`` (default: the preset's)."""
    return _runs(ctx.mode, ctx.seed, weight_decay)


@functools.cache
def _runs(mode: str, seed: int, weight_decay: float | None) -> list[dict]:
    budget = BUDGETS[mode]
    base = Context(mode, seed, "2.24-digits", ".")
    config = recipe(budget.epochs, weight_decay)
    return [measured_run(dataclasses.replace(config, seed=SEEDS * seed + i), base.torch_seed_for(f"2.24-digits-{i}"),
                         budget) for i in range(SEEDS)]


def per_seed(runs_: list[dict], model: str, path: tuple[str, ...]) -> np.ndarray:
    """(seeds, layers) array of one measured quantity, e.g. ``path=("profile", "relative", "half")``."""
    rows = []
    for run in runs_:
        value = run[model]
        for key in path:
            value = value[key]
        rows.append(value)
    return np.array(rows, dtype=float)
