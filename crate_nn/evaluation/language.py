"""Evaluation of the language models: held-out cross-entropy and perplexity (Table 6's protocol), masked-LM loss and
accuracy, sequence-classification accuracy and F1.

* `lm_loss` (Table 6, App. C.4: "block size 1,024, evaluation batch size 4, 1,000 iterations"): the mean
  cross-entropy per predicted token of next-token prediction over ``batches`` batches of ``batch_size`` full
  windows of ``block_size`` + 1 tokens (every window predicts ``block_size`` tokens, eq. 89), and its exponential,
  the perplexity. The windows are the split's non-overlapping ones (`TokenBlocks`), evenly spread over the file
  when it holds more than needed, all of them otherwise — deterministic, where nanoGPT draws random offsets.
* `mlm_metrics`: cross-entropy (eq. 85) and accuracy of the masked-LM predictions at the masked positions of
  full windows, masked by `crate_nn.data.masking.Masking` with a fixed seed (the same masks every call).
* `classification_metrics`: accuracy, and F1 of class 1 for two classes (GLUE's MRPC and QQP).

Under torchrun every process evaluates its shard of the windows and the sums are all-reduced
(`crate_nn.evaluation.sharded.map_reduce`). The functions evaluate the unwrapped model in eval mode and restore its
mode; they draw nothing from the global RNG. No window evaluated (no token predicted, no token masked) is a
ValueError, never a loss of 0.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset

from ..data.corpus import TokenBlocks
from ..data.masking import IGNORE, Masking
from ..engine import distributed
from ..engine.precision import autocast
from ..models.registry import unwrap_model
from .sharded import map_reduce


def as_float(logits: torch.Tensor) -> torch.Tensor:
    """Logits in at least float32 (bf16 autocast outputs are promoted; float64 stays float64)."""
    return logits.to(torch.promote_types(logits.dtype, torch.float32))


def spread(available: int, count: int) -> list[int]:
    """``count`` indices evenly spread over ``range(available)`` (all of them when ``count ≥ available``)."""
    if count >= available:
        return list(range(available))
    return [(k * available) // count for k in range(count)]


def _evaluation_windows(model: nn.Module, tokens: np.ndarray, block_size: int, extra: int, batch_size: int,
                        batches: int) -> tuple[TokenBlocks, list[int]]:
    """The windows (ids checked against ``model``'s vocabulary) and those evaluated: ``batch_size × batches`` of them
    spread over the split (`spread`)."""
    if batch_size < 1 or batches < 1:
        raise ValueError(f"batch_size, batches: expected positive integers, got {batch_size}, {batches}")
    windows = TokenBlocks(tokens, block_size, extra, unwrap_model(model).config.vocab_size)
    return windows, spread(len(windows), batch_size * batches)


def lm_loss(model: nn.Module, tokens: np.ndarray, block_size: int, ctx: distributed.Context, *, batch_size: int = 4,
            batches: int = 1000, precision: str = "auto") -> dict[str, float]:
    """``loss`` (nats per token), ``perplexity`` and the number of predicted ``tokens`` of a causal LM on
    ``tokens`` (a 1-D array of ids): the module docstring's protocol."""
    windows, items = _evaluation_windows(model, tokens, block_size, 1, batch_size, batches)

    def body(net: nn.Module, batch: torch.Tensor) -> dict:
        with autocast(ctx.device, precision):
            batch = batch.to(ctx.device)
            logits = as_float(net(batch[:, :-1]))
            return {"loss": F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(), reduction="sum"),
                    "tokens": batch[:, 1:].numel()}

    sums = map_reduce(unwrap_model(model), windows, body, ctx, batch_size=batch_size, items=items,
                      collate_fn=torch.stack, sums=("loss", "tokens"), count="tokens", what="tokens").sums
    loss = sums["loss"] / sums["tokens"]
    return {"loss": loss, "perplexity": math.exp(loss), "tokens": int(sums["tokens"])}


def sequence_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Eq. (85) per sequence: the mean cross-entropy over each sequence's predicted positions Ω, for the sequences
    with a non-empty Ω. ``logits`` (N, V) at the N positions where ``labels`` (B, T) ≠ `IGNORE`, in row-major
    order; returns (B',) in the logits' dtype."""
    selected = labels != IGNORE
    per_token = F.cross_entropy(logits, labels[selected], reduction="none")
    counts = selected.sum(dim=1)
    sums = per_token.new_zeros(labels.shape[0]).index_add_(0, selected.nonzero()[:, 0], per_token)
    kept = counts > 0
    return sums[kept] / counts[kept]


class MaskedWindows(Dataset):
    """The windows of ``windows`` masked by ``mask``, window i always alike: by a generator seeded with (``seed``, i).
    Item i is (inputs (1, T), labels (1, T)); `cat_pairs` stacks items into a batch."""

    def __init__(self, windows: TokenBlocks, mask: Masking, seed: int) -> None:
        self.windows, self.mask, self.seed = windows, mask, seed

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.mask(self.windows[i][None], torch.Generator().manual_seed(self.seed * 1_000_003 + i))


def cat_pairs(items: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs (B, T), labels (B, T)) of `MaskedWindows` items."""
    inputs, labels = zip(*items)
    return torch.cat(inputs), torch.cat(labels)


def mlm_metrics(model: nn.Module, tokens: np.ndarray, block_size: int, ctx: distributed.Context, mask: Masking, *,
                batch_size: int = 8, batches: int = 100, seed: int = 0, precision: str = "auto") -> dict[str, float]:
    """``loss`` (eq. 85: per-sequence mean over its masked tokens, then the mean over sequences), ``accuracy``
    (fraction of masked tokens predicted exactly) and the number of ``masked`` tokens of a masked LM on windows of
    ``tokens``. Each window is masked by ``mask`` with a generator seeded by (``seed``, window index), so it gets
    the same mask on every call (`MaskedWindows`)."""
    windows, items = _evaluation_windows(model, tokens, block_size, 0, batch_size, batches)

    def body(net: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> dict:
        with autocast(ctx.device, precision):
            inputs, labels = (t.to(ctx.device) for t in batch)
            selected = labels != IGNORE
            logits = as_float(net(inputs, selected=selected))
            losses = sequence_losses(logits, labels)
            return {"loss": losses.double().sum(), "sequences": losses.numel(),
                    "hits": (logits.argmax(dim=-1) == labels[selected]).sum(), "masked": selected.sum()}

    sums = map_reduce(unwrap_model(model), MaskedWindows(windows, mask, seed), body, ctx, batch_size=batch_size,
                      items=items, collate_fn=cat_pairs, sums=("loss", "sequences", "hits", "masked"),
                      count="masked", what="masked tokens").sums
    return {"loss": sums["loss"] / sums["sequences"], "accuracy": sums["hits"] / sums["masked"],
            "masked": int(sums["masked"])}


def classification_metrics(predictions: torch.Tensor, labels: torch.Tensor, num_classes: int) -> dict[str, float]:
    """``accuracy``; for two classes also ``f1`` of class 1 (2·TP / (2·TP + FP + FN); 0 when it never occurs)."""
    if predictions.shape != labels.shape:
        raise ValueError(f"predictions, labels: expected equal shapes, got {tuple(predictions.shape)} and "
                         f"{tuple(labels.shape)}")
    metrics = {"accuracy": (predictions == labels).double().mean().item() if labels.numel() else float("nan")}
    if num_classes == 2:
        tp = ((predictions == 1) & (labels == 1)).sum().item()
        fp = ((predictions == 1) & (labels == 0)).sum().item()
        fn = ((predictions == 0) & (labels == 1)).sum().item()
        metrics["f1"] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    return metrics
