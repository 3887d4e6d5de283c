"""LayerNorm, the CRATE encoder layer (45) and the unrolled encoder (crate_theory.layer), both skip wirings."""
import numpy as np
import pytest
import torch
from _theory_cases import random_bases, seeds
from hypothesis import given
from hypothesis import strategies as st

import crate_theory as ct


def _params(rng, K, d, p, tied=False, affine=True):
    return ct.CrateLayerParams(
        U=random_bases(rng, K, d, p),
        D=rng.standard_normal((d, d)) / np.sqrt(d),
        W=None if tied else rng.standard_normal((d, K * p)) / np.sqrt(K * p),
        b=None if tied else 0.1 * rng.standard_normal(d),
        ln1_weight=1 + 0.1 * rng.standard_normal(d) if affine else None,
        ln1_bias=0.1 * rng.standard_normal(d) if affine else None,
        ln2_weight=1 + 0.1 * rng.standard_normal(d) if affine else None,
        ln2_bias=0.1 * rng.standard_normal(d) if affine else None,
    )


def _row_convention_layer(x, P, eta, lam, skip, scale):
    """The authors' layer as the authors' code computes it, tokens as rows (x is (n, d)), in NumPy."""

    def ln(v, w, b):
        mu = v.mean(-1, keepdims=True)
        var = ((v - mu) ** 2).mean(-1, keepdims=True)
        out = (v - mu) / np.sqrt(var + 1e-5)
        return out * (1 if w is None else w) + (0 if b is None else b)

    K, d, p = P.U.shape
    y = ln(x, P.ln1_weight, P.ln1_bias)
    w = y @ P.U.transpose(1, 0, 2).reshape(d, K * p)  # qkv weight (K·p, d) = [U_1 … U_K]*
    heads = []
    for k in range(K):
        wk = w[:, k * p : (k + 1) * p]
        logits = wk @ wk.T * scale
        attn = np.exp(logits - logits.max(-1, keepdims=True))
        heads.append(attn / attn.sum(-1, keepdims=True) @ wk)
    x_half = (x if skip == "official" else y) + np.hstack(heads) @ P.W.T + P.b
    y2 = ln(x_half, P.ln2_weight, P.ln2_bias)
    return x_half, np.maximum(y2 + eta * (y2 - y2 @ P.D.T) @ P.D - eta * lam, 0)


@given(seed=seeds, d=st.integers(2, 8), n=st.integers(1, 6), affine=st.booleans())
def test_layer_norm_equals_torch_per_token(seed, d, n, affine):
    """layer_norm(Z) = torch.nn.functional.layer_norm(Z.T, (d,), weight, bias, eps=1e-5).T in float64."""
    rng = np.random.default_rng(seed)
    Z = 3 * rng.standard_normal((d, n)) + 2
    w, b = (rng.standard_normal(d), rng.standard_normal(d)) if affine else (None, None)
    ours = ct.layer_norm(Z, w, b)
    theirs = torch.nn.functional.layer_norm(
        torch.tensor(Z.T), (d,), None if w is None else torch.tensor(w), None if b is None else torch.tensor(b), 1e-5
    )
    np.testing.assert_allclose(ours, theirs.numpy().T, rtol=1e-12, atol=1e-13)  # same formula, float64 rounding
    if not affine:
        # the mean of (z − μ)/√(σ² + ε) is 0 up to the rounding of z − μ, ≈ ε_machine·max|z| per entry, magnified by
        # 1/√(σ² + ε): up to 1/√1e-5 ≈ 316× for a column of nearly equal entries (d 2, n 5 found one at 2.6e-14)
        scale = np.abs(Z).max(axis=0) / np.sqrt(Z.var(axis=0) + 1e-5)
        assert np.all(np.abs(ours.mean(axis=0)) <= 16 * np.finfo(float).eps * scale), (ours.mean(axis=0), scale)


@given(seed=seeds, K=st.integers(1, 3), p=st.integers(1, 3), n=st.integers(1, 5), skip=st.sampled_from(["official", "paper"]))
def test_crate_layer_matches_row_convention_statement(seed, K, p, n, skip):
    """crate_layer (column convention) = the authors' layer in the row convention, for both skip
    wirings, with the code's temperature √p (logits × p^{-1/2}) as the default."""
    rng = np.random.default_rng(seed)
    d = K * p + int(rng.integers(0, 3))
    P = _params(rng, K, d, p)
    Z = 2 * rng.standard_normal((d, n))
    half, out = ct.crate_layer(Z, P, eta=0.1, lam=0.1, skip=skip)
    x_half, x_next = _row_convention_layer(Z.T, P, 0.1, 0.1, skip, p**-0.5)
    np.testing.assert_allclose(half, x_half.T, rtol=1e-11, atol=1e-12)  # same arithmetic up to association
    np.testing.assert_allclose(out, x_next.T, rtol=1e-11, atol=1e-12)
    assert np.all(out >= 0)


def test_skip_aliases_and_variants():
    """"input"/"normed" are crate_nn's names for "official"/"paper"; the tied map (36) uses β = p/(nε²); the soft
    variant is S_{ηλ} of the gradient step (Table 13); "mm" applies (123) to LN2's output."""
    rng = np.random.default_rng(0)
    P = _params(rng, 2, 6, 3)
    Z = rng.standard_normal((6, 5))
    for a, b in [("official", "input"), ("paper", "normed")]:
        for x, y in zip(ct.crate_layer(Z, P, skip=a), ct.crate_layer(Z, P, skip=b)):
            np.testing.assert_array_equal(x, y)
    tied = _params(rng, 2, 6, 3, tied=True)
    eps = 0.7
    half, _ = ct.crate_layer(Z, tied, eps=eps, temperature=1.0)
    Y = ct.layer_norm(Z, tied.ln1_weight, tied.ln1_bias)
    np.testing.assert_allclose(half, Z + ct.mssa(Y, tied.U, eps), rtol=1e-14, atol=1e-15)
    half, soft = ct.crate_layer(Z, P, eta=0.2, lam=0.3, sparsify="soft")
    Y2 = ct.layer_norm(half, P.ln2_weight, P.ln2_bias)
    np.testing.assert_allclose(soft, ct.soft_threshold(Y2 - 0.2 * P.D.T @ (P.D @ Y2 - Y2), 0.06), rtol=1e-13, atol=1e-15)
    assert np.any(soft < 0)  # the plain-LASSO prox keeps negative codes
    _, mm = ct.crate_layer(Z, P, lam=0.3, eps=eps, sparsify="mm")
    alpha = 6 / (5 * eps**2)
    np.testing.assert_allclose(
        mm, np.maximum((1 + 4 / (9 * (1 + alpha))) * P.D.T @ Y2 - 4 * 0.3 / (9 * alpha), 0), rtol=1e-13, atol=1e-15
    )


def test_crate_forward_trace_and_batch():
    """crate_forward chains layers (Z^{ℓ+1} is the next input), returns every Z^ℓ, Z^{ℓ+1/2}, Z^{ℓ+1}, and a batch
    (B, d, n) equals the loop; zero layers return the input."""
    rng = np.random.default_rng(1)
    layers = [_params(rng, 2, 8, 4) for _ in range(3)]
    Zs = rng.standard_normal((2, 8, 6))
    trace = ct.crate_forward(Zs, layers, eta=0.1, lam=0.1, causal=True)
    assert len(trace.inputs) == len(trace.halves) == len(trace.outputs) == 3
    np.testing.assert_array_equal(trace.inputs[0], Zs)
    for ell in range(3):
        half, out = ct.crate_layer(trace.inputs[ell], layers[ell], causal=True)
        np.testing.assert_array_equal(trace.halves[ell], half)
        np.testing.assert_array_equal(trace.outputs[ell], out)
        if ell < 2:
            np.testing.assert_array_equal(trace.inputs[ell + 1], out)
    np.testing.assert_array_equal(trace.output, trace.outputs[-1])
    for b in range(2):
        single = ct.crate_forward(Zs[b], layers, causal=True)
        np.testing.assert_allclose(single.output, trace.output[b], rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(ct.crate_forward(Zs, []).output, Zs)


def test_layer_errors():
    rng = np.random.default_rng(2)
    P = _params(rng, 2, 6, 3, tied=True)
    Z = rng.standard_normal((6, 4))
    with pytest.raises(ValueError, match="eps must be given"):
        ct.crate_layer(Z, P)
    with pytest.raises(ValueError, match="skip"):
        ct.crate_layer(Z, P, eps=1.0, skip="residual")
    with pytest.raises(ValueError, match="params.U"):
        ct.crate_layer(rng.standard_normal((5, 4)), P, eps=1.0)
    with pytest.raises(TypeError, match=r"layers\[0\]"):
        ct.crate_forward(Z, [{"U": P.U}])
    with pytest.raises(ValueError, match="weight"):
        ct.layer_norm(Z, weight=np.ones(5))
