"""`benchmarks.presets` (every command the docs time, as full runs, resumable) and `benchmarks.presets_docs` (the docs'
times written from its JSON): the README's and docs' generated time parts say what the committed JSON says, so no
time there is typed by hand; the script runs end to end on its --tiny selection; resuming, --again, the quiet
threshold and the rendering of busy, failed and missing rows.

No timing is asserted: speed is the script's to measure, never a test's.
"""
from __future__ import annotations

import json
import shutil

import pytest

from benchmarks import presets, presets_docs

COMMITTED = json.loads(presets.DEFAULT_OUT.read_text())


@pytest.mark.parametrize("name", sorted(presets_docs.PARTS))
def test_each_generated_time_is_what_the_committed_json_renders(name):
    rendered = presets_docs.render(COMMITTED)[name]
    assert presets_docs.current(name) == rendered, (
        f"{presets_docs.PARTS[name][0]}, part {name!r}, differs from {presets.DEFAULT_OUT.name} (rewrite it: "
        "python -m benchmarks.presets --docs)")


def test_the_committed_json_lists_todays_commands_and_no_tiny_or_partial_run():
    assert [c["key"] for c in COMMITTED["commands"]] == list(presets.COMMANDS), (
        "the catalogue changed: python -m benchmarks.presets --only NEW_ROWS (then --docs)")
    assert not COMMITTED["tiny"] and COMMITTED["quiet_load_per_cpu"] == presets.QUIET_LOAD_PER_CPU
    for row in COMMITTED["rows"]:
        assert "projected" not in json.dumps(row)
        assert row.get("steps") == row.get("planned_steps"), f"{row['key']}: a partial run"
        assert row["processor"] and row["cpus"] >= 1 and "load_1min_before" in row


def _row(key: str, wall: float, load: float = 0.2, **fields) -> dict:
    return {"key": key, "command": presets.COMMANDS[key].shown, "wall_s": wall, "cpu_s": wall / 2, "exit_status": 0,
            "load_1min_before": load, "load_1min_after": load + 1, "quiet": load <= 1.0, "threads": 2,
            "processor": "Test CPU", "cpus": 2, "torch": "2.13.0+cpu", "python": "3.11.7", "git_commit": "abc1234",
            "utc": "2026-12-01T10:00:00Z", **fields}


def _payload(*rows: dict) -> dict:
    return {"benchmark": "presets", "tiny": False, "quiet_load_per_cpu": presets.QUIET_LOAD_PER_CPU,
            "commands": [{"key": c.key, "command": c.shown, "note": c.note} for c in presets.COMMANDS.values()],
            "rows": list(rows)}


def test_the_parts_say_each_time_its_machine_its_load_and_what_is_missing():
    payload = _payload(_row("setup", 310.0, pip_config=["global.find-links='/opt/wheels'"]),
                       _row("audit-cold", 444.0, load=3.1), _row("audit-warm", 58.0, threads=1, claims=174,
                                                                 unexpected=2),
                       _row("digits", 81.0, steps=600, planned_steps=600),
                       {**_row("test", 1.0), "failed": "make test exited with status 2:\n…"},
                       _row("test-fast", 600.0, threads=1, workers=2, pytest="1,000 passed in 599.00s"))
    parts = presets_docs.render(payload)
    install = parts["times-install"].splitlines()
    assert install[0].endswith("(a fresh `.venv`; PyTorch from pip's local wheels; a") and install[1].endswith(": 5.2 min")
    assert install[2] == "- `make audit`: 7.4 min from a cold cache, 58 s once its trained models are cached"
    assert install[3] == "- `make test`, as CI runs it: failed (`python -m benchmarks.presets --only test`)"
    assert "on 2 CPUs (Test CPU) while other jobs ran (busy: 1-minute load up to 3.1 before a run)" in install[6]
    digits = " ".join(parts["times-digits"].splitlines())
    assert "81 s (40 s of CPU time), with `--schedule.epochs 15` not timed yet (`python -m benchmarks.presets --only " \
           "digits-epochs15`), on 2 CPUs (Test CPU), otherwise idle (1-minute load at most 0.2 before a run)" in digits
    assert presets_docs.render(_payload())["times-audit"] == (
        "Its times are not timed yet (`python -m benchmarks.presets --only audit-cold audit-warm`).")
    table = parts["times-presets"].splitlines()
    assert "| `make setup`, a fresh virtual environment | – | 5.2 min | 2.6 min | 2 | A | 0.2 → 1.2 |" in table
    assert "| `python -m verify`, cold cache | – | 7.4 min | 3.7 min | 2 | A | 3.1 → 4.1 (busy) |" in table
    assert "| `python -m verify`, warm cache | 174 claims, 2 outside their expectation | 58 s | 29 s | 1 | A |" \
           " 0.2 → 1.2 |" in table
    assert "| `crate-train --preset digits` | 600 steps | 81 s | 40 s | 2 | A | 0.2 → 1.2 |" in table
    assert "| `make test-fast`, an empty audit cache | 1,000 passed in 599.00s | 10.0 min | 5.0 min | 1 × 2 workers |" \
           " A | 0.2 → 1.2 |" in table
    assert "| `crate-train --preset mnist5k` | not timed yet | | | | | |" in table and "| `make test`, as CI runs it, " \
        "an empty audit cache | failed | | | | | |" in table
    assert f"- without a time: {len(presets.COMMANDS) - 5} rows (`python -m benchmarks.presets` times those its " \
           "JSON lacks or holds as failed)" in table  # 5 rows measured
    assert "- A: 2 CPUs (Test CPU); torch 2.13.0+cpu, Python 3.11.7; measured 2026-12-01 at commit abc1234" in table
    # a second machine gets its own letter, and the prose names both
    other = {**_row("audit-warm", 20.0, claims=174, unexpected=0), "processor": "Other CPU", "cpus": 16}
    parts = presets_docs.render(_payload(_row("audit-cold", 100.0, claims=174, unexpected=0), other))
    assert "on 16 CPUs (Other CPU) and 2 CPUs (Test CPU)" in " ".join(parts["times-audit"].splitlines())
    assert "| `python -m verify`, warm cache | 174 claims | 20 s | 10 s | 2 | B |" in parts["times-presets"]


def test_a_part_is_rewritten_between_its_markers_only(tmp_path):
    for name, (path, _) in presets_docs.PARTS.items():
        file = tmp_path / path
        file.parent.mkdir(exist_ok=True)
        text = file.read_text() if file.exists() else "intro\n"
        file.write_text(f"{text}<!-- generated: {name} ({presets_docs.COMMAND}) -->\nstale 1 min\n"
                        f"<!-- end: {name} -->\nrest\n")
    payload = _payload(_row("digits", 81.0, steps=600, planned_steps=600))
    assert sorted(presets_docs.update(payload, root=tmp_path)) == sorted(presets_docs.PARTS)
    readme = (tmp_path / "README.md").read_text()
    assert "stale" not in readme and readme.startswith("intro\n") and readme.endswith("\nrest\n")
    assert presets_docs.update(payload, root=tmp_path, check=True) == []


def test_the_load_decides_quiet_and_settle_waits_for_it(monkeypatch):
    loads = iter([5.0, 3.0, 0.4])
    monkeypatch.setattr(presets.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(presets.os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    monkeypatch.setattr(presets.time, "sleep", lambda s: None)
    assert presets.quiet_threshold() == 1.0  # 0.5 per CPU
    assert presets.settle(3600) == 0.4  # waited through 5.0 and 3.0
    monkeypatch.setattr(presets.os, "getloadavg", lambda: (7.0, 0.0, 0.0))
    assert presets.settle(0) == 7.0  # no time to wait: the busy load is what the row records


def test_resuming_skips_done_rows_and_reruns_failed_and_stale_ones(tmp_path, monkeypatch):
    ran = []

    def fake_row(self, command):
        ran.append(command.key)
        if command.key == "audit-warm" and ran.count("audit-warm") == 1:
            return {"key": command.key, "failed": "exited with status 1"}
        if command.key == "digits" and ran.count("digits") == 1:
            raise KeyboardInterrupt  # an interrupted run: what was written stays
        return _row(command.key, 1.0)

    monkeypatch.setattr(presets.Bench, "row", fake_row)
    out, work = tmp_path / "times.json", tmp_path / "work"
    args = ["--out", str(out), "--work", str(work), "--settle", "0", "--only", "setup", "audit-cold", "audit-warm",
            "digits"]
    with pytest.raises(KeyboardInterrupt):
        presets.main(args)
    written = json.loads(out.read_text())
    assert [r["key"] for r in written["rows"]] == ["setup", "audit-cold", "audit-warm"]
    assert not list(tmp_path.glob("*.partial"))  # written whole, after each row
    presets.main(args)  # resumes: the failed row and the interrupted one only
    assert ran == ["setup", "audit-cold", "audit-warm", "digits", "audit-warm", "digits"]
    presets.main(args + ["--again"])  # everything selected anew, and a resume after it would skip them all
    assert ran[6:] == ["setup", "audit-cold", "audit-warm", "digits"]
    assert not any(r.get("stale") for r in json.loads(out.read_text())["rows"])


def test_bad_options_get_one_line(tmp_path):
    with pytest.raises(SystemExit, match="--tiny needs an --out other than"):
        presets.main(["--tiny"])
    with pytest.raises(SystemExit, match="--tiny runs only"):
        presets.main(["--tiny", "--out", str(tmp_path / "t.json"), "--only", "gpt_stdlib"])
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SystemExit, match="expected this script's JSON"):
        presets.main(["--out", str(tmp_path / "bad.json")])
    with pytest.raises(SystemExit, match="--settle expects seconds"):
        presets.main(["--settle", "-1"])


def test_tiny_run_end_to_end(tmp_path, monkeypatch, capsys):
    """Every kind of row as its --tiny stand-in: a one-epoch digits run, the MM claims cold and warm, the make
    targets' recipes (make -n); then --docs refuses the tiny JSON, and the docs render from it in a copy."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MAKEFLAGS", "w")  # as under a `make -C` (the make test row runs this test so): make prints
    # "Entering directory" lines unless told not to, which the recipes read from make -n must not contain
    out = tmp_path / "tiny.json"
    payload = presets.main(["--tiny", "--settle", "0", "--device", "cpu", "--out", str(out), "--work",
                            str(tmp_path / "work")])
    assert json.loads(out.read_text()) == payload and payload["tiny"]
    rows = {row["key"]: row for row in payload["rows"]}
    assert list(rows) == list(presets.TINY_KEYS)
    for row in rows.values():
        assert "failed" not in row, row.get("failed")
        assert row["wall_s"] > 0 and row["cpu_s"] >= 0 and row["load_1min_before"] >= 0 and row["processor"]
    assert rows["digits"]["steps"] == rows["digits"]["planned_steps"] > 0  # a full run of its one epoch
    assert rows["digits"]["threads"] == 1 and "runs/digits" in rows["digits"]["argv"]
    assert rows["audit-cold"]["claims"] == rows["audit-warm"]["claims"] > 0 and rows["audit-cold"]["exit_status"] == 0
    assert rows["setup"]["recipe"][0] == "python3 -m venv $WORK/venv" and rows["setup"]["pip_config"] is not None
    assert rows["test"]["workers"] >= 1 and rows["test"]["threads"] == 1 and "pytest" in rows["test"]["recipe"][-1]
    assert all("/" not in part or part.startswith(("$WORK", "runs/")) for part in rows["digits"]["argv"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as refused:
        presets.main(["--docs", str(out)])
    assert refused.value.code == 2 and "--tiny run's stand-ins" in capsys.readouterr().err
    for path in {path for path, _ in presets_docs.PARTS.values()}:
        (tmp_path / "copy" / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(presets_docs.ROOT / path, tmp_path / "copy" / path)
    assert presets_docs.update({**payload, "tiny": False}, root=tmp_path / "copy")
    table = (tmp_path / "copy" / "docs" / "training.md").read_text()
    assert f"| `crate-train --preset digits` | {rows['digits']['steps']} steps |" in table
