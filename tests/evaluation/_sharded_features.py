"""Sharded evaluation in every process of a torchrun job, for test_features.py: `extract_features` on datasets whose
length is not a multiple of processes × batch (with unreadable samples, and with fewer samples than processes),
`FrozenEvaluator` (k-NN, probe and the raw-pixel control of a feature function), and the DINO and MAE tasks' frozen
evaluations through it, which extract sharded features and fit the k-NN and the probes once; and the other evaluators
of the sharded map (`crate_nn.evaluation.sharded.map_reduce`): classification loss and accuracy, MAE's
reconstruction loss, the causal and the masked LM's held-out metrics.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/evaluation/_sharded_features.py OUT

saves what each process returned to OUT/rank<r>.pt; `cases` run in one process gives the reference.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import Dataset

from crate_nn import create_model
from crate_nn.data.batching import Corrupt
from crate_nn.data.masking import Masking
from crate_nn.engine.distributed import Context, context, joined
from crate_nn.engine.rng import seed_everything
from crate_nn.engine.task import RunPlan
from crate_nn.evaluation.classification import evaluate
from crate_nn.evaluation.features import extract_features
from crate_nn.evaluation.frozen import FrozenEvaluator, model_features
from crate_nn.evaluation.language import lm_loss, mlm_metrics
from crate_nn.tasks import get_preset
from crate_nn.tasks.dino import DINOTask, DINOTrainConfig
from crate_nn.tasks.mae import MAETask

TINY = dict(dataset="synthetic", synthetic_samples=32, synthetic_classes=3, image_size=8, eval_resize=8,
            batch_size=8, micro_batch_size=1, device="cpu", precision="fp32", num_workers=0, progress=False)
"""32 random 8×8 images of 3 classes; micro-batches of one image, so that a sample's features are computed by the same
operations whatever process and batch it falls in (a batched matmul may round differently for another batch size)."""


class Samples(Dataset):
    """``n`` samples (image (1, 2, 3) drawn from the index, label index mod 3, index); those in ``corrupt`` are
    unreadable (a `Corrupt` placeholder, which the collate step drops)."""

    def __init__(self, n: int, corrupt=()):
        self.n, self.corrupt = n, set(corrupt)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int):
        if index in self.corrupt:
            return Corrupt(f"sample_{index}.png", "unreadable")
        return torch.randn(1, 2, 3, generator=torch.Generator().manual_seed(index)), index % 3, index


def row_features(images: torch.Tensor) -> torch.Tensor:
    """A feature function of each row alone (its result does not depend on the batch)."""
    return torch.cat([images.flatten(1), images.flatten(1).square().sum(dim=1, keepdim=True)], dim=1)


def cases(ctx: Context) -> dict:
    """Every case's result in this process (the same in every process and equal to one process's)."""
    out = {}
    # 23 samples, batches of 4: shards of 12 and 11; 5 and 8–15 unreadable, so that whole batches are empty
    # (8–11 and 12–15 in one process, 8, 10, 12, 14 and 9, 11, 13, 15 under two)
    for name, dataset in (("uneven", Samples(23, corrupt=[5, *range(8, 16)])), ("one_sample", Samples(1))):
        rows = []  # the samples this process computed features of

        def counted(images: torch.Tensor, rows: list = rows) -> torch.Tensor:
            rows.append(len(images))
            return row_features(images)

        out[name] = extract_features(counted, dataset, lambda x: x - 1.0, ctx, batch_size=4)
        out[f"{name}_rows"] = sum(rows)
    try:
        extract_features(row_features, Samples(3, corrupt=range(3)), lambda x: x, ctx, batch_size=4)
    except ValueError as err:
        out["unreadable"] = str(err)
    # the evaluator on its own: memory of 23 samples (one unreadable), 13 evaluated; k-NN, probe and the pixel control
    evaluator = FrozenEvaluator(Samples(23, corrupt=[5]), lambda x: x - 1.0, ctx, probe=True, pixel_control=True,
                                knn_ks=(1, 3), probe_solver="lbfgs", batch_size=4)
    out["evaluator"] = evaluator(row_features, Samples(13), "test")
    for solver in ("sklearn", "lbfgs"):
        seed_everything(0)  # as the engine does before it builds the task: the same initialisation
        config = DINOTrainConfig().replace(**TINY, model="crate_tiny", local_crop_size=4, load_size=8, local_crops=2,
                                           model_args=dict(patch_size=4, dim=16, depth=1, heads=2), out_dim=32,
                                           hidden_dim=16, bottleneck_dim=8, knn_ks=(3, 5), probe_solver=solver,
                                           test_split="test")
        dino = DINOTask(config, ctx)
        dino.start(RunPlan.resolve(dino.config, dino, ctx.world_size))
        out[f"dino_{solver}"] = dino.frozen_evaluator()(model_features(dino.model.eval()), dino.test_set, "test",
                                                        probe=True)
    mae = MAETask(get_preset("mae_digits", **TINY, mean=(0.5,) * 3, std=(0.5,) * 3, test_split="test",
                             model_args=dict(patch_size=2, dim=16, depth=1, heads=2), probe=True,
                             probe_solver="adam"), ctx)
    mae.start(RunPlan.resolve(mae.config, mae, ctx.world_size))
    out["mae"] = {k: v for k, v in mae.final_evaluate(mae.model).items() if k.startswith("probe")}
    out["sums"] = {"mae": mae.reconstruction_loss(mae.model, mae.test_set, "test_split")}
    torch.manual_seed(0)  # every process builds the same models
    classifier = nn.Sequential(nn.Flatten(), nn.Linear(6, 3)).double()
    out["sums"]["classification"] = evaluate(classifier, Samples(23, corrupt=[5]), lambda x: x.double(), ctx,
                                             batch_size=4)
    tokens = np.arange(600) * 7 % 29
    gpt = create_model("crate_gpt_base", dim=16, heads=2, depth=1, vocab_size=30, block_size=8).double()
    out["sums"]["lm"] = lm_loss(gpt, tokens, 8, ctx, batch_size=3, batches=5, precision="fp32")
    bert = create_model("crate_bert_base", dim=16, heads=2, depth=1, vocab_size=30, block_size=8).double()
    masking = Masking(29, 30, (0,), 0.15, 0.8, 0.1)
    out["sums"]["mlm"] = mlm_metrics(bert, tokens, 8, ctx, masking, batch_size=3, batches=5, precision="fp32")
    return out


if __name__ == "__main__":
    ctx = context("cpu")
    with joined(ctx):
        results = cases(ctx)
    torch.save(results, Path(sys.argv[1]) / f"rank{ctx.rank}.pt")
