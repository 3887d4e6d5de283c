"""The layer-wise probes of the DINO teacher and of CRATE-GPT (a trained model against its initialisation, layer by
layer) and the ideal ToST layer, fed constructed per-seed numbers: each verdict must come out `holds`, `fails` and
`inconclusive` where it must. The sparsity probes read Fig. 15 with footnote 17: the last layer, whose features are
mixed for the head, is reported apart and never decides; the compression probes count every layer."""
import numpy as np
import pytest

from verify.claims import dino, language, tssa
from verify.context import Context
from verify.registry import all_claims

CLAIMS = {c.id: c for c in all_claims()}
SEEDS, DEPTH = 5, 3
NOISE = np.array([-0.002, 0.001, 0.0, 0.0015, -0.0005])  # per-seed wiggle of a difference; sums to 0
EXEMPT_RISE = [-0.05, -0.05, 0.3]  # sparser at layers 1–2, far denser at the last layer (as CRATE-GPT's runs)
FIRST_RISES = [0.05, -0.05, -0.05]
FIRST_TIES = [0.0, -0.05, -0.05]  # layer 1's interval contains 0


def verdict(claim_id: str, tmp_path, mode: str) -> str:
    return CLAIMS[claim_id].measure(Context(mode, 0, claim_id, tmp_path)).verdict


def curves(shifts) -> tuple[np.ndarray, np.ndarray]:
    """(seeds, layers) values of an initialisation (0.5 everywhere) and of a trained model ``shifts`` away from it
    per layer, each seed's difference wiggled by `NOISE`."""
    init = np.full((SEEDS, DEPTH), 0.5)
    return init + np.asarray(shifts, dtype=float) + NOISE[:, None] * np.arange(1, DEPTH + 1), init


def profiles() -> list[dict]:
    """Joint profiles that decide nothing here (the quick DINO runs measure none), with the size measured."""
    flat = [0.9] * DEPTH
    return [{"sizes": {"d": 32, "n": 17, "heads": 2, "p": 16},
             **{m: {"half": flat} for m in ("specific", "alignment", "spread")}} for _ in range(SEEDS)]


def install_dino(monkeypatch, shifts) -> None:
    trained, init = curves(shifts)
    per_model = {"dino": trained, "random init": init}
    measured = {"sparsity": per_model, "compression": {"paper": per_model, "official": per_model}, "joint": {}}
    monkeypatch.setattr(dino, "_measurements", lambda mode, seed, system="dino": measured)


def install_gpt(monkeypatch, shifts) -> None:
    trained, init = curves(shifts)
    per_model = {"trained": trained, "init": init}
    measured = {"sparsity": per_model, "compression": {"paper": per_model, "official": per_model},
                "joint": {"trained": profiles(), "init": profiles()}}
    monkeypatch.setattr(language, "_layers", lambda mode, seed: measured)


SPARSITY = [("fig15-dino-sparsity-short", "quick", install_dino), ("fig15-dino-sparsity", "full", install_dino),
            ("fig15-gpt-sparsity", "quick", install_gpt)]
COMPRESSION = [("fig15-dino-compression-official-short", "quick", install_dino),
               ("fig15-dino-compression-paper", "full", install_dino),
               ("fig15-gpt-compression-official", "quick", install_gpt)]


@pytest.mark.parametrize("claim_id, mode, install", SPARSITY)
def test_sparsity_probes_exempt_the_last_layer(monkeypatch, tmp_path, claim_id, mode, install):
    install(monkeypatch, EXEMPT_RISE)
    assert verdict(claim_id, tmp_path, mode) == "holds"
    install(monkeypatch, FIRST_RISES)
    assert verdict(claim_id, tmp_path, mode) == "fails"
    install(monkeypatch, FIRST_TIES)
    assert verdict(claim_id, tmp_path, mode) == "inconclusive"


def test_the_exempt_layer_is_reported(monkeypatch, tmp_path):
    install_gpt(monkeypatch, EXEMPT_RISE)
    result = CLAIMS["fig15-gpt-sparsity"].measure(Context("quick", 0, "fig15-gpt-sparsity", tmp_path))
    assert result.data["exempt_last"] and len(result.data["per_layer"]) == DEPTH
    assert result.data["per_layer"][-1]["verdict"] == "fails" and "footnote 17" in result.measured


@pytest.mark.parametrize("claim_id, mode, install", COMPRESSION)
def test_compression_probes_count_every_layer(monkeypatch, tmp_path, claim_id, mode, install):
    install(monkeypatch, [-0.05] * DEPTH)
    assert verdict(claim_id, tmp_path, mode) == "holds"
    install(monkeypatch, EXEMPT_RISE)  # no footnote exempts R^c's last layer
    assert verdict(claim_id, tmp_path, mode) == "fails"
    install(monkeypatch, FIRST_TIES)
    assert verdict(claim_id, tmp_path, mode) == "inconclusive"


def test_tost_layer_needs_every_comparison(monkeypatch, tmp_path):
    def install(after_layernorm: float, random: float) -> None:
        changes = {"fixed_pi": -0.2 + NOISE, "pi_re_estimated": -0.2 + NOISE, "after_layernorm": after_layernorm + NOISE,
                   "rate_after_layernorm": after_layernorm + NOISE, "random_subspaces_after_layernorm": random + NOISE[::-1]}
        monkeypatch.setattr(tssa, "_layer_changes", lambda ctx: changes)
    claim_id = "tost-abstract-layer-compresses"
    install(-0.026, -0.014)
    assert verdict(claim_id, tmp_path, "quick") == "holds"
    install(0.02, -0.014)  # the LayerNorm undoes the step
    assert verdict(claim_id, tmp_path, "quick") == "fails"
    install(-0.014, -0.014)  # no better than random subspaces: the difference's interval contains 0
    assert verdict(claim_id, tmp_path, "quick") == "inconclusive"
