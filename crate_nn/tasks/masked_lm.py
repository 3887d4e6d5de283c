"""Masked language modelling (Sec. 4.1.4, App. C.4): CRATE-BERT (eq. 85) or the BERT baseline.

Windows of ``block_size`` tokens, masked dynamically (a new mask at every use, drawn from the engine's saved RNG so
resume is exact): 15% of the non-special tokens, 80% of them → ``<mask>``, 10% → a random token, 10% kept
(`Masking`, built by `TokenMaskingSection`); no next-sentence prediction; loss = eq. (85), the per-sequence mean over
the masked positions, averaged over sequences. Evaluation: ``val_loss`` and ``val_accuracy`` at masked positions
(fixed masks). The corpus, the measurements and the start from a checkpoint are the language tasks'
(`crate_nn.tasks.language`).

Presets: ``bert_wiki`` (the paper's recipe, GPUs), ``bert_stdlib`` (CPU, minutes).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..data.masking import IGNORE, Masking
from ..engine import distributed
from ..engine.config import (
    EvaluationSection,
    OptimSection,
    RunSection,
    ScheduleSection,
    Section,
    option,
    section,
)
from ..engine.task import LossOutput, preset, register_task
from ..evaluation.language import as_float, mlm_metrics, sequence_losses
from ..models.registry import list_models
from .language import (
    CPU_RUN,
    DATA_LAYOUTS,  # noqa: F401 (crate-train --help)
    CorpusSection,
    LanguageModelConfig,
    LanguageModelSection,
    LanguageModelTask,
    LMEvaluationSection,
)


@dataclass
class BERTModelSection(LanguageModelSection):
    """A masked LM: CRATE-BERT or the BERT baseline."""

    model: str = option("crate_bert_base", "a registered BERT-family model", choices=tuple(list_models(family="bert")))


@dataclass
class TokenMaskingSection(Section):
    """BERT's masking of the input tokens: the options of `crate_nn.data.masking.Masking`, which this section builds
    with the corpus's vocabulary (`Masking.check` runs when the config is validated)."""

    component = Masking

    mask_probability: float = option(0.15, "share of non-special tokens selected for prediction", above=0.0,
                                     maximum=1.0)
    mask_fraction: float = option(0.8, "share of the selected tokens replaced by <mask>", minimum=0.0, maximum=1.0)
    random_fraction: float = option(0.1, "share of the selected tokens replaced by a random token", minimum=0.0,
                                    maximum=1.0)


@dataclass
class MaskedLMConfig(LanguageModelConfig):
    """A masked-LM run (CRATE-BERT or the BERT baseline): the language models' sections, the model and the masking."""

    task = "masked_lm"

    network: BERTModelSection = section(BERTModelSection)
    masking: TokenMaskingSection = section(TokenMaskingSection)


@register_task(MaskedLMConfig)
class MaskedLMTask(LanguageModelTask):
    """Masked-token prediction, eq. (85), with dynamic masking."""

    extra = 0

    def __init__(self, config: MaskedLMConfig, ctx: distributed.Context) -> None:
        super().__init__(config, ctx)
        if self.corpus.mask_id is None:
            raise ValueError(f"data_dir: the tokenizer {self.corpus.tokenizer} has no <mask> token; a masked LM needs "
                             "one (hf:roberta-base, or the built-in bytes)")
        self.masking = config.build("masking", mask_id=self.corpus.mask_id, vocab_size=self.corpus.vocab_size,
                                    special_ids=self.corpus.special_ids)

    def loss(self, model: nn.Module, batch: torch.Tensor) -> LossOutput:
        inputs, labels = (t.to(self.ctx.device, non_blocking=True) for t in self.masking(batch))
        selected = labels != IGNORE
        logits = as_float(model(inputs, selected=selected))
        loss = sequence_losses(logits, labels).mean()
        accuracy = (logits.detach().argmax(dim=-1) == labels[selected]).float().mean()
        return LossOutput(loss, metrics={"accuracy": accuracy})

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        c = self.config
        metrics = mlm_metrics(model, self.corpus.val, c.data.block_size, self.ctx, self.masking,
                              batch_size=c.validation.eval_batch_size, batches=c.validation.val_batches,
                              seed=c.run.seed, precision=c.run.precision)
        return {f"val_{k}": v for k, v in metrics.items()}


# --------------------------------------------------------------------------------------------- presets
@preset
def bert_wiki() -> MaskedLMConfig:
    """The paper's CRATE-BERT-Base recipe (App. C.4) on English Wikipedia + BookCorpus, masked LM only.

    Adam with decoupled weight decay 0.01, β (0.9, 0.98), peak lr 1e-3 at step 1,800 after a linear warm-up, then
    linear decay to 0 at step 30,000; RoBERTa's tokenizer (V = 50,265); sequences of 512 tokens. Batch: the paper
    prints 8,096, which divides by no power of two above 32 — read as 8,192. Left open and chosen
    here: gradient clipping 1.0 (Hugging Face's default), micro-batches of 32 (32 accumulation steps on 8 GPUs),
    bf16 autocast, evaluation every 1,000 steps on 100 × 8 validation windows with fixed masks, 0.1% of the
    documents held out. ``--network.model bert_base`` trains the MHSA + MLP baseline with the same recipe.

    Prepare:  crate-prepare-text --input /data/wikipedia.jsonl /data/bookcorpus.jsonl --tokenizer hf:roberta-base \\
                  --output-dir data/wiki --val-fraction 0.001 --workers 16
    Command (one GPU):  crate-train --preset bert_wiki --data.data-dir data/wiki
    Command (8 GPUs):  torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset bert_wiki \\
                           --data.data-dir data/wiki
    Expected: training loss ≈ 8 → ≈ 2 over 30k steps (Fig. 12, left); GLUE after fine-tuning as Table 5 (SST-2 85.9,
    MRPC F1 80.0). Wall time: not measured here (≈ 1.3·10^11 tokens; about a day on 8 A100s by a 6·N·tokens estimate).
    """
    return MaskedLMConfig(
        network=BERTModelSection(model="crate_bert_base"), data=CorpusSection(block_size=512),
        validation=LMEvaluationSection(eval_batch_size=8, val_batches=100),
        optim=OptimSection(optimizer="adamw", lr=1e-3, weight_decay=0.01, betas=(0.9, 0.98), grad_clip=1.0),
        schedule=ScheduleSection(batch_size=8192, micro_batch_size=32, epochs=1, warmup_epochs=0.0,
                                 total_steps=30_000, warmup_steps=1800, lr_schedule="linear"),
        evaluation=EvaluationSection(eval_every_steps=1000),
        run=RunSection(output_dir="runs/bert_wiki", compile=True, checkpoint_every=1000, num_workers=4, log_every=10),
    )


@preset
def bert_stdlib() -> MaskedLMConfig:
    """A small CRATE-BERT on the built-in corpus (byte tokens) on a CPU, masked LM.

    d = 128, K = 4, L = 4, 128-byte windows, batch 32; the BERT recipe scaled down: AdamW β (0.9, 0.98), lr 1e-3
    (App. C.4's peak) with 50 warm-up steps and linear decay to 0 at step 1,500, weight decay 0.01, clipping 1.0; 15%
    masking with the 80/10/10 rule; evaluation every 500 steps on 50 × 16 validation windows with fixed masks.
    The rate and length were chosen on the validation loss: ``results/presets/bert_stdlib.md``.

    Command:  crate-train --preset bert_stdlib
    Expected: see docs/language.md (masked-byte loss and accuracy);
    time: the table of the presets' times in docs/training.md (``python -m benchmarks.presets``).
    """
    return MaskedLMConfig(
        network=BERTModelSection(model="crate_bert_medium", model_args=dict(dim=128, heads=4, depth=4)),
        data=CorpusSection(block_size=128), validation=LMEvaluationSection(eval_batch_size=16, val_batches=50),
        optim=OptimSection(lr=1e-3, betas=(0.9, 0.98)),
        schedule=ScheduleSection(batch_size=32, total_steps=1500, warmup_steps=50, lr_schedule="linear"),
        evaluation=EvaluationSection(eval_every_steps=500), run=RunSection(output_dir="runs/bert_stdlib"),
    ).replace(**{**CPU_RUN, "weight_decay": 0.01})
