"""Every registered claim, measured in quick mode, gives the verdict its analysis expects; the CLI end to end."""
import json
import subprocess
import sys

import pytest

from verify.registry import KINDS, PROVENANCES, VERDICTS, all_claims
from verify.report import LAYERS_COMPRESS, PAPER_CLAIMS

CLAIMS = all_claims()
QUICK = [c for c in CLAIMS if "quick" in c.modes]


def test_registry_is_large_and_well_formed():
    ids = [c.id for c in CLAIMS]
    assert len(ids) >= 30 and len(set(ids)) == len(ids)
    assert not [c.id for c in CLAIMS if c.id.startswith("0-import")], "a claim module failed to import"
    sections = {i.split("-")[0] for c in CLAIMS for i in (c.id, *c.formerly)}  # the checks by their former ids
    missing = {f"2.{i}" for i in range(1, 25)} - sections
    assert not missing, f"groups 2.1–2.24 of the former claim numbering without a claim: {sorted(missing)}"
    for c in CLAIMS:
        assert c.location and c.statement and c.measures and c.expected, c.id
        assert set(c.expected_verdict.verdicts) <= set(VERDICTS)
        assert c.kind in KINDS and c.provenance in PROVENANCES, c.id


MEASURED = ("found by measuring", "found by counting", "recorded after measuring")
"""How an expected text says that its expectation was set by a measurement."""


def test_expectations_found_by_measuring_say_so():
    """A claim whose expected text says its expectation was found by measuring or counting, or recorded after
    measuring, has the provenance 'measurement' (the converse is a judgment on each claim's history, recorded in its
    decorator)."""
    told = [c.id for c in CLAIMS if any(phrase in c.expected.lower() for phrase in MEASURED)]
    wrong = [c.id for c in CLAIMS if c.id in told and c.provenance != "measurement"]
    assert told and not wrong, wrong


def test_summary_rows_name_registered_substantive_claims():
    by_id = {c.id: c for c in CLAIMS}
    for said, ids in PAPER_CLAIMS:
        assert ids and all(i in by_id for i in ids), (said, ids)
        assert all(by_id[i].kind not in ("identity", "printed") for i in ids), said


@pytest.mark.parametrize("claim_id", [c.id for c in QUICK])
def test_claim_gives_its_expected_verdict(quick_audit, claim_id):
    entry = quick_audit.claim(claim_id)
    assert entry["error"] is None, entry["error"]
    assert entry["verdict"] in entry["expected_band"], (
        f"{claim_id}: measured {entry['measured']} → {entry['verdict']}, expected {entry['expected_verdict']}"
    )
    assert entry["matches_expectation"], f"{claim_id}: labels {entry['labels']!r} differ from the expected ones"


def test_cli_end_to_end(quick_audit):
    assert quick_audit.exit_status == 0
    report = quick_audit.report
    assert [c["id"] for c in report["claims"]] == [c.id for c in QUICK]
    assert report["meta"]["not_run_in_this_mode"] == [c.id for c in CLAIMS if "quick" not in c.modes]
    for entry in report["claims"]:
        for key in ("id", "location", "statement", "measured", "expected", "verdict", "expected_verdict"):
            assert entry[key] is not None, (entry["id"], key)
        for figure in entry["figures"]:
            path = quick_audit.output_dir / figure
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", figure
    assert report["meta"]["mode"] == "quick"
    assert report["summary"]["mismatches"] == []
    assert sum(len(c["figures"]) for c in report["claims"]) >= 5
    md = (quick_audit.output_dir / "report.md").read_text()
    assert all(c.id in md for c in CLAIMS)  # full-only claims are named as not run
    start = md.index("## Summary")
    summary = md[start:md.index("\n## ", start + 1)].rstrip("\n").split("\n")  # up to the next section
    # the sources, then two tables with their headers: the central question (a row per model, then its counts by
    # scope and what it does not measure) and the statements
    assert len(summary) <= 4 + (len(LAYERS_COMPRESS) + 5) + (len(PAPER_CLAIMS) + 2)
    assert "12 layers, 197 tokens, ImageNet" in "\n".join(summary)
    assert sum(line.startswith("| ") for line in summary) == (len(LAYERS_COMPRESS) + 1) + (len(PAPER_CLAIMS) + 1)
    detail = md[md.index("## Detail"):md.index("## All claims")]
    assert all(f"- **{c.id}** — **" in detail for c in QUICK)  # the detail covers every measured claim
    lines = quick_audit.stdout.rstrip("\n").split("\n")
    assert "as expected" in quick_audit.stdout and len(lines) <= 40
    assert max(len(line) for line in lines[:-1]) <= 120  # the last line names the output folder


def test_console_entry_point_runs_a_selection(tmp_path):
    """``python -m verify`` as a user runs it: a cheap selection, with exit status and files."""
    out = tmp_path / "report"
    # an id prefix, a former id and an id
    proc = subprocess.run([sys.executable, "-m", "verify", "--only", "eq8", "2.1-rc-sum", "table1-params-tiny",
                           "--output-dir", str(out), "--seed", "3"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "claim 2.1-rc-sum is now eqs12-13-rc-sum" in proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert {c["id"] for c in report["claims"]} == {"eq8-sylvester", "eqs12-13-rc-sum", "table1-params-tiny"}
    assert report["meta"]["seed"] == 3


def test_unknown_selector_is_a_usage_error(capsys):
    from verify.__main__ import main

    assert main(["--only", "no-such-claim"]) == 2
    assert "no-such-claim" in capsys.readouterr().err


def test_full_mode_and_list(tmp_path, capsys):
    """--full runs (here on one cheap claim, whose sizes come from the registry) and --list names every claim."""
    from verify.__main__ import main

    assert main(["--full", "--only", "thm16-beta-at-least-1", "--output-dir", str(tmp_path), "--no-progress"]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["meta"]["mode"] == "full" and report["claims"][0]["data"]["d"] == 768
    capsys.readouterr()
    assert main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(c.id in listed for c in CLAIMS)
