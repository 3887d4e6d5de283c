"""The raw-pixel control claims (table4-dino-pixels, table3-mae-pixels) and Table 4's ViT-vs-CRATE ordering under DINO
(table4-dino-vit-vs-crate): fed constructed per-seed accuracies, each verdict must come out `holds` when the first
side wins, `fails` when the other does and `inconclusive` when the seeds cannot tell."""
import numpy as np
import pytest

from verify.claims import dino, mae
from verify.context import Context
from verify.registry import all_claims

CLAIMS = {c.id: c for c in all_claims()}
SEEDS = 5
NOISE = np.array([-0.02, 0.01, 0.0, 0.015, -0.005])  # per-seed wiggle of the pre-trained accuracy


def verdict(claim_id: str, mode: str, tmp_path) -> str:
    return CLAIMS[claim_id].measure(Context(mode, 0, claim_id, tmp_path)).verdict


@pytest.mark.parametrize("mode, system", [("quick", "dino"), ("full", "dino"), ("full", "simdino")])
def test_dino_pixels_flips(monkeypatch, tmp_path, mode, system):
    def install(dino_mean: float):
        knn = {"random init": [0.6] * SEEDS, "dino": list(dino_mean + NOISE), dino.PIXELS: [0.9] * SEEDS}
        measured = {"knn": knn, "probe": {}, "train": {}}
        monkeypatch.setattr(dino, "_measurements", lambda mode, seed, system="dino": measured)
    claim_id = f"{dino.SOURCES[system]['object']}-pixels" + dino.MODE_SUFFIX[mode]
    install(0.95)
    assert verdict(claim_id, mode, tmp_path) == "holds"
    install(0.7)
    assert verdict(claim_id, mode, tmp_path) == "fails"
    install(0.9)  # the interval of dino − pixels (mean 0, spread 0.014) contains 0
    assert verdict(claim_id, mode, tmp_path) == "inconclusive"


def test_mae_pixels_flips(monkeypatch, tmp_path):
    def install(probe_mean: float):
        runs = [{"metrics": {"probe_top1": probe_mean + e, "probe_top1_raw_pixels": 0.9},
                 "knn": {"trained": 0.7 + e, "init": 0.6, "raw pixels": 0.9}} for e in NOISE]  # k-NN: reported
        monkeypatch.setattr(mae, "_measurements", lambda quick, seed: runs)
    install(0.95)
    assert verdict("table3-mae-pixels", "full", tmp_path) == "holds"
    install(0.8)
    assert verdict("table3-mae-pixels", "full", tmp_path) == "fails"
    install(0.9)
    assert verdict("table3-mae-pixels", "full", tmp_path) == "inconclusive"


def test_dino_vit_vs_crate_flips(monkeypatch, tmp_path):
    def install(vit_mean: float):
        monkeypatch.setattr(dino, "_test_knn", lambda config, seed: list(
            (vit_mean if config.network.model == "vit_tiny" else 0.7) + NOISE[:3] * (2 if config.network.model == "vit_tiny" else 1)))
    install(0.8)
    assert verdict("table4-dino-vit-vs-crate", "full", tmp_path) == "holds"
    install(0.6)
    assert verdict("table4-dino-vit-vs-crate", "full", tmp_path) == "fails"
    install(0.7)
    assert verdict("table4-dino-vit-vs-crate", "full", tmp_path) == "inconclusive"
