"""Frozen-feature evaluation: the weighted k-NN and the linear probe of a feature function, trained on one data set
(the memory: the training split without augmentation) and scored on another.

The feature function is a model's pooled output tokens (`model_features`) or the raw pixels (`raw_pixels`, the
control that features worth learning must beat). `FrozenEvaluator` takes a feature function and data sets, never a
training task, so a training run, the audit and a command line on a checkpoint evaluate the same way:

    evaluator = FrozenEvaluator(memory, transform, ctx, probe=True, pixel_control=True)
    metrics = evaluator(model_features(model), test_set, "test")
    # {"test_knn_top1", "test_knn_k", "test_knn_top1_k10", …, "test_probe_top1", "test_probe_C",
    #  "test_raw_pixels_knn_top1", …, "test_raw_pixels_probe_C"}

Every process of a distributed run calls it (a collective call): each extracts its shard of the features
(`extract_features`), the shards are gathered, and the main process alone fits the k-NN (`knn_evaluate`) and the
probe (`run_linear_probe`) on its device; the other processes return no metrics. The result does not depend on the
number of processes where the feature function computes each sample alone by the same operations.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import Dataset

from ..engine.distributed import Context
from ..engine.precision import autocast
from ..models.registry import unwrap_model
from .features import extract_features, pooled_features, raw_pixels
from .knn import KNN_KS, KNN_TEMPERATURE, KNNResult, knn_evaluate
from .linear_probe import PROBE_SOLVERS, ProbeResult, run_linear_probe

PIXEL_CONTROL = "raw_pixels"
"""The raw-pixel control's part of a metric name: ``<prefix>_raw_pixels_knn_top1``."""


def model_features(model: nn.Module, pool: str | None = None,
                   precision: str | torch.dtype | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """The feature function of ``model`` (a DDP or compiled wrapper is unwrapped): its output tokens pooled by
    ``pool`` (``"cls"`` or ``"mean"``; None: the model's own ``config.pool``), computed under the autocast of
    ``precision`` (an engine precision name or a dtype; None: none) on the images' device, returned in float32 or
    wider. The model's mode (train/eval) is left as it is."""
    model = unwrap_model(model)
    pooled = pooled_features(model, model.config.pool if pool is None else pool)

    def features(images: torch.Tensor) -> torch.Tensor:
        with autocast(images.device, precision):
            return pooled(images).float()

    return features


@dataclass(frozen=True)
class FrozenResult:
    """The k-NN and the probe of one feature function (None: not run)."""

    knn: KNNResult | None
    probe: ProbeResult | None

    def metrics(self, prefix: str) -> dict[str, float]:
        """``<prefix>_knn_top1`` (at the chosen k), ``<prefix>_knn_k``, ``<prefix>_knn_top1_k{k}`` for every k,
        ``<prefix>_probe_top1`` and ``<prefix>_probe_C`` (those of the evaluations run)."""
        out: dict[str, float] = {}
        if self.knn is not None:
            out.update({f"{prefix}_knn_top1": self.knn.top1, f"{prefix}_knn_k": self.knn.k,
                        **{f"{prefix}_knn_top1_k{k}": v for k, v in self.knn.accuracy.items()}})
        if self.probe is not None:
            out.update({f"{prefix}_probe_top1": self.probe.accuracy, f"{prefix}_probe_C": self.probe.C})
        return out


@dataclass(frozen=True)
class FrozenEvaluator:
    """Weighted k-NN and/or linear probe of frozen features, trained on ``memory`` (module docstring).

    Args:
        memory: the training samples (input, label, index), without augmentation: the k-NN's neighbours and the
            probe's training set.
        transform: applied to each batch on the device (the evaluation `DeviceTransform`).
        device: a device, or this process's `Context` (every process of a distributed run must call).
        knn, probe: which evaluations run by default (each call may choose otherwise).
        pixel_control: also evaluate the raw pixels (`raw_pixels`), reported as ``<prefix>_raw_pixels_…``.
        knn_ks, knn_temperature, knn_select_samples: `knn_evaluate`'s ``ks``, ``temperature`` and
            ``select_samples`` (drawn with ``seed``).
        probe_solver: `run_linear_probe`'s solver (one of `PROBE_SOLVERS`), seeded with ``seed``.
        batch_size, num_workers: of the feature extraction, per process.
    """

    memory: Dataset
    transform: Callable[[torch.Tensor], torch.Tensor]
    device: torch.device | Context
    knn: bool = True
    probe: bool = False
    pixel_control: bool = False
    knn_ks: Sequence[int] = KNN_KS
    knn_temperature: float = KNN_TEMPERATURE
    knn_select_samples: int | None = None
    probe_solver: str = "sklearn"
    seed: int = 0
    batch_size: int = 256
    num_workers: int = 0

    def __post_init__(self) -> None:
        if self.probe_solver not in PROBE_SOLVERS:
            raise ValueError(f"probe_solver: expected one of {', '.join(PROBE_SOLVERS)}, got {self.probe_solver!r}")
        if not self.knn_ks or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in self.knn_ks):
            raise ValueError(f"knn_ks: expected positive integers, got {self.knn_ks!r}")
        if not self.knn_temperature > 0:
            raise ValueError(f"knn_temperature: expected a positive value, got {self.knn_temperature!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size: expected a positive integer, got {self.batch_size!r}")

    @property
    def ctx(self) -> Context:
        """This process's context (one process on ``device`` when a device was given)."""
        return self.device if isinstance(self.device, Context) else Context(0, 1, 0, torch.device(self.device))

    def features(self, features: Callable[[torch.Tensor], torch.Tensor], dataset: Dataset):
        """(features (N, d) float64, labels (N,) int64) of ``dataset``, in dataset order, in every process."""
        return extract_features(features, dataset, self.transform, self.ctx, batch_size=self.batch_size,
                                num_workers=self.num_workers)

    def measure(self, features: Callable[[torch.Tensor], torch.Tensor], dataset: Dataset, *,
                knn: bool | None = None, probe: bool | None = None) -> FrozenResult | None:
        """The k-NN and/or the probe (None: the evaluator's defaults) of ``features`` trained on the memory and
        scored on ``dataset``; None in every process but the main one, and when neither runs (nothing extracted)."""
        knn = self.knn if knn is None else knn
        probe = self.probe if probe is None else probe
        if not (knn or probe):
            return None
        train_x, train_y = self.features(features, self.memory)
        test_x, test_y = self.features(features, dataset)
        ctx = self.ctx
        if not ctx.is_main:
            return None
        knn_result = probe_result = None
        if knn:
            knn_result = knn_evaluate(train_x, train_y, test_x, test_y, self.knn_ks, self.knn_temperature,
                                      select_samples=self.knn_select_samples, seed=self.seed, device=ctx.device)
        if probe:
            probe_result = run_linear_probe(self.probe_solver, train_x, train_y, test_x, test_y, seed=self.seed,
                                            device=ctx.device)
        return FrozenResult(knn_result, probe_result)

    def __call__(self, features: Callable[[torch.Tensor], torch.Tensor], dataset: Dataset, prefix: str, *,
                 knn: bool | None = None, probe: bool | None = None,
                 pixel_control: bool | None = None) -> dict[str, float]:
        """The metrics of ``features`` on ``dataset`` named ``<prefix>_…`` (`FrozenResult.metrics`) and, with
        ``pixel_control`` (None: the evaluator's), those of the raw pixels named ``<prefix>_raw_pixels_…``; empty
        in every process but the main one. ``knn``, ``probe``: as in `measure`."""
        pixel_control = self.pixel_control if pixel_control is None else pixel_control
        metrics: dict[str, float] = {}
        runs = [(features, prefix)] + ([(raw_pixels, f"{prefix}_{PIXEL_CONTROL}")] if pixel_control else [])
        for function, name in runs:
            result = self.measure(function, dataset, knn=knn, probe=probe)
            if result is not None:
                metrics.update(result.metrics(name))
        return metrics
