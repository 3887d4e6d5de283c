"""Weighted k-nearest-neighbour classification of frozen features (Wu et al. 2018; DINO's k-NN evaluation; App. C.3).

Features are ℓ2-normalised; a query x is compared with every training feature by cosine similarity s_i; its k most
similar training samples vote for their labels with weights exp(s_i / T):

    score_c(x) = Σ_{i ∈ top-k(x)} exp(s_i / T) · 1[y_i = c],        prediction = argmax_c score_c(x)

with T = 0.07 and k ∈ {10, 20, 100, 200} as in DINO. The paper picks k by the highest accuracy *on the training
set* (App. C.3); a training sample is its own nearest neighbour (weight e^{1/T} ≈ 1.6·10⁶), so that accuracy is
measured leave-one-out here (each training query's own entry excluded), otherwise every k would score ~100%.
Computed in float64 (in chunks of queries), on whatever device the features are moved to.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

KNN_KS = (10, 20, 100, 200)
KNN_TEMPERATURE = 0.07


@dataclass
class KNNResult:
    """Held-out accuracy per k, leave-one-out training accuracy per k, the chosen k and its held-out accuracy."""

    accuracy: dict[int, float]
    train_accuracy: dict[int, float]
    k: int
    top1: float


def _tensor(name: str, x, dtype: torch.dtype, device) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
    if dtype.is_floating_point and not (t.ndim == 2 and t.is_floating_point() and torch.isfinite(t).all()):
        raise ValueError(f"{name}: expected a finite (N, d) array of features, got shape {tuple(t.shape)} dtype "
                         f"{t.dtype}")
    return t.to(device=device, dtype=dtype)


def knn_neighbours(train_x, query_x, k: int, *, exclude=None, chunk: int | None = None,
                   device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(cosine similarities (Q, k) float64, training indices (Q, k)) of the ``k`` training features (``train_x``
    (N, d)) most similar to each query (``query_x`` (Q, d)), most similar first.

    ``exclude`` (Q,): for each query, the index of one training sample to leave out (leave-one-out: the query's
    own index when the queries are training samples). ``chunk``: queries per similarity block (default: ~256 MB
    of float64).
    """
    train = F.normalize(_tensor("train_x", train_x, torch.float64, device), dim=1)
    query = F.normalize(_tensor("query_x", query_x, torch.float64, device), dim=1)
    if train.shape[1] != query.shape[1]:
        raise ValueError(f"train_x, query_x: features of different widths {train.shape[1]} and {query.shape[1]}")
    if exclude is not None:
        exclude = _tensor("exclude", exclude, torch.long, device)
        if exclude.shape != (query.shape[0],) or not bool(((exclude >= 0) & (exclude < train.shape[0])).all()):
            raise ValueError(f"exclude: expected one training index in [0, {train.shape[0]}) per query")
    available = train.shape[0] - int(exclude is not None)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= available:
        raise ValueError(f"k: expected an integer in [1, {available}] (the training samples available), got {k!r}")
    chunk = chunk or max(1, 2**25 // train.shape[0])
    similarities, indices = [], []
    for start in range(0, query.shape[0], chunk):
        similarity = query[start:start + chunk] @ train.T  # (q, N)
        if exclude is not None:
            rows = torch.arange(similarity.shape[0], device=similarity.device)
            similarity[rows, exclude[start:start + chunk]] = -torch.inf
        top, index = similarity.topk(k, dim=1)
        similarities.append(top)
        indices.append(index)
    return torch.cat(similarities), torch.cat(indices)


def knn_vote(similarity: torch.Tensor, labels: torch.Tensor, k: int, num_classes: int,
             temperature: float = KNN_TEMPERATURE) -> torch.Tensor:
    """Class scores (Q, C): Σ over the first ``k`` neighbours of exp(s / T) for their labels; ``similarity`` and
    ``labels`` (Q, ≥ k) sorted most similar first (`knn_neighbours`)."""
    if not temperature > 0:
        raise ValueError(f"temperature: expected a positive value, got {temperature!r}")
    scores = torch.zeros(similarity.shape[0], num_classes, dtype=torch.float64, device=similarity.device)
    return scores.scatter_add_(1, labels[:, :k], (similarity[:, :k] / temperature).exp())


def knn_scores(train_x, train_y, query_x, k: int, temperature: float = KNN_TEMPERATURE, *,
               num_classes: int | None = None, exclude=None, device: torch.device | str = "cpu") -> torch.Tensor:
    """Class scores (Q, C) of the queries ``query_x`` (Q, d) by their ``k`` nearest training features
    (``train_x`` (N, d), labels ``train_y`` (N,)), float64; ``exclude`` as in `knn_neighbours`."""
    labels = _labels(train_y, len(train_x), device)
    similarity, index = knn_neighbours(train_x, query_x, k, exclude=exclude, device=device)
    classes = int(labels.max()) + 1 if num_classes is None else num_classes
    return knn_vote(similarity, labels[index], k, classes, temperature)


def knn_evaluate(train_x, train_y, test_x, test_y, ks: Sequence[int] = KNN_KS,
                 temperature: float = KNN_TEMPERATURE, *, select_samples: int | None = None, seed: int = 0,
                 device: torch.device | str = "cpu") -> KNNResult:
    """Held-out accuracy for every k in ``ks`` (those larger than the training set minus one are skipped), the k
    with the highest leave-one-out training accuracy (ties: the smaller k) and its held-out accuracy.

    ``select_samples``: measure the training accuracy on this many training queries drawn with ``seed`` (their
    neighbours still come from the whole training set); None uses every training sample.
    """
    train_y = np.asarray(train_y)
    labels = _labels(train_y, len(train_x), device)
    usable = sorted(k for k in set(ks) if k <= len(train_y) - 1)
    if not usable:
        raise ValueError(f"ks: every k of {tuple(ks)} needs more than the {len(train_y)} training samples")
    classes = int(max(train_y.max(), np.asarray(test_y).max())) + 1
    queries = np.arange(len(train_y))
    if select_samples is not None and select_samples < len(train_y):
        queries = np.sort(np.random.default_rng(seed).choice(len(train_y), select_samples, replace=False))
    accuracy, train_accuracy = {}, {}
    for x, y, exclude, out in ((test_x, test_y, None, accuracy),
                               (np.asarray(train_x)[queries], train_y[queries], queries, train_accuracy)):
        similarity, index = knn_neighbours(train_x, x, usable[-1], exclude=exclude, device=device)
        truth = torch.as_tensor(np.asarray(y), device=similarity.device)
        for k in usable:
            predicted = knn_vote(similarity, labels[index], k, classes, temperature).argmax(dim=1)
            out[k] = float((predicted == truth).double().mean())
    best = max(usable, key=lambda k: (train_accuracy[k], -k))
    return KNNResult(accuracy, train_accuracy, best, accuracy[best])


def _labels(y, n: int, device) -> torch.Tensor:
    labels = torch.as_tensor(np.asarray(y), device=device)
    if labels.shape != (n,) or labels.is_floating_point():
        raise ValueError(f"train_y: expected {n} integer labels, got shape {tuple(labels.shape)} dtype {labels.dtype}")
    return labels.long()
