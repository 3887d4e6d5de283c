"""The folded ISTA step (``y + y N``, N = η(D − DᵀD), used when a batch has more tokens than d) against the
two-product form (used otherwise) and crate_theory, in float64.

The two forms are the same algebra evaluated in a different order, so in float64 they agree to ~1e-15 relative;
1e-10 is the bar of tests/models/test_models_vs_theory.py. A batch of many tokens goes through the fold; the same
tokens in chunks of at most d tokens go through the two products.
"""
import numpy as np
import pytest
import torch

import crate_theory as ct
from crate_nn import ISTA

TOL = 1e-10


@pytest.mark.parametrize("kind", ["relu", "soft"])
@pytest.mark.parametrize("d, eta, lam", [(6, 0.1, 0.1), (16, 0.5, 0.3), (32, 1.0, 0.0)])
def test_folded_and_two_product_steps_agree_with_theory(kind, d, eta, lam):
    torch.manual_seed(d)
    block = ISTA(d, eta, lam, kind=kind).double()
    x = torch.randn(4, 3 * d, d, dtype=torch.float64, requires_grad=True)  # 12·d tokens > d: folded
    chunks = [x[b:b + 1, i:i + d] for b in range(4) for i in range(0, 3 * d, d)]  # d tokens each: two products
    folded = block(x)
    two_products = torch.cat([block(c) for c in chunks], dim=1).view_as(folded)
    D = block.weight.detach().numpy()
    for b in range(4):
        Z = x[b].detach().numpy().T
        step = Z - eta * D.T @ (D @ Z - Z)
        theirs = ct.ista(Z, D, eta=eta, lam=lam) if kind == "relu" else ct.soft_threshold(step, eta * lam)
        assert np.abs(folded[b].detach().numpy().T - theirs).max() < TOL
    assert (folded - two_products).abs().max() < TOL
    weights = torch.randn_like(folded)  # gradients of a generic linear functional of the output
    grads = [torch.autograd.grad((out * weights).sum(), (x, block.weight)) for out in (folded, two_products)]
    for a, b in zip(*grads):
        assert (a - b).abs().max() < TOL * max(1.0, b.abs().max().item())
