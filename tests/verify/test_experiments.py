"""The audit's cache of trained runs (verify.experiments): one training per (config, code), complete entries only,
the engine's own initialisation, a code change retrains, and `make clean` clears exactly the audit's folder."""
import dataclasses
import os
import shutil
import subprocess

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
        calls.append(config.seed)
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
    assert [r.config.seed for r in experiments.runs(tiny(), [0, 1])] == [0, 1] and len(cache) == 3
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
    runs = experiments.root() / "runs"
    assert [p for p in runs.iterdir() if p.is_dir()] == []  # nothing under a run's name, no temporary folder left
    # what a killed process leaves (its temporary folder, with a checkpoint in it) is never taken for the run
    leftover = runs / f".classification-{experiments.config_hash(tiny())}-{experiments.CODE}-killed"
    monkeypatch.setattr(experiments, "train", loop.train)
    shutil.copytree(experiments.run(tiny(seed=1)).folder, leftover)
    run = experiments.run(tiny())
    assert run.folder != leftover and (run.folder / "trained.pt").is_file() and leftover.is_dir()


def test_a_changed_training_code_retrains_and_replaces_the_stale_entry(cache, monkeypatch, tmp_path):
    copy = tmp_path / "crate_nn"  # the hashed source, in a copy this test may edit
    shutil.copytree(experiments.CODE_ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert experiments.code_hash(copy) == experiments.code_hash() == experiments.CODE
    stale = experiments.run(tiny())
    loop_py = copy / "engine" / "loop.py"  # the example: a loop that skips 3 of every 4 optimizer steps
    source = loop_py.read_text()
    assert source.count("optimizer.step()") == 1
    loop_py.write_text(source.replace("optimizer.step()", "optimizer.step() if step % 4 == 0 else None"))
    monkeypatch.setattr(experiments, "CODE", experiments.code_hash(copy))  # the next audit's code
    fresh = experiments.run(tiny())
    assert fresh.folder != stale.folder and cache == [0, 0]
    assert not stale.folder.exists()  # one version of each run in the cache
    assert experiments.run(tiny()) == fresh and cache == [0, 0]


def test_derived_numbers_are_cached_per_measurement_code_and_parameters(cache, tmp_path):
    run = experiments.run(tiny())
    measured = []

    def measure(r):
        measured.append(r.config.seed)
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
    assert experiments.recipe_differences(older, dataclasses.replace(config, eval_at_start=False)) == []
    assert experiments.recipe_differences(older, config) == ["eval_at_start"]  # the digits preset sets it: new
    assert experiments.recipe_differences({**saved, "lr": 1.0}, config) == ["lr"]
    assert experiments.recipe_differences(saved, dataclasses.replace(config, seed=7, progress=False)) == []


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
