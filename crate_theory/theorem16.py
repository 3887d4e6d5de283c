"""Theorem 16 (App. B.3): a gradient step on R^c denoises towards the subspaces — its model, nominal
predictions and the residuals that measure how good they are.

Model (Sec. 3.2 / App. B.3, eq. (232)): K pairwise-orthogonal orthonormal bases U_k ∈ R^{d×p}; labels
s_i i.i.d. uniform on [K]; codes α_i ~ N(0, I_p/p); noise δ_i ~ N(0, (σ²/d) I_d) (note σ²/d, unlike (11)):

    Z_o = [U_1 A_1 … U_K A_K] Π + Δ = X_♮ + Δ,     A_k ∈ R^{p×K_k},  K_k = #{i : s_i = k},

with Π a uniformly random n×n permutation and [Δ_1 … Δ_K] := ΔΠ* (253). The permutation is stored as an
index array ``order``: column j of the block-ordered matrix [U_1A_1 … U_KA_K] is token ``order[j]``, i.e.
Π[j, order[j]] = 1 and X_♮[:, order] = [U_1A_1 … U_KA_K].

The projection operator (313)–(314) acts blockwise; in token order it maps column i to P_{s_i} v_i, so
P_{U[K]}(VΠ*)Π = [P_{s_1}v_1, …, P_{s_n}v_n] — this module computes it that way (and tests it against the
block form). β = p/(nε²) as everywhere (eq. (12), (233)).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ._checks import as_float_array, check_bases, check_int, check_nonnegative, check_positive
from .coding_rate import compression_rate_grad
from .synthetic import coherence, gaussian_codes, orthonormal_bases

__all__ = [
    "Theorem16Sample",
    "sample_theorem16",
    "on_bases",
    "at_noise_level",
    "permutation_matrix",
    "projection_operators",
    "apply_projection",
    "nominal_gradient",
    "nominal_step",
    "exact_a_nominal_gradient",
    "Theorem16Residuals",
    "theorem16_residuals",
    "remark17_bound",
    "remark17_eps",
    "remark17_beta_inv",
    "remark17_residual_bound",
]


@dataclass(frozen=True)
class Theorem16Sample:
    """One draw of the Theorem 16 model (232).

    U: (K, d, p) pairwise-orthogonal orthonormal bases. Z: (d, n) = X_nat + Delta. X_nat: (d, n) noise-free
    tokens X_♮. Delta: (d, n) noise Δ. labels: (n,) s_i. order: (n,) the permutation Π as an index array
    (Π[j, order[j]] = 1). A: K arrays A_k of shape (p, K_k), the codes of block k in block order.
    sigma: the noise level σ.
    """

    U: np.ndarray
    Z: np.ndarray
    X_nat: np.ndarray
    Delta: np.ndarray
    labels: np.ndarray
    order: np.ndarray
    A: tuple
    sigma: float

    @property
    def counts(self) -> np.ndarray:
        """K_k, the number of tokens of each subspace, (K,)."""
        return np.array([a.shape[1] for a in self.A])


def permutation_matrix(order) -> np.ndarray:
    """Π (n, n) with Π[j, order[j]] = 1, so that (BΠ)[:, order[j]] = B[:, j] (the Π of (232))."""
    order = np.asarray(order)
    n = order.shape[0]
    if order.ndim != 1 or not np.array_equal(np.sort(order), np.arange(n)):
        raise ValueError("order: expected a permutation of 0..n-1 as a 1-D integer array")
    Pi = np.zeros((n, n))
    Pi[np.arange(n), order] = 1.0
    return Pi


def _check_pairwise_orthogonal(U, d, name="U", tol=1e-8):
    U = check_bases(U, d, name=name, orthonormal=True, atol=tol)
    mu = coherence(U)
    if mu > tol:
        raise ValueError(
            f"{name} must span pairwise-orthogonal subspaces (U_k*U_l = 0 for k != l, Assumption 15); "
            f"its coherence max ‖U_k*U_l‖ = {mu:.2e} exceeds the tolerance {tol:.0e}"
        )
    return U


def sample_theorem16(d: int, n: int, K: int, p: int, sigma: float, rng: np.random.Generator,
                     U=None) -> Theorem16Sample:
    """Draw Z_o = [U_1A_1 … U_KA_K]Π + Δ of (232).

    K_k ~ Multinomial(n, 1/K) (the counts of i.i.d. uniform labels), A_k entries i.i.d. N(0, 1/p), Π uniform
    over permutations (so the labels in token order are i.i.d. uniform, as in Sec. 3.2), Δ entries i.i.d.
    N(0, σ²/d). U: optional (K, d, p) pairwise-orthogonal orthonormal bases (checked to 1e-8); by default
    ``synthetic.orthonormal_bases(K, d, p, rng)`` (Haar-random, needs Kp ≤ d). σ ≥ 0.
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    d, n, K, p = (check_int(v, name, minimum=1) for v, name in ((d, "d"), (n, "n"), (K, "K"), (p, "p")))
    if K * p > d:
        raise ValueError(f"K*p = {K * p} exceeds d = {d}: K pairwise-orthogonal p-dimensional subspaces need Kp <= d")
    sigma = check_nonnegative(sigma, "sigma")
    if U is None:
        U = orthonormal_bases(K, d, p, rng)
    else:
        U = _check_pairwise_orthogonal(U, d)
        if U.shape != (K, d, p):
            raise ValueError(f"U: expected shape ({K}, {d}, {p}), got {U.shape}")
    counts = rng.multinomial(n, np.full(K, 1.0 / K))
    A = tuple(gaussian_codes(p, c, rng, variance=1.0 / p) for c in counts)
    order = rng.permutation(n)
    block = np.concatenate([U[k] @ A[k] for k in range(K)], axis=1)        # [U_1A_1 … U_KA_K]
    X_nat = np.empty((d, n))
    X_nat[:, order] = block                                                 # = block · Π
    labels = np.empty(n, dtype=int)
    labels[order] = np.repeat(np.arange(K), counts)
    Delta = rng.standard_normal((d, n)) * (sigma / np.sqrt(d))
    return Theorem16Sample(U=U, Z=X_nat + Delta, X_nat=X_nat, Delta=Delta, labels=labels, order=order,
                           A=A, sigma=sigma)


def on_bases(sample: Theorem16Sample, U) -> Theorem16Sample:
    """The same draw of (232) — codes A_k, labels, permutation Π and noise Δ — placed on other bases ``U``:
    X_♮ = [U_1A_1 … U_KA_K]Π and Z_o = X_♮ + Δ with the new U_k.

    Remark 18's relaxation of Assumption 15: the U_k need only be orthonormal each (checked to 1e-8), not pairwise
    orthogonal, so ``U`` may have coherence ν = max_{k≠k'} ‖U_k*U_{k'}‖ > 0 (``synthetic.orthonormal_bases(...,
    coherence=ν)``). U: (K, d, p) with the sample's K, d and p.
    """
    U = check_bases(U, sample.Z.shape[0], name="U", orthonormal=True, atol=1e-8)
    if U.shape != sample.U.shape:
        raise ValueError(f"U: expected shape {sample.U.shape} (the sample's K, d, p), got {U.shape}")
    block = np.concatenate([U[k] @ a for k, a in enumerate(sample.A)], axis=1)
    X_nat = np.empty_like(sample.X_nat)
    X_nat[:, sample.order] = block                                          # = block · Π
    return replace(sample, U=U, Z=X_nat + sample.Delta, X_nat=X_nat)


def at_noise_level(sample: Theorem16Sample, sigma: float) -> Theorem16Sample:
    """The same draw of (232) at noise level σ: Δ scaled by σ/σ_0 (its entries N(0, σ²/d)), Z_o = X_♮ + Δ.

    Lets a sweep over σ (Remark 17's ε(σ), (242)–(245)) reuse one draw of the codes, labels, Π and noise
    directions. Needs a sample drawn with σ_0 > 0; σ ≥ 0.
    """
    sigma = check_nonnegative(sigma, "sigma")
    if sample.sigma <= 0:
        raise ValueError("sample: rescaling the noise needs a sample drawn with sigma > 0")
    Delta = sample.Delta * (sigma / sample.sigma)
    return replace(sample, Z=sample.X_nat + Delta, Delta=Delta, sigma=sigma)


def _beta(sample: Theorem16Sample, eps) -> float:
    eps = check_positive(eps, "eps")
    return sample.U.shape[2] / (sample.Z.shape[1] * eps**2)


def projection_operators(U, A, beta: float) -> np.ndarray:
    """The K operators of (313)–(314), shape (K, d, d):

        P_k = Σ_{k'≠k} U_{k'} [I_p − A_{k'} (β^{-1}I + A_{k'}*A_{k'})^{-1} A_{k'}*] U_{k'}*.

    U: (K, d, p) orthonormal bases; A: K arrays (p, K_k) (an empty block contributes U_{k'}U_{k'}*); β > 0.
    As β^{-1} → 0 the bracket tends to the orthogonal projection onto im(A_{k'})^⊥ (248)–(249).
    """
    U = check_bases(U, name="U", orthonormal=True)
    beta = check_positive(beta, "beta")
    K, d, p = U.shape
    if len(A) != K:
        raise ValueError(f"A: expected K = {K} code blocks, got {len(A)}")
    terms = np.empty((K, d, d))
    for k, a in enumerate(A):
        a = as_float_array(a, f"A[{k}]")
        if a.ndim != 2 or a.shape[0] != p:
            raise ValueError(f"A[{k}]: expected shape ({p}, K_k), got {a.shape}")
        inner = np.eye(p) - a @ np.linalg.solve(np.eye(a.shape[1]) / beta + a.T @ a, a.T)
        terms[k] = U[k] @ inner @ U[k].T
    return terms.sum(axis=0)[None] - terms


def apply_projection(P, labels, V) -> np.ndarray:
    """P_{U[K]}(VΠ*)Π in token order: column i ↦ P_{s_i} v_i (314). P: (K, d, d); labels: (n,); V: (d, n)."""
    V = as_float_array(V, "V")
    labels = np.asarray(labels)
    if V.ndim != 2 or labels.shape != (V.shape[1],):
        raise ValueError(f"labels: expected one label per column of V {V.shape}, got shape {labels.shape}")
    out = np.empty_like(V)
    for k in range(P.shape[0]):  # one (d, d) @ (d, n_k) product per subspace: no (n, d, d) gather
        cols = labels == k
        out[:, cols] = P[k] @ V[:, cols]
    return out


def nominal_gradient(sample: Theorem16Sample, eps: float) -> np.ndarray:
    """The gradient Theorem 16 predicts, (315): P_{U[K]}(βΔΠ*)Π + X_♮/(1 + β^{-1}), shape (d, n)."""
    beta = _beta(sample, eps)
    P = projection_operators(sample.U, sample.A, beta)
    return apply_projection(P, sample.labels, beta * sample.Delta) + sample.X_nat / (1 + 1 / beta)


def nominal_step(sample: Theorem16Sample, eps: float, eta: float) -> np.ndarray:
    """The step Theorem 16 predicts, (237): Δ − η P_{U[K]}(βΔΠ*)Π + ((1 + β^{-1} − η)/(1 + β^{-1})) X_♮.

    Equal to Z_o − η · ``nominal_gradient``; compare with Z^+ = Z_o − η∇R^c(Z_o | U) of (236).
    """
    eta = check_positive(eta, "eta")
    return sample.Z - eta * nominal_gradient(sample, eps)


def _exact_signal_term(sample: Theorem16Sample, beta: float) -> np.ndarray:
    """[U_1A_1(β^{-1}I + A_1*A_1)^{-1} … U_KA_K(β^{-1}I + A_K*A_K)^{-1}] Π = ∇R^c(X_♮ | U) exactly."""
    d, n = sample.Z.shape
    out = np.empty((d, n))
    start = 0
    for k, a in enumerate(sample.A):
        c = a.shape[1]
        cols = sample.order[start:start + c]
        out[:, cols] = sample.U[k] @ np.linalg.solve(np.eye(c) / beta + a.T @ a, a.T).T
        start += c
    return out


def exact_a_nominal_gradient(sample: Theorem16Sample, eps: float) -> np.ndarray:
    """The "exact-A" nominal (the proof of Theorem 16, (264)–(311)): P_{U[K]}(βΔΠ*)Π + [U_kA_k(β^{-1}I + A_k*A_k)^{-1}]_k Π.

    Keeps the signal term of the proof exactly instead of Lemma 20's A_k/(1 + β^{-1}) (317)–(318), whose error
    is of order √(n/d) and does not vanish with σ. At Δ = 0 this equals ∇R^c(X_♮ | U) exactly.
    """
    beta = _beta(sample, eps)
    P = projection_operators(sample.U, sample.A, beta)
    return apply_projection(P, sample.labels, beta * sample.Delta) + _exact_signal_term(sample, beta)


@dataclass(frozen=True)
class Theorem16Residuals:
    """Measured residuals of Theorem 16 for one sample (operator norms unless stated).

    beta: β = p/(nε²). eta: the step size η of (236). grad_norm: ‖∇R^c(Z_o)‖.
    residual_nominal: ‖∇R^c(Z_o) − (315)‖ (the theorem's bound (316) is on this).
    residual_exact_a: ‖∇R^c(Z_o) − exact-A nominal‖.
    noise_retention: the fraction of noise energy a step keeps, ‖Z^+(X_♮ + Δ) − Z^+(X_♮)‖_F² / ‖Δ‖_F² with
    Z^+(Z) = Z − η∇R^c(Z | U).
    nominal_noise_retention: the same for the nominal step, ‖Δ − ηP_{U[K]}(βΔΠ*)Π‖_F² / ‖Δ‖_F².
    """

    beta: float
    eta: float
    grad_norm: float
    residual_nominal: float
    residual_exact_a: float
    noise_retention: float
    nominal_noise_retention: float

    @property
    def step_residual_nominal(self) -> float:
        """‖Z^+ − (237)‖ = η · residual_nominal (the quantity the bound (238) is on)."""
        return self.eta * self.residual_nominal

    @property
    def step_residual_exact_a(self) -> float:
        """‖Z^+ − (Z_o − η · exact-A nominal)‖ = η · residual_exact_a."""
        return self.eta * self.residual_exact_a


def theorem16_residuals(sample: Theorem16Sample, eps: float, eta: float | None = None) -> Theorem16Residuals:
    """Compare the exact gradient (31)/(235) and step (236) with Theorem 16's predictions (237), (315).

    eta defaults to β^{-1} (Remark 17). Uses ``compression_rate_grad`` of ``crate_theory.coding_rate``.
    Requires σ > 0 in the sample (the noise-retention ratio divides by ‖Δ‖_F²).
    """
    beta = _beta(sample, eps)
    eta = 1.0 / beta if eta is None else check_positive(eta, "eta")
    if sample.sigma <= 0:
        raise ValueError("sample: noise-retention needs a sample with sigma > 0")
    U = sample.U
    grad = compression_rate_grad(sample.Z, U, eps)
    grad_clean = compression_rate_grad(sample.X_nat, U, eps)
    P = projection_operators(U, sample.A, beta)
    noise_term = apply_projection(P, sample.labels, beta * sample.Delta)
    nominal = noise_term + sample.X_nat / (1 + 1 / beta)
    exact_a = noise_term + _exact_signal_term(sample, beta)
    delta_sq = np.sum(sample.Delta**2)
    noise_after = sample.Delta - eta * (grad - grad_clean)                 # Z^+(X_♮+Δ) − Z^+(X_♮)
    return Theorem16Residuals(
        beta=beta,
        eta=eta,
        grad_norm=float(np.linalg.norm(grad, 2)),
        residual_nominal=float(np.linalg.norm(grad - nominal, 2)),
        residual_exact_a=float(np.linalg.norm(grad - exact_a, 2)),
        noise_retention=float(np.sum(noise_after**2) / delta_sq),
        nominal_noise_retention=float(np.sum((sample.Delta - eta * noise_term) ** 2) / delta_sq),
    )


def _check_sizes(sigma, n, d):
    check_int(n, "n", minimum=1)
    check_int(d, "d", minimum=1)
    return check_positive(sigma, "sigma")


def remark17_bound(sigma: float, eps: float, n: int, d: int, K: int) -> float:
    """Remark 17's bound (241) on the residual (239) of one step with η = β^{-1}, up to an absolute constant:
    K^{3/2}σ² + σ²d/(nε²) + (nK²/d)(σ + √(n/d))ε² (from (238) with Kp = d and n ≤ d)."""
    sigma, eps = _check_sizes(sigma, n, d), check_positive(eps, "eps")
    check_int(K, "K", minimum=1)
    return float(K**1.5 * sigma**2 + sigma**2 * d / (n * eps**2) + n * K**2 / d * (sigma + np.sqrt(n / d)) * eps**2)


def remark17_eps(sigma: float, n: int, d: int, K: int) -> float:
    """Remark 17's optimal precision (242)–(243): ε = sqrt(σ d / (n K √(σ + √(n/d)))). Returns ε, not ε²."""
    sigma = _check_sizes(sigma, n, d)
    check_int(K, "K", minimum=1)
    return float(np.sqrt(sigma * d / (n * K * np.sqrt(sigma + np.sqrt(n / d)))))


def remark17_beta_inv(sigma: float, n: int, d: int) -> float:
    """Remark 17's β^{-1} at the optimal ε (245): β^{-1} = ε² nK/d = σ / √(σ + √(n/d)) (uses Kp = d)."""
    sigma = _check_sizes(sigma, n, d)
    return float(sigma / np.sqrt(sigma + np.sqrt(n / d)))


def remark17_residual_bound(sigma: float, n: int, d: int, K: int) -> float:
    """Remark 17's residual at the optimal ε, up to an absolute constant (244): Kσ(√K σ + √(σ + √(n/d)))
    (the bound (241) there is K^{3/2}σ² + 2Kσ√(σ + √(n/d)); (244) drops the 2)."""
    sigma = _check_sizes(sigma, n, d)
    check_int(K, "K", minimum=1)
    return float(K * sigma * (np.sqrt(K) * sigma + np.sqrt(sigma + np.sqrt(n / d))))
