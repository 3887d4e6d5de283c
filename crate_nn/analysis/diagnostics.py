"""White-box diagnostics: per-layer compression R^c and sparsity (Sec. 4.2, Figs. 14–17, 21, 26), in torch.

* `trace` returns Z^ℓ, Z^{ℓ+1/2}, Z^{ℓ+1} and optionally the attention maps of every encoder layer, through the
  model's ``forward_intermediates`` (nothing is modified, no hooks are left behind).
* `measure_layers` reduces those to per-image scalars, then mean and std over the images, with two protocols:

  - ``"paper"``: R^c(Z^{ℓ+1/2} | U^ℓ_[K]) of eq. (13), ``½ Σ_k logdet(I + β (U_k*Z)*(U_k*Z))``, β = p/(nε²),
    with the layer's own U^ℓ (the ``qkv`` weight split by head; a trained U is not orthonormal and the formula
    is used as is), on the MSSA outputs as the paper states.
  - ``"official"``: the authors' hook protocol — the codes U^ℓ* LN1(Z^ℓ) (the ``qkv`` output, i.e. the MSSA
    *input*), each token normalised to unit ℓ2 norm per head, β = p/(n·ε²) with ε² = 0.01, summed over heads.

  In both, sparsity is ‖Z^{ℓ+1}‖₀/(d·n) of the ISTA output per image; `thresholded_sparsity` is the Fig. 26
  measure, the fraction of entries with |Z| ≥ τ (the caption prints "<", which contradicts its plotted ranges).
* `coherence` gives the Gram matrix [U_1 … U_K]*[U_1 … U_K] of the column-normalised bases (Fig. 17).

Rates are computed in float64 as ½ logdet(I + βG) of the smaller Gram matrix G, from its Cholesky factor
(`half_logdet`), on the model's device. Standard
deviations are over images: ddof = 1 under the ``"official"`` protocol (the authors' ``torch.std``), ddof = 0 under
``"paper"``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..models.backbone import LayerStack
from ..models.blocks import LayerTrace
from ..models.mssa import MSSA
from ..models.registry import unwrap_model

PROTOCOLS = ("paper", "official")
OFFICIAL_EPS = 0.1  # ε² = 0.01 in the authors' measurement code
THRESHOLDS = (1.0, 0.5, 0.1)
"""Fig. 26's τ of `thresholded_sparsity`."""


@dataclass(repr=False)
class Stat:
    """A per-image quantity: ``values`` (batch,) float64 on the CPU, their ``mean`` and ``std`` (with ``ddof``)."""

    values: torch.Tensor
    ddof: int = 0
    mean: float = field(init=False)
    std: float = field(init=False)

    def __post_init__(self) -> None:
        self.mean = float(self.values.mean())
        enough = self.values.numel() > self.ddof
        self.std = float(self.values.std(correction=self.ddof)) if enough else float("nan")

    def __repr__(self) -> str:
        return f"Stat({self.mean:.6g} ± {self.std:.2g} over {self.values.numel()} images)"


@dataclass(repr=False)
class LayerMeasurements:
    """Output of `measure_layers`: lists over layers ℓ = 1 … L of `Stat`. Printed (or shown at the prompt) it is a
    table, one row per layer of mean ± std over the images; `to_dict` and `to_dataframe` give the same numbers."""

    protocol: str
    eps: float
    compression: list[Stat]
    sparsity: list[Stat]
    thresholded: dict[float, list[Stat]]

    def _columns(self) -> dict[str, tuple[str, list[Stat]]]:
        """key → (table header, the per-layer stats)."""
        return {"compression": ("R^c", self.compression), "sparsity": ("‖Z‖₀/dn", self.sparsity),
                **{f"above_{tau:g}": (f"|Z|≥{tau:g}", stats) for tau, stats in self.thresholded.items()}}

    def rows(self) -> list[dict[str, float | int]]:
        """One dict per layer: ``layer`` (1 … L) and ``<quantity>_mean``/``_std`` for compression, sparsity and
        each threshold τ (``above_<τ>``)."""
        return [{"layer": i + 1, **{f"{key}_{part}": getattr(stats[i], part) for key, (_, stats) in
                                    self._columns().items() for part in ("mean", "std")}}
                for i in range(len(self.compression))]

    def to_dict(self) -> dict:
        """``{"protocol", "eps", "images", "layers": rows()}``: plain Python numbers (JSON-ready)."""
        return {"protocol": self.protocol, "eps": self.eps, "images": self.compression[0].values.numel()
                if self.compression else 0, "layers": self.rows()}

    def to_dataframe(self):
        """`rows` as a pandas DataFrame indexed by layer (pandas is needed for this method only)."""
        try:
            import pandas
        except ImportError as err:
            raise ImportError("LayerMeasurements.to_dataframe needs pandas: pip install pandas (or use to_dict())") \
                from err
        return pandas.DataFrame(self.rows()).set_index("layer")

    def __repr__(self) -> str:
        columns = self._columns()
        cells = [["layer", *(header for header, _ in columns.values())]]
        cells += [[str(i + 1), *(f"{stats[i].mean:.4g} ± {stats[i].std:.2g}" for _, stats in columns.values())]
                  for i in range(len(self.compression))]
        widths = [max(len(row[j]) for row in cells) for j in range(len(cells[0]))]
        head = (f"per-layer measurements (protocol {self.protocol}, ε = {self.eps:g}, {self.to_dict()['images']} "
                "images): mean ± std over the images")
        return "\n".join([head, *("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)])

    __str__ = __repr__


def _encoder_layers(model: nn.Module) -> nn.ModuleList:
    """The encoder layers of a model with an ``encoder`` stack, or of a bare stack."""
    model = unwrap_model(model)
    stack = model if isinstance(model, LayerStack) else getattr(model, "encoder", None)
    if not isinstance(stack, LayerStack) or not hasattr(model, "forward_intermediates"):
        raise TypeError(f"model must be a CRATE model with an encoder (e.g. CRATEClassifier) or a CRATEEncoder, got "
                        f"{type(model).__name__}")
    return stack.layers


def _layers_without_mssa(layers: nn.ModuleList) -> list[int]:
    """Indices of the layers whose attention is not MSSA (they have no subspaces U^ℓ to define R^c)."""
    return [i for i, layer in enumerate(layers) if not isinstance(getattr(layer, "attn", None), MSSA)]


def has_mssa_layers(model: nn.Module) -> bool:
    """Whether `measure_layers` can measure ``model``: a CRATE model (or stack) whose every encoder layer has MSSA
    attention (an MHSA baseline has no subspaces U^ℓ to define R^c)."""
    try:
        layers = _encoder_layers(model)
    except TypeError:
        return False
    return not _layers_without_mssa(layers)


@torch.no_grad()
def trace(model: nn.Module, inputs: torch.Tensor, return_attention: bool = False) -> list[LayerTrace]:
    """Z^ℓ, Z^{ℓ+1/2}, Z^{ℓ+1} (and attention maps) of every encoder layer, in the model's current train/eval mode.

    Args:
        model: a CRATE model with ``forward_intermediates`` (a `CRATEClassifier` takes images (B, C, H, W)) or a
            `CRATEEncoder` (``inputs`` are tokens (B, n, d)).
        return_attention: also return each layer's attention maps (batch, K, n, n) (explicit attention path).
    """
    _encoder_layers(model)
    return unwrap_model(model).forward_intermediates(inputs, return_attention=return_attention)[1]


def subspace_weight(layer: nn.Module) -> torch.Tensor:
    """The bases [U_1 … U_K]* (K·p, d) a layer's R^c is measured against: MSSA's ``qkv`` weight, or an MHSA layer's
    value rows (a ViT's qkv weight is [Q; K; V]*, `crate_nn.models.baselines.MHSA`: the value map is what, as U^ℓ_k
    does in MSSA, carries the tokens into the heads' outputs; its bias left out)."""
    weight = layer.attn.qkv.weight
    return weight if isinstance(layer.attn, MSSA) else weight.chunk(3)[2]


def by_head(w: torch.Tensor, heads: int) -> torch.Tensor:
    """Columns (..., n, K·p) split into K heads, (..., K, n, p), contiguous: the Gram products of `half_logdet` on
    the strided view took 2–4× longer than the copy and the products together (d 768, K 12, n 197–1,024)."""
    return w.unflatten(-1, (heads, w.shape[-1] // heads)).transpose(-3, -2).contiguous()


def head_codes(z: torch.Tensor, weight: torch.Tensor, heads: int) -> torch.Tensor:
    """The per-head codes U_k* z of tokens z (..., n, d) for a qkv weight [U_1 … U_K]* (K·p, d): (..., K, n, p)."""
    return by_head(z @ weight.transpose(-2, -1), heads)


def half_logdet(w: torch.Tensor, beta: float) -> torch.Tensor:
    """½ logdet(I + β wᵀw) of each matrix w (..., n, m), float64: (...).

    Computed from the smaller Gram matrix G (wᵀw or wwᵀ, which share their non-zero eigenvalues) as Σ log diag of
    the Cholesky factor of I + βG — symmetric positive definite with every eigenvalue ≥ 1, so for finite w the
    factorisation cannot fail and loses nothing to conditioning (a NaN or inf in w makes it raise torch's
    ``LinAlgError``); ≈ 4× faster than the singular values for the sizes measured.
    """
    w = w.to(torch.float64)
    gram = w.transpose(-2, -1) @ w if w.shape[-1] <= w.shape[-2] else w @ w.transpose(-2, -1)
    eye = torch.eye(gram.shape[-1], dtype=torch.float64, device=w.device)
    return torch.linalg.cholesky(eye + beta * gram).diagonal(dim1=-2, dim2=-1).log().sum(-1)


def subspace_rates(codes: torch.Tensor, eps: float) -> torch.Tensor:
    """½ logdet(I + β w_kᵀ w_k) per head for codes (..., K, n, p), β = p/(nε²) (eq. 12): (..., K), float64."""
    n, p = codes.shape[-2:]
    return half_logdet(codes, p / (n * eps**2))


def compression(z: torch.Tensor, weight: torch.Tensor, heads: int, eps: float, normalize: bool = False) -> torch.Tensor:
    """R^c(z | U_[K]) of eq. (13) per token set: z (..., n, d), weight (K·p, d) → (...), float64.

    ``normalize`` rescales each head's code of each token to unit norm first (the authors' protocol).
    """
    codes = head_codes(z.to(torch.float64), weight.to(torch.float64), heads)
    if normalize:
        codes = F.normalize(codes, dim=-1)
    return subspace_rates(codes, eps).sum(-1)


def sparsity(z: torch.Tensor) -> torch.Tensor:
    """‖z‖₀/(d·n) per token set: z (..., n, d) → (...), float64."""
    return (z != 0).to(torch.float64).mean(dim=(-2, -1))


def thresholded_sparsity(z: torch.Tensor, tau: float) -> torch.Tensor:
    """Fraction of entries with |z| ≥ τ per token set (Fig. 26, with its caption's "<" inverted): (..., n, d) → (...)."""
    return (z.abs() >= tau).to(torch.float64).mean(dim=(-2, -1))


def _batches(images, batch_size: int) -> Iterable[torch.Tensor]:
    """Chunks of a tensor, or the inputs of an iterable of batches (tensors or (inputs, labels) pairs)."""
    if isinstance(images, torch.Tensor):
        yield from images.split(batch_size)
        return
    for batch in images:
        yield batch[0] if isinstance(batch, (tuple, list)) else batch


def measure_layers(
    model: nn.Module,
    images,
    protocol: str = "paper",
    eps: float | None = None,
    thresholds: Sequence[float] = (),
    batch_size: int = 64,
    progress: bool = False,
) -> LayerMeasurements:
    """Per-layer compression and sparsity of a CRATE model over a set of images (Sec. 4.2).

    Args:
        model: a CRATE model with an MSSA encoder, e.g. `CRATEClassifier` (or `CRATEEncoder` with token batches);
            measured in its current mode (use ``model.eval()``).
        images: the model's inputs: a tensor (B, C, H, W) (or (B, n, d) tokens), split into ``batch_size`` chunks,
            or an iterable of batches (tensors or ``(images, labels)`` pairs, e.g. a DataLoader). Batches are
            moved to the model's device, and floating-point ones to its dtype.
        protocol: ``"paper"`` or ``"official"`` (module docstring).
        eps: ε of β = p/(nε²); default 0.1 (the authors' ε² = 0.01; the papers never state ε).
        thresholds: τ values for `thresholded_sparsity` (Fig. 26 uses 1.0, 0.5, 0.1).
        progress: show a tqdm bar over batches.

    Returns:
        `LayerMeasurements` with ``compression``, ``sparsity`` and ``thresholded[τ]``, lists over layers of `Stat`.
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    eps = OFFICIAL_EPS if eps is None else float(eps)
    if eps <= 0:
        raise ValueError(f"eps must be positive, got {eps}")
    layers = _encoder_layers(model)
    not_mssa = _layers_without_mssa(layers)
    if not_mssa:
        raise TypeError(f"measure_layers needs MSSA layers (their U^ℓ define R^c); layers {not_mssa} have none")
    param = next(unwrap_model(model).parameters())
    depth = len(layers)
    rates = [[] for _ in range(depth)]
    zeros = [[] for _ in range(depth)]
    above = {float(t): [[] for _ in range(depth)] for t in thresholds}
    for batch in tqdm(_batches(images, batch_size), disable=not progress, desc="measure_layers"):
        batch = batch.to(device=param.device, dtype=param.dtype if batch.is_floating_point() else None)
        for i, t in enumerate(trace(model, batch)):
            mssa: MSSA = layers[i].attn
            with torch.no_grad():
                if protocol == "paper":
                    r = compression(t.half, mssa.qkv.weight, mssa.heads, eps)
                else:
                    r = compression(layers[i].norm1(t.input), mssa.qkv.weight, mssa.heads, eps, normalize=True)
            rates[i].append(r.cpu())
            zeros[i].append(sparsity(t.output).cpu())
            for tau, store in above.items():
                store[i].append(thresholded_sparsity(t.output, tau).cpu())

    ddof = 1 if protocol == "official" else 0  # the authors' torch.std has ddof = 1

    def stats(per_layer):
        return [Stat(torch.cat(v), ddof) for v in per_layer]

    return LayerMeasurements(
        protocol=protocol,
        eps=eps,
        compression=stats(rates),
        sparsity=stats(zeros),
        thresholded={tau: stats(store) for tau, store in above.items()},
    )


def coherence(source) -> torch.Tensor:
    """[U_1 … U_K]*[U_1 … U_K] with unit-norm columns (Fig. 17), float64 on the source's device.

    Args:
        source: a qkv weight (K·p, d) (its rows are the columns of [U_1 … U_K]) → (K·p, K·p); an `MSSA` →
            (K·p, K·p); a `CRATEClassifier` or `CRATEEncoder` → (L, K·p, K·p), one matrix per layer.
    """
    if isinstance(source, torch.Tensor):
        if source.ndim != 2:
            raise ValueError(f"a qkv weight must have shape (K·p, d), got {tuple(source.shape)}")
        u = F.normalize(source.detach().to(torch.float64), dim=-1)
        return u @ u.T
    if isinstance(source, MSSA):
        return coherence(source.qkv.weight)
    return torch.stack([coherence(layer.attn) for layer in _encoder_layers(source)])
