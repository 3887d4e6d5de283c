"""Sequence-classification fine-tuning of CRATE-BERT (Sec. 4.1.4, App. C.4, GLUE).

A GLUE-format TSV (``train.tsv``, ``dev.tsv``; one sentence as SST-2 or a pair as MRPC) or the built-in next-line
pairs of the standard library (`crate_nn.data.glue`), a CRATE-BERT encoder from ``init_from`` (the language tasks'
start from a checkpoint: `crate_nn.weights.init_from`) with a new head; evaluation: ``val_accuracy`` and,
for two classes, ``val_f1``.

Presets: ``glue_sst2``, ``glue_mrpc`` (Table 5, GPUs) and ``pairs_stdlib`` (CPU, minutes).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..data.glue import EncodedExamples, pad_examples, read_glue_tsv, stdlib_next_lines
from ..engine import distributed
from ..engine.config import (
    DataSection,
    OptimSection,
    RunSection,
    ScheduleSection,
    Section,
    TrainConfig,
    option,
    section,
)
from ..engine.precision import autocast
from ..engine.task import LossOutput, Task, preset, register_task, require_classes
from ..evaluation.language import as_float, classification_metrics
from ..evaluation.sharded import map_reduce
from ..models.language import BERTClassifierConfig
from ..models.registry import build_model, list_models, model_config, unwrap_model
from ..weights import init_from, read_state
from .language import (
    CPU_RUN,
    DATA_LAYOUTS,  # noqa: F401 (crate-train --help)
)

BERT = {"bert": "a CRATE-BERT", "bert_classifier": "a CRATE-BERT classifier"}
"""What sequence classification fine-tunes (`crate_nn.weights.read_state`'s ``families``)."""


@dataclass
class EncoderSection(Section):
    """The CRATE-BERT encoder to fine-tune: a pre-trained checkpoint, or an architecture trained from scratch."""

    init_from: str | None = option(None, "the pre-trained CRATE-BERT checkpoint (its architecture is used); None = "
                                         "train `model` from scratch")
    model: str = option("crate_bert_base", "the architecture when init_from is None", choices=tuple(list_models(family="bert")))
    model_args: dict = option(factory=dict, help="config overrides KEY=VALUE when init_from is None")


@dataclass
class GlueDataSection(DataSection):
    """Labelled texts: GLUE-format TSV files in ``data_dir`` (`DataSection`'s; None = the built-in next-line pairs),
    tokenized as in pre-training."""

    tokenizer: str = option("bytes", "the pre-training tokenizer: bytes | tiktoken:<encoding> | hf:<name or path>")
    train_file: str = option("train.tsv", "training TSV inside data_dir")
    eval_file: str = option("dev.tsv", "evaluation TSV inside data_dir")
    text_columns: tuple[str, ...] = option(("sentence",), "one column (SST-2: sentence) or two (MRPC: '#1 String' "
                                                          "'#2 String')")
    label_column: str = option("label", "the label column (SST-2: label, MRPC: Quality)")
    max_length: int = option(512, "longest tokenized example (longer ones are cut, the longer text first)",
                             minimum=3)
    builtin_examples: tuple[int, int] = option((4000, 1000), "train and dev examples of the built-in pairs", minimum=1)

    def validate(self) -> None:
        if not 1 <= len(self.text_columns) <= 2:
            raise ValueError(f"text_columns: expected one or two column names, got {list(self.text_columns)}")


@dataclass
class SequenceClassificationConfig(TrainConfig):
    """Fine-tuning a CRATE-BERT encoder for sequence classification (GLUE): the engine's sections, the encoder, the
    labelled texts."""

    task = "sequence_classification"

    network: EncoderSection = section(EncoderSection)
    data: GlueDataSection = section(GlueDataSection)

    def check(self) -> None:
        """The architecture trained from scratch exists (with ``init_from``, the checkpoint's is used)."""
        if self.network.init_from is None:
            try:
                model_config(self.network.model, **self.network.model_args)
            except (TypeError, ValueError) as err:
                raise ValueError(f"model_args: {err}") from err

    def smoke(self, steps: int = 20, batch_size: int = 32, **overrides) -> SequenceClassificationConfig:
        """`TrainConfig.smoke`, plus: the built-in next-line pairs with byte tokens (no TSV folder, no tokenizer
        files), ``batch_size`` examples of each split, and ``model`` trained from scratch instead of ``init_from``
        (the pre-training run a fine-tuning preset starts from does not exist on a fresh machine)."""
        examples = min(self.schedule.batch_size, batch_size)
        changes = dict(init_from=None, data_dir=None, tokenizer="bytes", builtin_examples=(examples, examples),
                       max_length=min(self.data.max_length, 128))
        return super().smoke(steps, batch_size, **{**changes, **overrides})


@register_task(SequenceClassificationConfig)
class SequenceClassificationTask(Task):
    """A CRATE-BERT encoder with a classification head trained with cross-entropy."""

    unit = "sequences"

    def __init__(self, config: SequenceClassificationConfig, ctx: distributed.Context) -> None:
        super().__init__(config, ctx)
        network, data = config.network, config.data
        if network.init_from:
            stored = read_state(network.init_from, what="init_from", families=BERT)
            backbone = dataclasses.asdict(stored.config)
        else:
            backbone = dataclasses.asdict(model_config(network.model, **network.model_args))
        if data.data_dir is None:
            train, dev = (stdlib_next_lines(split, n, config.run.seed) for split, n in
                          zip(("train", "val"), data.builtin_examples))
        else:
            root = Path(data.data_dir)
            train = read_glue_tsv(root / data.train_file, data.text_columns, data.label_column)
            require_classes(train.classes, f"train_file: {root / data.train_file}")
            dev = read_glue_tsv(root / data.eval_file, data.text_columns, data.label_column, train.classes)
        self.train_set = EncodedExamples(train, data.tokenizer, data.max_length)
        self.eval_set = EncodedExamples(dev, data.tokenizer, data.max_length)
        fields = {f.name for f in dataclasses.fields(BERTClassifierConfig)}
        values = {k: v for k, v in backbone.items() if k in fields}
        self.model = build_model(BERTClassifierConfig(**{**values, "causal": False, "num_labels": len(train.classes)}))
        longest = max(len(ids) for ids, _ in self.train_set.examples + self.eval_set.examples)
        if longest > self.model.config.block_size:
            raise ValueError(f"max_length: examples of {longest} tokens exceed the model's block_size="
                             f"{self.model.config.block_size}")
        self.reinitialised = init_from(self.model, network.init_from) if network.init_from else []

    def collate(self, items: list) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return pad_examples(items)

    def loss(self, model: nn.Module, batch) -> LossOutput:
        tokens, mask, labels = (t.to(self.ctx.device, non_blocking=True) for t in batch)
        logits = as_float(model(tokens, mask))
        return LossOutput(F.cross_entropy(logits, labels),
                          metrics={"accuracy": (logits.detach().argmax(-1) == labels).float().mean()})

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        ctx = self.ctx

        def body(net: nn.Module, batch) -> dict:
            tokens, mask, target = (t.to(ctx.device) for t in batch)
            with autocast(ctx.device, self.config.run.precision):
                logits = as_float(net(tokens, mask))
            return {"loss": F.cross_entropy(logits, target, reduction="sum"), "predictions": logits.argmax(-1),
                    "labels": target}

        data = (f"eval_file {self.config.data.eval_file!r}" if self.config.data.data_dir is not None else
                "the built-in pairs' dev split")
        result = map_reduce(unwrap_model(model), self.eval_set, body, ctx, batch_size=self.plan.micro_batch,
                            sums=("loss",), collate_fn=pad_examples, what=data)
        predicted, truth = result.rows["predictions"], result.rows["labels"]
        metrics = classification_metrics(predicted, truth, len(self.eval_set.classes))
        return {"val_loss": result.sums["loss"] / len(truth), **{f"val_{k}": v for k, v in metrics.items()}}

    def resolved(self) -> dict:
        return {**super().resolved(), "classes": self.train_set.classes, "train_examples": len(self.train_set),
                "eval_examples": len(self.eval_set), "reinitialised_from_init": self.reinitialised}


# --------------------------------------------------------------------------------------------- presets
def _glue(name: str, columns: tuple[str, ...], label: str, epochs: int) -> SequenceClassificationConfig:
    return SequenceClassificationConfig(
        network=EncoderSection(init_from="runs/bert_wiki/checkpoints/last.pt"),
        data=GlueDataSection(tokenizer="hf:roberta-base", text_columns=columns, label_column=label, max_length=512),
        optim=OptimSection(optimizer="adamw", lr=2e-5, weight_decay=0.0, betas=(0.9, 0.999)),
        schedule=ScheduleSection(batch_size=32, epochs=epochs, warmup_epochs=0.0, lr_schedule="linear"),
        run=RunSection(output_dir=f"runs/glue_{name}", checkpoint_every=0, num_workers=2),
    )


@preset
def glue_sst2() -> SequenceClassificationConfig:
    """GLUE SST-2 fine-tuning of CRATE-BERT (App. C.4): lr 2e-5, batch 32, 3 epochs, sequences up to 512 tokens.

    Left open and chosen here (Hugging Face run_glue's defaults, the script the paper cites): AdamW β (0.9, 0.999)
    without weight decay, linear decay to 0, no warm-up; the head reads the mean of the real tokens' features.

    Command:  crate-train --preset glue_sst2 --data.data-dir /data/glue/SST-2 \\
                  --network.init-from runs/bert_wiki/checkpoints/last.pt
    Expected: accuracy 85.9% (Table 5). Wall time: minutes on one GPU.
    """
    return _glue("sst2", ("sentence",), "label", 3)


@preset
def glue_mrpc() -> SequenceClassificationConfig:
    """GLUE MRPC fine-tuning of CRATE-BERT: as ``glue_sst2`` with sentence pairs and 5 epochs (App. C.4).

    Command:  crate-train --preset glue_mrpc --data.data-dir /data/glue/MRPC \\
                  --network.init-from runs/bert_wiki/checkpoints/last.pt
    Expected: F1 80.0 (Table 5; 84.7 after an intermediate MNLI fine-tuning). Wall time: a few minutes on one GPU.
    """
    return _glue("mrpc", ("#1 String", "#2 String"), "Quality", 5)


@preset
def pairs_stdlib() -> SequenceClassificationConfig:
    """Fine-tuning the ``bert_stdlib`` CRATE-BERT on the built-in next-line pairs on a CPU (an MRPC-style pair task:
    does the second source line follow the first in the same file?).

    4,000 training and 1,000 held-out pairs (from the validation files), byte tokens, pairs cut to 128 bytes;
    AdamW lr 1e-3, batch 32, 3 epochs, linear decay. ``--network.init-from none`` trains the same model from scratch.

    Command:  crate-train --preset bert_stdlib && crate-train --preset pairs_stdlib
    Expected: see docs/language.md (accuracy and F1, pre-trained vs from scratch);
    time: the table of the presets' times in docs/training.md (``python -m benchmarks.presets``).
    """
    return SequenceClassificationConfig(
        network=EncoderSection(init_from="runs/bert_stdlib/checkpoints/last.pt", model="crate_bert_medium",
                               model_args=dict(dim=128, heads=4, depth=4, block_size=128)),
        data=GlueDataSection(max_length=128), run=RunSection(output_dir="runs/pairs_stdlib"),
    ).replace(**{**CPU_RUN, "lr": 1e-3, "weight_decay": 0.01, "betas": (0.9, 0.999), "batch_size": 32, "epochs": 3,
                 "lr_schedule": "linear"})
