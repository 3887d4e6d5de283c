"""The joint rule beyond its calibration (verify.joint_calibration.BEYOND): constructions the collapse floor was not
derived from — class shares up to 0.7/0.1/0.1/0.1 and a class absent, coherent subspaces, an input's tokens on 2 of
4 subspaces — at three sizes, and every pull towards one direction or point, a class on one point and a ReLU after a
collapse. Labels written from the papers' definitions before measuring, but for the coherent cases where R^c itself
does not credit the move (`verify.joint_calibration.OVERLAP`, recorded after measuring)."""
import numpy as np
import pytest

from verify import joint_calibration
from verify.joint import Sizes

BEYOND = {case.name: case for case in joint_calibration.BEYOND}


@pytest.mark.parametrize("name", list(BEYOND))
def test_each_construction_gets_its_label(name):
    row = joint_calibration.measure(name)
    assert row.judgement.label == BEYOND[name].label, row.text()


@pytest.mark.parametrize("name", [n for n, c in BEYOND.items() if c.name.startswith("onto")])
def test_exact_subspace_tokens_are_never_collapse_and_lie_within_the_worst_case(name):
    """Whatever the law: the drop of spread lies within the floor, below the worst law's own mean drop (one
    subspace per input) but for the seeds' noise (4 standard errors of the mean)."""
    row = joint_calibration.measure(name)
    difference = row.judgement.spread.difference
    worst = Sizes(*row.case.size).collapse_floor().drops["one subspace per input"][0]
    assert row.judgement.label != "collapse" and difference.low > -row.floor, row.text()
    assert -difference.mean <= worst + 4 * difference.std / np.sqrt(difference.n), row.text()


@pytest.mark.parametrize("name", [n for n, c in BEYOND.items() if c.label == "collapse"])
def test_collapses_lie_beyond_the_floor_they_are_judged_by(name):
    """Each collapse's whole spread interval lies beyond the floor (the orthant floor after a ReLU: a non-negative
    output excuses no collapse)."""
    row = joint_calibration.measure(name)
    j = row.judgement
    floor = Sizes(*row.case.size).collapse_floor()
    assert row.floor == (floor.orthant_floor if name.startswith("ReLU") else floor.floor)
    assert j.sparsification == name.startswith("ReLU") and j.spread.difference.high < -row.floor, row.text()


def test_where_the_objective_credits_a_collapse_the_judgement_says_so():
    """Where ΔR credits a collapse (few tokens, ε 0.1: R of a few isotropic tokens is below R^c, and collapse lowers
    R^c more), the judgement says so beside the label."""
    j = joint_calibration.measure("all tokens onto one shared direction, digits size").judgement
    assert j.label == "collapse" and j.rate_reduction.verdict == "holds"
    assert "ΔR rises: the paper's objective alone would credit compression" in j.text()
