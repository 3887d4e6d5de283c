"""The audit reproduces on another processor: perturbed training (`verify.experiments.perturbed`) stands in for another
CPU's rounding, and the trained claims keep their verdicts inside their expected bands; `python -m verify.panel`
collects each claim's verdicts over base seeds and perturbations."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from crate_nn.engine import loop
from verify import experiments, panel
from verify.registry import all_claims
from verify.runner import run_claims

MAE = [c for c in all_claims() if c.module == "mae" and "quick" in c.modes and not c.committed]
"""The MAE claims measured in quick mode: five 20-epoch CRATE-MAE runs, among them the claim whose verdict moved on
another processor's rounding (fig10-mae-roundtrip-training)."""


@given(arrays(np.float32, st.integers(1, 32), elements=st.floats(-2.0**100, 2.0**100, width=32)), st.integers(1, 4))
@settings(deadline=None)
def test_nudge_moves_every_weight_by_k_units_in_the_last_place(values, ulps):
    layer = torch.nn.Linear(1, values.size, bias=False)
    layer.weight.data = torch.from_numpy(values.reshape(-1, 1).copy())
    experiments.nudge(layer, ulps)
    expected = values
    for _ in range(ulps):
        expected = np.nextafter(expected, np.float32(np.inf))  # NumPy's own nextafter, the reference
    expected = expected.reshape(-1, 1)
    assert np.array_equal(layer.weight.detach().numpy(), expected)


def test_perturbed_runs_are_cached_apart_and_the_engine_is_left_as_it_was(tmp_path, monkeypatch):
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path))
    from crate_nn.tasks import get_preset

    config = get_preset("digits")
    building = loop.start_task
    with experiments.perturbed(2):
        assert experiments.location(config).parent.name == "perturbed-runs-2"
        nudged = experiments.initial_model(config)
    assert loop.start_task is building and experiments.location(config).parent.name == experiments.RUNS
    plain = experiments.initial_model(config)
    differences = [(a - b).abs().max().item() for a, b in zip(nudged.parameters(), plain.parameters())]
    assert all(0 < d < 2e-6 for d in differences)  # every tensor moved, each by two last bits (|w| < 8: < 2e-6)
    with pytest.raises(ValueError, match="ulps"):
        experiments.nudge(plain, 0)


def test_perturbed_training_keeps_the_trained_claims_in_their_bands(quick_audit, tmp_path):
    """The MAE claims trained again from initialisations one unit in the last place away give verdicts (and labels)
    inside their expectations, though their numbers moved: what another processor's rounding does. In a process of
    its own, as ``python -m verify --perturb`` runs (claims memoise the runs they read within a process)."""
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "verify", "--perturb", "--only", *(c.id for c in MAE), "--no-progress",
                           "--output-dir", str(out)], capture_output=True, text=True, timeout=1200,
                          env={**os.environ, "CRATE_WHITEBOX_CACHE": str(tmp_path / "cache")})
    report = json.loads((out / "report.json").read_text())
    assert report["meta"]["perturbed"] == 1 and [c["id"] for c in report["claims"]] == [c.id for c in MAE]
    moved = [c["id"] for c in report["claims"] if c["measured"] != quick_audit.claim(c["id"])["measured"]]
    assert moved, "the perturbation changed no trained number: it stands in for nothing"
    outside = {c["id"]: (c["verdict"], c["expected_verdict"], c["labels"] or c["error"])
               for c in report["claims"] if not c["matches_expectation"]}
    assert proc.returncode == 0 and not outside, (outside, proc.stderr[-2000:])


def _report(folder, entries):
    folder.mkdir(parents=True)
    (folder / "report.json").write_text(json.dumps({"claims": [
        {"id": cid, "verdict": verdict, "expected_band": band, "matches_expectation": verdict in band,
         "labels": labels, "error": None, "skipped": None} for cid, verdict, band, labels in entries]}))


def test_the_panel_reads_each_claims_verdicts_and_labels_over_its_audits(tmp_path):
    plan = panel.audits([0, 1], [0, 1])
    labels = ["layer 1 undecided, layer 2 collapse", "layer 1 undecided, layer 2 compression"]
    for i, (seed, perturbed) in enumerate(plan):
        _report(panel.folder(tmp_path, seed, perturbed), [
            ("stable", "holds", ["holds"], None),
            ("banded", ("holds", "inconclusive")[i % 2], ["holds", "inconclusive"], labels[i % 2]),
            ("moved", ("fails", "inconclusive", "fails", "fails")[i], ["fails"], None),
            ("wide", "inconclusive", ["inconclusive", "fails"], None)])
    claims = panel.collect(tmp_path, plan)
    assert {cid: c["standing"] for cid, c in claims.items()} == {
        "stable": "as expected", "banded": "as expected", "moved": "outside", "wide": "wider than seen"}
    assert claims["moved"]["verdicts_seen"] == ["fails", "inconclusive"]
    assert panel.labels_seen(claims["banded"]) == "layer 1 undecided, layer 2 (collapse|compression)"
    panel.write(tmp_path, claims, plan, {})
    assert "`moved`" in (tmp_path / "panel.md").read_text() and "`stable`" not in (tmp_path / "panel.md").read_text()
    lines = panel.summary(claims, plan)
    assert "2 gave more than one verdict, 1 outside" in lines[0] and len(lines) == 3
    with pytest.raises(ValueError, match="no readable report.json"):
        panel.collect(tmp_path, panel.audits([7], [0]))


def test_the_panel_runs_audits_end_to_end_and_refuses_bad_arguments(tmp_path):
    out = tmp_path / "panel"
    proc = subprocess.run([sys.executable, "-m", "verify.panel", "--seeds", "0", "3", "--perturb", "0", "--only",
                           "eq8-sylvester", "--output-dir", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("2 quick audits (base seeds [0, 3], perturbed by [0] units in the last place, 0 plain); 1 claims measured, "
            "0 gave more than one verdict") in proc.stdout
    doc = json.loads((out / "panel.json").read_text())
    assert [a["exit_status"] for a in doc["audits"]] == [0, 0]
    assert doc["claims"]["eq8-sylvester"]["seen"].keys() == {"seed-0", "seed-3"}
    for bad, said in ((["--jobs", "0"], "--jobs"), (["--seeds", "1", "1"], "--seeds"), (["--perturb", "-1"], "--perturb")):
        proc = subprocess.run([sys.executable, "-m", "verify.panel", *bad], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and said in proc.stderr.splitlines()[-1]


def test_perturbed_training_leaves_the_stored_claims_as_they_were(tmp_path, monkeypatch):
    """A stored replication trains nothing: under perturbation its claims read the same stored runs (a fine-tuning
    names its pre-trained run by the cache path it would have, which the perturbation must not move)."""
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path / "cache"))
    stored = [c for c in all_claims() if c.committed == "bert" and "quick" in c.modes]
    plain = run_claims(stored, mode="quick", seed=0, output_dir=tmp_path, progress=False, figures=False)
    with experiments.perturbed():
        perturbed = run_claims(stored, mode="quick", seed=0, output_dir=tmp_path, progress=False, figures=False)
    assert stored and [o.error for o in perturbed] == [None] * len(stored)
    assert [o.result.measured for o in perturbed] == [o.result.measured for o in plain]
