"""The audit's figures: log-log error rates with fitted slopes, curves against a parameter, per-layer curves, one
value per seed for several models.

Figures are built with matplotlib's object-oriented API (``matplotlib.figure.Figure``), so no backend or
global pyplot state is touched.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from verify.numerics import loglog_slope


def _save(fig: Figure, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return str(path)


def loglog_rates(
    path: Path,
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    references: Mapping[str, float] | None = None,
) -> str:
    """Log-log plot of each series against ``x`` with its fitted slope in the legend.

    ``references`` maps a label to a slope drawn as a dashed guide line through the first series' first point.
    Returns the path written.
    """
    fig = Figure(figsize=(5.2, 3.8))
    ax = fig.add_subplot()
    x = np.asarray(x, dtype=float)
    first = None
    for label, y in series.items():
        y = np.asarray(y, dtype=float)
        first = y if first is None else first
        ax.loglog(x, y, "o-", label=f"{label} (slope {loglog_slope(x, y):.2f})")
    for label, rate in (references or {}).items():
        ax.loglog(x, first[0] * (x / x[0]) ** rate, "--", color="grey", lw=0.8, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", lw=0.3)
    return _save(fig, path)


def curves(
    path: Path,
    x: Sequence[float],
    series: Mapping[str, Sequence[float]],
    *,
    xlabel: str,
    ylabel: str,
    title: str,
    logx: bool = False,
    hlines: Mapping[str, float] | None = None,
) -> str:
    """Plain curves of each series against ``x`` (e.g. a cosine against β), with optional horizontal guides."""
    fig = Figure(figsize=(5.2, 3.8))
    ax = fig.add_subplot()
    for label, y in series.items():
        ax.plot(x, y, "o-", label=label)
    for label, level in (hlines or {}).items():
        ax.axhline(level, ls="--", color="grey", lw=0.8, label=label)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, lw=0.3)
    return _save(fig, path)


def strips(
    path: Path,
    groups: Mapping[str, Sequence[float]],
    *,
    ylabel: str,
    title: str,
    ylim: tuple[float, float] | None = None,
) -> str:
    """One bar per group (its mean, the std over seeds as error bar) with every seed's value as a dot: groups may
    hold different numbers of seeds."""
    fig = Figure(figsize=(4.6, 3.4))
    ax = fig.add_subplot()
    for i, values in enumerate(groups.values()):
        values = np.asarray(values, dtype=float)
        ax.bar(i, values.mean(), yerr=values.std(ddof=1) if values.size > 1 else 0, capsize=4, alpha=0.7)
        ax.plot(np.full(values.size, i), values, "k.", ms=4)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.grid(True, axis="y", lw=0.3)
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def per_layer(
    path: Path,
    panels: Mapping[str, Mapping[str, Sequence[float]]],
    *,
    title: str,
    x: Sequence[float] | None = None,
    xlabel: str = "layer ℓ",
    bands: Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]] | None = None,
) -> str:
    """One panel per measured quantity (e.g. R^c and sparsity), one curve per model, against the layer index.

    ``x`` replaces the layer numbers 1 … L (e.g. half-steps 0, ½, 1, …); ``bands[panel][label] = (low, high)``
    shades an interval (e.g. the 95% interval over seeds) around a curve.
    """
    fig = Figure(figsize=(4.2 * len(panels), 3.6))
    for i, (ylabel, series) in enumerate(panels.items()):
        ax = fig.add_subplot(1, len(panels), i + 1)
        for label, y in series.items():
            xs = np.arange(1, len(y) + 1) if x is None else np.asarray(x, dtype=float)
            line, = ax.plot(xs, y, "o-", ms=3, label=label)
            if bands and label in bands.get(ylabel, {}):
                low, high = bands[ylabel][label]
                ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2, lw=0)
        if x is None:
            ax.set_xticks(np.arange(1, max(len(y) for y in series.values()) + 1))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, lw=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)
