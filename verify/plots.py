"""The audit's figures: log-log error rates with fitted slopes, curves against a parameter, per-layer curves, one
value per seed for several models.

Figures are built with matplotlib's object-oriented API (``matplotlib.figure.Figure``), so no backend or
global pyplot state is touched. One colour convention holds in every figure (`colour`): a random initialisation is
grey, everything else takes the default colours in order. Within ``drawing(False)`` (the audit without
``--figures``) every figure function returns None at once and draws nothing: in a warm quick audit drawing took
about a third of the time.
"""
from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from verify.numerics import loglog_slope

INIT_COLOUR = "0.55"
"""Grey: the colour of a random initialisation (a series whose label contains "init") in every figure."""
CYCLE = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C8", "C9")
"""The colours of the other series, in order (matplotlib's default cycle without its grey)."""


_DRAWING = True


@contextlib.contextmanager
def drawing(enabled: bool):
    """Within the block the figure functions draw (``enabled``) or return None without drawing."""
    global _DRAWING
    before, _DRAWING = _DRAWING, bool(enabled)
    try:
        yield
    finally:
        _DRAWING = before


def enabled() -> bool:
    """Whether figures are drawn now (`drawing`); claims that draw without this module's functions ask it."""
    return _DRAWING


def _optional(draw):
    """A figure function that returns None, drawing nothing, outside `drawing` (True)."""
    @functools.wraps(draw)
    def wrapper(*args, **kwargs):
        return draw(*args, **kwargs) if _DRAWING else None
    return wrapper


def _colours(labels) -> dict[str, str]:
    """The colours of one panel's series, the convention of every figure: a series labelled as a random
    initialisation grey, the others the colours of `CYCLE` in order."""
    others = itertools.cycle(CYCLE)
    return {label: INIT_COLOUR if "init" in label.lower() else next(others) for label in labels}


CHARACTER = 0.62
"""A generous mean width of a character of matplotlib's default font (DejaVu Sans), in units of its size: what
`wrapped` assumes to fit a title to a figure."""


def wrapped(text: str, width_inches: float, fontsize: float) -> str:
    """``text`` broken into lines (at spaces, else inside long words such as paths) that fit ``width_inches`` at
    ``fontsize`` points, each of its own lines separately."""
    import textwrap

    columns = max(10, int(width_inches * 72 / (CHARACTER * fontsize)))
    return "\n".join(textwrap.fill(line, columns) for line in text.splitlines())


def _save(fig: Figure, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return str(path)


@_optional
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

    ``references`` maps a label to a slope drawn as a dashed guide line parallel to (twice above) the series whose
    fitted slope is closest to it; the y-axis keeps to the data's range, so a guide never stretches it. Returns the
    path written.
    """
    fig = Figure(figsize=(5.2, 3.8))
    ax = fig.add_subplot()
    x = np.asarray(x, dtype=float)
    ys = {label: np.asarray(y, dtype=float) for label, y in series.items()}
    slopes = {label: loglog_slope(x, y) for label, y in ys.items()}
    colours = _colours(ys)
    for label, y in ys.items():
        ax.loglog(x, y, "o-", color=colours[label], label=f"{label} (slope {slopes[label]:.2f})")
    low, high = min(y.min() for y in ys.values()), max(y.max() for y in ys.values())
    for label, rate in (references or {}).items():
        anchor = ys[min(slopes, key=lambda k: abs(slopes[k] - rate))]
        ax.loglog(x, 2 * anchor[0] * (x / x[0]) ** rate, "--", color="grey", lw=0.8, label=label)
    ax.set_ylim(low / 2, high * 4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", lw=0.3)
    return _save(fig, path)


@_optional
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
    colours = _colours(series)
    for label, y in series.items():
        ax.plot(x, y, "o-", color=colours[label], label=label)
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


@_optional
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
        colours = _colours(series)
        for label, y in series.items():
            xs = np.arange(1, len(y) + 1) if x is None else np.asarray(x, dtype=float)
            ax.plot(xs, y, "o-", ms=3, color=colours[label], label=label)
            if bands and label in bands.get(ylabel, {}):
                low, high = bands[ylabel][label]
                ax.fill_between(xs, low, high, color=colours[label], alpha=0.2, lw=0)
        if x is None:
            ax.set_xticks(np.arange(1, max(len(y) for y in series.values()) + 1))
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, lw=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(wrapped(title, fig.get_figwidth(), 9), fontsize=9)
    return _save(fig, path)


@_optional
def per_seed(path: Path, values: Mapping[str, Sequence[float]], *, ylabel: str, title: str,
             ylim: tuple[float, float] | None = None) -> str:
    """One bar per model at its mean over seeds, each seed's value as a dot on it (and the std as an error bar when
    there are several seeds): for a comparison measured once per seed, with one seed or many."""
    fig = Figure(figsize=(4.6, 3.4))
    ax = fig.add_subplot()
    colours = _colours(values)
    for i, (label, v) in enumerate(values.items()):
        v = np.asarray(v, dtype=float)
        ax.bar(i, v.mean(), yerr=v.std(ddof=1) if v.size > 1 else None, capsize=4, color=colours[label], alpha=0.7)
        ax.plot(np.full(v.size, i), v, "k.", ms=4)
    ax.set_xticks(range(len(values)), list(values))
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.grid(True, axis="y", lw=0.3)
    seeds = sorted({len(v) for v in values.values()})
    ax.set_title(f"{title} ({'/'.join(map(str, seeds))} seed{'s' if seeds != [1] else ''})", fontsize=9)
    return _save(fig, path)
