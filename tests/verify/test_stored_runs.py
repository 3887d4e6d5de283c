"""Stored numbers sealed and marked: checksums on every stored JSON file (verify.integrity), committed replications
sealed with the code that recorded them and refused in one line when edited, `verify.record` that never loses a
replication, stored verdicts marked in every view and not re-measured at another base seed, and an audit that stops
on SIGTERM/SIGINT."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.verify.test_experiments import cache, tiny  # noqa: F401 - the fixture is used by name
from verify import __main__ as cli
from verify import committed, experiments, integrity, record, report, runner
from verify.context import TABLE17
from verify.registry import Claim, Headline, Result, all_claims

REPO = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------------------------- integrity
def test_a_sealed_file_reads_back_and_any_change_is_refused_naming_it(tmp_path):
    path = tmp_path / "x.json"
    doc = {"b": [1, 2.5, None], "a": {"n": 3.459, "text": "é"}, "t": (1, 2)}
    integrity.write(path, doc, indent=1)
    assert integrity.read(path) == {"b": [1, 2.5, None], "a": {"n": 3.459, "text": "é"}, "t": [1, 2]}
    text = path.read_text()
    for damaged, reason in ((text.replace("3.459", "1.459"), "does not match its SHA-256"),  # one bit of a digit
                            (text[: len(text) // 2], "is not valid JSON"),  # truncated
                            (json.dumps(doc), "carries no SHA-256"),
                            ("[1]", "expected a sealed JSON object")):
        path.write_text(damaged)
        with pytest.raises(integrity.Damaged, match=reason) as err:
            integrity.read(path)
        assert str(err.value).startswith(str(path)) and "\n" not in str(err.value)
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temporary file left by the writes


def test_an_interrupted_write_leaves_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "x.json"
    integrity.write(path, {"runs": [1, 2, 3]})

    def killed(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        integrity.write(path, {"runs": []})
    assert integrity.read(path) == {"runs": [1, 2, 3]} and [p.name for p in tmp_path.iterdir()] == ["x.json"]


# --------------------------------------------------------------------------------------------- committed files
PINNED = {
    "results/ablations/check.json": "4cc47a04d94bae991debe04936bf09cd54ed7503a78b4ced1669c9ec62250d04",
    "results/ablations/runs.json": "0b2f1d5776f90c10ccfe32ee84555b8c19c2485ef13a3ca85fcad09cb0d2f803",
    "results/bert/check.json": "f10f8f4bca7086624ab49e69a3e22856605f3230d9f15bfac4a720b6d8ecda82",
    "results/bert/runs.json": "11789dda744aa67f8f29c26489ade94c8c7f2a438b5e2b1ca387ec1adf765407",
    "results/digits/check.json": "4ef37fee21a0f670ebd0390aba2d3e6c8ce2f808867e7c829920b9698fefd1ab",
    "results/digits/runs.json": "f701d7f8ab80c9c31ead16210050da1b457105d8bc6c80b099b8145857cd00b8",
    "results/dino/check.json": "a6505330fd55775a369e4fbda224478fb4feb72c7270af99d82a175bcbdde20f",
    "results/dino/runs.json": "05b71d0cc225195d0197c2cd1e48ec34918afbb6ec0ee0e8920ac32991ddc61f",
    "results/figures/check.json": "51c3facc87c518fee273a9d0b6c92ea11bc4005255d9a23d9e83eb1f8a4beb98",
    "results/figures/runs.json": "507dcfc46be781f7e199ced5e157a0e32dfdd017f71e05e09c8651785d2882a4",
    "results/mae/check.json": "043a1cf1747a5638c79ac8071c52829017399deb6cd232d2ebc9a4210b6e976e",
    "results/mae/runs.json": "6e3a5f69eb6e2ace4ed904a9327fe5ee4351b7673d9dbea436a75994341a2cd2",
    "results/segmentation/check.json": "88ab7fc02f1a08dfaf4fd69b4a09229dc0e20f03bf20e0498d8b4c56704cd608",
    "results/segmentation/results.json": "a4f37629ba71fb3f3aa73d6bc2b920f2501ab0385ef9fbc42390d3a139c9d813",
    "results/tost/check.json": "94962164bbdc7d0ae416ea5a91b2d0d121288efec49ec97e8e79e264d5b02669",
    "results/tost/runs.json": "63254bd355f9e4a9a7cc5de6fc22a23397693bd46ba2280f7b8e8309191a0594",
}
"""The SHA-256 of every sealed file under results/ (the replications' runs, Table 17's results, their checks). A seal
promises integrity — a damaged file, or one edited without sealing again, is refused — not authenticity: anyone can
seal an edited file again. This table is the record: a file sealed again (re-recorded, re-checked, or edited) fails
here unless its pin moves in the same commit, where a reviewer sees both."""


def _sealed_files() -> dict[str, str]:
    return {str(p.relative_to(REPO)): json.loads(p.read_text())["sha256"]
            for p in sorted((REPO / "results").glob("*/*.json"))
            if p.name in ("runs.json", "results.json", committed.CHECK)}


def test_every_sealed_stored_file_is_pinned_and_matches_its_seal():
    assert _sealed_files() == PINNED
    for file in PINNED:
        integrity.read(REPO / file)  # its content is the one its checksum was taken of


def test_every_replication_is_checked_on_its_current_recording():
    """A replication re-recorded without a check, or whose check file was edited, is caught here (the check of a
    warm cache's fresh recording costs only its measuring: `python -m verify.record --check NAME`)."""
    for name in record.replications():
        assert committed.replication(name).check()["state"] in ("passed", "failed"), name


def test_every_committed_replication_is_sealed_with_the_code_that_recorded_it():
    names = record.replications()
    assert set(names) == {"ablations", "bert", "digits", "dino", "figures", "mae", TABLE17, "tost"}
    checked = {}
    for name in names:
        stored = committed.replication(name)
        code = stored.seal["code"]
        assert stored.base_seed == 0 and len(code["hash"]) == 16 and len(code["commit"]) == 40
        assert code["files"].keys() >= {"__init__.py", "engine/loop.py"}
        assert stored.summary()["sha256"] == json.loads(stored.file.read_text())["sha256"]
        if code["commit"] not in checked and committed._git("cat-file", "-e", code["commit"]) is not None:
            files = {f: committed._git_bytes("show", f"{code['commit']}:crate_nn/{f}") for f in code["files"]}
            checked[code["commit"]] = experiments.hash_code(files, code["torch"])  # not in a shallow clone
        assert checked.get(code["commit"], code["hash"]) == code["hash"]  # the code hash of the commit's crate_nn


@pytest.fixture
def results(tmp_path, monkeypatch):
    """An empty results/ folder for committed and record, and a process that has touched no run yet."""
    monkeypatch.setattr(committed, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(record, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(experiments, "_TOUCHED", {})
    return tmp_path / "results"


def _claim(id, measure, **fields):
    spec = dict(tags=("toy",), location="r", statement="s", measures="m", expected="e", expected_verdict="holds",
                kind="trained", provenance="analysis", modes=("full", "quick"), committed="toy")
    return Claim(id=id, measure=measure, module="toy", **{**spec, **fields})


def _reads(seeds):
    def measure(ctx):
        for seed in seeds:
            experiments.run(tiny(seed=seed)).metrics  # noqa: B018 - read, as a claim does
        return Result("read", "holds")
    return measure


def _raises(ctx):
    raise OSError("No space left on device")


def test_an_edited_or_damaged_committed_file_is_refused_in_one_line(cache, results, capsys):  # noqa: F811
    experiments.run(tiny())
    committed.write("toy", 0)
    file = results / "toy" / "runs.json"
    text = file.read_text()
    claims = [_claim("toy-a", _reads([0]))]

    def error():
        (outcome,) = runner.run_claims(claims, mode="quick", seed=0, output_dir=results.parent, progress=False)
        assert outcome.unexpected and outcome.stored == "toy" and "\n" not in outcome.error
        return outcome.error

    assert runner.run_claims(claims, mode="quick", seed=0, output_dir=results.parent, progress=False)[0].matches
    edited = json.loads(text)
    edited["runs"][0]["metrics"]["test_top1"] -= 0.1  # a stored number lowered by hand
    file.write_text(json.dumps(edited, indent=1))
    assert "does not match its SHA-256 checksum" in error() and "python -m verify.record toy" in error()
    assert str(file) in error() or "runs.json" in error()
    file.write_text(text[:1000])  # truncated: was a bare JSONDecodeError naming no file
    assert "runs.json: is not valid JSON" in error()
    unsealed = json.loads(text)
    unsealed.pop("sha256")
    file.write_text(json.dumps(unsealed))
    assert "carries no SHA-256" in error() and "python -m verify.record --seal toy" in error()
    doc = json.loads(text)
    doc.pop("sha256")
    del doc["runs"][0]["recipe"]  # resealed without a recipe: was KeyError: 'recipe'
    integrity.write(file, doc)
    assert "malformed: run 0 lacks recipe" in error()
    status = cli.audit(claims, output_dir=results.parent / "report", progress=False, echo=True)
    assert status == 1 and "malformed: run 0 lacks recipe" in capsys.readouterr().err


def test_seal_as_committed_names_the_commit_that_wrote_the_file_and_its_code(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "crate_nn" / "engine").mkdir(parents=True)
    (repo / "results" / "toy").mkdir(parents=True)
    (repo / "crate_nn" / "__init__.py").write_text("")
    (repo / "crate_nn" / "engine" / "loop.py").write_text("step = 1\n")
    (repo / "results" / "toy" / "runs.json").write_text(json.dumps(
        {"replication": "toy", "recorded_by": "python -m verify.record toy", "runs": []}, indent=1) + "\n")

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "recorded")
    commit = git("rev-parse", "HEAD")
    (repo / "crate_nn" / "engine" / "loop.py").write_text("step = 2\n")  # today's code differs in one file
    git("commit", "-qam", "later")
    monkeypatch.setattr(committed, "REPOSITORY", repo)
    monkeypatch.setattr(committed, "RESULTS", repo / "results")
    monkeypatch.setattr(experiments, "code_files", lambda: {"__init__.py": b"", "engine/loop.py": b"step = 2\n"})
    committed.seal_as_committed("toy", today="2026-01-01")
    stored = committed.replication("toy")
    code = stored.seal["code"]
    assert code["commit"] == commit and stored.base_seed == 0
    assert code["hash"] == experiments.hash_code({"__init__.py": b"", "engine/loop.py": b"step = 1\n"})
    assert stored.code_differences() == ["engine/loop.py"]
    assert "sealed 2026-01-01 from commit" in stored.seal["sealed_after_recording"]
    with pytest.raises(ValueError, match="differs from its last commit"):
        committed.seal_as_committed("toy")  # the sealed file is not the committed one


# --------------------------------------------------------------------------------------------- verify.record
def test_a_recording_whose_claims_raise_leaves_the_replication_as_it_was(cache, results, monkeypatch,  # noqa: F811
                                                                         capsys):
    monkeypatch.setattr(record, "all_claims", lambda: [_claim("toy-a", _reads([0, 1])), _claim("toy-b", _reads([2]))])
    assert record.record("toy", progress=False) == 0
    folder = results / "toy"
    before = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
    assert set(before) == {"runs.json", "report.md", "report.json"}
    stored = committed.replication("toy")
    assert len(stored.runs) == 3 and stored.seal["code"]["hash"] == experiments.CODE
    assert stored.seal["command"] == "python -m verify.record toy" and stored.seal["code"]["files"]

    monkeypatch.setattr(experiments, "_TOUCHED", {})
    monkeypatch.setattr(record, "all_claims", lambda: [_claim("toy-a", _reads([0, 1])), _claim("toy-b", _raises)])
    assert record.record("toy", progress=False) == 1  # was: runs.json rewritten from 15 runs to 0
    assert "1 of 2 claims of toy raised (toy-b): nothing written" in capsys.readouterr().err
    monkeypatch.setattr(experiments, "_TOUCHED", {})
    monkeypatch.setattr(record, "all_claims", lambda: [_claim("toy-a", _reads([0]))])
    assert record.record("toy", progress=False) == 1  # reads 1 run of the 3 stored
    assert "holds 3 runs and this recording read 1: not written" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before
    assert [p.name for p in results.iterdir()] == ["toy"]  # no recording folder left


def test_a_recording_at_another_base_seed_is_sealed_with_it(cache, results, monkeypatch):  # noqa: F811
    monkeypatch.setattr(record, "all_claims", lambda: [_claim("toy-a", _reads([0]))])
    assert record.main(["toy", "--seed", "3", "--no-progress"]) == 0
    stored = committed.replication("toy")
    assert stored.base_seed == 3 and stored.content["recorded_by"] == "python -m verify.record toy --seed 3"


def test_table17_is_recorded_and_sealed_like_a_replication(results, monkeypatch):
    """`python -m verify.record segmentation` (what the Table 17 claims name at another base seed): the experiment
    measured under --full (stood in for by the committed numbers: training it takes an hour) and sealed."""
    from verify.claims import segmentation

    content = integrity.read(REPO / "results" / TABLE17 / "results.json")
    content.pop("seal")
    trained = []

    def experiment(output_dir, *, seeds, **options):
        trained.append(list(seeds))
        return {**content, "seeds": list(seeds)}

    monkeypatch.setattr(segmentation.experiment, "run_experiment", experiment)
    monkeypatch.setattr(segmentation, "_write_report", lambda r, folder: (folder / "table.md").write_text("table\n"))
    monkeypatch.setattr(record, "all_claims", lambda: [c for c in all_claims() if c.committed == TABLE17])
    segmentation._trained.cache_clear()
    try:
        assert record.record(TABLE17, progress=False) == 0
    finally:
        segmentation._trained.cache_clear()
    stored = committed.replication(TABLE17)
    assert trained == [[0, 1, 2, 3, 4]] and stored.content == content and stored.base_seed == 0
    assert stored.seal["command"] == "python -m verify.record segmentation"
    assert (results / TABLE17 / "table.md").read_text() == "table\n" and (results / TABLE17 / "report.md").is_file()


# --------------------------------------------------------------------------------------------- stored verdicts
def test_another_base_seed_does_not_re_measure_stored_claims_and_exits_0(tmp_path, capsys):
    """`--seed S` raised in every stored claim and exited 1 (the Table 17 claims ignored the seed)."""
    args = ["--only", "tost", "table17", "table13-soft-threshold", "--no-progress", "--output-dir"]
    assert cli.main([*args, str(tmp_path / "s1"), "--seed", "1"]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "s1" / "report.json").read_text())
    stored = [c for c in doc["claims"] if c["stored"]]
    assert stored and {c["stored"] for c in stored} == {"tost", TABLE17}
    for c in stored:
        assert c["verdict"] == runner.NOT_MEASURED and c["error"] is None and c["measured"] is None
        assert c["skipped"] == (f"recorded at base seed 0 only (re-record: python -m verify.record {c['stored']} "
                                "--seed 1)")
    assert doc["summary"]["claims"] == len(doc["claims"]) - len(stored) and doc["summary"]["mismatches"] == []
    assert doc["summary"]["not_re_measured"] == [c["id"] for c in stored]
    assert f"{len(stored)} stored claims not re-measured (not counted): recorded at base seed 0 only" in out
    md = (tmp_path / "s1" / "report.md").read_text()
    assert "not re-measured†" in md and "re-record: python -m verify.record tost --seed 1" in md


def test_stored_verdicts_are_marked_in_every_view_and_the_report_names_the_code_that_recorded_them(tmp_path, capsys):
    assert cli.main(["--only", "tost", "table17", "--no-progress", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    doc = json.loads((tmp_path / "report.json").read_text())
    assert all(c["stored"] in ("tost", TABLE17) and c["recorded_seed"] == 0 for c in doc["claims"] if c["stored"])
    n = sum(bool(c["stored"]) for c in doc["claims"])
    assert n == doc["summary"]["stored"] and f"{n} verdicts † read from stored runs" in out  # the headline
    assert "holds†" in out  # the summary rows (Table 17)
    md = (tmp_path / "report.md").read_text()
    assert "## Stored runs" in md and "- **table17-attention** — **holds†**" in md  # the detail
    reps = {r["name"]: r for r in doc["meta"]["replications"]}
    assert set(reps) == {"tost", TABLE17}
    for name, r in reps.items():
        assert r["sha256"] == json.loads(committed.path(name).read_text())["sha256"]
        assert f"by commit `{r['commit'][:12]}`" in md and r["check"]["state"] in ("never", "passed", "failed")
        assert len(r["commit"]) == 40 and isinstance(r["today_differs"], bool)
        assert r["sealed_after_recording"] and isinstance(r["files_differing"], list)
    assert cli.main(["--list", "--only", "tost"]) == 0
    listed = capsys.readouterr().out.splitlines()
    marked = {line.split()[0]: "†tost" in line for line in listed[:-1]}
    assert marked["tost-abstract-digits-vs-vit"] and not marked["tost-abstract-gradient-step"] and listed[-1].startswith("†")


def test_only_writes_its_own_report_folder(tmp_path, monkeypatch):
    """`--only` had overwritten the full verify-report/report.md (2,278 → 126 lines)."""
    monkeypatch.chdir(tmp_path)
    full = tmp_path / "verify-report" / "report.md"
    full.parent.mkdir()
    full.write_text("the full report\n")
    assert cli.main(["--only", "table13-soft-threshold", "--no-progress"]) == 0
    assert full.read_text() == "the full report\n" and (tmp_path / "verify-report" / "only" / "report.md").is_file()


def test_the_console_summary_never_cuts_an_interval():
    """It had printed `+2.9 [1.3, 4.…`."""
    headline = Headline("crate − vit (attention_miou, points, a long label)", 2.9, 1.3, 4.5, 5)
    outcome = runner.Outcome(_claim("x", None), Result("m", "holds", headline=headline), 0.0)
    cell = report._summary_cells("said", outcome, 40)[2]
    assert cell.endswith(": +2.9 [1.3, 4.5]") and len(cell) <= 40
    assert report._fit("a − b +0.44 [-11.4, 12.3] points and more", 20) == "a − b +0.44…"


# --------------------------------------------------------------------------------------------- signals
def _audit_process(cache_dir, *args):
    env = {**os.environ, "CRATE_WHITEBOX_CACHE": str(cache_dir), "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    return subprocess.Popen([sys.executable, "-m", "verify", "--no-progress", *args], cwd=cache_dir.parent, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_audit_at_once_and_leaves_no_temporary_folder(tmp_path, signum):
    """SIGTERM during training had become one claim's `Preempted` error; the audit ran on 16 s, trained the next
    claim and told the user to `--resume` a temporary folder already deleted."""
    cache_dir = tmp_path / "cache"
    audit = _audit_process(cache_dir, "--only", "table16-gpt-without-ista", "--output-dir", str(tmp_path / "out"))
    runs = cache_dir / "verify" / experiments.RUNS
    deadline = time.monotonic() + 300
    while not (runs.is_dir() and any(p.name.startswith(".") and p.is_dir() for p in runs.iterdir())):
        if audit.poll() is not None or time.monotonic() > deadline:
            audit.kill()
            pytest.fail(f"no training started: {audit.communicate()[1][-2000:]}")
        time.sleep(0.05)
    time.sleep(0.5)  # well into the training
    sent = time.monotonic()
    audit.send_signal(signum)
    try:
        out, err = audit.communicate(timeout=120)
    finally:
        audit.kill()  # a no-op once it has exited
    assert audit.returncode == 128 + signum, err
    assert time.monotonic() - sent < 30  # a tiny model's optimizer step, then cleaning up
    assert "Traceback" not in err and not (tmp_path / "out" / "report.json").exists()
    message = [line for line in err.splitlines() if line.strip()]
    assert len(message) == 1 and f"stopped by {signal.Signals(signum).name}" in message[0]
    assert "run the same command again to continue" in message[0] and "--resume" not in err
    assert not [p for p in runs.iterdir() if p.is_dir() and p.name.startswith(".")]  # no temporary folder
    assert not list(runs.rglob("*.tmp"))


def test_a_signal_outside_the_training_removes_the_runs_temporary_folder(cache, monkeypatch):  # noqa: F811
    """A signal while the entry was being written (after training) had left a `.classification-…` folder."""
    real = experiments.initial_model

    def signalled(config):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        return real(config)

    monkeypatch.setattr(experiments, "initial_model", signalled)
    before = signal.getsignal(signal.SIGTERM)
    with cli.stopping.on_signals(), pytest.raises(cli.stopping.Interrupted):
        experiments.run(tiny())
    assert signal.getsignal(signal.SIGTERM) is before  # restored
    assert [p.name for p in (experiments.root() / experiments.RUNS).iterdir() if p.is_dir()] == []


def test_preemption_inside_a_claim_stops_the_run_instead_of_becoming_its_error():
    from crate_nn.engine import Preempted

    def preempted(ctx):
        raise Preempted("stopped by SIGTERM after optimizer step 3; continue with --resume", signal.SIGTERM, 3)

    with pytest.raises(cli.stopping.Interrupted) as stop:
        runner.run_claims([_claim("x", preempted, committed=None)], mode="quick", seed=0, output_dir=Path("."),
                          progress=False)
    assert cli.stopping.status(stop.value) == 143
