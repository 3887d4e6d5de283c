"""The white-box decoder (crate_theory.decoder): eq. (64), both LayerNorm wirings, Remark 7 presets."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from crate_nn.models import CRATEConfig, CRATEDecoderLayer
from crate_theory.decoder import DecoderLayerParams, crate_decode, decoder_layer, decoder_presets
from crate_theory.ista import ista
from crate_theory.layer import CrateLayerParams
from crate_theory.mssa import mssa_free
from crate_theory.synthetic import orthonormal_bases, random_orthogonal

SEEDS = st.integers(0, 2**32 - 1)


def random_params(rng, K, d, p, tied=False):
    return DecoderLayerParams(
        E=rng.standard_normal((d, d)) / np.sqrt(d),
        V=orthonormal_bases(K, d, p, rng, coherence=None),
        W=None if tied else rng.standard_normal((d, K * p)) / np.sqrt(K * p),
        b=None if tied else rng.standard_normal(d),
        ln1_weight=rng.uniform(0.5, 1.5, d), ln1_bias=rng.standard_normal(d),
        ln2_weight=rng.uniform(0.5, 1.5, d), ln2_bias=rng.standard_normal(d),
    )


def torch_decoder_layer(params, K, d, p, skip, tied, eps):
    """crate_nn's CRATEDecoderLayer in float64 loaded with the same parameters (row convention)."""
    config = CRATEConfig(dim=d, heads=K, dim_head=p, depth=1, skip={"official": "input", "paper": "normed"}[skip],
                         mssa_output="tied" if tied else "free", eps=eps)
    layer = CRATEDecoderLayer(config).double()
    t = lambda a: torch.as_tensor(np.ascontiguousarray(a))  # noqa: E731
    with torch.no_grad():
        layer.linear.weight.copy_(t(params.E))
        layer.norm1.weight.copy_(t(params.ln1_weight)), layer.norm1.bias.copy_(t(params.ln1_bias))
        layer.norm2.weight.copy_(t(params.ln2_weight)), layer.norm2.bias.copy_(t(params.ln2_bias))
        layer.mssa.qkv.weight.copy_(t(params.V.transpose(0, 2, 1).reshape(K * p, d)))  # [V_1 … V_K]*
        if not tied:
            layer.mssa.out.weight.copy_(t(params.W)), layer.mssa.out.bias.copy_(t(params.b))
    return layer.eval()


@given(SEEDS, st.integers(1, 3), st.integers(1, 4), st.integers(1, 6), st.sampled_from(["official", "paper"]),
       st.booleans())
def test_decoder_layer_matches_crate_nn_in_float64(seed, K, p, n, skip, tied):
    rng = np.random.default_rng(seed)
    d = K * p + 2
    params = random_params(rng, K, d, p, tied)
    Z = rng.standard_normal((d, n))
    eps = 0.7
    _, out = decoder_layer(Z, params, skip=skip, eps=eps)  # default temperature √p, as the code's p^{-1/2}
    layer = torch_decoder_layer(params, K, d, p, skip, tied, eps)
    with torch.no_grad():
        ref = layer(torch.as_tensor(Z.T[None].copy()))[0].numpy().T
    # Two independent float64 implementations (column vs row convention, fused SDPA): ~1e-15 per operation.
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-11)


def test_wirings_differ_and_equation_64_has_no_layer_norm():
    rng = np.random.default_rng(0)
    K, d, p, n = 2, 6, 2, 5
    params = random_params(rng, K, d, p)
    Z = 3.0 * rng.standard_normal((d, n)) + 1.0
    official = decoder_layer(Z, params, skip="official")[1]
    paper = decoder_layer(Z, params, skip="paper")[1]
    assert np.linalg.norm(official - paper) > 0.1 * np.linalg.norm(official)
    half, bare = decoder_layer(Z, params, norm=False, temperature=1.0)
    np.testing.assert_array_equal(half, params.E @ Z)
    np.testing.assert_allclose(bare, params.E @ Z - mssa_free(params.E @ Z, params.V, params.W, params.b), rtol=1e-13)


def encoder_and_decoder_error(seed, d, K, p, n, kappa, preset):
    """‖g ∘ f(Z) − Z‖_F / ‖Z‖_F for one layer without LayerNorm (Remark 7, eqs. (62)–(64)).

    Encoder f: Z^{1/2} = Z + κ W[SSA(Z|U_k)]_k, Z^1 = ISTA(Z^{1/2} | D) with D orthogonal, η = 1, λ = 0, i.e.
    ReLU(D*Z^{1/2}); Z = D·C with C ≥ 1 keeps the ReLU inactive (asserted), so f is smooth and invertible.
    """
    rng = np.random.default_rng(seed)
    U = orthonormal_bases(K, d, p, rng)
    D = random_orthogonal(d, rng)
    W = rng.standard_normal((d, K * p)) / np.sqrt(K * p)
    Z = D @ rng.uniform(1.0, 2.0, (d, n))
    half = Z + kappa * mssa_free(Z, U, W, temperature=1.0)
    assert (D.T @ half).min() > 0  # the ReLU of ISTA is inactive: the encoder layer is D* (Z + κ MSSA(Z))
    Z1 = ista(half, D, eta=1.0, lam=0.0)
    (dec,) = decoder_presets([CrateLayerParams(U=U, D=D, W=kappa * W)], preset)
    out = crate_decode(Z1, [dec], norm=False, temperature=1.0)[-1]
    return np.linalg.norm(out - Z) / np.linalg.norm(Z)


def test_decoder_with_E_equal_D_inverts_a_layer_to_second_order_and_E_equal_D_transpose_does_not():
    kappas = np.array([0.04, 0.02, 0.01])
    inverse = np.array([encoder_and_decoder_error(0, 12, 3, 4, 6, k, "inverse") for k in kappas])
    printed = np.array([encoder_and_decoder_error(0, 12, 3, 4, 6, k, "printed") for k in kappas])
    slope = np.polyfit(np.log(kappas), np.log(inverse), 1)[0]
    assert abs(slope - 2) < 0.1  # O(κ²) (Remark 7); ±0.1 covers the O(κ³) curvature at these κ
    assert printed.min() > 0.5  # E = D* (Remark 7 as printed) leaves an O(1) error that does not shrink with κ


@given(SEEDS, st.integers(1, 3), st.integers(1, 3))
def test_remark7_presets_over_seeds(seed, K, p):
    d = K * p + 3
    kappa = 1e-3
    # Second-order error: constant·κ² with constant ≲ 10 at these sizes, so 1e-4 ≫ 10·κ² would flag a first-order bug.
    assert encoder_and_decoder_error(seed, d, K, p, 4, kappa, "inverse") < 1e-4
    assert encoder_and_decoder_error(seed, d, K, p, 4, kappa, "printed") > 0.1  # D*D* ≠ I for generic orthogonal D


def test_presets_pair_decoder_layer_l_with_encoder_layer_L_minus_l():
    rng = np.random.default_rng(2)
    K, d, p = 2, 6, 3
    enc = [CrateLayerParams(U=orthonormal_bases(K, d, p, rng), D=rng.standard_normal((d, d)),
                            W=rng.standard_normal((d, K * p)), b=rng.standard_normal(d)) for _ in range(3)]
    for preset, transform in (("inverse", lambda D: D), ("printed", lambda D: D.T)):
        dec = decoder_presets(enc, preset)
        assert len(dec) == 3
        for ell, layer in enumerate(dec):
            source = enc[len(enc) - 1 - ell]  # g^ℓ pairs with f^{L−ℓ}; lists are 0-based
            np.testing.assert_array_equal(layer.V, source.U)
            np.testing.assert_array_equal(layer.E, transform(source.D))
            np.testing.assert_array_equal(layer.W, source.W)
            assert layer.ln1_weight is None and layer.ln2_bias is None
    Z = rng.standard_normal((d, 4))
    path = crate_decode(Z, decoder_presets(enc), skip="paper")
    assert len(path) == 4
    np.testing.assert_array_equal(path[2], decoder_layer(path[1], decoder_presets(enc)[1], skip="paper")[1])


def test_bad_input_raises_named_errors():
    rng = np.random.default_rng(0)
    params = random_params(rng, 2, 6, 2)
    Z = rng.standard_normal((6, 3))
    with pytest.raises(ValueError, match="params.E"):
        decoder_layer(Z, DecoderLayerParams(E=np.eye(5), V=params.V, W=params.W))
    with pytest.raises(ValueError, match="params.V"):
        decoder_layer(Z, DecoderLayerParams(E=params.E, V=params.V[0], W=params.W))
    with pytest.raises(ValueError, match="eps"):
        decoder_layer(Z, DecoderLayerParams(E=params.E, V=params.V))
    with pytest.raises(ValueError, match="skip"):
        decoder_layer(Z, params, skip="neither")
    with pytest.raises(ValueError, match="Z"):
        decoder_layer(rng.standard_normal(6), params)
    with pytest.raises(ValueError, match="preset"):
        decoder_presets([], "transpose")
    with pytest.raises(TypeError, match="encoder_layers"):
        decoder_presets([params])
    with pytest.raises(TypeError, match="layers"):
        crate_decode(Z, [None])


def test_eta_presets_invert_ista_linear_part():
    """"linear-inverse" inverts ISTA's λ = 0 linear part A = I + η(D* − D*D) exactly (= D for orthogonal D at η = 1);
    "first-order" is I − η(D* − D*D) = (1 + η)I − ηD* for orthogonal D, accurate to O(η²)."""
    rng = np.random.default_rng(3)
    d, K, p = 8, 2, 4
    D = random_orthogonal(d, rng)
    enc = [CrateLayerParams(U=orthonormal_bases(K, d, p, rng), D=D)]
    for eta in (0.1, 0.3):  # eigenvalues of A have modulus ≥ 1 − 2η ≥ 0.4: A is well conditioned
        A = (1 - eta) * np.eye(d) + eta * D.T
        (exact,) = decoder_presets(enc, "linear-inverse", eta=eta)
        np.testing.assert_allclose(exact.E @ A, np.eye(d), atol=1e-12)  # an 8×8 inverse of condition ≤ 2.5
        (first,) = decoder_presets(enc, "first-order", eta=eta)
        np.testing.assert_allclose(first.E, (1 + eta) * np.eye(d) - eta * D.T, atol=1e-15)
        # the residual of the first-order inverse is −η²(D* − I)², of norm ≤ 4η²
        assert np.linalg.norm(first.E @ A - np.eye(d), 2) <= 4 * eta**2 + 1e-12
    (at_one,) = decoder_presets(enc, "linear-inverse", eta=1.0)
    np.testing.assert_allclose(at_one.E, D, atol=1e-12)
    with pytest.raises(ValueError, match="eta"):
        decoder_presets(enc, "first-order", eta=0.0)
