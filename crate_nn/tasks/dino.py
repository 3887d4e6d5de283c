"""CRATE-DINO (Sec. 4.1.3, App. C.3): self-distillation without labels, a student and its EMA teacher.

One optimizer step on a batch of images X (eqs. 76–79, DINO's recipe for what the paper leaves to it):

    crops       G global crops x_g and N local crops x_l of every image (`crate_nn.data.multicrop.MultiCrop`)
    teacher     q_g = softmax((h_t(f_t(x_g)) − c) / τ_t)               g = 1 … G, no gradient (stop-grad)
    student     log p_v = log_softmax(h_s(f_s(x_v)) / τ_s)             v over all G + N crops, eq. (77)
    loss        mean over the pairs (g, v ≠ g) and the batch of H(q_g, p_v) = −Σ_k q_g,k log p_v,k     eq. (76)
    update      θ_s by the engine's optimizer (78); then θ_t ← λ θ_t + (1 − λ) θ_s (79), λ on a cosine schedule
                from ``teacher_momentum`` to ``teacher_momentum_end``; c ← m c + (1 − m) · mean of the teacher's
                outputs over the global batch (all processes and micro-batches)
    schedules   τ_t: DINO's per-epoch linear warm-up from ``warmup_teacher_temp`` over
                ``warmup_teacher_temp_epochs`` epochs (np.linspace), then ``teacher_temp``; the last layer of the
                student's head receives no update during the first ``freeze_last_layer`` epochs; learning rate,
                weight decay (cosine, ``weight_decay`` → ``weight_decay_end``) and clipping are the engine's

The student and the teacher form one `crate_nn.models.dino_head.DINO` model, so checkpoints carry both and
`crate_nn.load` returns a model whose ``forward_features`` is the teacher's backbone (eq. 80). The loss, the
temperatures, the centre and its all-reduce are the objective's (`crate_nn.tasks.dino_loss.DINOLoss`), whose state
(the centre) the task's state carries in checkpoints (``--run.resume``); a checkpoint written when the centre was the
model's (``center`` in its weights) resumes with that centre. Logged: the collapse monitors every ``log_every``
steps (``train_teacher_entropy``: mean entropy of q; ``train_teacher_mean_entropy``: entropy of the batch-mean q;
``train_kl``: mean KL(q_g ‖ p_v) over the loss pairs) and at every evaluation on un-augmented held-out images
(``teacher_entropy``, ``teacher_mean_entropy``, ``teacher_student_kl``, same view for both:
`crate_nn.evaluation.collapse.CollapseMonitors`). Collapse to one prototype drives both entropies to 0, collapse to
the uniform output drives both to log K; both drive the KL to 0. The weighted k-NN (``knn_epochs``, and always at the
end) and the linear probe (``probe_epochs``, solver ``probe_solver``) read the teacher's class token (eq. 80), which
every process extracts a shard of; both run once, in the main process. White-box measurements (per-layer R^c,
sparsity) of the teacher at ``measure_epochs`` under ``measurements/``.

Reproducibility: a run resumes bit for bit, and the same command on the same number of processes repeats it; but
the crops are drawn by each process's own random stream (the engine seeds process r with seed·1000 + 1 + r), so a
run on 2 processes differs from one on 1 process or 8 (CRATE-MAE, whose masks are keyed per image by (seed, epoch,
index), does not).

``objective="simdino"`` replaces the loss by SimDINO's (`crate_nn.tasks.simdino`: no prototypes, no centre, no
temperatures; cosine alignment of the same pairs plus the coding rate of the global views), keeping the crops, the
EMA teacher, the schedules and the evaluations; its monitors are the teacher's coding rate ``teacher_rate``, the
effective rank ``teacher_rank`` of its features and the cosine ``teacher_student_cos`` on held-out images, and it
warns when the rank falls below `crate_nn.tasks.simdino.COLLAPSE_RANK`.

Presets: ``dino_imagenet`` (App. C.3 on ImageNet-1K, GPUs) and ``dino_digits`` (scikit-learn's digits, CPU);
``simdino_imagenet`` and ``simdino_digits`` likewise for SimDINO.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from ..data.batching import Batch
from ..data.multicrop import MultiCrop
from ..engine.config import (
    EvaluationSection,
    OptimSection,
    RunSection,
    ScheduleSection,
    Section,
    TrainConfig,
    option,
    section,
)
from ..engine.distributed import Context
from ..engine.ema import ema_update
from ..engine.schedule import cosine
from ..engine.task import LossOutput, Task, preset, register_task
from ..evaluation.cadence import Cadence, due, final
from ..evaluation.collapse import CollapseMonitors
from ..evaluation.frozen import FrozenEvaluator, model_features
from ..evaluation.knn import KNN_KS, KNN_TEMPERATURE
from ..evaluation.layers import LayerMeasurements
from ..models.dino_head import DINO, DINOConfig
from ..models.registry import list_models, model_config, unwrap_model
from .dino_loss import DINOLoss, DINOLossSection
from .images import (  # noqa: F401 (DATA_LAYOUTS: crate-train --help)
    DATA_LAYOUTS,
    FrozenEvaluationSection,
    ImageDataSection,
    MeasureSection,
    evaluation_transform,
    image_split,
    image_splits,
    refuse_model_args,
)
from .simdino import SimDINOLoss, SimDINOLossSection

OBJECTIVES = ("dino", "simdino")

@dataclass
class DINOModelSection(Section):
    """The backbone: a registered classifier, read at its class token (eq. 80)."""

    model: str = option("crate_small", "a registered classifier used as backbone (its class token, eq. 80)",
                        choices=tuple(list_models(family="classifier")))
    model_args: dict = option(factory=dict, help="backbone config overrides KEY=VALUE (image_size and in_channels "
                                                 "come from the data)")


@dataclass
class DINOHeadSection(Section):
    """The projection head and the backbone's token initialisation: what `DINOConfig` (which this section builds,
    with the backbone's config) adds to the backbone's."""

    component = DINOConfig

    projection: str = option("dino", "projection head of the dino objective: dino (official DINO head) or paper "
                             "(eq. 75); the simdino objective has its own (the DINO head without prototypes)",
                             choices=("dino", "paper"))
    out_dim: int | None = option(65536, "K, the head's output width; None: d (the paper's head as printed)",
                                 minimum=1)
    hidden_dim: int = option(2048, "DINO head: hidden width", minimum=1)
    bottleneck_dim: int = option(256, "DINO head: bottleneck width before the normalised last layer", minimum=1)
    projection_layers: int = option(3, "DINO head: Linear layers of the MLP", minimum=1)
    norm_last_layer: bool = option(True, "DINO head: last layer with unit-norm rows (gain frozen at 1)")
    token_init_std: float | None = option(0.02, "σ of the backbone's class token and position embedding at "
                                                "initialisation (DINO's ViT: 0.02); None: the classifier's N(0, 1)",
                                          minimum=0.0)


@dataclass
class CropsSection(Section):
    """DINO's multi-crop augmentation, which this section builds (`crate_nn.data.multicrop.MultiCrop`, whose checks
    run when the config is validated): global crops of ``image_size`` (the data section's), local crops, their
    photometric augmentations."""

    component = MultiCrop
    reads = ("image_size", "load_size", "mean", "std")

    local_crop_size: int = option(96, "side of the local crops", minimum=1)
    global_crops: int = option(2, "global crops per image (seen by teacher and student)", minimum=1)
    local_crops: int = option(8, "local crops per image (seen by the student)", minimum=0)
    global_crop_scale: tuple[float, float] = option((0.4, 1.0), "global crops' area range (min max)", above=0.0,
                                                    maximum=1.0)
    local_crop_scale: tuple[float, float] = option((0.05, 0.4), "local crops' area range (min max)", above=0.0,
                                                   maximum=1.0)
    flip_p: float = option(0.5, "horizontal flip probability", minimum=0.0, maximum=1.0)
    color_jitter: tuple[float, float, float, float] = option(
        (0.4, 0.4, 0.2, 0.1), "brightness contrast saturation hue of the colour jitter", minimum=0.0)
    color_jitter_p: float = option(0.8, "colour jitter probability", minimum=0.0, maximum=1.0)
    grayscale_p: float = option(0.2, "grayscale probability (RGB only)", minimum=0.0, maximum=1.0)
    blur_sigma: tuple[float, float] = option((0.1, 2.0), "Gaussian blur σ range in pixels (min max)", above=0.0)
    blur_p: tuple[float, float, float] = option((1.0, 0.1, 0.5), "blur probability: global crop 1, global crop "
                                                "2, local crops", minimum=0.0, maximum=1.0)
    solarize_p: float = option(0.2, "solarisation probability of the second global crop", minimum=0.0,
                               maximum=1.0)


@dataclass
class DistillationSection(Section):
    """The objective — DINO's loss and centre (the ``dino`` section) or SimDINO's coding rate (``simdino``) — and
    the EMA teacher."""

    objective: str = option("dino", "dino: DINO's loss (76) with centring and sharpening; simdino: SimDINO's "
                            "coding-rate objective (crate_nn.tasks.simdino: the head without prototypes, cosine "
                            "alignment plus the coding rate R_ε; the DINO-only options are unused)",
                            choices=OBJECTIVES)
    teacher_momentum: float = option(0.996, "λ of eq. (79) at step 0", minimum=0.0, maximum=1.0)
    teacher_momentum_end: float = option(1.0, "λ at the end of its cosine schedule", minimum=0.0, maximum=1.0)
    freeze_last_layer: int = option(1, "epochs during which the head's last layer is not updated", minimum=0,
                                    span="epochs")


@dataclass
class KNNSection(FrozenEvaluationSection):
    """The weighted k-NN of the teacher's features (and the probe's solver: `FrozenEvaluationSection`): the options of
    `FrozenEvaluator`, which this section builds."""

    component = FrozenEvaluator
    reads = ("pixel_control", "seed", "num_workers")

    knn_ks: tuple[int, ...] = option(KNN_KS, "k of the weighted k-NN (the one with the best leave-one-out "
                                             "training accuracy is reported as knn_top1)", minimum=1)
    knn_temperature: float = option(KNN_TEMPERATURE, "T of the k-NN weights exp(s/T)", above=0.0)
    knn_select_samples: int | None = option(
        None, "training samples whose leave-one-out k-NN accuracy selects k; None = all", minimum=1,
        resume_free=True)


@dataclass
class DINOEvaluationSection(Section):
    """When the teacher's frozen evaluations (the k-NN, the linear probe: the ``frozen`` section) run, and the
    collapse monitors' images."""

    knn_epochs: tuple[int, ...] = option((), "epochs after which the k-NN accuracy on eval_split is logged (0: the "
                                             "initial model, with eval_at_start; and always at the end of "
                                             "training: on test_split, else eval_split)",
                                         minimum=0, span="epochs")
    probe_epochs: tuple[int, ...] = option(
        (), "epochs after which the linear probe (App. C.2) on eval_split is logged (0: the initial model, with "
        "eval_at_start); non-empty: also at the end", minimum=0, span="epochs")
    monitor_samples: int = option(1024, "held-out images of the collapse monitors at every evaluation", minimum=1,
                                  resume_free=True)


@dataclass
class DINOTrainConfig(TrainConfig):
    """A CRATE-DINO run: the engine's sections, the backbone and head, the crops, the distillation and its two
    objectives, the image data, the frozen evaluations and their cadence, the measurements (the checks across
    sections are its `check`)."""

    task = "dino"

    network: DINOModelSection = section(DINOModelSection)
    head: DINOHeadSection = section(DINOHeadSection)
    crops: CropsSection = section(CropsSection)
    distillation: DistillationSection = section(DistillationSection)
    dino: DINOLossSection = section(DINOLossSection)
    simdino: SimDINOLossSection = section(SimDINOLossSection)
    data: ImageDataSection = section(ImageDataSection)
    frozen: KNNSection = section(KNNSection)
    cadence: DINOEvaluationSection = section(DINOEvaluationSection)
    measure: MeasureSection = section(MeasureSection)

    def check(self) -> None:
        """The teacher against the engine's EMA, the objective against the head, the evaluation epochs against
        ``eval_at_start``, the backbone against the data and the local crops."""
        if self.optim.ema:
            raise ValueError("ema: the DINO teacher already is the student's moving average (teacher_momentum); "
                             "the engine's ema would average both networks again")
        if self.distillation.objective == "simdino" and self.head.projection == "paper":
            raise ValueError("projection: the paper head (75) outputs DINO's softmax logits; SimDINO's objective reads "
                             "the DINO head's bottleneck (leave --head.projection at dino)")
        for name in ("knn_epochs", "probe_epochs"):
            if 0 in self.get(name) and not self.evaluation.eval_at_start:
                raise ValueError(f"{name}: 0 evaluates the initial model, which needs eval_at_start "
                                 "(--evaluation.eval-at-start)")
        refuse_model_args(self.network.model_args, {"image_size", "in_channels", "dynamic_img_size"},
                          "are set by the task (--data.image-size and the dataset; local crops need dynamic_img_size)")
        try:
            config = self.model_config(in_channels=len(self.data.mean))
        except (TypeError, ValueError) as err:
            raise ValueError(f"model_args: {err}") from err
        if self.crops.local_crop_size % config.patch_size:
            raise ValueError(f"local_crop_size: {self.crops.local_crop_size} is not divisible by the backbone's "
                             f"patch_size={config.patch_size}")

    def smoke(self, steps: int = 20, batch_size: int = 32, **overrides) -> DINOTrainConfig:
        """`TrainConfig.smoke` without the slow extra work: no layer-wise measurements, no intermediate k-NN or
        probe (the final k-NN stays: it checks the evaluation path)."""
        quiet = dict(measure_epochs=(), knn_epochs=(), probe_epochs=())
        return super().smoke(steps, batch_size, **{**quiet, **overrides})

    def model_config(self, in_channels: int) -> DINOConfig:
        """The DINO model's config: the backbone ``model`` with ``model_args``, the data's sizes, the head."""
        backbone = model_config(self.network.model, **self.network.model_args, image_size=self.data.image_size,
                                in_channels=in_channels, dynamic_img_size=True)
        projection = "simdino" if self.distillation.objective == "simdino" else self.head.projection
        return self.build("head", **dataclasses.asdict(backbone), projection=projection)

    @property
    def evals(self) -> dict[str, Cadence]:
        """The run's evaluators named with their cadence: ``layers`` after ``measure_epochs``, ``knn`` after
        ``knn_epochs`` and at the end, ``probe`` after ``probe_epochs`` and, when they name any, at the end."""
        return {**self.measure.evals, "knn": Cadence(self.cadence.knn_epochs, final=True),
                "probe": Cadence(self.cadence.probe_epochs, final=bool(self.cadence.probe_epochs))}

    def frozen_evaluator(self, memory, transform, device, batch_size: int) -> FrozenEvaluator:
        """The frozen evaluation of this run's features (`crate_nn.evaluation.frozen`, built by `KNNSection`): the
        k-NN and the probe, by default those `evals` runs at the end, and with ``pixel_control`` the raw pixels,
        trained on ``memory`` (``train_split`` without augmentation), extracting ``batch_size`` images at a time."""
        ends = final(self.evals)
        return self.build("frozen", memory=memory, transform=transform, device=device, knn="knn" in ends,
                          probe="probe" in ends, batch_size=batch_size)


def build_objective(config: DINOTrainConfig, prototypes: int, ctx: Context | None = None) -> DINOLoss | SimDINOLoss:
    """The loss module of ``config.distillation.objective`` — `DINOLoss` of K = ``prototypes`` (the ``dino``
    section) or `SimDINOLoss` (the ``simdino`` section) — on the CPU, communicating over ``ctx``'s processes (None:
    one process)."""
    if config.distillation.objective == "simdino":
        return config.build("simdino", ctx=ctx)
    return config.build("dino", prototypes=prototypes, ctx=ctx)


def load_objective(objective: DINOLoss | SimDINOLoss, state: dict, model: nn.Module) -> None:
    """Give ``objective`` its state from a checkpoint's task state ``state`` (`DINOTask.state_dict`). A checkpoint
    written when the centre was the model's holds none there; its centre, ``center`` in the weights, was set aside
    when ``model`` loaded them (`crate_nn.models.dino_head.DINO.legacy_center`) and becomes the objective's."""
    if "objective" in state:
        objective.load_state_dict(state["objective"])
        return
    legacy = getattr(unwrap_model(model), "legacy_center", None)
    if legacy is not None and isinstance(objective, DINOLoss):
        objective.load_state_dict({"center": legacy})


@register_task(DINOTrainConfig)
class DINOTask(Task):
    """DINO self-distillation of a CRATE backbone (module docstring)."""

    unit = "images"
    config: DINOTrainConfig

    def __init__(self, config: DINOTrainConfig, ctx) -> None:
        super().__init__(config, ctx)
        self.collapse_warned = False
        self.train_set, self.eval_set, self.test_set = image_splits(config)
        info = self.train_set.info
        # the training images without augmentation: the k-NN's and the probe's training features
        self.feature_set = image_split(config, config.data.train_split, info.classes)
        self.model = DINO(config.model_config(info.in_channels))
        self.multicrop = config.build("crops").to(ctx.device)
        self.eval_transform = evaluation_transform(config.data).to(ctx.device)
        self.objective = build_objective(config, self.model.config.prototypes, ctx).to(ctx.device)
        self.collapse_monitors = CollapseMonitors(self.eval_set, self.eval_transform, ctx.device,
                                                  samples=config.cadence.monitor_samples,
                                                  precision=config.run.precision)
        self.layers = (LayerMeasurements(self.eval_set, self.eval_transform, ctx.device,
                                         samples=config.measure.measure_samples)
                       if ctx.is_main and config.measure.measure_epochs else None)

    # -- training -------------------------------------------------------------------------------------------
    def loss(self, model: nn.Module, batch: Batch) -> LossOutput:
        globals_, locals_ = self.multicrop(batch.images.to(self.ctx.device, non_blocking=True))
        student, teacher = model(globals_, locals_)
        batch_size = len(batch.images)
        # bf16 autocast → the softmaxes in float32
        student = student.float().unflatten(0, (-1, batch_size))
        teacher = teacher.float().unflatten(0, (-1, batch_size))
        out = self.objective(student, teacher, self.clock.epoch)
        return LossOutput(out.loss, metrics=out.logged(), counts={"skipped_images": len(batch.skipped)})

    def before_optimizer_step(self, model: nn.Module, step: int, epoch: int) -> None:
        if epoch < self.config.distillation.freeze_last_layer:
            for p in unwrap_model(model).student.head.last_layer.parameters():
                p.grad = None  # AdamW skips parameters without a gradient: no update, no weight decay

    def after_optimizer_step(self, model: nn.Module, step: int) -> None:
        c = self.config.distillation
        ema_update(model.teacher, model.student, cosine(step, self.plan.total_steps, c.teacher_momentum,
                                                        c.teacher_momentum_end))
        self.objective.update()  # DINO's centre: the teacher sums of the step over every process

    # -- evaluation -----------------------------------------------------------------------------------------
    def monitors(self, model: nn.Module) -> dict[str, float]:
        """The collapse monitors on un-augmented held-out images (teacher and student see the same image), by the
        objective at the current epoch (`CollapseMonitors`)."""
        return self.collapse_monitors(model, self.objective, self.clock.epoch)

    def frozen_evaluator(self) -> FrozenEvaluator:
        """The k-NN and probe of this run (`DINOTrainConfig.frozen_evaluator`) on its training split, extracting
        micro-batches of the run's size."""
        return self.config.frozen_evaluator(self.feature_set, self.eval_transform, self.ctx, self.plan.micro_batch)

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        step, epoch = self.clock
        epoch = epoch if step % self.plan.steps_per_epoch == 0 else None  # the k-NN and probe epochs: at their end
        monitors = self.monitors(model)
        if self.ctx.is_main and not self.collapse_warned:
            found = self.objective.collapse(monitors)
            if found:
                print(f"{self.config.distillation.objective}: warning: the head has collapsed at step {step} "
                      f"({found}); the backbone's k-NN may stop improving (see docs/dino.md)", file=sys.stderr)
                self.collapse_warned = True
        evals = due(self.config.evals, epoch)
        return {**monitors, **self.frozen_evaluator()(
            model_features(model, precision=self.config.run.precision), self.eval_set, "val", knn="knn" in evals,
            probe="probe" in evals, pixel_control=False)}

    def final_evaluate(self, model: nn.Module) -> dict[str, float]:
        """The final evaluators of `DINOTrainConfig.evals` (the k-NN, and the probe when ``probe_epochs`` is set), of
        the teacher and, with ``pixel_control``, of the raw pixels (``<prefix>_raw_pixels_…``): on ``test_split``,
        else ``eval_split``."""
        dataset, prefix = (self.test_set, "test") if self.test_set is not None else (self.eval_set, "val")
        return self.frozen_evaluator()(model_features(model, precision=self.config.run.precision), dataset, prefix)

    def epoch_end(self, model: nn.Module, epoch: int, run_dir: Path) -> None:
        if self.layers is not None and "layers" in due(self.config.evals, epoch):
            self.layers(model, epoch, run_dir / "measurements")

    # -- state ----------------------------------------------------------------------------------------------
    # the teacher is the model's (checkpointed with it), the step and the epoch the engine's clock (restored on
    # resume); the objective's state (DINO's centre) is the task's
    def state_dict(self) -> dict:
        """``{"objective": the loss module's state}`` (DINO: the centre; SimDINO: nothing)."""
        return {"objective": self.objective.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict`'s objective (`load_objective`; an older checkpoint's ``{"step": N}`` is ignored: the
        engine's clock replaces it)."""
        load_objective(self.objective, state, self.model)


# --------------------------------------------------------------------------------------------- presets
@preset
def dino_imagenet() -> DINOTrainConfig:
    """CRATE-DINO on ImageNet-1K (App. C.3, Table 4): CRATE-Small/16, 100 epochs.

    The paper's values: AdamW, base learning rate 0.001 with DINO's linear scaling rule lr = 0.001 × batch / 256
    (0.004 for the global batch of 1024; with ``--schedule.batch-size B`` pass ``--optim.lr`` 0.001·B/256
    yourself), weight decay 0.005, 100 epochs, linear warm-up then cosine. Everything else is the official DINO recipe (the paper: "chosen
    to exactly match"), with its defaults: global batch 1024 (the 16 GPUs × 64 of DINO's 100-epoch ViT-S/16 runs),
    10 warm-up epochs, cosine to lr 1e-6 (min_lr_ratio 2.5e-4), AdamW β = (0.9, 0.999), weight decay cosine from
    0.005 to DINO's weight_decay_end 0.4 (the paper changes "the weight decay parameter", DINO's initial value),
    gradient clipping 3.0 per parameter tensor, last layer frozen for 1 epoch, teacher momentum 0.996 → 1 (cosine),
    τ_s = 0.1, τ_t = 0.04 without warm-up, centre momentum 0.9, head: 3-layer MLP 2048 → bottleneck 256 → 65,536
    normalised prototypes (``--head.projection paper`` for eq. 75 with K = d: ``--head.out-dim None``), 2 global
    crops 224² (scale 0.4–1) + 8 local crops 96² (scale 0.05–0.4), DINO's photometric augmentations. Differences forced by
    this codebase: bf16 autocast instead of fp16 with a loss scaler; no stochastic depth (DINO's drop_path 0.1: CRATE
    layers have none); crops drawn from the central 256² square (``--data.load-size`` raises it); k-NN (T = 0.07,
    k ∈ {10, 20, 100, 200}, k chosen by the leave-one-out accuracy of 10,000 training images) at the end only;
    the linear probe with ``--cadence.probe-epochs 100`` (with ``--frozen.probe-solver adam``: on the GPU, the weight
    decay chosen on held-out training images; sklearn on 1.28M × d features would take hours). ``--network.model
    crate_base --network.model-args patch_size=8`` trains the paper's CRATE-B/8; ``--network.model vit_small`` the
    ViT-S/16 baseline.

    Command (one GPU, 8 accumulated micro-batches of 128):
        crate-train --preset dino_imagenet --data.data-dir /data/imagenet --schedule.micro-batch-size 128
    8 GPUs:  torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset dino_imagenet \\
                 --data.data-dir /data/imagenet --schedule.micro-batch-size 128
    Expected (Table 4): k-NN 53.02%, linear probe 58.41% (CRATE-S/16); CRATE-B/8 59.91% / 67.42%. Wall time: not
    measured here; DINO reports ≈ 24 h for 100 epochs of ViT-S/16 on 16 V100s.
    """
    return DINOTrainConfig(
        network=DINOModelSection(model="crate_small"), data=ImageDataSection(dataset="imagenet"),
        frozen=KNNSection(knn_select_samples=10000), measure=MeasureSection(measure_epochs=(0, 100)),
        optim=OptimSection(optimizer="adamw", lr=0.001 * 1024 / 256, betas=(0.9, 0.999), weight_decay=0.005,
                           weight_decay_end=0.4, grad_clip=3.0, grad_clip_mode="per_tensor"),
        schedule=ScheduleSection(batch_size=1024, epochs=100, warmup_epochs=10.0,
                                 min_lr_ratio=1e-6 / (0.001 * 1024 / 256)),
        run=RunSection(output_dir="runs/dino_imagenet", num_workers=10),
    )


@preset
def dino_digits() -> DINOTrainConfig:
    """CRATE-DINO on scikit-learn's 8×8 digits: a small CRATE pre-trained without labels on a CPU (tests, audit).

    The diff from DINO's recipe (the sections' defaults): backbone as the ``digits`` classification preset (CRATE,
    patch 4, d = 96, 3 layers, 4 heads) on digits upsampled to 16² (bilinear, antialiased) before cropping: global
    crops 16² (4×4 patches + [CLS]; at 8² a crop would be 2×2 patches), local crops 8² (2×2 patches; 4 of them
    instead of DINO's 8, for CPU time), local crop scales (0.1, 0.4) (DINO's 0.05 of 16² is a 3.6-pixel box). No
    flip (digits are not flip-invariant); colour jitter, blur and solarisation off. Head: DINO's 3-layer MLP 256 →
    bottleneck 64 → K = 1024 normalised prototypes (65,536 for 1,293 images is pointless on a CPU). AdamW β = (0.9,
    0.999), lr 5e-3, weight decay cosine 0.04 → 0.4 (DINO's defaults), clipping 3.0 per tensor, batch 64, 15 epochs
    (≈ 300 steps) with a 2-epoch warm-up, teacher momentum 0.99. The initial model is evaluated too (k-NN at epoch
    0: the baseline the run's summary prints beside the final k-NN, with the raw pixels' k-NN,
    ``test_raw_pixels_knn_top1``, the strongest trivial control). Source: chosen here on validation k-NN (photometric
    augmentations, learning rate, τ_t, K, batch, teacher momentum), with what the collapse monitors showed:
    ``results/presets/dino_digits.md``; the run warns once (`collapse`) when the monitors cross their thresholds.

    Command:  crate-train --preset dino_digits
    Expected (seeds 0–2, mean ± std; ``python -m verify --only dino --full`` re-measures): k-NN top-1 of the
    teacher on the 360 test digits 72.8 ± 1.7% vs 67.6 ± 1.1% for the same model at its initialisation (linear
    probe 77.8 ± 1.0% vs 75.2 ± 1.7%); the supervised ``digits`` preset with this backbone at 16² reaches k-NN
    97.8 ± 0.7%. The teacher's output is uniform at the end (entropy 6.9313 of log K = 6.9315). Validation k-NN
    logged at the start and after epochs 5 and 10; time: the table of the presets' times in docs/training.md (``python -m benchmarks.presets``).
    """
    return DINOTrainConfig(
        network=DINOModelSection(model="crate_tiny", model_args=dict(patch_size=4, dim=96, depth=3, heads=4)),
        head=DINOHeadSection(out_dim=1024, hidden_dim=256, bottleneck_dim=64),
        data=ImageDataSection(dataset="digits", image_size=16, load_size=16, eval_resize=16, test_split="test",
                              mean=(0.5,), std=(0.5,), pixel_control=True),
        crops=CropsSection(local_crop_size=8, local_crops=4, local_crop_scale=(0.1, 0.4), flip_p=0.0,
                           color_jitter_p=0.0, blur_p=(0.0, 0.0, 0.0), solarize_p=0.0),
        distillation=DistillationSection(teacher_momentum=0.99),
        cadence=DINOEvaluationSection(knn_epochs=(0, 5, 10), monitor_samples=144),
        measure=MeasureSection(measure_epochs=(0, 15), measure_samples=144),
        optim=OptimSection(optimizer="adamw", lr=5e-3, betas=(0.9, 0.999), weight_decay=0.04, weight_decay_end=0.4,
                           grad_clip=3.0, grad_clip_mode="per_tensor"),
        schedule=ScheduleSection(batch_size=64, epochs=15, warmup_epochs=2.0),
        evaluation=EvaluationSection(eval_at_start=True),
        run=RunSection(num_workers=0, checkpoint_every=0, log_every=10, output_dir="runs/dino_digits",
                       precision="fp32"),
    )



@preset
def simdino_imagenet() -> DINOTrainConfig:
    """SimDINO on ImageNet-1K, the public code's ViT-B/16 recipe (RobinWu218/SimDINO, ``simdino/main_dino.py`` and
    its README's command), with a CRATE-B/16 backbone.

    The public values: AdamW β = (0.9, 0.999), learning rate 0.0005 × batch / 256 (0.001 for its 8 GPUs × 64 = 512),
    cosine to 1e-6 after 10 warm-up epochs, weight decay cosine 0.04 → 0.4, clipping 3.0 per tensor, 100 epochs,
    teacher momentum 0.996 → 1, head MLP 2048 → bottleneck 256 without prototypes, 2 global crops 224² (scale
    0.4–1) and 10 local crops 96² (0.05–0.4) with DINO's photometric augmentations, ε² = 0.05 (``--eps 0.05``:
    ``rate_eps`` = √0.05), alignment weight 1, expansion of the averaged student and teacher views (``expa_type``
    1). Differences forced by this codebase: bf16 autocast instead of fp16 with a loss scaler; no stochastic depth
    (the public drop_path 0.1); the covariance summed over processes (the public default sums none and scales the
    local one as if it held every process's images: `crate_nn.tasks.simdino`); crops from the central 256² square.

    Command (one GPU, 8 accumulated micro-batches of 64):
        crate-train --preset simdino_imagenet --data.data-dir /data/imagenet --schedule.micro-batch-size 64
    8 GPUs:  torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset simdino_imagenet \\
                 --data.data-dir /data/imagenet
    Expected: the public ViT-B/16 (``--network.model vit_base``) reaches k-NN 74.9%, linear probe 77.3% (its README; its
    DINO ViT-B/16: 72.9% / 76.3%); no CRATE result is published. Wall time: not measured here; the public README
    gives ≈ 1.5 days on 8 GPUs for ViT-B/16. Note that with gradient accumulation the coding rate is that of each
    micro-batch over the processes (8 × 64 = 512 images here, as in the public run).
    """
    return dino_imagenet().replace(
        objective="simdino", model="crate_base", rate_eps=math.sqrt(0.05), alignment_coeff=1.0,
        expansion_views="average", lr=0.0005 * 512 / 256, batch_size=512, weight_decay=0.04, weight_decay_end=0.4,
        min_lr_ratio=1e-6 / (0.0005 * 512 / 256), local_crops=10, hidden_dim=2048, bottleneck_dim=256,
        output_dir="runs/simdino_imagenet")


@preset
def simdino_digits() -> DINOTrainConfig:
    """SimDINO (`crate_nn.tasks.simdino`) on scikit-learn's 8×8 digits: ``dino_digits``' recipe (backbone, crops,
    teacher momentum 0.99, lr 5e-3, 15 epochs) with SimDINO's objective in place of DINO's, ε = √0.05 (the public
    ViT-B/16 command's ``--eps 0.05``), the head's MLP 256 → bottleneck 64 as the coded features.

    Tuning history (ε, learning rate, expansion, alignment weight, longer runs, mnist5k; validation k-NN):
    ``results/presets/simdino_digits.md``. The preset keeps DINO's schedule so that the two objectives are compared at
    one recipe (``simdino-readme-vs-dino``).

    Command:  crate-train --preset simdino_digits
    Expected: see the self-supervision table of docs/dino.md (``python -m verify --full --only simdino`` re-measures);
    time: the table of the presets' times in docs/training.md (``python -m benchmarks.presets``).
    """
    return dino_digits().replace(objective="simdino", rate_eps=math.sqrt(0.05), output_dir="runs/simdino_digits")
