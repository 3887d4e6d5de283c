"""What a run directory survives: a second run started on it at the same time, a resume on other data (which used to
be accepted, or to spin forever when the epoch became shorter than the checkpoint's position), the half-written
metrics line of an interrupted append, a second SIGTERM during a checkpoint write, a run stopped before its first
checkpoint."""
import json
import os
import signal
import subprocess
import sys

import pytest
from _train_cases import ROOT, SMALL, fake_imagenet, image_file, tiny

from crate_nn import checkpoint
from crate_nn.engine import train
from crate_nn.engine.run_dir import RunFiles, RunLock, read_metrics

HOLD_LOCK = """
import sys, time
from crate_nn.engine.run_dir import RunLock
with RunLock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_a_second_run_on_a_directory_in_use_is_refused_naming_the_first(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ValueError, match=f"in use by a run that is training now \\(process {holder.pid} on "):
            train(tiny(tmp_path, max_steps=2))
        assert not (tmp_path / "metrics.jsonl").exists() and not (tmp_path / "checkpoints").exists()
    finally:
        holder.kill()
        holder.wait()
    assert train(tiny(tmp_path, max_steps=2)).steps == 2  # the lock ended with its process
    with RunLock(tmp_path), pytest.raises(ValueError, match=f"process {os.getpid()} on "):  # and in one process
        train(tiny(tmp_path, resume=True, max_steps=3))


@pytest.mark.parametrize("change", ["more", "fewer"])
def test_resume_on_other_training_data_is_refused(tmp_path, change):
    root = fake_imagenet(tmp_path / "data")  # 8 training images: 2 steps of 4 per epoch
    config = tiny(tmp_path / "run", dataset="imagenet", data_dir=str(root), **{**SMALL, "epochs": 3, "max_steps": 3})
    assert train(config).steps == 3  # stopped inside the second epoch, one step into it
    folder = root / "train" / "n01440764"
    if change == "more":
        image_file(folder / "extra.JPEG", (32, 32), seed=99)
    else:  # 4 images: one step per epoch, fewer than the checkpoint's position in its epoch (this used to spin)
        for path in sorted(folder.glob("*.JPEG"))[:2] + sorted((root / "train" / "n01443537").glob("*.JPEG"))[:2]:
            path.unlink()
    with pytest.raises(ValueError, match="resume: the training data differ from the checkpoint's "
                                         r"\(8 samples, fingerprint \w+ then, (9|4) samples"):
        train(config.replace(resume=True, max_steps=5))


def test_resume_drops_the_half_written_line_of_an_interrupted_append(tmp_path, capsys):
    config = tiny(tmp_path, max_steps=2, log_every=1)
    train(config)
    metrics = tmp_path / "metrics.jsonl"
    with open(metrics, "a") as f:
        f.write('{"epoch": 0.75, "step": 3, "train_lo')  # a full disk mid-write
    assert train(config.replace(resume=True, max_steps=4)).steps == 4
    assert "dropped the unfinished last line of" in capsys.readouterr().err
    assert [r["step"] for r in read_metrics(metrics) if "train_loss" in r] == [1, 2, 3, 4]
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join([lines[0], "{broken", *lines[1:]]) + "\n")
    with pytest.raises(ValueError, match=f"{metrics}: line 2 is not a JSON record"):
        read_metrics(metrics, repair=True)  # only a last line is an interrupted write


def test_a_second_sigterm_during_a_checkpoint_write_lets_the_write_finish(tmp_path, monkeypatch):
    """Fault injection: every checkpoint write receives a SIGTERM as it starts. The first arrives during the write at
    the end of epoch 1 (step 4) and stops the run after step 5; the second arrives during that stop's write, and the
    run ends with KeyboardInterrupt only after the step-5 checkpoint is complete (it used to end before writing it,
    leaving the step-4 checkpoint)."""
    real_save = RunFiles.save

    def save_under_fire(self, model, step, extra):
        os.kill(os.getpid(), signal.SIGTERM)
        real_save(self, model, step, extra)

    monkeypatch.setattr(RunFiles, "save", save_under_fire)
    with pytest.raises(KeyboardInterrupt, match="after the checkpoint write"):
        train(tiny(tmp_path, max_steps=10))
    assert checkpoint.read(tmp_path / "checkpoints" / "last.pt")["position"]["step"] == 5


def test_a_run_stopped_before_its_first_checkpoint_says_how_to_start_again(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"preset": "synthetic"}))  # what start-up had written
    with pytest.raises(ValueError, match="stopped before its first checkpoint; pass --run.resume .* --run.overwrite"):
        train(tiny(tmp_path, max_steps=2))
    with pytest.raises(ValueError, match="stopped before its first checkpoint \\(config.json\\): start it again with "
                                         "--run.overwrite"):
        train(tiny(tmp_path, max_steps=2, resume=True))
    assert train(tiny(tmp_path, max_steps=2, overwrite=True)).steps == 2
