"""Small measurement helpers shared by the claims and the tests: errors against a float64 reference, finite
differences, cosines, fitted log-log slopes.

These combine the results of library calls; they never compute a paper object themselves.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np


def rel_err(approx: np.ndarray, exact: np.ndarray) -> float:
    """‖approx − exact‖_F / ‖exact‖_F (the absolute error when ``exact`` is zero)."""
    approx, exact = np.asarray(approx, dtype=float), np.asarray(exact, dtype=float)
    scale = np.linalg.norm(exact)
    err = np.linalg.norm(approx - exact)
    return float(err / scale) if scale > 0 else float(err)


def max_rel_err(approx: np.ndarray, exact: np.ndarray) -> float:
    """max |approx − exact| / max |exact| over all entries, in the arrays' own dtype."""
    approx, exact = np.asarray(approx), np.asarray(exact)
    return float(np.abs(approx - exact).max() / np.abs(exact).max())


def max_abs_err(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| over all entries."""
    return float(np.max(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))))


STENCILS = ("central", "five_point", "richardson")
"""The finite-difference rules of `directional_difference`: truncation O(h²), O(h⁴), O(h⁴)."""


def directional_difference(f: Callable[[np.ndarray], np.ndarray], Z: np.ndarray, V: np.ndarray, h: float,
                           stencil: str = "central") -> np.ndarray:
    """The derivative of t ↦ f(Z + tV) at t = 0 by finite differences with step ``h`` (f may return an array):

    * ``central``: (f(Z + hV) − f(Z − hV)) / 2h, truncation O(h²);
    * ``five_point``: (−f(Z + 2hV) + 8 f(Z + hV) − 8 f(Z − hV) + f(Z − 2hV)) / 12h, O(h⁴);
    * ``richardson``: (4 D(h/2) − D(h)) / 3, with D(h) the central difference of step h, O(h⁴).

    Rounding adds O(ε_mach·|f| / h): choose h where the two balance for the tolerance checked.
    """
    if stencil == "central":
        return (f(Z + h * V) - f(Z - h * V)) / (2 * h)
    if stencil == "five_point":
        return (-f(Z + 2 * h * V) + 8 * f(Z + h * V) - 8 * f(Z - h * V) + f(Z - 2 * h * V)) / (12 * h)
    if stencil == "richardson":
        coarse = (f(Z + h * V) - f(Z - h * V)) / (2 * h)
        fine = (f(Z + h / 2 * V) - f(Z - h / 2 * V)) / h
        return (4 * fine - coarse) / 3
    raise ValueError(f"stencil: expected one of {', '.join(STENCILS)}, got {stencil!r}")


def finite_difference_gradient(f: Callable[[np.ndarray], float], Z: np.ndarray, h: float,
                               stencil: str = "central") -> np.ndarray:
    """The gradient of the scalar function f at Z (any shape), entry by entry: the `directional_difference` along
    each unit array."""
    Z = np.asarray(Z)
    grad = np.zeros_like(Z)
    for idx in np.ndindex(Z.shape):
        E = np.zeros_like(Z)
        E[idx] = 1.0
        grad[idx] = directional_difference(f, Z, E, h, stencil)
    return grad


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """⟨a, b⟩_F / (‖a‖_F ‖b‖_F)."""
    a, b = np.ravel(a).astype(float), np.ravel(b).astype(float)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log y against log x (the empirical rate exponent)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.size < 2:
        raise ValueError(f"loglog_slope needs two equal-length series of ≥ 2 points, got {x.shape} and {y.shape}")
    if np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("loglog_slope needs positive x and y")
    return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def loglog_argmin(x: np.ndarray, y: np.ndarray) -> tuple[float, float, bool]:
    """Where the sampled curve y(x) (x increasing, x, y > 0) is smallest: the vertex of the parabola through the
    smallest sample and its two neighbours in (log x, log y), as ``(x*, y*, at_edge)``. At an end of the grid (no
    neighbour on one side) the smallest sample itself is returned with ``at_edge`` True."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.size < 3 or np.any(x <= 0) or np.any(y <= 0) or np.any(np.diff(x) <= 0):
        raise ValueError(f"loglog_argmin needs ≥ 3 increasing positive x and positive y, got {x} and {y}")
    i = int(np.argmin(y))
    if i in (0, x.size - 1):
        return float(x[i]), float(y[i]), True
    a, b, c = np.polyfit(np.log(x[i - 1:i + 2]), np.log(y[i - 1:i + 2]), 2)
    if a <= 0:  # three samples on a line or a cap: no interior vertex to refine to
        return float(x[i]), float(y[i]), False
    u = float(np.clip(-b / (2 * a), np.log(x[i - 1]), np.log(x[i + 1])))
    return float(np.exp(u)), float(np.exp(np.polyval([a, b, c], u))), False


def orthonormal(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """A (rows, cols) matrix with orthonormal columns, from the QR factorisation of a Gaussian matrix."""
    q, r = np.linalg.qr(rng.standard_normal((rows, cols)))
    return q * np.sign(np.diag(r))


def fmt(x: float, digits: int = 2) -> str:
    """Compact scientific formatting for the report table."""
    return f"{x:.{digits}e}" if x != 0 and (abs(x) < 1e-2 or abs(x) >= 1e4) else f"{x:.{digits + 1}g}"
