"""Training-step throughput: crate_nn against the authors' computation, in the same run, interleaved.

One step = forward, cross-entropy loss (label smoothing 0.1), backward, Lion update (lr 2.4e-4, weight decay
0.5: the paper's recipe), gradients freed: the baseline with the published script's optimizer set-up
(lion-pytorch, decay on every parameter), ours with crate-train's (`make_train_step`'s ``recipe``). Both models
hold the same weights (checked in float64 first) and see the same batch of random images. Reports images/s
(batch / median step time), the ratio ours/baseline, the peak memory of one step above what was allocated before
it, and on GPUs the model FLOPs utilisation MFU = F_train · images/s / peak dense bf16 FLOP/s (F_train = 3·F_fwd,
`benchmarks.models.FLOPS_FORMULA`). ``--beside`` times a timm model (e.g. ViT-B/16) with ours' settings.

Precision: the baseline trains as the published script does (fp16 autocast + GradScaler on GPUs, float32 on
CPUs); ours uses ``--precision`` (default: bf16 autocast on GPUs, float32 on CPUs).

    python -m benchmarks.train_step --models crate_tiny crate_base --batch-size 16 --out train_step.json
    python -m benchmarks.train_step --device cuda --batch-size 256 --out train_step_h100.json
    python -m benchmarks.train_step --device cuda --models crate_base --compile --beside vit_base_patch16_224
"""
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from lion_pytorch import Lion
from torch import nn

from benchmarks.models import run_paired
from crate_nn.engine.optim import build_optimizer
from crate_nn.engine.precision import autocast
from crate_nn.models.registry import unwrap_model
from crate_nn.tasks import get_preset


def make_train_step(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor, dtype: torch.dtype | None, recipe: str = "authors"
) -> Callable[[], None]:
    """A closure running one training step of ``model`` on the fixed batch; fp16 gets a GradScaler.

    ``recipe``: ``"authors"`` — lion-pytorch's Lion over every parameter (weight decay on all of them), as the
    published script; ``"crate_nn"`` — the optimizer crate-train builds for the imagenet preset
    (`crate_nn.engine.optim.build_optimizer`: the multi-tensor Lion, no decay on norms, biases and embeddings).
    """
    device = images.device
    if recipe == "authors":
        optimizer = Lion(model.parameters(), lr=2.4e-4, weight_decay=0.5)
    elif recipe == "crate_nn":
        optimizer = build_optimizer(get_preset("imagenet"), unwrap_model(model))
    else:
        raise ValueError(f"recipe must be 'authors' or 'crate_nn', got {recipe!r}")
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
    model.train()

    def step() -> None:
        with autocast(device, dtype):
            loss = F.cross_entropy(model(images).float(), labels, label_smoothing=0.1)
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        optimizer.zero_grad(set_to_none=True)

    return step


def main(argv: list[str] | None = None) -> dict:
    return run_paired(
        "train_step", __doc__.splitlines()[0], make_train_step, flops_per_forward=3,
        default_batch={"cpu": 16, "cuda": 256}, argv=argv,
    )


if __name__ == "__main__":
    main()
