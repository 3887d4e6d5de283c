"""Committed runs (verify.committed): what a --full claim read from its runs, stored and read back in quick mode
with the same numbers; a changed recipe, another seed, a model's weights or an unstored number refused in one line."""
import json
import sys

import pytest

from tests.verify.test_experiments import cache, tiny  # noqa: F401 - the fixture is used by name
from verify import committed, experiments, registry
from verify.context import MODES


@pytest.fixture
def results(tmp_path, monkeypatch):
    """An empty results/ folder, and a process that has touched no run yet."""
    monkeypatch.setattr(committed, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(experiments, "_TOUCHED", {})
    return tmp_path / "results"


def _measure(run):
    return {"weight sum": float(sum(p.detach().sum() for p in run.model("trained").parameters()))}


def test_a_stored_run_answers_what_the_cached_run_did(cache, results):  # noqa: F811
    module = sys.modules[__name__]
    live = experiments.run(tiny(measure_epochs=(0,), measure_samples=8))
    derived = live.derived("weights", _measure, module, images=8)
    experiments.run(tiny(seed=1))
    assert committed.write("toy", 0)[1] == 2
    stored_file = json.loads((results / "toy" / "runs.json").read_text())
    assert [e["seed"] for e in stored_file["runs"]] == [0, 1]

    with committed.reading("toy"):
        stored = experiments.run(tiny(measure_epochs=(0,), measure_samples=8))
        assert isinstance(stored, committed.StoredRun) and stored.folder == live.folder
        assert stored.metrics == live.metrics and stored.seconds == live.seconds
        assert stored.measurements() == live.measurements() and 0 in stored.measurements()  # int epochs again
        assert stored.derived("weights", _measure, module, images=8) == derived
        with pytest.raises(committed.NotStored, match="not stored; re-record it: python -m verify.record toy"):
            stored.derived("weights", _measure, module, images=16)
        with pytest.raises(committed.NotStored, match="keeps numbers, not weights"):
            stored.model("trained")
        with pytest.raises(LookupError, match=r"seed 2 \(its classification seeds: \[0, 1\]\)"):
            experiments.run(tiny(seed=2))
        with pytest.raises(LookupError, match="the recipe or the base seed changed"):
            experiments.run(tiny(lr=1e-3))
    assert len(cache) == 2  # reading trained nothing


def test_a_path_into_the_cache_is_stored_without_the_cache_and_the_code(cache, results):  # noqa: F811
    run = experiments.run(tiny())
    start = str(run.folder / "trained.pt")
    saved = committed.portable({"init_from": start, "other": "/elsewhere/x-0123456789abcdef-0123456789abcdef"})
    assert saved["init_from"] == f"<cache>/runs/{run.folder.name.rsplit('-', 1)[0]}/trained.pt"
    assert saved["other"] == "/elsewhere/x-0123456789abcdef-0123456789abcdef"  # only the audit's cache is rewritten
    assert committed.local(saved)["init_from"] == start
    assert committed.portable({"supervised": run.folder.name}) == {"supervised": run.folder.name.rsplit("-", 1)[0]}


def test_reading_a_missing_replication_names_the_command(results):
    with pytest.raises(committed.NotStored, match="is missing: record it with python -m verify.record nothing"):
        committed.Store("nothing")


def test_a_committed_claim_is_full_only_until_its_runs_are_committed(tmp_path, monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", {})
    monkeypatch.setattr(registry, "RESULTS", tmp_path)
    spec = dict(tags=(), location="r", statement="s", measures="m", expected="e", expected_verdict="holds",
                kind="trained", provenance="analysis", modes=("full",), committed="toy", scope="replication",
                quote="q", setting="a toy")
    registry.claim(id="a", **spec)(lambda ctx: None)
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "runs.json").write_text("{}")
    registry.claim(id="b", **spec)(lambda ctx: None)
    assert registry._REGISTRY["a"].modes == ("full",) and registry._REGISTRY["b"].modes == MODES
    with pytest.raises(ValueError, match="committed is for a claim that trains under --full only"):
        registry.claim(id="c", **{**spec, "modes": MODES})(lambda ctx: None)


def test_runs_recorded_before_an_option_was_added_still_name_each_other(cache, results, monkeypatch):  # noqa: F811
    """An option added to the config since a replication was recorded changes every config's hash, and a stored run
    names another by it (a fine-tuning's init_from, a derived number's parameters): the store maps each recorded
    name to today's, so the stored runs still answer."""
    module = sys.modules[__name__]
    base = experiments.run(tiny())
    named = base.derived("weights", _measure, module, of=experiments.location(tiny()).name)
    experiments.run(tiny(seed=1, init_from=str(base.folder / "trained.pt")))
    committed.write("toy", 0)
    today = experiments.config_hash
    monkeypatch.setattr(experiments, "config_hash",  # as if an option with a default were added to every config
                        lambda config: experiments.fields_hash(config.task, {**config.to_dict(), "new": None}))
    assert experiments.config_hash(tiny()) != today(tiny())
    with committed.reading("toy"):
        stored = experiments.run(tiny())
        assert stored.derived("weights", _measure, module, of=experiments.location(tiny()).name) == named
        tuned = experiments.run(tiny(seed=1, init_from=str(stored.folder / "trained.pt")))
        assert tuned.metrics
