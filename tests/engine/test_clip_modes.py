"""The engine's gradient clipping modes against their formulas: the global norm (torch) and DINO's per-tensor rule."""
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from crate_nn.engine.optim import clip_gradients


def parameters_with_gradients(seed: int, scales: list[float]) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    params = []
    for i, scale in enumerate(scales):
        p = torch.nn.Parameter(torch.zeros(3, i + 1, dtype=torch.float64))
        p.grad = scale * torch.randn(3, i + 1, generator=g, dtype=torch.float64)
        params.append(p)
    return params


@given(seed=st.integers(0, 2**31 - 1), scales=st.lists(st.floats(1e-3, 1e3), min_size=1, max_size=5),
       max_norm=st.floats(0.1, 10.0))
def test_per_tensor_clipping_is_dinos_rule(seed, scales, max_norm):
    """g_i ← g_i · min(1, max_norm / (‖g_i‖ + 1e-6)) for each tensor; the returned norm is the global one before."""
    params = parameters_with_gradients(seed, scales)
    before = [p.grad.clone() for p in params]
    norm = clip_gradients(params, max_norm, "per_tensor")
    for p, g in zip(params, before):
        coefficient = max_norm / (g.norm().item() + 1e-6)
        expected = g * coefficient if coefficient < 1 else g
        torch.testing.assert_close(p.grad, expected, rtol=1e-14, atol=0)  # one float64 product per entry
        assert p.grad.norm() <= max_norm * (1 + 1e-12)
    assert norm.item() == pytest.approx(torch.cat([g.flatten() for g in before]).norm().item(), rel=1e-12)


def test_global_mode_is_torch_clip_grad_norm():
    a, b = parameters_with_gradients(0, [5.0, 7.0]), parameters_with_gradients(0, [5.0, 7.0])
    norm = clip_gradients(a, 1.0, "global")
    reference = torch.nn.utils.clip_grad_norm_(b, 1.0)
    assert torch.equal(norm, reference) and all(torch.equal(x.grad, y.grad) for x, y in zip(a, b))


def test_unknown_mode_and_no_gradients():
    with pytest.raises(ValueError, match="grad_clip_mode: expected one of global, per_tensor"):
        clip_gradients(parameters_with_gradients(0, [1.0]), 1.0, "layer")
    assert clip_gradients([torch.nn.Parameter(torch.ones(2))], 1.0, "per_tensor").item() == 0.0
