"""Activations kept in bfloat16 between layers (`CRATEClassifier.keep_activations`, ``crate-train --run.activations
bf16``): what stays float32, that nothing changes outside a bf16 autocast or by default, and how far the logits
move from float32 — within a bound derived from bfloat16's unit roundoff by a float64 model of its roundings."""
from __future__ import annotations

import copy

import pytest
import torch
from _rounding import rel_error, rounding_bound
from torch import nn

import crate_nn
from crate_nn.engine.optim import build_optimizer
from crate_nn.models.blocks import CRATELayer, LayerNorm
from crate_nn.tasks import get_preset

SIZE = dict(image_size=32, patch_size=8, num_classes=10, dim=64, depth=6, heads=4)
"""17 tokens × 8 images = 136 > d = 64: the folded ISTA step of training runs."""


def bf16_logits(model: nn.Module, images: torch.Tensor, keep: bool) -> torch.Tensor:
    model.keep_activations(torch.bfloat16 if keep else None)
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(images)
    finally:
        model.keep_activations(None)


def build(name: str) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = crate_nn.create_model(name, **SIZE).eval()
    images = torch.randn(8, 3, 32, 32)
    with torch.no_grad():
        reference = copy.deepcopy(model).double()(images.double())
    return model, images, reference


# ----------------------------------------------------------------------------------------------- the bound
@pytest.mark.parametrize("name", ["crate_tiny", "vit_tiny"])
def test_bf16_activation_logits_stay_within_the_rounding_models_bound(name):
    """Why the bound holds: each rounding to bfloat16 multiplies a value by (1 + δ), |δ| ≤ u = 2^-8, and an absolute
    error uniform within ±½ ulp has E δ² ≤ u²/3. `RoundingModel` draws δ uniform in [−u, u] (E δ² = u²/3) at every
    operation's output and every parameter: a superset of the roundings of the bf16-activation path (the weights'
    bf16 copies; the outputs of the products, sums, LayerNorms, ReLUs; its products accumulate in float32, 2^16 ×
    finer). To first order the logit error is a sum of independent zero-mean terms, one per rounding, propagated by
    the same network, so its mean square under the model bounds the bf16 computation's. A norm of that many
    independent contributions exceeds twice its root mean square with negligible probability (χ² tail), so the bf16
    logits must lie within 2 × the model's rms error of the float64 logits.

    Measured (this size, seed 0): crate 1.4e-2 against a model rms of 2.3e-2; ViT 9.3e-3 against 1.7e-2;
    autocast's float32 activations 5.5e-3 and 4.5e-3. CRATE-Base at 224² (batch 2): 3.2e-2 against 4.6e-2,
    autocast 6.8e-3 — the residual stream, rounded twice per layer, is what bf16 activations add."""
    model, images, reference = build(name)
    bound = rounding_bound(model, images, reference)
    kept, autocast_only = bf16_logits(model, images, keep=True), bf16_logits(model, images, keep=False)
    assert kept.dtype == torch.bfloat16
    assert rel_error(autocast_only, reference) <= bound  # the model covers autocast's roundings too
    assert rel_error(kept, reference) <= bound, (rel_error(kept, reference), bound)


def narrower(bits: int):
    """A forward hook rounding a layer's output to ``bits`` significant bits: a path that lost precision."""

    def hook(module, inputs, output):
        mantissa, exponent = torch.frexp(output.float())
        return torch.ldexp(torch.round(mantissa * 2**bits) / 2**bits, exponent).to(output.dtype)

    return hook


def test_the_bound_rejects_a_path_that_loses_precision():
    """The same check fails when every layer's output is rounded to 5 significant bits instead of bfloat16's 8."""
    model, images, reference = build("crate_tiny")
    bound = rounding_bound(model, images, reference)
    handles = [m.register_forward_hook(narrower(5)) for m in model.modules() if isinstance(m, CRATELayer)]
    try:
        assert rel_error(bf16_logits(model, images, keep=True), reference) > bound
    finally:
        for handle in handles:
            handle.remove()


# ----------------------------------------------------------------------------------------------- dtypes
def test_the_activations_are_bf16_and_the_weights_gradients_and_optimizer_state_float32():
    torch.manual_seed(0)
    model = crate_nn.create_model("crate_tiny", **SIZE)
    model.keep_activations(torch.bfloat16)
    dtypes = []
    hooks = [m.register_forward_hook(lambda m, i, o: dtypes.append(o.dtype))
             for m in model.modules() if isinstance(m, (CRATELayer, LayerNorm))]
    optimizer = build_optimizer(get_preset("imagenet"), model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(torch.randn(8, 3, 32, 32))
    nn.functional.cross_entropy(logits.float(), torch.arange(8)).backward()
    optimizer.step()
    for hook in hooks:
        hook.remove()
    assert logits.dtype == torch.bfloat16 and set(dtypes) == {torch.bfloat16}
    assert len(dtypes) == 3 * SIZE["depth"] + 1  # each layer, its two LayerNorms, the head's LayerNorm
    assert {p.dtype for p in model.parameters()} == {p.grad.dtype for p in model.parameters()} == {torch.float32}
    assert {t.dtype for state in optimizer.state.values() for t in state.values()} == {torch.float32}


def test_nothing_changes_by_default_or_outside_a_bf16_autocast():
    """``LayerNorm`` without ``keep_dtype`` is ``nn.LayerNorm`` (bit for bit, also under autocast with a bf16 input);
    a model asked to keep bf16 activations computes as before in float32 and under a float16 autocast."""
    torch.manual_seed(0)
    ours, plain = LayerNorm(16), nn.LayerNorm(16)
    plain.load_state_dict(ours.state_dict())
    x = torch.randn(4, 5, 16)
    assert torch.equal(ours(x), plain(x))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(ours(x.bfloat16()), plain(x.bfloat16()))
    model, images, _ = build("crate_tiny")
    with torch.no_grad():
        before = model(images)
        model.keep_activations(torch.bfloat16)
        assert torch.equal(model(images), before)
        with torch.autocast("cpu", dtype=torch.float16):
            kept = model(images)
        model.keep_activations(None)
        with torch.autocast("cpu", dtype=torch.float16):
            assert torch.equal(kept, model(images))
    with pytest.raises(ValueError, match="dtype"):
        model.keep_activations(torch.int8)


def test_compiled_bf16_activations_stay_within_the_bound():
    """torch.compile without graph breaks, and its bf16-activation logits within the same bound (inductor's fused
    kernels round at fewer places than eager, never at more)."""
    model, images, reference = build("crate_tiny")
    bound = rounding_bound(model, images, reference)
    model.keep_activations(torch.bfloat16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        explained = torch._dynamo.explain(model)(images)
        logits = torch.compile(model)(images)
    assert explained.graph_break_count == 0
    assert logits.dtype == torch.bfloat16 and rel_error(logits, reference) <= bound
