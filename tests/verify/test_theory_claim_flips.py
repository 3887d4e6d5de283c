"""The Remark 17/18 and round-trip claims of issue 25, fed constructed numbers (their measurement functions
monkeypatched) for which each verdict must come out one way, then the other."""
import numpy as np
import pytest

from verify.claims import diffusion, theorem16
from verify.context import Context
from verify.numerics import loglog_argmin
from verify.registry import all_claims

CLAIMS = {c.id: c for c in all_claims()}


def measure(claim_id: str, tmp_path) -> str:
    return CLAIMS[claim_id].measure(Context("quick", 0, claim_id, tmp_path)).verdict


def test_loglog_argmin_finds_the_vertex_of_a_log_parabola_and_flags_the_ends():
    x = np.geomspace(1e-3, 1e2, 11)
    y = np.exp((np.log(x) - np.log(0.37)) ** 2)  # a parabola in (log x, log y) with its vertex at 0.37
    best, value, edge = loglog_argmin(x, y)
    assert best == pytest.approx(0.37, rel=1e-9) and value == pytest.approx(1.0, rel=1e-9) and not edge
    assert loglog_argmin(x, x)[0] == x[0] and loglog_argmin(x, x)[2]  # increasing: the left end
    with pytest.raises(ValueError):
        loglog_argmin(x[::-1], y)


def remark17(power: float, key: str, predicted_key: str):
    """A sweep whose ``key`` grows as σ^power (a little seed-to-seed noise) beside the real predictions."""
    rng = np.random.default_rng(0)
    sigma = theorem16.R17_SIGMAS
    seeds = theorem16.R17_SEEDS
    predicted = {"eps2_predicted": sigma / np.sqrt(sigma + 0.5), "residual_predicted": sigma * np.sqrt(sigma + 0.5)}
    sweep = {"sigma": sigma, "at_edge": np.zeros((seeds, len(sigma)), dtype=bool), **predicted}
    sweep[key] = 0.1 * sigma**power * np.exp(0.01 * rng.standard_normal((seeds, len(sigma))))
    return lambda mode, seed, sizes: sweep


@pytest.mark.parametrize("claim_id, key, predicted_key", [
    ("2.17-remark17-optimal-eps", "eps2_opt", "eps2_predicted"),
    ("2.17-remark17-residual", "residual_min", "residual_predicted"),
])
def test_remark17_slope_claims_flip(monkeypatch, tmp_path, claim_id, key, predicted_key):
    monkeypatch.setattr(theorem16, "_remark17_sweep", remark17(1.0, key, predicted_key))
    assert measure(claim_id, tmp_path) == "holds"
    monkeypatch.setattr(theorem16, "_remark17_sweep", remark17(1.5, key, predicted_key))
    assert measure(claim_id, tmp_path) == "fails"


def test_delta_r_zero_shrinkage_flips(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    shape = (theorem16.R17_SEEDS, len(theorem16.R17_SIGMAS))
    r_c = np.broadcast_to(theorem16.R17_SIGMAS, shape) * 1.4

    def sweep(delta_r):
        return lambda mode, seed, sizes: {"sigma": theorem16.R17_SIGMAS, "beta_inv": theorem16.R17_SIGMAS * 1.4,
                                          "R^c": r_c, "ΔR": delta_r}

    monkeypatch.setattr(theorem16, "_shrinkage_sweep", sweep(1e-6 * rng.standard_normal(shape)))  # zero ± scatter
    assert measure("2.17-delta-r-zero-shrinkage", tmp_path) == "holds"
    monkeypatch.setattr(theorem16, "_shrinkage_sweep", sweep(-0.1 * r_c**2 + 1e-6 * rng.standard_normal(shape)))
    assert measure("2.17-delta-r-zero-shrinkage", tmp_path) == "fails"


def test_remark18_coherence_flips(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    nus = theorem16.R18_NUS
    noise = 1e-3 * rng.standard_normal((theorem16.R18_SEEDS, 1))
    monkeypatch.setattr(theorem16, "_coherence_sweep", lambda ctx: 0.03 + 0.5 * nus**1.2 + noise * nus)
    assert measure("2.17-remark18-coherence", tmp_path) == "holds"
    monkeypatch.setattr(theorem16, "_coherence_sweep", lambda ctx: 0.03 + 0.01 * nus[::-1] + noise * nus)  # falls
    assert measure("2.17-remark18-coherence", tmp_path) == "fails"
    assert np.all(theorem16.coherence_exponents(np.tile(0.03 - nus, (3, 1))) == 0.0)  # no positive extra: no growth


def trips(error=1e-10, tolerance=1e-8, off_end=0.4, clean_end=1e-16, rate_end=0.7):
    """Five seeds of `diffusion._round_trips` with the given ends (a little seed-to-seed spread)."""
    spread = np.linspace(0.95, 1.05, 5)
    return lambda mode, seed: {
        "rate_start": 10 * np.ones(5), "rate_end": 10 * rate_end * spread, "off_start": np.ones(5),
        "off_end": off_end * spread, "displacement": 0.2 * spread, "error": error * spread,
        "tolerance": tolerance * spread, "clean_share_start": 1e-16 * np.ones(5), "clean_share_end": clean_end * spread}


def test_round_trip_claims_flip(monkeypatch, tmp_path):
    monkeypatch.setattr(diffusion, "_round_trips", trips())
    assert [measure(i, tmp_path) for i in ("2.20-denoising-flow", "2.20-round-trip", "2.20-direction-as-printed")] \
        == ["holds", "holds", "fails"]
    # a drift that is not the time reversal: an error of the displacement's order that refining does not remove
    monkeypatch.setattr(diffusion, "_round_trips", trips(error=0.1, tolerance=1e-8))
    assert measure("2.20-round-trip", tmp_path) == "fails"
    # a flow that adds noise, as the text after (51) says
    monkeypatch.setattr(diffusion, "_round_trips", trips(off_end=2.0, clean_end=1e-3, rate_end=1.3))
    assert measure("2.20-denoising-flow", tmp_path) == "fails"
    assert measure("2.20-direction-as-printed", tmp_path) == "holds"
