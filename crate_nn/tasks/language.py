"""What the language tasks share (Sec. 4.1.4, App. C.4): the token corpus and its sections, the language models'
evaluation section and checks, the task both language models extend; a pre-trained start is `crate_nn.weights.init_from`'s.

The tasks, one module each: ``causal_lm`` (CRATE-GPT, eq. 89: `crate_nn.tasks.causal_lm`), ``masked_lm``
(CRATE-BERT, eq. 85: `crate_nn.tasks.masked_lm`) and ``sequence_classification`` (GLUE fine-tuning:
`crate_nn.tasks.sequence_classification`), on token files prepared by ``crate-prepare-text`` or on the built-in
corpus (the standard library's source, byte tokens; `crate_nn.data.corpus`).

The language-model tasks measure the white-box quantities (per-layer R^c of both protocols and sparsity,
`crate_nn.measure_layers`) on ``measure_sequences`` validation windows before training and after it
(``<output_dir>/measurements/step_XXXX.json`` and ``layers_<protocol>.png``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..analysis.diagnostics import has_mssa_layers
from ..data.corpus import TokenBlocks, TokenCorpus, corpus, stack_blocks
from ..engine import distributed
from ..engine.config import DataSection, Section, TrainConfig, option, section
from ..engine.task import Task
from ..evaluation.language import spread
from ..models.registry import create_model, model_config, unwrap_model
from ..preprocessing import Preprocessing
from ..weights import init_from

DATA_LAYOUTS = """Data (--data.data-dir): a folder prepared by crate-prepare-text (meta.json, train.bin, val.bin); none =
the built-in corpus (the standard library's source as byte tokens). Fine-tuning: a folder with train.tsv and dev.tsv in
GLUE's format (a header row; --data.text-columns, --data.label-column); none = the built-in next-line pairs."""

@dataclass
class LanguageModelSection(Section):
    """What the causal and the masked LM's model sections share: the config overrides and the starting checkpoint
    (each extends it with its ``model``: `GPTModelSection`, `BERTModelSection`)."""

    model_args: dict = option(factory=dict, help="config overrides KEY=VALUE (vocab_size defaults to the corpus "
                                                  "tokenizer's, block_size to --data.block-size)")
    init_from: str | None = option(None, "weights to start from: any language model crate_nn.load reads (ours, "
                                         "crate-lm, nanoGPT; a file or an hf-hub: name)")


@dataclass
class CorpusSection(DataSection):
    """A token corpus (``data_dir``, `DataSection`'s: one prepared by crate-prepare-text; None = the built-in
    corpus) cut into training windows."""

    block_size: int = option(1024, "tokens per training sequence", minimum=1)


@dataclass
class LMEvaluationSection(Section):
    """The held-out loss and the layer-wise measurements of a language model."""

    eval_batch_size: int = option(4, "windows per evaluation batch (Table 6: 4)", minimum=1)
    val_batches: int = option(1000, "evaluation batches (Table 6: 1,000)", minimum=1)
    measure_sequences: int = option(8, "validation windows of the layer-wise R^c/sparsity measurements (0 = none; "
                                       "a model without MSSA layers, e.g. the GPT baseline, is not measured)",
                                    minimum=0, resume_free=True)


@dataclass
class LanguageModelConfig(TrainConfig):
    """What the causal and the masked LM's configs share — the engine's sections, the corpus (``data``), the
    held-out evaluation (``validation``) — and check (the model against the block size); `CausalLMConfig` and
    `MaskedLMConfig` add their model section (``network``, which the checks read)."""

    data: CorpusSection = section(CorpusSection)
    validation: LMEvaluationSection = section(LMEvaluationSection)

    def check(self) -> None:
        """The model's arguments the task fixes, and the model against the block size."""
        network, block_size = self.network, self.data.block_size
        reserved = sorted({"causal"} & set(network.model_args))
        if reserved:
            raise ValueError(f"model_args: {reserved} is fixed by the task ({self.task})")
        try:
            config = model_config(network.model, **{"block_size": block_size, **network.model_args})
        except (TypeError, ValueError) as err:
            raise ValueError(f"model_args: {err}") from err
        if config.block_size < block_size:
            raise ValueError(f"block_size: {block_size} exceeds the model's block_size={config.block_size}")


# --------------------------------------------------------------------------------------------- LM tasks
class LanguageModelTask(Task):
    """What the causal and the masked LM share: the corpus, the model, the measurements."""

    unit = "tokens"
    extra = 1  # tokens a training window holds beyond block_size

    def __init__(self, config: LanguageModelConfig, ctx: distributed.Context) -> None:
        super().__init__(config, ctx)
        network, block_size, sequences = config.network, config.data.block_size, config.validation.measure_sequences
        self.corpus: TokenCorpus = corpus(config.data.data_dir)
        self.train_set = TokenBlocks(self.corpus.train, block_size, self.extra, self.corpus.vocab_size)
        self.model = create_model(network.model, **{"block_size": block_size, "vocab_size": self.corpus.vocab_size,
                                                    **network.model_args})
        if self.model.config.vocab_size < self.corpus.vocab_size:
            raise ValueError(f"model_args: vocab_size={self.model.config.vocab_size} is smaller than the corpus "
                             f"tokenizer's {self.corpus.vocab_size} ({self.corpus.tokenizer})")
        self.reinitialised = init_from(self.model, network.init_from) if network.init_from else []
        windows = TokenBlocks(self.corpus.val, block_size, 0)
        self.measured = bool(sequences) and has_mssa_layers(self.model)
        self.measure_tokens = (torch.stack([windows[i] for i in spread(len(windows), sequences)])
                               if ctx.is_main and self.measured else None)

    def collate(self, items: list[torch.Tensor]) -> torch.Tensor:
        return stack_blocks(items)

    def units_per_sample(self) -> int:
        return self.config.data.block_size

    def _record(self, model: nn.Module) -> None:
        """Layer-wise R^c and sparsity of the measurement windows at the current step (main process)."""
        if self.measure_tokens is None or not self.ctx.is_main:
            return
        from ..analysis.snapshots import record_layers

        model = unwrap_model(model)
        was_training = model.training
        model.eval()
        record_layers(model, self.measure_tokens.to(self.ctx.device), Path(self.config.run.output_dir) / "measurements",
                      self.clock.step, unit="step")
        model.train(was_training)

    def epoch_end(self, model: nn.Module, epoch: int, run_dir: Path) -> None:
        self._record(model)

    def final_evaluate(self, model: nn.Module) -> dict[str, float]:
        self._record(model)
        return {}

    def preprocessing(self) -> Preprocessing:
        """`Task.preprocessing` with the corpus's tokenizer (its ``meta.json``'s, or ``bytes`` for the built-in one)."""
        return dataclasses.replace(super().preprocessing(), tokenizer=self.corpus.tokenizer)

    def resolved(self) -> dict:
        c = self.corpus
        return {**super().resolved(), "tokenizer": c.tokenizer, "corpus": c.source, "train_tokens": len(c.train),
                "val_tokens": len(c.val), "reinitialised_from_init": self.reinitialised,
                "layer_measurements": self.measured}


CPU_RUN = dict(optimizer="adamw", weight_decay=0.1, grad_clip=1.0, epochs=1, warmup_epochs=0.0, precision="fp32",
               device="cpu", num_workers=0, checkpoint_every=0, log_every=25)
"""The engine's options of the language tasks' CPU presets (gpt_stdlib, bert_stdlib, pairs_stdlib), by field name
(`crate_nn.engine.config.TrainConfig.replace`)."""
