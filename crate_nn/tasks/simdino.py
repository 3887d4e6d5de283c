"""SimDINO's objective (Wu et al., "Simplifying DINO via Coding Rate Regularization", ICML 2025): DINO without the
prototype layer, the centring and the sharpening — the student aligns its features with the teacher's, and a
coding-rate term keeps the features from collapsing.

Features z are the head's ℓ2-normalised bottleneck outputs (the DINO MLP without its last layer), p-dimensional.
For G global and V = G + N student views of a batch of m images:

    alignment   C = mean over the pairs (g, v ≠ g) and the images of cos(z_t,g , z_s,v)     teacher: no gradient
    rate        R_ε(W) = ½ logdet(I_p + α WᵀW),  α = p/(M ε²)                            eq. (8) of the CRATE paper,
                for the features W (M, p) of one view over the M images of the micro-batch of every process
    expansion   E = γ · mean over the G global views of R_ε(W_g),  γ = (p + M)/(p M)
                W_g: the student's global view g, or (``expansion_views="average"``) its mean with the teacher's
    loss        −c·C − E                                                                  c: ``alignment_coeff``

This is the public code's loss (RobinWu218/SimDINO, ``simdino/main_dino.py``, ``MCRLoss`` with its defaults
``expa_type=1`` and the README's ``--coeff 1``), with three differences, all to make one formula hold whatever the
hardware:

* ε is the CRATE paper's (α = p/(Mε²)); the public ``--eps`` is ε² (its α is p/(M·eps)): ``--eps 0.05`` is
  ε = √0.05 ≈ 0.224.
* The rate is computed in float64 from the covariance: I + αWᵀW has every eigenvalue ≥ 1, so its Cholesky factor
  exists and is well conditioned for any finite W — rank-deficient batches (m < p, duplicated images) included —
  whereas the public code factors it in the autocast dtype (NaNs reported in bf16/fp16: SimDINO issues #20, #43).
  Non-finite features give a NaN loss (the engine's stop), never an exception.
* The covariance is always the sum over processes (a differentiable all-reduce), and M counts the images of all
  processes: two processes with m images each give the loss and the gradients of one process with 2m. The public
  code's default (``--reduce_cov 0``) scales the local covariance of m images by α = p/(N m eps) as if it held N m
  (SimDINO issues #29, #48). With gradient accumulation the covariance is the micro-batch's (over processes), as
  batch statistics are.

The collapse monitors are the rate R_ε of the teacher's features on held-out images and their effective rank
(`effective_rank`): complete collapse (every feature equal) gives rank 1.

`SimDINOLoss` is the objective as one module, with the interface of DINO's (`crate_nn.tasks.dino_loss.DINOLoss`:
``forward(student, teacher, epoch)``, ``update()``, ``monitors``, ``collapse``); it holds no state between steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..engine.config import Section, option
from ..engine.distributed import Context, all_reduce_sum_differentiable

EXPANSION_VIEWS = ("average", "student")

COLLAPSE_RANK = 2.0
"""Collapse monitor: teacher features of effective rank below this lie on about one line (every image coded alike:
the collapse the expansion term exists to prevent); fixed from that definition, not from any run."""


def images(features: torch.Tensor, ctx: Context | None) -> int:
    """M, the images a covariance of ``features`` (…, m, p) sums over: m in every process."""
    return features.shape[-2] * (ctx.world_size if ctx is not None else 1)


def coding_rate(features: torch.Tensor, eps: float, ctx: Context | None = None) -> torch.Tensor:
    """R_ε of eq. (8) for the rows of ``features`` (…, m, p) gathered over every process: ½ logdet(I + α WᵀW),
    α = p/(M ε²), M = m × processes; float64, shape (…), differentiable (the covariance is summed over processes
    by a differentiable all-reduce, so its gradient is the one-process gradient of the whole micro-batch)."""
    if features.ndim < 2:
        raise ValueError(f"features: expected (…, m, p), got shape {tuple(features.shape)}")
    if not eps > 0:
        raise ValueError(f"eps: expected ε > 0, got {eps}")
    w = features.to(torch.float64)
    dim = w.shape[-1]
    covariance = w.transpose(-2, -1) @ w
    if ctx is not None:
        covariance = all_reduce_sum_differentiable(covariance, ctx)
    alpha = dim / (images(w, ctx) * eps**2)
    eye = torch.eye(dim, dtype=torch.float64, device=w.device)
    factor, _ = torch.linalg.cholesky_ex(eye + alpha * covariance)  # never raises; NaN in, NaN out
    return factor.diagonal(dim1=-2, dim2=-1).log().sum(-1)  # ½ logdet = Σ log diag(L)


def effective_rank(features: torch.Tensor) -> torch.Tensor:
    """exp of the entropy of the normalised singular values of ``features`` (m, p) (Roy & Vetterli 2007), float64:
    1 for features on one line, p for isotropic ones."""
    s = torch.linalg.svdvals(features.to(torch.float64))
    total = s.sum()
    if total == 0:
        return total.new_tensor(0.0)
    q = s / total
    return torch.exp(-(q * q.clamp_min(1e-300).log()).sum())


class SimDINOTerms(NamedTuple):
    """The objective of one batch and its parts (scalars)."""

    loss: torch.Tensor  # −c·alignment − expansion
    alignment: torch.Tensor  # mean cosine of the (teacher g, student v ≠ g) pairs
    expansion: torch.Tensor  # γ · mean over the global views of R_ε

    def logged(self) -> dict[str, torch.Tensor]:
        """The parts logged beside the loss (``train_<name>``), without gradient."""
        return {"alignment": self.alignment.detach(), "expansion": self.expansion.detach()}


def simdino_loss(student: torch.Tensor, teacher: torch.Tensor, eps: float, alignment_coeff: float = 1.0,
                 expansion_views: str = "average", ctx: Context | None = None) -> SimDINOTerms:
    """SimDINO's objective (module docstring) of student features (V, m, p) and teacher features (G, m, p), G ≤ V, the
    student's first G views being the teacher's; the teacher carries no gradient. Under torchrun every process must
    call it (the covariances are summed over processes). Computed in float32 at least (the rate in float64), and
    the loss returned so: bf16/fp16 features under autocast give a float32 loss.
    """
    groups, views = teacher.shape[0], student.shape[0]
    if teacher.ndim != 3 or student.ndim != 3 or student.shape[1:] != teacher.shape[1:] or groups > views:
        raise ValueError(f"student, teacher: expected (V, m, p) and (G, m, p) with G ≤ V, got "
                         f"{tuple(student.shape)} and {tuple(teacher.shape)}")
    if expansion_views not in EXPANSION_VIEWS:
        raise ValueError(f"expansion_views: expected one of {EXPANSION_VIEWS}, got {expansion_views!r}")
    dtype = torch.promote_types(student.dtype, torch.float32)  # bf16/fp16 features: cosines in float32 at least
    student, teacher = student.to(dtype), teacher.detach().to(dtype)
    cosine = torch.einsum("gmp,vmp->gvm", F.normalize(teacher, dim=-1), F.normalize(student, dim=-1))
    pairs = ~torch.eye(groups, views, dtype=torch.bool, device=student.device)
    if not pairs.any():
        raise ValueError("student, teacher: no pair of different views (one global crop and no local crop)")
    alignment = cosine[pairs].mean()
    coded = student[:groups] if expansion_views == "student" else (student[:groups] + teacher) / 2
    count, dim = images(coded, ctx), coded.shape[2]
    expansion = (dim + count) / (dim * count) * coding_rate(coded, eps, ctx).mean()
    return SimDINOTerms((-alignment_coeff * alignment - expansion).to(dtype), alignment, expansion)


def feature_collapse(monitors: dict[str, float]) -> str | None:
    """The collapse the SimDINO monitors show, as text, or None: the teacher's features of effective rank below
    `COLLAPSE_RANK` on held-out images."""
    rank = monitors["teacher_rank"]
    if rank >= COLLAPSE_RANK:
        return None
    return f"features on about one line: effective rank {rank:.3f}, coding rate {monitors['teacher_rate']:.3g}"



class SimDINOLoss(nn.Module):
    """SimDINO's objective (module docstring) as the DINO task's objective module.

    ``forward(student (V, m, p), teacher (G, m, p), epoch)`` is `simdino_loss` of a micro-batch (``epoch`` is
    unused: nothing is scheduled), its covariances summed over the processes of ``ctx`` (every process calls it);
    ``update()`` does nothing (no state between steps); ``monitors`` and ``collapse`` read the teacher's features.
    """

    def __init__(self, rate_eps: float, *, alignment_coeff: float = 1.0, expansion_views: str = "average",
                 ctx: Context | None = None) -> None:
        super().__init__()
        if not rate_eps > 0:
            raise ValueError(f"rate_eps: expected ε > 0, got {rate_eps}")
        if not alignment_coeff >= 0:
            raise ValueError(f"alignment_coeff: expected a non-negative weight, got {alignment_coeff}")
        if expansion_views not in EXPANSION_VIEWS:
            raise ValueError(f"expansion_views: expected one of {EXPANSION_VIEWS}, got {expansion_views!r}")
        self.eps, self.alignment_coeff, self.expansion_views, self.ctx = rate_eps, alignment_coeff, expansion_views, ctx

    def forward(self, student: torch.Tensor, teacher: torch.Tensor, epoch: int) -> SimDINOTerms:
        return simdino_loss(student, teacher, self.eps, self.alignment_coeff, self.expansion_views, self.ctx)

    def update(self) -> None:
        """Nothing to do after an optimizer step (DINO's centre moves there)."""

    @torch.no_grad()
    def monitors(self, student: torch.Tensor, teacher: torch.Tensor, epoch: int) -> dict[str, float]:
        """The collapse monitors of student and teacher features (m, p) of the same images: the coding rate R_ε
        ``teacher_rate`` and the effective rank ``teacher_rank`` of the teacher's (this process's images), and the
        mean cosine ``teacher_student_cos`` of each image's two features."""
        return {"teacher_rate": coding_rate(teacher, self.eps).item(), "teacher_rank": effective_rank(teacher).item(),
                "teacher_student_cos": F.cosine_similarity(teacher, student, dim=-1).mean().item()}

    def collapse(self, monitors: dict[str, float]) -> str | None:
        """`feature_collapse` of ``monitors``."""
        return feature_collapse(monitors)


@dataclass
class SimDINOLossSection(Section):
    """SimDINO's objective (`SimDINOLoss`, which this section builds): ε of the coding rate, the alignment's weight,
    the expanded views."""

    component = SimDINOLoss

    rate_eps: float = option(math.sqrt(0.5), "SimDINO: ε of the coding rate R_ε (α = p/(Mε²); SimDINO's --eps is "
                             "ε²: its default 0.5 is √0.5)", above=0.0)
    alignment_coeff: float = option(1.0, "SimDINO: c, the weight of the cosine alignment (SimDINO's --coeff)",
                                    minimum=0.0)
    expansion_views: str = option("average", "SimDINO: features whose coding rate is expanded: average (student "
                                  "and teacher global views averaged, SimDINO's expa_type 1) or student "
                                  "(expa_type 0)", choices=EXPANSION_VIEWS)
