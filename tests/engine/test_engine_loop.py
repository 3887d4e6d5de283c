"""The training loop end to end on tiny synthetic runs: resume exactness, checkpoints, metrics, NaN stop,
gradient accumulation through the real loop."""
import json

import pytest
import torch
from _train_cases import assert_same, tiny

import crate_nn
from crate_nn import checkpoint
from crate_nn.engine import NonFiniteLossError, train


@pytest.mark.parametrize("interrupt_at", [4, 6])  # an epoch boundary (4 steps per epoch) and mid-epoch
def test_interrupted_and_resumed_run_equals_uninterrupted(tmp_path, interrupt_at):
    """Lion, random-resized-crop + flip augmentation (so the RNG state matters), 10 of 12 scheduled steps."""
    config = tiny(tmp_path / "straight", augment="rrc_flip", max_steps=10, log_every=1)
    straight = train(config)
    interrupted = config.replace(output_dir=str(tmp_path / "resumed"), max_steps=interrupt_at)
    assert train(interrupted).steps == interrupt_at
    resumed = train(interrupted.replace(max_steps=10, resume=True))
    assert resumed.steps == 10
    a, b = checkpoint.read(straight.checkpoint), checkpoint.read(resumed.checkpoint)
    for payload in (a, b):
        payload.pop("train_config")  # output_dir, max_steps and resume differ by construction
    assert_same(a, b)
    assert a["position"] == {"epoch": 2, "step_in_epoch": 2, "step": 10}
    assert resumed.metrics["val_loss"] == straight.metrics["val_loss"]

    def logged(run):  # metrics.jsonl training lines, without the timing
        lines = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["train_loss"], r["lr"]) for r in lines if "train_loss" in r]

    assert logged("resumed") == logged("straight") and len(logged("straight")) == 10


def test_resume_refuses_a_changed_config_and_a_missing_checkpoint(tmp_path):
    config = tiny(tmp_path, max_steps=2)
    with pytest.raises(ValueError, match="resume: no checkpoint"):
        train(config.replace(resume=True))
    train(config)
    with pytest.raises(ValueError, match="lr: saved 0.00024, now 0.001"):
        train(config.replace(resume=True, lr=1e-3))


def test_resume_accepts_an_option_added_since_the_checkpoint_at_its_default(tmp_path):
    """A checkpoint written before an option existed lacks it: resuming passes while the option holds its default
    (the run did what the default does) and is refused, naming the option, otherwise."""
    from crate_nn.engine.resume import check_resumable

    config = tiny(tmp_path, label_smoothing=0.1)  # the default
    older = {k: v for k, v in config.to_dict().items() if k != "label_smoothing"}
    check_resumable(older, config)
    with pytest.raises(ValueError, match=r"label_smoothing: saved '\(none\)', now 0.2"):
        check_resumable(older, config.replace(label_smoothing=0.2))


def test_checkpoints_config_and_metrics(tmp_path):
    result = train(tiny(tmp_path, checkpoint_every=3, keep_checkpoints=0, log_every=2))
    names = sorted(p.name for p in (tmp_path / "checkpoints").glob("*.pt"))
    # every 3 steps inside epochs (3, 6, 9) and at the ends of the three 4-step epochs (4, 8, 12)
    assert names == ["last.pt"] + [f"step_{s:07d}.pt" for s in (3, 4, 6, 8, 9, 12)]
    payload = checkpoint.read(result.checkpoint)
    assert {"model", "optimizer", "scheduler", "rng", "position", "train_config", "config"} <= payload.keys()
    assert payload["train_config"]["weight_decay_all"] is False
    model = crate_nn.load(result.checkpoint)
    torch.testing.assert_close(model.state_dict(), payload["model"], rtol=0, atol=0)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert {"pos_embed", "cls_token"} <= set(saved["no_weight_decay"]) and saved["total_steps"] == 12
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train_lines = [r for r in lines if "train_loss" in r]
    val_lines = [r for r in lines if "val_top1" in r]
    assert [r["step"] for r in train_lines] == [2, 4, 6, 8, 10, 12]
    assert all({"epoch", "lr", "images_per_s"} <= r.keys() for r in train_lines)
    assert [r["epoch"] for r in val_lines] == [1.0, 2.0, 3.0]
    assert all(0 <= r[k] <= 1 for r in val_lines for k in ("val_top1", "val_top5"))


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    """AdamW at lr 1e30 blows the weights up after one step; the second step's loss is not finite."""
    config = tiny(tmp_path, optimizer="adamw", lr=1e30, weight_decay=0.0, warmup_epochs=0.0, checkpoint_every=1)
    with pytest.raises(NonFiniteLossError, match=r"optimizer step 2 .*last good checkpoint: .*last\.pt"):
        train(config)
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("*.pt")) == ["last.pt", "step_0000001.pt"]
    last = checkpoint.read(tmp_path / "checkpoints" / "last.pt")
    assert last["position"]["step"] == 1
    crate_nn.load(tmp_path / "checkpoints" / "last.pt")


def test_accumulated_micro_batches_train_like_one_batch(tmp_path):
    """The real loop: batch 8 as 4 micro-batches of 2 == batch 8 at once (AdamW, float32 CPU)."""
    common = dict(optimizer="adamw", lr=1e-2, weight_decay=0.1, max_steps=3)
    whole = train(tiny(tmp_path / "whole", **common))
    accumulated = train(tiny(tmp_path / "accumulated", micro_batch_size=2, **common))
    a, b = checkpoint.read(whole.checkpoint)["model"], checkpoint.read(accumulated.checkpoint)["model"]
    # float32 gradients summed in another order (~1e-7 relative); three Adam steps of size ≤ lr scale that by
    # at most ~|g|/(|g| + 1e-8) differences, far below 1e-4
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_bf16_autocast_on_cpu_trains(tmp_path):
    """precision=bf16 runs the forward pass under bfloat16 autocast (what GPUs use), the loss in float32."""
    result = train(tiny(tmp_path, precision="bf16", max_steps=2))
    payload = checkpoint.read(result.checkpoint)
    assert all(t.dtype == torch.float32 for t in payload["model"].values())  # master weights stay float32
    assert torch.isfinite(torch.tensor(result.metrics["val_loss"]))

