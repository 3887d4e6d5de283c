"""The sparsification half-step: (non-negative) LASSO, ISTA and the majorisation–minimisation step
(eqs. 41–44, 108–123).

Column convention: ``X``, ``Z`` are ``(d, n)`` or ``(..., d, n)`` (codes ``Z`` are ``(m, n)`` for a dictionary
``D`` of shape ``(d, m)``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

from ._checks import (
    as_float_array,
    check_choice,
    check_int,
    check_nonnegative,
    check_positive,
    check_same_size,
    check_square,
    check_tokens,
)
from .coding_rate import _alpha, coding_rate, coding_rate_grad

__all__ = [
    "soft_threshold",
    "nonneg_soft_threshold",
    "lasso_objective",
    "ista",
    "ista_solve",
    "IstaResult",
    "nonneg_lasso_reference",
    "mm_objective",
    "mm_majorizer",
    "mm_step",
]


def soft_threshold(X, threshold) -> np.ndarray:
    """Soft thresholding ``S_t(x) = sgn(x)(|x| − t)_+`` entrywise: the prox of ``t‖·‖_1`` (plain LASSO (41);
    the soft-threshold variant of Table 13)."""
    X = as_float_array(X, "X")
    t = check_nonnegative(threshold, "threshold")
    return np.sign(X) * np.maximum(np.abs(X) - t, 0.0)


def nonneg_soft_threshold(X, threshold) -> np.ndarray:
    """``max(X − t, 0)`` entrywise: the prox of ``t‖·‖_1 + χ_{≥0}`` — eq. (118), the ReLU of (44)."""
    X = as_float_array(X, "X")
    t = check_nonnegative(threshold, "threshold")
    return np.maximum(X - t, 0.0)


def _dictionary_and_codes(X, D, Z=None):
    X = check_tokens(X, "X")
    D = as_float_array(D, "D", ndim=2, shape_hint="(d, m)")
    check_same_size(D.shape[0], X.shape[-2], "D", "rows (must equal X's d)")
    if Z is None:
        return X, D
    Z = check_tokens(Z, "Z")
    check_same_size(Z.shape[-2], D.shape[1], "Z", "rows (must equal D's number of atoms m)")
    check_same_size(Z.shape[-1], X.shape[-1], "Z", "columns (must equal X's n)")
    return X, D, Z


def lasso_objective(X, D, Z, lam, nonneg: bool = True) -> np.ndarray | float:
    """LASSO objective ``λ‖Z‖_1 + ½‖X − DZ‖_F²`` — eq. (41); with ``nonneg`` the non-negative LASSO (42),
    which is ``+inf`` when any entry of Z is negative.

    Args:
        X: signals ``(d, n)`` or ``(..., d, n)``; D: dictionary ``(d, m)``; Z: codes ``(m, n)`` or ``(..., m, n)``;
        lam: λ ≥ 0; nonneg: include the indicator ``χ_{Z≥0}``.

    Returns:
        float, or ``(...)`` for a batch.
    """
    X, D, Z = _dictionary_and_codes(X, D, Z)
    lam = check_nonnegative(lam, "lam")
    R = X - D @ Z
    out = lam * np.abs(Z).sum(axis=(-2, -1)) + 0.5 * (R * R).sum(axis=(-2, -1))
    if nonneg:
        out = np.where((Z < 0).any(axis=(-2, -1)), np.inf, out)
    return float(out) if np.ndim(out) == 0 else out


def _prox_grad_step(Zp: np.ndarray, X: np.ndarray, D: np.ndarray, eta: float, lam: float, nonneg: bool) -> np.ndarray:
    """``prox_{ηλ‖·‖_1 (+χ_{≥0})}(Z' − η D*(DZ' − X))``: one proximal-gradient step on (41)/(42).

    Evaluated in place on two (…, m, n)-sized arrays (``DZ' − X`` and the step), not the seven fresh ones of the
    expression as written: large fresh arrays cost page faults, which is what slowed the step down at large n.
    The same arithmetic, operation by operation (the soft threshold as ``copysign(max(|V| − t, 0), V)``).
    """
    R = D @ Zp
    R = np.subtract(R, X, out=R if R.shape == np.broadcast_shapes(R.shape, X.shape) else None)
    V = D.T @ R
    del R
    V *= eta
    np.subtract(Zp, V, out=V)  # Z' − η D*(DZ' − X)
    threshold = eta * lam
    if nonneg:
        V -= threshold
        return np.maximum(V, 0.0, out=V)
    step = np.abs(V)
    step -= threshold
    np.maximum(step, 0.0, out=step)
    return np.copysign(step, V, out=step)


def ista(Z, D, eta=0.1, lam=0.1) -> np.ndarray:
    """The ISTA block of CRATE — eq. (44): ``ISTA(Z | D) = ReLU(Z − η D*(DZ − Z) − ηλ 1)``.

    This is exactly one proximal-gradient step on the non-negative LASSO (42) with signal ``X = Z``, started from
    the input itself (``Z' = Z``), since ``prox_{ηλ‖·‖_1 + χ_{≥0}}(V) = max(V − ηλ, 0)`` (118). That needs the codes
    and the signal to live in the same space, so D must be square ``(d, d)``.

    Args:
        Z: tokens ``(d, n)`` or ``(..., d, n)``; D: dictionary ``(d, d)``; eta: step η > 0; lam: λ ≥ 0.

    Returns:
        Array of Z's shape, entrywise ≥ 0.
    """
    Z = check_tokens(Z)
    D = check_square(D, "D", Z.shape[-2])
    eta = check_positive(eta, "eta")
    lam = check_nonnegative(lam, "lam")
    return _prox_grad_step(Z, Z, D, eta, lam, nonneg=True)


@dataclass
class IstaResult:
    """Result of :func:`ista_solve`.

    Attributes:
        Z: the final codes ``(..., m, n)``.
        objective: the objective (41)/(42) after each iteration, ``objective[0]`` at the initial point; for a batch
            the sum over the batch.
        n_iter: number of iterations run.
        converged: whether the stopping rule was met before ``max_iter``.
    """

    Z: np.ndarray
    objective: list[float] = field(default_factory=list)
    n_iter: int = 0
    converged: bool = False


def ista_solve(
    X,
    D,
    lam,
    *,
    Z0=None,
    eta=None,
    max_iter: int = 5000,
    tol: float = 1e-12,
    accelerated: bool = False,
    nonneg: bool = True,
) -> IstaResult:
    """Unrolled ISTA (or FISTA) to convergence on the (non-negative) LASSO (41)/(42) — the iteration that the
    ISTA block (44) truncates to one step.

    Iterates ``Z_{t+1} = prox_{ηλ‖·‖_1 (+χ_{≥0})}(Y_t − η D*(DY_t − X))`` with ``Y_t = Z_t`` (ISTA; the objective
    is non-increasing when ``η ≤ 1/‖D‖²``) or the FISTA extrapolation ``Y_t = Z_t + ((τ_{t−1} − 1)/τ_t)(Z_t − Z_{t−1})``.
    Stops when ``‖Z_{t+1} − Z_t‖_F ≤ tol · max(1, ‖Z_t‖_F)``.

    Args:
        X: signals ``(d, n)`` or ``(..., d, n)``; D: dictionary ``(d, m)``; lam: λ ≥ 0.
        Z0: initial codes ``(..., m, n)``; default zeros (pass ``Z0=X`` with square D for CRATE's initialisation).
        eta: step size; default ``1/‖D‖²`` (the inverse Lipschitz constant of the smooth part).
        max_iter: iteration limit; tol: relative stopping tolerance; accelerated: FISTA instead of ISTA;
        nonneg: solve (42) (default) or the plain LASSO (41).

    Returns:
        :class:`IstaResult`.
    """
    X, D = _dictionary_and_codes(X, D)
    lam = check_nonnegative(lam, "lam")
    max_iter = check_int(max_iter, "max_iter", minimum=1)
    tol = check_nonnegative(tol, "tol")
    eta = 1.0 / max(np.linalg.norm(D, 2) ** 2, np.finfo(float).tiny) if eta is None else check_positive(eta, "eta")
    if Z0 is None:
        Z = np.zeros(X.shape[:-2] + (D.shape[1], X.shape[-1]))
    else:
        _, _, Z = _dictionary_and_codes(X, D, Z0)
        Z = np.broadcast_to(Z, X.shape[:-2] + Z.shape[-2:]).copy()

    def total(codes: np.ndarray) -> float:
        return float(np.sum(lasso_objective(X, D, codes, lam, nonneg=nonneg)))

    result = IstaResult(Z=Z, objective=[total(Z)])
    Y, tau = Z, 1.0
    for it in range(1, max_iter + 1):
        Z_new = _prox_grad_step(Y, X, D, eta, lam, nonneg)
        if accelerated:
            tau_new = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * tau * tau))
            Y = Z_new + ((tau - 1.0) / tau_new) * (Z_new - Z)
            tau = tau_new
        else:
            Y = Z_new
        step = np.linalg.norm(Z_new - Z)
        scale = max(1.0, float(np.linalg.norm(Z)))
        Z = Z_new
        result.objective.append(total(Z))
        result.n_iter = it
        if step <= tol * scale:
            result.converged = True
            break
    result.Z = Z
    return result


def nonneg_lasso_reference(X, D, lam, nonneg: bool = True, tol: float = 1e-14, max_iter: int = 20000) -> np.ndarray:
    """An independent solver of the non-negative LASSO (42) (or the plain LASSO (41)) — to test ISTA against.

    1. Solves the smooth bound-constrained form ``min_{Z ≥ 0} λ Σ Z + ½‖X − DZ‖_F²`` (on ``Z ≥ 0``,
       ``‖Z‖_1 = Σ Z``) with SciPy's L-BFGS-B; the plain LASSO is the same problem in the split ``Z = P − N``,
       ``P, N ≥ 0``.
    2. Polishes each column on the support S (and signs σ) L-BFGS-B found by solving the KKT equations
       ``D_S*(D_S z_S − x) + λσ_S = 0`` exactly; the polished column is kept only if it satisfies every KKT
       condition (sign pattern, ``|D*(Dz − x)| ≤ λ`` off the support, ``≥ −λ`` for (42)) and does not raise the
       objective — otherwise the L-BFGS-B column is returned.

    Args:
        X: signals ``(d, n)`` (no batch axis); D: dictionary ``(d, m)``; lam: λ ≥ 0; nonneg: (42) or (41);
        tol: gradient tolerance passed to L-BFGS-B (``pgtol``) and its relative ``ftol``; max_iter: its limit.

    Returns:
        Codes ``(m, n)``.
    """
    X = check_tokens(X, "X", batch=False)
    X, D = _dictionary_and_codes(X, D)
    lam = check_nonnegative(lam, "lam")
    m, n = D.shape[1], X.shape[1]
    DtD, DtX = D.T @ D, D.T @ X

    def split(w: np.ndarray) -> np.ndarray:
        w = w.reshape((1 if nonneg else 2), m, n)
        return w[0] if nonneg else w[0] - w[1]

    def fun(w: np.ndarray) -> tuple[float, np.ndarray]:
        Z = split(w)
        R = X - D @ Z
        g = DtD @ Z - DtX  # gradient of the quadratic part
        value = lam * w.sum() + 0.5 * float((R * R).sum())
        grad = g[None] + lam if nonneg else np.stack([g + lam, -g + lam])
        return value, grad.ravel()

    size = m * n * (1 if nonneg else 2)
    res = minimize(
        fun,
        np.zeros(size),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, None)] * size,
        options={"maxiter": max_iter, "maxfun": 4 * max_iter, "ftol": tol, "gtol": tol, "maxcor": 30},
    )
    Z = split(res.x)
    for j in range(n):
        Z[:, j] = _polish_column(Z[:, j], X[:, j], D, DtD, DtX[:, j], lam, nonneg)
    return Z


def _polish_column(z, x, D, DtD, Dtx, lam: float, nonneg: bool) -> np.ndarray:
    """Solve the KKT equations of (41)/(42) on the support of ``z``; keep the result only if it is optimal."""
    scale = max(1.0, float(np.abs(z).max(initial=0.0)))
    support = np.abs(z) > 1e-9 * scale
    signs = np.sign(z[support])
    candidate = np.zeros_like(z)
    if support.any():
        sol, *_ = np.linalg.lstsq(DtD[np.ix_(support, support)], Dtx[support] - lam * signs, rcond=None)
        candidate[support] = sol
    g = DtD @ candidate - Dtx  # gradient of the smooth part at the candidate
    slack = 1e-9 * max(1.0, lam, float(np.abs(Dtx).max(initial=0.0)))
    ok = np.all(np.sign(candidate[support]) == signs)
    off = ~support
    ok &= np.all(g[off] >= -lam - slack) if nonneg else np.all(np.abs(g[off]) <= lam + slack)

    def objective(c):
        r = x - D @ c
        return lam * np.abs(c).sum() + 0.5 * float(r @ r)

    return candidate if ok and objective(candidate) <= objective(z) + slack else z


# ----------------------------------------------------------------------------------------------------------------
# majorisation–minimisation (Appendix A.2)
# ----------------------------------------------------------------------------------------------------------------
def mm_objective(Z, eps, lam) -> np.ndarray | float:
    """The sparsification objective ``φ(Z) = λ‖Z‖_1 + χ_{Z≥0}(Z) − ½ logdet(I + αZ*Z)`` — eq. (108).

    Args:
        Z: ``(d, n)`` or ``(..., d, n)``; eps: ε > 0; lam: λ ≥ 0.

    Returns:
        float (``+inf`` if any entry is negative), or ``(...)`` for a batch.
    """
    Z = check_tokens(Z)
    lam = check_nonnegative(lam, "lam")
    out = lam * np.abs(Z).sum(axis=(-2, -1)) - np.asarray(coding_rate(Z, eps))
    out = np.where((Z < 0).any(axis=(-2, -1)), np.inf, out)
    return float(out) if np.ndim(out) == 0 else out


def _lipschitz(alpha: float, L) -> float:
    """The curvature constant of the majoriser: the paper's ``L = 9α/4`` (Lemma 11) by default."""
    return 9.0 * alpha / 4.0 if L is None else check_positive(L, "L")


def mm_majorizer(Z, Z0, eps, L=None) -> np.ndarray | float:
    """The quadratic majoriser of ``−R`` at ``Z0`` — eq. (115):

    ``−R(Z0) − ⟨∇R(Z0), Z − Z0⟩ + (L/2)‖Z − Z0‖_F²``, with ``L = 9α/4`` (the paper's bound on ‖∇²R‖, Lemma 11).

    It upper-bounds ``−R(Z)`` for every Z whenever ``L ≥ λ_max(−∇²R)``; the Hessian spectrum lies in
    ``[−α/8, α]`` (see :func:`crate_theory.coding_rate.coding_rate_hessian_eigenvalues`), so any ``L ≥ α/8`` works.

    Args:
        Z: point ``(d, n)`` or ``(..., d, n)``; Z0: expansion point, same shape; eps: ε > 0;
        L: curvature constant (default ``9α/4``), α = d/(nε²).

    Returns:
        float, or ``(...)`` for a batch.
    """
    Z = check_tokens(Z)
    Z0 = check_tokens(Z0, "Z0")
    if Z0.shape[-2:] != Z.shape[-2:]:
        raise ValueError(f"Z0 must have the shape of Z's token matrices {Z.shape[-2:]}, got {Z0.shape[-2:]}")
    eps = check_positive(eps, "eps")
    L = _lipschitz(_alpha(*Z.shape[-2:], eps), L)
    Delta = Z - Z0
    out = (
        -np.asarray(coding_rate(Z0, eps))
        - (coding_rate_grad(Z0, eps) * Delta).sum(axis=(-2, -1))
        + 0.5 * L * (Delta * Delta).sum(axis=(-2, -1))
    )
    return float(out) if np.ndim(out) == 0 else out


def mm_step(Z, D, eps, lam, *, L=None, form: str = "general", atol: float = 1e-8) -> np.ndarray:
    """One majorisation–minimisation step on φ (108) — eqs. (111), (119), (123).

    ``form="general"`` evaluates the proximal MM step (111) at any Z, in the rotated frame of an orthogonal D
    (eq. 122: R is rotation invariant, ``D*∇R(Z) = ∇R(D*Z)``):

        ``Z^+ = ReLU( W + (1/L) ∇R(W) − (λ/L) 1 )``,  ``W = D* Z`` (``W = Z`` when D is None).

    ``form="closed"`` evaluates the printed closed form, valid only under the paper's assumption 2
    (``Z*Z = I_n``, hence d ≥ n, checked within ``atol``; ValueError otherwise), where ``∇R(Z) = (α/(1+α)) Z`` (116):

        ``Z^+ = ReLU( (1 + 4/(9(1+α))) D*Z − (4λ/(9α)) 1 )``  — (119) for D = I, (123) otherwise (L = 9α/4).

    The two forms coincide under the assumption (tested).

    Args:
        Z: ``Z^{ℓ+1/2}``, shape ``(d, n)`` or ``(..., d, n)``; D: orthogonal ``(d, d)`` or None (identity);
        eps: ε > 0; lam: λ ≥ 0; L: curvature constant for ``"general"`` (default 9α/4); form: see above;
        atol: tolerance of the orthonormality checks of ``"closed"`` (and of D).

    Returns:
        ``Z^{ℓ+1}``, Z's shape, entrywise ≥ 0.
    """
    Z = check_tokens(Z)
    eps = check_positive(eps, "eps")
    lam = check_nonnegative(lam, "lam")
    check_choice(form, "form", ("general", "closed"))
    d, n = Z.shape[-2:]
    if D is not None:
        D = check_square(D, "D", d)
        err = np.abs(D.T @ D - np.eye(d)).max(initial=0.0)
        if err > atol:
            raise ValueError(f"D must be orthogonal (D*D = I within {atol:g}) for the MM step (122)-(123); deviation {err:.3g}")
        Z = D.T @ Z
    alpha = _alpha(d, n, eps)
    if form == "general":
        L = _lipschitz(alpha, L)
        step = coding_rate_grad(Z, eps)  # Z + ∇R(Z)/L − λ/L, in place: no further (…, d, n) temporaries
        step /= L
        step += Z
        step -= lam / L
        return np.maximum(step, 0.0, out=step)
    if L is not None:
        raise ValueError("L must be None with form='closed' (the closed form (119) fixes L = 9*alpha/4)")
    if d < n:
        raise ValueError(f"Z must have d >= n for form='closed' (assumption Z*Z = I), got d={d}, n={n}")
    err = np.abs(np.swapaxes(Z, -1, -2) @ Z - np.eye(n)).max(initial=0.0)
    if err > atol:
        raise ValueError(f"Z must have orthonormal columns (Z*Z = I within {atol:g}) for form='closed'; deviation {err:.3g}")
    return _mm_closed_form(Z, alpha, lam)


def _mm_closed_form(W: np.ndarray, alpha: float, lam: float) -> np.ndarray:
    """``ReLU((1 + 4/(9(1+α))) W − (4λ/(9α)) 1)`` — the right-hand side of (119)/(123) with ``W = D*Z``."""
    return np.maximum((1.0 + 4.0 / (9.0 * (1.0 + alpha))) * W - 4.0 * lam / (9.0 * alpha), 0.0)
