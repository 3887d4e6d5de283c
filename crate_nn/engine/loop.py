"""The training loop every system shares: ``train(config) -> TrainResult``.

The task (`crate_nn.engine.task.Task`, found from the config's class) supplies the model, the data, the loss of a
micro-batch and the evaluation; the loop owns the rest:

* processes: one process, or DistributedDataParallel under ``torchrun`` (NCCL on GPUs, gloo on CPU). Everything
  that can fail on bad input — the config, the run directory, the data, the model — is checked in every process
  *before* the process group forms, and no collective is entered on an error path, so a failure stops the job
  with its message instead of hanging it.
* each optimizer step: ``batch_size`` samples over all processes, split into micro-batches (gradient
  accumulation, ``no_sync`` on all but the last), bf16 autocast on GPUs (with ``bf16-if-faster`` also on CPUs
  measured to multiply bf16 faster: every process measures, bf16 only if all do; ``--activations bf16`` keeps the
  activations in bfloat16 between layers), ``torch.compile`` in a ``--compile-mode`` (CUDA graphs with
  reduce-overhead: a step boundary is marked before every micro-batch), one all-reduce for the loss,
  the logged metrics and counters and the stop flag, optional global-norm clipping, a NaN/Inf stop *before* the
  update, the per-step schedules (learning rate, weight decay, EMA momentum), the optional EMA.
* the run's arithmetic and position: micro-batch, accumulation, steps per epoch and the run's length are resolved
  once (`crate_nn.engine.task.RunPlan`) and handed to the task (`Task.start`); ``task.clock`` follows the optimizer
  steps (restored on resume), so the task's own schedules read the engine's numbers instead of counting.
* data order: a deterministic function of (seed, epoch) (`crate_nn.data.batching.EpochBatches`), so a resumed
  run sees exactly the batches the uninterrupted run would have seen; ``num_workers`` DataLoader processes or,
  with ``--loader threads``, threads read them (the same batches either way).
* checkpoints (``checkpoints/step_XXXXXXX.pt`` and ``last.pt``, atomic): model, optimizer, per-rank RNG states,
  position, task state, EMA, counters and the partial log window — ``--resume`` continues bit-exactly on a CPU.
* preemption: SIGTERM or SIGINT (what SLURM and cloud schedulers send before killing a job) lets the current
  optimizer step finish, writes a checkpoint, and raises `Preempted` (a second signal stops at once, except during a
  checkpoint write, which it lets finish); ``crate-train`` then exits with 128 + the
  signal number after one line saying how to resume. Under torchrun the signal travels in the step's all-reduce,
  so every process stops after the same step (the next one when the signal arrives after that all-reduce).
* one run per directory: the main process holds `RunLock` on the run directory while it trains, and checkpoints
  record the training data (`data_identity`): ``--resume`` on other data is refused.
* metrics.jsonl: a line per ``log_every`` steps (train_loss, lr, throughput, task metrics, counters), a line per
  evaluation (at step 0 with ``eval_at_start``, at epoch ends and every ``eval_every_steps``), and end-of-run lines
  marked ``"final"`` (which a resumed run replaces).
* at the end (`crate_nn.engine.report`): ``figures/curves.png`` (loss, learning rate, evaluation metrics against
  the step) and ``summary.json``, printed as text: the final metrics beside their baselines, the wall time, the
  checkpoint, the figures and the commands that resume the run and score its checkpoint.
* schedules span ``epochs`` (warm-up ``warmup_epochs``) or, for recipes stated in steps, ``total_steps`` (warm-up
  ``warmup_steps``); the decay after the warm-up is cosine or linear (``lr_schedule``).
"""
from __future__ import annotations

import contextlib
import json
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm import tqdm

from ..data.batching import EpochBatches, loader
from . import distributed, precision, report
from .config import COMPILE_MODES, TrainConfig
from .ema import EMA
from .optim import build_optimizer, clip_gradients
from .precision import autocast
from .run_dir import (
    RunFiles,
    RunLock,
    check_output_dir,
    check_same_data,
    clear_run,
    data_identity,
    read_metrics,
    read_run_state,
    rng_state,
    seed_everything,
    set_rng_state,
)
from .schedule import Schedules
from .task import RunPlan, Task, resolve_batches, task_for

CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
"""torch.compile modes that capture CUDA graphs (`compile_model`)."""


def compile_model(model: nn.Module, mode: str = "default") -> nn.Module:
    """``torch.compile(model)`` in ``mode`` (``--compile-mode``, `crate_nn.engine.config.COMPILE_MODES`). The CUDA
    graphs of reduce-overhead and max-autotune are captured per input shape: training batches have one shape (an
    incomplete last batch is dropped); evaluation captures its own graphs (eval mode, its last short batch)."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile_mode: expected one of {', '.join(COMPILE_MODES)}, got {mode!r}")
    return torch.compile(model, mode=None if mode == "default" else mode)


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite; the run stopped before updating the weights."""


class Preempted(RuntimeError):
    """The run received SIGTERM/SIGINT, finished its optimizer step and saved a checkpoint to resume from."""

    def __init__(self, message: str, signum: int, step: int):
        super().__init__(message)
        self.signum, self.step = signum, step


@dataclass
class TrainResult:
    """What ``train`` returns: the run directory, the final checkpoint and the final metrics."""

    output_dir: str
    checkpoint: str
    metrics: dict
    steps: int
    seconds: float


def check_resumable(saved: dict, config: TrainConfig) -> None:
    """Refuse to resume with a config that changes the run (anything but its ``resume_free`` fields; an option
    added since the checkpoint was written passes at its default, `TrainConfig.differences`)."""
    changed = config.differences(saved, ignore=config.resume_free_fields())
    if changed:
        current = json.loads(json.dumps(config.to_dict(), default=str))
        details = "; ".join(f"{k}: saved {saved.get(k, '(none)')!r}, now {current.get(k, '(none)')!r}"
                            for k in changed)
        raise ValueError(f"resume: the config differs from the checkpoint's in {details}")


class StopSignals:
    """While active (main thread only), SIGTERM and SIGINT set ``received`` instead of killing the process."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.received = 0
        self._previous: dict[int, Any] = {}
        self._saving = False
        self._deferred = 0

    def _handle(self, signum, frame) -> None:
        if self.received:  # a second signal: give up at once, once a checkpoint being written is complete
            if self._saving:
                self._deferred = signum
                tqdm.write(f"crate-train: received {signal.Signals(signum).name} again; stopping once the checkpoint "
                           "being written is complete", file=sys.stderr)
                return
            raise KeyboardInterrupt(f"second signal {signal.Signals(signum).name} while stopping")
        self.received = signum
        tqdm.write(f"crate-train: received {signal.Signals(signum).name}; finishing this optimizer step, then saving "
                   "a checkpoint", file=sys.stderr)

    @contextlib.contextmanager
    def saving(self):
        """A checkpoint write: a second signal arriving during it takes effect after it."""
        self._saving = True
        try:
            yield
        finally:
            self._saving = False
        if self._deferred:
            raise KeyboardInterrupt(f"second signal {signal.Signals(self._deferred).name} while stopping (after "
                                    "the checkpoint write it arrived during)")

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)


@dataclass
class LogWindow:
    """The sums of one metrics.jsonl window; saved in checkpoints so a resumed run logs exactly the same lines."""

    loss: float = 0.0
    steps: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    start: float = field(default_factory=time.perf_counter)

    def add(self, loss: float, metrics: dict[str, float], samples: int) -> None:
        self.loss += loss
        self.steps += 1
        self.samples += samples
        for key, value in metrics.items():
            self.metrics[key] = self.metrics.get(key, 0.0) + value

    def state(self) -> dict:
        return {"loss": self.loss, "steps": self.steps, "metrics": dict(self.metrics)}

    @classmethod
    def from_state(cls, state: dict | None) -> LogWindow:
        return cls(state["loss"], state["steps"], dict(state["metrics"])) if state else cls()


def start_task(config: TrainConfig, ctx: distributed.Context, task_class: type[Task] | None = None) -> Task:
    """The task of a run as `train` starts it: every generator seeded with ``config.seed``, then the task (and its
    model) built. A run's initialisation is therefore a function of its config alone (`initial_model`)."""
    seed_everything(config.seed)
    return (task_class or task_for(config))(config, ctx)


def initial_model(config: TrainConfig) -> nn.Module:
    """The model a run of ``config`` starts from, built on the CPU by `start_task` exactly as `train` builds it
    (before a ``resume`` loads its checkpoint). Leaves the global generators seeded with ``config.seed``."""
    return start_task(config, distributed.context("cpu")).model


def train(config: TrainConfig) -> TrainResult:
    """Run (or resume) the training described by ``config``; returns the final metrics and checkpoint path.

    Raises ValueError/TypeError naming the field for a bad config, `NonFiniteLossError` when the loss diverges
    and `Preempted` after a SIGTERM/SIGINT (a checkpoint has been written; resume with ``resume=True``).
    """
    config.validate()
    task_class = task_for(config)
    resolve_batches(config, distributed.world_size())
    check_output_dir(config.output_dir, config.resume, config.overwrite)
    ctx = distributed.context(config.device)
    failed = True
    try:
        with RunLock(config.output_dir, enabled=ctx.is_main):
            check_output_dir(config.output_dir, config.resume, config.overwrite)  # again, now that it is ours
            result = _train(config, ctx, task_class)
        failed = False
        return result
    except Preempted:
        failed = False  # every process stopped at the same step
        raise
    finally:
        distributed.teardown(ctx, failed)


def _train(config: TrainConfig, ctx: distributed.Context, task_class: type[Task]) -> TrainResult:
    started = time.perf_counter()
    task = start_task(config, ctx, task_class)
    plan = RunPlan.resolve(config, task, ctx.world_size)
    task.start(plan)
    micro, accumulation, steps_per_epoch = plan.micro_batch, plan.accumulation, plan.steps_per_epoch
    total_steps, warmup_steps = plan.total_steps, plan.warmup_steps
    schedules = Schedules(warmup_steps, total_steps, config.min_lr_ratio, config.weight_decay,
                          config.weight_decay_end, config.ema_momentum, config.ema_momentum_end, config.lr_schedule)
    raw_model = task.model.to(ctx.device)
    precision.keep_activations(raw_model, config.activations)
    raw_model.preprocessing = task.preprocessing()  # saved with every checkpoint (crate_nn.preprocessing)
    optimizer = build_optimizer(config, raw_model)
    ema = EMA(raw_model) if config.ema else None
    # Augmentation randomness differs between processes; the initialisation above is the same everywhere.
    torch.manual_seed(config.seed * 1000 + 1 + ctx.rank)
    if ctx.is_main and config.overwrite:
        clear_run(config.output_dir)
    distributed.join(ctx)
    if config.precision == precision.MEASURED and ctx.device.type == "cpu":
        # every process measures; they train alike: in bf16 only if each of them found it faster
        slower = torch.tensor([float(not precision.cpu_bf16_faster())], dtype=torch.float64)
        precision.settle_cpu_bf16(distributed.all_reduce_sum(slower, ctx).item() == 0)
    run = RunFiles(config.output_dir, ctx.is_main, config.keep_checkpoints, config.tensorboard)

    epoch, step_in_epoch, step = 0, 0, 0
    totals: dict[str, float] = {}
    window = LogWindow()
    data = data_identity(task.train_set)
    if config.resume:
        state = read_run_state(run.last)
        check_resumable(state["train_config"], config)
        check_same_data(state.get("data"), data)
        raw_model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        epoch, step_in_epoch, step = (state["position"][k] for k in ("epoch", "step_in_epoch", "step"))
        task.clock = plan.clock(step)
        set_rng_state(state["rng"][ctx.rank] if ctx.rank < len(state["rng"]) else state["rng"][0])
        task.load_state_dict(state.get("task") or {})
        if ema is not None:
            ema.load_state_dict(state["ema"])
        totals = dict(state.get("totals") or {})
        window = LogWindow.from_state(state.get("log_window"))
        run.forget_after(step)
    run.write_config({
        **config.to_dict(), "task": config.task, "world_size": ctx.world_size, "micro_batch_size": micro,
        "accumulation_steps": accumulation, "steps_per_epoch": steps_per_epoch, "total_steps": total_steps,
        "warmup_steps": warmup_steps,
        "no_weight_decay": [n for g in optimizer.param_groups if not g["decay"] for n in g["names"]],
        **task.resolved(),
    })

    if ctx.is_main and config.activations != "fp32" \
            and precision.autocast_dtype(ctx.device, config.precision) != precision.ACTIVATIONS[config.activations]:
        tqdm.write(f"crate-train: --activations {config.activations} changes nothing here: precision "
                   f"{config.precision} on {ctx.device.type} does not autocast to {config.activations}",
                   file=sys.stderr)
    model: nn.Module = compile_model(raw_model, config.compile_mode) if config.compile else raw_model
    graphs = config.compile and config.compile_mode in CUDA_GRAPH_MODES and ctx.device.type == "cuda"
    if ctx.distributed:
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    fork = dict(devices=[ctx.device] if ctx.device.type == "cuda" else [])

    def evaluate_now() -> dict:
        with torch.random.fork_rng(**fork):
            metrics = task.evaluate(model)
            if ema is not None:
                metrics.update({f"ema_{k}": v for k, v in task.evaluate(ema.module).items()})
        return metrics

    def log_evaluation(when: str, position: dict, evaluated: dict) -> None:
        run.log({**position, **evaluated})
        if ctx.is_main:
            tqdm.write(f"{when}: " + " ".join(f"{k} {report.format_value(v)}" for k, v in evaluated.items()))

    def epoch_end(done_epochs: int) -> None:
        if ctx.is_main:
            with torch.random.fork_rng(**fork):
                raw_model.eval()
                task.epoch_end(raw_model, done_epochs, run.root)
                raw_model.train()

    stop = StopSignals()

    def save_checkpoint() -> None:
        payload = {
            "optimizer": optimizer.state_dict(),
            "scheduler": {"lr": [g["lr"] for g in optimizer.param_groups],
                          "weight_decay": [g["weight_decay"] for g in optimizer.param_groups]},
            "rng": distributed.all_gather_objects(rng_state(), ctx), "train_config": config.to_dict(),
            "position": {"epoch": epoch, "step_in_epoch": step_in_epoch, "step": step},
            "task": task.state_dict(), "ema": ema.state_dict() if ema is not None else None,
            "totals": dict(totals), "log_window": window.state(), "data": data,
        }
        with stop.saving():
            run.save(raw_model, step, payload)

    last_step = total_steps if config.max_steps is None else min(total_steps, config.max_steps)
    if step == 0:
        if config.eval_at_start:
            log_evaluation("start", {"epoch": 0.0, "step": 0}, evaluate_now())
        epoch_end(0)
    metrics: dict = {}
    unit_key = f"{task.unit}_per_s"
    bar = tqdm(total=last_step, initial=step, disable=not (ctx.is_main and config.progress), unit="step",
               dynamic_ncols=True)
    model.train()
    window.start = time.perf_counter()
    with stop:
        while step < last_step:
            if step_in_epoch > steps_per_epoch:  # cannot follow the data check of a resume; never spin on it
                raise RuntimeError(f"position {step_in_epoch} is past the {steps_per_epoch} steps of epoch {epoch}")
            batches = EpochBatches(len(task.train_set), global_batch=config.batch_size, micro_batch=micro,
                                   rank=ctx.rank, world_size=ctx.world_size, seed=config.seed, epoch=epoch,
                                   start_step=step_in_epoch)
            micro_batches = iter(loader(task.train_set, batches, config.num_workers,
                                        pin_memory=ctx.device.type == "cuda", collate_fn=task.collate,
                                        threads=config.loader == "threads"))
            while step_in_epoch < steps_per_epoch and step < last_step:
                multiplier, decay = schedules.lr_multiplier(step), schedules.weight_decay_at(step)
                for group in optimizer.param_groups:
                    group["lr"] = group["initial_lr"] * multiplier
                    if group["decay"]:
                        group["weight_decay"] = decay
                lr = optimizer.param_groups[0]["lr"]
                sums: dict[str, torch.Tensor] = {}
                keys: tuple[list[str], list[str]] = ([], [])
                for i in range(accumulation):
                    batch = next(micro_batches)
                    if graphs:  # a new iteration: the CUDA graphs may reuse the previous one's output buffers
                        torch.compiler.cudagraph_mark_step_begin()
                    sync = model.no_sync() if ctx.distributed and i < accumulation - 1 else contextlib.nullcontext()
                    with sync:
                        with autocast(ctx.device, config.precision):
                            out = task.loss(model, batch)
                        loss = out.loss.to(torch.promote_types(out.loss.dtype, torch.float32))
                        (loss / accumulation).backward()
                    keys = (sorted(out.metrics), sorted(out.counts))
                    for key, value in [("loss", loss.detach()), *out.metrics.items(), *out.counts.items()]:
                        value = torch.as_tensor(value, dtype=torch.float64, device=ctx.device).detach()
                        sums[key] = sums[key] + value if key in sums else value
                metric_keys, count_keys = keys
                # one all-reduce: mean loss and metrics over processes, counters, and whether any process must stop
                reduced = distributed.all_reduce_sum(torch.stack(
                    [sums["loss"] / accumulation, *(sums[k] / accumulation for k in metric_keys),
                     *(sums[k] for k in count_keys),
                     torch.tensor(float(stop.received != 0), dtype=torch.float64, device=ctx.device)]), ctx).tolist()
                loss_value = reduced[0] / ctx.world_size
                step_metrics = {k: v / ctx.world_size for k, v in zip(metric_keys, reduced[1:])}
                for k, v in zip(count_keys, reduced[1 + len(metric_keys):]):
                    totals[k] = totals.get(k, 0) + int(round(v))
                grad_norm = (clip_gradients(model.parameters(), config.grad_clip, config.grad_clip_mode)
                             if config.grad_clip is not None else None)
                if not (math.isfinite(loss_value) and (grad_norm is None or torch.isfinite(grad_norm))):
                    optimizer.zero_grad(set_to_none=True)
                    where = run.last if run.last.is_file() else "none written yet"
                    norm = "not computed" if grad_norm is None else grad_norm.item()
                    raise NonFiniteLossError(
                        f"training loss is {loss_value} (gradient norm {norm}) at optimizer step {step + 1} "
                        f"(epoch {epoch}); stopped without updating the weights; last good checkpoint: {where}"
                    )
                task.before_optimizer_step(model, step, epoch)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if ema is not None:
                    ema.update(raw_model, schedules.ema_momentum_at(step))
                task.after_optimizer_step(raw_model, step)
                step += 1
                step_in_epoch += 1
                task.clock = plan.clock(step)
                window.add(loss_value, step_metrics, config.batch_size * task.units_per_sample())
                bar.update(1)
                scheduled = step % config.log_every == 0
                if scheduled or step == last_step:
                    elapsed = time.perf_counter() - window.start
                    record = {"epoch": step / steps_per_epoch, "step": step,
                              "train_loss": window.loss / window.steps, "lr": lr,
                              unit_key: window.samples / max(elapsed, 1e-9),
                              **{f"train_{k}": v / window.steps for k, v in window.metrics.items()}, **totals}
                    run.log(record if scheduled else {**record, "final": True})
                    bar.set_postfix(loss=f"{record['train_loss']:.4f}", lr=f"{lr:.2e}")
                    if scheduled:  # a partial window at a stop goes on in a resumed run
                        window = LogWindow()
                # one process stops after the step in which the signal arrived; several processes after the step
                # whose all-reduce carried it, so that all stop together (at most one step later)
                if (reduced[-1] > 0) if ctx.distributed else stop.received:
                    save_checkpoint()
                    bar.close()
                    name = signal.Signals(stop.received or signal.SIGTERM).name
                    raise Preempted(f"stopped by {name} after optimizer step {step}; checkpoint {run.last}; continue "
                                    "with the same command plus --resume", stop.received or signal.SIGTERM, step)
                if config.checkpoint_every and step % config.checkpoint_every == 0 and step_in_epoch < steps_per_epoch:
                    save_checkpoint()
                if (config.eval_every_steps and step % config.eval_every_steps == 0 and step < last_step
                        and step_in_epoch < steps_per_epoch):  # epoch ends and the last step evaluate anyway
                    paused = time.perf_counter()
                    log_evaluation(f"step {step}", {"epoch": step / steps_per_epoch, "step": step}, evaluate_now())
                    window.start += time.perf_counter() - paused
            if step_in_epoch == steps_per_epoch:
                paused = time.perf_counter()  # evaluation and checkpoints do not count against throughput
                epoch, step_in_epoch = epoch + 1, 0
                scheduled = epoch % config.eval_every == 0
                if scheduled or step == last_step:
                    metrics = evaluate_now()
                    log_evaluation(f"epoch {epoch}", {"epoch": float(epoch), "step": step,
                                                      **({} if scheduled else {"final": True})}, metrics)
                epoch_end(epoch)
                save_checkpoint()
                window.start += time.perf_counter() - paused
    bar.close()
    if step_in_epoch:  # stopped inside an epoch (max_steps)
        save_checkpoint()
        metrics = evaluate_now()
        run.log({"epoch": step / steps_per_epoch, "step": step, **metrics, "final": True})
    if not metrics:  # resumed a finished run
        metrics = evaluate_now()
    final = task.final_evaluate(model)
    if final:
        run.log({"epoch": step / steps_per_epoch, "step": step, **final, "final": True})
    metrics = {**metrics, **final, **totals}
    run.close()
    seconds = time.perf_counter() - started
    if ctx.is_main:
        if config.curves:
            report.plot_curves({run.root.name: read_metrics(run.root / "metrics.jsonl")}, run.root / report.CURVES)
        summary = report.run_summary(run.root, config, steps=step, seconds=seconds, checkpoint=str(run.last),
                                     evaluate_command=task.evaluate_command)
        report.write_summary(run.root, summary)
        tqdm.write(report.summary_text(summary))
    return TrainResult(str(run.root), str(run.last), metrics, step, seconds)
