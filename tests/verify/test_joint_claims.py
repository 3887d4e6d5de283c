"""The joint-measure claims of the trained MAE, DINO and GPT models, and verify.joint's helpers, fed constructed
profiles for which each verdict must come out one way, then the other."""
import numpy as np
import pytest

from verify import joint, layerwise
from verify.claims import dino, language, mae
from verify.context import Context
from verify.registry import all_claims

CLAIMS = {c.id: c for c in all_claims()}
SEEDS, DEPTH = 5, 3


SIZES = {"d": 32, "n": 64, "heads": 4, "p": 8}
"""The size the constructed profiles record (collapse floor 0.186, memberships unknown)."""


def profile(seed: int, **stations) -> dict:
    """``{measure: {station: [per layer]}}`` with a little seed-dependent noise, and the ``sizes`` measured;
    ``stations[station]`` maps a measure to its per-layer values (default: 0.9 specific, 0.4 alignment, 0.95 spread
    everywhere)."""
    rng = np.random.default_rng(seed)
    out = {"sizes": dict(SIZES)}
    for name, default in (("specific", 0.9), ("alignment", 0.4), ("spread", 0.95)):
        out[name] = {}
        for station in ("input", "half", "output"):
            values = np.asarray(stations.get(station, {}).get(name, [default] * DEPTH), dtype=float)
            out[name][station] = list(values * (1 + 1e-4 * rng.standard_normal(DEPTH)))
    return out


def verdict(claim_id: str, tmp_path, mode: str = "quick"):
    return CLAIMS[claim_id].measure(Context(mode, 0, claim_id, tmp_path))


COMPRESSED = {"specific": [0.85] * DEPTH, "alignment": [0.5] * DEPTH, "spread": [0.95] * DEPTH}
COLLAPSED = {"specific": [0.85] * DEPTH, "alignment": [0.5] * DEPTH, "spread": [0.6] * DEPTH}
"""Spread 0.35 below the base: beyond every collapse floor of these sizes (0.186 at d 32, n 64; 0.093 at 17 tokens)."""
EXPANDED = {"specific": [0.95] * DEPTH, "alignment": [0.3] * DEPTH, "spread": [0.95] * DEPTH}


# ------------------------------------------------------------------------------------------------ the helpers
def test_expands_mirrors_compresses_and_never_credits_collapse():
    base = [profile(s) for s in range(SEEDS)]
    floor = joint.Sizes.of(base).floor
    assert joint.expands(joint.at([profile(s, half=EXPANDED) for s in range(SEEDS)], "half", 1),
                         joint.at(base, "half", 1), floor=floor).label == "expansion"
    assert joint.expands(joint.at([profile(s, half=COMPRESSED) for s in range(SEEDS)], "half", 1),
                         joint.at(base, "half", 1), floor=floor).label == "no expansion"
    collapsed = joint.expands(joint.at([profile(s, half={**EXPANDED, "spread": [0.6] * DEPTH}) for s in range(SEEDS)],
                                       "half", 1), joint.at(base, "half", 1), floor=floor)
    assert (collapsed.label, collapsed.verdict) == ("collapse", "fails")


def decided(trained: list[dict], init: list[dict], rule: str = "every"):
    """A joint row of the layer-wise family, trained against init, decided on per-seed profiles."""
    row = layerwise.Row(layerwise.Object("trained"), "joint", layerwise.Control("init", "init"), rule)
    subject = layerwise.Seeds({"trained": layerwise.joint_values(trained), "init": layerwise.joint_values(init)},
                              joint.Sizes.of(trained))
    return layerwise.decide(row, subject.sample(row))


def test_a_joint_row_reports_layer_1_apart():
    first_collapses = {"specific": [0.85] * DEPTH, "alignment": [0.5] * DEPTH, "spread": [0.6, 0.95, 0.95]}
    result = decided([profile(s, half=first_collapses) for s in range(SEEDS)], [profile(s) for s in range(SEEDS)])
    assert result.labels == "layer 1 collapse, layer 2 compression, layer 3 compression"
    assert result.verdict == "holds" and result.measured.startswith("layer 1: collapse")


def test_shared_by_compares_labels():
    base = joint.at([profile(s) for s in range(SEEDS)], "half", 1)
    floor = joint.Sizes(**SIZES).floor

    def first_layer(offset, half):
        return joint.compresses(joint.at([profile(s + offset, half=half) for s in range(SEEDS)], "half", 1), base,
                                floor=floor)

    a, b, c = first_layer(0, COLLAPSED), first_layer(10, COLLAPSED), first_layer(0, COMPRESSED)
    assert joint.shared_by(a, b) and not joint.shared_by(a, c)


# ------------------------------------------------------------------------------------------------ CRATE-MAE
def mae_runs(monkeypatch, trained_encoder: dict, trained_decoder: dict, init_encoder: dict | None = None,
             init_decoder: dict | None = None):
    """Replace the MAE measurements by constructed per-station profiles (``{station: {measure: values}}``)."""
    raw = {f"{part}_{side}": [50.0] * DEPTH for part in ("encoder", "decoder") for side in ("before", "after")}
    raw.update({key: [50.0] * DEPTH for key in ("compression_paper", "compression_official", "sparsity")})

    def model(s, encoder, decoder):
        return {**raw, "joint_encoder": profile(s, **encoder), "joint_decoder": profile(s + 100, **decoder)}

    runs = [{"trained": model(s, trained_encoder, trained_decoder),
             "init": model(s + 1000, init_encoder or {}, init_decoder or {})} for s in range(SEEDS)]
    monkeypatch.setattr(mae, "_measurements", lambda quick, seed: runs)


def test_mae_encoder_step_flips_and_names_the_architecture(monkeypatch, tmp_path):
    mae_runs(monkeypatch, {"half": COMPRESSED}, {})
    assert verdict("eq56-mae-encoder-step", tmp_path).verdict == "holds"
    mae_runs(monkeypatch, {"half": COLLAPSED}, {}, init_encoder={"half": COLLAPSED})
    result = verdict("eq56-mae-encoder-step", tmp_path)
    assert result.verdict == "fails" and "architecture, not training" in result.measured
    mae_runs(monkeypatch, {"half": EXPANDED}, {})
    result = verdict("eq56-mae-encoder-step", tmp_path)
    assert result.verdict == "fails" and "architecture" not in result.measured


def test_mae_decoder_step_flips(monkeypatch, tmp_path):
    mae_runs(monkeypatch, {}, {"output": EXPANDED})
    assert verdict("eq62-mae-decoder-step", tmp_path).verdict == "holds"
    mae_runs(monkeypatch, {}, {"output": {**EXPANDED, "spread": [0.6] * DEPTH}})  # "anti-compression" by collapse
    assert verdict("eq62-mae-decoder-step", tmp_path).verdict == "fails"


def test_mae_joint_flips(monkeypatch, tmp_path):
    mae_runs(monkeypatch, {"half": COMPRESSED}, {})
    assert verdict("sec4.2-mae-joint", tmp_path).verdict == "holds"
    mae_runs(monkeypatch, {"half": COLLAPSED}, {})
    assert verdict("sec4.2-mae-joint", tmp_path).verdict == "fails"


# ------------------------------------------------------------------------------------------------ DINO and GPT
def measured(profiles: dict) -> dict:
    """The other measures of the runs whose joint ``profiles`` a test constructs (flat: they decide nothing here)."""
    flat = {name: np.full((SEEDS, DEPTH), 50.0) for name in profiles}
    return {"joint": profiles, "compression": {"paper": flat, "official": flat}, "sparsity": flat}


def install_dino(monkeypatch, profiles: dict) -> None:
    monkeypatch.setattr(dino, "_measurements", lambda mode, seed, system="dino": measured(profiles))


def test_dino_joint_flips(monkeypatch, tmp_path):
    mode, claim_id = "full", "fig15-dino-joint"
    def install(trained):
        profiles = {"dino": [profile(s, half=trained) for s in range(SEEDS)],
                    "random init": [profile(s + 1000) for s in range(SEEDS)]}
        install_dino(monkeypatch, profiles)
    install(COMPRESSED)
    assert verdict(claim_id, tmp_path, mode).verdict == "holds"
    install(COLLAPSED)
    assert verdict(claim_id, tmp_path, mode).verdict == "fails"


def test_stored_profiles_without_sizes_or_rate_reduction_are_judged(monkeypatch, tmp_path):
    """Profiles recorded before the collapse floor and ΔR existed (a replication's runs.json): the claim takes the
    sizes from its preset (DINO's teacher: d 96, 16 patches + [CLS], 4 heads) and says that ΔR is not stored."""
    def stored(seed, **stations):
        return {k: v for k, v in profile(seed, **stations).items() if k != "sizes"}
    profiles = {"dino": [stored(s, half=COLLAPSED) for s in range(SEEDS)],
                "random init": [stored(s + 1000) for s in range(SEEDS)]}
    install_dino(monkeypatch, profiles)
    result = verdict("fig15-dino-joint", tmp_path, "full")
    assert result.verdict == "fails" and "ΔR not stored" in result.measured
    assert result.data["per_layer"][0]["collapse_floor"] == joint.Sizes(96, 17, 4).floor
    assert result.labels == "layer 1 collapse, layer 2 collapse, layer 3 collapse"
    with pytest.raises(ValueError, match="sizes"):
        joint.Sizes.of(profiles["dino"])


def test_the_last_layer_is_apart_where_a_head_reads_it(monkeypatch, tmp_path):
    """Footnote 17 (verify.joint): a collapse at the last layer alone decides the DINO teacher's claim (a head reads
    it) no more than its sparsity claim; CRATE-MAE's encoder, which no head reads, keeps every layer."""
    last_collapses = {**COMPRESSED, "spread": [0.95, 0.95, 0.6]}
    profiles = {"dino": [profile(s, half=last_collapses) for s in range(SEEDS)],
                "random init": [profile(s + 1000) for s in range(SEEDS)]}
    install_dino(monkeypatch, profiles)
    result = verdict("fig15-dino-joint", tmp_path, "full")
    assert result.verdict == "holds" and result.labels.endswith("layer 3 collapse")
    assert "layer 3 (footnote 17, apart): collapse" in result.measured and result.headline.label.startswith("ℓ 2")
    mae_runs(monkeypatch, {"half": last_collapses}, {})
    assert verdict("sec4.2-mae-joint", tmp_path).verdict == "fails"


def test_two_layers_and_a_head_leave_no_layer_to_decide():
    """Layer 1 apart and the last apart (footnote 17): a 2-layer model read by a head is `inconclusive`, whatever
    its layers show, and says which layer its headline is."""
    def two_layers(p):
        return {k: (v if k == "sizes" else {s: values[:2] for s, values in v.items()}) for k, v in p.items()}
    trained = [two_layers(profile(s, half=COLLAPSED)) for s in range(SEEDS)]
    init = [two_layers(profile(s + 1000)) for s in range(SEEDS)]
    result = decided(trained, init, "footnote17")
    assert result.verdict == "inconclusive" and result.labels == "layer 1 collapse, layer 2 collapse"
    assert result.headline.label.startswith("ℓ 2 (apart) collapse")
    assert decided(trained, init).verdict == "fails"


def test_gpt_joint_flips(monkeypatch, tmp_path):
    def install(trained):
        profiles = {"trained": [profile(s, half=trained) for s in range(SEEDS)],
                    "init": [profile(s + 1000) for s in range(SEEDS)]}
        monkeypatch.setattr(language, "_layers", lambda mode, seed: measured(profiles))
    install(COMPRESSED)
    assert verdict("fig15-gpt-joint", tmp_path).verdict == "holds"
    install(COLLAPSED)
    assert verdict("fig15-gpt-joint", tmp_path).verdict == "fails"
