"""Cross-implementation: crate_nn (PyTorch, row convention, the form of the papers' Appendix D pseudocode) equals
crate_theory (NumPy, column convention, the papers' equations) on random weights in float64. The two packages never
import each other, so agreement is evidence about both. Every parameter (including LayerNorm affines and biases) is
randomised.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

import crate_nn
from crate_theory import CrateLayerParams, crate_forward, ista, mssa, mssa_free
from crate_theory.decoder import DecoderLayerParams, decoder_layer
from verify import verdicts
from verify.numerics import fmt
from verify.registry import Result, claim

TOL = 1e-10
"""float64 on both sides; the implementations sum in different orders (≈ 1e-15 per operation on O(1) values), so
1e-10 absolute on O(1) outputs is a rounding bound with a wide margin, while any semantic difference is O(1e-2+)."""

D, HEADS, N = 24, 4, 9
"""Small configuration: d = 24, K = 4 heads of p = 6, n = 9 tokens."""

SETTING = (f"the audit's two implementations, PyTorch rows (the pseudocode's form) vs NumPy columns (the equations'), "
           f"random float64 weights, d {D}, K {HEADS}, n {N}")
"""What the cross-implementation claims compare: a check of the audit's own code against the papers' objects."""


def _config(**overrides) -> crate_nn.BlockConfig:
    """The layer options of the compared stacks (3 layers, see `DEPTH`)."""
    return crate_nn.BlockConfig(dim=D, heads=HEADS, **overrides)


DEPTH = 3


def _randomise(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """float64, every parameter redrawn: LayerNorm weights 1 + 0.2·N(0,1), other tensors N(0, 1/fan_in)."""
    module = module.double()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            if "norm" in name and name.endswith("weight"):
                p.copy_(1 + 0.2 * noise)
            else:
                p.copy_(noise / np.sqrt(p.shape[-1] if p.ndim > 1 else D))
    return module.eval()


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy()


def _bases(mssa_module) -> np.ndarray:
    """U (K, d, p) from the qkv weight [U_1 … U_K]* of shape (K·p, d)."""
    w = _np(mssa_module.qkv.weight)
    p = mssa_module.dim_head
    return np.stack([w[k * p:(k + 1) * p].T for k in range(mssa_module.heads)])


def _output_map(mssa_module):
    """(W, b) of the free output map, or (None, None) for the tied one."""
    if mssa_module.out is None:
        return None, None
    return _np(mssa_module.out.weight), _np(mssa_module.out.bias)


def _layer_params(layer) -> CrateLayerParams:
    W, b = _output_map(layer.mssa)
    return CrateLayerParams(U=_bases(layer.mssa), D=_np(layer.ista.weight), W=W, b=b,
                            ln1_weight=_np(layer.norm1.weight), ln1_bias=_np(layer.norm1.bias),
                            ln2_weight=_np(layer.norm2.weight), ln2_bias=_np(layer.norm2.bias))


def _tokens(ctx) -> tuple[np.ndarray, torch.Tensor]:
    """Z (d, n) for crate_theory and x = Zᵀ as a (1, n, d) batch for crate_nn."""
    Z = ctx.rng.standard_normal((D, N))
    return Z, torch.from_numpy(Z.T.copy())[None]


@claim(
    id="alg2-nn-mssa",
    formerly="2.8-nn-mssa",
    tags=("cross-implementation", "nn", "mssa"),
    location="long version, App. D.1, Alg. 2, and Sec. 2.3, eqs. (35)–(37); Sec. 4.1.4, eqs. (86)–(87); NeurIPS "
             "2023, eqs. (11)–(12), App. B.1",
    scope="probe",
    setting=SETTING,
    quote="SSA(Z | U_k) ≐ (U_k*Z) softmax((U_k*Z)*(U_k*Z)), k ∈ [K] … the linear operators of value, key, and "
          "query are all set to be the same as the subspace basis, i.e., V_k = K_k = Q_k = U_k*.",
    statement="crate_nn.MSSA (rows, softmax over the last axis) equals crate_theory's MSSA (columns, column "
              "softmax): free W with bias and temperature √p, tied β[U] with temperature 1, causal mask; "
              "fused (SDPA) and explicit paths",
    measures="max abs difference over the variants and both paths (float64)",
    expected=f"≤ {TOL:g} ({TOL:g}: float64 rounding with a wide margin)",
    expected_verdict="holds",
    kind="identity", provenance="analysis",
)
def nn_mssa(ctx) -> Result:
    Z, x = _tokens(ctx)
    p = D // HEADS
    worst = {}
    for output, causal, fused in itertools.product(("free", "tied"), (False, True), (True, False)):
        scale = None if output == "free" else 1.0
        module = _randomise(crate_nn.MSSA(D, HEADS, p, scale=scale, output=output, eps=0.7, causal=causal),
                            ctx.torch_seed)
        module.fused_attn = fused
        U = _bases(module)
        if output == "free":
            W, b = _output_map(module)
            reference = mssa_free(Z, U, W, b, temperature=np.sqrt(p), causal=causal)
        else:
            reference = mssa(Z, U, 0.7, causal=causal, allow_nonorthonormal=True)  # random weights
        worst[f"{output}-causal={causal}-fused={fused}"] = float(np.abs(_np(module(x))[0].T - reference).max())
    err = max(worst.values())
    return Result(f"max abs diff {fmt(err)} over {len(worst)} variants", verdicts.at_most(err, TOL), worst)


@claim(
    id="alg3-nn-ista",
    formerly="2.9-nn-ista",
    tags=("cross-implementation", "nn", "ista"),
    location="long version, App. D.1, Alg. 3, and Sec. 2.4, eq. (44); NeurIPS 2023, eq. (17), App. B.1",
    scope="probe",
    setting=SETTING,
    quote="ISTA(Z | D) ≐ ReLU(Z − ηD*(DZ − Z) − ηλ1).",
    statement="crate_nn.ISTA (two products in row form) equals crate_theory.ista, eq. (44)",
    measures="max abs difference for (η, λ) ∈ {(0.1, 0.1), (0.5, 0.3)} (float64)",
    expected=f"≤ {TOL:g} (float64 rounding with a wide margin)",
    expected_verdict="holds",
    kind="identity", provenance="analysis",
)
def nn_ista(ctx) -> Result:
    Z, x = _tokens(ctx)
    errs = []
    for eta, lam in ((0.1, 0.1), (0.5, 0.3)):
        module = _randomise(crate_nn.ISTA(D, eta, lam), ctx.torch_seed)
        errs.append(float(np.abs(_np(module(x))[0].T - ista(Z, _np(module.weight), eta=eta, lam=lam)).max()))
    return Result(f"max abs diff {fmt(max(errs))}", verdicts.at_most(max(errs), TOL), {"errors": errs})


_LAYER_VARIANTS = [
    dict(),
    dict(skip="normed"),
    dict(ista="soft"),
    dict(ista="mm", eps=0.8),
    dict(mssa_output="tied", attn_scale=1.0, eps=0.8),
    dict(causal=True),
]


def _theory_kwargs(config: crate_nn.BlockConfig) -> dict:
    """crate_layer keyword arguments with the semantics of a crate_nn config."""
    return dict(
        eta=config.eta, lam=config.lam, eps=config.eps, skip=config.skip, causal=config.causal,
        temperature=None if config.attn_scale is None else 1.0 / config.attn_scale,
        sparsify={"relu": "ista", "soft": "soft", "mm": "mm"}[config.ista],
    )


@claim(
    id="alg4-nn-encoder",
    formerly="2.8-nn-encoder",
    tags=("cross-implementation", "nn", "layer"),
    location="long version, App. D.2, Alg. 4, and Sec. 2.5, eq. (45), Fig. 10 (and the authors' code's skip "
             "wiring); NeurIPS 2023, eq. (18)",
    scope="probe",
    setting=SETTING,
    quote="Z^{ℓ+1/2} ≐ Z^ℓ + MSSA(Z^ℓ | U^ℓ_[K]), Z^{ℓ+1} ≐ ISTA(Z^{ℓ+1/2} | D^ℓ).",
    statement="crate_nn's encoder (3 layers) equals crate_theory.crate_forward, every Z^{ℓ+1/2} and Z^{ℓ+1}, for "
              "both skip wirings, the ISTA / soft-threshold / MM blocks, the tied output map and the causal mask",
    measures=f"max abs difference over {len(_LAYER_VARIANTS)} variants × 3 layers × (half, full) steps (float64)",
    expected=f"≤ {TOL:g} (float64 rounding with a wide margin)",
    expected_verdict="holds",
    kind="identity", provenance="analysis",
)
def nn_encoder(ctx) -> Result:
    Z, x = _tokens(ctx)
    worst = {}
    for i, overrides in enumerate(_LAYER_VARIANTS):
        config = _config(**overrides)
        encoder = _randomise(crate_nn.CRATEEncoder(config, DEPTH), ctx.torch_seed + i)
        trace = crate_forward(Z, [_layer_params(layer) for layer in encoder.layers], **_theory_kwargs(config))
        errs, h = [], x
        with torch.no_grad():
            for layer, half, out in zip(encoder.layers, trace.halves, trace.outputs):
                h_half = layer.compress(h)
                h = layer.sparsify(h_half)
                errs += [np.abs(_np(h_half)[0].T - half).max(), np.abs(_np(h)[0].T - out).max()]
            errs.append(np.abs(_np(encoder(x))[0].T - trace.output).max())
        worst[",".join(f"{k}={v}" for k, v in overrides.items()) or "default"] = float(max(errs))
    err = max(worst.values())
    return Result(f"max abs diff {fmt(err)} over {len(worst)} variants", verdicts.at_most(err, TOL), worst)


@claim(
    id="alg5-nn-decoder",
    formerly="2.22-nn-decoder",
    tags=("cross-implementation", "nn", "decoder"),
    location="long version, App. D.3, Alg. 5, and Sec. 3.3, eq. (64), Fig. 10 (and the authors' code's skip wiring)",
    scope="probe",
    setting=SETTING,
    quote="This constructs the (ℓ + 1)st layer g^ℓ of our decoder as Z̃^{ℓ+1} = g^ℓ(Z̃^ℓ) ≐ E^ℓZ̃^ℓ − "
          "MSSA(E^ℓZ̃^ℓ | V^ℓ_[K]).",
    statement="crate_nn.CRATEDecoderLayer equals crate_theory.decoder.decoder_layer for both skip wirings and "
              "both output maps",
    measures="max abs difference over 4 variants (float64)",
    expected=f"≤ {TOL:g} (float64 rounding with a wide margin)",
    expected_verdict="holds",
    kind="identity", provenance="analysis",
)
def nn_decoder(ctx) -> Result:
    Z, x = _tokens(ctx)
    worst = {}
    for skip, output in itertools.product(("input", "normed"), ("free", "tied")):
        extra = dict(mssa_output="tied", attn_scale=1.0, eps=0.8) if output == "tied" else {}
        config = _config(skip=skip, **extra)
        layer = _randomise(crate_nn.CRATEDecoderLayer(config), ctx.torch_seed)
        W, b = _output_map(layer.mssa)
        params = DecoderLayerParams(E=_np(layer.linear.weight), V=_bases(layer.mssa), W=W, b=b,
                                    ln1_weight=_np(layer.norm1.weight), ln1_bias=_np(layer.norm1.bias),
                                    ln2_weight=_np(layer.norm2.weight), ln2_bias=_np(layer.norm2.bias))
        kwargs = _theory_kwargs(config)
        _, reference = decoder_layer(Z, params, temperature=kwargs["temperature"], eps=config.eps, skip=skip)
        with torch.no_grad():
            worst[f"{skip}-{output}"] = float(np.abs(_np(layer(x))[0].T - reference).max())
    err = max(worst.values())
    return Result(f"max abs diff {fmt(err)} over {len(worst)} variants", verdicts.at_most(err, TOL), worst)
