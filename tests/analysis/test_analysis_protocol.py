"""crate_nn.analysis.protocol: the joint measure in torch, checked against crate_theory.protocol."""
import numpy as np
import pytest
import torch

import crate_nn
import crate_theory as ct
from crate_nn.analysis import protocol
from crate_theory import protocol as reference
from crate_theory.synthetic import normalize_columns, orthonormal_bases, sample_tokens

TOL = 1e-10
"""float64 on both sides, different summation orders and SVD/QR routines: rounding ≈ 1e-14 relative on O(1–100)
values; 1e-10 leaves a wide margin while any semantic difference is O(1e-2) or more."""


def _weight(U: np.ndarray) -> torch.Tensor:
    """The qkv weight [U_1 … U_K]* (K·p, d) of bases U (K, d, p)."""
    return torch.from_numpy(np.concatenate([u.T for u in U]))


def _rows(Z: np.ndarray) -> torch.Tensor:
    """Column-convention tokens (..., d, n) as rows (..., n, d)."""
    return torch.from_numpy(np.swapaxes(Z, -1, -2).copy())


def test_measures_equal_the_column_convention_reference():
    rng = np.random.default_rng(0)
    K, d, p, n, draws = 3, 12, 4, 7, 3
    U = rng.standard_normal((K, d, p))  # a trained U: neither orthonormal nor mutually orthogonal
    Z = rng.standard_normal((2, d, n)) * rng.uniform(0.1, 10, (2, 1, n))
    iso = np.stack([reference.isotropic_tokens(z, rng, draws) for z in Z], axis=1)  # (draws, 2, d, n)
    frames = np.stack([reference.rotation_frames(d, K, p, rng, draws) for z in Z], axis=1)  # (draws, 2, K, d, p)
    measured = protocol.measures_from_yardsticks(_rows(Z), _weight(U), K, 0.3, _rows(iso), torch.from_numpy(frames))
    assert set(measured) == set(protocol.MEASURES)
    for b in range(2):
        expected = reference.profile_from_yardsticks(Z[b], U, 0.3, iso[:, b], frames[:, b]).as_dict()
        for name, value in expected.items():
            assert measured[name][b].item() == pytest.approx(value, rel=TOL), name


@pytest.mark.parametrize("n", [3, 9, 40])
def test_measures_on_torchs_own_draws_equal_the_reference(n, monkeypatch):
    """torch's compressed frames (n < d: Bartlett rows for the zero eigenvalues; n ≥ d: none) and isotropic sets,
    read by both implementations; with `ALIGNMENT_TOKENS` lowered to 16 (as 256 is at 1,024 tokens) at n = 40."""
    assert protocol.ALIGNMENT_TOKENS == reference.ALIGNMENT_TOKENS
    monkeypatch.setattr(protocol, "ALIGNMENT_TOKENS", 16)
    monkeypatch.setattr(reference, "ALIGNMENT_TOKENS", 16)
    rng = np.random.default_rng(n)
    K, d, p = 4, 16, 4
    U = rng.standard_normal((K, d, p))
    Z = rng.standard_normal((3, d, n))
    generator = torch.Generator().manual_seed(n)
    iso = torch.stack([protocol.isotropic_like(_rows(Z), generator) for _ in range(2)])
    frames = torch.stack([protocol.rotation_frames(_rows(Z), K, p, generator) for _ in range(2)])
    assert frames.shape[-2] == min(n, d) + min(d - min(n, d), p)
    measured = protocol.measures_from_yardsticks(_rows(Z), _weight(U), K, 0.1, iso, frames)
    for b in range(3):
        sets = np.swapaxes(iso[:, b].numpy(), -1, -2)
        expected = reference.profile_from_yardsticks(Z[b], U, 0.1, sets, frames[:, b].numpy()).as_dict()
        for name, value in expected.items():
            assert measured[name][b].item() == pytest.approx(value, rel=TOL), name
    torch.testing.assert_close(protocol.head_blocks(10, 3, 4), torch.from_numpy(reference.head_blocks(10, 3, 4)))


def test_compressed_frames_give_the_full_frames_rates():
    """Rows of a Gaussian frame on the zero eigenvalues enter only through their Gram matrix: replacing them by the
    triangular factor of their QR leaves every rate as it was (rounding), and Bartlett's law of that factor has
    E R_jj² = d − r − j (χ² of d − r − j degrees) and standard Gaussians above the diagonal."""
    torch.manual_seed(0)
    d, n, K, p = 24, 6, 3, 4
    z = torch.randn(2, n, d, dtype=torch.float64)
    spectrum = protocol.unit_spectrum(z)
    full = torch.randn(5, 2, K, d, p, dtype=torch.float64)
    compressed = torch.cat([full[..., :n, :], torch.linalg.qr(full[..., n:, :]).R], dim=-2)
    torch.testing.assert_close(protocol.rotated_rates(spectrum, compressed, d, n, 0.1),
                               protocol.rotated_rates(spectrum, full, d, n, 0.1), rtol=TOL, atol=0)
    frames = protocol.rotation_frames(torch.zeros(4000, n, d), K, p, torch.Generator().manual_seed(1))
    bartlett = frames[..., n:, :]  # (4000, K, p, p)
    assert torch.equal(bartlett, bartlett.triu())
    # 12,000 draws: E R_jj² = d − n − j with standard deviation √(2(d − n − j)) ≤ 6, so the mean's is ≤ 0.055;
    # 5 of them 0.28. Above the diagonal the second moment is 1 (standard deviation √2 / √12,000 = 0.013; 5 of them)
    torch.testing.assert_close(bartlett.diagonal(dim1=-2, dim2=-1).square().mean((0, 1)),
                               d - n - torch.arange(p, dtype=torch.float64), rtol=0, atol=0.28)
    above = bartlett[..., torch.triu_indices(p, p, 1)[0], torch.triu_indices(p, p, 1)[1]]
    torch.testing.assert_close(above.square().mean(), torch.tensor(1.0, dtype=torch.float64), rtol=0, atol=0.065)


def test_rate_reduction_and_non_negative_codes_equal_the_reference():
    """ΔR of unit tokens and the orthant flag on sets the reference test above does not reach: non-negative
    (a ReLU's output, exact zeros), with a zero token, and n > d."""
    rng = np.random.default_rng(3)
    K, d, p = 2, 6, 3
    U = orthonormal_bases(K, d, p, seed=rng)
    Z = np.stack([np.maximum(rng.standard_normal((d, 9)), 0), rng.standard_normal((d, 9))])
    Z[1, :, 4] = 0.0
    iso = np.stack([reference.isotropic_tokens(z, rng, 2) for z in Z], axis=1)
    frames = np.stack([reference.rotation_frames(d, K, p, rng, 2) for z in Z], axis=1)
    measured = protocol.measures_from_yardsticks(_rows(Z), _weight(U), K, 0.1, _rows(iso), torch.from_numpy(frames))
    for b in range(2):
        expected = reference.profile_from_yardsticks(Z[b], U, 0.1, iso[:, b], frames[:, b])
        assert measured["rate_reduction"][b].item() == pytest.approx(expected.rate_reduction, rel=TOL)
        assert measured["nonnegative"][b].item() == expected.nonnegative == (1.0 if b == 0 else 0.0)
    unit = normalize_columns(Z[1])
    assert protocol.coding_rate(_rows(unit), 0.1).item() == pytest.approx(ct.coding_rate(unit, 0.1), rel=TOL)


def test_yardsticks_and_the_limits_of_the_measure():
    rng = np.random.default_rng(1)
    K, d, n = 4, 32, 64
    U = orthonormal_bases(K, d, d // K, seed=rng)
    weight = _weight(U)
    gen = torch.Generator().manual_seed(1)
    iso = protocol.isotropic_like(torch.ones(200, n, d, dtype=torch.float64), gen)
    ortho = protocol.orthonormalise_heads(weight, K)
    rates = crate_nn.analysis.compression(protocol.unit_tokens(iso), ortho, K, 0.1)
    # one isotropic set against the mean of 16 sets deviates from 1 by ≈ the set-to-set spread σ of R^c (times
    # √(1 + 1/16)), estimated here over 200 sets; 4 of those is a bound a correct yardstick fails with probability
    # < 1e-4
    tol = 4 * (rates.std() / rates.mean()).item() * np.sqrt(1 + 1 / 16)
    one = protocol.joint_measures(iso[:1], weight, K, draws=16, generator=gen)
    assert abs(one["specific"].item() - 1) <= tol and abs(one["relative"].item() - 1) <= tol
    tokens = sample_tokens(U, n, rng, sigma=0.0)
    union = protocol.joint_measures(_rows(tokens.Z), weight, K, draws=16, generator=gen)
    assert union["specific"].item() < 1 - tol  # compressed onto these subspaces (measured: 0.93)
    assert union["alignment"].item() == pytest.approx(1.0, abs=1e-12)  # exactly on the subspaces
    assert one["isotropic_alignment"].item() < 0.5 < union["alignment"].item()


@pytest.mark.parametrize("scale", [0.25, 4.0, 16.0, 0.3])
def test_measure_is_invariant_to_the_scale_of_the_tokens_and_of_U(scale):
    """The same generator seed draws the same yardsticks: rescaling the tokens (or U, as weight decay does) leaves
    every measure unchanged up to rounding (unit tokens of cz equal those of z to a few ulps)."""
    torch.manual_seed(2)
    weight, z = torch.randn(12, 12, dtype=torch.float64), torch.randn(3, 6, 12, dtype=torch.float64)
    a = protocol.joint_measures(z, weight, 3, draws=2, generator=torch.Generator().manual_seed(0))
    b = protocol.joint_measures(scale * z, weight, 3, draws=2, generator=torch.Generator().manual_seed(0))
    c = protocol.joint_measures(z, scale * weight, 3, draws=2, generator=torch.Generator().manual_seed(0))
    for name in protocol.MEASURES:
        torch.testing.assert_close(b[name], a[name], rtol=1e-12, atol=0)
        torch.testing.assert_close(c[name], a[name], rtol=TOL, atol=0)  # one QR of a rescaled basis


def test_orthonormalised_heads_span_the_same_subspaces():
    torch.manual_seed(0)
    weight = torch.randn(6, 5, dtype=torch.float64)
    ortho = protocol.orthonormalise_heads(weight, heads=2)
    for k in range(2):
        block, new = weight[3 * k: 3 * k + 3], ortho[3 * k: 3 * k + 3]
        torch.testing.assert_close(new @ new.T, torch.eye(3, dtype=torch.float64), rtol=0, atol=1e-12)
        torch.testing.assert_close(torch.linalg.pinv(new) @ new, torch.linalg.pinv(block) @ block, rtol=0, atol=1e-10)


def _model():
    torch.manual_seed(0)
    return crate_nn.create_model("crate_tiny", image_size=8, patch_size=4, num_classes=3, dim=16, depth=2,
                                 heads=4).double().eval()


def test_layer_profile_measures_every_station_of_every_layer():
    model, images = _model(), torch.randn(5, 3, 8, 8, dtype=torch.float64)
    profile = protocol.layer_profile(model, images, eps=0.5, draws=2, seed=3, batch_size=8)
    generator = torch.Generator().manual_seed(3)  # one batch: the profile drew its yardsticks in this order
    for i, (t, layer) in enumerate(zip(crate_nn.trace(model, images), model.encoder.layers)):
        direct = protocol.station_measures(t, layer.mssa, 0.5, draws=2, generator=generator)
        for station in protocol.STATIONS:
            for name in protocol.MEASURES:
                torch.testing.assert_close(profile.stats[name][station][i].values, direct[station][name], rtol=TOL,
                                           atol=0)
    assert len(profile.means("specific", "half")) == 2
    # the size the collapse floor needs: d, tokens per image (4 patches + [CLS]), heads, head dimension
    assert profile.sizes == {"d": 16, "n": 5, "heads": 4, "p": 4} == profile.all_means()["sizes"]


def test_bad_input_is_named():
    weight = torch.randn(6, 5, dtype=torch.float64)
    z = torch.randn(4, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="weight"):
        protocol.alignment(z, weight, heads=4)
    with pytest.raises(ValueError, match="draws"):
        protocol.joint_measures(z, weight, 2, draws=0)
    with pytest.raises(ValueError, match="eps"):
        protocol.joint_measures(z, weight, 2, eps=0.0)
    with pytest.raises(ValueError, match="every direction"):
        protocol.joint_measures(z, weight[:4], 2)
    with pytest.raises(ValueError, match="frames"):
        protocol.measures_from_yardsticks(z, weight, 2, 0.1, z[None], torch.ones(1, 2, 3, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="isotropic"):
        protocol.measures_from_yardsticks(z, weight, 2, 0.1, z[None, :3], torch.ones(1, 2, 5, 3, dtype=torch.float64))
    with pytest.raises(TypeError, match="model"):
        protocol.layer_profile(torch.nn.Linear(2, 2), z)


def test_layer_profile_takes_token_ids_and_a_decoder_stack_and_refuses_attention_without_subspaces():
    torch.manual_seed(0)
    gpt = crate_nn.create_model("crate_gpt_small", dim=16, heads=2, depth=2, vocab_size=30, block_size=8).eval()
    ids = torch.randint(0, 30, (3, 8))
    profile = protocol.layer_profile(gpt, ids, draws=1)  # integer ids reach the embedding uncast
    assert len(profile.all_means()["spread"]["half"]) == 2
    mae = crate_nn.create_model("crate_mae_tiny", image_size=8, patch_size=2, dim=16, depth=2, heads=4).eval()
    images, mask = torch.randn(2, 3, 8, 8), torch.rand(2, 16).argsort(-1) < 12
    decoder = protocol.layer_profile(mae.decoder, mae.encode(images, mask), draws=1).all_means()
    assert set(decoder) == set(protocol.MEASURES) | {"sizes"} and len(decoder["alignment"]["output"]) == 2
    assert decoder["sizes"]["n"] == 17 and decoder["sizes"]["d"] == 16  # the decoder's tokens: every patch, [CLS]
    vit = crate_nn.create_model("vit_tiny", image_size=8, patch_size=4, num_classes=3, dim=16, depth=1, heads=2)
    with pytest.raises(TypeError, match="MSSA"):
        protocol.layer_profile(vit, torch.randn(1, 3, 8, 8))
