"""The collapse monitors of a self-distillation model on held-out images: what DINO's and SimDINO's objectives say
about their student and teacher when both see the same un-augmented image.

`CollapseMonitors` takes the images (the first ``samples`` of a data set, as the evaluation transform prepares them)
and, when called, a model and an objective, never a training task, so a training run and the audit of its
checkpoint measure alike:

    monitors = CollapseMonitors(eval_set, transform, device, samples=1024, precision="fp32")
    monitors(model, objective, epoch)
    # DINO's objective:    {"teacher_entropy", "teacher_mean_entropy", "teacher_student_kl"}
    # SimDINO's objective: {"teacher_rate", "teacher_rank", "teacher_student_cos"}

The model is a student/teacher pair whose ``model(images)`` returns (student outputs, teacher outputs) of the
images (`crate_nn.models.dino_head.DINO`); the objective has ``monitors(student, teacher, epoch)``
(`crate_nn.tasks.dino_loss.DINOLoss`: its centre and the teacher temperature of ``epoch``;
`crate_nn.tasks.simdino.SimDINOLoss`). Every process computes the monitors of the same images alone (no
communication).
"""
from __future__ import annotations

from typing import Protocol

import torch
from torch import nn
from torch.utils.data import Dataset

from ..data.transforms import DeviceTransform
from ..engine.precision import autocast
from ..models.registry import unwrap_model
from .features import first_images


class Objective(Protocol):
    """What `CollapseMonitors` reads from an objective."""

    def monitors(self, student: torch.Tensor, teacher: torch.Tensor, epoch: int) -> dict[str, float]: ...


class CollapseMonitors:
    """The collapse monitors of a model's student and teacher on the first ``samples`` images of ``dataset``
    (un-augmented: ``transform`` is the evaluation transform), computed on ``device`` under the autocast of
    ``precision`` (an engine precision name or a dtype; None: none), the outputs read in float32."""

    def __init__(self, dataset: Dataset, transform: DeviceTransform, device: torch.device | str, *,
                 samples: int = 1024, precision: str | torch.dtype | None = None) -> None:
        self.images = first_images(dataset, samples, "to monitor")
        self.transform, self.device, self.precision = transform, torch.device(device), precision

    @torch.no_grad()
    def __call__(self, model: nn.Module, objective: Objective, epoch: int = 0) -> dict[str, float]:
        """``objective.monitors`` of ``model``'s (student, teacher) outputs of the images at ``epoch`` (a DDP or
        compiled wrapper is unwrapped; the model's mode is left as it is)."""
        model = unwrap_model(model)
        images = self.transform(self.images.to(self.device))
        with autocast(self.device, self.precision):
            student, teacher = model(images)
        return objective.monitors(student.float(), teacher.float(), epoch)
