"""Input validation shared by every ``crate_theory`` function.

Each helper converts a user argument to the form the mathematics needs (float64 arrays, Python floats) or raises
``TypeError`` (wrong kind of object: strings, booleans, complex or object arrays) or ``ValueError`` (right kind,
wrong value: number of dimensions, mismatched sizes, NaN/Inf, non-positive ε). Every message names the argument
and says what was expected, so a bad call never ends in a silent NaN or a bare NumPy broadcasting error.

The helpers are deliberately small and general so that every module (denoising, diffusion, Theorem 16 and the
decoder included) validates the same way.
"""
from __future__ import annotations

import numbers
from collections.abc import Iterable

import numpy as np

_REAL_KINDS = "iuf"  # signed/unsigned integers and floats; booleans, complex and objects are refused


def _describe_ndim(ndim: int | Iterable[int] | None, min_ndim: int | None) -> str:
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, numbers.Integral) else tuple(ndim)
        return " or ".join(str(k) for k in allowed) + " dimension(s)"
    return f"at least {min_ndim} dimension(s)"


def as_float_array(
    x,
    name: str,
    *,
    ndim: int | Iterable[int] | None = None,
    min_ndim: int | None = None,
    finite: bool = True,
    shape_hint: str | None = None,
) -> np.ndarray:
    """Return ``x`` as a float64 ndarray after checking its dtype, number of dimensions and finiteness.

    Args:
        x: array-like of real numbers.
        name: the argument's name, used in error messages.
        ndim: the allowed number(s) of dimensions (an int or a collection of ints), or None.
        min_ndim: the minimum number of dimensions (used when ``ndim`` is None), or None.
        finite: refuse NaN and ±Inf entries.
        shape_hint: how the expected shape reads in the paper's notation, e.g. ``"(..., d, n)"``.

    Raises:
        TypeError: ``x`` is a string, or its dtype is not a real number type (bool, complex, object, str).
        ValueError: wrong number of dimensions or non-finite entries.
    """
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a real numeric array, got a {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as err:  # ragged nested lists and the like
        raise TypeError(f"{name} must be a real numeric array; could not convert it ({err})") from None
    if arr.dtype.kind not in _REAL_KINDS:
        raise TypeError(f"{name} must be a real numeric array (integer or float dtype), got dtype {arr.dtype}")
    hint = f" {shape_hint}" if shape_hint else ""
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, numbers.Integral) else tuple(ndim)
        if arr.ndim not in allowed:
            raise ValueError(
                f"{name} must have {_describe_ndim(ndim, None)}{hint}, got shape {arr.shape} ({arr.ndim} dimension(s))"
            )
    elif min_ndim is not None and arr.ndim < min_ndim:
        raise ValueError(
            f"{name} must have {_describe_ndim(None, min_ndim)}{hint}, got shape {arr.shape} ({arr.ndim} dimension(s))"
        )
    arr = arr.astype(np.float64, copy=False)
    if finite and not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise ValueError(f"{name} must contain only finite values; found {bad} NaN or Inf entr{'y' if bad == 1 else 'ies'}")
    return arr


def as_scalar(x, name: str) -> float:
    """Return ``x`` as a finite Python float; refuse booleans, strings, arrays with more than one element."""
    if isinstance(x, (bool, np.bool_)) or isinstance(x, (str, bytes)):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__} {x!r}")
    if isinstance(x, np.ndarray):
        if x.size != 1 or x.dtype.kind not in _REAL_KINDS:
            raise TypeError(f"{name} must be a real number, got an array of shape {x.shape} and dtype {x.dtype}")
        x = x.reshape(()).item()
    if not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__} {x!r}")
    value = float(x)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def check_positive(x, name: str) -> float:
    """Return ``x`` as a float after checking it is a finite real number > 0 (e.g. ``eps``, a step size)."""
    value = as_scalar(x, name)
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return value


def check_nonnegative(x, name: str) -> float:
    """Return ``x`` as a float after checking it is a finite real number ≥ 0 (e.g. ``lam``, a noise level)."""
    value = as_scalar(x, name)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def check_int(x, name: str, *, minimum: int = 0) -> int:
    """Return ``x`` as an int after checking it is an integer ≥ ``minimum`` (sizes, counts, iteration limits)."""
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(x).__name__} {x!r}")
    if x < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {x}")
    return int(x)


def check_choice(value, name: str, choices: Iterable[str]) -> str:
    """Return ``value`` after checking it is one of the allowed strings."""
    choices = tuple(choices)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}")
    return value


def check_tokens(Z, name: str = "Z", *, batch: bool = True) -> np.ndarray:
    """A token matrix, column convention: shape ``(d, n)`` or, with ``batch``, ``(..., d, n)``; float64, finite."""
    if batch:
        return as_float_array(Z, name, min_ndim=2, shape_hint="(..., d, n) (tokens are columns)")
    return as_float_array(Z, name, ndim=2, shape_hint="(d, n) (tokens are columns)")


def check_same_size(size: int, expected: int, name: str, what: str) -> None:
    """Raise ``ValueError`` unless ``size == expected``; ``what`` says which dimension, e.g. "rows (d)"."""
    if size != expected:
        raise ValueError(f"{name} has {size} {what}, expected {expected} to match the other arguments")


ORTHONORMAL_ATOL = 1e-6
"""Default tolerance of the orthonormality check of subspace bases (``max |U_k*U_k − I_p|`` entrywise): loose
enough for bases stored in float32 or produced by a QR in float64 (deviation ~1e-7 / ~1e-15), tight enough that a
basis scaled by 1.00001 or with one column tilted by 1e-3 rad is refused."""


def orthonormality_deviation(U: np.ndarray) -> tuple[float, int]:
    """``(max_k max_ij |(U_k*U_k − I_p)_ij|, argmax k)`` for bases ``U`` of shape ``(K, d, p)``; ``(0.0, -1)`` if K = 0."""
    if U.shape[0] == 0:
        return 0.0, -1
    p = U.shape[2]
    per_k = np.abs(np.swapaxes(U, -1, -2) @ U - np.eye(p)).max(axis=(-2, -1), initial=0.0)
    k = int(np.argmax(per_k))
    return float(per_k[k]), k


def check_bases(
    U, d: int | None = None, name: str = "U", *, orthonormal: bool = False, atol: float = ORTHONORMAL_ATOL
) -> np.ndarray:
    """Subspace bases ``U_[K]`` as one float64 array of shape ``(K, d, p)``.

    Args:
        U: the bases, ``U[k]`` is the ``d × p`` basis ``U_k``.
        d: the ambient dimension the bases must have (the rows of ``Z``), or None to skip the check.
        name: the argument's name for error messages.
        orthonormal: also require ``U_k* U_k = I_p`` for every k, entrywise within ``atol``; otherwise a
            ``ValueError`` names the argument, the measured deviation ``max |U_k*U_k − I_p|`` and the worst k.
        atol: tolerance of the orthonormality check (default :data:`ORTHONORMAL_ATOL`).
    """
    U = as_float_array(U, name, ndim=3, shape_hint="(K, d, p): K bases U_k of shape d × p")
    if d is not None:
        check_same_size(U.shape[1], d, name, "rows (d) per basis, i.e. U.shape[1]")
    if orthonormal:
        err, k = orthonormality_deviation(U)
        if not err <= atol:
            raise ValueError(
                f"{name} must have orthonormal columns (U_k* U_k = I_p within {atol:g}); max deviation "
                f"max|U_k* U_k - I| = {err:.3g} (at k = {k})"
            )
    return U


def check_square(A, name: str, size: int | None = None) -> np.ndarray:
    """A square float64 matrix ``(m, m)``, with ``m == size`` when given (e.g. the dictionary D of ISTA)."""
    A = as_float_array(A, name, ndim=2, shape_hint="(d, d)")
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be square (d, d), got shape {A.shape}")
    if size is not None:
        check_same_size(A.shape[0], size, name, "rows")
    return A


def check_vector(v, name: str, size: int) -> np.ndarray:
    """A float64 vector of length ``size`` (LayerNorm weights, biases)."""
    v = as_float_array(v, name, ndim=1, shape_hint=f"({size},)")
    check_same_size(v.shape[0], size, name, "entries")
    return v


def check_labels(labels, n: int, name: str = "labels") -> np.ndarray:
    """Integer class labels of shape ``(n,)`` with values ≥ 0 (token i belongs to group ``labels[i]``)."""
    if isinstance(labels, (str, bytes)):
        raise TypeError(f"{name} must be an integer array of shape ({n},), got a {type(labels).__name__}")
    arr = np.asarray(labels)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and arr.size and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        elif arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)
        else:
            raise TypeError(f"{name} must be an integer array of shape ({n},), got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must have shape ({n},), got shape {arr.shape}")
    check_same_size(arr.shape[0], n, name, "entries (one label per token)")
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be >= 0 (group indices), got minimum {arr.min()}")
    return arr.astype(np.int64, copy=False)
