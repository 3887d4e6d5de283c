"""Compression told apart from collapse: the joint measure of "layers compress" (long paper, arXiv 2311.13110:
Sec. 2.1–2.5, eqs. 8, 12–14, Approximation 9; Figs. 14–15), column convention.

R^c(Z | U_[K]) of eq. (13) cannot by itself say that a layer compresses the tokens *onto their subspaces*:

* **Scale.** ``R^c(cZ | U) = ½ Σ_k Σ_i log(1 + βc²s_{ki}²)`` moves every singular value along the concave
  log(1 + x) while ε stays fixed. Even divided by the rate of isotropic tokens with the same norms (a yardstick at
  the same scale) the ratio is not scale-free: it tends to 1 as c → 0 (both rates become ½βc² times the same
  energy) and as c → ∞ (both count full ranks), and dips in between, so its value at one scale says as much about
  the scale as about the tokens (measured at d 32, n 64, K 4, ε = 1, 8 seeds: LayerNorm-ed mixture tokens × 0.25 /
  1 / 4 / 16 score 0.961 / 0.940 / 0.963 / 0.975).
* **Collapse.** R^c = Σ_k R(U_k*Z) is the sum of the rates of the projections: tokens that become alike lower
  every projection's rate, wherever the subspaces are. Isotropic tokens pulled half-way to one shared direction
  (norms kept) score 0.853, lower than tokens lying exactly on their own subspaces (0.924); 70% of the way, 0.550.

This module measures a token set ``Z`` (d, n) against bases ``U`` (K, d, p) so that neither can pass for
compression:

1. **Unit tokens.** Every rate is computed from ``Ẑ``, each column divided by its norm (zero columns stay zero):
   Approximation 9's hypothesis (unit-norm columns) and App. A.2's ``diag(Z*Z) = 1``. ``Ẑ`` is the same for ``Z``
   and ``cZ`` (c > 0), and for any per-token rescaling (LayerNorm gains, ISTA's shrink), so every ratio below is
   exactly invariant to the tokens' scale. ε is then in units of the token norm: the default 0.1 is the authors'
   measurement precision (ε² = 0.01), which they too apply to unit-norm vectors.
2. **Two yardsticks** (Monte-Carlo means over ``draws`` sets): isotropic unit tokens (uniform directions), and
   the tokens themselves in a uniformly random orientation ``OẐ`` (O Haar-orthogonal). Since (13) is invariant to
   the joint rotation Z → OZ, U → OU (Sec. 2.1), ``E_O R^c(OẐ | U) = E_O R^c(Ẑ | O*U)`` is the rate the tokens have
   in randomly placed copies of the same heads: a function of the Gram matrix Ẑ*Ẑ alone, blind to where the
   subspaces are. The R^c of unit tokens relative to isotropic ones factorises exactly::

       R^c(Ẑ|U) / E R^c(iso|U)  =  [R^c(Ẑ|U) / E_O R^c(OẐ|U)]  ×  [E_O R^c(OẐ|U) / E R^c(iso|U)]
            relative                        specific                            spread

   * ``specific`` — compression onto *these* subspaces: 1 in expectation for tokens unrelated to U (isotropic,
     or collapsing onto a direction unrelated to U), below 1 when the tokens sit in U's subspaces more than in
     randomly placed ones;
   * ``spread`` — how unlike each other the tokens are, at the heads' resolution (same K, p, β, ε): 1 for
     isotropic tokens, and equally for tokens spread over K orthogonal subspaces with Kp = d; below 1 when the
     tokens bunch together (a shared direction, clusters, a common mean).

   How the two means are drawn ("Drawing the yardsticks" below) changes their Monte-Carlo error, never their
   expectation.
3. **Alignment** — each token's energy fraction ``‖P_k z_i‖²/‖z_i‖²`` in its own subspace (its label when known,
   else the subspace holding most of its energy), P_k the orthogonal projector onto span(U_k).

4. **Rate reduction** — the paper's own objective on the unit tokens, ``ΔR(Ẑ | U) = R(Ẑ) − R^c(Ẑ | U)`` (eqs. 8,
   13–14; in nats), reported beside every judgement: compression onto the subspaces lowers R^c, collapse lowers R
   more (Sec. 2.1, Remark 3: the objective wants the features "diverse and expanded within their supporting
   subspaces, and in particular not collapsed to individual points").
5. **Non-negative codes** — ``nonnegative`` is 1 when every entry of Z is ≥ 0 (the ISTA block's output, eq. 44),
   else 0: the one extrinsic fact the rule reads, to hand a step into the non-negative orthant to the sparsity
   claims (``verify.joint``).

``verify.joint.compresses`` decides "A compresses relative to B" on these: ``specific`` lower, ``alignment``
higher, and ``spread`` not lower *by more than compression itself can lower it* — `collapse_floor`.

**The collapse floor.** Moving tokens exactly onto their subspaces is what compression does to the extreme (the
signal model (10): z_i = U_{s_i} α_i), yet it lowers ``spread`` wherever the subspaces do not share the tokens as
isotropic tokens share the space. (10) leaves free the joint law of the memberships s_i (Sec. 2.1: "the joint
distribution of such Z is underspecified": class shares, absent classes, how many subspaces one input's tokens
occupy) and the codes' covariance inside each subspace; the coherence of the U_k moves the tokens' Gram matrix
too. A drop of spread is evidence of collapse only beyond what these can cause, and `collapse_floor` bounds that
at the size measured (d, n tokens per input, K heads of dimension p, ε):

1. *How the heads lie does not matter.* ``E_O R^c(OẐ | U) = Σ_k E_O R(U_k* O Ẑ)``, and for Haar O each term has
   the same expectation for every orthonormal U_k: the expected spread is a function of the tokens' Gram matrix
   alone, whatever the heads' mutual coherence. `collapse_floor` measures against the K coordinate blocks.
2. *Every token of an input on one subspace is the worst membership law.* As a function of M = ẐẐ*,
   f(M) = E_O R^c(OẐ | U) is concave (a log-determinant of a linear image of M, averaged) and invariant to
   rotations of M, hence Schur-concave in M's eigenvalues. Unit codes a_i ∈ R^p placed by memberships s_i on
   mutually orthogonal subspaces give M ≅ ⊕_k A_k with A_k = Σ_{s_i = k} a_i a_i*; the same codes all on one
   subspace give Σ_k A_k (⊕ 0). The eigenvalues of ⊕_k A_k are majorised by those of Σ_k A_k (the top eigenvectors
   of the A_k, m_k of each with Σ m_k = m, span at most m dimensions, on which Σ_k A_k holds at least their
   eigenvalues' sum; the traces agree), so f(⊕_k A_k) ≥ f(Σ_k A_k) for every draw of the codes: no law of the
   memberships — shares, absent classes, any number of subspaces per input, drawn per token or per input — lowers
   the spread more than one subspace per input, with any codes. Coherent subspaces escape this draw-by-draw
   argument (one direction can then hold energy of several subspaces), but their tokens' covariance
   Σ_k π_k U_kU_k*/p still has eigenvalues ≤ 1/p summing to 1, majorised by one subspace's; measured, largest
   principal cosines 0.3–0.8 lower the spread less than one subspace per input
   (tests/theory/test_protocol.py, tests/verify/test_joint_beyond.py).
3. *Codes isotropic inside the subspace.* (10)'s codes are zero-mean Gaussians of any covariance on span(U_k); one
   concentrated on a few directions is tokens bunched inside their subspace, whose limit — a class on one point —
   Remark 3 excludes ("diverse and expanded within their supporting subspaces, and in particular not collapsed to
   individual points"). The construction takes α_i ~ N(0, I_p), the most expanded: bunching inside a subspace is
   collapse once it lowers the spread beyond that.

So ``collapse_floor(d, n, K)`` (``memberships="any"``, `MEMBERSHIPS`) is the mean drop of spread from isotropic
unit tokens to n unit tokens with N(0, I_p) codes on one subspace — by 1. a function of d, n, p and ε alone —,
by Monte-Carlo with its delta-method standard error; the floor is its upper 95% bound. Measured (ε = 0.1): 0.015 at
d 96, n 5, K 4 (the digits CRATE), 0.093 at d 96, n 17, 0.186 at d 32, n 64, K 4, 0.203 at d 128, n 196, K 8 and
0.198 at d 576, n 197, K 12 (projecting out the all-ones direction, as LayerNorm centres every token, moves these
by less than 0.001). Where the memberships are known to be drawn i.i.d. with equal shares on orthogonal subspaces
(``memberships="balanced"``: the ideal stacks' mixture (11)), the floor is that law's drop, 0 in expectation, so
its upper bound is its Monte-Carlo error: 0.0005 at d 32, n 64, K 4, 0.0002 at d 128, n 196, K 8. (Centring such
tokens, as LayerNorm does, would lower it by 0.0017 at d 32, n 64; of the ideal stacks' comparisons only layer 1's
MSSA step starts from centred tokens, Z^1 = LN of the data, which favours the step, never the reverse.)

**The orthant floor.** A ReLU (the ISTA block's output, eq. 44) pulls the tokens towards the orthant's diagonal
and lowers the spread by itself (ReLU-ed isotropic tokens: 0.054 at d 32, n 64); for exact-subspace tokens by how
much depends on how their subspaces lie relative to the coordinate axes, so `CollapseFloor.orthant_floor` is the
largest drop over the construction's ReLU with its subspaces Haar-oriented and spanned by coordinate axes
(`ORIENTATIONS`; at d 32, n 64, K 4: 0.115 and 0.219 for one subspace per input, 0.055 and 0.019 for balanced
memberships). Every token onto one shared direction drops the spread by 0.80 at d 32, n 64 (0.73 at d 96, n 5),
each class onto one point of its subspace by 0.43 (0.34): beyond every floor, with a ReLU after them too
(``benchmarks/joint_calibration.py``).

Why ``spread`` and not the whole rate R (eq. 8) for the collapse check: R works at a different operating point
(per-direction isotropic eigenvalue 1/ε², the heads' 1/(Kε²)), so its changes are not commensurate with R^c's; and
it sees LayerNorm's removal of the mean direction as lost rate (unit LayerNorm-ed tokens on their subspaces,
8 seeds: R 0.973 ± 0.009 of isotropic at ε = 0.1, spread 0.998 ± 0.002).

**Drawing the yardsticks.** Each yardstick's mean is a sum over heads of expectations, and each head's term depends
on one random object only, so each head can be drawn apart:

* *Isotropic.* For a unit isotropic token x̂ and orthonormal Q_k (d × p), Q_k*x̂ has the law of any p coordinates of
  x̂: head k's rate is taken on the coordinates kp … kp + p − 1 (mod d) of each isotropic set (`head_blocks`), no
  product with U needed; E R^c(iso | U) depends on K, p, n and ε alone, whatever the heads' coherence. The
  isotropic alignment does need U: it is the mean over at most `ALIGNMENT_TOKENS` tokens of each set (its expectation
  does not depend on how many; its standard error per input, 2 sets, is 0.0004 at d 768, K 12 and 0.003 at d 32,
  K 4, from per-token deviations of 0.0085 and 0.069).
* *Rotated.* With ẐẐ* = EΛE* (Λ = diag(λ_1 … λ_d), of which at most r = min(d, n) are non-zero) and O Haar,
  Q_k*OẐẐ*O*Q_k = V_k*ΛV_k with V_k = E*O*Q_k a uniformly random d × p frame (Haar O times fixed orthonormal
  columns), so ``E_O R^c(OẐ | U) = Σ_k E_V ½ logdet(I_p + β V*ΛV)``: the spectrum of the tokens' Gram matrix and
  one random p-dimensional subspace per head, for heads of any coherence. `rotated_rates` draws each head's frame
  on its own, V_k = orth(G_k) for a Gaussian d × p matrix G_k (`rotation_frames`), where the rotation drew all of
  them at once (V = E*O*Q, a QR of a d × d matrix and a rotation of the d × n tokens per set). Rows of V_k on the
  zero eigenvalues do not enter V*ΛV, so only the r rows of the non-zero ones matter, with G_k*G_k: the torch
  measure keeps them and replaces the other d − r rows by the triangular factor of their QR (Bartlett: independent
  χ_{d−r−j} on the diagonal, Gaussians above), which leaves both laws unchanged. Cost: the spectrum once per set
  (the smaller Gram matrix and its eigenvalues), then O(K r p²) per frame set.

  *Its Monte-Carlo error.* Frames drawn jointly give every eigendirection i the same total energy
  ``Σ_k ‖row_i V_k‖² = 1`` (Kp = d); independent ones let it vary, and the rate with it (measured: a set's standard
  deviation 2–9 times the rotation's at d 32–768). Each head's rate is therefore corrected by the control variate
  ``c_k = Σ_i φ_i (‖row_i V_k‖² − p/d)``: the rows of a uniformly random frame are exchangeable with squared norms
  summing to p, so ``E ‖row_i V_k‖² = p/d`` exactly, and φ depends on Λ alone, so ``E c_k = 0`` and the
  expectation is ``E_O R^c(OẐ | U)`` exactly, whatever φ. φ sets how much error it removes: φ_i is the first-order
  change of the head's rate with the energy ``r_i = ‖v_i‖²`` its frame gives direction i,
  ``½βλ_i v_i*(I + βV*ΛV)^{-1}v_i / r_i``, at the deterministic equivalent of that resolvent (Sherman–Morrison:
  ``v_i*T v_i = q_i/(1 + βλ_i q_i)``, ``q_i ≈ t p/d`` with ``t = tr T / p``; tracing ``T(I + βV*ΛV) = I`` gives
  ``t (1 + (β/d) Σ_i λ_i / (1 + βλ_i t p/d)) = 1``, whose root `_control_weights` finds by bisection):
  ``φ_i = ½βλ_i t / (1 + βλ_i t p/d)``. With it a set's standard deviation is 0.8–1.7 times the rotation's over
  isotropic, collapsing, low-rank and power-law tokens at d 32–768 (``python -m benchmarks.joint_measure``), and for
  jointly drawn frames (Kp = d, orthonormal heads) Σ_k c_k = 0: the corrected formula then gives the rotated set's
  R^c exactly (tests/theory/test_protocol.py).

``U`` need not be orthonormal (a trained model's U is not): every rate uses an orthonormal basis of each span, the
projectors ``U_k U_k^+``, so neither the tokens' norms nor ‖U‖ (weight decay) enters. The subspaces must be able to
hold every direction, K·p ≥ d (every CRATE has p = d/K): with K·p < d, (13) is lowered by moving energy *out of*
their union, and ``specific`` with it — tokens placed exactly on K orthogonal subspaces of dimension p in
d = Kp + 1 score ``specific`` > 1.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ._checks import as_float_array, check_bases, check_int, check_labels, check_positive, check_same_size, check_tokens
from .coding_rate import coding_rate, compression_rate, project_onto_bases, rate_reduction
from .synthetic import as_generator, normalize_columns, random_orthogonal

__all__ = [
    "OFFICIAL_EPS",
    "official_compression_rate",
    "subspace_projectors",
    "subspace_energy",
    "own_subspace",
    "alignment",
    "isotropic_tokens",
    "rotated_tokens",
    "ALIGNMENT_TOKENS",
    "head_blocks",
    "rotation_frames",
    "unit_spectrum",
    "rotated_rates",
    "CompressionProfile",
    "profile_from_yardsticks",
    "compression_profile",
    "MEMBERSHIPS",
    "ORIENTATIONS",
    "CALIBRATION_COSINE",
    "relu_construction",
    "class_shares",
    "largest_principal_cosine",
    "coherent_bases",
    "subspace_tokens",
    "CollapseFloor",
    "collapse_floor",
]

OFFICIAL_EPS = 0.1
"""ε of the authors' measurement code (ε² = 0.01), on unit-norm vectors; the default ε of the joint measure."""


def _tokens_bases(Z, U) -> tuple[np.ndarray, np.ndarray]:
    Z = check_tokens(Z, batch=False)
    return Z, check_bases(U, Z.shape[0])


def official_compression_rate(Z, U, eps=OFFICIAL_EPS) -> float:
    """R^c of per-subspace unit-norm codes — the authors' figure protocol: ``Σ_k ½ logdet(I + β Ŵ_k*Ŵ_k)`` with
    ``Ŵ_k`` the columns of ``U_k*Z`` scaled to unit norm, β = p/(nε²) (eqs. 12–13; ε = 0.1 by default).

    Args:
        Z: tokens (d, n); U: bases (K, d, p); eps: ε > 0.
    """
    Z, U = _tokens_bases(Z, U)
    eps = check_positive(eps, "eps")
    return float(np.sum(coding_rate(normalize_columns(project_onto_bases(Z, U)), eps)))


def subspace_projectors(U) -> np.ndarray:
    """Orthogonal projectors onto span(U_k), (K, d, d): ``U_k U_k^+`` (= U_kU_k* for orthonormal U_k)."""
    U = check_bases(U)
    return np.einsum("kdp,kpe->kde", U, np.linalg.pinv(U))


def subspace_energy(Z, U) -> np.ndarray:
    """Fractions ``‖P_k z_i‖² / ‖z_i‖²`` of every token's energy in every subspace, (K, n); zero tokens give 0."""
    Z, U = _tokens_bases(Z, U)
    return _energy(Z, subspace_projectors(U))


def _energy(Z: np.ndarray, P: np.ndarray) -> np.ndarray:
    """subspace_energy of a stack Z (..., d, n) with projectors P (K, d, d): (..., K, n)."""
    norms2 = np.sum(Z * Z, axis=-2)[..., None, :]
    Zk = Z[..., None, :, :]
    energy = np.sum((P @ Zk) * Zk, axis=-2)  # z*P_k z = ‖P_k z‖² (P_k symmetric, idempotent)
    return np.divide(energy, norms2, out=np.zeros(energy.shape), where=norms2 > 0)


def own_subspace(Z, U) -> np.ndarray:
    """Each token's own subspace when no labels are known: the k with the largest energy fraction, (n,)."""
    return np.argmax(subspace_energy(Z, U), axis=0)


def _labels(Z: np.ndarray, U: np.ndarray, labels) -> np.ndarray | None:
    if labels is None:
        return None
    labels = check_labels(labels, Z.shape[1])
    if labels.size and labels.max() >= U.shape[0]:
        raise ValueError(f"labels must be < K = {U.shape[0]}, got maximum {labels.max()}")
    return labels


def _own_energy(energy: np.ndarray, labels: np.ndarray | None) -> np.ndarray:
    """The own-subspace fraction of every token from energies (..., K, n): labels, or the largest fraction."""
    if labels is None:
        return energy.max(axis=-2)
    return np.take_along_axis(energy, np.broadcast_to(labels, energy.shape[:-2] + (1, labels.size)), axis=-2)[..., 0, :]


def alignment(Z, U, labels=None) -> float:
    """Mean over tokens of the energy fraction in the token's own subspace, ``‖P_{s_i} z_i‖²/‖z_i‖²`` ∈ [0, 1]: 1 for
    tokens of the signal model (10), ``z_i = U_{s_i} α_i`` (eq. 10).

    Args:
        Z: tokens (d, n); U: bases (K, d, p); labels: memberships s_i (n,), or None for :func:`own_subspace`.
    """
    Z, U = _tokens_bases(Z, U)
    if not Z.shape[1]:
        return float("nan")
    return float(np.mean(_own_energy(_energy(Z, subspace_projectors(U)), _labels(Z, U, labels))))


def _draws(draws: int | None) -> int:
    return 1 if draws is None else check_int(draws, "draws", minimum=1)


def isotropic_tokens(Z, seed=None, draws: int | None = None) -> np.ndarray:
    """The isotropic yardstick: uniformly random directions with the column norms of ``Z`` (d, n) — tokens with no
    subspace structure, the ceiling of R^c (eq. 13); with ``draws``, a stack (draws, d, n) of independent sets."""
    Z = check_tokens(Z, batch=False)
    sets = normalize_columns(as_generator(seed).standard_normal((_draws(draws),) + Z.shape)) * np.linalg.norm(Z, axis=0)
    return sets[0] if draws is None else sets


def rotated_tokens(Z, seed=None, draws: int | None = None) -> np.ndarray:
    """The rotation yardstick by its definition: ``OZ`` for a Haar-random orthogonal O (d × d) — the same tokens
    (the same Gram matrix Z*Z) in a uniformly random orientation, so that ``R^c(OZ | U) = R^c(Z | O*U)`` (Sec. 2.1:
    (13)–(14) are invariant to joint rotations); with ``draws``, a stack (draws, d, n) of independent rotations.
    The measure draws its mean from the spectrum instead (`rotated_rates`, module docstring "Drawing the
    yardsticks"); this is what the tests and ``benchmarks.joint_measure`` hold it to."""
    Z = check_tokens(Z, batch=False)
    rng = as_generator(seed)
    sets = np.stack([random_orthogonal(Z.shape[0], rng) @ Z for _ in range(_draws(draws))])
    return sets[0] if draws is None else sets


ALIGNMENT_TOKENS = 256
"""Tokens of each isotropic set whose energies give the isotropic alignment (module docstring, "Drawing the
yardsticks"): its expectation does not depend on the count, and its codes against U are the one product with the
heads the isotropic yardstick needs."""


def head_blocks(d: int, K: int, p: int) -> np.ndarray:
    """The coordinates on which the isotropic yardstick takes head k's rate, (K, p): ``kp … kp + p − 1`` modulo d
    (the K coordinate blocks when Kp = d)."""
    return (np.arange(K)[:, None] * p + np.arange(p)) % d


def _head_rates(X: np.ndarray, K: int, p: int, eps: float) -> np.ndarray:
    """R^c (13) of token sets X (m, d, n), head k taking the coordinates `head_blocks` gives it (the K coordinate
    blocks when Kp = d): (m,)."""
    return coding_rate(X[:, head_blocks(X.shape[1], K, p)], eps).sum(axis=-1)


def rotation_frames(d: int, K: int, p: int, seed=None, draws: int | None = None) -> np.ndarray:
    """The rotation yardstick's random orientations: K standard Gaussian d × p matrices G_k per set, (K, d, p), or
    with ``draws`` (draws, K, d, p). The span of each is a uniformly random p-dimensional subspace of R^d (the
    law of O*Q_k for a Haar O), read by `rotated_rates` in the eigenbasis of the tokens' Gram matrix."""
    d, K, p = check_int(d, "d", minimum=1), check_int(K, "K", minimum=1), check_int(p, "p", minimum=1)
    if p > d:
        raise ValueError(f"p must be <= d = {d}, got {p}")
    frames = as_generator(seed).standard_normal((_draws(draws), K, d, p))
    return frames[0] if draws is None else frames


def unit_spectrum(Z) -> np.ndarray:
    """The eigenvalues of ẐẐ* for the unit tokens Ẑ of Z (d, n) that can be non-zero: r = min(d, n) of them,
    ascending, from the smaller Gram matrix (rounding below 0 set to 0), (r,). They sum to the number of non-zero
    tokens."""
    unit = normalize_columns(check_tokens(Z, batch=False))
    d, n = unit.shape
    gram = unit @ unit.T if n >= d else unit.T @ unit
    return np.clip(np.linalg.eigvalsh(gram), 0.0, None)


def _control_weights(spectrum: np.ndarray, d: int, p: int, beta: float) -> np.ndarray:
    """φ_i = ½βλ_i t / (1 + βλ_i t p/d) of the control variate (module docstring), t ∈ (0, 1] the root of
    h(t) = t (1 + (β/d) Σ_i λ_i / (1 + βλ_i t p/d)) = 1 (h increases from h(0) = 0 to h(1) ≥ 1; 64 halvings)."""
    low, high = 0.0, 1.0
    for _ in range(64):
        t = (low + high) / 2
        if t * (1 + beta / d * np.sum(spectrum / (1 + beta * spectrum * t * p / d))) < 1:
            low = t
        else:
            high = t
    t = (low + high) / 2
    return 0.5 * beta * spectrum * t / (1 + beta * spectrum * t * p / d)


def rotated_rates(spectrum, frames, d: int, n: int, eps) -> np.ndarray:
    """The rotation yardstick, one estimate of ``E_O R^c(OẐ | U)`` per frame set (module docstring, "Drawing the
    yardsticks"): ``Σ_k [½ logdet(I_p + β V_k*ΛV_k) − Σ_i φ_i (‖row_i V_k‖² − p/d)]`` with V_k an orthonormal basis
    of span(G_k) and β = p/(nε²) (eq. 12).

    Args:
        spectrum: the r = min(d, n) eigenvalues of ẐẐ* that can be non-zero (`unit_spectrum`), (r,);
        frames: (draws, K, m, p), r ≤ m ≤ d: the first r rows of each frame in the eigenbasis of ``spectrum`` (in its
            order), the other m − r in that of eigenvalue 0 (`rotation_frames`: m = d; any frame of full column rank,
            only its span is used); d, n: the tokens' dimension and number; eps: ε > 0.

    Returns:
        (draws,).
    """
    spectrum = as_float_array(spectrum, "spectrum", ndim=1)
    frames = as_float_array(frames, "frames", ndim=4, shape_hint="(draws, K, m, p)")
    d, n, eps = check_int(d, "d", minimum=1), check_int(n, "n", minimum=1), check_positive(eps, "eps")
    r, (_, _, m, p) = spectrum.size, frames.shape
    if r != min(d, n) or not p <= m <= d or r > m or np.any(spectrum < 0):
        raise ValueError(f"spectrum must hold min(d, n) = {min(d, n)} non-negative eigenvalues and frames (draws, K, m, "
                         f"p) with r <= m <= d, p <= m; got {r} and shape {frames.shape}")
    beta = p / (n * eps**2)
    top = np.linalg.qr(frames)[0][..., :r, :]  # rows of the orthonormal frame V_k on the non-zero eigenvalues
    inner = np.swapaxes(top, -1, -2) @ (spectrum[:, None] * top)  # V_k*ΛV_k, (draws, K, p, p)
    rates = 0.5 * np.linalg.slogdet(np.eye(p) + beta * inner)[1]
    control = (np.sum(top**2, axis=-1) - p / d) @ _control_weights(spectrum, d, p, beta)
    return (rates - control).sum(axis=-1)


@dataclass
class CompressionProfile:
    """The joint measure of one token set (module docstring; :func:`compression_profile`).

    Attributes:
        relative: R^c(Ẑ | U) / E R^c(isotropic unit tokens | U) — R^c against the isotropic yardstick, scale-free;
            ``= specific × spread``, so it cannot tell the two apart.
        specific: R^c(Ẑ | U) / E_O R^c(OẐ | U) — compression onto these subspaces (1 = no more than in random ones).
        spread: E_O R^c(OẐ | U) / E R^c(isotropic | U) — 1 = as unlike each other as isotropic tokens; < 1 = collapse.
        alignment: mean own-subspace energy fraction (1 = on the subspaces).
        isotropic_alignment: the same for the isotropic yardstick (its floor; p/d for given labels).
        rate_reduction: ΔR(Ẑ | U) = R(Ẑ) − R^c(Ẑ | U) of the unit tokens (eqs. 8, 13–14), in nats: the paper's
            objective (without its sparsity term), reported beside the rule's label.
        nonnegative: 1.0 when every entry of Z is ≥ 0 (non-negative codes, as the ISTA block outputs: eq. 44), else 0.
    """

    relative: float
    specific: float
    spread: float
    alignment: float
    isotropic_alignment: float
    rate_reduction: float
    nonnegative: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _stack(sets, name: str, shape: tuple[int, int]) -> np.ndarray:
    sets = check_tokens(sets, name)
    if sets.ndim != 3:
        raise ValueError(f"{name} must be a stack (draws, d, n) of token sets, got shape {sets.shape}")
    check_same_size(sets.shape[1], shape[0], name, "rows (d)")
    check_same_size(sets.shape[2], shape[1], name, "columns (n)")
    return sets


def profile_from_yardsticks(Z, U, eps, isotropic, frames, labels=None) -> CompressionProfile:
    """The joint measure of ``Z`` given its yardsticks' random draws (deterministic; :func:`compression_profile`
    draws them): R^c (eqs. 12–13) of the unit tokens (Approximation 9) against the isotropic sets' rates and the
    rotated rates of the frames (module docstring, "Drawing the yardsticks").

    Args:
        Z: tokens (d, n); U: bases (K, d, p), any basis of each span; eps: ε > 0 of β = p/(nε²) (eq. 12);
        isotropic: (draws, d, n) isotropic token sets (:func:`isotropic_tokens`), normalised to unit columns;
        frames: (draws', K, m, p) orientations of the rotation yardstick (:func:`rotation_frames`, m = d; see
            :func:`rotated_rates`);
        labels: memberships (n,) or None (:func:`own_subspace`) for the alignment.
    """
    Z, U = _tokens_bases(Z, U)
    (d, n), (K, _, p) = Z.shape, U.shape
    if K * p < d:
        raise ValueError(f"U must hold every direction, K·p >= d (module docstring); got K·p = {K * p} < d = {d}")
    eps = check_positive(eps, "eps")
    labels = _labels(Z, U, labels)
    isotropic = normalize_columns(_stack(isotropic, "isotropic", Z.shape))
    frames = as_float_array(frames, "frames", ndim=4, shape_hint="(draws, K, m, p)")
    if frames.shape[1] != K or frames.shape[3] != p:
        raise ValueError(f"frames must be (draws, K = {K}, m, p = {p}), got shape {frames.shape}")
    Q = np.linalg.qr(U)[0]  # Q_k: an orthonormal basis of span(U_k)
    unit = normalize_columns(Z)
    rate = float(compression_rate(unit, Q, eps))
    iso_rate = float(np.mean(_head_rates(isotropic, K, p, eps)))
    rot_rate = float(np.mean(rotated_rates(unit_spectrum(Z), frames, d, n, eps)))
    P, few = subspace_projectors(U), min(n, ALIGNMENT_TOKENS)
    iso_own = _own_energy(_energy(isotropic[..., :few], P), None if labels is None else labels[:few])
    return CompressionProfile(relative=rate / iso_rate, specific=rate / rot_rate, spread=rot_rate / iso_rate,
                              alignment=float(np.mean(_own_energy(_energy(Z, P), labels))),
                              isotropic_alignment=float(np.mean(iso_own)),
                              rate_reduction=float(rate_reduction(unit, Q, eps)),
                              nonnegative=float(np.all(Z >= 0)))


def compression_profile(Z, U, eps=OFFICIAL_EPS, *, labels=None, draws: int = 8, seed=None) -> CompressionProfile:
    """The joint measure of one token set: ``specific``, ``spread`` and ``alignment`` (module docstring) — R^c of
    Eqs. (12)–(13) on unit tokens (Approximation 9) against two yardsticks.

    Args:
        Z: tokens (d, n); U: bases (K, d, p); eps: ε of the rates of unit tokens (default the authors' 0.1);
        labels: memberships (n,) or None (:func:`own_subspace`); draws: sets per yardstick (their Monte-Carlo error
        shrinks as 1/√draws); seed: int, None or Generator.

    Returns:
        :class:`CompressionProfile`.
    """
    Z, U = _tokens_bases(Z, U)
    rng = as_generator(seed)
    K, d, p = U.shape
    return profile_from_yardsticks(Z, U, eps, isotropic_tokens(Z, rng, draws), rotation_frames(d, K, p, rng, draws),
                                   labels)


# ------------------------------------------------------------------------------------------------ the collapse floor
MEMBERSHIPS = {"any": "one subspace per input", "balanced": "balanced per token"}
"""Membership law → the exact-subspace construction whose spread drop is `collapse_floor`'s floor (module
docstring, "The collapse floor"): ``any`` — nothing known of the memberships (every trained model, any input):
every token of an input on one subspace, the worst case over every law; ``balanced`` — memberships known to be
drawn i.i.d. per token with equal shares, on mutually orthogonal subspaces (the ideal stacks' mixture (11))."""
ORIENTATIONS = ("generic", "axis-aligned")
"""How the construction's subspaces lie relative to the coordinate axes when a ReLU meets them (the orthant floor):
Haar-random, or spanned by coordinate axes (an orthogonal dictionary D = I)."""
CALIBRATION_COSINE = 0.3
"""Largest principal cosine between two subspaces of the coherent calibration case (`coherent_bases`; the
default there): mildly coherent, as trained heads are (Sec. 2.1 asks for incoherent subspaces, not orthogonal ones)."""


def relu_construction(memberships: str, orientation: str) -> str:
    """The name of the ReLU of `MEMBERSHIPS` [memberships]'s construction with subspaces of ``orientation``."""
    return f"ReLU of {MEMBERSHIPS[memberships]}, {orientation}"


def class_shares(K: int, balanced: bool = True) -> np.ndarray:
    """Class shares of the calibration cases, (K,): 1/K each, or (2, 1, …, 1)/(K + 1) — one class twice as
    common as each other (0.4/0.2/0.2/0.2 at K = 4)."""
    K = check_int(K, "K", minimum=1)
    weights = np.ones(K) if balanced else np.concatenate([[2.0], np.ones(K - 1)])
    return weights / weights.sum()


def largest_principal_cosine(U) -> float:
    """The largest cosine of a principal angle between two distinct subspaces span(U_j), span(U_k) of bases
    (K, d, p): the largest singular value of Q_j*Q_k over j ≠ k, Q_k an orthonormal basis (0 for K = 1)."""
    Q = np.linalg.qr(check_bases(U))[0]
    j, k = np.triu_indices(Q.shape[0], 1)
    if not j.size:
        return 0.0
    return float(np.linalg.norm(np.swapaxes(Q[j], 1, 2) @ Q[k], 2, axis=(1, 2)).max())  # all pairs in one batch


def coherent_bases(K: int, d: int, p: int, cosine: float = CALIBRATION_COSINE, seed=None) -> np.ndarray:
    """Randomly oriented, coherent subspaces whose largest principal cosine is ``cosine``, (K, d, p) with
    orthonormal columns: K mutually orthogonal blocks Q_k (a Haar-random frame, Kp ≤ d) each tilted by a Gaussian
    G_k, ``U_k = orth(Q_k + t G_k)``, with t found by bisection so that `largest_principal_cosine` equals ``cosine``
    (to 1e-9). Unlike `crate_theory.synthetic.orthonormal_bases`' exact coherence (every principal angle equal,
    which needs (K + 1)p ≤ d), only the largest cosine is set, and Kp = d is allowed; a tilt of any size reaches no
    more than the largest cosine of independent random subspaces (about 0.85 at d 32, p 8)."""
    K, d, p = check_int(K, "K", minimum=2), check_int(d, "d", minimum=1), check_int(p, "p", minimum=1)
    if K * p > d:
        raise ValueError(f"coherent_bases needs K·p <= d, got K·p = {K * p} > d = {d}")
    cosine = check_positive(cosine, "cosine")
    if cosine >= 1:
        raise ValueError(f"cosine must lie in (0, 1), got {cosine}")
    rng = as_generator(seed)
    blocks = random_orthogonal(d, rng)[:, :K * p].reshape(d, K, p).transpose(1, 0, 2)
    tilt = rng.standard_normal((K, d, p)) / np.sqrt(d)

    def bases(t: float) -> np.ndarray:
        return np.linalg.qr(blocks + t * tilt)[0]

    low, high = 0.0, 1.0
    while largest_principal_cosine(bases(high)) < cosine:
        low, high = high, 2 * high
        if high > 1e6:  # a Gaussian tilt of unbounded size leaves independent random subspaces
            raise ValueError(f"cosine {cosine} is above what random subspaces of d = {d}, p = {p} reach")
    while high - low > 1e-12 * high:
        middle = (low + high) / 2
        low, high = (middle, high) if largest_principal_cosine(bases(middle)) < cosine else (low, middle)
    return bases(high)


def subspace_tokens(U, n: int, shares=None, seed=None, sets: int | None = None,
                    occupied: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Unit tokens exactly on their subspaces, the signal model (10) ``z_i = U_{s_i} α_i / ‖·‖`` with codes
    α_i ~ N(0, I_p): memberships s_i i.i.d. from ``shares`` (default balanced), or with ``occupied`` = m ≤ K i.i.d.
    uniform over m subspaces drawn per token set (uniformly, without replacement) — m = 1: every token of a set on
    one subspace (an image of one object), m = 2: an input on two subspaces.

    Returns:
        (Z, labels): (d, n) and (n,), or with ``sets`` (sets, d, n) and (sets, n).
    """
    U = check_bases(U)
    K, d, p = U.shape
    n = check_int(n, "n", minimum=1)
    rng = as_generator(seed)
    count = 1 if sets is None else check_int(sets, "sets", minimum=1)
    if occupied is None:
        shares = class_shares(K) if shares is None else np.asarray(shares, dtype=float)
        if shares.shape != (K,) or np.any(shares < 0) or not np.isclose(shares.sum(), 1.0):
            raise ValueError(f"shares must be {K} non-negative numbers summing to 1, got {shares}")
        labels = rng.choice(K, size=(count, n), p=shares)
    else:
        occupied = check_int(occupied, "occupied", minimum=1)
        if occupied > K or shares is not None:
            raise ValueError(f"occupied must be <= K = {K}, without shares; got {occupied} and shares {shares}")
        chosen = np.argsort(rng.random((count, K)), axis=1)[:, :occupied]  # m distinct subspaces per set
        labels = np.take_along_axis(chosen, rng.integers(occupied, size=(count, n)), axis=1)
    codes = np.zeros((count, K, p, n))
    codes[np.arange(count)[:, None], labels, :, np.arange(n)[None, :]] = rng.standard_normal((count, n, p))
    Z = normalize_columns(np.swapaxes(U, 0, 1).reshape(d, K * p) @ codes.reshape(count, K * p, n))
    return (Z[0], labels[0]) if sets is None else (Z, labels)


@dataclass(frozen=True)
class CollapseFloor:
    """The largest drop of ``spread`` that tokens lying exactly on their subspaces can cause, at one size (module
    docstring; `collapse_floor`).

    Attributes:
        d, n, K, p, eps: the size measured (dimension, tokens per input, heads, head dimension, ε).
        memberships: the membership law allowed (`MEMBERSHIPS`).
        sets: token sets drawn per construction.
        drops: construction (`MEMBERSHIPS` [memberships] and its ReLUs, `relu_construction`) → (mean drop of spread
            from isotropic tokens, its standard error).
    """

    d: int
    n: int
    K: int
    p: int
    eps: float
    memberships: str
    sets: int
    drops: dict

    @property
    def floor(self) -> float:
        """The drop beyond which a change of spread is collapse: the construction's upper 95% bound, mean + 1.96
        standard errors (at least 0)."""
        return _upper(self.drops[MEMBERSHIPS[self.memberships]])

    @property
    def orthant_floor(self) -> float:
        """The same for a step into the non-negative orthant: the largest upper bound over the construction and its
        ReLUs (at least `floor`)."""
        return max(_upper(drop) for drop in self.drops.values())

    def text(self) -> str:
        """``floor 0.1870, orthant 0.2215 (d 32, n 64, K 4, any memberships: one subspace per input 0.1855 ± …)``."""
        parts = ", ".join(f"{name} {mean:.4f} ± {se:.4f}" for name, (mean, se) in self.drops.items())
        return (f"floor {self.floor:.4f}, orthant {self.orthant_floor:.4f} (d {self.d}, n {self.n}, K {self.K}, "
                f"{self.memberships} memberships, {self.sets} sets: {parts})")


def _upper(drop: tuple[float, float]) -> float:
    mean, se = drop
    return max(0.0, mean + 1.96 * se)


FLOOR_SE, FLOOR_RELATIVE_SE = 2.5e-4, 0.005
"""The standard error `collapse_floor` draws sets until every construction's drop reaches — this much, or this
fraction of the drop itself, whichever is larger (or `FLOOR_MAX_SETS`): a floor's own Monte-Carlo error,
1.96 standard errors, then stays below 5e-4 (a tenth of the smallest floor the audit uses, 0.015) or 1% of it."""
FLOOR_MIN_SETS, FLOOR_MAX_SETS = 64, 4096
"""The fewest and the most token sets `collapse_floor` draws per construction by default (the most: at sizes of a
few tokens in a few dimensions, where one set's drop varies most; its standard error, which the floor adds, is then
below 1e-3)."""
FLOOR_CHUNK_ELEMENTS = 2**22
"""Token entries (sets × d × n) `collapse_floor` draws at once (32 MiB of float64), at most 64 sets."""


def _haar_frames(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Haar-random matrices with orthonormal columns, (..., d, r): QR of a Gaussian with the signs of R's diagonal
    made positive."""
    q, r = np.linalg.qr(rng.standard_normal(shape))
    return q * np.where(np.diagonal(r, axis1=-2, axis2=-1) < 0, -1.0, 1.0)[..., None, :]


def _rotated_rates(T: np.ndarray, K: int, eps: float, rng: np.random.Generator, d: int) -> np.ndarray:
    """R^c of unit token sets in a uniformly random orientation, one orientation per set: ``T`` (m, r, n) holds
    their coordinates in an r-dimensional orthonormal frame of R^d (r ≤ d); the orientation O acts on that frame
    alone, a Haar (d, r) frame (the rotation as `rotated_tokens` draws it, on the tokens' span). Its mean over O is
    E_O R^c(OẐ | U) for any K heads of dimension d/K (module docstring): (m,)."""
    if T.shape[-2] > T.shape[-1]:  # more coordinates than tokens: the tokens' own span is smaller
        T = np.linalg.qr(T)[1]
    return _head_rates(_haar_frames((T.shape[0], d, T.shape[-2]), rng) @ T, K, d // K, eps)


def _construction(memberships: str, m: int, d: int, n: int, K: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` token sets of `MEMBERSHIPS` [memberships]' construction, as coordinates (m, r, n) of unit tokens on the
    K coordinate blocks (r = p for one subspace per input, whose tokens need no more)."""
    p = d // K
    codes = rng.standard_normal((m, p if memberships == "any" else d, n))
    if memberships == "balanced":
        codes *= (np.arange(d)[:, None] // p) == rng.integers(K, size=(m, 1, n))
    return normalize_columns(codes)


def _relu_of(coords: np.ndarray, d: int, orientation: str, rng: np.random.Generator) -> np.ndarray:
    """The ReLU of token sets given by coordinates (m, r, n) on the first r coordinate axes, with those axes
    Haar-rotated first (``generic``) or kept (``axis-aligned``): (m, d, n), re-normalised (zero tokens stay zero)."""
    m, r, n = coords.shape
    if orientation == "generic":
        tokens = _haar_frames((m, d, r), rng) @ coords
    else:
        tokens = np.concatenate([coords, np.zeros((m, d - r, n))], axis=1)
    return normalize_columns(np.maximum(tokens, 0.0))


def collapse_floor(d: int, n: int, K: int, p: int | None = None, eps: float = OFFICIAL_EPS, *,
                   memberships: str = "any", sets: int | None = None, seed=0) -> CollapseFloor:
    """The largest drop of ``spread`` that tokens lying exactly on their subspaces cause at this size (module
    docstring, "The collapse floor"): for `MEMBERSHIPS` [memberships]' construction and its ReLU in each of
    `ORIENTATIONS`, the mean drop ``1 − E_O R^c(OẐ | U) / E R^c(isotropic | U)`` from isotropic unit tokens, its
    standard error by the delta method (the two means from independent draws), from ``sets`` token sets each.

    The expectations do not depend on how the K heads lie (module docstring), so they are taken against the K
    coordinate blocks, each set in one random orientation. Time and memory: O(sets · d · n · min(d, n)), the
    rotation of the ReLU's sets dominating; `FLOOR_CHUNK_ELEMENTS` bounds the memory.

    Args:
        d, n, K: dimension, tokens per input (per token set), heads; p: head dimension (default d/K; K·p = d needed,
            as every CRATE has); eps: ε of the rates (default the measure's 0.1); memberships: a key of
            `MEMBERSHIPS`; sets: token sets per construction (default: drawn in chunks until every standard error is
            ≤ `FLOOR_SE` or `FLOOR_RELATIVE_SE` of its drop, between `FLOOR_MIN_SETS` and `FLOOR_MAX_SETS`); seed:
            int, None or Generator.

    Returns:
        :class:`CollapseFloor` (``floor``: the drop of spread beyond which it is collapse; ``orthant_floor``: the
        same for a step into the non-negative orthant).
    """
    d, n, K = check_int(d, "d", minimum=1), check_int(n, "n", minimum=1), check_int(K, "K", minimum=1)
    p = d // K if p is None else check_int(p, "p", minimum=1)
    if K * p != d:
        raise ValueError(f"collapse_floor needs K·p = d (orthogonal subspaces holding every direction), got K = {K}, "
                         f"p = {p}, d = {d}")
    eps = check_positive(eps, "eps")
    if memberships not in MEMBERSHIPS:
        raise ValueError(f"memberships must be one of {sorted(MEMBERSHIPS)}, got {memberships!r}")
    target = None if sets is None else check_int(sets, "sets", minimum=2)
    rng = as_generator(seed)
    chunk = max(1, min(64, FLOOR_CHUNK_ELEMENTS // (d * n)))
    names = [MEMBERSHIPS[memberships], *(relu_construction(memberships, o) for o in ORIENTATIONS)]
    rates: dict[str, list[np.ndarray]] = {name: [] for name in ["isotropic", *names]}
    drawn, summary = 0, {}
    while True:
        m = chunk if target is None else min(chunk, target - drawn)
        rates["isotropic"].append(_head_rates(normalize_columns(rng.standard_normal((m, d, n))), K, p, eps))
        coords = _construction(memberships, m, d, n, K, rng)
        rates[names[0]].append(_rotated_rates(coords, K, eps, rng, d))
        for name, orientation in zip(names[1:], ORIENTATIONS):
            rates[name].append(_rotated_rates(_relu_of(coords, d, orientation, rng), K, eps, rng, d))
        drawn += m
        isotropic = np.concatenate(rates["isotropic"])
        summary = {name: _ratio_drop(np.concatenate(rates[name]), isotropic) for name in names}
        if target is not None:
            if drawn >= target:
                break
        elif drawn >= FLOOR_MAX_SETS or (drawn >= FLOOR_MIN_SETS and all(
                se <= max(FLOOR_SE, FLOOR_RELATIVE_SE * abs(mean)) for mean, se in summary.values())):
            break
    return CollapseFloor(d=d, n=n, K=K, p=p, eps=float(eps), memberships=memberships, sets=drawn, drops=summary)


def _ratio_drop(rates: np.ndarray, isotropic: np.ndarray) -> tuple[float, float]:
    """(1 − mean(rates)/mean(isotropic), its delta-method standard error) for independent samples."""
    a, b = rates.mean(), isotropic.mean()
    variance = rates.var(ddof=1) / rates.size / b**2 + a**2 * isotropic.var(ddof=1) / isotropic.size / b**4
    return float(1.0 - a / b), float(np.sqrt(variance))
