"""Linear probe (App. C.2, eqs. 81–82): logistic regression on frozen features, its ℓ2 weight chosen by
cross-validation over C ∈ {1e-3, 1e-2, …, 1e3}, as the papers do with scikit-learn.

Features are standardised with the training split's mean and standard deviation first (a choice the papers do not
state; it makes the solver converge on features of any scale and leaves the probe's function class unchanged).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PROBE_CS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)


@dataclass
class ProbeResult:
    """Held-out accuracy of the probe, the C chosen by cross-validation and the training accuracy."""

    accuracy: float
    C: float
    train_accuracy: float


def linear_probe(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray, test_y: np.ndarray, *,
                 Cs: Sequence[float] = PROBE_CS, folds: int = 3, seed: int = 0, max_iter: int = 2000) -> ProbeResult:
    """Fit ℓ2 logistic regression on (train_x (N, d), train_y (N,)) with C chosen by ``folds``-fold stratified
    cross-validation over ``Cs``, then score it on (test_x, test_y)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    train_x, test_x = np.asarray(train_x, dtype=np.float64), np.asarray(test_x, dtype=np.float64)
    if train_x.ndim != 2 or test_x.ndim != 2 or train_x.shape[1] != test_x.shape[1]:
        raise ValueError(f"train_x, test_x: expected (N, d) arrays of one width, got {train_x.shape} and "
                         f"{test_x.shape}")
    if len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise ValueError("train_y, test_y: expected one label per feature row")
    if not (np.isfinite(train_x).all() and np.isfinite(test_x).all()):
        raise ValueError("train_x, test_x: features must be finite")
    search = GridSearchCV(make_pipeline(StandardScaler(), LogisticRegression(max_iter=max_iter)),
                          {"logisticregression__C": list(Cs)}, scoring="accuracy",
                          cv=StratifiedKFold(folds, shuffle=True, random_state=seed))
    search.fit(train_x, train_y)
    return ProbeResult(accuracy=float(search.score(test_x, test_y)),
                       C=float(search.best_params_["logisticregression__C"]),
                       train_accuracy=float(search.score(train_x, train_y)))
