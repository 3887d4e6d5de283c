"""CRATE-DINO's task: the loss (76)–(77) against DINO's loop, the collapse monitors, the schedules, one optimizer step
of the task (stop-gradient, frozen last layer, EMA teacher, centre), exact resume, bad input, and short runs."""
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import crate_nn
from crate_nn import checkpoint
from crate_nn.data.batching import collate
from crate_nn.engine import train
from crate_nn.engine.distributed import context
from crate_nn.engine.schedule import cosine
from crate_nn.engine.task import RunPlan
from crate_nn.models.dino_head import DINO
from crate_nn.tasks import get_preset
from crate_nn.tasks.dino import DINOTask, DINOTrainConfig
from crate_nn.tasks.dino_loss import DINOLoss, collapse, dino_loss, teacher_temperature

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
from _dino_processes import one_process_centre  # noqa: E402
from _train_cases import torchrun  # noqa: E402
from test_engine_toy import same_run  # noqa: E402 (the engine's own definition of "the same run")

CENTRE_WORKER = Path(__file__).with_name("_dino_processes.py")


def tiny(output_dir, **overrides) -> DINOTrainConfig:
    """32 random 8×8 RGB images, batch 8 (4 steps per epoch), a one-layer CRATE of width 16, 2 global + 2 local
    crops, 32 prototypes; CPU, float32."""
    base = dict(model="crate_tiny", model_args=dict(patch_size=4, dim=16, depth=1, heads=2), dataset="synthetic",
                synthetic_samples=32, image_size=8, local_crop_size=4, load_size=8, eval_resize=8, local_crops=2,
                out_dim=32, hidden_dim=16, bottleneck_dim=8, blur_sigma=(0.1, 0.5), optimizer="adamw", lr=1e-3,
                betas=(0.9, 0.999), weight_decay=0.04, weight_decay_end=0.4, batch_size=8, epochs=3,
                warmup_epochs=1.0, grad_clip=3.0, grad_clip_mode="per_tensor", knn_ks=(3, 5), monitor_samples=16,
                device="cpu", precision="fp32", num_workers=0, progress=False, checkpoint_every=0, log_every=2,
                output_dir=str(output_dir))
    return DINOTrainConfig().replace(**{**base, **overrides})


# ----------------------------------------------------------------------------------------------- the loss
def dinos_loop(student, teacher, center, student_temp, teacher_temp):
    """DINO's loss written as its reference loop: teacher view iq against every student view v ≠ iq."""
    q = F.softmax((teacher - center) / teacher_temp, dim=-1)
    total, terms = 0.0, 0
    for iq in range(teacher.shape[0]):
        for v in range(student.shape[0]):
            if v == iq:
                continue
            total = total + torch.sum(-q[iq] * F.log_softmax(student[v] / student_temp, dim=-1), dim=-1).mean()
            terms += 1
    return total / terms


@given(seed=st.integers(0, 2**31 - 1), groups=st.integers(1, 3), local=st.integers(0, 4), batch=st.integers(1, 5),
       k=st.integers(2, 40), student_temp=st.floats(0.05, 1.0), teacher_temp=st.floats(0.02, 1.0))
def test_loss_is_dinos_loop(seed, groups, local, batch, k, student_temp, teacher_temp):
    if groups + local < 2:
        local = 1
    g = torch.Generator().manual_seed(seed)
    student = 3 * torch.randn(groups + local, batch, k, generator=g, dtype=torch.float64)
    teacher = 3 * torch.randn(groups, batch, k, generator=g, dtype=torch.float64)
    center = torch.randn(k, generator=g, dtype=torch.float64)
    out = dino_loss(student, teacher, center, student_temp, teacher_temp)
    # float64, the same softmaxes; the sums run in another order (einsum vs loop)
    torch.testing.assert_close(out.loss, dinos_loop(student, teacher, center, student_temp, teacher_temp),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("k", [2, 17, 65536])
def test_identical_uniform_outputs_give_log_k(k):
    """Student and teacher output the same constant vector: q = p = uniform, H(q, p) = log K, KL = 0."""
    student, teacher = torch.full((4, 3, k), 0.7, dtype=torch.float64), torch.full((2, 3, k), 0.7, dtype=torch.float64)
    out = dino_loss(student, teacher, torch.zeros(k, dtype=torch.float64), 0.1, 0.04)
    # a sum of K equal float64 terms: error ≲ K·2^-53·log K
    assert out.loss.item() == pytest.approx(math.log(k), rel=1e-10)
    assert out.teacher_entropy.item() == pytest.approx(math.log(k), rel=1e-10)
    assert out.teacher_mean_entropy.item() == pytest.approx(math.log(k), rel=1e-10)
    assert abs(out.kl.item()) < 1e-9


def test_monitors_see_a_one_prototype_collapse_and_healthy_outputs():
    """Every image → the same sharp output: both entropies ≈ 0. Distinct sharp outputs per image: per-image entropy
    ≈ 0 but the batch mean spreads over the images (entropy ≈ log B)."""
    k, batch = 50, 8
    same = torch.zeros(2, batch, k, dtype=torch.float64)
    same[..., 3] = 10.0
    collapsed = dino_loss(same.repeat(2, 1, 1), same, torch.zeros(k, dtype=torch.float64), 0.1, 0.04)
    assert collapsed.teacher_entropy < 1e-6 and collapsed.teacher_mean_entropy < 1e-6
    distinct = torch.zeros(2, batch, k, dtype=torch.float64)
    distinct[:, torch.arange(batch), torch.arange(batch)] = 10.0
    healthy = dino_loss(distinct.repeat(2, 1, 1), distinct, torch.zeros(k, dtype=torch.float64), 0.1, 0.04)
    assert healthy.teacher_entropy < 1e-6
    assert healthy.teacher_mean_entropy.item() == pytest.approx(math.log(batch), rel=1e-6)


def test_teacher_probabilities_carry_no_gradient():
    student = torch.randn(4, 2, 6, requires_grad=True)
    teacher = torch.randn(2, 2, 6, requires_grad=True)
    dino_loss(student, teacher, torch.zeros(6), 0.1, 0.04).loss.backward()
    assert teacher.grad is None and student.grad is not None and student.grad.abs().sum() > 0


def test_same_view_pairs_and_missing_pairs():
    student, teacher = torch.randn(1, 3, 5, dtype=torch.float64), torch.randn(1, 3, 5, dtype=torch.float64)
    out = dino_loss(student, teacher, torch.zeros(5, dtype=torch.float64), 0.1, 0.04, same_view=True)
    q = F.softmax(teacher[0] / 0.04, -1)
    expected = (q * (q.log() - F.log_softmax(student[0] / 0.1, -1))).sum(-1).mean()
    torch.testing.assert_close(out.kl, expected, rtol=1e-12, atol=1e-14)  # KL(q‖p) written out, float64
    with pytest.raises(ValueError, match="no pair of different views"):
        dino_loss(student, teacher, torch.zeros(5), 0.1, 0.04)


@pytest.mark.parametrize("warmup", [0, 1, 2, 5, 30])
def test_teacher_temperature_is_dinos_schedule(warmup):
    epochs = 40
    schedule = np.concatenate((np.linspace(0.04, 0.07, warmup), np.ones(epochs - warmup) * 0.07))
    for epoch in range(epochs):
        # np.linspace computes start + i·step with the same step; rounding may differ in the last bit
        assert teacher_temperature(epoch, 0.04, 0.07, warmup) == pytest.approx(schedule[epoch], rel=1e-15)


# ----------------------------------------------------------------------------------------------- one step
def test_one_step_stop_gradient_frozen_last_layer_ema_and_centre(tmp_path):
    """Two accumulated micro-batches: the teacher gets no gradient, the head's last layer none in epoch 0, then
    θ_t ← λθ_t + (1 − λ)θ_s exactly with λ from the cosine schedule (79), and c ← m c + (1 − m)·(mean teacher output
    over both micro-batches and both global views)."""
    config = tiny(tmp_path)
    config.validate()
    torch.manual_seed(0)
    task = DINOTask(config, context("cpu"))
    task.start(RunPlan.resolve(config, task, world_size=1))
    model = task.model.train()
    outputs = []
    model.teacher.register_forward_hook(lambda module, args, out: outputs.append(out.detach().clone()))
    with torch.no_grad():
        task.objective.center.normal_()
    for start in (0, 4):
        task.loss(model, collate([task.train_set[i] for i in range(start, start + 4)])).loss.backward()
    assert all(p.grad is None for p in model.teacher.parameters())
    head = model.student.head.last_layer
    assert head.weight_v.grad is not None
    task.before_optimizer_step(model, step=0, epoch=1)  # after the frozen epoch: untouched
    assert head.weight_v.grad is not None
    task.before_optimizer_step(model, step=0, epoch=0)
    assert head.weight_v.grad is None
    with torch.no_grad():  # an update of the student, as the optimizer would make
        for p in model.student.parameters():
            p.add_(0.01 * torch.randn_like(p))
    teacher, student = ([p.clone() for p in net.parameters()] for net in (model.teacher, model.student))
    center = task.objective.center.clone()
    step = 5
    task.after_optimizer_step(model, step)
    m = cosine(step, task.plan.total_steps, config.distillation.teacher_momentum, config.distillation.teacher_momentum_end)
    assert 0.996 < m < 1
    for after, t, s in zip(model.teacher.parameters(), teacher, student):
        assert torch.equal(after, t.mul(m).add(s, alpha=1 - m))  # the formula's float operations
    mean = torch.cat(outputs).double().mean(0)  # 2 micro-batches × 2 global views × 4 images
    expected = center * 0.9 + mean.float() * (1 - 0.9)
    torch.testing.assert_close(task.objective.center, expected, rtol=1e-6, atol=1e-7)  # float32 centre, float64 sums
    assert task.objective.teacher_count == 0 and not task.objective.teacher_sum.any()


def test_centre_update_is_its_formula_and_bad_momentum_is_named():
    """c ← m c + (1 − m)·(mean of the teacher outputs the loss saw since the last update), by the same float
    operations; the loss's monitors leave the sums alone."""
    loss = DINOLoss(6, center_momentum=0.9)
    with torch.no_grad():
        loss.center.uniform_()
    before = loss.center.clone()
    teachers = [torch.randn(2, 3, 6), torch.randn(2, 5, 6)]
    for teacher in teachers:
        loss(torch.randn(3, teacher.shape[1], 6), teacher, epoch=0)
    loss.monitors(torch.randn(4, 6), torch.randn(4, 6), epoch=0)
    assert loss.teacher_count == 16
    mean = (sum(t.double().sum(dim=(0, 1)) for t in teachers) / 16).float()
    loss.update()
    assert torch.equal(loss.center, before.mul(0.9).add(mean, alpha=1 - 0.9))
    assert loss.teacher_count == 0 and not loss.teacher_sum.any()
    assert list(loss.state_dict()) == ["center"]  # the sums are emptied by every update: not saved
    with pytest.raises(ValueError, match=r"center_momentum: expected a value in \[0, 1\], got 1.5"):
        DINOLoss(6, center_momentum=1.5)
    with pytest.raises(ValueError, match="prototypes: expected a positive integer, got 0"):
        DINOLoss(0)
    with pytest.raises(ValueError, match="student_temp: expected a temperature > 0, got 0.0"):
        DINOLoss(6, student_temp=0.0)


def test_two_processes_move_the_centre_as_one_process(tmp_path):
    """The teacher outputs of one step split over two gloo processes: the all-reduced sums give every process the
    centre one process computes from all of them."""
    done = torchrun(str(CENTRE_WORKER), str(tmp_path), path=(CENTRE_WORKER.parent,))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    centres = [torch.tensor(json.loads(path.read_text())) for path in sorted(tmp_path.glob("centre-*.json"))]
    assert len(centres) == 2
    reference = one_process_centre()
    for centre in centres:
        # float64 sums of float32 outputs added in another order, then rounded to float32: equal up to one rounding
        torch.testing.assert_close(centre, reference, rtol=2e-7, atol=1e-7)


# ----------------------------------------------------------------------------------------------- runs
@pytest.mark.parametrize("interrupt_at", [4, 6])  # an epoch boundary (4 steps per epoch) and mid-epoch
def test_resumed_run_equals_uninterrupted(tmp_path, interrupt_at):
    """Teacher, centre, the engine's clock (the temperature warm-up reads it), frozen last layer, the multi-crop
    RNG, the optimizer and the metrics: the resumed run's checkpoint and metrics.jsonl equal the straight run's
    (same_run ignores the timing fields, <unit>_per_s: images_per_s here). So does a checkpoint as the task wrote
    it when it counted its own steps (task state {"step": N}) and the centre was the model's (``center`` in its
    weights): the engine's position replaces the step, and the centre is resumed into the loss."""
    config = tiny(tmp_path / "straight", warmup_teacher_temp=0.02, teacher_temp=0.05, warmup_teacher_temp_epochs=3,
                  max_steps=9)
    train(config)
    first = config.replace(output_dir=str(tmp_path / "resumed"), max_steps=interrupt_at)
    assert train(first).steps == interrupt_at
    shutil.copytree(tmp_path / "resumed", tmp_path / "older")
    last = tmp_path / "older" / "checkpoints" / "last.pt"
    payload = checkpoint.read(last)
    assert list(payload["task"]) == ["objective"] and list(payload["task"]["objective"]) == ["center"]
    # as written when the centre was the model's and the task counted its steps
    payload["model"]["center"] = payload["task"]["objective"]["center"]
    payload["task"] = {"step": interrupt_at}
    checkpoint.atomic_save({**payload, "checksum": checkpoint.payload_digest(payload)}, last)
    assert torch.equal(crate_nn.load(last).legacy_center, payload["model"]["center"])
    for run in ("resumed", "older"):
        train(first.replace(output_dir=str(tmp_path / run), max_steps=9, resume=True))
        same_run(tmp_path / "straight", tmp_path / run)


def test_run_logs_monitors_knn_probe_and_saves_a_backbone(tmp_path):
    config = tiny(tmp_path, epochs=2, test_split="test", probe_epochs=(2,), knn_epochs=(1,), measure_epochs=(0, 2),
                  measure_samples=8, pixel_control=True)
    result = train(config)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "train_loss" in r]
    assert steps and all({"train_teacher_entropy", "train_teacher_mean_entropy", "train_kl"} <= set(r) for r in steps)
    evaluations = [r for r in records if "teacher_entropy" in r]
    assert [r["epoch"] for r in evaluations] == [1.0, 2.0]
    assert evaluations[0]["val_knn_k"] in (3, 5) and "val_probe_top1" not in evaluations[0]
    assert "val_probe_top1" in evaluations[1] and "val_knn_top1" not in evaluations[1]
    assert {"test_knn_top1", "test_knn_top1_k3", "test_probe_top1", "test_raw_pixels_knn_top1",
            "test_raw_pixels_probe_top1"} <= set(result.metrics)
    assert 0 <= result.metrics["test_knn_top1"] <= 1
    assert 0 <= result.metrics["test_raw_pixels_knn_top1"] <= 1  # random labels here: the value is chance's
    model = crate_nn.load(result.checkpoint)
    assert isinstance(model, DINO)
    images = torch.randn(3, 3, 8, 8)
    assert crate_nn.measure_layers(model.eval(), images).compression[0].mean > 0
    assert (tmp_path / "measurements" / "epoch_0002.json").is_file()
    assert (tmp_path / "measurements" / "layers_paper.png").stat().st_size > 0


def test_a_uniform_collapse_is_visible_in_metrics_and_warned_once(tmp_path, capfd):
    """τ_t = τ_s = 100: teacher and student output (almost) the uniform distribution. The logged monitors say so:
    teacher entropy ≈ log K and KL ≈ 0, at every log line and every evaluation; the run warns once."""
    result = train(tiny(tmp_path, epochs=2, teacher_temp=100.0, warmup_teacher_temp=100.0, student_temp=100.0))
    warnings = [line for line in capfd.readouterr().err.splitlines() if "the head has collapsed" in line]
    assert len(warnings) == 1 and "uniform output" in warnings[0]  # two evaluations, one warning
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    log_k = math.log(32)
    monitored = [(r["train_teacher_entropy"], r["train_kl"]) if "train_loss" in r else
                 (r["teacher_entropy"], r["teacher_student_kl"]) for r in records if "train_loss" in r or
                 "teacher_entropy" in r]
    assert len(monitored) == 6  # four log lines (log_every 2, 8 steps) and the evaluations of epochs 1 and 2
    for entropy, kl in monitored:
        # logits of the weight-normalised head lie in [−1, 1]: /100 keeps q within e^{±0.02} of uniform
        assert entropy > 0.999 * log_k and kl < 1e-3
    assert result.metrics["teacher_mean_entropy"] > 0.999 * log_k


def test_a_healthy_run_does_not_warn_and_the_monitors_name_each_collapse(tmp_path, capfd):
    result = train(tiny(tmp_path, epochs=1))  # at initialisation the prototypes' outputs differ: no collapse
    assert "collapsed" not in capfd.readouterr().err
    assert not any("raw_pixels" in k for k in result.metrics)  # the pixel control is opt-in (pixel_control)
    log_k = math.log(32)
    assert collapse({"teacher_student_kl": 1e-4, "teacher_entropy": 0.995 * log_k}, 32).startswith("uniform")
    assert collapse({"teacher_student_kl": 1e-4, "teacher_entropy": 0.005 * log_k}, 32).startswith("one prototype")
    assert collapse({"teacher_student_kl": 1e-4, "teacher_entropy": 0.5 * log_k}, 32) is None  # KL small, no mode
    assert collapse({"teacher_student_kl": 1e-2, "teacher_entropy": log_k}, 32) is None  # still a signal to learn


def test_the_initial_model_is_evaluated_when_asked(tmp_path):
    train(tiny(tmp_path, epochs=1, eval_at_start=True, knn_epochs=(0, 1)))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    knn = [r for r in records if "val_knn_top1" in r and not r.get("final")]  # the final one: tested above
    assert [r["step"] for r in knn] == [0, 4]  # the initial model, then after epoch 1
    with pytest.raises(ValueError, match="knn_epochs: 0 evaluates the initial model, which needs eval_at_start"):
        tiny(tmp_path, knn_epochs=(0,)).validate()


# ----------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize("overrides, match", [
    (dict(global_crops=0), "global_crops: expected a value ≥ 1, got 0"),
    (dict(global_crops=1, local_crops=0), "global_crops, local_crops: the loss compares two crops"),
    (dict(local_crop_size=16), r"local_crop_size: a local crop \(16\) larger than the global crops"),
    (dict(local_crop_size=6), "local_crop_size: 6 is not divisible by the backbone's patch_size=4"),
    (dict(teacher_momentum=1.5), "teacher_momentum: expected a value ≤ 1.0, got 1.5"),
    (dict(teacher_momentum_end=-0.1), "teacher_momentum_end: expected a non-negative value"),
    (dict(center_momentum=1.01), "center_momentum: expected a value ≤ 1.0"),
    (dict(ema=True), "ema: the DINO teacher already is the student's moving average"),
    (dict(model_args=dict(patch_size=4, dim=16, depth=1, heads=2, image_size=16)), r"model_args: \['image_size'\]"),
    (dict(model_args=dict(patch_size=3)), "model_args: image_size=8 is not divisible by patch_size=3"),
    (dict(global_crop_scale=(0.9, 0.4)), r"global_crop_scale: expected 0 < min ≤ max ≤ 1"),
    (dict(knn_epochs=(5,)), r"knn_epochs: \[5\] are after the last epoch"),
    (dict(student_temp=0.0), "student_temp: expected a positive value"),
    (dict(mean=(0.5,)), "mean, std: expected one value per channel"),
])
def test_bad_config_names_the_field(tmp_path, overrides, match):
    with pytest.raises((ValueError, TypeError), match=match):
        tiny(tmp_path, **overrides).validate()


def test_presets_and_command_line():
    imagenet = get_preset("dino_imagenet")
    imagenet.validate()
    assert imagenet.optim.lr == pytest.approx(0.001 * 1024 / 256) and imagenet.schedule.batch_size == 1024
    assert (imagenet.optim.weight_decay, imagenet.schedule.epochs, imagenet.optim.optimizer) == (0.005, 100, "adamw")
    get_preset("dino_digits").validate()
    from crate_nn.train import parse_args

    parsed = parse_args(["--preset", "dino_digits", "--teacher-momentum", "0.99", "--knn-ks", "10", "20"])
    assert isinstance(parsed, DINOTrainConfig) and parsed.distillation.teacher_momentum == 0.99 and parsed.frozen.knn_ks == (10, 20)
    with pytest.raises(SystemExit):
        parse_args(["--preset", "dino_digits", "--teacher-momentum", "1.5"])
