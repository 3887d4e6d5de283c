"""``crate-eval``'s data-loading workers follow the CPUs the process may use (not a fixed 8, which on a 2-CPU machine
printed DataLoader's oversubscription warning twice); an explicit larger count is warned about once."""
import json
import os

import pytest
import torch

import crate_nn
from crate_nn.evaluate import MAX_WORKERS, default_workers
from crate_nn.evaluate import main as crate_eval
from crate_nn.evaluation import classification


@pytest.mark.parametrize("cpus, local, expected", [(2, None, 2), (64, None, MAX_WORKERS), (6, "2", 3), (1, "4", 0)])
def test_default_workers_follow_the_cpus_of_the_process(monkeypatch, cpus, local, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cpus)), raising=False)
    if local is None:
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
    assert default_workers() == expected


@pytest.fixture
def checkpoint(tmp_path):
    torch.manual_seed(0)
    path = tmp_path / "crate.pt"
    crate_nn.save(path, crate_nn.create_model("crate_tiny", image_size=16, patch_size=4, dim=16, depth=2, heads=2,
                                              num_classes=10))
    return str(path)


def test_crate_eval_uses_the_default_and_warns_once(monkeypatch, checkpoint, capsys):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)  # a process allowed one CPU
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    used = []
    evaluate = classification.evaluate  # crate-eval imports it when it runs (its arguments are parsed without torch)

    def recording(*args, **kwargs):
        used.append(kwargs["num_workers"])
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(classification, "evaluate", recording)
    common = [checkpoint, "--dataset", "synthetic", "--device", "cpu", "--batch-size", "512", "--json"]
    assert crate_eval(common) == 0
    captured = capsys.readouterr()
    assert used == [1] and captured.err == "" and json.loads(captured.out)["images"] == 1024
    assert crate_eval([*common, "--num-workers", "2"]) == 0
    err = capsys.readouterr().err
    assert used == [1, 2]
    assert err == ("crate-eval: warning: --num-workers 2 exceeds the 1 CPUs this process may use; loading may be "
                   "slower than with fewer\n")  # DataLoader's own warning (given twice) is not repeated
