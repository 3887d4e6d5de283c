"""`TrainConfig.smoke` for every preset: what `make gpu-check` trains on the GPU, checked on the CPU.

Every preset's smoke config must validate, keep the preset's recipe (model, optimizer, learning rate, precision)
and need no local data; its task must build on the CPU. One of them (digits, the CPU preset) trains here with the
same falling-loss criterion the GPU test applies, in float32 and in bf16 autocast.
"""
import json

import pytest
import torch
from torch import nn

from crate_nn import checkpoint
from crate_nn.engine import precision, train
from crate_nn.engine.distributed import context
from crate_nn.engine.task import task_for
from crate_nn.tasks import PRESETS, get_preset

RECIPE = ("optimizer", "lr", "weight_decay", "betas", "precision", "epochs", "warmup_epochs")


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_a_smoke_run_without_local_data(name, tmp_path):
    preset = get_preset(name)
    smoke = preset.smoke(20, 32, output_dir=str(tmp_path / "run"), device="cpu")
    smoke.validate()
    assert (smoke.schedule.max_steps, smoke.run.log_every, smoke.run.checkpoint_every, smoke.run.num_workers) == (20, 1, 0, 0)
    assert smoke.schedule.batch_size == min(preset.schedule.batch_size, 32, preset.schedule.micro_batch_size or 32)
    assert smoke.schedule.micro_batch_size is None
    assert all(getattr(smoke, field) == getattr(preset, field) for field in RECIPE if hasattr(preset, field))
    assert getattr(smoke, "data_dir", None) is None and getattr(smoke, "init_from", None) is None
    task = task_for(smoke)(smoke, context("cpu"))  # builds the model and the data, nothing read from disk
    assert len(task.train_set) >= smoke.schedule.batch_size


def test_smoke_keeps_the_model_and_takes_overrides_last():
    smoke = get_preset("imagenet").smoke(5, 8, model="crate_tiny", dataset="digits")
    assert (smoke.network.model, smoke.data.dataset, smoke.schedule.batch_size, smoke.schedule.max_steps) == ("crate_tiny", "digits", 8, 5)
    assert get_preset("imagenet").smoke().network.model == "crate_base"
    assert get_preset("finetune").replace(init_from="x.pt").smoke().network.init_from is None


@pytest.mark.parametrize("choice", ["fp32", precision.MEASURED])
def test_the_digits_smoke_run_lowers_its_loss(tmp_path, monkeypatch, choice):
    """The preset's float32, and bf16-if-faster on a CPU whose bf16 products are measured 2× faster (the rates are
    set here, whatever this CPU's): the products run in the chosen dtype, the master weights stay float32."""
    monkeypatch.setattr(precision, "_CPU_BF16_FASTER", {})
    monkeypatch.setattr(precision, "product_rates", lambda *args, **kwargs: {torch.float32: 1e11, torch.bfloat16: 2e11})
    linear_outputs = set()

    def record(module, args, output):
        if isinstance(module, nn.Linear):
            linear_outputs.add(output.dtype)

    hook = nn.modules.module.register_module_forward_hook(record)
    try:
        result = train(get_preset("digits").smoke(20, 32, output_dir=str(tmp_path / "run"), device="cpu",
                                                  precision=choice))
    finally:
        hook.remove()
    assert (torch.bfloat16 in linear_outputs) == (choice == precision.MEASURED)
    assert all(t.dtype == torch.float32 for t in checkpoint.read(result.checkpoint)["model"].values())
    lines = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [line["train_loss"] for line in lines if "train_loss" in line]
    assert len(losses) == 20
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
