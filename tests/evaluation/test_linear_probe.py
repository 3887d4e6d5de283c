"""The linear probes (App. C.2): the torch probe minimises scikit-learn's objective (float64 cross-check), chooses its
weight decay on held-out training data only, is deterministic, its Adam solver approaches the same minimum, and bad
input names the argument."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from crate_nn.evaluation.linear_probe import (
    PROBE_CS,
    ProbeSolver,
    equivalent_regularisation,
    fit_linear_probe,
    holdout_split,
    linear_probe,
    run_linear_probe,
    torch_linear_probe,
)

TIGHT = ProbeSolver(tol=1e-10, max_iter=10000)
"""L-BFGS run to where float64 can no longer resolve a decrease of the loss (max |∂L| ~ 1e-9)."""


def blobs(seed: int, n: int, d: int, classes: int, spread: float = 1.5):
    """Overlapping Gaussian blobs (unit-variance centres, noise ``spread``), every class present, each feature then
    scaled by 0.1–10 and shifted by ~5 (standardisation undoes it)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, d))
    y = np.concatenate([np.arange(classes), rng.integers(0, classes, n - classes)])
    x = (centres[y] + spread * rng.normal(size=(n, d))) * rng.uniform(0.1, 10, size=d) + 5 * rng.normal(size=d)
    return x, y


def sklearn_fit(x, y, C, solver):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(x)
    options = dict(tol=1e-14, max_iter=1000) if solver == "newton-cholesky" else dict(tol=1e-12, max_iter=100000)
    return scaler, LogisticRegression(C=C, solver=solver, **options).fit(scaler.transform(x), y)


def objective(probe, x, y, weight_decay):
    """(*) written out in float64 for a fitted probe."""
    z = (torch.as_tensor(x) - probe.mean) / probe.scale
    weight, bias = probe.weight.double(), probe.bias.double()
    return float(F.cross_entropy(z @ weight.T + bias, torch.as_tensor(y)) + 0.5 * weight_decay * weight.square().sum())


# ----------------------------------------------------------------------------------------------- cross-check
@given(seed=st.integers(0, 2**32 - 1), classes=st.integers(3, 5), d=st.integers(5, 24), n=st.integers(100, 400),
       log_c=st.floats(-2, 2))
def test_fixed_weight_decay_is_sklearns_fit(seed, classes, d, n, log_c):
    """One λ = 1/(C·N), no sweep: the torch probe's standardisation, weights, centred biases and probabilities are
    scikit-learn's StandardScaler + LogisticRegression(C) (K ≥ 3: the same multinomial parametrisation)."""
    x, y = blobs(seed, n, d, classes)
    C = 10.0**log_c
    probe = fit_linear_probe(x, y, equivalent_regularisation(C, n), solver=TIGHT)
    probabilities = torch.softmax(probe.logits(x), dim=1).numpy()
    bias = probe.bias.numpy() - probe.bias.numpy().mean()  # b is unique up to a constant added to every class
    scaler, exact = sklearn_fit(x, y, C, "newton-cholesky")
    # mean and population std by other summation orders: float64 rounding of sums of ≤ 400 terms
    np.testing.assert_allclose(probe.mean.numpy(), scaler.mean_, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(probe.scale.numpy(), scaler.scale_, rtol=1e-12)
    # Newton's method reaches the unique minimiser to rounding (max |∂L| ~ 1e-16); L-BFGS stops near max |∂L| ~ 1e-9,
    # which moves W and b by about that over the objective's curvature (≥ λ in W) and the probabilities by less:
    # measured ≤ 5e-8 (probabilities) and ≤ 2e-6 (W, centred b) over 300 such problems
    z = scaler.transform(x)
    np.testing.assert_allclose(probabilities, exact.predict_proba(z), rtol=0, atol=1e-6)
    np.testing.assert_allclose(probe.weight.numpy(), exact.coef_, rtol=0, atol=1e-5)
    np.testing.assert_allclose(bias, exact.intercept_ - exact.intercept_.mean(), rtol=0, atol=1e-5)
    # the probe's own solver (L-BFGS-B) stops on a relative decrease of 64ε in the loss: measured ≤ 1.4e-6 away
    _, lbfgs = sklearn_fit(x, y, C, "lbfgs")
    np.testing.assert_allclose(probabilities, lbfgs.predict_proba(z), rtol=0, atol=1e-5)


def test_one_weight_decay_scores_as_sklearn():
    """Without a sweep the probe's held-out and training accuracies are scikit-learn's for the same C (predictions
    agree: their probabilities differ by < 1e-6, far less than the margin between the two most probable classes of
    any of these samples)."""
    x, y = blobs(0, 500, 16, 4)
    test_x, test_y = x[400:], y[400:]
    C = 0.5
    result = torch_linear_probe(x[:400], y[:400], test_x, test_y, weight_decays=[equivalent_regularisation(C, 400)],
                                solver=TIGHT)
    scaler, sklearn = sklearn_fit(x[:400], y[:400], C, "lbfgs")
    top_two = np.sort(sklearn.predict_proba(scaler.transform(x)), axis=1)[:, -2:]
    assert (top_two[:, 1] - top_two[:, 0]).min() > 1e-4
    assert result.accuracy == sklearn.score(scaler.transform(test_x), test_y)
    assert result.train_accuracy == sklearn.score(scaler.transform(x[:400]), y[:400])
    assert 0.5 < result.accuracy < 1  # overlapping blobs: neither chance (0.25) nor trivially separable
    assert result.C == pytest.approx(C, rel=1e-15)  # 1/(1/(C·N)·N): two roundings


def test_sklearn_probe_reports_its_weight_decay():
    x, y = blobs(1, 240, 8, 3)
    result = linear_probe(torch.from_numpy(x[:180]), torch.from_numpy(y[:180]), x[180:], y[180:])
    assert result.C in PROBE_CS and result.weight_decay == 1 / (result.C * 180)
    assert run_linear_probe("sklearn", x[:180], y[:180], x[180:], y[180:]) == result


# ----------------------------------------------------------------------------------------------- choice of λ
def test_weight_decay_is_chosen_on_held_out_training_samples_only():
    """The λ chosen is the one with the best accuracy on `holdout_split`'s held-out training samples when fit on the
    rest (computed here with scikit-learn on features standardised with the whole training split's statistics);
    the test set plays no part: permuted test labels or other test features change the accuracy, not the choice."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    x, y = blobs(2, 700, 20, 5, spread=2.5)
    train_x, train_y, test_x, test_y = x[:500], y[:500], x[500:], y[500:]
    decays = (1.0, 1e-1, 1e-2, 1e-3, 1e-4)
    result = torch_linear_probe(train_x, train_y, test_x, test_y, weight_decays=decays, holdout=0.2, seed=3,
                                solver=TIGHT)
    fit, held = holdout_split(train_y, 0.2, seed=3)
    z = StandardScaler().fit(train_x).transform(train_x)
    scores = [LogisticRegression(C=equivalent_regularisation(decay, len(fit)), tol=1e-12, max_iter=100000)
              .fit(z[fit], train_y[fit]).score(z[held], train_y[held]) for decay in decays]
    assert len(set(scores)) > 1  # the choice matters on this data
    assert result.weight_decay == decays[scores.index(max(scores))]  # ties: the first, the larger λ
    rng = np.random.default_rng(0)
    for other_x, other_y in ((test_x, rng.permutation(test_y)), (rng.normal(size=test_x.shape), test_y)):
        other = torch_linear_probe(train_x, train_y, other_x, other_y, weight_decays=decays, holdout=0.2, seed=3,
                                   solver=TIGHT)
        assert (other.weight_decay, other.train_accuracy) == (result.weight_decay, result.train_accuracy)
        assert other.accuracy != result.accuracy


def test_ties_choose_the_larger_weight_decay():
    """Well-separated blobs: every λ classifies the held-out samples perfectly; the largest λ is chosen, whatever
    the order they are given in."""
    x, y = blobs(8, 300, 6, 3, spread=0.05)
    result = torch_linear_probe(x[:200], y[:200], x[200:], y[200:], weight_decays=(1e-4, 1e-2, 1e-3))
    assert result.weight_decay == 1e-2 and result.accuracy == 1.0


@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(1, 30), min_size=2, max_size=6),
       fraction=st.floats(0.05, 0.5))
def test_holdout_split_is_stratified_seeded_and_a_partition(seed, sizes, fraction):
    labels = np.random.default_rng(seed).permutation(np.repeat(np.arange(len(sizes)), sizes))
    expected = np.minimum(np.floor(fraction * np.array(sizes) + 0.5), np.array(sizes) - 1)
    if not expected.any():
        with pytest.raises(ValueError, match="holdout: .* holds out none"):
            holdout_split(labels, fraction, seed)
        return
    fit, held = holdout_split(labels, fraction, seed)
    assert np.array_equal(np.sort(np.concatenate([fit, held])), np.arange(len(labels)))
    assert np.array_equal(fit, np.sort(fit)) and np.array_equal(held, np.sort(held))
    assert np.array_equal(np.bincount(labels[held], minlength=len(sizes)), expected)
    again = holdout_split(torch.from_numpy(labels), fraction, seed)
    assert np.array_equal(again[1], held)


def test_holdout_split_depends_on_the_seed():
    labels = np.arange(200) % 4
    assert not np.array_equal(holdout_split(labels, 0.1, 0)[1], holdout_split(labels, 0.1, 1)[1])


# ----------------------------------------------------------------------------------------------- solvers
@pytest.mark.parametrize("solver", [ProbeSolver(), ProbeSolver("adam", epochs=5, batch_size=32)])
def test_results_are_deterministic(solver):
    x, y = blobs(4, 300, 10, 3)
    runs = [torch_linear_probe(x[:200], y[:200], x[200:], y[200:], seed=7, solver=solver) for _ in range(2)]
    assert runs[0] == runs[1]
    fits = [fit_linear_probe(x, y, 1e-3, solver=solver, seed=seed) for seed in (7, 7, 8)]
    assert torch.equal(fits[0].weight, fits[1].weight) and torch.equal(fits[0].bias, fits[1].bias)
    # the seed orders Adam's minibatches; L-BFGS is full-batch and does not read it
    assert torch.equal(fits[0].weight, fits[2].weight) == (solver.name == "lbfgs")


def test_adam_approaches_the_minimum():
    """Minibatch Adam with the ℓ2 term in its gradient and a cosine learning rate ends near the minimum of (*) that
    L-BFGS finds: objective gap measured 8.5e-5 after 100 epochs (4.6e-2 after 10), the minibatch noise annealed
    away by the schedule, float32 and float64 alike; the minimiser of another objective is further away (that of
    2λ: 7.6e-3 above the minimum)."""
    x, y = blobs(5, 400, 20, 4, spread=1.0)
    weight_decay = 1e-2
    best = objective(fit_linear_probe(x, y, weight_decay, solver=TIGHT), x, y, weight_decay)
    for dtype in (torch.float64, torch.float32):
        gaps = [objective(fit_linear_probe(x, y, weight_decay, solver=ProbeSolver("adam", epochs=epochs, batch_size=32,
                                                                                   lr=1e-2), dtype=dtype), x, y,
                          weight_decay) - best for epochs in (10, 100)]
        assert 0 <= gaps[1] < 1e-3 and gaps[1] < gaps[0] / 10, gaps


def test_lbfgs_out_of_iterations_warns():
    x, y = blobs(6, 200, 10, 3)
    with pytest.warns(RuntimeWarning, match=r"L-BFGS stopped after 2 iterations .* raise solver.max_iter"):
        fit_linear_probe(x, y, 1e-4, solver=ProbeSolver(max_iter=2, tol=1e-12))


def test_float32_and_tensor_input_give_the_same_probe():
    """Tensor input (features float32) and a float32 fit: the accuracy of the float64 fit on NumPy input, the same λ
    (float32 rounds the standardised features by ~1e-7 and its L-BFGS stops at tol = 1e-4 like the float64 one)."""
    x, y = blobs(7, 600, 12, 4)
    reference = torch_linear_probe(x[:450], y[:450], x[450:], y[450:])
    tensors = [torch.from_numpy(a) for a in (x[:450].astype(np.float32), y[:450], x[450:].astype(np.float32), y[450:])]
    single = torch_linear_probe(*tensors, dtype=torch.float32)
    assert single.weight_decay == reference.weight_decay
    assert abs(single.accuracy - reference.accuracy) <= 1 / 150  # one of the 150 test samples at most


# ----------------------------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("call, match", [
    (lambda x, y: torch_linear_probe(x, y[:-1], x, y), "train_y: expected 30 integer labels"),
    (lambda x, y: torch_linear_probe(x, y, x[:, :3], y), "train_x, test_x: features of different widths 4 and 3"),
    (lambda x, y: torch_linear_probe(x[0], y, x, y), r"train_x: expected a non-empty \(N, d\) floating-point"),
    (lambda x, y: torch_linear_probe(np.where(x > 1, np.inf, x), y, x, y), "train_x: features must be finite"),
    (lambda x, y: torch_linear_probe(x, y, x * np.nan, y), "test_x: features must be finite"),
    (lambda x, y: torch_linear_probe(x, y * 1.0, x, y), "train_y: expected 30 integer labels"),
    (lambda x, y: torch_linear_probe(x, y, x, y + 1, num_classes=3), r"test_y: labels must lie in \[0, 3\)"),
    (lambda x, y: torch_linear_probe(x, y - 1, x, y), r"train_y: labels must lie in \[0, 3\)"),
    (lambda x, y: torch_linear_probe(x, np.where(y == 1, 0, y), x, y), r"train_y: classes \[1\] of the 3"),
    (lambda x, y: torch_linear_probe(x, y, x, y, num_classes=4), r"train_y: classes \[3\] of the 4"),
    (lambda x, y: torch_linear_probe(x, y, x, y, num_classes=1), "num_classes: expected an integer"),
    (lambda x, y: torch_linear_probe(x, y, x, y, weight_decays=()), "weight_decays: expected positive"),
    (lambda x, y: torch_linear_probe(x, y, x, y, weight_decays=(1e-3, 0.0)), "weight_decays: expected positive"),
    (lambda x, y: torch_linear_probe(x, y, x, y, holdout=1.0), r"holdout: expected a fraction in \(0, 1\)"),
    (lambda x, y: torch_linear_probe(x, y, x, y, holdout=0.01), "holdout: 0.01 of classes of 10–10"),
    (lambda x, y: torch_linear_probe(x, y, x, y, dtype=torch.int64), "dtype: expected a floating-point"),
    (lambda x, y: ProbeSolver("sgd"), "solver.name: expected one of lbfgs, adam"),
    (lambda x, y: ProbeSolver(max_iter=0), "solver.max_iter: expected a positive integer"),
    (lambda x, y: ProbeSolver(tol=float("nan")), "solver.tol: expected a positive value"),
    (lambda x, y: fit_linear_probe(x, y, -1.0), "weight_decay: expected positive"),
    (lambda x, y: linear_probe(x, y, x, y[:5]), "test_y: expected 30 integer labels"),
    (lambda x, y: run_linear_probe("torch", x, y, x, y), "solver: expected one of sklearn, lbfgs, adam"),
])
def test_bad_input_names_the_argument(call, match):
    x, y = np.random.default_rng(0).normal(size=(30, 4)), np.arange(30) % 3
    with pytest.raises(ValueError, match=match):
        call(x, y)
