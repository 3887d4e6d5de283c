"""Recipes stated in optimizer steps (the language models'): ``total_steps``/``warmup_steps`` instead of epochs,
linear learning-rate decay, evaluation every N steps — through the real loop on the toy task."""
import json
import math

import pytest
from _toy_task import ToyTask, toy
from hypothesis import given
from hypothesis import strategies as st

from crate_nn.engine import RunPlan, train
from crate_nn.engine.schedule import warmup_decay


@given(warmup=st.integers(0, 40), extra=st.integers(1, 200), min_ratio=st.floats(0.0, 1.0), data=st.data())
def test_linear_decay_matches_formula(warmup, extra, min_ratio, data):
    total = warmup + extra
    step = data.draw(st.integers(0, total + 5))
    value = warmup_decay(step, warmup, total, min_ratio, "linear")
    if step < warmup:
        expected = (step + 1) / warmup
    elif step >= total:
        expected = min_ratio
    else:
        expected = min_ratio + (1 - min_ratio) * (1 - (step - warmup) / extra)
    assert value == pytest.approx(expected, rel=1e-12, abs=1e-15)  # the same float64 arithmetic, reordered
    with pytest.raises(ValueError, match="shape: expected one of cosine, linear"):
        warmup_decay(step, warmup, total, min_ratio, "step")


def test_a_run_in_steps_spans_its_schedule_and_evaluates_every_n_steps(tmp_path):
    """64 samples, batch 8: 8 steps per epoch; a 20-step run crosses two epoch ends and stops inside the third."""
    config = toy(tmp_path / "run", epochs=1, warmup_epochs=0.0, total_steps=20, warmup_steps=4, lr_schedule="linear",
                 min_lr_ratio=0.1, eval_every_steps=6, log_every=1)
    result = train(config)
    assert result.steps == 20
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    lrs = {r["step"]: r["lr"] for r in records if "lr" in r}
    assert sorted(lrs) == list(range(1, 21))
    for step, lr in lrs.items():  # the line of step s logs the rate optimizer step s − 1 used
        assert lr == pytest.approx(0.05 * warmup_decay(step - 1, 4, 20, 0.1, "linear"), rel=1e-12)
    evaluated = [r["step"] for r in records if "val_mse" in r]
    assert evaluated == [6, 8, 12, 16, 18, 20]  # every 6 steps, at the two epoch ends, and at the end
    resolved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (resolved["total_steps"], resolved["warmup_steps"], resolved["steps_per_epoch"]) == (20, 4, 8)
    assert math.isfinite(result.metrics["val_mse"])


def test_step_options_are_checked(tmp_path):
    with pytest.raises(ValueError, match="warmup_steps: 30 exceeds the run's 20 steps; pass a value ≤ 20 or a "
                                         "larger --schedule.total-steps"):
        train(toy(tmp_path / "a", total_steps=20, warmup_steps=30))
    # a warm-up in epochs (1 epoch = 8 steps) longer than a run stated in steps: found once the data are known
    with pytest.raises(ValueError, match="warmup_epochs: 1.0 epochs are 8 optimizer steps, more than the run's 5; "
                                         "pass a smaller --schedule.warmup-epochs or --schedule.warmup-steps"):
        train(toy(tmp_path / "d", total_steps=5))
    with pytest.raises(ValueError, match="lr_schedule: expected one of cosine, linear"):
        train(toy(tmp_path / "b", lr_schedule="exponential"))
    with pytest.raises(ValueError, match="eval_every_steps: expected a value ≥ 1"):
        train(toy(tmp_path / "c", eval_every_steps=0))


def test_the_task_reads_the_engines_plan_and_clock(tmp_path, monkeypatch):
    """The engine hands the task its plan once, before training, and keeps ``task.clock`` at its position: step s
    during the hooks of optimizer step s, the epochs completed at an epoch's end; a resumed run starts from the
    checkpoint's position."""
    seen, plans = [], []

    def recording(hook: str):
        original = getattr(ToyTask, hook)

        def recorded(self, *args):
            seen.append((hook, tuple(self.clock)))
            return original(self, *args)

        return recorded

    for hook in ("loss", "after_optimizer_step", "evaluate", "epoch_end"):
        monkeypatch.setattr(ToyTask, hook, recording(hook))
    start = ToyTask.start
    monkeypatch.setattr(ToyTask, "start", lambda self, plan: (plans.append(plan), start(self, plan)))
    # 64 samples, batch 16 in micro-batches of 8: 4 steps per epoch, 2 epochs, stopped after 6 steps
    config = toy(tmp_path, batch_size=16, micro_batch_size=8, epochs=2, warmup_epochs=0.5, max_steps=3)
    train(config)
    train(config.replace(max_steps=6, resume=True))
    assert plans == [RunPlan(micro_batch=8, accumulation=2, world_size=1, steps_per_epoch=4, total_steps=8,
                             warmup_steps=2)] * 2
    assert seen == [
        ("epoch_end", (0, 0)),  # before training
        *[(hook, (s, 0)) for s in range(3) for hook in ("loss", "loss", "after_optimizer_step")],
        ("evaluate", (3, 0)),  # stopped by max_steps mid-epoch; then resumed from step 3
        *[(hook, (s, 0)) for s in range(3, 4) for hook in ("loss", "loss", "after_optimizer_step")],
        ("evaluate", (4, 1)), ("epoch_end", (4, 1)),
        *[(hook, (s, 1)) for s in range(4, 6) for hook in ("loss", "loss", "after_optimizer_step")],
        ("evaluate", (6, 1)),
    ]
