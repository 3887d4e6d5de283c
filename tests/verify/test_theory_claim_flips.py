"""The Remark 17/18 and round-trip claims, fed constructed numbers (their measurement functions
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


def seeds_of(sigma, power: float) -> np.ndarray:
    """(seeds, σ): 0.1 σ^power with a little seed-to-seed noise."""
    rng = np.random.default_rng(0)
    return 0.1 * sigma**power * np.exp(0.01 * rng.standard_normal((theorem16.R17_SEEDS, len(sigma))))


def remark17(power: float):
    """A sweep whose optimal ε² grows as σ^power beside (243)'s, which grows about as σ."""
    sigma = theorem16.R17_SIGMAS
    return lambda mode, seed, sizes: {
        "sigma": sigma, "eps2_predicted": sigma / np.sqrt(sigma + 0.5), "eps2_opt": seeds_of(sigma, power),
        "residual_min": seeds_of(sigma, 1.5), "at_edge": np.zeros((theorem16.R17_SEEDS, len(sigma)), dtype=bool)}


def test_remark17_measured_optimal_eps_flips(monkeypatch, tmp_path):
    monkeypatch.setattr(theorem16, "_remark17_sweep", remark17(1.0))
    assert measure("remark17-measured-optimal-eps", tmp_path) == "holds"
    monkeypatch.setattr(theorem16, "_remark17_sweep", remark17(1.5))
    assert measure("remark17-measured-optimal-eps", tmp_path) == "fails"


@pytest.mark.parametrize("power, verdict", [(1.0, "holds"), (1.5, "loose"), (0.5, "fails")])
def test_remark17_residual_is_read_as_a_bound_as_sigma_falls(monkeypatch, tmp_path, power, verdict):
    """(244) is linear in σ on the grid: a residual falling as fast holds, faster is loose, slower fails."""
    residuals = seeds_of(theorem16.R17_LIMIT_SIGMAS, power)
    monkeypatch.setattr(theorem16, "_remark17_residuals", lambda mode, seed, sizes: residuals)
    assert measure("remark17-residual", tmp_path) == verdict


def test_remark17_optimal_eps_fails_for_another_formula(monkeypatch, tmp_path):
    assert measure("remark17-optimal-eps", tmp_path) == "holds"
    real = theorem16.remark17_eps
    monkeypatch.setattr(theorem16, "remark17_eps", lambda sigma, n, d, K: real(sigma, n, d, K) * 1.01)  # ε² off 2%
    assert measure("remark17-optimal-eps", tmp_path) == "fails"


def test_delta_r_zero_shrinkage_flips(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    shape = (theorem16.R17_SEEDS, len(theorem16.R17_SIGMAS))
    r_c = np.broadcast_to(theorem16.R17_SIGMAS, shape) * 1.4

    def sweep(delta_r):
        return lambda mode, seed, sizes: {"sigma": theorem16.R17_SIGMAS, "beta_inv": theorem16.R17_SIGMAS * 1.4,
                                          "R^c": r_c, "ΔR": delta_r}

    scatter = np.exp(0.05 * rng.standard_normal(shape))
    monkeypatch.setattr(theorem16, "_shrinkage_sweep", sweep(-0.1 * r_c**2 * scatter))  # second order: vanishes
    assert measure("remark17-delta-r-zero-shrinkage", tmp_path) == "holds"
    monkeypatch.setattr(theorem16, "_shrinkage_sweep", sweep(0.5 * r_c * scatter))  # first order, as R^c's
    assert measure("remark17-delta-r-zero-shrinkage", tmp_path) == "inconclusive"
    monkeypatch.setattr(theorem16, "_shrinkage_sweep", sweep(0.1 * r_c**0.5 * scatter))  # lower order than R^c's
    assert measure("remark17-delta-r-zero-shrinkage", tmp_path) == "fails"


def test_remark18_coherence_flips(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    nus = theorem16.R18_NUS
    noise = 1e-3 * rng.standard_normal((theorem16.R18_SEEDS, 1))
    monkeypatch.setattr(theorem16, "_coherence_sweep", lambda ctx: 0.03 + 0.5 * nus**1.2 + noise * nus)
    assert measure("remark18-coherence", tmp_path) == "holds"
    monkeypatch.setattr(theorem16, "_coherence_sweep", lambda ctx: 0.03 + 0.01 * nus[::-1] + noise * nus)  # falls
    assert measure("remark18-coherence", tmp_path) == "fails"
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
    assert [measure(i, tmp_path) for i in ("eq51-denoising-flow", "eqs51-52-round-trip", "eq51-direction-as-printed")] \
        == ["holds", "holds", "fails"]
    # a drift that is not the time reversal: an error of the displacement's order that refining does not remove
    monkeypatch.setattr(diffusion, "_round_trips", trips(error=0.1, tolerance=1e-8))
    assert measure("eqs51-52-round-trip", tmp_path) == "fails"
    # a flow that adds noise, as the text after (51) says
    monkeypatch.setattr(diffusion, "_round_trips", trips(off_end=2.0, clean_end=1e-3, rate_end=1.3))
    assert measure("eq51-denoising-flow", tmp_path) == "fails"
    assert measure("eq51-direction-as-printed", tmp_path) == "holds"
