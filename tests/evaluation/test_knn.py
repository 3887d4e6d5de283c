"""The weighted k-NN (Wu et al. 2018, DINO) against a brute-force loop, on separable data, leave-one-out, bad input."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from crate_nn.evaluation.knn import knn_evaluate, knn_neighbours, knn_scores


def brute_force_scores(train_x, train_y, query_x, k, temperature, classes, exclude=None):
    """The definition written out: cosine similarity to every training sample, the k largest, exp(s/T) votes."""
    scores = np.zeros((len(query_x), classes))
    for q, x in enumerate(query_x):
        sims = []
        for i, t in enumerate(train_x):
            if exclude is not None and i == exclude[q]:
                continue
            sims.append((float(np.dot(x, t) / (np.linalg.norm(x) * np.linalg.norm(t))), i))
        for s, i in sorted(sims, reverse=True)[:k]:
            scores[q, train_y[i]] += math.exp(s / temperature)
    return scores


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 40), q=st.integers(1, 12), d=st.integers(2, 6),
       classes=st.integers(1, 5), data=st.data())
def test_scores_match_brute_force(seed, n, q, d, classes, data):
    rng = np.random.default_rng(seed)
    train_x, query_x = rng.normal(size=(n, d)), rng.normal(size=(q, d))
    train_y = rng.integers(0, classes, n)
    k = data.draw(st.integers(1, n - 1))
    temperature = data.draw(st.sampled_from([0.07, 0.5, 2.0]))
    exclude = rng.integers(0, n, q) if data.draw(st.booleans()) else None
    fast = knn_scores(train_x, train_y, query_x, k, temperature, num_classes=classes, exclude=exclude).numpy()
    slow = brute_force_scores(train_x, train_y, query_x, k, temperature, classes, exclude)
    # d ≥ 2 continuous features have no ties in similarity (d = 1 has only ±1); float64 sums of ≤ 39 terms of size ≤ e^{1/0.07}
    np.testing.assert_allclose(fast, slow, rtol=1e-12, atol=0)


def test_known_answer():
    """Three training points on the unit circle, one query: neighbours and votes worked out by hand."""
    train_x = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    train_y = np.array([0, 1, 1])
    query = np.array([[math.cos(0.3), math.sin(0.3)]])  # cosines: cos 0.3, cos(π/2 − 0.3), cos(π − 0.3)
    s, index = knn_neighbours(train_x, query, 2)
    assert index.tolist() == [[0, 1]]
    np.testing.assert_allclose(s.numpy(), [[math.cos(0.3), math.sin(0.3)]], rtol=1e-15)
    scores = knn_scores(train_x, train_y, query, 2, temperature=0.5).numpy()
    np.testing.assert_allclose(scores, [[math.exp(math.cos(0.3) / 0.5), math.exp(math.sin(0.3) / 0.5)]], rtol=1e-14)
    # k = 3 adds the opposite point's small vote to class 1: still class 0 wins at T = 0.07
    assert knn_scores(train_x, train_y, query, 3).argmax().item() == 0


def test_separable_clusters_are_classified_perfectly():
    """Ten well-separated directions with tight clusters: every k up to the class size gives 100%, leave-one-out
    too, and the chosen k is the smallest of the tied ones."""
    rng = np.random.default_rng(0)
    centres = np.linalg.qr(rng.normal(size=(16, 10)))[0].T  # 10 orthonormal directions in R^16
    def sample(per_class):
        y = np.repeat(np.arange(10), per_class)
        return centres[y] + 0.05 * rng.normal(size=(len(y), 16)), y
    train_x, train_y = sample(30)
    test_x, test_y = sample(5)
    result = knn_evaluate(train_x, train_y, test_x, test_y, ks=(1, 10, 20))
    assert result.accuracy == {1: 1.0, 10: 1.0, 20: 1.0}
    assert result.train_accuracy == {1: 1.0, 10: 1.0, 20: 1.0}
    assert result.k == 1 and result.top1 == 1.0


def test_leave_one_out_is_not_self_retrieval():
    """Random labels: with its own entry every training sample is classified correctly; leave-one-out is at chance."""
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(400, 32)), rng.integers(0, 4, 400)
    with_self = (knn_scores(x, y, x, 10).argmax(1).numpy() == y).mean()
    result = knn_evaluate(x, y, x[:10], y[:10], ks=(10,))
    # its own weight e^{1/0.07} ≈ 1.6e6 outweighs nine neighbours whose cosines in R^32 stay below ~0.7 (e^{10} each)
    assert with_self == 1.0
    assert abs(result.train_accuracy[10] - 0.25) < 0.1  # chance; ± 4.5 binomial standard deviations (σ ≈ 0.022)


def test_selection_subset_is_seeded_and_skips_too_large_k():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(50, 4)), rng.integers(0, 3, 50)
    a = knn_evaluate(x, y, x[:5], y[:5], ks=(5, 10, 200), select_samples=20, seed=3)
    b = knn_evaluate(x, y, x[:5], y[:5], ks=(5, 10, 200), select_samples=20, seed=3)
    assert a == b and set(a.accuracy) == {5, 10}  # k = 200 needs more than 50 training samples


@pytest.mark.parametrize("call, match", [
    (lambda x, y: knn_scores(x, y, x, 0), "k: expected an integer in"),
    # without exclude all 10 training samples can vote (k = 10 is valid); leaving one out leaves 9
    (lambda x, y: knn_scores(x, y, x, 11), r"k: expected an integer in \[1, 10\]"),
    (lambda x, y: knn_scores(x, y, x, 10, exclude=np.arange(10)), r"k: expected an integer in \[1, 9\]"),
    (lambda x, y: knn_scores(x, y, x[:, :2], 3), "train_x, query_x: features of different widths"),
    (lambda x, y: knn_scores(x * np.nan, y, x, 3), "train_x: expected a finite"),
    (lambda x, y: knn_scores(x, y[:5], x, 3), "train_y: expected 10 integer labels"),
    (lambda x, y: knn_scores(x, y, x, 3, temperature=0.0), "temperature: expected a positive"),
    (lambda x, y: knn_scores(x, y, x, 3, exclude=[0]), "exclude: expected one training index"),
    (lambda x, y: knn_evaluate(x, y, x, y, ks=(50,)), "ks: every k"),
])
def test_bad_input_names_the_argument(call, match):
    x, y = np.random.default_rng(0).normal(size=(10, 3)), np.arange(10) % 2
    with pytest.raises(ValueError, match=match):
        call(x, y)


def test_torch_input_and_chunking_agree():
    rng = np.random.default_rng(4)
    x, q = rng.normal(size=(60, 5)), rng.normal(size=(17, 5))
    whole = knn_neighbours(x, q, 7)
    chunked = knn_neighbours(torch.from_numpy(x).float(), torch.from_numpy(q), 7, chunk=4)
    # float32 rounding moves the cosines by ~1e-7; neighbouring cosines of 60 random points differ by ~1e-2
    assert torch.equal(whole[1], chunked[1])
