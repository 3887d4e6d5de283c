"""The joint rule on its calibration cases (verify.joint_calibration): token changes whose label the papers'
definitions fix, written here before the measure was run on them, and the rule's invariances."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crate_theory import protocol
from crate_theory.synthetic import normalize_columns, orthonormal_bases, random_orthogonal
from verify import joint_calibration
from verify.joint import Sizes, compresses

LABELS = {
    # tokens moved exactly onto their own subspaces are the signal model (10): compression, whatever the class
    # shares, a mild coherence of the subspaces or the number of tokens per input
    "onto subspaces, balanced": "compression",
    "onto subspaces, unbalanced 0.4/0.2/0.2/0.2": "compression",
    "onto subspaces, coherent (largest cosine 0.3)": "compression",
    "onto subspaces, balanced, digits size": "compression",
    "onto subspaces, unbalanced, digits size": "compression",
    # Sec. 2.1, Remark 3: sparse rate reduction wants the features "diverse and expanded within their supporting
    # subspaces, and in particular not collapsed to individual points"
    "each class onto one point of its subspace": "collapse",
    "all tokens onto one shared direction": "collapse",
    # R^c and ΔR of unit tokens are invariant to rescaling (Approximation 9) and to a joint rotation (Sec. 2.1)
    "onto subspaces, then rescaled per token": "compression",
    "onto subspaces, rotated jointly with U": "compression",
    # rotating the tokens alone moves them off their subspaces
    "exact-subspace tokens rotated alone": "no compression",
    # eq. (44): the ISTA block's non-negative codes are the sparsification half of the layer (25)
    "ReLU of exact-subspace tokens": "sparsification",
    # (10) leaves the law of an input's memberships free: an image of one object may have every token on its subspace
    "onto one subspace per input, digits size": "compression",
}


def test_every_case_has_its_label_written_here():
    assert {case.name: case.label for case in joint_calibration.CASES} == LABELS


@pytest.mark.parametrize("name", list(LABELS))
def test_the_rule_gives_each_case_the_papers_label(name):
    row = joint_calibration.measure(name)
    assert row.judgement.label == LABELS[name], row.text()
    floor = Sizes(*row.case.size).collapse_floor()
    assert row.floor == (floor.orthant_floor if row.judgement.sparsification else floor.floor)
    assert row.judgement.rate_reduction is not None


def test_one_object_per_input_is_the_floors_own_construction():
    """Every token of an input on one subspace is the signal model too (its law over an input's tokens is free), and
    the worst law: the floor is that construction's drop at the size, so the case sits at the floor, within it."""
    row = joint_calibration.measure("onto one subspace per input, digits size")
    mean, se = Sizes(*row.case.size).collapse_floor().drops["one subspace per input"]
    difference = row.judgement.spread.difference
    # two Monte-Carlo estimates of one expectation (16 seeds of 40 inputs; the floor's sets): 4 combined errors
    assert abs(-difference.mean - mean) <= 4 * np.hypot(se, difference.std / np.sqrt(difference.n))
    assert row.judgement.spread.difference.low < -row.floor < row.judgement.spread.difference.high


def test_the_former_rule_misread_exactly_the_cases_the_review_named():
    """Before the floor every spread interval below 0 was collapse: unbalanced classes, coherent subspaces and the
    ReLU were vetoed; every other label is unchanged (recorded after measuring). Unbalanced classes at the digits
    size sit on that edge: spread −0.0007 [−0.0013, −0.0000] with the yardsticks drawn per head, −0.0006 [−0.0014,
    +0.0001] with the rotation drawn whole (the same mean, 0.0001 narrower), so the former rule vetoes it too."""
    misread = {"onto subspaces, unbalanced 0.4/0.2/0.2/0.2", "onto subspaces, coherent (largest cosine 0.3)",
               "ReLU of exact-subspace tokens", "onto one subspace per input, digits size",
               "onto subspaces, unbalanced, digits size"}
    for name, label in LABELS.items():
        assert joint_calibration.measure(name).former == ("collapse" if name in misread else label), name


def test_exact_subspace_spread_drops_lie_within_the_floor_and_collapses_far_beyond():
    """The floor is the largest drop exact-subspace tokens can cause: each such case's mean drop lies above −floor,
    every pull onto points or one direction lowers the spread by more than twice the floor (the orthant floor for
    the ReLU: measured 0.053 against 0.22)."""
    for name, label in LABELS.items():
        row = joint_calibration.measure(name)
        drop = row.judgement.spread.difference.mean
        if name.startswith("onto") or name.startswith("ReLU"):
            assert drop > -row.floor, row.text()
        if label == "collapse":
            assert drop < -2 * row.floor, row.text()


def test_the_objective_agrees_with_the_labels_it_can_see():
    """ΔR (reported beside the verdict) rises for every compression case and falls for every other one."""
    for name, label in LABELS.items():
        objective = joint_calibration.measure(name).judgement.rate_reduction
        assert objective.verdict == ("holds" if label == "compression" else "fails"), name


def _pairs(seed, d=16, n=24, K=4, seeds=4):
    """Per seed: (exact-subspace tokens, isotropic tokens, bases, labels)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(seeds):
        U = orthonormal_bases(K, d, d // K, seed=rng)
        labels = rng.integers(0, K, n)
        X = normalize_columns(rng.standard_normal((d, n)))
        A = normalize_columns(np.einsum("nde,en->dn", protocol.subspace_projectors(U)[labels], X))
        out.append((A, X, U, labels))
    return out


def _judged(pairs, transform):
    """The judgement of A against B, each set measured after ``transform(Z, U)`` → (Z', U') with the yardsticks'
    draws of (Z, U): the isotropic rate is taken on the sets' coordinates and the rotated one on the spectrum, so
    neither moves with a rotation of tokens and heads (crate_theory.protocol, "Drawing the yardsticks")."""
    measured = []
    for s, (A, X, U, labels) in enumerate(pairs):
        row = []
        for Z in (A, X):
            Z2, U2 = transform(Z, U)
            rng, (K, d, p) = np.random.default_rng(s), U.shape
            iso, frames = protocol.isotropic_tokens(Z, rng, 2), protocol.rotation_frames(d, K, p, rng, 2)
            row.append(protocol.profile_from_yardsticks(Z2, U2, 0.1, iso, frames, labels).as_dict())
        measured.append(row)
    a, b = ({k: np.array([m[i][k] for m in measured]) for k in measured[0][0]} for i in (0, 1))
    return compresses(a, b, floor=0.01)


@given(seed=st.integers(0, 2**32 - 1), log_scales=st.lists(st.floats(-6, 6), min_size=24, max_size=24))
def test_the_judgement_is_invariant_to_rescaling_and_to_a_joint_rotation(seed, log_scales):
    pairs = _pairs(seed)
    base = _judged(pairs, lambda Z, U: (Z, U))
    scales = np.exp(np.array(log_scales))
    rotation = random_orthogonal(16, np.random.default_rng(seed))
    for transform in (lambda Z, U: (Z * scales, U), lambda Z, U: (rotation @ Z, rotation @ U)):
        judged = _judged(pairs, transform)
        assert judged.label == base.label
        for name in ("specific", "alignment", "spread", "rate_reduction"):
            # rounding of unit columns, a QR and products with O: far below any difference the rule weighs
            assert getattr(judged, name).difference.mean == pytest.approx(getattr(base, name).difference.mean,
                                                                          abs=1e-9), name


@given(seed=st.integers(0, 2**32 - 1))
def test_rotating_the_tokens_alone_is_never_compression(seed):
    rotation = random_orthogonal(16, np.random.default_rng(seed))
    pairs = [(rotation @ A, A, U, labels) for A, _, U, labels in _pairs(seed)]  # B: on their subspaces; A: rotated
    judged = _judged(pairs, lambda Z, U: (Z, U))
    assert judged.label == "no compression"
