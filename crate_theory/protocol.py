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
signal model (10): z_i = U_{s_i} α_i), yet it lowers ``spread`` a little wherever the subspaces do not share the
tokens as isotropic tokens share the space: unequal class shares, coherent subspaces, few tokens per input. So a
lower spread is evidence of collapse only beyond that. `collapse_floor` computes it at the size measured (d, n
tokens per input, K heads of dimension p, ε) by Monte-Carlo, with common random numbers: for each construction
of `CONSTRUCTIONS` — exact-subspace tokens (memberships i.i.d. from the class shares, as App. B.3 draws them,
Gaussian codes) with balanced shares, with one class twice as common as each other (shares (2, 1, …, 1)/(K + 1):
0.4/0.2/0.2/0.2 at K = 4), and on coherent subspaces (largest principal cosine `CALIBRATION_COSINE`) — the mean
drop of spread from isotropic tokens to those tokens, and its standard error; the floor is the largest upper 95%
bound (mean + 1.96 standard errors) over the constructions. Measured (ε = 0.1, the default 16384 tokens per
construction): 0.0052 at d 32, n 64, K 4 (the unbalanced shares: 0.0046 ± 0.0003; balanced 0.0001, coherent
0.0023); 0.0011 at d 96, n 5, K 4 (the digits CRATE: unbalanced 0.0009 ± 0.0001); 0.0035 at d 128, n 196, K 8
(coherent). Where an input is an image of one object (the 8×8 digits of the trained CRATEs), all its tokens may lie
on that object's subspace — (10) with one membership per input rather than per token — and
``collapse_floor(..., single_object=True)`` adds that construction (`SINGLE_OBJECT`): at d 96, n 5, K 4 it drops
the spread by 0.0145 ± 0.0004, which is then the floor. A pull of every class onto one point inside its subspace drops the spread by 0.43 at d 32, n 64, and
one shared direction by 0.80: far beyond (``benchmarks/joint_calibration.py``).

Why ``spread`` and not the whole rate R (eq. 8) for the collapse check: R works at a different operating point
(per-direction isotropic eigenvalue 1/ε², the heads' 1/(Kε²)), so its changes are not commensurate with R^c's; and
it sees LayerNorm's removal of the mean direction as lost rate (unit LayerNorm-ed tokens on their subspaces,
8 seeds: R 0.973 ± 0.009 of isotropic at ε = 0.1, spread 0.998 ± 0.002).

``U`` need not be orthonormal (a trained model's U is not): every rate uses an orthonormal basis of each span, the
projectors ``U_k U_k^+``, so neither the tokens' norms nor ‖U‖ (weight decay) enters. The subspaces must be able to
hold every direction, K·p ≥ d (every CRATE has p = d/K): with K·p < d, (13) is lowered by moving energy *out of*
their union, and ``specific`` with it — tokens placed exactly on K orthogonal subspaces of dimension p in
d = Kp + 1 score ``specific`` > 1.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ._checks import check_bases, check_int, check_labels, check_positive, check_same_size, check_tokens
from .coding_rate import coding_rate, compression_rate, project_onto_bases, rate_reduction
from .synthetic import as_generator, normalize_columns, orthonormal_bases, random_orthogonal

__all__ = [
    "OFFICIAL_EPS",
    "official_compression_rate",
    "subspace_projectors",
    "subspace_energy",
    "own_subspace",
    "alignment",
    "isotropic_tokens",
    "rotated_tokens",
    "CompressionProfile",
    "profile_from_yardsticks",
    "compression_profile",
    "CALIBRATION_COSINE",
    "CONSTRUCTIONS",
    "SINGLE_OBJECT",
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
    """The rotation yardstick: ``OZ`` for a Haar-random orthogonal O (d × d) — the same tokens (the same Gram matrix
    Z*Z) in a uniformly random orientation, so that ``R^c(OZ | U) = R^c(Z | O*U)`` (Sec. 2.1: (13)–(14) are
    invariant to joint rotations); with ``draws``, a stack (draws, d, n) of independent rotations."""
    Z = check_tokens(Z, batch=False)
    rng = as_generator(seed)
    sets = np.stack([random_orthogonal(Z.shape[0], rng) @ Z for _ in range(_draws(draws))])
    return sets[0] if draws is None else sets


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


def profile_from_yardsticks(Z, U, eps, isotropic, rotated, labels=None) -> CompressionProfile:
    """The joint measure of ``Z`` given its yardsticks' token sets (deterministic; :func:`compression_profile`
    draws them). Every set is normalised to unit columns (Approximation 9) before its R^c (eqs. 12–13) is
    taken.

    Args:
        Z: tokens (d, n); U: bases (K, d, p), any basis of each span; eps: ε > 0 of β = p/(nε²) (eq. 12);
        isotropic: (draws, d, n) isotropic token sets (:func:`isotropic_tokens`);
        rotated: (draws', d, n) rotations of Z (:func:`rotated_tokens`);
        labels: memberships (n,) or None (:func:`own_subspace`) for the alignment.
    """
    Z, U = _tokens_bases(Z, U)
    if U.shape[0] * U.shape[2] < Z.shape[0]:
        raise ValueError(f"U must hold every direction, K·p >= d (module docstring); got K·p = "
                         f"{U.shape[0] * U.shape[2]} < d = {Z.shape[0]}")
    eps = check_positive(eps, "eps")
    labels = _labels(Z, U, labels)
    isotropic, rotated = _stack(isotropic, "isotropic", Z.shape), _stack(rotated, "rotated", Z.shape)
    Q = np.linalg.qr(U)[0]  # Q_k: an orthonormal basis of span(U_k)
    unit = normalize_columns(Z)
    rate = float(compression_rate(unit, Q, eps))
    iso_rate = float(np.mean(compression_rate(normalize_columns(isotropic), Q, eps)))
    rot_rate = float(np.mean(compression_rate(normalize_columns(rotated), Q, eps)))
    own = _own_energy(_energy(np.concatenate([Z[None], isotropic]), subspace_projectors(U)), labels)
    return CompressionProfile(relative=rate / iso_rate, specific=rate / rot_rate, spread=rot_rate / iso_rate,
                              alignment=float(np.mean(own[0])), isotropic_alignment=float(np.mean(own[1:])),
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
    Z = check_tokens(Z, batch=False)
    rng = as_generator(seed)
    return profile_from_yardsticks(Z, U, eps, isotropic_tokens(Z, rng, draws), rotated_tokens(Z, rng, draws), labels)


# ------------------------------------------------------------------------------------------------ the collapse floor
CALIBRATION_COSINE = 0.3
"""Largest principal cosine between two subspaces of the coherent calibration construction (`coherent_bases`):
mildly coherent, as trained heads are (Sec. 2.1 asks for incoherent subspaces, not exactly orthogonal ones)."""

CONSTRUCTIONS = ("balanced", "unbalanced", "coherent")
"""The exact-subspace constructions of `collapse_floor` (module docstring): tokens of the signal model (10) with
balanced class shares, with one class twice as common as each other, and on coherent subspaces (balanced)."""
SINGLE_OBJECT = "one subspace per input"
"""The construction `collapse_floor` adds for inputs that are images of one object: every token of an input on the
subspace of one membership drawn per input (balanced)."""


def class_shares(K: int, balanced: bool = True) -> np.ndarray:
    """Class shares of the calibration constructions, (K,): 1/K each, or (2, 1, …, 1)/(K + 1) — one class twice as
    common as each other (0.4/0.2/0.2/0.2 at K = 4)."""
    K = check_int(K, "K", minimum=1)
    weights = np.ones(K) if balanced else np.concatenate([[2.0], np.ones(K - 1)])
    return weights / weights.sum()


def largest_principal_cosine(U) -> float:
    """The largest cosine of a principal angle between two distinct subspaces span(U_j), span(U_k) of bases
    (K, d, p): the largest singular value of Q_j*Q_k over j ≠ k, Q_k an orthonormal basis (0 for K = 1)."""
    Q = np.linalg.qr(check_bases(U))[0]
    K = Q.shape[0]
    return max((float(np.linalg.norm(Q[j].T @ Q[k], 2)) for j in range(K) for k in range(j + 1, K)), default=0.0)


def coherent_bases(K: int, d: int, p: int, cosine: float = CALIBRATION_COSINE, seed=None) -> np.ndarray:
    """Randomly oriented, mildly coherent subspaces whose largest principal cosine is ``cosine``, (K, d, p) with
    orthonormal columns: K mutually orthogonal blocks Q_k (a Haar-random frame, Kp ≤ d) each tilted by a Gaussian
    G_k, ``U_k = orth(Q_k + t G_k)``, with t found by bisection so that `largest_principal_cosine` equals ``cosine``
    (to 1e-9). Unlike `crate_theory.synthetic.orthonormal_bases`' exact coherence (every principal angle equal,
    which needs (K + 1)p ≤ d), only the largest cosine is set, and Kp = d is allowed."""
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
                    per_input: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Unit tokens exactly on their subspaces, the signal model (10) ``z_i = U_{s_i} α_i / ‖·‖``: memberships s_i
    i.i.d. from ``shares`` (default balanced) — with ``per_input`` one membership per token set, shared by its n
    tokens —, codes α_i ~ N(0, I_p).

    Returns:
        (Z, labels): (d, n) and (n,), or with ``sets`` (sets, d, n) and (sets, n).
    """
    U = check_bases(U)
    K, d, p = U.shape
    n = check_int(n, "n", minimum=1)
    shares = class_shares(K) if shares is None else np.asarray(shares, dtype=float)
    rng = as_generator(seed)
    count = 1 if sets is None else check_int(sets, "sets", minimum=1)
    labels = rng.choice(K, size=(count, 1 if per_input else n), p=shares)
    labels = np.broadcast_to(labels, (count, n)).copy()
    Z = normalize_columns(np.einsum("sndp,snp->sdn", U[labels], rng.standard_normal((count, n, p))))
    return (Z[0], labels[0]) if sets is None else (Z, labels)


@dataclass(frozen=True)
class CollapseFloor:
    """The largest drop of ``spread`` that moving tokens exactly onto their subspaces causes, at one size (module
    docstring; `collapse_floor`).

    Attributes:
        d, n, K, p, eps: the size measured (dimension, tokens per input, heads, head dimension, ε).
        sets: token sets drawn per construction.
        drops: construction (`CONSTRUCTIONS`, and `SINGLE_OBJECT` where it was asked for) → (mean drop of spread
            from isotropic tokens, its standard error).
    """

    d: int
    n: int
    K: int
    p: int
    eps: float
    sets: int
    drops: dict

    @property
    def floor(self) -> float:
        """The largest upper 95% bound, mean + 1.96 standard errors, over the constructions (at least 0)."""
        return max(0.0, max(mean + 1.96 * se for mean, se in self.drops.values()))

    def text(self) -> str:
        """``floor 0.0068 (d 32, n 64, K 4: balanced 0.0005 ± 0.0003, …)``."""
        parts = ", ".join(f"{name} {mean:.4f} ± {se:.4f}" for name, (mean, se) in self.drops.items())
        return f"floor {self.floor:.4f} (d {self.d}, n {self.n}, K {self.K}: {parts})"


FLOOR_TOKENS = 16384
"""Tokens per construction that `collapse_floor` draws by default: ⌈16384/n⌉ sets of n (at least 64), so that each
drop's standard error is about 3e-4 or less at the sizes the audit measures (d 32–128, n 5–196)."""
FLOOR_CHUNK_ELEMENTS = 2**22
"""Token entries (sets × d × n) `collapse_floor` draws at once: 16 sets of d 768 × n 1,024 took 8.7 GiB; every size
of d·n ≤ 2^18 keeps its 16 (or more) sets per chunk, so its random stream, and its floor, are unchanged."""


def _rotation_averaged(Z: np.ndarray, frames: np.ndarray, Q: np.ndarray, eps: float) -> np.ndarray:
    """mean over rotations of R^c(OZ | Q) for unit token sets Z (m, d, n), each rotation O given by its Haar frame on
    the span of Z (``frames`` (draws, m, d, r), r = min(d, n); as `crate_nn.analysis.protocol.rotated_like`): (m,)."""
    _, coords = np.linalg.qr(Z)  # Z = E C with E (m, d, r) orthonormal; OZ = (OE) C and OE is a Haar frame
    return np.mean(compression_rate(frames @ coords, Q, eps), axis=0)


def _haar_frames(shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    q, r = np.linalg.qr(rng.standard_normal(shape))
    return q * np.where(np.diagonal(r, axis1=-2, axis2=-1) < 0, -1.0, 1.0)[..., None, :]


def collapse_floor(d: int, n: int, K: int, p: int | None = None, eps: float = OFFICIAL_EPS, *,
                   cosine: float = CALIBRATION_COSINE, draws: int = 2, sets: int | None = None,
                   seed=0, single_object: bool = False) -> CollapseFloor:
    """The largest drop of ``spread`` that true compression causes at this size (module docstring, "The collapse
    floor"): for each of `CONSTRUCTIONS`, the mean over ``sets`` token sets of (spread of isotropic unit tokens −
    spread of exact-subspace tokens), both measured against the same bases and the same yardstick draws (the same
    isotropic sets and rotations: common random numbers), and its standard error.

    Args:
        d, n, K: dimension, tokens per input (per token set), heads; p: head dimension (default d/K; K·p = d needed,
            as every CRATE has); eps: ε of the rates (default the measure's 0.1); cosine: largest principal cosine
            of the coherent construction; draws: yardstick sets per token set (as the measure takes them); sets:
            token sets per construction (default ⌈`FLOOR_TOKENS`/n⌉, at least 64); seed: int, None or Generator;
            single_object: the inputs are images of one object each, whose tokens may all lie on one subspace (adds
            the `SINGLE_OBJECT` construction).

    Returns:
        :class:`CollapseFloor` (its ``floor``: the boundary a drop of spread must pass to count as collapse).
    """
    d, n, K = check_int(d, "d", minimum=1), check_int(n, "n", minimum=1), check_int(K, "K", minimum=1)
    p = d // K if p is None else check_int(p, "p", minimum=1)
    if K * p != d:
        raise ValueError(f"collapse_floor needs K·p = d (orthogonal subspaces holding every direction), got K = {K}, "
                         f"p = {p}, d = {d}")
    eps = check_positive(eps, "eps")
    draws = check_int(draws, "draws", minimum=1)
    sets = max(64, -(-FLOOR_TOKENS // n)) if sets is None else check_int(sets, "sets", minimum=2)
    rng = as_generator(seed)
    chunk = min(max(16, -(-2048 // n)), max(1, FLOOR_CHUNK_ELEMENTS // (d * n)))
    constructions = (*CONSTRUCTIONS, SINGLE_OBJECT) if single_object else CONSTRUCTIONS
    drops: dict[str, list[np.ndarray]] = {name: [] for name in constructions}
    for start in range(0, sets, chunk):
        m = min(chunk, sets - start)
        isotropic = normalize_columns(rng.standard_normal((m, d, n)))
        yardstick = normalize_columns(rng.standard_normal((draws, m, d, n)))
        frames = _haar_frames((draws, m, d, min(d, n)), rng)
        for name in constructions:
            U = coherent_bases(K, d, p, cosine, rng) if name == "coherent" else orthonormal_bases(K, d, p, seed=rng)
            Z, _ = subspace_tokens(U, n, class_shares(K, balanced=name != "unbalanced"), rng, sets=m,
                                   per_input=name == SINGLE_OBJECT)
            iso_rate = np.mean(compression_rate(yardstick, U, eps), axis=0)
            drops[name].append((_rotation_averaged(isotropic, frames, U, eps)
                                - _rotation_averaged(Z, frames, U, eps)) / iso_rate)
    summary = {}
    for name, values in drops.items():
        x = np.concatenate(values)
        summary[name] = (float(x.mean()), float(x.std(ddof=1) / np.sqrt(x.size)))
    return CollapseFloor(d=d, n=n, K=K, p=p, eps=float(eps), sets=sets, drops=summary)
