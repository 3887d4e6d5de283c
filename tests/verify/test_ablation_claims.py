"""The ablation-table claims (verify.claims.ablations), fed constructed per-seed accuracies: each verdict must come
out `holds`, `fails` and `inconclusive` where it must, on either data set; the table and figure. (Reading the
committed runs, and refusing another recipe, is verify.committed's: tests/verify/test_committed.py.)"""
import numpy as np
import pytest

from verify.claims import ablations
from verify.context import Context
from verify.registry import all_claims

CLAIMS = {c.id: c for c in all_claims() if c.module == "ablations"}
NOISE = np.array([-0.004, 0.002, 0.0, 0.003, -0.001])  # per-seed wiggle; sums to 0


def results(data: str = "digits", **means) -> dict:
    """Every row of ``data`` at 0.97 ± NOISE unless ``means`` says otherwise (keys: the rows with spaces as in
    VARIANTS)."""
    rows = {v: list(means.get(v, 0.97) + NOISE) for v in ablations.DATA[data]}
    return {"data": data, "seeds": list(range(5)), "test_top1": rows, "seconds": {v: [1.0] * 5 for v in rows}}


def verdict(monkeypatch, tmp_path, claim_id: str, data: dict) -> str:
    monkeypatch.setattr(ablations, "measure", lambda name, seed: data if name == data["data"] else None)
    return CLAIMS[claim_id].measure(Context("full", 0, claim_id, tmp_path)).verdict


def test_the_claims_cover_tables_11_12_13_and_15():
    tables = {"table11-eta", "table11-lambda", "table12-tied-output", "table12-mm-step", "table13-soft-threshold",
              "table15-without-ista"}
    assert set(CLAIMS) == ({f"{t}-digits" for t in tables}
                           | {f"{t}-mnist5k" for t in tables - {"table11-lambda", "table12-tied-output"}})
    assert all(c.committed == "ablations" for c in CLAIMS.values())


@pytest.mark.parametrize("claim_id, row", [("table11-eta-digits", "η 0.5"),
                                           ("table12-tied-output-digits", "tied output β[U]"),
                                           ("table12-mm-step-digits", "MM step (123)"),
                                           ("table13-soft-threshold-digits", "soft threshold, λ 10"),
                                           ("table15-without-ista-digits", "without ISTA"),
                                           ("table11-eta-mnist5k", "η 0.5"),
                                           ("table15-without-ista-mnist5k", "without ISTA")])
def test_a_worse_row_holds_a_better_one_fails_a_tie_is_inconclusive(monkeypatch, tmp_path, claim_id, row):
    data = "mnist5k" if claim_id.endswith("mnist5k") else "digits"
    assert verdict(monkeypatch, tmp_path, claim_id, results(data, **{row: 0.90})) == "holds"
    assert verdict(monkeypatch, tmp_path, claim_id, results(data, **{row: 0.99})) == "fails"
    assert verdict(monkeypatch, tmp_path, claim_id, results(data)) == "inconclusive"


def test_lambda_insensitivity_holds_inside_the_margin_and_fails_outside(monkeypatch, tmp_path):
    claim_id = "table11-lambda-digits"
    assert verdict(monkeypatch, tmp_path, claim_id, results(**{"λ 0.02": 0.972, "λ 0.5": 0.968})) == "holds"
    assert verdict(monkeypatch, tmp_path, claim_id, results(**{"λ 0.5": 0.93})) == "fails"  # 4 points worse
    at_margin = 0.961 + NOISE[::-1] - NOISE  # paired difference −0.009 with a spread: its interval straddles −0.01
    assert verdict(monkeypatch, tmp_path, claim_id, results(**{"λ 0.5": at_margin})) == "inconclusive"


def test_pairing_follows_the_parameters():
    assert ablations.same_parameters("default", "η 0.5") and ablations.same_parameters("default", "MM step (123)")
    assert not ablations.same_parameters("default", "tied output β[U]")
    assert not ablations.same_parameters("default", "without ISTA")


def test_table_and_figure(tmp_path):
    data = results(**{"without ISTA": 0.90})
    text = ablations.table(data)
    assert text.count("\n|") == len(ablations.VARIANTS) + 1 and "| without ISTA | 61.9 | 90.00 ± 0.27 | +7.00 [+6.60, +7.40] (Welch) | holds |" in text
    assert ablations.table(results("mnist5k")).count("\n|") == len(ablations.DATA["mnist5k"]) + 1
    ablations.figure([data, results("mnist5k")], tmp_path / "a.png")
    assert (tmp_path / "a.png").stat().st_size > 10_000
