"""The engine's multi-tensor Lion against ``lion-pytorch`` (the implementation the authors' recipe names).

Both apply the same elementwise operations in the same order (θ·(1 − lr·λ); sign(β1·m + (1 − β1)·g); θ − lr·u;
β2·m + (1 − β2)·g), element by element, with no reduction: on a CPU the results are bit-identical whatever the
BLAS, so equality is asserted exactly. The update rule itself is checked against its formula in
test_engine_parts.py.
"""
import copy

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from lion_pytorch import Lion as ReferenceLion

from crate_nn import create_model
from crate_nn.engine.optim import Lion, param_groups


def _model() -> torch.nn.Module:
    return create_model("crate_tiny", image_size=8, patch_size=4, in_channels=1, num_classes=3, dim=8, depth=2, heads=2)


def _steps(model, optimizer, seeds) -> None:
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=g)
        model.encoder.layers[1].ista.weight.grad = None  # a parameter without a gradient is left alone
        optimizer.step()


@given(lr=st.floats(1e-5, 1e-1), weight_decay=st.floats(0.0, 2.0), beta1=st.floats(0.5, 0.99),
       beta2=st.floats(0.5, 0.999), seed=st.integers(0, 2**16))
def test_lion_is_bit_identical_to_lion_pytorch(lr, weight_decay, beta1, beta2, seed):
    torch.manual_seed(seed)
    ours_model = _model()
    reference_model = copy.deepcopy(ours_model)
    kwargs = dict(lr=lr, betas=(beta1, beta2), weight_decay=weight_decay)
    ours = Lion(param_groups(ours_model, weight_decay, False), **kwargs)
    reference = ReferenceLion(param_groups(reference_model, weight_decay, False), **kwargs)
    _steps(ours_model, ours, [seed, seed + 1, seed + 2])
    _steps(reference_model, reference, [seed, seed + 1, seed + 2])
    for (name, a), b in zip(ours_model.named_parameters(), reference_model.parameters()):
        assert torch.equal(a, b), name


def test_lion_continues_from_a_lion_pytorch_state():
    torch.manual_seed(0)
    first = _model()
    reference = ReferenceLion(first.parameters(), lr=1e-3, weight_decay=0.1)
    _steps(first, reference, [0, 1])
    second = copy.deepcopy(first)
    ours = Lion(second.parameters(), lr=1e-3, weight_decay=0.1)
    ours.load_state_dict(copy.deepcopy(reference.state_dict()))  # as from a checkpoint: no shared tensors
    _steps(first, reference, [2])
    _steps(second, ours, [2])
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters()))


@pytest.mark.parametrize("kwargs, match", [(dict(lr=0.0), "lr"), (dict(betas=(0.9, 1.5)), "betas"),
                                           (dict(weight_decay=-1.0), "weight_decay")])
def test_lion_names_a_bad_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Lion(_model().parameters(), **kwargs)
