"""The layer-wise white-box measurements a training run saves (Sec. 4.2: R^c and sparsity per layer, both
protocols; `crate_nn.analysis.snapshots.record_layers`), as an evaluator that takes a model and held-out images,
never a task, shared by the classification and DINO tasks:

    layers = LayerMeasurements(eval_set, transform, device, samples=256)
    layers(model, epoch, run_dir / "measurements")    # writes epoch_XXXX.json and layers_<protocol>.png

Which epochs it runs after is the config's (``measure_epochs``, named ``layers`` in a config's ``evals``,
`crate_nn.evaluation.cadence`).
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from torch.utils.data import Dataset

from ..data.transforms import DeviceTransform
from .features import first_images


class LayerMeasurements:
    """`record_layers` of a model on the first ``samples`` images of ``dataset``, prepared by ``transform`` (the
    evaluation transform) on ``device``."""

    def __init__(self, dataset: Dataset, transform: DeviceTransform, device: torch.device | str, *,
                 samples: int = 256) -> None:
        self.images = first_images(dataset, samples, "to measure the layers on")
        self.transform, self.device = transform, torch.device(device)

    def __call__(self, model: nn.Module, epoch: int, directory: Path) -> dict:
        """Measure ``model`` (its layers, after ``epoch`` epochs) and save the record in ``directory``."""
        from ..analysis.snapshots import record_layers

        return record_layers(model, self.transform(self.images.to(self.device)), directory, epoch)
