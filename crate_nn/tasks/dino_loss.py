"""DINO's objective (Caron et al. 2021; Sec. 4.1.3, eqs. 76–77 of the CRATE paper): the cross-entropy between the
teacher's centred, sharpened softmax and the student's, with the centre that keeps the teacher from collapsing.

For G global and V = G + N student views of a batch of m images, head outputs s_v (student) and t_g (teacher), K
prototypes:

    teacher     q_g = softmax((t_g − c) / τ_t)                          no gradient (stop-grad)
    student     log p_v = log_softmax(s_v / τ_s)                        eq. (77)
    loss        mean over the pairs (g, v ≠ g) and the images of H(q_g, p_v) = −Σ_k q_g,k log p_v,k    eq. (76)
    centre      c ← m c + (1 − m) · mean of the teacher's outputs t over the global batch: every micro-batch of
                the step, summed over the processes (``update``, after the optimizer step)
    τ_t         DINO's per-epoch linear warm-up from ``warmup_teacher_temp`` over ``warmup_teacher_temp_epochs``
                epochs (np.linspace), then ``teacher_temp`` (`teacher_temperature`)

`DINOLoss` is the objective as one module, as in DINO's and DINOv2's code: it holds the centre (a buffer: its
``state_dict`` is the objective's state a resumed run restores), the teacher sums of the current step and their
all-reduce, the temperatures and the collapse monitors. `crate_nn.tasks.simdino.SimDINOLoss` is the other objective
of the DINO task, with the same interface (``forward(student, teacher, epoch)``, ``update()``, ``monitors``,
``collapse``).

The collapse monitors: ``teacher_entropy`` (mean entropy of q), ``teacher_mean_entropy`` (entropy of the batch-mean
q) and the KL between teacher and student (mean KL(q_g ‖ p_v) over the loss's pairs in training, over the same view
of un-augmented images in `DINOLoss.monitors`). Collapse to one prototype drives both entropies to 0, collapse to the
uniform output drives both to log K; both drive the KL to 0 (`collapse` names the mode).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..engine.config import Section, option
from ..engine.distributed import Context, all_reduce_sum

COLLAPSE_KL = 1e-3
"""Collapse monitor: a teacher–student KL (nats, on held-out images) below this leaves the student almost nothing to
learn (DINO, Caron et al. 2021, Sec. 5.3: both collapse modes drive the KL to 0; the digits preset reaches 1e-4)."""
COLLAPSE_ENTROPY = 0.01
"""Collapse monitor: the teacher's output entropy within this fraction of log K (uniform output) or of 0 (one
prototype dominates) names the mode."""


def collapse(monitors: dict[str, float], prototypes: int) -> str | None:
    """The collapse the monitors show (`DINOLoss.monitors`), as text, or None: the KL below `COLLAPSE_KL` with the
    teacher's entropy within `COLLAPSE_ENTROPY` of log K (uniform) or of 0 (one-hot). Thresholds fixed from DINO's
    description of the two modes, not from any run's outcome."""
    kl, entropy, top = monitors["teacher_student_kl"], monitors["teacher_entropy"], math.log(prototypes)
    if kl >= COLLAPSE_KL:
        return None
    if entropy >= (1 - COLLAPSE_ENTROPY) * top:
        return f"uniform output: teacher entropy {entropy:.4f} of log K = {top:.4f}, teacher–student KL {kl:.1e}"
    if entropy <= COLLAPSE_ENTROPY * top:
        return f"one prototype dominates: teacher entropy {entropy:.4f}, teacher–student KL {kl:.1e}"
    return None


def teacher_temperature(epoch: int, start: float, end: float, warmup_epochs: int) -> float:
    """τ_t of ``epoch``: DINO's ``np.linspace(start, end, warmup_epochs)[epoch]`` during the warm-up, then ``end``."""
    if epoch >= warmup_epochs:
        return end
    if warmup_epochs == 1:
        return start
    return start + epoch * ((end - start) / (warmup_epochs - 1))


class DINOTerms(NamedTuple):
    """The loss (76) and the collapse monitors of one batch (scalars)."""

    loss: torch.Tensor
    teacher_entropy: torch.Tensor  # mean over teacher views and images of H(q)
    teacher_mean_entropy: torch.Tensor  # H of q averaged over teacher views and images
    kl: torch.Tensor  # mean over the pairs and images of KL(q_g ‖ p_v) = H(q_g, p_v) − H(q_g)

    def logged(self) -> dict[str, torch.Tensor]:
        """The parts logged beside the loss (``train_<name>``), without gradient."""
        return {"teacher_entropy": self.teacher_entropy.detach(),
                "teacher_mean_entropy": self.teacher_mean_entropy.detach(), "kl": self.kl.detach()}


def dino_loss(student: torch.Tensor, teacher: torch.Tensor, center: torch.Tensor, student_temp: float,
              teacher_temp: float, same_view: bool = False) -> DINOTerms:
    """Eqs. (76)–(77) with DINO's centring: student outputs (V, B, K), teacher outputs (G, B, K), centre (K,).

    The pairs are (g, v) with v ≠ g (the student's first G views are the teacher's G views); ``same_view`` pairs
    each teacher view with the student's same view instead (the monitors on un-augmented images, V = G). The
    teacher's probabilities carry no gradient.
    """
    groups, views = teacher.shape[0], student.shape[0]
    if teacher.ndim != 3 or student.ndim != 3 or student.shape[1:] != teacher.shape[1:] or groups > views:
        raise ValueError(f"student, teacher: expected (V, B, K) and (G, B, K) with G ≤ V, got "
                         f"{tuple(student.shape)} and {tuple(teacher.shape)}")
    log_q = F.log_softmax((teacher - center).detach() / teacher_temp, dim=-1)
    q = log_q.exp()
    log_p = F.log_softmax(student / student_temp, dim=-1)
    cross = -torch.einsum("gbk,vbk->gvb", q, log_p)  # H(q_g, p_v) for every pair and image, (G, V, B)
    eye = torch.eye(groups, views, dtype=torch.bool, device=student.device)
    pairs = eye if same_view else ~eye
    if not pairs.any():
        raise ValueError("student, teacher: no pair of different views (one global crop and no local crop)")
    entropy = -(q * log_q).sum(-1)  # (G, B)
    mean_q = q.mean(dim=(0, 1))
    kl = (cross - entropy[:, None, :])[pairs]
    return DINOTerms(cross[pairs].mean(), entropy.mean(), -(mean_q * mean_q.clamp_min(1e-30).log()).sum(),
                            kl.mean())


class DINOLoss(nn.Module):
    """DINO's objective of K prototypes with its centre (module docstring).

    ``forward(student (V, B, K), teacher (G, B, K), epoch)`` is the loss (76) of a micro-batch at τ_t of ``epoch``
    (`DINOTerms`) and adds the teacher's outputs to the step's sums; ``update()``, after the optimizer step,
    sums them over the processes of ``ctx`` (one all-reduce: every process calls it) and moves the centre. The
    centre ``center`` (K,) is a float32 buffer, the sums float64 (not saved: ``update`` empties them, and a
    checkpoint is written between steps).
    """

    def __init__(self, prototypes: int, *, student_temp: float = 0.1, teacher_temp: float = 0.04,
                 warmup_teacher_temp: float | None = None, warmup_teacher_temp_epochs: int = 0,
                 center_momentum: float = 0.9, ctx: Context | None = None) -> None:
        super().__init__()
        if not isinstance(prototypes, int) or prototypes < 1:
            raise ValueError(f"prototypes: expected a positive integer, got {prototypes!r}")
        for name, value in (("student_temp", student_temp), ("teacher_temp", teacher_temp),
                            ("warmup_teacher_temp", teacher_temp if warmup_teacher_temp is None
                             else warmup_teacher_temp)):
            if not value > 0:
                raise ValueError(f"{name}: expected a temperature > 0, got {value}")
        if not 0.0 <= center_momentum <= 1.0:
            raise ValueError(f"center_momentum: expected a value in [0, 1], got {center_momentum}")
        self.prototypes, self.student_temp, self.center_momentum, self.ctx = (prototypes, student_temp,
                                                                             center_momentum, ctx)
        self.temperatures = (teacher_temp if warmup_teacher_temp is None else warmup_teacher_temp, teacher_temp,
                             warmup_teacher_temp_epochs)
        self.register_buffer("center", torch.zeros(prototypes))
        self.register_buffer("teacher_sum", torch.zeros(prototypes, dtype=torch.float64), persistent=False)
        self.teacher_count = 0

    def teacher_temp(self, epoch: int) -> float:
        """τ_t of ``epoch`` (`teacher_temperature`)."""
        return teacher_temperature(epoch, *self.temperatures)

    def forward(self, student: torch.Tensor, teacher: torch.Tensor, epoch: int) -> DINOTerms:
        out = dino_loss(student, teacher, self.center, self.student_temp, self.teacher_temp(epoch))
        self.teacher_sum += teacher.detach().sum(dim=(0, 1)).double()
        self.teacher_count += teacher.shape[0] * teacher.shape[1]
        return out

    @torch.no_grad()
    def update(self) -> None:
        """After the optimizer step: c ← m c + (1 − m) · mean of the teacher's outputs of the step over every
        process (one all-reduce of the sums and the count), then empty the sums."""
        total = torch.cat([self.teacher_sum, self.teacher_sum.new_tensor([self.teacher_count])])
        if self.ctx is not None:
            all_reduce_sum(total, self.ctx)
        batch_mean = (total[:-1] / total[-1]).float()
        m = self.center_momentum
        self.center.mul_(m).add_(batch_mean.to(self.center.dtype), alpha=1.0 - m)
        self.teacher_sum.zero_()
        self.teacher_count = 0

    @torch.no_grad()
    def monitors(self, student: torch.Tensor, teacher: torch.Tensor, epoch: int) -> dict[str, float]:
        """The collapse monitors of student and teacher outputs (B, K) of the same images (un-augmented held-out
        images: each teacher output paired with the student's of its image) at τ_t of ``epoch``; the sums are left
        alone."""
        out = dino_loss(student[None], teacher[None], self.center, self.student_temp, self.teacher_temp(epoch),
                        same_view=True)
        return {"teacher_entropy": out.teacher_entropy.item(), "teacher_mean_entropy": out.teacher_mean_entropy.item(),
                "teacher_student_kl": out.kl.item()}

    def collapse(self, monitors: dict[str, float]) -> str | None:
        """`collapse` of ``monitors`` for this loss's K."""
        return collapse(monitors, self.prototypes)


@dataclass
class DINOLossSection(Section):
    """DINO's objective (`DINOLoss`, which this section builds with the head's number of prototypes): the
    temperatures and the centre."""

    component = DINOLoss

    student_temp: float = option(0.1, "τ_s, the student's softmax temperature", above=0.0)
    teacher_temp: float = option(0.04, "τ_t after the warm-up", above=0.0)
    warmup_teacher_temp: float = option(0.04, "τ_t at epoch 0", above=0.0)
    warmup_teacher_temp_epochs: int = option(0, "epochs of τ_t's linear warm-up", minimum=0, span="epochs")
    center_momentum: float = option(0.9, "m of the centre's EMA c ← m c + (1 − m) batch mean", minimum=0.0,
                                    maximum=1.0)
