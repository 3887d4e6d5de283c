"""CRATE-DINO's networks (Sec. 4.1.3, App. C.3): the projection heads and the student/teacher pair.

    z         = f(X)_[CLS]                                   the backbone's pooled output token, eq. (80), (B, d)
    paper     = W₃ ReLU(W₂ ReLU(W₁ z + b₁) + b₂) + b₃          eq. (75), W₁, W₂ ∈ R^{d×d}, W₃ ∈ R^{K×d} (K = d in (75))
    dino      = V̂ normalize(MLP(z)),  V̂ = g ⊙ V / ‖V‖_rows    the official DINO head (Caron et al. 2021): MLP
                d → h → … → h → b with GELU, ℓ2-normalised bottleneck, weight-normalised last layer of K prototypes
                (no bias; g fixed to 1 when ``norm_last_layer``)
    simdino   = normalize(MLP(z))                            SimDINO's head (Wu et al. 2025): the DINO head without
                its prototype layer; the b-dimensional unit features are what its coding-rate objective reads
    P(X; θ, τ) = softmax(head(f(X)) / τ)                     eq. (77)

`DINO` holds the student (backbone + head) and the teacher (the same architecture and initial weights, updated only
as an exponential moving average of the student, eq. 79, by the task; no gradients); the centre c of the teacher's
outputs is DINO's loss's (`crate_nn.tasks.dino_loss.DINOLoss`). It is a registered family (``"dino"``), so `crate_nn.load` rebuilds a DINO checkpoint with both networks; used as a
backbone it is the *teacher* (eq. 80: the features are read from f_t): `forward_features`, `forward_intermediates`
and `encoder` are the teacher backbone's, so `crate_nn.measure_layers`, `crate_nn.trace`, the k-NN and the linear
probe take a DINO model directly.
"""
from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .backbone import LayerStack
from .blocks import LayerTrace
from .classifier import CRATEClassifier, CRATEConfig
from .config import check_choice, check_number, check_positive_int
from .registry import register_family

PROJECTIONS = ("dino", "paper", "simdino")


@dataclass
class DINOConfig(CRATEConfig):
    """A CRATE backbone (every `CRATEConfig` field; ``num_classes`` is unused: the classification head is removed)
    and its projection head.

    Head:
        projection: ``"dino"`` — the official DINO head (default); ``"paper"`` — the simplified head (75);
            ``"simdino"`` — SimDINO's: the DINO head without its prototype layer (its output is the bottleneck).
        out_dim: K, the width of the softmax (DINO's prototypes; 65,536 in DINO). ``None``: d for the paper head,
            as in (75), and 65,536 for the DINO head. Unused by the SimDINO head.
        hidden_dim, bottleneck_dim, projection_layers: the DINO head's MLP d → hidden → … → bottleneck with
            ``projection_layers`` Linear layers (2,048, 256 and 3 in DINO).
        norm_last_layer: the DINO head's last layer has unit-norm rows (its gain g is frozen at 1), DINO's default.

    Backbone initialisation:
        token_init_std: the class token and the position embedding are drawn from N(0, σ²) truncated at ±2, as in
            DINO's ViT (σ = 0.02), instead of the classifier's N(0, 1) (the authors' CRATE); None keeps the latter.
            With σ = 1 the class token's output hardly depends on the image at initialisation (cosine ≈ 0.99
            between digits), which leaves the teacher nothing to distil.
    """

    projection: str = "dino"
    out_dim: int | None = None
    hidden_dim: int = 2048
    bottleneck_dim: int = 256
    projection_layers: int = 3
    norm_last_layer: bool = True
    token_init_std: float | None = 0.02

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("projection", self.projection, PROJECTIONS)
        if self.token_init_std is not None:
            check_number("token_init_std", self.token_init_std, minimum=0.0)
        for name in ("hidden_dim", "bottleneck_dim", "projection_layers"):
            check_positive_int(name, getattr(self, name))
        if self.out_dim is not None:
            check_positive_int("out_dim", self.out_dim)
        if not isinstance(self.norm_last_layer, bool):
            raise TypeError(f"norm_last_layer must be True or False, got {self.norm_last_layer!r}")

    @property
    def prototypes(self) -> int:
        """K, the width of the head's output (the bottleneck's for the SimDINO head)."""
        if self.projection == "simdino":
            return self.bottleneck_dim
        if self.out_dim is not None:
            return self.out_dim
        return self.dim if self.projection == "paper" else 65536

    def backbone_config(self) -> CRATEConfig:
        """The `CRATEConfig` part (the head fields dropped)."""
        return CRATEConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(CRATEConfig)})


class WeightNormLinear(nn.Module):
    """A bias-free Linear with weight g ⊙ V / ‖V‖ (each row of V normalised, times its gain g; Salimans & Kingma
    2016): (…, in_dim) → (…, out_dim). ``weight_v`` (out_dim, in_dim), ``weight_g`` (out_dim, 1) initialised to 1."""

    def __init__(self, in_dim: int, out_dim: int, train_gain: bool = True) -> None:
        super().__init__()
        self.weight_v = nn.Parameter(nn.Linear(in_dim, out_dim, bias=False).weight.detach().clone())
        self.weight_g = nn.Parameter(torch.ones(out_dim, 1), requires_grad=train_gain)

    @property
    def weight(self) -> torch.Tensor:
        return self.weight_g * F.normalize(self.weight_v, dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class DINOHead(nn.Module):
    """The official DINO projection head: (B, d) → (B, K).

    ``mlp``: Linear(d, h) GELU [Linear(h, h) GELU]… Linear(h, b) (one Linear(d, b) when ``layers == 1``), weights
    N(0, 0.02²) truncated at ±2 (DINO's call), biases 0; then ℓ2 normalisation; ``last_layer``: `WeightNormLinear`
    (b → K) with PyTorch's default Linear initialisation of V; ``out_dim`` None: no last layer (SimDINO's head,
    (B, d) → (B, b)).
    """

    def __init__(self, in_dim: int, out_dim: int | None, hidden_dim: int = 2048, bottleneck_dim: int = 256,
                 layers: int = 3, norm_last_layer: bool = True) -> None:
        super().__init__()
        widths = [in_dim] + [hidden_dim] * (layers - 1) + [bottleneck_dim]
        modules: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
            modules.append(nn.Linear(a, b))
            if i < layers - 1:
                modules.append(nn.GELU())
        self.mlp = nn.Sequential(*modules)
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)
        self.last_layer = (nn.Identity() if out_dim is None
                           else WeightNormLinear(bottleneck_dim, out_dim, train_gain=not norm_last_layer))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.last_layer(F.normalize(self.mlp(z), dim=-1))


class PaperHead(nn.Module):
    """The paper's projection head (75): W₃ ReLU(W₂ ReLU(W₁ z + b₁) + b₂) + b₃, (B, d) → (B, K); ``last_layer`` is
    W₃ (K = d in the paper). PyTorch's default Linear initialisation (the paper states none)."""

    def __init__(self, dim: int, out_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim), nn.ReLU())
        self.last_layer = nn.Linear(dim, out_dim)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.last_layer(self.mlp(z))


def build_head(config: DINOConfig) -> nn.Module:
    """The projection head ``config.projection`` names."""
    if config.projection == "paper":
        return PaperHead(config.dim, config.prototypes)
    return DINOHead(config.dim, None if config.projection == "simdino" else config.prototypes, config.hidden_dim, config.bottleneck_dim,
                    config.projection_layers, config.norm_last_layer)


class DINONetwork(nn.Module):
    """f^head ∘ f: a CRATE backbone without its classification head, then the projection head.

    ``backbone(images)`` is the pooled output token z (B, d) (``backbone.head`` is the identity); the backbone
    takes any image side divisible by the patch size when ``dynamic_img_size`` is set (local crops).
    """

    def __init__(self, config: DINOConfig) -> None:
        super().__init__()
        self.backbone = CRATEClassifier(config.backbone_config())
        self.backbone.head = nn.Identity()
        if config.token_init_std is not None:
            for p in (self.backbone.cls_token, self.backbone.pos_embed):
                nn.init.trunc_normal_(p, std=config.token_init_std)
        self.head = build_head(config)

    def forward(self, *crops: torch.Tensor) -> torch.Tensor:
        """Head outputs (ΣBᵢ, K) of batches of crops (Bᵢ, C, Hᵢ, Wᵢ), one resolution per batch, in order."""
        return self.head(torch.cat([self.backbone(c) for c in crops]))


@register_family("dino", DINOConfig)
class DINO(nn.Module):
    """Student and teacher (`DINONetwork`s of one architecture).

    Attributes: ``student`` (trained by gradients), ``teacher`` (no gradients, always in eval mode; the DINO task
    averages the student into it, ``crate_nn.engine.ema.ema_update``), ``config``. The centre of the teacher's
    outputs is the loss's (`crate_nn.tasks.dino_loss.DINOLoss`); weights written when it was the model's hold it as
    ``center``, which loading sets aside as ``legacy_center`` (K,) (the DINO task resumes with it) instead of
    refusing the file.
    """

    def __init__(self, config: DINOConfig) -> None:
        super().__init__()
        self.config = config
        self.student = DINONetwork(config)
        self.teacher = copy.deepcopy(self.student).requires_grad_(False).eval()  # θ_t = θ_s at initialisation
        self.legacy_center: torch.Tensor | None = None
        self.register_load_state_dict_pre_hook(_set_aside_center)

    def train(self, mode: bool = True) -> DINO:
        super().train(mode)
        self.teacher.eval()
        return self

    def no_weight_decay(self) -> set[str]:
        return self.student.backbone.no_weight_decay()

    def forward(self, global_crops: torch.Tensor, local_crops: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """(student outputs (V·B, K), teacher outputs (G·B, K)) of G global crops (G·B, C, S, S) and N local crops
        (N·B, C, s, s), V = G + N, each stacked view after view; the student sees every crop, the teacher
        (without gradients) the global ones."""
        with torch.no_grad():
            teacher = self.teacher(global_crops)
        crops = (global_crops,) if local_crops is None else (global_crops, local_crops)
        return self.student(*crops), teacher

    # -- the teacher as a backbone (eq. 80) -------------------------------------------------------------------
    @property
    def backbone(self) -> CRATEClassifier:
        """The teacher's backbone f_t (its ``head`` is the identity: ``backbone(images)`` is z_t, (B, d))."""
        return self.teacher.backbone

    @property
    def encoder(self) -> LayerStack:
        return self.backbone.encoder

    def forward_features(self, images: torch.Tensor) -> torch.Tensor:
        """The teacher backbone's output tokens Z^{L+1}: (B, C, H, W) → (B, N+1, d)."""
        return self.backbone.forward_features(images)

    def forward_intermediates(self, images: torch.Tensor, indices: Sequence[int] | None = None,
                              return_attention: bool = False) -> tuple[torch.Tensor, list[LayerTrace]]:
        """Z^{L+1} and the `LayerTrace` of the teacher backbone's layers in ``indices`` (default all)."""
        return self.backbone.forward_intermediates(images, indices, return_attention)


def _set_aside_center(module: DINO, state_dict: dict, prefix: str, *args) -> None:
    """Load pre-hook of `DINO`: the centre ``center`` of weights written when the model held it is removed from
    ``state_dict`` and kept as ``module.legacy_center``."""
    center = state_dict.pop(prefix + "center", None)
    if center is not None:
        module.legacy_center = center.detach().clone()
