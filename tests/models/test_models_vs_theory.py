"""crate_nn (row convention, torch) against crate_theory (column convention, NumPy), both in float64.

crate_nn's ``x[b]`` (n, d) is crate_theory's ``Z.T``; the qkv weight (K·p, d) is [U_1 … U_K]*, so the bases are
``qkv.weight.view(K, p, d).transpose(1, 2)``; crate_nn multiplies the attention logits by ``scale`` where
crate_theory divides by ``temperature`` (temperature = 1/scale).

Tolerance: every comparison is float64 arithmetic of O(1)–O(10) numbers through at most a few layers, performed in a
different order on each side; observed agreement is ~1e-14, the bar is 1e-10.
"""
import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

import crate_theory as ct
from crate_nn import ISTA, MSSA, BlockConfig, CRATEDecoder, CRATEEncoder
from crate_nn.analysis.diagnostics import compression, measure_layers, sparsity, thresholded_sparsity, trace
from crate_nn.models.tssa import TSSA
from crate_theory.decoder import DecoderLayerParams, crate_decode

TOL = 1e-10


def cols(x: torch.Tensor) -> np.ndarray:
    """(batch, n, d) torch → (batch, d, n) NumPy: crate_theory's column convention."""
    return x.detach().numpy().transpose(0, 2, 1)


def bases(mssa: MSSA | TSSA) -> np.ndarray:
    """[U_1 … U_K]* (K·p, d) → U of shape (K, d, p)."""
    w = mssa.qkv.weight.detach().numpy()
    return w.reshape(mssa.heads, mssa.dim_head, -1).transpose(0, 2, 1)


def close(ours: torch.Tensor, theirs: np.ndarray) -> None:
    err = np.abs(cols(ours) - theirs).max(initial=0.0)
    assert err < TOL, err


def randomise(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """float64, with random LayerNorm affine parameters and output biases so that every mapping is exercised."""
    torch.manual_seed(seed)
    module.double()
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.3)
            elif isinstance(m, torch.nn.Linear) and m.bias is not None:
                m.bias.normal_(0, 0.3)
    return module


sizes = dict(
    d=st.integers(2, 8),
    heads=st.integers(1, 3),
    p=st.integers(1, 4),
    n=st.integers(1, 6),
    batch=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
variants = dict(
    causal=st.booleans(),
    scale=st.sampled_from([None, 1.0, 0.3]),
    eps=st.floats(0.5, 2.0),
)


def tokens(batch, n, d, seed) -> torch.Tensor:
    return torch.randn(batch, n, d, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)


@given(**sizes, **variants, tied=st.booleans())
def test_mssa_equals_theory(d, heads, p, n, batch, seed, causal, scale, eps, tied):
    mssa = randomise(MSSA(d, heads, p, scale=scale, output="tied" if tied else "free", eps=eps, causal=causal), seed)
    x = tokens(batch, n, d, seed)
    Z, U, temperature = cols(x), bases(mssa), 1 / mssa.scale
    if tied:
        theirs = ct.mssa(Z, U, eps, temperature=temperature, causal=causal, allow_nonorthonormal=True)
    else:
        W, b = mssa.out.weight.detach().numpy(), mssa.out.bias.detach().numpy()
        theirs = ct.mssa_free(Z, U, W, b, temperature=temperature, causal=causal)
    close(mssa(x), theirs)
    _, attn = mssa.forward_with_attention(x)
    for k in range(heads):  # column-stochastic maps of eqs. (35), (87) are our row maps transposed
        maps = ct.ssa_attention(Z, U[k], temperature=temperature, causal=causal)
        assert np.abs(attn[:, k].detach().numpy().transpose(0, 2, 1) - maps).max() < TOL


@given(**sizes, causal=st.booleans(), scale=st.sampled_from([None, 0.5, 4.0]), tied=st.booleans(),
       membership=st.sampled_from(["normalized", "energy"]), step=st.floats(0.1, 3.0), fused=st.booleans())
def test_tssa_equals_theory(d, heads, p, n, batch, seed, causal, scale, tied, membership, step, fused):
    """TSSA against crate_theory.tssa: Π from `membership`, the heads of `tssa_heads` through the free map W + b
    (`tssa_free`), or the tied block as the gradient step `tssa` (τ/n, causally τ/t) with ε = (d/c)^½."""
    tssa = randomise(TSSA(d, heads, p, scale=scale, membership=membership, output="tied" if tied else "free",
                          step=step, causal=causal), seed)
    tssa.fused_attn = fused
    with torch.no_grad():
        tssa.temperature.uniform_(0.2, 3.0)
    x = tokens(batch, n, d, seed)
    Z, U, c = cols(x), bases(tssa), tssa.scale
    temperature = tssa.temperature.detach().numpy()
    Pi = ct.tssa.membership(Z, U, temperature, normalize=membership == "normalized", causal=causal)
    assert np.abs(tssa.memberships(x).detach().numpy().transpose(0, 2, 1) - Pi).max() < TOL
    if tied:
        theirs = ct.tssa.tssa(Z, U, Pi, eps=(d / c) ** 0.5, step=step, causal=causal)
    else:
        W, b = tssa.out.weight.detach().numpy(), tssa.out.bias.detach().numpy()
        theirs = ct.tssa.tssa_free(Z, U, W, Pi, c, b, causal=causal)
    close(tssa(x), theirs)


@given(d=st.integers(1, 8), n=st.integers(1, 6), batch=st.integers(1, 3), seed=st.integers(0, 2**16),
       eta=st.floats(0.01, 1.0), lam=st.floats(0.0, 2.0))
def test_ista_and_soft_threshold_equal_theory(d, n, batch, seed, eta, lam):
    relu = randomise(ISTA(d, eta, lam), seed)
    soft = ISTA(d, eta, lam, kind="soft").double()
    soft.load_state_dict(relu.state_dict())
    x = tokens(batch, n, d, seed)
    Z, D = cols(x), relu.weight.detach().numpy()
    close(relu(x), ct.ista(Z, D, eta=eta, lam=lam))
    gradient_step = Z - eta * D.T @ (D @ Z - Z)
    close(soft(x), ct.soft_threshold(gradient_step, eta * lam))


@given(d=st.integers(2, 8), n=st.integers(1, 8), batch=st.integers(1, 2), seed=st.integers(0, 2**16),
       eps=st.floats(0.3, 3.0), lam=st.floats(0.0, 1.0))
def test_mm_step_equals_theory_under_its_assumptions(d, n, batch, seed, eps, lam):
    # mm_step(form="closed") checks eq. (123)'s hypotheses: orthogonal D, Z with orthonormal columns (d >= n).
    n = min(n, d)
    rng = np.random.default_rng(seed)
    Z = np.stack([np.linalg.qr(rng.standard_normal((d, n)))[0] for _ in range(batch)])
    D = np.linalg.qr(rng.standard_normal((d, d)))[0]
    mm = ISTA(d, lam=lam, kind="mm", eps=eps).double()
    with torch.no_grad():
        mm.weight.copy_(torch.from_numpy(D))
    close(mm(torch.from_numpy(Z.transpose(0, 2, 1).copy())), ct.mm_step(Z, D, eps=eps, lam=lam, form="closed"))


@given(d=st.integers(1, 6), m=st.integers(1, 12), n=st.integers(1, 5), seed=st.integers(0, 2**16),
       eta=st.floats(0.05, 1.0), lam=st.floats(0.0, 1.0))
def test_overcomplete_block_equals_two_ista_steps_from_zero(d, m, n, seed, eta, lam):
    # CRATE-α: z₂ = two proximal-gradient steps on the non-negative LASSO (42) started from codes 0 — the
    # reference's unrolled solver stopped after two iterations — decoded by the output dictionary D₁.
    block = randomise(ISTA(d, eta, lam, kind="overcomplete", dict_width=m), seed)
    x = tokens(2, n, d, seed)
    Z, D, D1 = cols(x), block.weight.detach().numpy(), block.out_weight.detach().numpy()
    codes = ct.ista_solve(Z, D, lam, eta=eta, max_iter=2, tol=0.0).Z
    close(block(x), D1 @ codes)


def theory_params(layer) -> ct.CrateLayerParams:
    mssa = layer.mssa
    out = mssa.out
    return ct.CrateLayerParams(
        U=bases(mssa),
        D=layer.ista.weight.detach().numpy(),
        W=None if out is None else out.weight.detach().numpy(),
        b=None if out is None else out.bias.detach().numpy(),
        ln1_weight=layer.norm1.weight.detach().numpy(),
        ln1_bias=layer.norm1.bias.detach().numpy(),
        ln2_weight=layer.norm2.weight.detach().numpy(),
        ln2_bias=layer.norm2.bias.detach().numpy(),
    )


def config(d, heads, p, depth, **options) -> BlockConfig:
    """The block options of a stack (the stacks take their depth beside them)."""
    return BlockConfig(dim=d, heads=heads, dim_head=p, **options), depth


@given(**sizes, **variants, depth=st.integers(1, 3), skip=st.sampled_from(["input", "normed"]),
       tied=st.booleans(), sparsify=st.sampled_from(["relu", "soft", "mm"]))
def test_encoder_equals_theory_layer_by_layer(d, heads, p, n, batch, seed, causal, scale, eps, depth, skip, tied,
                                              sparsify):
    cfg, depth = config(d, heads, p, depth, skip=skip, causal=causal, attn_scale=scale, eps=eps,
                        mssa_output="tied" if tied else "free", ista=sparsify, lam=0.5)
    encoder = randomise(CRATEEncoder(cfg, depth), seed)
    x = tokens(batch, n, d, seed)
    params = [theory_params(layer) for layer in encoder.layers]
    theirs = ct.crate_forward(cols(x), params, eta=cfg.eta, lam=cfg.lam, temperature=1 / encoder.layers[0].mssa.scale,
                                    eps=eps, skip=skip, causal=causal, sparsify="ista" if sparsify == "relu" else sparsify)
    ours = trace(encoder, x)
    for layer, t in enumerate(ours):
        close(t.input, theirs.inputs[layer])
        close(t.half, theirs.halves[layer])
        close(t.output, theirs.outputs[layer])
    close(encoder(x), theirs.output)


@given(**sizes, **variants, depth=st.integers(1, 3), skip=st.sampled_from(["input", "normed"]), tied=st.booleans())
def test_decoder_equals_theory(d, heads, p, n, batch, seed, causal, scale, eps, depth, skip, tied):
    cfg, depth = config(d, heads, p, depth, skip=skip, causal=causal, attn_scale=scale, eps=eps,
                        mssa_output="tied" if tied else "free")
    decoder = randomise(CRATEDecoder(cfg, depth), seed)
    x = tokens(batch, n, d, seed)
    params = [
        DecoderLayerParams(
            E=layer.linear.weight.detach().numpy(),
            V=bases(layer.mssa),
            W=None if tied else layer.mssa.out.weight.detach().numpy(),
            b=None if tied else layer.mssa.out.bias.detach().numpy(),
            ln1_weight=layer.norm1.weight.detach().numpy(),
            ln1_bias=layer.norm1.bias.detach().numpy(),
            ln2_weight=layer.norm2.weight.detach().numpy(),
            ln2_bias=layer.norm2.bias.detach().numpy(),
        )
        for layer in decoder.layers
    ]
    path = crate_decode(cols(x), params, temperature=1 / decoder.layers[0].mssa.scale, eps=eps, skip=skip,
                               causal=causal)
    close(decoder(x), path[-1])


@given(**sizes, eps=st.floats(0.05, 2.0), normalize=st.booleans())
def test_compression_equals_theory(d, heads, p, n, batch, seed, eps, normalize):
    mssa = randomise(MSSA(d, heads, p), seed)
    x = tokens(batch, n, d, seed)
    ours = compression(x, mssa.qkv.weight.detach(), heads, eps, normalize=normalize).numpy()
    if normalize:  # the authors' protocol: unit-norm codes per head and token, R of each p×n code matrix
        codes = ct.project_onto_bases(cols(x), bases(mssa))  # (batch, K, p, n)
        codes = codes / np.linalg.norm(codes, axis=-2, keepdims=True)
        theirs = ct.coding_rate(codes, eps).sum(-1)
    else:
        theirs = ct.compression_rate(cols(x), bases(mssa), eps)
    # log-dets of O(n) size: relative 1e-12 of values up to ~1e2.
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_measure_layers_equals_theory_for_both_protocols():
    torch.manual_seed(0)
    from crate_nn import create_model

    model = randomise(create_model("crate_tiny", image_size=16, patch_size=4, num_classes=3, dim=12, depth=3, heads=3), 0)
    model.eval()
    images = torch.randn(5, 3, 16, 16, dtype=torch.float64)
    paper = measure_layers(model, images, protocol="paper", eps=0.5, thresholds=(0.5,), batch_size=2)
    official = measure_layers(model, images, protocol="official")
    assert official.eps == 0.1  # ε² = 0.01 of the authors' measurement
    for layer, (module, t) in enumerate(zip(model.encoder.layers, trace(model, images))):
        U = bases(module.mssa)
        np.testing.assert_allclose(paper.compression[layer].values.numpy(),
                                   ct.compression_rate(cols(t.half), U, 0.5), rtol=1e-12)
        ln = ct.layer_norm(cols(t.input), module.norm1.weight.detach().numpy(), module.norm1.bias.detach().numpy())
        codes = ct.project_onto_bases(ln, U)
        codes = codes / np.linalg.norm(codes, axis=-2, keepdims=True)
        np.testing.assert_allclose(official.compression[layer].values.numpy(),
                                   ct.coding_rate(codes, 0.1).sum(-1), rtol=1e-12)
        out = t.output.numpy()
        expected_sparsity = np.count_nonzero(out.reshape(5, -1), axis=1) / out[0].size
        np.testing.assert_array_equal(paper.sparsity[layer].values.numpy(), expected_sparsity)
        np.testing.assert_array_equal(paper.thresholded[0.5][layer].values.numpy(),
                                      (np.abs(out) >= 0.5).reshape(5, -1).mean(1))
        # mean and std of 5 float64 values: torch and NumPy may sum in another order (~1 ulp)
        np.testing.assert_allclose(paper.compression[layer].mean, np.mean(paper.compression[layer].values.numpy()),
                                   rtol=1e-14)
        np.testing.assert_allclose(paper.compression[layer].std, np.std(paper.compression[layer].values.numpy()), rtol=1e-12)
        # the authors' protocol reports torch.std, i.e. ddof = 1
        np.testing.assert_allclose(official.compression[layer].std,
                                   np.std(official.compression[layer].values.numpy(), ddof=1), rtol=1e-12)
    torch.testing.assert_close(sparsity(t.output), thresholded_sparsity(t.output, 1e-300))
