"""Figures in the style of the papers' layer-wise analysis (Figs. 14–17, 21, 26). Each function returns a
`matplotlib.figure.Figure` built without pyplot (no global state; works under the Agg backend).

* `plot_layer_curves` — Figs. 14/15/21: R^c and sparsity against the layer index, mean ± std over images, one
  curve per model or checkpoint (e.g. random init, epoch 1, epoch 20, epoch 150).
* `plot_thresholded_sparsity` — Fig. 26 right: fraction of entries with |Z^{ℓ+1}| ≥ τ for several τ.
* `plot_token_heatmaps` — Fig. 16: random 50×50 sub-matrices of the ISTA outputs Z^{ℓ+1}, colour 0–2.
* `plot_coherence` — Fig. 17: |[U_1 … U_K]*[U_1 … U_K]| per layer, a few random directions per subspace.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..models.blocks import LayerTrace
from .diagnostics import LayerMeasurements, Stat


def _curve(ax, stats: Sequence[Stat], label: str) -> None:
    layers = range(1, len(stats) + 1)
    mean = [s.mean for s in stats]
    std = [s.std for s in stats]
    (line,) = ax.plot(layers, mean, marker="o", markersize=3, label=label)
    ax.fill_between(layers, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)],
                    color=line.get_color(), alpha=0.2)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_layer_curves(results: Mapping[str, LayerMeasurements]) -> Figure:
    """Left: R^c per layer ([SSA block]); right: ‖Z^{ℓ+1}‖₀/(dn) per layer ([ISTA block]); one curve per entry."""
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax_rate, ax_sparse = fig.subplots(1, 2)
    for label, result in results.items():
        _curve(ax_rate, result.compression, label)
        _curve(ax_sparse, result.sparsity, label)
    protocol = {r.protocol for r in results.values()}
    ax_rate.set(xlabel="layer index ℓ", ylabel=r"$R^c$ [SSA block]", title=f"compression ({', '.join(sorted(protocol))})")
    ax_sparse.set(xlabel="layer index ℓ", ylabel=r"$\|Z^{\ell+1}\|_0/(dn)$ [ISTA block]", title="sparsity")
    for ax in (ax_rate, ax_sparse):
        ax.grid(alpha=0.3)
        ax.legend()
    return fig


def plot_thresholded_sparsity(result: LayerMeasurements, label: str = "") -> Figure:
    """Fraction of entries with |Z^{ℓ+1}| ≥ τ per layer, one curve per τ in ``result.thresholded``."""
    if not result.thresholded:
        raise ValueError("result has no thresholded sparsity; call measure_layers(..., thresholds=(1.0, 0.5, 0.1))")
    fig = Figure(figsize=(5, 4), layout="constrained")
    ax = fig.subplots()
    for tau, stats in sorted(result.thresholded.items(), reverse=True):
        _curve(ax, stats, f"threshold {tau:g}")
    ax.set(xlabel="layer index ℓ", ylabel=r"$\sum 1\{|Z| \geq \tau\}/(dn)$", title=f"thresholded sparsity {label}".strip())
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def _grid(count: int, width: float = 2.2) -> tuple[Figure, list]:
    cols = min(count, 6)
    rows = math.ceil(count / cols)
    fig = Figure(figsize=(width * cols + 1, width * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[count:]:
        ax.set_axis_off()
    return fig, axes[:count]


def plot_token_heatmaps(traces: Sequence[LayerTrace], sample: int = 0, size: int = 50, seed: int = 0,
                        vmax: float = 2.0) -> Figure:
    """Heat-maps of |Z^{ℓ+1}| for one image: the same random ``size``×``size`` (token × feature) sub-matrix per layer."""
    n, d = traces[0].output.shape[-2:]
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randperm(n, generator=gen)[: min(size, n)].sort().values
    cols = torch.randperm(d, generator=gen)[: min(size, d)].sort().values
    fig, axes = _grid(len(traces))
    for layer, (ax, t) in enumerate(zip(axes, traces), start=1):
        z = t.output[sample].detach().abs().to("cpu", torch.float64)[rows][:, cols]
        image = ax.imshow(z.numpy(), cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest")
        ax.set_title(f"layer = {layer}")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=axes, shrink=0.8)
    return fig


def plot_coherence(matrices: torch.Tensor, heads: int, directions: int = 4, seed: int = 0) -> Figure:
    """|[U_1 … U_K]*[U_1 … U_K]| per layer (``matrices`` (L, K·p, K·p) from `crate_nn.analysis.diagnostics.coherence`),
    showing ``directions`` random columns of each subspace; block (i, j) is U_i*U_j."""
    if matrices.ndim == 2:
        matrices = matrices[None]
    p = matrices.shape[-1] // heads
    gen = torch.Generator().manual_seed(seed)
    pick = torch.cat([k * p + torch.randperm(p, generator=gen)[: min(directions, p)].sort().values for k in range(heads)])
    fig, axes = _grid(matrices.shape[0])
    for layer, (ax, m) in enumerate(zip(axes, matrices), start=1):
        sub = m.detach().abs().to("cpu", torch.float64)[pick][:, pick]
        image = ax.imshow(sub.numpy(), cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_title(f"layer = {layer}")
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=axes, shrink=0.8)
    return fig
