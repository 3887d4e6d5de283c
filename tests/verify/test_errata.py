"""The errors of the papers: each registered error's witness fails on the printed statement and holds on the corrected
one within seconds, and ``python -m verify.errata`` writes them as a dataset (JSON and CSV) or refuses a bad
argument in one line."""
from __future__ import annotations

import csv
import json
import time

import pytest

from verify import errata
from verify.registry import ERROR_KINDS, all_claims

CLAIMS = all_claims()  # at collection, before other tests register stand-in claims
ERRORS = errata.errors(CLAIMS)
WITNESS_SECONDS = 10.0
"""The longest a witness may take: the brief's "seconds" (each runs ≈ 0–3 s on one loaded core; the slowest sweeps
−∇R^c against the score at CRATE-Base's sizes, or builds CRATE-MAE-Large on the meta device)."""


def test_every_paper_claim_expected_to_fail_is_a_registered_error():
    expected = [c.id for c in CLAIMS if c.scope == "paper" and c.may_give("fails")]
    assert [c.id for c in ERRORS] == expected and expected
    assert {c.error_kind for c in ERRORS} == set(ERROR_KINDS)  # both kinds occur among the papers' errors


@pytest.mark.parametrize("claim_id", [c.id for c in ERRORS])
def test_witness_fails_on_the_printed_statement_and_holds_on_the_corrected_one(claim_id):
    claim = next(c for c in ERRORS if c.id == claim_id)
    record = errata.witness(claim)
    assert not record["printed_holds"], f"{claim_id}: the witness holds on the printed statement: {record}"
    assert record["corrected_holds"], f"{claim_id}: the witness fails on the corrected statement: {record}"
    assert record["seconds"] <= WITNESS_SECONDS, f"{claim_id}: {record['seconds']:.1f} s"
    json.dumps(record)  # its numbers are JSON-serialisable as the dataset writes them
    assert record["correction"] and record["kind"] in ERROR_KINDS and record["version"]


def test_the_dataset_is_valid_json_and_csv(tmp_path, capsys):
    chosen = ["thm16-beta-at-least-1", "eq436-t1-as-printed"]  # a substantive error and an erratum, in the papers'
    # order (Theorem 16's proof, App. B.3, before App. B.4), both instant
    assert errata.main(["--only", *chosen, "--output-dir", str(tmp_path / "out")]) == 0
    doc = json.loads((tmp_path / "out" / "errata.json").read_text(encoding="utf-8"))
    assert [r["id"] for r in doc["errata"]] == chosen
    assert doc["counts"] == {"erratum": 1, "substantive": 1}
    assert all(list(r) == list(errata.FIELDS) for r in doc["errata"])
    first = doc["errata"][1]
    assert first["paper"].startswith("White-Box Transformers via Sparse Rate Reduction: Compression Is All There Is?")
    assert first["version"] == "long version" and first["command"] == "python -m verify.errata --only eq436-t1-as-printed"
    assert first["printed_numbers"]["relative_gap"] > 0.09 and first["corrected_numbers"]["relative_gap"] <= 1e-12
    with (tmp_path / "out" / "errata.csv").open(encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == chosen and list(rows[0]) == list(errata.FIELDS)
    assert json.loads(rows[1]["corrected_numbers"]) == first["corrected_numbers"]
    assert rows[1]["printed_holds"] == "False" and rows[1]["corrected_holds"] == "True"
    out = capsys.readouterr().out
    assert "2 errors of the papers (1 erratum, 1 substantive error)" in out


@pytest.mark.parametrize("argv, named", [(["--only", "no-such-error"], "no-such-error"),
                                          (["--only", "fig15-digits-official"], "fig15-digits-official"),
                                          (["--output-dir", "FILE"], "--output-dir")])
def test_a_bad_argument_is_refused_in_one_line(tmp_path, capsys, argv, named):
    """An unknown id, a claim that is no error of the papers, an output folder that is a file."""
    (tmp_path / "FILE").write_text("not a folder")
    argv = [str(tmp_path / a) if a == "FILE" else a for a in argv]
    assert errata.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error:") and named in err


def test_a_witness_that_misbehaves_gives_exit_status_1(tmp_path, monkeypatch):
    from verify.registry import Check, Claim

    claim = next(c for c in ERRORS if c.id == "eq436-t1-as-printed")
    wrong = Claim(**{**claim.__dict__, "witness": lambda corrected: Check(True, {})})  # holds on the printed one
    monkeypatch.setattr(errata, "errors", lambda claims=None: [wrong])
    started = time.perf_counter()
    assert errata.main(["--output-dir", str(tmp_path)]) == 1
    assert json.loads((tmp_path / "errata.json").read_text())["errata"][0]["printed_holds"] is True
    assert time.perf_counter() - started < WITNESS_SECONDS
