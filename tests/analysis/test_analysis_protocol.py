"""crate_nn.analysis.protocol: the scale-free layer-wise protocol in torch, checked against crate_theory.protocol."""
import numpy as np
import pytest
import torch

import crate_nn
from crate_nn.analysis import protocol
from crate_theory import compression_rate
from crate_theory import protocol as reference
from crate_theory.synthetic import orthonormal_bases, sample_tokens

TOL = 1e-10
"""float64 on both sides, different summation orders and SVD routines: rounding ≈ 1e-14 relative on O(1–100)
values; 1e-10 leaves a wide margin while any semantic difference is O(1e-2) or more."""


def _weight(U: np.ndarray) -> torch.Tensor:
    """The qkv weight [U_1 … U_K]* (K·p, d) of bases U (K, d, p)."""
    return torch.from_numpy(np.concatenate([u.T for u in U]))


def test_deterministic_measures_equal_the_column_convention_reference():
    rng = np.random.default_rng(0)
    K, d, p, n = 3, 12, 4, 7
    U = rng.standard_normal((K, d, p))  # a trained U: neither orthonormal nor mutually orthogonal
    Z = rng.standard_normal((2, d, n)) * rng.uniform(0.1, 10, (2, 1, n))
    z = torch.from_numpy(np.swapaxes(Z, -1, -2).copy())
    measured = protocol.token_measures(z, _weight(U), K, eps=0.3, draws=2, generator=torch.Generator().manual_seed(0))
    for b in range(2):
        expected = {
            "rate": compression_rate(Z[b], U, 0.3),
            "normalised": reference.official_compression_rate(Z[b], U, 0.3),
            "alignment": reference.alignment(Z[b], U),
            "norm": np.linalg.norm(Z[b], axis=0).mean(),
        }
        for name, value in expected.items():
            assert measured[name][b].item() == pytest.approx(value, rel=TOL), name
        aligned = protocol.aligned_like(z[b], _weight(U), K).numpy().T
        np.testing.assert_allclose(aligned, reference.aligned_tokens(Z[b], U), rtol=TOL, atol=TOL)
        Q = np.stack([np.linalg.qr(u)[0] for u in U])
        assert measured["rate_orthonormal"][b].item() == pytest.approx(compression_rate(Z[b], Q, 0.3), rel=TOL)


def test_yardstick_alignment_and_their_limits():
    rng = np.random.default_rng(1)
    K, d, n = 4, 32, 64
    U = orthonormal_bases(K, d, d // K, seed=rng)
    weight = _weight(U)
    gen = torch.Generator().manual_seed(1)
    iso = protocol.isotropic_like(torch.ones(200, n, d, dtype=torch.float64), gen)
    spread = protocol.token_measures(iso, weight, K, 1.0, draws=1, generator=gen)
    # the ratio of one isotropic set to the mean of 16 others deviates from 1 by ≈ the set-to-set spread of R^c,
    # estimated here over 200 sets; 4 of those spreads is a bound a correct yardstick fails with probability < 1e-4
    rates = spread["rate"]
    tol = 4 * (rates.std() / rates.mean()).item() * np.sqrt(1 + 1 / 16)
    one = protocol.token_measures(iso[:1], weight, K, 1.0, draws=16, generator=gen)
    assert abs(one["relative"].item() - 1) <= tol
    tokens = sample_tokens(U, n, rng, sigma=0.0)
    union = protocol.token_measures(torch.from_numpy(tokens.Z.T.copy()), weight, K, 1.0, draws=16, generator=gen)
    assert union["relative"].item() < 1 - tol
    assert union["alignment"].item() == pytest.approx(1.0, abs=1e-12)  # exactly on the subspaces
    assert union["aligned_relative"].item() == pytest.approx(union["relative"].item(), rel=TOL)
    assert spread["isotropic_alignment"].mean().item() < 0.5 < union["alignment"].item()


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
    profile = protocol.layer_profile(model, images, eps=0.5, draws=2, seed=3, batch_size=2)
    traces = crate_nn.trace(model, images)
    for i, (t, layer) in enumerate(zip(traces, model.encoder.layers)):
        for station, z in zip(protocol.STATIONS, (t.input, t.half, t.output)):
            direct = protocol.token_measures(z, layer.mssa.qkv.weight, layer.mssa.heads, 0.5, draws=2)
            for name in ("rate", "rate_orthonormal", "normalised", "alignment", "norm"):
                torch.testing.assert_close(profile.stats[name][station][i].values, direct[name], rtol=TOL, atol=0)
    assert set(profile.stats) == set(protocol.MEASURES)
    assert len(profile.means("relative", "half")) == 2
    again = protocol.layer_profile(model, images, eps=0.5, draws=2, seed=3, batch_size=2)
    assert torch.equal(again.stats["relative"]["output"][1].values, profile.stats["relative"]["output"][1].values)


def test_bad_input_is_named():
    weight = torch.randn(6, 5, dtype=torch.float64)
    z = torch.randn(4, 5, dtype=torch.float64)
    with pytest.raises(ValueError, match="weight"):
        protocol.alignment(z, weight, heads=4)
    with pytest.raises(ValueError, match="draws"):
        protocol.token_measures(z, weight, 2, draws=0)
    with pytest.raises(ValueError, match="eps"):
        protocol.token_measures(z, weight, 2, eps=0.0)
    with pytest.raises(TypeError, match="model"):
        protocol.layer_profile(torch.nn.Linear(2, 2), z)


def test_yardstick_is_free_of_the_scale_of_U():
    """Weight decay shrinks U: the ratios must not move, the paper's R^c does."""
    torch.manual_seed(2)
    weight, z = torch.randn(8, 12, dtype=torch.float64), torch.randn(3, 6, 12, dtype=torch.float64)
    a = protocol.token_measures(z, weight, 2, draws=2, generator=torch.Generator().manual_seed(0))
    b = protocol.token_measures(z, 0.3 * weight, 2, draws=2, generator=torch.Generator().manual_seed(0))
    for name in ("relative", "relative_normalised", "alignment", "aligned_relative", "rate_orthonormal"):
        torch.testing.assert_close(b[name], a[name], rtol=TOL, atol=0)
    assert (b["rate"] < a["rate"]).all()
