"""Masked autoencoding with CRATE-MAE (Sec. 4.1.2, App. C.2): pre-training, reconstructions, linear probe.

Loss: the model's (`crate_nn.models.mae.CRATEMAE`): per-patch pixel MSE on the masked patches (official wiring)
or on the whole image (paper wiring, eq. 71), targets optionally normalised per patch. Masks: each image's mask
is drawn from a generator keyed by (seed, epoch, dataset index), so a resumed run, another world size or another
micro-batch split sees the same masks; evaluation masks are keyed by (seed, index) alone, so the held-out loss of
every epoch is measured on the same masked images.

Evaluation: the held-out reconstruction loss (``val_recon_loss``) every ``eval_every`` epochs; at the end the
reconstruction loss of the training split and of ``test_split`` under the evaluation masks, and with ``probe`` the
linear probe (App. C.2: `crate_nn.evaluation.linear_probe`, the solver ``probe_solver``) of the trained encoder and
of the same model at its initialisation, on ``train_split`` → ``test_split`` (``eval_split`` without one), fit once
(main process) on features every process extracts a shard of. Reconstruction figures
(`crate_nn.analysis.reconstruction`, Fig. 11) after the epochs in ``figure_epochs`` under ``<output_dir>/figures/``.
Fine-tuning goes through the classification task (``--network.init-from`` a CRATE-MAE checkpoint; presets
``mae_finetune`` and ``mae_digits_finetune``).

Presets (each docstring gives the command, the wall time and the expected result): ``mae_imagenet`` (the paper's
recipe), ``mae_digits`` (CPU, minutes), ``mae_finetune``, ``mae_digits_finetune``.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from ..data.batching import Batch, collate
from ..engine.config import (
    OptimSection,
    RunSection,
    ScheduleSection,
    Section,
    TrainConfig,
    option,
    section,
)
from ..engine.precision import autocast
from ..engine.task import LossOutput, Task, get_preset, preset, register_task
from ..evaluation import FrozenEvaluator, model_features, raw_pixels
from ..evaluation.cadence import Cadence, due, final
from ..evaluation.sharded import map_reduce
from ..models.mae import check_mask_ratio, random_mask
from ..models.registry import create_model, list_models, model_config, unwrap_model
from .classification import ClassificationConfig
from .images import (  # noqa: F401 (DATA_LAYOUTS: crate-train --help)
    DATA_LAYOUTS,
    AugmentSection,
    FrozenEvaluationSection,
    ImageDataSection,
    image_splits,
    image_transforms,
    refuse_model_args,
)

TRAIN_STREAM, EVAL_STREAM = 0, 1
DIGITS_MODEL = dict(patch_size=2, dim=64, depth=3, heads=4)  # the mae_digits encoder (and its classifier)
DIGITS_MEAN, DIGITS_STD = (0.305,), (0.376,)  # the digits training split's pixel mean and std
_MASK64 = (1 << 64) - 1


def _mix(*values: int) -> int:
    """A 64-bit key from non-negative integers (SplitMix64 steps): stable across platforms and Python versions."""
    h = 0
    for v in values:
        h = (h + 0x9E3779B97F4A7C15 + v) & _MASK64
        h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & _MASK64
        h ^= h >> 31
    return h


def mask_noise(seed: int, stream: int, epoch: int, indices: torch.Tensor, num_patches: int) -> torch.Tensor:
    """Uniform noise (B, N) on the CPU, row i drawn from a generator keyed by (seed, stream, epoch, indices[i]):
    the masking of an image depends on nothing else (not its batch, rank or micro-batch)."""
    generator = torch.Generator()
    rows = []
    for index in indices.tolist():
        generator.manual_seed(_mix(seed, stream, epoch, index))
        rows.append(torch.rand(num_patches, generator=generator))
    return torch.stack(rows)


@dataclass
class MAEModelSection(Section):
    """The CRATE-MAE to pre-train."""

    model: str = option("crate_mae_base", "a registered CRATE-MAE (crate_nn.list_models(family='mae'))",
                        choices=tuple(list_models(family="mae")))
    model_args: dict = option(factory=dict, help="config overrides KEY=VALUE, e.g. wiring='paper' norm_pix_loss=True "
                                                 "(image_size and in_channels come from the data)")


@dataclass
class MaskingSection(Section):
    """Which patches the encoder sees (`mask_noise`: keyed per image by seed, epoch and index)."""

    mask_ratio: float = option(0.75, "fraction of each image's patches masked, in (0, 1)", above=0.0, maximum=1.0)


@dataclass
class MAEProbeSection(FrozenEvaluationSection):
    """The linear probe of the encoder at the end (its solver: `FrozenEvaluationSection`)."""

    probe: bool = option(False, "at the end: linear probe (App. C.2) of the encoder and of its initialisation")
    probe_pool: str = option("mean", "probe features: mean over tokens (eq. 72) or the class token",
                             choices=("mean", "cls"))


@dataclass
class FiguresSection(Section):
    """Reconstruction figures (`crate_nn.analysis.reconstruction`, Fig. 11) of held-out images during training."""

    figure_epochs: tuple[int, ...] = option((), "epochs after which a reconstruction figure is saved (0 = init)",
                                            minimum=0, span="epochs")
    figure_samples: int = option(8, "held-out images in each reconstruction figure", minimum=1, resume_free=True)


@dataclass
class MAEConfig(TrainConfig):
    """A CRATE-MAE pre-training run: the engine's sections, the model, the masking, the image data and their
    augmentation, the probe, the reconstruction figures."""

    task = "mae"

    network: MAEModelSection = section(MAEModelSection)
    masking: MaskingSection = section(MaskingSection)
    data: ImageDataSection = section(ImageDataSection)
    augmentation: AugmentSection = section(AugmentSection)
    frozen: MAEProbeSection = section(MAEProbeSection)
    figures: FiguresSection = section(FiguresSection)

    @property
    def evals(self) -> dict[str, Cadence]:
        """The run's evaluators named with their cadence (`crate_nn.evaluation.cadence`): ``reconstructions`` after
        ``figure_epochs``, the ``probe`` at the end when asked for."""
        return {"reconstructions": Cadence(self.figures.figure_epochs), "probe": Cadence(final=self.frozen.probe)}

    def check(self) -> None:
        """The model against the data, the masking against its patches, the probe's pooling against its wiring."""
        network = self.network
        refuse_model_args(network.model_args, {"image_size", "in_channels"})
        try:
            config = model_config(network.model, **network.model_args, image_size=self.data.image_size,
                                  in_channels=len(self.data.mean))
        except (TypeError, ValueError) as err:
            raise ValueError(f"model_args: {err}") from err
        check_mask_ratio(self.masking.mask_ratio, config.num_patches)
        if self.frozen.probe_pool == "cls" and config.wiring == "paper":
            raise ValueError("probe_pool: the paper wiring has no class token; use 'mean'")


@register_task(MAEConfig)
class MAETask(Task):
    """Masked autoencoding of images by a registered CRATE-MAE."""

    unit = "images"

    def __init__(self, config: MAEConfig, ctx) -> None:
        super().__init__(config, ctx)
        self.train_set, self.eval_set, self.test_set = image_splits(config)
        self.model = self.initial_model()
        self.num_patches = self.model.config.num_patches
        self.train_transform, self.eval_transform = image_transforms(config, ctx.device)

    def initial_model(self) -> nn.Module:
        """The model at initialisation, a function of the seed alone (the global RNG is left untouched), so that
        the probe can rebuild it after training."""
        config = self.config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.run.seed)
            return create_model(config.network.model, **{**config.network.model_args,
                                                         "image_size": config.data.image_size,
                                                         "in_channels": self.train_set.info.in_channels})

    def masks(self, stream: int, epoch: int, indices: torch.Tensor) -> torch.Tensor:
        """(B, N) bool masks of the images with dataset ``indices`` (True = masked), on the device."""
        noise = mask_noise(self.config.run.seed, stream, epoch, indices, self.num_patches)
        return random_mask(noise, self.config.masking.mask_ratio).to(self.ctx.device, non_blocking=True)

    # -- training --------------------------------------------------------------------------------------------
    def loss(self, model: nn.Module, batch: Batch) -> LossOutput:
        for path in batch.skipped:
            tqdm.write(f"crate-train: skipped unreadable image {path}", file=sys.stderr)
        images = self.train_transform(batch.images.to(self.ctx.device, non_blocking=True))
        out = model(images, self.masks(TRAIN_STREAM, self.clock.epoch, batch.indices))
        return LossOutput(out.loss, counts={"skipped_images": len(batch.skipped)})

    # -- evaluation -------------------------------------------------------------------------------------------
    def reconstruction_loss(self, model: nn.Module, dataset, split: str) -> float:
        """Mean per-image loss of ``model`` on ``dataset`` (the config's ``split``) under the evaluation masks (all
        processes, `crate_nn.evaluation.sharded.map_reduce`)."""
        ctx = self.ctx

        def body(net: nn.Module, batch: Batch) -> dict:
            if not len(batch.indices):  # every file of this batch was unreadable
                return {}
            images = self.eval_transform(batch.images.to(ctx.device, non_blocking=True))
            with autocast(ctx.device, self.config.run.precision):
                out = net(images, self.masks(EVAL_STREAM, 0, batch.indices))
            return {"loss": out.image_loss.double().sum(), "images": len(images)}

        sums = map_reduce(model, dataset, body, ctx, batch_size=self.plan.micro_batch, sums=("loss", "images"),
                          count="images", collate_fn=self.collate, num_workers=self.config.run.num_workers,
                          what=f"{split} {self.config.get(split)!r}").sums
        return sums["loss"] / sums["images"]

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        return {"val_recon_loss": self.reconstruction_loss(model, self.eval_set, "eval_split")}

    def final_evaluate(self, model: nn.Module) -> dict[str, float]:
        metrics = {"train_recon_loss": self.reconstruction_loss(model, self.train_set, "train_split")}
        if self.test_set is not None:
            metrics["test_recon_loss"] = self.reconstruction_loss(model, self.test_set, "test_split")
        if "probe" in final(self.config.evals):
            metrics.update(self.probe(model))
        return metrics

    def probe(self, model: nn.Module) -> dict[str, float]:
        """Held-out accuracy of the linear probe (App. C.2) on the frozen, pooled encoder features of ``model``
        (``probe_top1``), of the same model at its initialisation (``probe_top1_random_init``) and, with
        ``pixel_control``, of the raw pixels (``probe_top1_raw_pixels``), trained on ``train_split``: every process
        extracts its shard of the features, the main process alone fits the probe (no metrics elsewhere)."""
        c = self.config
        evaluator = FrozenEvaluator(self.train_set, self.eval_transform, self.ctx, knn=False, probe=True,
                                    probe_solver=c.frozen.probe_solver, seed=c.run.seed,
                                    batch_size=self.plan.micro_batch, num_workers=c.run.num_workers)
        held_out = self.test_set if self.test_set is not None else self.eval_set
        pool = c.frozen.probe_pool
        encoders = {"probe_top1": model_features(unwrap_model(model).eval(), pool),
                    "probe_top1_random_init": model_features(self.initial_model().to(self.ctx.device).eval(), pool)}
        if c.data.pixel_control:
            encoders["probe_top1_raw_pixels"] = raw_pixels
        metrics = {}
        for name, features in encoders.items():
            result = evaluator.measure(features, held_out)
            if result is not None:
                metrics[name] = result.probe.accuracy
        return metrics

    def epoch_end(self, model: nn.Module, epoch: int, run_dir: Path) -> None:
        if "reconstructions" not in due(self.config.evals, epoch):
            return
        from ..analysis.reconstruction import reconstruct, reconstruction_figure

        count = min(self.config.figures.figure_samples, len(self.eval_set))
        batch = collate([self.eval_set[i] for i in range(count)])
        images = self.eval_transform(batch.images.to(self.ctx.device))
        rec = reconstruct(model, images, self.masks(EVAL_STREAM, 0, batch.indices))
        data = self.config.data
        figure = reconstruction_figure(rec, data.mean, data.std,
                                       title=f"{self.config.network.model}, epoch {epoch} ({data.eval_split} images)")
        (run_dir / "figures").mkdir(parents=True, exist_ok=True)
        figure.savefig(run_dir / "figures" / f"reconstructions_epoch_{epoch:04d}.png", dpi=120)


# --------------------------------------------------------------------------------------------- presets
@preset
def mae_imagenet() -> MAEConfig:
    """The paper's CRATE-MAE pre-training on ImageNet-1K (App. C.2): CRATE-MAE-Base, AdamW, 800 epochs.

    App. C.2: AdamW, learning rate 3e-5, weight decay 0.1, batch 4096, 40-epoch linear warm-up then cosine decay,
    800 epochs, random-resized crop + horizontal flip "as in He et al."; 75% masking (Fig. 11). Read here:

    * **3e-5 is taken as a base rate scaled by batch/256**, as FAIR's MAE script does with its ``--blr``:
      lr = 3e-5 × 4096/256 = 4.8e-4. Why: the authors trained with FAIR's MAE code ("use the FAIR MAE repo",
      their README), whose learning-rate option is that base rate; taken as an absolute rate it would be 80× below
      the rate FAIR's recipe uses at this batch size (1.5e-4 × 16 = 2.4e-3). The paper does not say which; for
      the other reading pass ``--optim.lr 3e-5``. With another ``--schedule.batch-size``, scale: ``--optim.lr`` =
      3e-5 × batch/256.
    * Not stated by the paper, taken from FAIR's MAE pre-training: AdamW β = (0.9, 0.95); no weight decay on
      norms, biases and the class/mask tokens; RandomResizedCrop scale (0.2, 1.0) (bilinear on the device, FAIR:
      bicubic); ImageNet mean/std normalisation; masks per image from (seed, epoch, image). ``norm_pix_loss`` is
      off, as in the authors' model code (FAIR recommends it on: ``--network.model-args norm_pix_loss=True``).
    * Reconstruction figures of 8 validation images after epochs 0, 1, 100, 400 and 800; bf16 autocast.

    Command (one GPU; 16 accumulated micro-batches of 256 make the batch of 4096):
        crate-train --preset mae_imagenet --data.data-dir /data/imagenet --schedule.micro-batch-size 256
    8 GPUs:  torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset mae_imagenet \\
                 --data.data-dir /data/imagenet --schedule.micro-batch-size 256
    Expected: reconstruction loss train 0.266 / val 0.303 (Table 2, CRATE-MAE-Base; the paper does not say whether
    with normalised targets); fine-tuned and probed as Table 3 (``mae_finetune``). ``--network.model
    crate_mae_small`` for CRATE-MAE-S. Wall time: not measured on a GPU yet (the tasks stage of ``make gpu-check`` times its step) and not
    reported by the paper; one epoch is 1.28M images through a 44.6M-parameter encoder-decoder over all 197 tokens.
    """
    return MAEConfig(
        network=MAEModelSection(model="crate_mae_base"), data=ImageDataSection(dataset="imagenet"),
        augmentation=AugmentSection(augment="rrc_flip", crop_scale=(0.2, 1.0)),
        figures=FiguresSection(figure_epochs=(0, 1, 100, 400, 800)),
        optim=OptimSection(optimizer="adamw", lr=3e-5 * 4096 / 256, weight_decay=0.1, betas=(0.9, 0.95)),
        schedule=ScheduleSection(batch_size=4096, epochs=800, warmup_epochs=40.0),
        run=RunSection(output_dir="runs/mae_imagenet"),
    )


@preset
def mae_digits() -> MAEConfig:
    """scikit-learn's 8×8 digits: a small CRATE-MAE pre-trained on a CPU in minutes (tests and audit use it).

    CRATE-MAE (official wiring, λ = 0.5) with image 8, patch 2: a 4×4 grid of 2×2 patches of which 12 are masked and
    4 stay visible (patch 4 would leave one visible patch of four, patch 1 makes a token of each pixel); d = 64, 4
    heads, 3 encoder and 3 decoder layers. Pixels normalised with the training split's mean and std (0.305, 0.376),
    so a loss of 1 is the error of predicting the mean. AdamW lr 3e-3, weight decay 0.05 (not on norms, biases,
    tokens), β = (0.9, 0.95), batch 64, 60 epochs with a 5-epoch warm-up; no augmentation (digits are not
    flip-invariant). Trained on the 1,293 training images; held-out loss on the 144 validation images each epoch and
    on the 360 test images at the end; the linear probe trains on the training split and tests on the test split,
    for the trained encoder and for the same model at its initialisation. Reconstruction figures of 8 validation
    images after epochs 0, 10 and 60. Source: the learning rate chosen here on the validation loss
    (``results/presets/mae_digits.md``).

    Command:  crate-train --preset mae_digits
    Expected (seeds 0–2, mean ± std): held-out test loss 0.395 ± 0.004 (predicting the training mean image gives
    0.521); linear probe 87.7 ± 2.0% for the pre-trained encoder vs 80.1 ± 3.6% for the same model at its
    initialisation. Time: the table of the presets' times in docs/training.md (``python -m benchmarks.presets``).
    """
    return MAEConfig(
        network=MAEModelSection(model="crate_mae_tiny", model_args=dict(DIGITS_MODEL)),
        data=ImageDataSection(dataset="digits", image_size=8, test_split="test", mean=DIGITS_MEAN, std=DIGITS_STD,
                              pixel_control=True),
        augmentation=AugmentSection(augment="none"), frozen=MAEProbeSection(probe=True),
        figures=FiguresSection(figure_epochs=(0, 10, 60)),
        optim=OptimSection(optimizer="adamw", lr=3e-3, weight_decay=0.05, betas=(0.9, 0.95)),
        schedule=ScheduleSection(batch_size=64, epochs=60, warmup_epochs=5.0),
        run=RunSection(num_workers=0, checkpoint_every=0, log_every=10, output_dir="runs/mae_digits",
                       precision="fp32"),
    )


_ENCODER_AS_CLASSIFIER = dict(patch_embed="conv", lam=0.5, pool="mean")
"""What a classifier needs to take a CRATE-MAE encoder (official wiring): its Conv2d stem, λ = 0.5 and the global
pooling head of eq. (72)."""


@preset
def mae_finetune() -> ClassificationConfig:
    """Full fine-tuning of a pre-trained CRATE-MAE-Base (Sec. 4.1.2, App. C.2: the fine-tuning configuration of
    App. C.1), CIFAR-10 by default.

    The ``finetune`` preset's recipe (AdamW lr 5e-5, weight decay 0.01, batch 512, 224² inputs, random-resized crop
    + flip + RandAugment(2, 14), 200 epochs) on a ``crate_base`` classifier shaped as the CRATE-MAE encoder:
    Conv2d patch embedding, λ = 0.5 and the global-pooling head of eq. (72) (``pool=mean``); the encoder, class token
    and sine-cosine table (then trainable) come from the checkpoint, the head is new. ``--network.model
    crate_small`` for CRATE-MAE-S (``--network.model crate_large --network.model-args depth=12 …`` for our L = 12 CRATE-MAE-L).

    Command:  crate-train --preset mae_finetune --network.init-from runs/mae_imagenet/checkpoints/last.pt \\
                  --data.dataset cifar10 --data.data-dir /data/cifar10
    Expected: top-1 CIFAR-10 96.8%, CIFAR-100 80.3%, Flowers-102 78.5%, Pets 76.7% from CRATE-MAE-B (Table 3);
    wall time as ``finetune`` (≈ 10 min per CIFAR-10 epoch on one A100).
    """
    return get_preset("finetune").replace(model="crate_base", model_args=dict(_ENCODER_AS_CLASSIFIER),
                                          output_dir="runs/mae_finetune")


@preset
def mae_digits_finetune() -> ClassificationConfig:
    """Fine-tuning of the ``mae_digits`` encoder on the digits labels — or, without ``--network.init-from``, the same
    classifier trained from scratch with the same recipe (the baseline).

    The ``digits`` classification recipe (AdamW lr 2e-3, weight decay 1.0, batch 64, 30 epochs, 3-epoch warm-up,
    no augmentation, test on the 360 held-out images) on a classifier shaped as the mae_digits encoder: patch 2,
    d = 64, 4 heads, 3 layers, Conv2d stem, λ = 0.5, mean pooling (eq. 72), the mae_digits normalisation.

    Command:  crate-train --preset mae_digits_finetune --network.init-from runs/mae_digits/checkpoints/last.pt
              (from scratch: crate-train --preset mae_digits_finetune)
    Expected: see docs/mae.md (test top-1 pre-trained vs from scratch, mean ± std over seeds);
    time: the table of the presets' times in docs/training.md (``python -m benchmarks.presets``).
    """
    return get_preset("digits").replace(model="crate_tiny", model_args=dict(DIGITS_MODEL, **_ENCODER_AS_CLASSIFIER),
                                        mean=DIGITS_MEAN, std=DIGITS_STD, measure_epochs=(),
                                        output_dir="runs/mae_digits_finetune")
