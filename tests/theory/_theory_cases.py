"""Shared hypothesis strategies and naive reference formulas for the crate_theory tests (part 1).

The naive formulas are written straight from the papers' equations with dense linear algebra (slogdet, solve), so
they are independent of the SVD-based implementation they check.
"""
from __future__ import annotations

import mpmath
import numpy as np
from hypothesis import strategies as st

MP_DPS = 50  # decimal digits of the high-precision references: far beyond float64's 16

# Token scales drawn log-uniformly over the range the reference must cover (1e-3 .. 30).
scales = st.floats(min_value=-3.0, max_value=float(np.log10(30.0))).map(lambda e: 10.0**e)
seeds = st.integers(min_value=0, max_value=2**32 - 1)
eps_values = st.sampled_from([0.1, 0.5, 1.0, 2.0])


@st.composite
def token_shapes(draw, max_d: int = 7, max_n: int = 7):
    """(d, n) covering n < d, n > d, n = d and n = 1."""
    d = draw(st.integers(1, max_d))
    n = draw(st.integers(1, max_n))
    return d, n


@st.composite
def bases_shapes(draw, max_d: int = 8, max_n: int = 6):
    """(K, d, p, n) covering K = 1, p = d, p < d."""
    d = draw(st.integers(1, max_d))
    p = draw(st.integers(1, d))
    K = draw(st.integers(1, 3))
    n = draw(st.integers(1, max_n))
    return K, d, p, n


def random_bases(rng: np.random.Generator, K: int, d: int, p: int) -> np.ndarray:
    """K independent orthonormal bases (QR of Gaussian matrices), shape (K, d, p)."""
    return np.stack([np.linalg.qr(rng.standard_normal((d, p)))[0] for _ in range(K)])


def naive_rate(Z: np.ndarray, eps: float, gram: str = "n") -> float:
    """½ logdet(I_n + αZ*Z) (gram="n") or ½ logdet(I_d + αZZ*) (gram="d"), α = d/(nε²) — eq. (8)."""
    d, n = Z.shape
    alpha = d / (n * eps**2)
    M = np.eye(n) + alpha * Z.T @ Z if gram == "n" else np.eye(d) + alpha * Z @ Z.T
    sign, logdet = np.linalg.slogdet(M)
    assert sign > 0
    return 0.5 * logdet


def naive_grad(Z: np.ndarray, eps: float) -> np.ndarray:
    """α Z (I + αZ*Z)^{-1} — eq. (109), by a linear solve."""
    d, n = Z.shape
    alpha = d / (n * eps**2)
    return alpha * np.linalg.solve(np.eye(n) + alpha * Z.T @ Z, Z.T).T


def naive_compression_grad(Z: np.ndarray, U: np.ndarray, eps: float) -> np.ndarray:
    """β Σ_k U_k (U_k*Z)(I + β(U_k*Z)*(U_k*Z))^{-1} — eq. (31), term by term."""
    K, d, p = U.shape
    n = Z.shape[1]
    beta = p / (n * eps**2)
    out = np.zeros_like(Z)
    for k in range(K):
        A = U[k].T @ Z
        out += beta * U[k] @ A @ np.linalg.inv(np.eye(n) + beta * A.T @ A)
    return out


def naive_hvp(Z: np.ndarray, V: np.ndarray, eps: float) -> np.ndarray:
    """α V M − α² Z M (Z*V + V*Z) M with M = (I + αZ*Z)^{-1} — eq. (127) as printed."""
    d, n = Z.shape
    alpha = d / (n * eps**2)
    M = np.linalg.inv(np.eye(n) + alpha * Z.T @ Z)
    return alpha * V @ M - alpha**2 * Z @ M @ (Z.T @ V + V.T @ Z) @ M


def condition_number(Z: np.ndarray, eps: float) -> float:
    """κ = cond(I + αZ*Z) = 1 + α s_max²: how much the naive float64 formulas amplify rounding."""
    d, n = Z.shape
    s_max = np.linalg.norm(Z, 2) if Z.size else 0.0
    return 1.0 + d / (n * eps**2) * s_max**2


def _mp(A: np.ndarray) -> mpmath.matrix:
    return mpmath.matrix(A.tolist())


def _to_np(M: mpmath.matrix) -> np.ndarray:
    return np.array(M.tolist(), dtype=float)


def mp_rate(Z: np.ndarray, eps: float) -> float:
    """½ logdet(I_n + αZ*Z) (8) in 50-digit arithmetic (the float64 input taken as exact)."""
    with mpmath.workdps(MP_DPS):
        d, n = Z.shape
        alpha = mpmath.mpf(d) / (n * mpmath.mpf(eps) ** 2)
        Zm = _mp(Z)
        return float(mpmath.log(mpmath.det(mpmath.eye(n) + alpha * Zm.T * Zm)) / 2)


def mp_grad_and_hvp(Z: np.ndarray, V: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(109) αZM and the printed (127) αVM − α²ZM(Z*V + V*Z)M, M = (I + αZ*Z)^{-1}, in 50-digit arithmetic."""
    with mpmath.workdps(MP_DPS):
        d, n = Z.shape
        alpha = mpmath.mpf(d) / (n * mpmath.mpf(eps) ** 2)
        Zm, Vm = _mp(Z), _mp(V)
        M = (mpmath.eye(n) + alpha * Zm.T * Zm) ** -1
        grad = alpha * Zm * M
        hvp = alpha * Vm * M - alpha**2 * Zm * M * (Zm.T * Vm + Vm.T * Zm) * M
        return _to_np(grad), _to_np(hvp)


# ----------------------------------------------------------------------------------------------------------------
# The previous implementation of R, ∇R and ∇²R[V] (a thin LAPACK SVD of Z), kept here only as the reference the
# smaller-Gram evaluation of crate_theory.coding_rate is cross-checked against.
# ----------------------------------------------------------------------------------------------------------------
def svd_rate(Z: np.ndarray, eps: float) -> float:
    """½ Σ_i logaddexp(0, log α + 2 log s_i) over the singular values of Z (LAPACK SVD) — eq. (8)."""
    d, n = Z.shape
    s = np.linalg.svd(Z, compute_uv=False)
    with np.errstate(divide="ignore"):
        log_as2 = np.log(d) - np.log(n) - 2 * np.log(eps) + 2 * np.log(s)
    return float(0.5 * np.logaddexp(0.0, log_as2).sum())


def _svd_functions(s: np.ndarray, alpha: float):
    with np.errstate(over="ignore", divide="ignore", under="ignore", invalid="ignore"):
        x = np.where(s > 0, alpha * s * s, 0.0)
        a = np.where(np.isinf(x), 0.0, 1.0 / (1.0 + x))
        f = np.where(s > 0, 1.0 / (s + 1.0 / (alpha * s)), 0.0)
    return a, f


def svd_grad(Z: np.ndarray, eps: float) -> np.ndarray:
    """U diag(αs/(1+αs²)) V* from the thin SVD — eq. (109)."""
    d, n = Z.shape
    U, s, Vt = np.linalg.svd(Z, full_matrices=False)
    return (U * _svd_functions(s, d / (n * eps**2))[1]) @ Vt


def svd_hvp(Z: np.ndarray, V: np.ndarray, eps: float) -> np.ndarray:
    """α (I_d + αZZ*)^{-1} V (I_n + αZ*Z)^{-1} − G V* G from the thin SVD — eq. (127)."""
    d, n = Z.shape
    alpha = d / (n * eps**2)
    U, s, Vt = np.linalg.svd(Z, full_matrices=False)
    a, f = _svd_functions(s, alpha)

    def resolvent(Q, X):  # (I + α Q S² Q*)^{-1} X for Q with orthonormal columns
        QtX = Q.T @ X
        return X - Q @ QtX + Q @ (a[:, None] * QtX)

    both = resolvent(Vt.T, resolvent(U, V).T).T
    G = (U * f) @ Vt
    return alpha * both - G @ V.T @ G


TOKEN_KINDS = ("gaussian", "rank-deficient", "duplicated", "zero-columns")


@st.composite
def adversarial_tokens(draw, max_d: int = 6, max_n: int = 60):
    """(Z, eps, kind, scale): n < d, n = d and n ≫ d; Gaussian, rank-deficient (Z = AB, inner size k < min(d, n)),
    duplicated tokens (every column a copy of one of k distinct ones) or with zero columns; token scales
    1e±300, 1e±150 and moderate; ε from 1e-3 to 1e3."""
    d = draw(st.integers(1, max_d))
    n = draw(st.sampled_from([1, 2, max(1, d - 1), d, d + 1, 3 * d, max_n]))
    kind = draw(st.sampled_from(TOKEN_KINDS))
    scale = draw(st.sampled_from([1e-300, 1e-150, 1e-3, 1.0, 30.0, 1e150, 1e300]))
    eps = draw(st.sampled_from([1e-3, 0.1, 0.5, 2.0, 1e3]))
    rng = np.random.default_rng(draw(seeds))
    if kind == "gaussian":
        Z = rng.standard_normal((d, n))
    elif kind == "rank-deficient":
        k = draw(st.integers(0, max(0, min(d, n) - 1)))
        Z = rng.standard_normal((d, k)) @ rng.standard_normal((k, n))
    elif kind == "duplicated":
        k = draw(st.integers(1, min(3, n)))
        Z = rng.standard_normal((d, k))[:, rng.integers(0, k, n)]
    else:
        Z = rng.standard_normal((d, n)) * (rng.random(n) < 0.5)
    return scale * Z, eps, kind, scale
