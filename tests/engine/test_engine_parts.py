"""The engine's parts against their formulas (hypothesis): the per-step schedules, the EMA update, one Lion step
written out from the Lion paper, the weight-decay groups, and the classification task's label-smoothed
cross-entropy. (Accumulation, resume, preemption and DDP run through the real loop in test_engine_toy.py.)"""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from crate_nn import create_model
from crate_nn.data.batching import Batch
from crate_nn.engine.distributed import context
from crate_nn.engine.ema import EMA
from crate_nn.engine.optim import build_optimizer
from crate_nn.engine.schedule import Schedules, cosine, warmup_cosine
from crate_nn.tasks import get_preset
from crate_nn.tasks.classification import ClassificationTask


# ----------------------------------------------------------------------------------------------- schedule
@given(
    warmup=st.integers(0, 50),
    extra=st.integers(1, 200),
    min_ratio=st.floats(0.0, 1.0),
    data=st.data(),
)
def test_warmup_cosine_matches_formula(warmup, extra, min_ratio, data):
    total = warmup + extra
    step = data.draw(st.integers(0, total + 10))
    value = warmup_cosine(step, warmup, total, min_ratio)
    if step < warmup:
        expected = (step + 1) / warmup
    elif step >= total:
        expected = min_ratio
    else:
        expected = min_ratio + (1 - min_ratio) * (1 + math.cos(math.pi * (step - warmup) / extra)) / 2
    assert value == pytest.approx(expected, rel=1e-12, abs=1e-15)  # same float64 arithmetic, reordered
    assert min(min_ratio, 1 / max(warmup, 1)) - 1e-15 <= value <= 1 + 1e-15


@given(warmup=st.integers(1, 30), extra=st.integers(2, 60))
def test_warmup_cosine_endpoints_and_monotonicity(warmup, extra):
    total = warmup + extra
    values = [warmup_cosine(s, warmup, total) for s in range(total + 2)]
    assert values[0] == 1 / warmup and values[warmup - 1] == 1.0 and values[warmup] == 1.0
    assert values[total] == 0.0 and values[total + 1] == 0.0
    assert all(a < b for a, b in zip(values[:warmup - 1], values[1:warmup]))  # strictly rising warm-up
    assert all(a >= b for a, b in zip(values[warmup:], values[warmup + 1:]))  # non-increasing cosine
    midpoint = warmup + extra / 2
    if midpoint.is_integer():
        assert values[int(midpoint)] == pytest.approx(0.5, abs=1e-15)  # cos(π/2) = 0 up to rounding


@given(total=st.integers(1, 300), start=st.floats(0.0, 2.0), end=st.floats(0.0, 2.0), data=st.data())
def test_cosine_interpolates_from_start_to_end(total, start, end, data):
    """DINO's schedules: end + (start − end)(1 + cos(π s/T))/2, start at 0, end from T on, monotone between."""
    step = data.draw(st.integers(0, total + 5))
    expected = end + (start - end) * (1 + math.cos(math.pi * min(step, total) / total)) / 2
    assert cosine(step, total, start, end) == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert cosine(0, total, start, end) == pytest.approx(start, abs=1e-15)
    assert cosine(total + 3, total, start, end) == end
    values = [cosine(s, total, start, end) for s in range(total + 1)]
    diffs = np.diff(values) * (1 if end >= start else -1)
    assert (diffs >= -1e-15).all()


def test_schedules_hold_constants_when_no_end_is_given():
    s = Schedules(2, 10, 0.1, weight_decay=0.04, weight_decay_end=0.4, ema_momentum=0.996, ema_momentum_end=1.0)
    assert [s.lr_multiplier(i) for i in (0, 1)] == [0.5, 1.0] and s.lr_multiplier(10) == pytest.approx(0.1)
    # end + (start − end)·1 at step 0: one rounding away from start
    assert s.weight_decay_at(0) == pytest.approx(0.04, rel=1e-15)
    assert s.weight_decay_at(10) == 0.4 and s.ema_momentum_at(10) == 1.0
    constant = Schedules(0, 10, weight_decay=0.05, ema_momentum=0.9)
    assert {constant.weight_decay_at(i) for i in range(12)} == {0.05}
    assert {constant.ema_momentum_at(i) for i in range(12)} == {0.9}
    with pytest.raises(ValueError, match="warmup_steps"):
        Schedules(11, 10)


@given(momentum=st.floats(0.0, 1.0), seed=st.integers(0, 2**16))
def test_ema_update_is_its_formula_exactly(momentum, seed):
    """ema ← m·ema + (1 − m)·θ with the same float operations (mul then add with alpha), buffers copied."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    ema = EMA(model)
    assert all(not p.requires_grad for p in ema.module.parameters())
    before = {n: p.detach().clone() for n, p in ema.module.named_parameters()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
        model[1].running_mean.add_(1.0)
    ema.update(model, momentum)
    for (name, averaged), current in zip(ema.module.named_parameters(), model.parameters()):
        expected = before[name].mul(momentum).add(current, alpha=1.0 - momentum)
        assert torch.equal(averaged, expected), name  # same operations in the same order: bit-equal
    assert torch.equal(ema.module[1].running_mean, model[1].running_mean)
    with pytest.raises(ValueError, match="momentum"):
        ema.update(model, 1.5)


def test_schedule_rejects_bad_arguments():
    with pytest.raises(ValueError, match="warmup_steps"):
        warmup_cosine(0, 5, 3)
    with pytest.raises(ValueError, match="min_ratio"):
        warmup_cosine(0, 0, 3, min_ratio=1.5)


# ----------------------------------------------------------------------------------------------- loss
class FixedLogits(nn.Module):
    """A 'model' whose output is a trainable logits table, to test the loss and its gradient in isolation."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = nn.Parameter(logits.clone())

    def forward(self, images):
        return self.logits


def _classification_task(tmp_path, smoothing: float) -> ClassificationTask:
    config = get_preset("synthetic", image_size=8, synthetic_samples=8, synthetic_classes=12, augment="none",
                        model_args=dict(patch_size=4, dim=8, depth=1, heads=2), label_smoothing=smoothing,
                        device="cpu", output_dir=str(tmp_path))
    return ClassificationTask(config, context("cpu"))


@given(
    batch=st.integers(1, 6),
    classes=st.integers(2, 12),
    smoothing=st.floats(0.0, 0.9),
    seed=st.integers(0, 2**31 - 1),
)
def test_label_smoothed_cross_entropy_matches_formula(tmp_path_factory, batch, classes, smoothing, seed):
    """loss = mean_i [ (1 − ε)(−log p_{i,y_i}) + ε/C · Σ_j (−log p_ij) ], gradient (p − q)/B with q the smoothed
    target; computed here in float64 NumPy, the classification task's ``loss`` in float64 torch."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=3.0, size=(batch, classes))
    labels = rng.integers(0, classes, size=batch)
    model = FixedLogits(torch.from_numpy(logits))
    task = _classification_task(tmp_path_factory.mktemp("ce"), smoothing)
    batch_in = Batch(torch.zeros(batch, 3, 8, 8, dtype=torch.uint8), torch.from_numpy(labels),
                     torch.arange(batch), ())
    out = task.loss(model, batch_in)
    out.loss.backward()
    loss = out.loss.detach()
    assert out.counts == {"skipped_images": 0}
    log_p = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) - logits.max(
        1, keepdims=True)
    per_sample = -(1 - smoothing) * log_p[np.arange(batch), labels] - smoothing / classes * log_p.sum(1)
    target = np.full((batch, classes), smoothing / classes)
    target[np.arange(batch), labels] += 1 - smoothing
    # float64 throughout: agreement to ~1e-15 relative, 1e-12 leaves room for log-sum-exp reordering
    assert loss.item() == pytest.approx(per_sample.mean(), rel=1e-12)
    np.testing.assert_allclose(model.logits.grad.numpy(), (np.exp(log_p) - target) / batch, rtol=1e-10, atol=1e-14)


# ----------------------------------------------------------------------------------------------- Lion
def _tiny_model() -> nn.Module:
    return create_model("crate_tiny", image_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8, depth=1,
                        heads=2).double()


@given(
    lr=st.floats(1e-5, 1e-1),
    weight_decay=st.floats(0.0, 2.0),
    beta1=st.floats(0.5, 0.99),
    beta2=st.floats(0.5, 0.999),
    decay_all=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_lion_steps_follow_the_lion_update_rule(lr, weight_decay, beta1, beta2, decay_all, seed):
    """Lion (Chen et al. 2023, Alg. 2): c = β1·m + (1 − β1)·g; θ ← θ − lr·(sign(c) + λθ); m ← β2·m + (1 − β2)·g,
    with λ = weight_decay except on norms, biases, pos_embed and cls_token (λ = 0) unless decay_all. Two steps,
    so the second uses a non-zero momentum."""
    torch.manual_seed(seed % 2**16)
    model = _tiny_model()
    config = get_preset("imagenet", lr=lr, weight_decay=weight_decay, betas=(beta1, beta2), weight_decay_all=decay_all)
    optimizer = build_optimizer(config, model)
    theta = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
    momentum = {n: np.zeros_like(v) for n, v in theta.items()}
    rng = np.random.default_rng(seed)
    for _ in range(2):
        grads = {n: rng.normal(size=v.shape) for n, v in theta.items()}
        for n, p in model.named_parameters():
            p.grad = torch.from_numpy(grads[n].copy())
        optimizer.step()
        for n in theta:
            decay = weight_decay if decay_all or (theta[n].ndim >= 2 and n not in ("pos_embed", "cls_token")) else 0.0
            c = beta1 * momentum[n] + (1 - beta1) * grads[n]
            theta[n] = theta[n] - lr * (np.sign(c) + decay * theta[n])
            momentum[n] = beta2 * momentum[n] + (1 - beta2) * grads[n]
    for n, p in model.named_parameters():
        # float64; the package computes θ(1 − lr·λ) − lr·sign(c), a reordering worth ~1e-16 per step
        np.testing.assert_allclose(p.detach().numpy(), theta[n], rtol=0, atol=1e-12, err_msg=n)


def test_weight_decay_groups_name_the_excluded_parameters():
    model = _tiny_model()
    groups = build_optimizer(get_preset("imagenet"), model).param_groups
    no_decay = {n for g in groups if g["weight_decay"] == 0 for n in g["names"]}
    decayed = {n for g in groups if g["weight_decay"] > 0 for n in g["names"]}
    assert {"pos_embed", "cls_token", "patch_embed.norm_in.weight", "head.fc.bias"} <= no_decay
    assert {"encoder.layers.0.mssa.qkv.weight", "encoder.layers.0.ista.weight", "head.fc.weight"} <= decayed
    assert all(g["weight_decay"] == 0.5 for g in build_optimizer(get_preset("imagenet", weight_decay_all=True),
                                                                 model).param_groups)
