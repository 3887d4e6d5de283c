"""Inference throughput: crate_nn's evaluation forward pass against the authors' computation, interleaved.

The evaluation forward pass (eval mode, ``torch.inference_mode``) of both models on the same batch of random
images, after a float64 check that their logits agree. Reports images/s (batch / median time), the ratio
ours/baseline, the peak memory of one pass, and on GPUs the MFU (F_fwd per image, see
`benchmarks.models.FLOPS_FORMULA`). Precision as in `benchmarks.train_step` (baseline: fp16 autocast on GPUs,
float32 on CPUs; ours: ``--precision``, default bf16 on GPUs, float32 on CPUs).

    python -m benchmarks.inference --models crate_tiny crate_base --batch-size 32 --out inference.json
    python -m benchmarks.inference --device cuda --batch-size 512 --out inference_h100.json
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from benchmarks.models import run_paired
from crate_nn.engine.precision import autocast


def make_eval_step(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, dtype: torch.dtype | None, recipe: str = "authors"
) -> Callable[[], None]:
    """A closure running one evaluation forward pass of ``model`` on the fixed batch (labels and recipe unused)."""
    model.eval()

    def step() -> None:
        with torch.inference_mode(), autocast(images.device, dtype):
            model(images)

    return step


def main(argv: list[str] | None = None) -> dict:
    return run_paired(
        "inference", __doc__.splitlines()[0], make_eval_step, flops_per_forward=1,
        default_batch={"cpu": 32, "cuda": 512}, argv=argv,
    )


if __name__ == "__main__":
    main()
