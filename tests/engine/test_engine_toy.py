"""The engine's own test suite on a toy task (linear regression, float64): gradient accumulation equals one large
batch, resume equals the uninterrupted run, SIGTERM/SIGINT → checkpoint → resume equals the uninterrupted run,
the NaN stop, hard kills at random steps, and DDP with two gloo processes (one of them preempted) equals one
process."""
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _toy_task import toy
from _train_cases import assert_same, torchrun

from crate_nn import checkpoint
from crate_nn.engine import NonFiniteLossError, Preempted, train

ROOT = Path(__file__).resolve().parents[2]
TOY = Path(__file__).with_name("_toy_task.py")


def same_run(a: Path, b: Path) -> None:
    """Final checkpoints equal bit for bit (bar the config fields a resume may change) and metrics.jsonl equal
    line by line bar the timing fields."""
    x, y = checkpoint.read(a / "checkpoints" / "last.pt"), checkpoint.read(b / "checkpoints" / "last.pt")
    for payload in (x, y):
        payload.pop("train_config")  # output_dir, max_steps, resume and signal fields differ by construction
    assert_same(x, y)

    def lines(run):
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.endswith("_per_s")} for r in records]  # <unit>_per_s: timing

    assert lines(a) == lines(b)


def test_accumulated_micro_batches_equal_one_batch(tmp_path):
    """Batch 16 as one micro-batch vs four micro-batches of 4: the same gradients up to float64 summation order."""
    whole = train(toy(tmp_path / "whole", batch_size=16, max_steps=6))
    accumulated = train(toy(tmp_path / "accumulated", batch_size=16, micro_batch_size=4, max_steps=6))
    a, b = crate_model(whole.checkpoint), crate_model(accumulated.checkpoint)
    for key in a:
        # float64 mean over 16 vs mean of 4 means of 4: ~1e-16 relative per step, Adam-normalised over 6 steps
        torch.testing.assert_close(a[key], b[key], rtol=1e-10, atol=1e-12, msg=key)
    assert whole.metrics["pairs_seen"] == accumulated.metrics["pairs_seen"] == 96


def crate_model(path: str) -> dict:
    return checkpoint.read(path)["model"]


@pytest.mark.parametrize("interrupt_at", [8, 11])  # an epoch boundary (8 steps per epoch) and mid-epoch
def test_resumed_run_equals_uninterrupted(tmp_path, interrupt_at):
    """Input noise from the global RNG, EMA, task state, metrics and counters: all restored exactly."""
    config = toy(tmp_path / "straight", noise=0.3, ema=True, ema_momentum=0.9, ema_momentum_end=1.0, max_steps=20)
    train(config)
    first = config.replace(output_dir=str(tmp_path / "resumed"), max_steps=interrupt_at)
    assert train(first).steps == interrupt_at
    resumed = train(first.replace(max_steps=20, resume=True))
    assert resumed.steps == 20
    same_run(tmp_path / "straight", tmp_path / "resumed")


@pytest.mark.parametrize("signal_name, step", [("SIGTERM", 5), ("SIGINT", 8), ("SIGTERM", 13)])
def test_signal_stops_after_the_step_saves_and_resumes_exactly(tmp_path, signal_name, step):
    config = toy(tmp_path / "straight", noise=0.3, ema=True, max_steps=20)
    train(config)
    stopped = config.replace(output_dir=str(tmp_path / "stopped"), signal_at_step=step,
                                  signal_name=signal_name)
    with pytest.raises(Preempted, match=f"stopped by {signal_name} after optimizer step {step}") as info:
        train(stopped)
    assert info.value.signum == getattr(signal, signal_name)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or callable(signal.getsignal(signal.SIGTERM))
    saved = checkpoint.read(tmp_path / "stopped" / "checkpoints" / "last.pt")
    assert saved["position"]["step"] == step  # the step in flight was finished, nothing after it
    train(stopped.replace(resume=True, signal_at_step=None))
    same_run(tmp_path / "straight", tmp_path / "stopped")


def test_nan_loss_stops_before_the_update(tmp_path):
    config = toy(tmp_path, nan_at_step=10, checkpoint_every=4)
    with pytest.raises(NonFiniteLossError, match=r"optimizer step 11 .*last good checkpoint: .*last\.pt"):
        train(config)
    saved = checkpoint.read(tmp_path / "checkpoints" / "last.pt")
    assert saved["position"]["step"] == 8 and all(torch.isfinite(v).all() for v in saved["model"].values())


def _run_script(tmp_path: Path, name: str, config, *, nproc: int = 1) -> subprocess.CompletedProcess:
    fields = json.loads(json.dumps(config.to_dict()))
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(fields))
    if nproc > 1:
        return torchrun(str(TOY), str(path), nproc=nproc, path=(TOY.parent,))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(TOY.parent)])}
    return subprocess.run([sys.executable, str(TOY), str(path)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=240)


def test_hard_kills_and_terminations_at_random_steps_then_resume_equal_uninterrupted(tmp_path):
    """Fault injection: a run is killed (SIGKILL: no checkpoint of its own) or terminated (SIGTERM) at random steps
    several times in a row, each time resumed with the same command plus --resume; the final weights and the whole
    metrics.jsonl (bar timing) equal the uninterrupted run's."""
    config = toy(tmp_path / "straight", noise=0.3, ema=True, checkpoint_every=3, max_steps=22)
    train(config)
    rng = random.Random(20261122)
    run = config.replace(output_dir=str(tmp_path / "faulty"))
    saved, resume = 0, False
    for attempt, name in enumerate(["SIGKILL", "SIGTERM", "SIGKILL", "SIGTERM"]):
        step = rng.randint(max(saved, 3) + 1, max(saved, 3) + 6)  # the first checkpoint is written at step 3
        done = _run_script(tmp_path, f"attempt{attempt}",
                           run.replace(resume=resume, signal_at_step=step, signal_name=name))
        expected_status = -signal.SIGKILL if name == "SIGKILL" else 128 + signal.SIGTERM
        assert done.returncode == expected_status, done.stderr[-3000:]
        # SIGKILL: the newest checkpoint written before the kill (every 3 steps and at the 8-step epoch ends);
        # SIGTERM: the step in flight is finished and saved
        written = [s for s in range(1, step) if s % 3 == 0 or s % 8 == 0]
        expected = step if name == "SIGTERM" else max([saved, *written])
        saved = checkpoint.read(tmp_path / "faulty" / "checkpoints" / "last.pt")["position"]["step"]
        assert saved == expected, (name, step, saved)
        resume = True
    done = _run_script(tmp_path, "final", run.replace(resume=True))
    assert done.returncode == 0, done.stderr[-3000:]
    same_run(tmp_path / "straight", tmp_path / "faulty")


def test_torchrun_two_processes_equal_one_process_and_stop_together(tmp_path):
    """Global batch 8 as two ranks × two micro-batches of 2 (exercises no_sync) vs one process × 8. Rank 0 alone
    receives SIGTERM after the all-reduce of step 5: the next step's all-reduce carries it, so both ranks stop
    after step 6 with one checkpoint; the resumed DDP run then equals the one-process run."""
    single = train(toy(tmp_path / "single", ema=True, max_steps=12))
    ddp = toy(tmp_path / "ddp", ema=True, max_steps=12, micro_batch_size=2, signal_at_step=5)
    done = _run_script(tmp_path, "ddp", ddp, nproc=2)
    assert done.returncode != 0 and "stopped by SIGTERM after optimizer step 6" in done.stderr, done.stderr[-4000:]
    saved = checkpoint.read(tmp_path / "ddp" / "checkpoints" / "last.pt")
    assert saved["position"]["step"] == 6 and len(saved["rng"]) == 2  # one RNG state per rank
    done = _run_script(tmp_path, "ddp_resume", ddp.replace(resume=True, signal_at_step=None), nproc=2)
    assert done.returncode == 0, done.stderr[-4000:]
    reference = crate_model(single.checkpoint)
    result = checkpoint.read(tmp_path / "ddp" / "checkpoints" / "last.pt")
    # float64 gradients averaged across ranks by gloo in another order (~1e-16 relative); after twelve AdamW
    # steps the weights agree far within 1e-9 (a wrong batch split or a missing all-reduce moves them by ~lr)
    torch.testing.assert_close(result["model"], reference, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(result["ema"], checkpoint.read(single.checkpoint)["ema"], rtol=1e-9, atol=1e-10)
    assert result["totals"] == {"pairs_seen": 96}
