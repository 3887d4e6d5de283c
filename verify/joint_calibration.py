"""Calibration of the joint rule (`verify.joint`): token changes whose label the papers' definitions fix, measured
with the joint measure (``crate_theory.protocol``) and judged by the rule at the size each is built at.

Each case builds, per seed, a token set B and its change A (column convention, d × n, unit tokens) with their
subspaces U and memberships; the label each case deserves is derived from the long paper before any measure is
taken (`CASES`: ``paper``):

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

`measure` returns one `Row` per case: the rule's `verify.joint.Judgement` of A against B (paired over the seeds),
the collapse floor at the case's size and the label the rule gave before the floor. ``python benchmarks/joint_calibration.py`` prints the table;
tests/verify/test_joint_calibration.py checks every label.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from crate_theory.protocol import (
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
    yardstick sets each; ``label`` the rule's label the papers' definitions give, and why (``paper``);
    ``single_object``: the case's inputs are images of one object (the floor of `verify.joint.Sizes` with it)."""

    name: str
    paper: str
    label: str
    build: Callable
    size: tuple[int, int, int] = (32, 64, 4)
    inputs: int = 1
    draws: int = DRAWS
    single_object: bool = False


def _setting(rng, d: int, n: int, K: int, coherent: bool = False, balanced: bool = True):
    """Bases, memberships (i.i.d. from the shares) and isotropic unit tokens of one token set."""
    p = d // K
    U = coherent_bases(K, d, p, seed=rng) if coherent else orthonormal_bases(K, d, p, seed=rng)
    labels = rng.choice(K, size=n, p=class_shares(K, balanced))
    return U, labels, isotropic_tokens(np.ones((d, n)), rng)


def _projected(U, labels, X) -> np.ndarray:
    """Each token projected onto its own subspace, renormalised: exact-subspace tokens with Gaussian codes."""
    return normalize_columns(np.einsum("nde,en->dn", subspace_projectors(U)[labels], X))


def _onto_subspaces(coherent: bool = False, balanced: bool = True):
    def build(rng, d, n, K):
        U, labels, X = _setting(rng, d, n, K, coherent, balanced)
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


ON_SUBSPACES = "tokens moved exactly onto their own subspaces: the signal model (10), compression's extreme"
CASES = (
    Case("onto subspaces, balanced", ON_SUBSPACES, "compression", _onto_subspaces()),
    Case("onto subspaces, unbalanced 0.4/0.2/0.2/0.2", ON_SUBSPACES, "compression", _onto_subspaces(balanced=False)),
    Case("onto subspaces, coherent (largest cosine 0.3)", ON_SUBSPACES, "compression", _onto_subspaces(True)),
    Case("onto subspaces, balanced, digits size", ON_SUBSPACES + "; 5 tokens per input", "compression",
         _onto_subspaces(), **DIGITS),
    Case("onto subspaces, unbalanced, digits size", ON_SUBSPACES + "; 5 tokens per input", "compression",
         _onto_subspaces(balanced=False), **DIGITS),
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
         "an image of one object)", "compression", _one_subspace_per_input, **DIGITS, single_object=True),
)
"""Every calibration case, its label written from the papers' definitions before the measure was run on it."""

MEASURED = ("specific", "alignment", "spread", "rate_reduction", "nonnegative")


def _measures(Z, U, labels, draws, seed) -> dict[str, float]:
    return {k: v for k, v in compression_profile(Z, U, labels=labels, draws=draws, seed=seed).as_dict().items()
            if k in MEASURED}


def _seed(case: Case, s: int) -> tuple[dict, dict]:
    """Per-seed measures of A and B: means over the case's inputs (the same yardstick seed for A and B)."""
    rng = np.random.default_rng([CASES.index(case), s])
    d, n, K = case.size
    a, b = [], []
    for i in range(case.inputs):
        A, UA, B, UB, labels = case.build(rng, d, n, K)
        a.append(_measures(A, UA, labels, case.draws, np.random.default_rng([s, i])))
        b.append(_measures(B, UB, labels, case.draws, np.random.default_rng([s, i])))
    return ({k: np.mean([m[k] for m in a]) for k in MEASURED}, {k: np.mean([m[k] for m in b]) for k in MEASURED})


@dataclass(frozen=True)
class Row:
    """A measured case: its `Judgement` of A against B, the collapse floor at its size, and ``former``: the label
    the rule gave before the floor (any spread interval below 0 was collapse; no orthant facts)."""

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
                f"{self.case.paper}\n    expected {self.case.label}; measured {j.label}{mark} (before the floor: "
                f"{self.former}); floor {self.floor:.4f}; " + "; ".join(cells))


@functools.cache
def measure(name: str) -> Row:
    """The calibration case ``name`` (one of `CASES`) measured over `SEEDS` seeds and judged by the rule."""
    case = next((c for c in CASES if c.name == name), None)
    if case is None:
        raise ValueError(f"name: expected one of {[c.name for c in CASES]}, got {name!r}")
    pairs = [_seed(case, s) for s in range(SEEDS)]
    a, b = ({k: np.array([p[i][k] for p in pairs]) for k in MEASURED} for i in (0, 1))
    floor = Sizes(*case.size, single_object=case.single_object).floor
    former = compresses({k: v for k, v in a.items() if k != "nonnegative"}, b, floor=0.0).label
    return Row(case, compresses(a, b, floor=floor), floor, former)


def table() -> str:
    """Every case's `Row.text`, one block each."""
    return "\n".join(measure(case.name).text() for case in CASES)
