"""Re-checking a stored replication (verify.check, `python -m verify.record --check NAME`): the sample, the rule
that compares a re-trained run with the stored seeds, the sealed check file, stale verdicts left out of the counts,
the report's provenance in words, interrupt safety and one-line errors."""
import json
import os
import re
import signal
import sys
import time

import numpy as np
import pytest

from tests.verify.test_experiments import cache, tiny  # noqa: F401 - the fixture is used by name
from tests.verify.test_stored_runs import _claim, results  # noqa: F401 - the fixture is used by name
from verify import __main__ as cli
from verify import check, committed, experiments, integrity, record, report, runner
from verify.registry import Result

MODULE = sys.modules[__name__]


def _weights(run):
    return {"sum": float(sum(p.detach().sum() for p in run.model("trained").parameters()))}


def _shifted(run):  # today's measuring code, changed: every weight sum 10,000 higher
    return {"sum": _weights(run)["sum"] + 1e4}


def _reads(compute=_weights, verdict="holds"):
    """A toy replication's claim: seeds 0-2 of the tiny digits run, their test accuracy and a derived number."""
    def measure(ctx):
        for seed in (0, 1, 2):
            run = experiments.run(tiny(seed=seed))
            run.metrics["test_top1"]  # noqa: B018 - read, as a claim does
            run.derived("weights", compute, MODULE)
        return Result("read", verdict)
    return measure


@pytest.fixture
def toy(cache, results, monkeypatch, tmp_path):  # noqa: F811
    """The toy replication recorded (3 runs), then a fresh cache and process, as a check of it starts."""
    monkeypatch.setattr(record, "all_claims", lambda: [_claim("toy-a", _reads())])
    assert record.record("toy", progress=False) == 0
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path / "today"))
    monkeypatch.setattr(experiments, "_TOUCHED", {})
    return results / "toy"


def _checked(monkeypatch, compute=_weights):
    monkeypatch.setattr(check, "all_claims", lambda: [_claim("toy-a", _reads(compute))])
    return check.check("toy", progress=False)


# --------------------------------------------------------------------------------------------- a check
def test_an_unchanged_toy_replication_is_reproduced_and_its_check_is_sealed(toy, cache, monkeypatch):  # noqa: F811
    stored = (toy / "runs.json").read_bytes()
    trained = len(cache)
    assert _checked(monkeypatch) == 0
    assert len(cache) == trained + 1  # the sample: seed 0 of its one configuration, trained again
    doc = integrity.read(toy / "check.json")  # sealed
    assert doc["passed"] and doc["moved"] == [] and doc["stored"]["sha256"] == committed.replication("toy").sha256
    assert doc["sample"]["runs"] == [run["run"] for run in doc["runs"]] and len(doc["runs"]) == 1
    assert doc["runs"][0]["run"].endswith("seed 0")
    # CPU training is deterministic: unchanged code gives the stored seed's numbers again, every one of them
    assert doc["counts"]["reproduced"] == doc["rule"]["quantities"] > 10
    assert doc["code"]["hash"] == experiments.CODE and doc["cpu_seconds"] > 0
    assert (toy / "runs.json").read_bytes() == stored  # never touched
    assert committed.replication("toy").check()["state"] == "passed" and committed.replication("toy").stale is None


def test_a_moved_number_fails_the_check_naming_the_run_and_the_quantity(toy, monkeypatch, capsys):
    assert _checked(monkeypatch, _shifted) == 1
    doc = integrity.read(toy / "check.json")
    assert not doc["passed"]
    (moved,) = doc["moved"]
    assert moved.endswith("seed 0: derived.weights.sum") and moved.startswith("classification digits")
    quantity = doc["runs"][0]["quantities"]["derived.weights.sum"]
    assert quantity["state"] == "moved" and not quantity["low"] <= quantity["value"] <= quantity["high"]
    assert doc["counts"]["reproduced"] == doc["rule"]["quantities"] - 1  # the metrics did not move
    out = capsys.readouterr().out
    assert "FAILED" in out and "moved: classification digits" in out
    assert "1 quantities moved" in committed.replication("toy").stale


def test_stored_numbers_moved_and_sealed_again_fail_the_check(toy, monkeypatch, capsys):
    """The edit a seal cannot see (every seed's test loss raised and the file sealed again, the pin aside): the
    re-trained run lies far outside the seeds' spread."""
    doc = integrity.read(toy / "runs.json")
    spread = np.std([run["metrics"]["test_loss"] for run in doc["runs"]], ddof=1)
    for run in doc["runs"]:
        # 100 spreads: beyond the check's interval, t_2 at 1 − 0.05/(2·12) times √(4/3) ≈ 17.8 spreads (3 seeds, 12
        # quantities)
        run["metrics"]["test_loss"] += 100 * spread
    integrity.write(toy / "runs.json", doc, indent=1)
    assert _checked(monkeypatch) == 1
    assert [m.split(": ")[-1] for m in integrity.read(toy / "check.json")["moved"]] == ["metrics.test_loss"]


def test_the_help_states_each_replications_sample_and_its_time(toy, monkeypatch, capsys):
    assert _checked(monkeypatch) == 0
    with pytest.raises(SystemExit):
        record.main(["--help"])
    out = capsys.readouterr().out
    assert re.search(r"\n  toy: 1 of its 3 runs \(1 configuration\); they trained in [0-9.]+ min when recorded; its "
                     r"last check took [0-9.]+ min of CPU \(20[0-9-]+\)\n", out)


def test_a_check_of_an_earlier_recording_does_not_apply(toy, monkeypatch):
    assert _checked(monkeypatch, _shifted) == 1
    doc = integrity.read(toy / "runs.json")
    doc["runs"] = doc["runs"][::-1]  # recorded again: another file
    integrity.write(toy / "runs.json", doc, indent=1)
    found = committed.replication("toy").check()
    assert found["state"] == "never" and "earlier recording" in found["note"]
    assert committed.replication("toy").stale is None


# --------------------------------------------------------------------------------------------- the sample
def _entry(task, seed, **recipe):
    return {"task": task, "seed": seed, "recipe": {"preset": "none", **recipe}, "metrics": {}, "seconds": 1.0}


def test_configurations_name_the_configuration_a_fine_tuning_starts_from():
    bert = [_entry("masked_lm", s, model="bert") for s in (0, 1, 2)]
    crate = [_entry("masked_lm", s, model="crate") for s in (0, 1, 2)]
    start = {id(e): f"<cache>/runs/{check.run_name(e)}/trained.pt" for e in bert + crate}
    tuned_bert = [_entry("pairs", s, init_from=start[id(bert[s])]) for s in (0, 1, 2)]
    tuned_crate = [_entry("pairs", s, init_from=start[id(crate[s])]) for s in (0, 1, 2)]
    scratch = [_entry("pairs", s, init_from=None) for s in (2, 1, 0)]
    runs = bert + crate + tuned_bert + tuned_crate + scratch
    groups = check.configurations(runs)
    assert len(set(groups)) == 5  # each fine-tuning's seeds one configuration, told apart by where they start
    assert len(set(groups[6:9])) == 1 and groups[6] != groups[9] and len(set(groups[12:])) == 1
    chosen = check.sample(runs)
    assert [runs[i]["seed"] for i in chosen] == [0] * 5 and 14 in chosen  # the lowest seed, not the first listed
    # a sampled run starting from a run outside the sample brings it in: it is trained before it is fine-tuned
    odd = [*bert, _entry("pairs", 0, init_from=start[id(bert[2])]), _entry("pairs", 1, init_from=start[id(bert[1])])]
    assert check.configurations(odd)[3] == check.configurations(odd)[4]
    assert check.sample(odd) == [0, 2, 3]


def test_quantities_are_every_stored_number_but_per_input_samples():
    entry = {"metrics": {"top1": 0.9, "images": 360, "flag": True, "name": "x"},
             "measurements": {"30": {"official": [{"mean": 2.0, "std": 0.1, "values": [1.9, 2.1]}]}},
             "derived": [{"name": "d", "params": "{}", "value": {"a": [1.0, None]}},
                         {"name": "s", "params": '{"supervised": "classification-0123456789abcdef"}', "value": 3.0},
                         {"name": "s", "params": '{"supervised": null}', "value": 4.0}]}
    assert check.quantities(entry) == {
        "metrics.top1": 0.9, "metrics.images": 360, "measurements.30.official[0].mean": 2.0,
        "measurements.30.official[0].std": 0.1, "derived.d.a[0]": 1.0,
        'derived.s{"supervised": "classification-*"}': 3.0, 'derived.s{"supervised": null}': 4.0}


# --------------------------------------------------------------------------------------------- the rule
def _compare(population, fresh, other=()):
    """`check.compare` of one re-trained run (``fresh``, a dict of quantities) with stored seeds (``population``:
    one dict per seed, the first the re-trained run's own seed), beside another configuration's seeds."""
    stored = [*population, *other]
    groups = ["a"] * len(population) + ["b"] * len(other)
    return check.compare(stored, groups, {0: fresh}, flatten=dict)


def test_a_run_of_the_stored_population_moves_a_quantity_in_at_most_alpha_of_checks():
    """Ten quantities, five seeds: a new draw of the same population. Bonferroni holds the chance that a check
    reports any moved quantity to 5%, both when the quantities are independent (≈ 4.9%) and when they are one
    quantity ten times (≈ 0.5%); at 95% each, 40% of checks of independent quantities would have failed."""
    rng = np.random.default_rng(0)
    trials, m = 800, 10
    failed = {"independent": 0, "correlated": 0}
    for _ in range(trials):
        for kind in failed:
            draws = rng.normal(size=(6, m)) if kind == "independent" else np.repeat(rng.normal(size=(6, 1)), m, 1)
            draws[:, 1:] += 1e-6 * rng.normal(size=(6, m - 1))  # distinct quantities, not bitwise copies
            population = [{f"q{k}": float(v) for k, v in enumerate(row)} for row in draws[1:]]
            result = _compare(population, {f"q{k}": float(v) for k, v in enumerate(draws[0])})
            failed[kind] += not result["passed"]
    se = np.sqrt(0.05 * 0.95 / trials)  # the binomial standard error of a 5% rate: 0.77 points
    assert abs(failed["independent"] / trials - (1 - (1 - 0.05 / m) ** m)) < 4 * se
    assert failed["correlated"] / trials < 0.05


def test_the_interval_widens_with_the_checks_quantities_and_a_reproduced_number_never_moves():
    population = [{"q": v} for v in (1.0, 1.1, 0.9, 1.05, 0.95)]  # std 0.079: 95% prediction interval ±0.24
    alone = _compare(population, {"q": 1.3})
    assert alone["level"] == 0.95 and alone["runs"][0]["q"]["state"] == "moved" and alone["moved"] == ["0: q"]

    def among_100(q):  # the same number among 99 others, which the re-trained run reproduces
        return _compare([{**p, **{f"x{k}": p["q"] for k in range(99)}} for p in population],
                        {"q": q, **{f"x{k}": 1.0 for k in range(99)}})

    near, far = among_100(1.3), among_100(5.0)
    assert near["level"] == 1 - 0.05 / 100 and near["runs"][0]["q"]["state"] == "outside 95%" and near["passed"]
    assert far["runs"][0]["q"]["state"] == "moved" and not far["passed"] and far["counts"]["reproduced"] == 99
    same = _compare(population, {"q": 1.0})
    assert same["runs"][0]["q"]["state"] == "reproduced" and same["passed"]


def test_seeds_that_agree_exactly_are_read_at_their_resolution_and_settings_must_be_reproduced():
    population = [{"top1": 352 / 360, "eps": 0.1} for _ in range(3)]  # every seed 352 of 360 right
    other = [{"top1": v / 360, "eps": 0.1} for v in (350, 351, 353)]  # another configuration: steps of 1/360
    one_more = _compare(population, {"top1": 353 / 360, "eps": 0.1}, other)["runs"][0]
    assert one_more["top1"]["state"] == "within" and one_more["top1"]["std"] == pytest.approx(1 / 360)
    assert one_more["eps"]["state"] == "reproduced"
    broken = _compare(population, {"top1": 0.5, "eps": 0.2}, other)["runs"][0]
    assert broken["top1"]["state"] == "moved" and broken["eps"]["state"] == "moved"  # ε never differs anywhere


def test_a_missing_quantity_moved_a_new_one_and_a_thin_one_are_not_compared():
    population = [{"q": 1.0, "thin": 1.0}, {"q": 1.1}, {"q": 0.9}]
    result = _compare(population, {"new": 3.0, "thin": 9.0})
    states = {path: r["state"] for path, r in result["runs"][0].items()}
    assert states == {"q": "moved", "new": "not compared", "thin": "not compared"}  # thin: one stored seed only
    assert result["quantities"] == 0 and not result["passed"]


# --------------------------------------------------------------------------------------------- stale verdicts
def test_a_failed_check_makes_its_stored_verdicts_stale_left_out_of_the_headline(toy, monkeypatch, tmp_path, capsys):
    assert _checked(monkeypatch, _shifted) == 1
    claims = [_claim("toy-a", _reads(verdict="fails")),  # stored, and not as expected: but stale, so not counted
              _claim("plain", lambda ctx: Result("m", "holds"), committed=None)]
    outcomes = runner.run_claims(claims, mode="quick", seed=0, output_dir=tmp_path, progress=False)
    stale = outcomes[0]
    assert stale.stale.startswith("the last check of toy") and stale.verdict == "fails" and not stale.unexpected
    counts = report.summary(outcomes)
    assert counts["claims"] == 1 and counts["stale"] == ["toy-a"] and counts["verdicts"]["fails"] == 0
    assert counts["stored"] == 0 and counts["mismatches"] == []
    assert "1 stored verdicts stale (not counted): the last re-check of toy failed" in report.format_console(outcomes)
    assert cli.audit(claims, output_dir=tmp_path / "report", progress=False) == 0
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    assert doc["claims"][0]["stale"] and doc["meta"]["replications"][0]["check"]["state"] == "failed"
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## toy-a — fails† (stale)" in md and "Its verdicts are **stale**" in md


# --------------------------------------------------------------------------------------------- provenance
def _summary(**check_state):
    return {"name": "ablations", "file": "results/ablations/runs.json", "sha256": "ab" * 32, "runs": 70,
            "base_seed": 0, "recorded": "2026-11-24T21:50:17+00:00", "code_hash": "0" * 16, "commit": "8c18514f" * 5,
            "sealed_after_recording": "sealed 2026-11-27", "today_differs": True,
            "files_differing": [f"f{i}.py" for i in range(85)], "files": 115, "check": check_state}


def test_the_provenance_says_in_words_which_code_recorded_each_replication_and_its_last_check():
    outcomes = [runner.Outcome(_claim(f"a{i}", None), Result("m", "holds"), 0.0, stored="ablations")
                for i in range(10)]
    counts = {"reproduced": 140, "within": 10, "outside 95%": 4, "moved": 0, "not compared": 3}
    states = {
        "never": {"state": "never"},
        "passed": {"state": "passed", "checked": "2026-11-29 10:00:00 UTC", "commit": "c" * 40, "code_hash": "1" * 16,
                   "files_differing": 0, "runs": 14, "quantities": 154, "counts": counts, "moved": [],
                   "cpu_seconds": 600.0},
        "failed": {"state": "failed", "checked": "2026-11-29 10:00:00 UTC", "commit": "c" * 40, "code_hash": "1" * 16,
                   "files_differing": 3, "runs": 14, "quantities": 154, "counts": {**counts, "moved": 2},
                   "moved": ["classification digits (model_args.ista=mm), seed 0: metrics.test_top1",
                             "classification digits (model_args.ista=mm), seed 0: metrics.test_loss"],
                   "cpu_seconds": 600.0},
        "refused": {"state": "refused", "error": "results/ablations/check.json: does not match its SHA-256"}}
    said = {k: "\n".join(report.provenance({"replications": [_summary(**v)]}, outcomes)) for k, v in states.items()}
    for text in said.values():
        assert text.startswith("## Stored runs")
        assert ("- **ablations** (`results/ablations/runs.json`: 70 runs at base seed 0, 10 verdicts here): recorded "
                "2026-11-24 by commit `8c18514f8c18`, sealed after recording; today's crate_nn differs from that code "
                "in 85 of 115 files.") in text
        assert "ab" * 16 not in text  # the checksum is report.json's, not the reader's
    assert "**Never re-checked**: `python -m verify.record --check ablations`." in said["never"]
    assert ("Re-checked 2026-11-29 by commit `cccccccccccc` (today's code): passed — 14 sampled runs re-run, "
            "154 quantities compared, 140 reproduced exactly, 4 outside their 95% interval, none moved.") in said["passed"]
    assert "**Check failed** 2026-11-29 by commit `cccccccccccc` (3 crate_nn files differ from it today): 2 " \
           "quantities moved (classification digits (model_args.ista=mm), seed 0: metrics.test_top1;" in said["failed"]
    assert "Its verdicts are **stale**, left out of the counts." in said["failed"]
    assert "**Check file refused**: results/ablations/check.json: does not match its SHA-256." in said["refused"]


def test_report_md_opens_with_its_summary_and_puts_the_stored_runs_below_it(tmp_path):
    outcomes = [runner.Outcome(_claim("table17-attention", None), Result("m", "holds"), 0.0, stored="ablations")]
    meta = {"mode": "quick", "seed": 0, "command": "python -m verify", "started": "now",
            "replications": [_summary(state="never")]}
    report.write_markdown(tmp_path / "report.md", outcomes, meta)
    md = (tmp_path / "report.md").read_text()
    assert md.index("## Summary") < md.index("## Stored runs") < md.index("## Detail")
    assert not re.search(r"[0-9a-f]{16}", md[:md.index("## Summary")])  # no hash before the summary


# --------------------------------------------------------------------------------------------- signals, errors
def test_a_signal_during_a_check_leaves_the_previous_check_and_the_runs_as_they_were(toy, monkeypatch, capsys):
    assert _checked(monkeypatch) == 0
    before = {p.name: p.read_bytes() for p in toy.iterdir() if p.is_file()}
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(toy.parent.parent / "again"))
    monkeypatch.setattr(experiments, "_TOUCHED", {})
    real = experiments.train

    def signalled(config):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
        return real(config)

    monkeypatch.setattr(experiments, "train", signalled)
    assert check.main("toy", progress=False) == 128 + signal.SIGTERM
    assert {p.name: p.read_bytes() for p in toy.iterdir() if p.is_file()} == before  # nothing half-written
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "stopped by SIGTERM" in err[0]
    assert not [p for p in (toy.parent.parent / "again" / "verify" / experiments.RUNS).iterdir()
                if p.name.startswith(".") and p.is_dir()]


def test_a_refused_file_or_a_raising_claim_is_one_line_and_writes_nothing(toy, monkeypatch, capsys):
    monkeypatch.setattr(check, "all_claims", lambda: [_claim("toy-a", _reads()), _claim("toy-b", _raising)])
    assert record.main(["--check", "toy", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "1 of 2 claims of toy raised (toy-b; OSError: No space left on device)" in err
    assert not (toy / "check.json").exists()
    (toy / "runs.json").write_text((toy / "runs.json").read_text()[:500])
    assert record.main(["--check", "toy", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "runs.json: is not valid JSON" in err and not (toy / "check.json").exists()


def _raising(ctx):
    raise OSError("No space left on device")
