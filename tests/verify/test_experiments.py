"""The audit's cache of trained runs (verify.experiments): one training per (config, code), complete entries only,
the engine's own initialisation, a code change retrains, and `make clean` clears exactly the audit's folder."""
import os
import re
import shutil
import subprocess
import time

import pytest
import torch

import crate_nn
from crate_nn.engine import loop
from crate_nn.tasks import get_preset
from verify import experiments


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache, and a counter of the trainings the runner starts."""
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path / "cache"))
    calls = []
    real = experiments.train

    def counted(config):
        calls.append(config.run.seed)
        return real(config)

    monkeypatch.setattr(experiments, "train", counted)
    return calls


def tiny(**overrides):
    """Two optimizer steps of the digits preset (≈ 1 s)."""
    return get_preset("digits", **{"progress": False, "measure_epochs": (), "epochs": 1, "warmup_epochs": 0.0,
                                   "max_steps": 2, **overrides})


def test_same_key_trains_once_and_other_seeds_or_configs_train_again(cache):
    first = experiments.run(tiny())
    assert experiments.run(tiny()) == first and cache == [0]
    assert experiments.run(tiny(progress=True, output_dir="elsewhere")).folder == first.folder  # not in the key
    other_seed = experiments.run(tiny(seed=1))
    other_config = experiments.run(tiny(lr=1e-3))
    assert len({first.folder, other_seed.folder, other_config.folder}) == 3 and cache == [0, 1, 0]
    assert [r.config.run.seed for r in experiments.runs(tiny(), [0, 1])] == [0, 1] and len(cache) == 3
    assert set(first.metrics) >= {"val_top1", "test_top1"} and first.seconds > 0
    assert sorted(p.name for p in first.folder.iterdir()) == ["init.pt", "metrics.json", "run.json", "trained.pt"]


def test_the_measurements_a_run_records_are_kept_by_epoch(cache):
    assert experiments.run(tiny()).measurements() == {}
    run = experiments.run(tiny(measure_epochs=(0, 1), measure_samples=8))  # 2 steps: epoch 1 never ends
    recorded = run.measurements()
    assert sorted(recorded) == [0] and recorded[0]["epoch"] == 0
    assert [len(recorded[0][p]["compression"]) for p in ("paper", "official")] == [3, 3]  # the preset's 3 layers
    assert [p.name for p in (run.folder / "measurements").iterdir()] == ["epoch_0000.json"]  # no figures


def test_the_stored_initialisation_is_the_model_the_engine_trained_from(cache, monkeypatch):
    started = []
    real = loop.start_task

    def recorded(*args, **kwargs):
        task = real(*args, **kwargs)
        started.append({k: v.clone() for k, v in task.model.state_dict().items()})
        return task

    monkeypatch.setattr(loop, "start_task", recorded)
    run = experiments.run(tiny(seed=3))
    init, trained = run.model("init").state_dict(), run.model("trained").state_dict()
    assert started and started[0].keys() == init.keys()
    assert all(torch.equal(started[0][k], init[k]) for k in init)
    assert not all(torch.equal(init[k], trained[k]) for k in init)  # two optimizer steps moved the weights
    with pytest.raises(ValueError, match="which"):
        run.model("best")


def test_training_leaves_the_global_generators_as_it_found_them(cache):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    experiments.run(tiny())
    assert torch.equal(torch.rand(3), expected)  # a warm and a cold cache leave a claim the same random stream


def test_an_interrupted_training_leaves_no_entry_that_reads_as_complete(cache, monkeypatch):
    def broken(config):
        raise RuntimeError("killed mid-training")

    monkeypatch.setattr(experiments, "train", broken)
    with pytest.raises(RuntimeError, match="killed"):
        experiments.run(tiny())
    runs = experiments.root() / experiments.RUNS
    assert [p for p in runs.iterdir() if p.is_dir()] == []  # nothing under a run's name, no temporary folder left
    # what a killed process leaves (its temporary folder, with a checkpoint in it) is never taken for the run
    leftover = runs / f".classification-{experiments.config_hash(tiny())}-{experiments.CODE}-killed"
    monkeypatch.setattr(experiments, "train", loop.train)
    shutil.copytree(experiments.run(tiny(seed=1)).folder, leftover)
    run = experiments.run(tiny())
    assert run.folder != leftover and (run.folder / "trained.pt").is_file() and leftover.is_dir()


def _unused_for(folder, seconds):
    """Mark an entry as last used ``seconds`` ago."""
    then = time.time() - seconds
    os.utime(folder, (then, then))


def test_a_changed_training_code_retrains_and_replaces_the_stale_entry(cache, monkeypatch, tmp_path):
    copy = tmp_path / "crate_nn"  # the hashed source, in a copy this test may edit
    shutil.copytree(experiments.CODE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert experiments.code_hash(copy) == experiments.code_hash() == experiments.CODE
    stale = experiments.run(tiny())
    _unused_for(stale.folder, experiments.STALE_AFTER + 60)  # the old code's audits are over
    loop_py = copy / "engine" / "loop.py"  # a loop that skips 3 of every 4 optimizer steps
    source = loop_py.read_text()
    assert source.count("optimizer.step()") == 1
    loop_py.write_text(source.replace("optimizer.step()", "optimizer.step() if step % 4 == 0 else None"))
    monkeypatch.setattr(experiments, "CODE", experiments.code_hash(copy))  # the next audit's code
    fresh = experiments.run(tiny())
    assert fresh.folder != stale.folder and cache == [0, 0]
    assert not stale.folder.exists()  # one version of each run in the cache
    assert experiments.run(tiny()) == fresh and cache == [0, 0]


def test_two_code_versions_auditing_on_one_cache_keep_each_others_entries(cache, monkeypatch):
    """Two checkouts of different code on the default cache at once: the lock is per code, and an entry of the other
    code is deleted only when unused for STALE_AFTER and not locked (before: "init.pt does not exist", 3 of 3)."""
    monkeypatch.setattr(experiments, "_TOUCHED", {})
    ours = experiments.run(tiny())
    monkeypatch.setattr(experiments, "CODE", "0123456789abcdef")  # the other checkout's code
    theirs = experiments.run(tiny())
    assert theirs.folder != ours.folder and cache == [0, 0]
    assert experiments._lock(ours.folder).path != experiments._lock(theirs.folder).path
    assert ours.folder.is_dir() and ours.model("init") is not None  # in use a moment ago: kept, still readable
    _unused_for(ours.folder, experiments.STALE_AFTER + 60)
    with experiments._lock(ours.folder):  # but held by the other audit right now: kept
        shutil.rmtree(theirs.folder)
        experiments.run(tiny())
    assert ours.folder.is_dir() and cache == [0, 0, 0]
    shutil.rmtree(theirs.folder)
    experiments.run(tiny())  # unused for a day and not locked: deleted
    assert not ours.folder.exists()
    assert not [p for p in ours.folder.parent.iterdir() if p.is_dir()
                and p.name.startswith(".")]  # deleted whole, nothing set aside left


def _flip_a_digit(path):
    """Flip the lowest bit of the first digit of a number in a JSON file (e.g. 3 → 2)."""
    data = bytearray(path.read_bytes())
    at = re.search(rb'": ?-?[0-9]', data).end() - 1
    data[at] ^= 1
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["metrics.json", "run.json", "trained.pt", "measurements/epoch_0000.json",
                                    "truncated metrics.json"])
def test_a_damaged_cache_entry_is_trained_again_with_one_line(cache, monkeypatch, capsys, damage):
    config = tiny(measure_epochs=(0,), measure_samples=8)
    monkeypatch.setattr(experiments, "_TOUCHED", {})
    first = experiments.run(config)
    metrics, measured = first.metrics, first.measurements()
    name = damage.split()[-1]
    path = first.folder / name
    if damage.startswith("truncated"):
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    elif name.endswith(".pt"):
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 1
        path.write_bytes(bytes(data))
    else:
        _flip_a_digit(path)
    monkeypatch.setattr(experiments, "_TOUCHED", {})  # the next audit
    again = experiments.run(config)
    assert cache == [0, 0] and again.metrics.keys() == metrics.keys() and again.measurements().keys() == measured.keys()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and name in err[0] and "training it again" in err[0]
    assert not [p for p in first.folder.parent.iterdir() if p.name.startswith(".") and p.is_dir()]


def test_a_damaged_derived_number_is_measured_again(cache, monkeypatch, capsys):
    """One flipped bit in a cached derived/*.json had moved the audit's headline (+3.459 → +1.549) with status 0."""
    run = experiments.run(tiny())
    measured = []

    def measure(r):
        measured.append(1)
        return {"value": 3.459}

    assert run.derived("m", measure, crate_nn, images=4) == {"value": 3.459}
    (path,) = (run.folder / "derived").iterdir()
    text = path.read_text()
    path.write_text(text.replace("3.459", "1.459"))  # 3 → 1 is one bit
    assert run.derived("m", measure, crate_nn, images=4) == {"value": 3.459} and measured == [1, 1]
    assert "measuring it again" in capsys.readouterr().err
    path.write_text(text[: len(text) // 2])  # truncated
    assert run.derived("m", measure, crate_nn, images=4) == {"value": 3.459} and measured == [1, 1, 1]


def test_derived_numbers_are_cached_per_measurement_code_and_parameters(cache, tmp_path):
    run = experiments.run(tiny())
    measured = []

    def measure(r):
        measured.append(r.config.run.seed)
        return {"top1": r.metrics["test_top1"]}

    module = crate_nn  # any module whose source names the measurement
    assert run.derived("m", measure, module, images=4) == run.derived("m", measure, module, images=4)
    assert measured == [0]
    run.derived("m", measure, module, images=8)
    run.derived("m", measure, experiments, images=4)
    assert measured == [0, 0, 0]


def test_a_committed_recipe_is_compared_field_by_field_and_new_options_at_their_default_pass():
    config = get_preset("digits")
    saved = experiments.recipe(config)
    assert "seed" not in saved and "output_dir" not in saved and experiments.recipe_differences(saved, config) == []
    older = {k: v for k, v in saved.items() if k not in ("curves", "eval_at_start")}  # written before they existed
    assert experiments.recipe_differences(older, config.replace(eval_at_start=False)) == []
    assert experiments.recipe_differences(older, config) == ["eval_at_start"]  # the digits preset sets it: new
    assert experiments.recipe_differences({**saved, "lr": 1.0}, config) == ["lr"]
    assert experiments.recipe_differences(saved, config.replace(seed=7, progress=False)) == []


def test_seeds_are_disjoint_per_base_seed():
    assert experiments.seeds(0, 3) == [0, 1, 2] and experiments.seeds(2, 3) == [6, 7, 8]
    with pytest.raises(ValueError, match="count"):
        experiments.seeds(0, 0)


@pytest.mark.parametrize("env, folder", [
    ({"CRATE_WHITEBOX_CACHE": "/x/cache"}, "/x/cache/verify"),
    ({"XDG_CACHE_HOME": "/x/xdg"}, "/x/xdg/crate-whitebox/verify"),
    ({"HOME": "/x/home"}, "/x/home/.cache/crate-whitebox/verify"),
    ({"CRATE_WHITEBOX_CACHE": "", "HOME": "/x/home"}, "/x/home/.cache/crate-whitebox/verify"),  # empty = unset
])
def test_make_clean_deletes_the_audits_folder_and_nothing_above_it(env, folder, monkeypatch):
    for key in ("CRATE_WHITEBOX_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert str(experiments.root()) == folder
    done = subprocess.run(["make", "-n", "clean"], cwd=experiments.CODE_ROOT.parent, env=dict(os.environ),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f'rm -rf "{folder}"' in done.stdout.splitlines()


def test_the_task_state_is_kept_with_the_trained_model(cache):
    """DINO's centre is its loss's state, the task's, not the model's: the entry keeps it beside the weights."""
    dino = get_preset("dino_digits", progress=False, measure_epochs=(), knn_epochs=(), epochs=1, warmup_epochs=0.0,
                      max_steps=2, pixel_control=False)
    state = experiments.run(dino).task_state()
    assert list(state["objective"]) == ["center"] and state["objective"]["center"].abs().sum() > 0  # two updates
    assert experiments.run(tiny()).task_state() == {}  # classification keeps none
