# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 1 · Coding rates and their calculus
#
# CRATE's objective, the *sparse rate reduction* (17), is built from two Gaussian coding rates of a token set
# $Z = [z_1,\dots,z_n] \in \mathbb R^{d\times n}$ (equation numbers are those of the long paper, arXiv 2311.13110;
# docs/papers.md lists the works):
#
# * (8) $R(Z) = \tfrac12 \log\det(I_n + \alpha Z^*Z) = \tfrac12\log\det(I_d + \alpha ZZ^*)$, $\alpha = d/(n\varepsilon^2)$;
# * (12)–(13) $R^c(Z\mid U_{[K]}) = \sum_k R(U_k^*Z) = \tfrac12\sum_k \log\det(I_n + \beta (U_k^*Z)^*(U_k^*Z))$, $\beta = p/(n\varepsilon^2)$;
# * (14) $\Delta R = R - R^c$.
#
# This notebook checks, with the float64 reference `crate_theory`:
#
# 1. **Sylvester's identity** — the two log-determinants of (8) agree (for $n<d$ and $n>d$, over six orders of scale);
# 2. **$R^c$ is a sum of coding rates** (13), and how $R$, $R^c$, $\Delta R$ move as tokens leave the subspaces;
# 3. **rotation invariance** (Sec. 2.1, Fig. 5) — $\Delta R$ is invariant under a joint rotation, $\|Z\|_1$ is not;
# 4. **the gradients** (109) and (31)=(96) and **the Hessian operator** (127) against finite differences,
#    with the classic "V" of truncation vs rounding error;
# 5. **the Hessian spectrum** — the closed form used by the library against a dense eigendecomposition, inside
#    $[-\alpha/8, \alpha]$;
# 6. **the symmetries** (120)–(121), including (121) *as printed*, whose arguments are swapped;
#
# and ends with the audit's own measurements of the same statements: its `calculus` claims but Lemma 11's
# (`python -m verify --only calculus`; `lemma11-hessian-bound` is notebook 3's).

# %%
# %matplotlib inline
import tempfile

import matplotlib.pyplot as plt
import numpy as np

import crate_theory as ct
from crate_theory import synthetic
from verify.registry import all_claims, select
from verify.report import format_summary, format_table
from verify.runner import run_claims

rng = np.random.default_rng(0)
d, n, K, p, eps = 32, 20, 4, 8, 0.5
alpha, beta = d / (n * eps**2), p / (n * eps**2)
U = synthetic.orthonormal_bases(K, d, p, rng)  # K mutually orthogonal p-dim subspaces (Kp = d)
sample = synthetic.sample_tokens(U, n, rng, sigma=0.05)  # signal model (11): z_i = U_{s_i} α_i + σ w_i
Z = sample.Z
print(f"d={d}, n={n}, K={K}, p={p}, ε={eps}:  α = {alpha:.2f}, β = {beta:.2f}")


# %% [markdown]
# ## 1. Sylvester's identity for (8)
# `coding_rate` evaluates $R$ from the singular values of $Z$ (never forming $I+\alpha Z^*Z$). We compare it with
# both literal log-determinants, for a wide and a tall $Z$ and token scales from $10^{-3}$ to $30$.

# %%
def literal_rates(Z, eps):
    """½ logdet(I_n + αZ*Z) and ½ logdet(I_d + αZZ*), the two sides of (8), by LU (the definition, not the library)."""
    d_, n_ = Z.shape
    a = d_ / (n_ * eps**2)
    return (0.5 * np.linalg.slogdet(np.eye(n_) + a * Z.T @ Z)[1], 0.5 * np.linalg.slogdet(np.eye(d_) + a * Z @ Z.T)[1])


sylvester_gaps = []
for shape in [(d, n), (n, d)]:
    for scale in [1e-3, 1e-1, 1.0, 30.0]:
        W = scale * rng.standard_normal(shape)
        R = ct.coding_rate(W, eps)
        R_n, R_d = literal_rates(W, eps)
        sylvester_gaps.append(max(abs(R - R_n), abs(R - R_d)) / abs(R))
        print(f"shape {shape}, scale {scale:6g}:  R = {R:12.6f}   n×n logdet {R_n:12.6f}   d×d logdet {R_d:12.6f}")
sylvester_gap = max(sylvester_gaps)
print(f"max relative gap: {sylvester_gap:.1e}")

# %% [markdown]
# ## 2. $R^c$ is a sum of coding rates, and what the three rates measure
# With $\beta$ the $\alpha$ of the $p\times n$ matrix $U_k^*Z$, (13) is literally $\sum_k R(U_k^*Z)$.
# Then we push the tokens off their subspaces (noise level $\sigma$ in (11)): $R^c$, the cost of coding each
# projection separately, grows; $R$ grows too; the rate *reduction* $\Delta R$ — the volume of the whole set
# minus the volumes of its projections — is what CRATE's layers try to increase.

# %%
Rc = ct.compression_rate(Z, U, eps)
Rc_sum = sum(ct.coding_rate(U[k].T @ Z, eps) for k in range(K))
rc_sum_gap = abs(Rc - Rc_sum) / Rc
print(f"R^c = {Rc:.10f},  Σ_k R(U_k*Z) = {Rc_sum:.10f},  relative gap {rc_sum_gap:.1e}")

sigmas = np.logspace(-3, 0.5, 15)
curves = {"R": [], "R^c": [], "ΔR": []}
labels = sample.labels
for s in sigmas:
    Zs = synthetic.sample_tokens(U, n, np.random.default_rng(1), sigma=s, labels=labels).Z
    curves["R"].append(ct.coding_rate(Zs, eps))
    curves["R^c"].append(ct.compression_rate(Zs, U, eps))
    curves["ΔR"].append(ct.rate_reduction(Zs, U, eps))
fig, ax = plt.subplots(figsize=(5.5, 3.6))
for name, values in curves.items():
    ax.semilogx(sigmas, values, marker="o", markersize=3, label=name)
ax.set(xlabel="noise level σ in (11)", ylabel="nats", title=f"coding rates of n={n} tokens (ε={eps})")
ax.grid(alpha=0.3)
ax.legend();

# %% [markdown]
# ## 3. Rotation invariance (Sec. 2.1, Fig. 5)
# For an orthogonal $Q$, $\Delta R(QZ\mid QU_{[K]}) = \Delta R(Z\mid U_{[K]})$ exactly, while the sparsity
# $\|QZ\|_1$ changes: rate reduction alone cannot prefer axis-aligned (sparse) representations — the reason the
# objective (17) adds $-\lambda\|Z\|_1$.

# %%
Q = synthetic.random_orthogonal(d, rng)
E = np.eye(d)[None, :, :p]  # one axis-aligned p-dimensional subspace
Z_sparse = synthetic.sample_tokens(E, n, rng).Z  # sparse: d − p zero coordinates per token
dR, dR_rot = ct.rate_reduction(Z, U, eps), ct.rate_reduction(Q @ Z, Q @ U, eps)
invariance_gap = abs(dR_rot - dR) / abs(dR)
l1, l1_rot = np.abs(Z_sparse).sum(), np.abs(Q @ Z_sparse).sum()
print(f"ΔR = {dR:.12f}, after rotation {dR_rot:.12f}  (relative change {invariance_gap:.1e})")
print(f"‖Z‖_1 of axis-aligned tokens = {l1:.2f}, after rotation {l1_rot:.2f}  (×{l1_rot / l1:.2f})")

# %% [markdown]
# ## 4. Gradients (109), (31) and the Hessian operator (127) against finite differences
# Along a random direction $V$, the central difference $\frac{f(Z+hV)-f(Z-hV)}{2h}$ must match
# $\langle\nabla f(Z), V\rangle$ with an error $O(h^2)$ until rounding, $O(\epsilon_{\rm mach}/h)$, takes over; the
# same for the Hessian-vector product against differences of the gradient. The plot shows the expected "V".

# %%
V = rng.standard_normal(Z.shape)
hs = np.logspace(-9, -1, 17)
checks = {
    "∇R (109)": (lambda W: ct.coding_rate(W, eps), np.sum(ct.coding_rate_grad(Z, eps) * V)),
    "∇R^c (31)": (lambda W: ct.compression_rate(W, U, eps), np.sum(ct.compression_rate_grad(Z, U, eps) * V)),
}
fd_errors = {}
for name, (f, exact) in checks.items():
    fd_errors[name] = np.array([abs((f(Z + h * V) - f(Z - h * V)) / (2 * h) - exact) / abs(exact) for h in hs])
hvp = ct.coding_rate_hvp(Z, V, eps)
fd_errors["∇²R[V] (127)"] = np.array([
    np.linalg.norm((ct.coding_rate_grad(Z + h * V, eps) - ct.coding_rate_grad(Z - h * V, eps)) / (2 * h) - hvp)
    / np.linalg.norm(hvp) for h in hs])

fig, ax = plt.subplots(figsize=(5.5, 3.6))
for name, errs in fd_errors.items():
    ax.loglog(hs, errs, marker="o", markersize=3, label=name)
ax.loglog(hs, hs**2, "k--", lw=0.8, label="h²")
ax.set(xlabel="finite-difference step h", ylabel="relative error", title="analytic derivatives vs central differences")
ax.grid(alpha=0.3)
ax.legend(fontsize=8);
best_fd = {name: errs.min() for name, errs in fd_errors.items()}
print({k: f"{v:.1e}" for k, v in best_fd.items()})

# %% [markdown]
# ## 5. The Hessian spectrum
# `coding_rate_hessian_eigenvalues` gives all $dn$ eigenvalues of $\nabla^2R(Z)$ in closed form (from the singular
# values of $Z$); we compare it with `eigvalsh` of the dense $(dn)\times(dn)$ matrix on a small $Z$, at three scales.
# Every eigenvalue lies in $[-\alpha/8, \alpha]$, so $\|\nabla^2R\| \le \alpha$ — a fact notebook 3 uses to show that
# Lemma 11's bound $9\alpha/4$ is loose.

# %%
spectrum_gaps, extremes = [], []
for scale in [0.1, 1.0, 10.0]:
    W = scale * rng.standard_normal((6, 4))
    a_W = 6 / (4 * eps**2)
    closed = ct.coding_rate_hessian_eigenvalues(W, eps)
    dense = np.linalg.eigvalsh(ct.coding_rate_hessian(W, eps))
    spectrum_gaps.append(np.max(np.abs(closed - dense)) / a_W)
    extremes.append((closed.min() / a_W, closed.max() / a_W))
    print(f"scale {scale:5g}: eigenvalues/α in [{closed.min() / a_W:+.4f}, {closed.max() / a_W:+.4f}], "
          f"closed form vs dense: {spectrum_gaps[-1]:.1e}")
spectrum_gap = max(spectrum_gaps)

# %% [markdown]
# ## 6. Symmetries (120)–(121)
# For orthogonal $D$: $D\nabla R(Z) = \nabla R(DZ)$ (120), and the natural Hessian statement is
# $\langle D\Delta, \nabla^2R(DZ)(D\Delta)\rangle = \langle\Delta,\nabla^2R(Z)\Delta\rangle$. Eq. (121) *as printed*,
# $\langle D\Delta, \nabla^2R(Z)(D\Delta)\rangle = \langle\Delta,\nabla^2R(DZ)\Delta\rangle$, swaps the arguments and is
# false for a generic $D$ (its arguments are swapped).

# %%
D = synthetic.random_orthogonal(d, rng)
equivariance_gap = np.linalg.norm(D @ ct.coding_rate_grad(Z, eps) - ct.coding_rate_grad(D @ Z, eps)) / np.linalg.norm(
    ct.coding_rate_grad(Z, eps))
natural = (np.sum(D @ V * ct.coding_rate_hvp(D @ Z, D @ V, eps)), np.sum(V * ct.coding_rate_hvp(Z, V, eps)))
printed = (np.sum(D @ V * ct.coding_rate_hvp(Z, D @ V, eps)), np.sum(V * ct.coding_rate_hvp(D @ Z, V, eps)))
natural_gap = abs(natural[0] - natural[1]) / abs(natural[1])
printed_gap = abs(printed[0] - printed[1]) / max(map(abs, printed))
print(f"(120) ‖D∇R(Z) − ∇R(DZ)‖/‖∇R‖ = {equivariance_gap:.1e}")
print(f"(121) natural form: {natural[0]:.6f} vs {natural[1]:.6f}  (gap {natural_gap:.1e})")
print(f"(121) as printed:   {printed[0]:.6f} vs {printed[1]:.6f}  (gap {printed_gap:.2f})")

# %% [markdown]
# ## The audit's measurements (the `calculus` claims)
# The same statements as measured by `python -m verify` (quick mode, seed 0), each with its verdict. Lemma 11
# (`lemma11-hessian-bound`) is the subject of notebook 3.

# %%
with tempfile.TemporaryDirectory() as out:
    claims = [c for c in select(all_claims(), ["calculus"]) if c.id != "lemma11-hessian-bound"]
    audit = run_claims(claims, mode="quick", seed=0, output_dir=out, progress=False)
print(format_table(audit))
print(format_summary(audit))

# %% [markdown]
# ## Assertions (what CI checks)
# * identities computed two ways in float64 agree to $10^{-10}$ relative: the log-determinants of
#   well-conditioned SPD matrices carry rounding $\sim10^{-13}$, so $10^{-10}$ catches any formula error (which
#   is $O(1)$) with three orders of margin;
# * the best finite-difference error over the $h$ sweep is below $10^{-7}$: truncation $h^2$ meets rounding
#   $10^{-16}/h$ near $h\approx 10^{-5}$ at $\sim10^{-10}$ relative;
# * the rotation changes $\|Z\|_1$ by more than 10% (a random rotation spreads axis-aligned codes over all
#   coordinates; here ×1.95);
# * (121) as printed misses by more than 1% — a sign that the identity is wrong, not rounding;
# * the Hessian spectrum stays in $[-\alpha/8, \alpha]$ (with $10^{-12}$ rounding slack);
# * every audit claim returns the verdict its analysis expects.

# %%
assert sylvester_gap < 1e-10, sylvester_gap
assert rc_sum_gap < 1e-10, rc_sum_gap
assert invariance_gap < 1e-10, invariance_gap
assert l1_rot / l1 > 1.1, l1_rot / l1
assert all(err < 1e-7 for err in best_fd.values()), best_fd
assert spectrum_gap < 1e-10, spectrum_gap
assert all(-1 / 8 - 1e-12 <= lo and hi <= 1 + 1e-12 for lo, hi in extremes), extremes
assert equivariance_gap < 1e-10 and natural_gap < 1e-10, (equivariance_gap, natural_gap)
assert printed_gap > 1e-2, printed_gap
assert np.all(np.diff(curves["R^c"]) > 0), "R^c must grow as the tokens leave their subspaces"
assert all(o.matches for o in audit), [(o.claim.id, o.verdict) for o in audit if not o.matches]
