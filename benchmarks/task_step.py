"""Training-step throughput of every preset (every task the engine knows), through the engine's own parts.

For each preset (``crate_nn.tasks.PRESETS``: every task's presets — classification, MAE, DINO, language models, …)
the task is built from the preset's smoke config
(`crate_nn.engine.TrainConfig.smoke`: the preset's model, optimizer and precision; built-in data, at most
``--batch-size`` samples), and one optimizer step is timed as the engine runs it, data loading excepted: the
micro-batch (pinned on GPUs) goes through ``task.loss`` under the preset's autocast (device transfer and
augmentation included), backward, the task's hooks, the optimizer step. Reported per preset: units/s
(``task.unit``: images, tokens, …), the FLOPs one step runs (`benchmarks.common.counted_flops`: matrix products
and attention kernels), MFU against the GPU's peak dense bf16 rate, the peak memory of a step and the
memory of the training state (weights, gradients, optimizer state).

    python -m benchmarks.task_step --device cuda --batch-size 256 --compile --out task_step.json
    python -m benchmarks.task_step --presets digits synthetic --batch-size 16
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn
from tqdm import tqdm

from benchmarks import common
from crate_nn.data.batching import EpochBatches, loader
from crate_nn.engine import distributed
from crate_nn.engine.config import TrainConfig
from crate_nn.engine.loop import CUDA_GRAPH_MODES, compile_model
from crate_nn.engine.optim import build_optimizer
from crate_nn.engine.precision import autocast, keep_activations
from crate_nn.engine.rng import seed_everything
from crate_nn.engine.task import RunPlan, Task, task_for
from crate_nn.tasks import PRESETS, get_preset


class TaskStep(NamedTuple):
    """A task built for timing: its config, the task, the optimizer and the closure running one step."""

    config: TrainConfig
    task: Task
    optimizer: torch.optim.Optimizer
    step: Callable[[], None]


def build_step(config: TrainConfig) -> TaskStep:
    """Build ``config``'s task on its device and a closure running one optimizer step on one fixed micro-batch
    of its training data, as `crate_nn.engine.train` runs a step (one process, no accumulation; the config's
    ``activations``, ``compile`` and ``compile_mode``)."""
    run = config.run
    ctx = distributed.context(run.device)
    seed_everything(run.seed)
    task = task_for(config)(config, ctx)
    task.start(RunPlan.resolve(config, task, ctx.world_size))
    model = task.model.to(ctx.device)
    keep_activations(model, run.activations)
    optimizer = build_optimizer(config, model)
    running: nn.Module = compile_model(model, run.compile_mode) if run.compile else model
    graphs = run.compile and run.compile_mode in CUDA_GRAPH_MODES and ctx.device.type == "cuda"
    batch_size = config.schedule.batch_size
    batches = EpochBatches(len(task.train_set), global_batch=batch_size, micro_batch=batch_size, seed=run.seed)
    batch = next(iter(loader(task.train_set, batches, 0, pin_memory=ctx.device.type == "cuda",
                             collate_fn=task.collate)))
    running.train()

    def step() -> None:
        if graphs:  # as the engine marks each micro-batch
            torch.compiler.cudagraph_mark_step_begin()
        with autocast(ctx.device, run.precision):
            out = task.loss(running, batch)
        out.loss.float().backward()
        task.before_optimizer_step(running, 0, 0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        task.after_optimizer_step(model, 0)

    return TaskStep(config, task, optimizer, step)


def state_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Bytes of the training state: weights, their gradients (one per weight) and the optimizer's tensors."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    moments = sum(t.numel() * t.element_size() for state in optimizer.state.values() for t in state.values()
                  if isinstance(t, torch.Tensor))
    return weights + grads + moments


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.task_step", description=__doc__.splitlines()[0])
    common.add_common_args(parser, repeats=10, warmup=3)
    parser.add_argument("--presets", nargs="+", default=sorted(PRESETS), choices=sorted(PRESETS))
    parser.add_argument("--batch-size", type=int, default=None,
                        help="at most this many samples per step (default 16 on CPU, 256 on GPU; a preset with a "
                             "smaller batch or micro-batch keeps its own)")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (crate-train --run.compile)")
    args = parser.parse_args(argv)
    device = common.setup(args)
    if args.tiny:
        args.presets, args.batch_size, args.repeats, args.warmup = ["digits"], 8, 1, 1
    if args.batch_size is None:
        args.batch_size = 256 if device.type == "cuda" else 16
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    peak = common.peak_bf16_flops(device)
    rows = []
    for name in tqdm(args.presets, desc="task_step", unit="preset"):
        config = get_preset(name).smoke(1, args.batch_size, device=str(device), compile=args.compile)
        built = build_step(config)
        for _ in range(args.warmup):
            built.step()
        flops = common.counted_flops(built.step)
        timing = common.interleaved({name: built.step}, args.repeats, 0, device)[name]
        units = config.schedule.batch_size * built.task.units_per_sample()
        model = built.task.model
        rows.append({
            "preset": name, "task": config.task, "model": config.to_dict().get("model", type(model).__name__),
            "batch": config.schedule.batch_size, "unit": built.task.unit, "units_per_s": units / timing.median,
            "precision": config.run.precision, "compiled": config.run.compile, "step_gflops": flops / 1e9,
            "mfu": None if peak is None else flops / timing.median / peak,
            "peak_mem_mb": common.peak_memory_bytes(built.step, device) / 2**20,
            "state_mb": state_bytes(model, built.optimizer) / 2**20,
            "parameters": sum(p.numel() for p in model.parameters()), "timing": timing.summary(),
        })
    columns: list[common.Column] = [
        ("preset", "preset", ""), ("model", "model", ""), ("batch", "batch", "d"), ("unit", "unit", ""),
        ("units_per_s", "units/s", ",.0f"), ("step_gflops", "GFLOP/step", ",.2f"), ("mfu", "MFU", ".1%"),
        ("peak_mem_mb", "step peak MiB", ",.1f"), ("state_mb", "state MiB", ",.1f"),
    ]
    notes = [
        f"one optimizer step on one fixed micro-batch of the preset's smoke config (at most {args.batch_size} "
        f"samples and the preset's micro-batch; the preset's model, optimizer and precision), median of "
        f"{args.repeats} after {args.warmup} warm-up steps; data loading not included (benchmarks.pipeline "
        "measures it)",
        "FLOPs: torch.utils.flop_counter over one step (forward and backward matrix products; on CUDA the SDPA "
        "kernels too); MFU = FLOPs / step time / peak dense bf16 FLOP/s",
        "state = weights + gradients + optimizer tensors (what FSDP would shard); step peak = memory allocated "
        "during a step above what was allocated before it (activations and temporaries)",
    ]
    return common.report("task_step", device, args, rows, columns, notes)


if __name__ == "__main__":
    main()
