"""Linear probe (App. C.2, eqs. 81–82): multinomial logistic regression on frozen features, ℓ2-regularised.

Two implementations of one model:

* `linear_probe` — scikit-learn, the papers' protocol, for small data: LogisticRegression with C chosen by 3-fold
  stratified cross-validation over C ∈ {1e-3, 1e-2, …, 1e3}.
* `torch_linear_probe` — on the device (CPU or CUDA), for features held in memory up to ImageNet scale: the ℓ2
  weight λ chosen on a fixed, seeded, stratified held-out part of the *training* set (`holdout_split`), then the
  probe refit on the whole training set with that λ and scored once on the test set (as DINO's and MAE's linear
  evaluations sweep their hyper-parameters on held-out data). `fit_linear_probe` fits one λ.

Both standardise the features with the training split's mean and standard deviation first (a choice the papers do
not state; it makes the solvers converge on features of any scale and leaves the probe's function class unchanged).
With standardised features z_i ∈ R^d and labels y_i ∈ {0, …, K−1}, i = 1 … N, both minimise over W (K, d), b (K,)

    L(W, b) = (1/N) Σ_i CE(W z_i + b, y_i) + (λ/2) ‖W‖²_F,        CE(s, y) = log Σ_k exp(s_k) − s_y        (*)

with the bias b unpenalised. scikit-learn's LogisticRegression(C) minimises ½‖W‖²_F + C Σ_i CE_i, which is (*)
multiplied by C·N with λ = 1/(C·N) (`equivalent_regularisation` maps either way), for K ≥ 3 classes (for K = 2
scikit-learn fits one weight vector, a different parametrisation of the same model). (*) is strictly convex in W, so
its minimiser W is unique, b is unique up to a constant added to every class and the probabilities are unique.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..engine.schedule import cosine

PROBE_CS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0)
PROBE_WEIGHT_DECAYS = (1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7)
"""λ of the torch probe's sweep: for the 1,293 digits of the built-in presets the same range as `PROBE_CS`
(λ = 1/(C·N) from 0.77 to 7.7e-7)."""
TORCH_SOLVERS = ("lbfgs", "adam")
PROBE_SOLVERS = ("sklearn", *TORCH_SOLVERS)
"""`run_linear_probe`'s choices: scikit-learn's probe, or the torch probe with one of its `ProbeSolver` names."""


@dataclass
class ProbeResult:
    """Held-out accuracy of the probe, its chosen regularisation (as scikit-learn's C and as the weight decay λ of
    (*), λ = 1/(C·N) for the N training samples of the final fit) and its training accuracy."""

    accuracy: float
    C: float
    train_accuracy: float
    weight_decay: float


@dataclass(frozen=True)
class ProbeSolver:
    """How the torch probe minimises (*).

    ``"lbfgs"``: full-batch L-BFGS with a strong-Wolfe line search (`torch.optim.LBFGS`), deterministic; the loss
    and its gradient are summed over blocks of rows, so the memory beyond the features is a few (K, d) matrices.
    Stops when max |∂L| ≤ ``tol`` (1e-4: scikit-learn's default, which bounds the same gradient of the same mean
    objective), when the line search can no longer decrease L in the dtype (in float64 near max |∂L| ~ 1e-9), or
    after ``max_iter`` iterations (with a RuntimeWarning if max |∂L| > ``tol``). The choice for small data and,
    with a small ``tol``, for float64 cross-checks.

    ``"adam"``: ``epochs`` passes over the training set in minibatches of ``batch_size`` (a seeded order), Adam
    with the ℓ2 term in the gradient (`torch.optim.Adam`'s ``weight_decay`` on W only, so its fixed points are the
    minimisers of (*); AdamW's decoupled decay has other fixed points), the learning rate on a cosine schedule from
    ``lr`` to 0. Approximates the minimum in a few passes: what scales to ImageNet (float32 on a GPU).
    """

    name: str = "lbfgs"
    max_iter: int = 1000
    tol: float = 1e-4
    epochs: int = 30
    batch_size: int = 1024
    lr: float = 1e-3

    def __post_init__(self) -> None:
        if self.name not in TORCH_SOLVERS:
            raise ValueError(f"solver.name: expected one of {', '.join(TORCH_SOLVERS)}, got {self.name!r}")
        for field in ("max_iter", "epochs", "batch_size"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"solver.{field}: expected a positive integer, got {value!r}")
        for field in ("tol", "lr"):
            value = getattr(self, field)
            if not (isinstance(value, float | int) and math.isfinite(value) and value > 0):
                raise ValueError(f"solver.{field}: expected a positive value, got {value!r}")


@dataclass
class LinearProbe:
    """A fitted probe: the training features' mean and scale (d,) float64 and W (K, d), b (K,) of (*), all on the
    device of the fit."""

    mean: torch.Tensor
    scale: torch.Tensor
    weight: torch.Tensor
    bias: torch.Tensor
    weight_decay: float

    def logits(self, x) -> torch.Tensor:
        """W z + b (N, K) of features ``x`` (N, d), z standardised with the training features' mean and scale."""
        return _standardise(_features("x", x), self.mean, self.scale, self.weight.dtype) @ self.weight.T + self.bias

    def accuracy(self, x, y) -> float:
        """Fraction of the rows of ``x`` (N, d) whose most probable class is their label in ``y`` (N,)."""
        x = _features("x", x)
        z = _standardise(x, self.mean, self.scale, self.weight.dtype)
        return _correct(z, _labels("y", y, len(x)).to(z.device), self.weight, self.bias) / len(x)


def equivalent_regularisation(value: float, n: int) -> float:
    """scikit-learn's C of the weight decay λ of (*) on ``n`` samples, or λ of C: λ = 1/(C·n), C = 1/(λ·n)."""
    return 1.0 / (value * n)


def run_linear_probe(solver: str, train_x, train_y, test_x, test_y, *, seed: int = 0,
                     device: torch.device | str = "cpu") -> ProbeResult:
    """`linear_probe` (``solver="sklearn"``) or `torch_linear_probe` on ``device`` with the `ProbeSolver` of that
    name and its defaults (what the tasks' ``probe_solver`` option selects)."""
    if solver not in PROBE_SOLVERS:
        raise ValueError(f"solver: expected one of {', '.join(PROBE_SOLVERS)}, got {solver!r}")
    if solver == "sklearn":
        return linear_probe(train_x, train_y, test_x, test_y, seed=seed)
    return torch_linear_probe(train_x, train_y, test_x, test_y, seed=seed, solver=ProbeSolver(solver), device=device)


def linear_probe(train_x, train_y, test_x, test_y, *, Cs: Sequence[float] = PROBE_CS, folds: int = 3, seed: int = 0,
                 max_iter: int = 2000) -> ProbeResult:
    """scikit-learn's probe: (*) fit on (train_x (N, d), train_y (N,)) with C chosen by ``folds``-fold stratified
    cross-validation over ``Cs`` (each fold standardised with the statistics of its training part), refit on the
    whole training set and scored on (test_x (M, d), test_y (M,)); NumPy arrays or tensors, computed in float64."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GridSearchCV, StratifiedKFold
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    train_x, train_y, test_x, test_y = (t.cpu().numpy() for t in _check_inputs(train_x, train_y, test_x, test_y))
    train_x, test_x = train_x.astype(np.float64, copy=False), test_x.astype(np.float64, copy=False)
    search = GridSearchCV(make_pipeline(StandardScaler(), LogisticRegression(max_iter=max_iter)),
                          {"logisticregression__C": list(Cs)}, scoring="accuracy",
                          cv=StratifiedKFold(folds, shuffle=True, random_state=seed))
    search.fit(train_x, train_y)
    C = float(search.best_params_["logisticregression__C"])
    return ProbeResult(accuracy=float(search.score(test_x, test_y)), C=C,
                       train_accuracy=float(search.score(train_x, train_y)),
                       weight_decay=equivalent_regularisation(C, len(train_y)))


def torch_linear_probe(train_x, train_y, test_x, test_y, *, weight_decays: Sequence[float] = PROBE_WEIGHT_DECAYS,
                       holdout: float = 0.1, seed: int = 0, num_classes: int | None = None,
                       solver: ProbeSolver = ProbeSolver(), device: torch.device | str = "cpu",
                       dtype: torch.dtype | None = None) -> ProbeResult:
    """The probe on ``device``: λ of (*) chosen on a held-out part of the training set, refit, scored on the test set.

    Args:
        train_x, train_y: training features (N, d) and labels (N,) in [0, K); NumPy arrays or tensors (any device).
        test_x, test_y: test features (M, d) and labels (M,): used once, to score the final probe.
        weight_decays: the λ swept. With one value there is no sweep: the whole training set is fit at once.
        holdout: the fraction of every class of the training set held out to choose λ (`holdout_split` with
            ``seed``). Each λ, from the largest down, is fit on the rest (starting from the previous λ's solution)
            and scored on the held-out part; the most accurate λ wins (ties: the larger). The probe is then refit
            on the whole training set, starting from the chosen λ's solution. The features are standardised once,
            with the statistics of the whole training split (label-free: the held-out labels inform the choice
            of λ and nothing else).
        num_classes: K; None: one more than the largest label of train_y and test_y. Every class needs a training
            sample (its unpenalised bias has no finite optimum otherwise).
        solver: `ProbeSolver` (``seed`` also orders Adam's minibatches).
        device: where the standardised training features (N × d in ``dtype``) and the fit live.
        dtype: of the standardised features and the fit; None: float64 on the CPU, float32 elsewhere.

    Returns: `ProbeResult`; its C is scikit-learn's C of the chosen λ on the N training samples, 1/(λ·N).
    """
    train_x, train_y, test_x, test_y = _check_inputs(train_x, train_y, test_x, test_y)
    weight_decays = _weight_decays(weight_decays)
    classes = _check_classes(train_y, test_y, num_classes)
    device = torch.device(device)
    dtype = _dtype(dtype, device)
    mean, scale = _moments(train_x, device)
    sweep = len(weight_decays) > 1
    fit, held = holdout_split(train_y, holdout, seed) if sweep else (np.arange(len(train_y)), np.arange(0))
    rows = torch.from_numpy(np.concatenate([fit, held]))  # [fit | held-out]: both parts are views of one copy
    z = _standardise(train_x, mean, scale, dtype, rows)
    y = train_y[rows.to(train_y.device)].to(device)
    chosen, init = weight_decays[0], None
    if sweep:
        solutions, correct = [], []
        for weight_decay in weight_decays:
            solutions.append(_fit(z[:len(fit)], y[:len(fit)], classes, weight_decay, solver, seed,
                                  solutions[-1] if solutions else None))
            correct.append(_correct(z[len(fit):], y[len(fit):], *solutions[-1]))
        best = correct.index(max(correct))  # the first of the ties: the larger λ
        chosen, init = weight_decays[best], solutions[best]
    probe = LinearProbe(mean, scale, *_fit(z, y, classes, chosen, solver, seed, init), chosen)
    return ProbeResult(accuracy=probe.accuracy(test_x, test_y), C=equivalent_regularisation(chosen, len(train_y)),
                       train_accuracy=_correct(z, y, probe.weight, probe.bias) / len(y), weight_decay=chosen)


def fit_linear_probe(x, y, weight_decay: float, *, num_classes: int | None = None,
                     solver: ProbeSolver = ProbeSolver(), seed: int = 0, device: torch.device | str = "cpu",
                     dtype: torch.dtype | None = None) -> LinearProbe:
    """The minimiser of (*) with λ = ``weight_decay`` for features ``x`` (N, d) and labels ``y`` (N,) in [0, K)
    (K = ``num_classes``, else the largest label plus one), the features standardised with their own mean and
    standard deviation; ``solver``, ``seed``, ``device`` and ``dtype`` as in `torch_linear_probe`."""
    x = _features("x", x)
    y = _labels("y", y, len(x))
    (weight_decay,) = _weight_decays([weight_decay], "weight_decay")
    classes = _check_classes(y, y[:0], num_classes)
    device = torch.device(device)
    mean, scale = _moments(x, device)
    z = _standardise(x, mean, scale, _dtype(dtype, device))
    return LinearProbe(mean, scale, *_fit(z, y.to(device), classes, weight_decay, solver, seed, None), weight_decay)


def holdout_split(labels, fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(fit indices, held-out indices), each sorted, of ``labels`` (N,): of each class with n_c samples,
    round(fraction · n_c) drawn with ``seed`` are held out, at most n_c − 1 (every class keeps a sample to fit)."""
    if not (isinstance(fraction, float | int) and 0 < fraction < 1):
        raise ValueError(f"holdout: expected a fraction in (0, 1), got {fraction!r}")
    labels = np.asarray(labels.cpu() if isinstance(labels, torch.Tensor) else labels)
    order = np.random.default_rng(seed).permutation(len(labels))
    order = order[np.argsort(labels[order], kind="stable")]  # grouped by class, in random order within each
    _, start, count = np.unique(labels[order], return_index=True, return_counts=True)
    held_out = np.minimum(np.floor(fraction * count + 0.5), count - 1).astype(np.int64)
    position = np.arange(len(order)) - np.repeat(start, count)  # rank of each sample within its class
    is_held = position < np.repeat(held_out, count)
    if not is_held.any():
        raise ValueError(f"holdout: {fraction} of classes of {count.min()}–{count.max()} training samples holds "
                         "out none; raise it, or pass one weight decay")
    return np.sort(order[~is_held]), np.sort(order[is_held])


# ----------------------------------------------------------------------------------------------- helpers
def _features(name: str, x) -> torch.Tensor:
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    if t.ndim != 2 or not t.is_floating_point() or len(t) == 0:
        raise ValueError(f"{name}: expected a non-empty (N, d) floating-point array, got shape {tuple(t.shape)} "
                         f"dtype {t.dtype}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: features must be finite, {int((~torch.isfinite(t)).sum())} values are not")
    return t


def _labels(name: str, y, n: int) -> torch.Tensor:
    t = y if isinstance(y, torch.Tensor) else torch.as_tensor(np.asarray(y))
    if t.shape != (n,) or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise ValueError(f"{name}: expected {n} integer labels (one per feature row), got shape {tuple(t.shape)} "
                         f"dtype {t.dtype}")
    return t.long()


def _check_inputs(train_x, train_y, test_x, test_y) -> tuple[torch.Tensor, ...]:
    train_x, test_x = _features("train_x", train_x), _features("test_x", test_x)
    if train_x.shape[1] != test_x.shape[1]:
        raise ValueError(f"train_x, test_x: features of different widths {train_x.shape[1]} and {test_x.shape[1]}")
    return train_x, _labels("train_y", train_y, len(train_x)), test_x, _labels("test_y", test_y, len(test_x))


def _check_classes(train_y: torch.Tensor, test_y: torch.Tensor, num_classes: int | None) -> int:
    """K; ValueError naming the labels outside [0, K) or the classes without a training sample."""
    labels = torch.cat([train_y.cpu(), test_y.cpu()])
    if num_classes is None:
        num_classes = int(labels.max()) + 1
    elif isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes: expected an integer ≥ 2, got {num_classes!r}")
    for name, y in (("train_y", train_y), ("test_y", test_y)):
        if len(y) and not (0 <= int(y.min()) and int(y.max()) < num_classes):
            raise ValueError(f"{name}: labels must lie in [0, {num_classes}), got {int(y.min())} … {int(y.max())}")
    missing = (torch.bincount(train_y.cpu(), minlength=num_classes) == 0).nonzero().flatten().tolist()
    if missing:
        raise ValueError(f"train_y: classes {missing[:10]}{' …' if len(missing) > 10 else ''} of the {num_classes} "
                         "have no training sample")
    return num_classes


def _weight_decays(values: Sequence[float], name: str = "weight_decays") -> list[float]:
    """The λ of ``values``, largest first; ValueError naming ``name`` unless positive finite numbers (at least one)."""
    values = list(values)
    if not values or not all(isinstance(v, float | int) and math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{name}: expected positive finite values, got {values!r}")
    return sorted({float(v) for v in values}, reverse=True)


def _dtype(dtype: torch.dtype | None, device: torch.device) -> torch.dtype:
    dtype = dtype or (torch.float64 if device.type == "cpu" else torch.float32)
    if not dtype.is_floating_point:
        raise ValueError(f"dtype: expected a floating-point dtype, got {dtype}")
    return dtype


def _blocks(n: int, width: int) -> list[slice]:
    """Row blocks of an (n, width) computation, each ≤ 2^24 values."""
    step = max(1, 2**24 // max(width, 1))
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def _moments(x: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation (population, two passes in float64) of the columns of ``x`` (N, d) on
    ``device``; constant columns get scale 1 (they stay constant), as scikit-learn's StandardScaler does."""
    blocks = _blocks(*x.shape)
    mean = sum(x[rows].to(device, torch.float64).sum(dim=0) for rows in blocks) / len(x)
    variance = sum((x[rows].to(device, torch.float64) - mean).square().sum(dim=0) for rows in blocks) / len(x)
    constant = (x.amax(dim=0) == x.amin(dim=0)).to(device)
    return mean, torch.where(constant, torch.ones_like(variance), variance.sqrt())


def _standardise(x: torch.Tensor, mean: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype,
                 rows: torch.Tensor | None = None) -> torch.Tensor:
    """(x[rows] − mean) / scale in ``dtype`` on the device of ``mean``, block by block (no float64 copy of x)."""
    count = len(x) if rows is None else len(rows)
    out = torch.empty(count, x.shape[1], dtype=dtype, device=mean.device)
    for block in _blocks(count, x.shape[1]):
        part = x[block] if rows is None else x[rows[block].to(x.device)]
        out[block] = ((part.to(mean.device, torch.float64) - mean) / scale).to(dtype)
    return out


def _correct(z: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> int:
    """How many rows of ``z`` (N, d) the probe (W, b) classifies as their label ``y`` (N,)."""
    return sum(int(((z[rows] @ weight.T + bias).argmax(dim=1) == y[rows]).sum()) for rows in _blocks(len(z), len(bias)))


def _fit(z: torch.Tensor, y: torch.Tensor, classes: int, weight_decay: float, solver: ProbeSolver, seed: int,
         init: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(W (K, d), b (K,)) minimising (*) on standardised features ``z`` (N, d) and labels ``y`` (N,), from ``init``
    (zeros when None)."""
    weight = torch.zeros(classes, z.shape[1], dtype=z.dtype, device=z.device) if init is None else init[0].clone()
    bias = torch.zeros(classes, dtype=z.dtype, device=z.device) if init is None else init[1].clone()
    weight.requires_grad_(True)
    bias.requires_grad_(True)
    with torch.enable_grad():
        (_lbfgs if solver.name == "lbfgs" else _adam)(weight, bias, z, y, weight_decay, solver, seed)
    return weight.detach(), bias.detach()


def _objective(weight: torch.Tensor, bias: torch.Tensor, z: torch.Tensor, y: torch.Tensor,
               weight_decay: float) -> torch.Tensor:
    """(*) over all rows, its gradient accumulated into ``weight.grad`` and ``bias.grad`` block by block."""
    total = torch.zeros((), dtype=z.dtype, device=z.device)
    for rows in _blocks(len(z), len(bias)):
        part = F.cross_entropy(z[rows] @ weight.T + bias, y[rows], reduction="sum") / len(z)
        part.backward()
        total += part.detach()
    penalty = 0.5 * weight_decay * weight.square().sum()
    penalty.backward()
    return total + penalty.detach()


def _lbfgs(weight, bias, z, y, weight_decay: float, solver: ProbeSolver, seed: int) -> None:
    """`ProbeSolver`'s ``"lbfgs"``: minimises (*) in place of ``weight`` and ``bias`` (``seed`` is not used)."""
    optimizer = torch.optim.LBFGS([weight, bias], max_iter=solver.max_iter, max_eval=2 * solver.max_iter,
                                  tolerance_grad=solver.tol, tolerance_change=0.0, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        return _objective(weight, bias, z, y, weight_decay)

    optimizer.step(closure)
    state = optimizer.state[weight]
    if state["n_iter"] >= solver.max_iter or state["func_evals"] >= 2 * solver.max_iter:  # out of budget, not stalled
        closure()  # the gradient where L-BFGS stopped
        gradient = max(float(weight.grad.abs().max()), float(bias.grad.abs().max()))
        if gradient > solver.tol:
            warnings.warn(f"linear probe: L-BFGS stopped after {state['n_iter']} iterations ({state['func_evals']} "
                          f"evaluations) with max |∂L| = {gradient:.1e} > tol = {solver.tol:.1e} "
                          f"(λ = {weight_decay:g}); raise solver.max_iter", RuntimeWarning)
    optimizer.zero_grad()


def _adam(weight, bias, z, y, weight_decay: float, solver: ProbeSolver, seed: int) -> None:
    """`ProbeSolver`'s ``"adam"``: approaches the minimum of (*) in place of ``weight`` and ``bias``, its
    minibatches in the order of a generator seeded with ``seed``."""
    optimizer = torch.optim.Adam([{"params": [weight], "weight_decay": weight_decay},
                                  {"params": [bias], "weight_decay": 0.0}], lr=solver.lr)
    generator = torch.Generator().manual_seed(seed)
    total = solver.epochs * math.ceil(len(z) / solver.batch_size)
    step = 0
    for _ in range(solver.epochs):
        order = torch.randperm(len(z), generator=generator).to(z.device)
        for start in range(0, len(z), solver.batch_size):
            rows = order[start:start + solver.batch_size]
            for group in optimizer.param_groups:
                group["lr"] = cosine(step, total, solver.lr, 0.0)
            optimizer.zero_grad()
            F.cross_entropy(z[rows] @ weight.T + bias, y[rows]).backward()
            optimizer.step()
            step += 1
