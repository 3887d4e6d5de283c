"""A run directory belongs to one run: a second run there is refused (never merged), --overwrite starts over,
checkpoints get the mode of any new file, and a bad run directory stops every torchrun process with its message
instead of hanging the job."""
import json
import os
import stat
from pathlib import Path

import pytest
from _train_cases import TINY_MODEL, tiny, torchrun

import crate_nn
from crate_nn.engine import train
from crate_nn.train import main


def test_a_second_run_into_a_used_directory_is_refused_and_overwrite_starts_over(tmp_path, capsys):
    first = train(tiny(tmp_path, max_steps=6))
    before = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(ValueError, match="already holds a run .*--run.resume to continue it, --run.overwrite"):
        train(tiny(tmp_path, max_steps=2))
    assert (tmp_path / "metrics.jsonl").read_text() == before  # nothing merged, nothing deleted
    assert crate_nn.checkpoint.read(first.checkpoint)["position"]["step"] == 6
    args = ["--preset", "synthetic", "--image-size", "8", "--model-args", *[f"{k}={v}" for k, v in TINY_MODEL.items()],
            "--batch-size", "8", "--synthetic-samples", "32", "--epochs", "1", "--no-progress", "--device", "cpu",
            "--num-workers", "0", "--augment", "none", "--output-dir", str(tmp_path)]
    assert main(args) == 1 and "--run.overwrite" in capsys.readouterr().err
    assert main([*args, "--overwrite"]) == 0
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in lines) == 4  # only the new run's 4 steps
    assert crate_nn.checkpoint.read(tmp_path / "checkpoints" / "last.pt")["position"]["step"] == 4
    with pytest.raises(ValueError, match="resume, overwrite: choose one"):
        train(tiny(tmp_path, resume=True, overwrite=True))


def test_checkpoints_are_written_with_the_mode_of_any_new_file(tmp_path):
    result = train(tiny(tmp_path, max_steps=3, checkpoint_every=2, keep_checkpoints=0))
    umask = os.umask(0)
    os.umask(umask)
    expected = 0o666 & ~umask
    for path in [Path(result.checkpoint), *sorted((tmp_path / "checkpoints").glob("step_*.pt"))]:
        assert stat.S_IMODE(path.stat().st_mode) == expected, path


def test_a_bad_output_dir_stops_every_torchrun_process_with_its_message(tmp_path):
    """The run directory is checked in every process before any process group forms: no rank waits forever."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    done = torchrun("-m", "crate_nn.train", "--preset", "synthetic", "--image-size", "8", "--device", "cpu",
                    "--model-args", *[f"{k}={v}" for k, v in TINY_MODEL.items()], "--batch-size", "8",
                    "--num-workers", "0", "--output-dir", str(blocker), timeout=180)
    assert done.returncode != 0
    # ≥ 1, not 2: torchrun terminates the other rank as soon as one fails, and under load that rank may still be
    # importing torch; what matters is that the job ends (the timeout above) with the message, not a hang
    assert done.stderr.count(f"output_dir: '{blocker}' exists and is not a directory") >= 1, done.stderr[-3000:]
    assert "Timed out" not in done.stderr and "ProcessGroup" not in done.stderr, done.stderr[-3000:]
