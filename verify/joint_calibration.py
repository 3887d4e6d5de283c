"""Calibration of the joint rule (`verify.joint`): token changes whose label the papers' definitions fix, measured
with the joint measure (``crate_theory.protocol``) and judged by the rule at the size each is built at.

Each case builds, per seed, a token set B and its change A (column convention, d × n, unit tokens) with their
subspaces U and memberships; the label each case deserves is derived from the long paper before any measure is
taken (``paper``). `CASES`, the calibration the rule was first written against:

* tokens moved *exactly onto their own subspaces* — the signal model (10), the extreme of compression: balanced
  classes, unbalanced ones (shares 0.4/0.2/0.2/0.2), mildly coherent subspaces (largest principal cosine 0.3), and
  at the digits CRATE's size (d 96, 5 tokens per input, each seed a mean over 40 inputs as its claims measure),
  there also with every token of an input on one subspace (an image of one object; (10) leaves the law of an
  input's memberships free): ``compression``;
* each class pulled onto one point inside its own subspace: R^c falls to one point's rate per class, but the sparse
  rate reduction objective wants the features "diverse and expanded within their supporting subspaces, and in
  particular not collapsed to individual points" (Sec. 2.1, Remark 3): ``collapse``;
* every token onto one shared direction: ``collapse``;
* the exact-subspace tokens rescaled (a scale per token), or rotated jointly with their subspaces, against the same
  isotropic start: R^c of unit tokens and ΔR are invariant to both (Approximation 9; Sec. 2.1): ``compression``, as
  without them;
* the exact-subspace tokens rotated alone (U fixed): they leave their subspaces — ``no compression``;
* a ReLU of the exact-subspace tokens: the ISTA block's non-negative codes (Sec. 2.4, eq. 44), the sparsification
  half of the layer, judged by the sparsity claims — ``sparsification``, never collapse.

`BEYOND`: constructions the collapse floor was not derived from (it is derived from one construction, every token
of an input on one subspace: `crate_theory.protocol.collapse_floor`), at three sizes (d 32, n 64, K 4; the digits
CRATE's d 96, 5 tokens; d 96, 17 tokens, CRATE-MAE's and CRATE-DINO's): exact-subspace tokens with shares
0.55/0.15/0.15/0.15 and 0.7/0.1/0.1/0.1, with one class absent and with every input's tokens on 2 of its 4
subspaces — ``compression``; on coherent subspaces (largest principal cosines 0.45 and 0.8) — never collapse, but
``compression`` only where (13) itself credits it (`OVERLAP`); every token onto one direction, every token 70% of
the way to one direction, every token half-way to one direction inside one subspace, each class onto one point of
its subspace, and a ReLU after two of these — ``collapse``.

`measure` returns one `Row` per case: the rule's `verify.joint.Judgement` of A against B (paired over the seeds),
the collapse floor at the case's size and the label the rule gave before any floor.
``python benchmarks/joint_calibration.py`` prints the table; tests/verify/test_joint_calibration.py and
tests/verify/test_joint_beyond.py check every label.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from crate_theory.protocol import (
    CALIBRATION_COSINE,
    class_shares,
    coherent_bases,
    compression_profile,
    isotropic_tokens,
    subspace_projectors,
)
from crate_theory.synthetic import normalize_columns, orthonormal_bases, random_orthogonal
from verify.joint import Judgement, Sizes, compresses

SEEDS = 16
"""Seeds per case (as the ideal stacks' claims): each draws its own subspaces, memberships and tokens."""
DRAWS = 4
"""Yardstick sets per token set (as the ideal stacks' claims; the digits-size cases take 2, as the digits claims)."""
DIGITS = dict(size=(96, 5, 4), inputs=40, draws=2)
"""The digits CRATE's size and its claims' quick measurement: 5 tokens per input, 40 inputs, 2 yardstick sets."""


@dataclass(frozen=True)
class Case:
    """One calibration case: ``build(rng)`` → (A, U_A, B, U_B, labels) for one token set, at ``size`` (d, n, K);
    ``inputs`` token sets per seed (their measures averaged, as a trained model's over images) with ``draws``
    yardstick sets each; ``label`` the rule's label the papers' definitions give, and why (``paper``). Every case
    is judged with the floor of `verify.joint.Sizes` at its size, memberships unknown (``any``)."""

    name: str
    paper: str
    label: str
    build: Callable
    size: tuple[int, int, int] = (32, 64, 4)
    inputs: int = 1
    draws: int = DRAWS


def _setting(rng, d: int, n: int, K: int, cosine: float | None = None, shares=None, occupied: int | None = None):
    """Bases (orthonormal, or coherent with largest principal cosine ``cosine``), memberships (i.i.d. from the
    shares, default balanced, or uniform over ``occupied`` subspaces drawn for the set) and isotropic unit tokens
    of one token set."""
    p = d // K
    U = orthonormal_bases(K, d, p, seed=rng) if cosine is None else coherent_bases(K, d, p, cosine, rng)
    if occupied is None:
        labels = rng.choice(K, size=n, p=class_shares(K) if shares is None else np.asarray(shares))
    else:
        labels = rng.choice(rng.choice(K, size=occupied, replace=False), size=n)
    return U, labels, isotropic_tokens(np.ones((d, n)), rng)


def _projected(U, labels, X) -> np.ndarray:
    """Each token projected onto its own subspace, renormalised: exact-subspace tokens with Gaussian codes."""
    return normalize_columns(np.einsum("nde,en->dn", subspace_projectors(U)[labels], X))


def _onto_subspaces(cosine: float | None = None, shares=None, occupied: int | None = None):
    def build(rng, d, n, K):
        U, labels, X = _setting(rng, d, n, K, cosine, shares, occupied)
        return _projected(U, labels, X), U, X, U, labels
    return build


def _one_subspace_per_input(rng, d, n, K):
    U, _, X = _setting(rng, d, n, K)
    labels = np.full(n, rng.integers(K))
    return _projected(U, labels, X), U, X, U, labels


def _class_points(rng, d, n, K):
    U, labels, X = _setting(rng, d, n, K)
    points = normalize_columns(np.einsum("kdp,kp->dk", U, rng.standard_normal((K, d // K))))
    return points[:, labels], U, X, U, labels


def _shared_direction(rng, d, n, K):
    U, labels, X = _setting(rng, d, n, K)
    return np.repeat(normalize_columns(rng.standard_normal((d, 1))), n, axis=1), U, X, U, labels


def _rescaled(rng, d, n, K):
    U, labels, X = _setting(rng, d, n, K)
    return _projected(U, labels, X) * np.exp(rng.uniform(-5, 5, n)), U, X, U, labels


def _jointly_rotated(rng, d, n, K):
    U, labels, X = _setting(rng, d, n, K)
    rotation = random_orthogonal(d, rng)
    return rotation @ _projected(U, labels, X), rotation @ U, rotation @ X, rotation @ U, labels


def _rotated_alone(rng, d, n, K):
    U, labels, X = _setting(rng, d, n, K)
    Z = _projected(U, labels, X)
    return random_orthogonal(d, rng) @ Z, U, Z, U, labels


def _relu(rng, d, n, K):
    U, labels, X = _setting(rng, d, n, K)
    Z = _projected(U, labels, X)
    return np.maximum(Z, 0.0), U, Z, U, labels


def _towards_direction(t: float):
    """Every isotropic token pulled the fraction t of the way to one shared random direction, renormalised."""
    def build(rng, d, n, K):
        U, labels, X = _setting(rng, d, n, K)
        pulled = (1 - t) * normalize_columns(X) + t * normalize_columns(rng.standard_normal((d, 1)))
        return normalize_columns(pulled), U, X, U, labels
    return build


def _towards_direction_in_one_subspace(t: float):
    """Every token on one subspace, then pulled the fraction t of the way to one direction inside it."""
    def build(rng, d, n, K):
        U, _, X = _setting(rng, d, n, K)
        k = rng.integers(K)
        labels = np.full(n, k)
        direction = normalize_columns(U[k] @ rng.standard_normal((d // K, 1)))
        return normalize_columns((1 - t) * _projected(U, labels, X) + t * direction), U, X, U, labels
    return build


def _relu_after(build):
    """The ReLU of a construction's A (B unchanged): a step into the orthant after it."""
    def relu(rng, d, n, K):
        A, UA, B, UB, labels = build(rng, d, n, K)
        return np.maximum(A, 0.0), UA, B, UB, labels
    return relu


ON_SUBSPACES = "tokens moved exactly onto their own subspaces: the signal model (10), compression's extreme"
CASES = (
    Case("onto subspaces, balanced", ON_SUBSPACES, "compression", _onto_subspaces()),
    Case("onto subspaces, unbalanced 0.4/0.2/0.2/0.2", ON_SUBSPACES, "compression",
         _onto_subspaces(shares=class_shares(4, balanced=False))),
    Case("onto subspaces, coherent (largest cosine 0.3)", ON_SUBSPACES, "compression",
         _onto_subspaces(CALIBRATION_COSINE)),
    Case("onto subspaces, balanced, digits size", ON_SUBSPACES + "; 5 tokens per input", "compression",
         _onto_subspaces(), **DIGITS),
    Case("onto subspaces, unbalanced, digits size", ON_SUBSPACES + "; 5 tokens per input", "compression",
         _onto_subspaces(shares=class_shares(4, balanced=False)), **DIGITS),
    Case("each class onto one point of its subspace", "R^c falls, but the objective wants the features 'not "
         "collapsed to individual points' (Sec. 2.1, Remark 3)", "collapse", _class_points),
    Case("all tokens onto one shared direction", "every token alike", "collapse", _shared_direction),
    Case("onto subspaces, then rescaled per token", "unit tokens: R^c and ΔR invariant to rescaling "
         "(Approximation 9) — as without it", "compression", _rescaled),
    Case("onto subspaces, rotated jointly with U", "R^c and ΔR invariant to a joint rotation (Sec. 2.1) — as "
         "without it", "compression", _jointly_rotated),
    Case("exact-subspace tokens rotated alone", "the tokens leave their subspaces (U fixed)", "no compression",
         _rotated_alone),
    Case("ReLU of exact-subspace tokens", "the ISTA block's non-negative codes (Sec. 2.4, eq. 44): "
         "sparsification, judged by the sparsity claims", "sparsification", _relu),
    Case("onto one subspace per input, digits size", ON_SUBSPACES + " (its law over an input's tokens is free: "
         "an image of one object)", "compression", _one_subspace_per_input, **DIGITS),
)
"""Every calibration case, its label written from the papers' definitions before the measure was run on it."""

SIZES = {"d 32, n 64": dict(size=(32, 64, 4)), "digits size": dict(size=(96, 5, 4), inputs=8, draws=2),
         "d 96, n 17": dict(size=(96, 17, 4), inputs=8, draws=2)}
"""The sizes of `BEYOND`: the ideal stacks', the digits CRATE's (5 tokens), and 17 tokens (CRATE-MAE, CRATE-DINO),
each with its inputs per seed and yardstick draws (8 inputs where a claim averages more: every margin below is
many times the intervals' width)."""
REMARK_3 = "the objective wants the features 'not collapsed to individual points' (Sec. 2.1, Remark 3)"
OVERLAP = ("subspaces that overlap: (13) sums the rates of the projections onto every subspace, so a token counts in "
           "each one it overlaps, and R^c of the exact-subspace tokens is not below that of the same tokens in random "
           "orientations (specific ≥ 1; recorded after measuring: from a largest cosine of 0.45 at d 32, n 64, of 0.8 "
           "at d 96 with 5 or 17 tokens, where β = p/(nε²) is 11–38 times larger and a token concentrated in one "
           "subspace saves more) — no compression by R^c, never collapse")
BEYOND_CONSTRUCTIONS = (
    ("onto subspaces, shares 0.55/0.15/0.15/0.15", "compression", _onto_subspaces(shares=(0.55, 0.15, 0.15, 0.15))),
    ("onto subspaces, shares 0.7/0.1/0.1/0.1", "compression", _onto_subspaces(shares=(0.7, 0.1, 0.1, 0.1))),
    ("onto subspaces, one class absent", "compression", _onto_subspaces(shares=(1 / 3, 1 / 3, 1 / 3, 0.0))),
    ("onto subspaces, coherent (largest cosine 0.45)", {"d 32, n 64": "no compression"}, _onto_subspaces(0.45)),
    ("onto subspaces, coherent (largest cosine 0.8)", {size: "no compression" for size in SIZES},
     _onto_subspaces(0.8)),
    ("onto 2 of 4 subspaces per input", "compression", _onto_subspaces(occupied=2)),
    ("all tokens onto one shared direction", "collapse", _towards_direction(1.0)),
    ("all tokens 70% of the way to one direction", "collapse", _towards_direction(0.7)),
    ("all tokens half-way to one direction inside one subspace", "collapse", _towards_direction_in_one_subspace(0.5)),
    ("each class onto one point of its subspace", "collapse", _class_points),
    ("ReLU after: each class onto one point", "collapse", _relu_after(_class_points)),
    ("ReLU after: all tokens 70% of the way to one direction", "collapse", _relu_after(_towards_direction(0.7))),
)
"""(construction, label, builder) of `BEYOND`, each label written from the papers' definitions: exact-subspace
tokens are (10) whatever its free law ("compression"); every pull of the tokens towards one direction or point, and
a class on one point, is what Remark 3 excludes ("collapse"), with or without a ReLU after it. A label given per
size ({size: label}, "compression" elsewhere) is one recorded after measuring: `OVERLAP`."""


def _beyond(size: str, name: str, label, build, kw: dict) -> Case:
    if isinstance(label, dict):
        label = label.get(size, "compression")
        paper = OVERLAP if label == "no compression" else ON_SUBSPACES
    else:
        paper = ON_SUBSPACES if label == "compression" else REMARK_3
    return Case(f"{name}, {size}", paper, label, build, **kw)


BEYOND = tuple(_beyond(size, name, label, build, kw) for size, kw in SIZES.items()
               for name, label, build in BEYOND_CONSTRUCTIONS)
"""The constructions the floor was not derived from, at every size of `SIZES`."""

MEASURED = ("specific", "alignment", "spread", "rate_reduction", "nonnegative")


def _measures(Z, U, labels, draws, seed) -> dict[str, float]:
    return {k: v for k, v in compression_profile(Z, U, labels=labels, draws=draws, seed=seed).as_dict().items()
            if k in MEASURED}


def _seed(case: Case, s: int) -> tuple[dict, dict]:
    """Per-seed measures of A and B: means over the case's inputs (the same yardstick seed for A and B)."""
    rng = np.random.default_rng([(CASES + BEYOND).index(case), s])
    d, n, K = case.size
    a, b = [], []
    for i in range(case.inputs):
        A, UA, B, UB, labels = case.build(rng, d, n, K)
        a.append(_measures(A, UA, labels, case.draws, np.random.default_rng([s, i])))
        b.append(_measures(B, UB, labels, case.draws, np.random.default_rng([s, i])))
    return ({k: np.mean([m[k] for m in a]) for k in MEASURED}, {k: np.mean([m[k] for m in b]) for k in MEASURED})


@dataclass(frozen=True)
class Row:
    """A measured case: its `Judgement` of A against B, the collapse floor at its size (the orthant floor for a step
    into the non-negative orthant), and ``former``: the label the rule gave before any floor (any spread interval
    below 0 was collapse; no orthant facts)."""

    case: Case
    judgement: Judgement
    floor: float
    former: str

    def text(self) -> str:
        j = self.judgement
        cells = [f"{name} {c.difference.mean:+.4f} [{c.difference.low:+.4f}, {c.difference.high:+.4f}]"
                 for name, c in (("spread", j.spread), ("alignment", j.alignment), ("specific", j.specific),
                                 ("ΔR", j.rate_reduction))]
        mark = "" if j.label == self.case.label else "  ← differs"
        return (f"{self.case.name} (d {self.case.size[0]}, n {self.case.size[1]}, K {self.case.size[2]}) — "
                f"{self.case.paper}\n    expected {self.case.label}; measured {j.label}{mark} (before any floor: "
                f"{self.former}); floor {self.floor:.4f}; " + "; ".join(cells))


@functools.cache
def measure(name: str) -> Row:
    """The case ``name`` (one of `CASES` or `BEYOND`) measured over `SEEDS` seeds and judged by the rule."""
    case = next((c for c in CASES + BEYOND if c.name == name), None)
    if case is None:
        raise ValueError(f"name: expected one of {[c.name for c in CASES + BEYOND]}, got {name!r}")
    pairs = [_seed(case, s) for s in range(SEEDS)]
    a, b = ({k: np.array([p[i][k] for p in pairs]) for k in MEASURED} for i in (0, 1))
    judgement = compresses(a, b, floor=Sizes(*case.size))
    former = compresses({k: v for k, v in a.items() if k != "nonnegative"}, b, floor=0.0).label
    return Row(case, judgement, judgement.floor, former)


def table() -> str:
    """Every case's `Row.text`, one block each: `CASES`, then `BEYOND`."""
    return "\n".join(["calibration:", *(measure(c.name).text() for c in CASES),
                      "beyond the calibration (the floor was not derived from these):",
                      *(measure(c.name).text() for c in BEYOND)])
