"""The training loop's parts against their formulas (hypothesis): the learning-rate schedule, label-smoothed
cross-entropy, one Lion step written out from the Lion paper, and k accumulated micro-batches vs one batch."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from crate_nn import create_model
from crate_nn.presets import get_preset
from crate_nn.schedule import build_scheduler, warmup_cosine
from crate_nn.train import build_optimizer, micro_step


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


@given(warmup=st.integers(0, 5), extra=st.integers(1, 10), lr=st.floats(1e-6, 1.0))
def test_scheduler_sets_the_rate_of_every_optimizer_step(warmup, extra, lr):
    """Optimizer step s (0-based) runs at lr · warmup_cosine(s): the scheduler is stepped per optimizer step."""
    param = nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=lr)
    scheduler = build_scheduler(optimizer, warmup, warmup + extra)
    for s in range(warmup + extra + 2):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(lr * warmup_cosine(s, warmup, warmup + extra),
                                                                rel=1e-12)
        optimizer.step()
        scheduler.step()


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


@given(
    batch=st.integers(1, 6),
    classes=st.integers(2, 12),
    smoothing=st.floats(0.0, 0.9),
    seed=st.integers(0, 2**31 - 1),
)
def test_label_smoothed_cross_entropy_matches_formula(batch, classes, smoothing, seed):
    """loss = mean_i [ (1 − ε)(−log p_{i,y_i}) + ε/C · Σ_j (−log p_ij) ], gradient (p − q)/B with q the smoothed
    target; computed here in float64 NumPy, the loop's ``micro_step`` in float64 torch."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=3.0, size=(batch, classes))
    labels = rng.integers(0, classes, size=batch)
    model = FixedLogits(torch.from_numpy(logits))
    loss = micro_step(model, None, torch.from_numpy(labels), smoothing, accumulation=1)
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


# ----------------------------------------------------------------------------------------------- accumulation
@given(k=st.sampled_from([1, 2, 4, 8]), smoothing=st.floats(0.0, 0.5), seed=st.integers(0, 2**31 - 1))
def test_accumulated_micro_batches_equal_one_batch(k, smoothing, seed):
    """k micro-batches of 8/k images through ``micro_step`` accumulate exactly the gradient of one batch of 8."""
    torch.manual_seed(seed % 2**16)
    model = _tiny_model()
    images = torch.randn(8, 1, 8, 8, dtype=torch.float64)
    labels = torch.randint(0, 3, (8,))
    whole = micro_step(model, images, labels, smoothing, accumulation=1)
    reference = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    losses = [micro_step(model, x, y, smoothing, accumulation=k) for x, y in zip(images.chunk(k), labels.chunk(k))]
    assert torch.stack(losses).mean().item() == pytest.approx(whole.item(), rel=1e-12)  # float64 sums
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, reference[n], rtol=1e-10, atol=1e-13, msg=n)  # float64 sum order
