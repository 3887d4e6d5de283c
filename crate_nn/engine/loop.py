"""The training loop every system shares: ``train(config) -> TrainResult``.

The task (`crate_nn.engine.task.Task`, found from the config's class) supplies the model, the data, the loss of a
micro-batch and the evaluation; the loop owns the rest:

* processes: one process, or DistributedDataParallel under ``torchrun`` (NCCL on GPUs, gloo on CPU). Everything
  that can fail on bad input — the config, the run directory, the data, the model — is checked in every process
  *before* the process group forms, and no collective is entered on an error path, so a failure stops the job
  with its message instead of hanging it.
* each optimizer step: ``batch_size`` samples over all processes, split into micro-batches (gradient
  accumulation, ``no_sync`` on all but the last), bf16 autocast on GPUs (with ``bf16-if-faster`` also on CPUs
  measured to multiply bf16 faster: every process measures, bf16 only if all do; ``--run.activations bf16`` keeps the
  activations in bfloat16 between layers), ``torch.compile`` in a ``--run.compile-mode`` (CUDA graphs with
  reduce-overhead: a step boundary is marked before every micro-batch), one all-reduce for the loss,
  the logged metrics and counters and the stop flag, optional global-norm clipping, a NaN/Inf stop *before* the
  update, the per-step schedules (learning rate, weight decay, EMA momentum), the optional EMA.
* the run's arithmetic and position: micro-batch, accumulation, steps per epoch and the run's length are resolved
  once (`crate_nn.engine.task.RunPlan`) and handed to the task (`Task.start`); ``task.clock`` follows the optimizer
  steps (restored on resume), so the task's own schedules read the engine's numbers instead of counting.
* data order: a deterministic function of (seed, epoch) (`crate_nn.data.batching.EpochBatches`), so a resumed
  run sees exactly the batches the uninterrupted run would have seen; ``num_workers`` DataLoader processes or,
  with ``--run.loader threads``, threads read them (the same batches either way).
* checkpoints (``checkpoints/step_XXXXXXX.pt`` and ``last.pt``, atomic): model, optimizer, per-rank RNG states,
  position, task state, EMA, counters and the partial log window — ``--run.resume`` continues bit-exactly on a CPU.
* preemption: SIGTERM or SIGINT (what SLURM and cloud schedulers send before killing a job) lets the current
  optimizer step finish, writes a checkpoint, and raises `Preempted` (a second signal stops at once, except during a
  checkpoint write, which it lets finish); ``crate-train`` then exits with 128 + the
  signal number after one line saying how to resume. Under torchrun the signal travels in the step's all-reduce,
  so every process stops after the same step (the next one when the signal arrives after that all-reduce).
* one run per directory: the main process holds `RunLock` on the run directory while it trains, and checkpoints
  record the training data (`data_identity`): ``--run.resume`` on other data is refused.
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
from ..errors import NonFiniteLossError
from . import distributed, precision, report
from .config import COMPILE_MODES, TrainConfig
from .ema import EMA
from .optim import build_optimizer, clip_gradients
from .precision import autocast
from .resume import check_resumable, check_same_data, data_identity, read_run_state
from .rng import rng_state, seed_everything, set_rng_state
from .run_dir import RunFiles, RunLock, check_output_dir, clear_run, read_metrics
from .schedule import Schedules
from .task import RunPlan, Task, resolve_batches, task_for

CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
"""torch.compile modes that capture CUDA graphs (`compile_model`)."""


def compile_model(model: nn.Module, mode: str = "default") -> nn.Module:
    """``torch.compile(model)`` in ``mode`` (``--run.compile-mode``, `crate_nn.engine.config.COMPILE_MODES`). The CUDA
    graphs of reduce-overhead and max-autotune are captured per input shape: training batches have one shape (an
    incomplete last batch is dropped); evaluation captures its own graphs (eval mode, its last short batch)."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile_mode: expected one of {', '.join(COMPILE_MODES)}, got {mode!r}")
    return torch.compile(model, mode=None if mode == "default" else mode)


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
    """The task of a run as `train` starts it: every generator seeded with ``config.run.seed``, then the task (and its
    model) built. A run's initialisation is therefore a function of its config alone (`initial_model`)."""
    seed_everything(config.run.seed)
    return (task_class or task_for(config))(config, ctx)


def initial_model(config: TrainConfig) -> nn.Module:
    """The model a run of ``config`` starts from, built on the CPU by `start_task` exactly as `train` builds it
    (before a ``resume`` loads its checkpoint). Leaves the global generators seeded with ``config.run.seed``."""
    return start_task(config, distributed.context("cpu")).model


def train(config: TrainConfig) -> TrainResult:
    """Run (or resume) the training described by ``config``; returns the final metrics and checkpoint path.

    Raises ValueError/TypeError naming the field for a bad config, `NonFiniteLossError` when the loss diverges
    and `Preempted` after a SIGTERM/SIGINT (a checkpoint has been written; resume with ``resume=True``).
    """
    config.validate()
    task_class = task_for(config)
    resolve_batches(config, distributed.world_size())
    check_output_dir(config.run.output_dir, config.run.resume, config.run.overwrite)
    ctx = distributed.context(config.run.device)
    failed = True
    try:
        with RunLock(config.run.output_dir, enabled=ctx.is_main):
            check_output_dir(config.run.output_dir, config.run.resume, config.run.overwrite)  # again, now it is ours
            result = _train(config, ctx, task_class)
        failed = False
        return result
    except Preempted:
        failed = False  # every process stopped at the same step
        raise
    finally:
        distributed.teardown(ctx, failed)


def _train(config: TrainConfig, ctx: distributed.Context, task_class: type[Task]) -> TrainResult:
    """The run, phase by phase (`Training`)."""
    run = Training(config, ctx, task_class)
    if config.run.resume:
        run.restore()
    run.write_config()
    run.wrap()
    run.loop()
    return run.finish()


class Training:
    """One run of the loop, in named phases (`_train` calls them in this order): the constructor starts it (the task,
    its `RunPlan`, the model, the optimizer, the process group, the run directory); `restore` loads a resumed run's
    checkpoint; `wrap` compiles the model and wraps it for DDP; `loop` runs the epochs, each optimizer step being
    `step` (schedules, micro-batches, `reduce`, `update`), then `log_step`, `preempt_or_checkpoint` and
    `evaluate_by_steps`, each epoch ending with `end_epoch`; `finish` evaluates once more, writes the summary and
    returns the result. The position (``step``, ``epoch``, ``step_in_epoch``), the counters (``totals``) and the
    log window are attributes, which `checkpoint` saves and `restore` loads."""

    def __init__(self, config: TrainConfig, ctx: distributed.Context, task_class: type[Task]) -> None:
        self.started = time.perf_counter()
        self.config, self.ctx = config, ctx
        self.task = task = start_task(config, ctx, task_class)
        self.plan = plan = RunPlan.resolve(config, task, ctx.world_size)
        task.start(plan)
        optim = config.optim
        schedule = config.schedule
        self.schedules = Schedules(plan.warmup_steps, plan.total_steps, schedule.min_lr_ratio, optim.weight_decay,
                                   optim.weight_decay_end, optim.ema_momentum, optim.ema_momentum_end,
                                   schedule.lr_schedule)
        self.raw_model = task.model.to(ctx.device)
        precision.keep_activations(self.raw_model, config.run.activations)
        self.raw_model.preprocessing = task.preprocessing()  # saved with every checkpoint (crate_nn.preprocessing)
        self.model: nn.Module = self.raw_model  # `wrap` compiles and wraps it
        self.optimizer = build_optimizer(config, self.raw_model)
        self.ema = EMA(self.raw_model) if optim.ema else None
        # Augmentation randomness differs between processes; the initialisation above is the same everywhere.
        torch.manual_seed(config.run.seed * 1000 + 1 + ctx.rank)
        if ctx.is_main and config.run.overwrite:
            clear_run(config.run.output_dir)
        distributed.join(ctx)
        if config.run.precision == precision.MEASURED and ctx.device.type == "cpu":
            # every process measures; they train alike: in bf16 only if each of them found it faster
            slower = torch.tensor([float(not precision.cpu_bf16_faster())], dtype=torch.float64)
            precision.settle_cpu_bf16(distributed.all_reduce_sum(slower, ctx).item() == 0)
        self.files = RunFiles(config.run.output_dir, ctx.is_main, config.run.keep_checkpoints, config.run.tensorboard)
        self.epoch, self.step_in_epoch, self.step = 0, 0, 0
        self.totals: dict[str, float] = {}
        self.window = LogWindow()
        self.data = data_identity(task.train_set)
        self.metrics: dict = {}  # the last evaluation's
        max_steps = config.schedule.max_steps
        self.last_step = plan.total_steps if max_steps is None else min(plan.total_steps, max_steps)
        self.stop = StopSignals()
        self.fork = dict(devices=[ctx.device] if ctx.device.type == "cuda" else [])
        self.bar = None

    # -- before the first step ------------------------------------------------------------------------------
    def restore(self) -> None:
        """Continue from ``checkpoints/last.pt``: the same config (but its ``resume_free`` fields) and data, then the
        model, the optimizer, the position, this process's random state, the task's state, the EMA, the counters and
        the partial log window; metrics.jsonl forgets what the run will write again."""
        state = read_run_state(self.files.last)
        check_resumable(state["train_config"], self.config)
        check_same_data(state.get("data"), self.data)
        self.raw_model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.step_in_epoch, self.step = (state["position"][k] for k in ("epoch", "step_in_epoch", "step"))
        self.task.clock = self.plan.clock(self.step)
        rank = self.ctx.rank
        set_rng_state(state["rng"][rank] if rank < len(state["rng"]) else state["rng"][0])
        self.task.load_state_dict(state.get("task") or {})
        if self.ema is not None:
            self.ema.load_state_dict(state["ema"])
        self.totals = dict(state.get("totals") or {})
        self.window = LogWindow.from_state(state.get("log_window"))
        self.files.forget_after(self.step)

    def write_config(self) -> None:
        """config.json: the config, and what the engine and the task resolved from it."""
        plan, optimizer = self.plan, self.optimizer
        self.files.write_config({
            **self.config.to_dict(), "task": self.config.task, "world_size": self.ctx.world_size,
            "micro_batch_size": plan.micro_batch, "accumulation_steps": plan.accumulation,
            "steps_per_epoch": plan.steps_per_epoch, "total_steps": plan.total_steps,
            "warmup_steps": plan.warmup_steps,
            "no_weight_decay": [n for g in optimizer.param_groups if not g["decay"] for n in g["names"]],
            **self.task.resolved(),
        })

    def wrap(self) -> None:
        """The model the steps run: compiled (``compile``, in ``compile_mode``), then wrapped by
        DistributedDataParallel (torchrun); says so when ``activations`` changes nothing on this device."""
        run, ctx = self.config.run, self.ctx
        if ctx.is_main and run.activations != "fp32" \
                and precision.autocast_dtype(ctx.device, run.precision) != precision.ACTIVATIONS[run.activations]:
            tqdm.write(f"crate-train: --run.activations {run.activations} changes nothing here: precision "
                       f"{run.precision} on {ctx.device.type} does not autocast to {run.activations}",
                       file=sys.stderr)
        model = compile_model(self.raw_model, run.compile_mode) if run.compile else self.raw_model
        if self.ctx.distributed:
            model = nn.parallel.DistributedDataParallel(
                model, device_ids=[self.ctx.device.index] if self.ctx.device.type == "cuda" else None)
        self.model = model

    # -- the epochs -----------------------------------------------------------------------------------------
    def loop(self) -> None:
        """From the current position to ``last_step``: the initial evaluation of a new run, then epoch after epoch
        of optimizer steps."""
        config, steps_per_epoch = self.config, self.plan.steps_per_epoch
        if self.step == 0:
            if config.evaluation.eval_at_start:
                self.log_evaluation("start", {"epoch": 0.0, "step": 0}, self.evaluate())
            self.epoch_end(0)
        self.bar = tqdm(total=self.last_step, initial=self.step, disable=not (self.ctx.is_main and config.run.progress),
                        unit="step", dynamic_ncols=True)
        self.model.train()
        self.window.start = time.perf_counter()
        with self.stop:
            while self.step < self.last_step:
                micro_batches = self.epoch_data()
                while self.step_in_epoch < steps_per_epoch and self.step < self.last_step:
                    lr, any_stopping = self.step_once(micro_batches)
                    self.log_step(lr)
                    self.preempt_or_checkpoint(any_stopping)
                    self.evaluate_by_steps()
                if self.step_in_epoch == steps_per_epoch:
                    self.end_epoch()
        self.bar.close()

    def epoch_data(self):
        """The micro-batches of this process for the rest of the current epoch (`EpochBatches`)."""
        config, ctx, task = self.config, self.ctx, self.task
        if self.step_in_epoch > self.plan.steps_per_epoch:  # cannot follow the data check of a resume; never spin on it
            raise RuntimeError(f"position {self.step_in_epoch} is past the {self.plan.steps_per_epoch} steps of epoch "
                               f"{self.epoch}")
        batches = EpochBatches(len(task.train_set), global_batch=config.schedule.batch_size,
                               micro_batch=self.plan.micro_batch, rank=ctx.rank, world_size=ctx.world_size,
                               seed=config.run.seed, epoch=self.epoch, start_step=self.step_in_epoch)
        return iter(loader(task.train_set, batches, config.run.num_workers, pin_memory=ctx.device.type == "cuda",
                           collate_fn=task.collate, threads=config.run.loader == "threads"))

    # -- one optimizer step ---------------------------------------------------------------------------------
    def step_once(self, micro_batches) -> tuple[float, bool]:
        """One optimizer step: the schedules, the micro-batches' gradients (`accumulate`), `reduce`, `update`; then
        the position and the log window move on. Returns (the step's learning rate, whether a process received a stop
        signal before the step's all-reduce)."""
        lr = self.apply_schedules()
        sums, metric_keys, count_keys = self.accumulate(micro_batches)
        loss, metrics, any_stopping = self.reduce(sums, metric_keys, count_keys)
        self.update(loss)
        self.step += 1
        self.step_in_epoch += 1
        self.task.clock = self.plan.clock(self.step)
        self.window.add(loss, metrics, self.config.schedule.batch_size * self.task.units_per_sample())
        self.bar.update(1)
        return lr, any_stopping

    def apply_schedules(self) -> float:
        """The learning rate and weight decay of the current step in every parameter group; returns the rate."""
        multiplier, decay = self.schedules.lr_multiplier(self.step), self.schedules.weight_decay_at(self.step)
        for group in self.optimizer.param_groups:
            group["lr"] = group["initial_lr"] * multiplier
            if group["decay"]:
                group["weight_decay"] = decay
        return self.optimizer.param_groups[0]["lr"]

    def accumulate(self, micro_batches) -> tuple[dict[str, torch.Tensor], list[str], list[str]]:
        """Forward and backward the step's micro-batches (autocast; DDP's gradient sync on the last only): float64
        sums of the loss, the task's metrics and counts, and the names of the metrics and of the counts."""
        ctx, accumulation = self.ctx, self.plan.accumulation
        sums: dict[str, torch.Tensor] = {}
        keys: tuple[list[str], list[str]] = ([], [])
        run = self.config.run
        graphs = run.compile and run.compile_mode in CUDA_GRAPH_MODES and ctx.device.type == "cuda"
        for i in range(accumulation):
            batch = next(micro_batches)
            if graphs:  # a new iteration: the CUDA graphs may reuse the previous one's output buffers
                torch.compiler.cudagraph_mark_step_begin()
            sync = (self.model.no_sync() if ctx.distributed and i < accumulation - 1 else contextlib.nullcontext())
            with sync:
                with autocast(ctx.device, self.config.run.precision):
                    out = self.task.loss(self.model, batch)
                loss = out.loss.to(torch.promote_types(out.loss.dtype, torch.float32))
                (loss / accumulation).backward()
            keys = (sorted(out.metrics), sorted(out.counts))
            for key, value in [("loss", loss.detach()), *out.metrics.items(), *out.counts.items()]:
                value = torch.as_tensor(value, dtype=torch.float64, device=ctx.device).detach()
                sums[key] = sums[key] + value if key in sums else value
        return sums, *keys

    def reduce(self, sums: dict[str, torch.Tensor], metric_keys: list[str],
               count_keys: list[str]) -> tuple[float, dict[str, float], bool]:
        """One all-reduce: the mean loss and metrics over processes, the counters (added to ``totals``) and whether
        any process received a stop signal. Returns (loss, metrics, that flag)."""
        ctx, accumulation = self.ctx, self.plan.accumulation
        reduced = distributed.all_reduce_sum(torch.stack(
            [sums["loss"] / accumulation, *(sums[k] / accumulation for k in metric_keys),
             *(sums[k] for k in count_keys),
             torch.tensor(float(self.stop.received != 0), dtype=torch.float64, device=ctx.device)]), ctx).tolist()
        metrics = {k: v / ctx.world_size for k, v in zip(metric_keys, reduced[1:])}
        for k, v in zip(count_keys, reduced[1 + len(metric_keys):]):
            self.totals[k] = self.totals.get(k, 0) + int(round(v))
        return reduced[0] / ctx.world_size, metrics, reduced[-1] > 0

    def update(self, loss: float) -> None:
        """Clip, stop on a non-finite loss or gradient before touching the weights, then the task's hooks around the
        optimizer's update and the EMA."""
        config, optimizer = self.config, self.optimizer
        grad_norm = (clip_gradients(self.model.parameters(), config.optim.grad_clip, config.optim.grad_clip_mode)
                     if config.optim.grad_clip is not None else None)
        if not (math.isfinite(loss) and (grad_norm is None or torch.isfinite(grad_norm))):
            optimizer.zero_grad(set_to_none=True)
            where = self.files.last if self.files.last.is_file() else "none written yet"
            norm = "not computed" if grad_norm is None else grad_norm.item()
            raise NonFiniteLossError(
                f"training loss is {loss} (gradient norm {norm}) at optimizer step {self.step + 1} "
                f"(epoch {self.epoch}); stopped without updating the weights; last good checkpoint: {where}"
            )
        self.task.before_optimizer_step(self.model, self.step, self.epoch)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self.ema.update(self.raw_model, self.schedules.ema_momentum_at(self.step))
        self.task.after_optimizer_step(self.raw_model, self.step)

    # -- after a step ---------------------------------------------------------------------------------------
    def log_step(self, lr: float) -> None:
        """Every ``log_every`` steps (and at the last) a metrics.jsonl line of the window's means; a partial window
        at the last step is marked final and goes on in a resumed run."""
        step, window = self.step, self.window
        scheduled = step % self.config.run.log_every == 0
        if not (scheduled or step == self.last_step):
            return
        elapsed = time.perf_counter() - window.start
        record = {"epoch": step / self.plan.steps_per_epoch, "step": step, "train_loss": window.loss / window.steps,
                  "lr": lr, f"{self.task.unit}_per_s": window.samples / max(elapsed, 1e-9),
                  **{f"train_{k}": v / window.steps for k, v in window.metrics.items()}, **self.totals}
        self.files.log(record if scheduled else {**record, "final": True})
        self.bar.set_postfix(loss=f"{record['train_loss']:.4f}", lr=f"{lr:.2e}")
        if scheduled:
            self.window = LogWindow()

    def preempt_or_checkpoint(self, any_stopping: bool) -> None:
        """After a stop signal (`StopSignals`): a checkpoint, then `Preempted`. One process stops after the step in
        which the signal arrived; several processes after the step whose all-reduce carried it (``any_stopping``),
        so that all stop together (at most one step later). Otherwise a checkpoint every ``checkpoint_every``
        steps (an epoch's last step saves at its end)."""
        if any_stopping if self.ctx.distributed else self.stop.received:
            self.checkpoint()
            self.bar.close()
            signum = self.stop.received or signal.SIGTERM
            raise Preempted(f"stopped by {signal.Signals(signum).name} after optimizer step {self.step}; checkpoint "
                            f"{self.files.last}; continue with the same command plus --run.resume", signum, self.step)
        every = self.config.run.checkpoint_every
        if every and self.step % every == 0 and self.step_in_epoch < self.plan.steps_per_epoch:
            self.checkpoint()

    def evaluate_by_steps(self) -> None:
        """Every ``eval_every_steps`` steps inside an epoch (epoch ends and the last step evaluate anyway)."""
        every, step = self.config.evaluation.eval_every_steps, self.step
        if every and step % every == 0 and step < self.last_step and self.step_in_epoch < self.plan.steps_per_epoch:
            paused = time.perf_counter()
            self.log_evaluation(f"step {step}", {"epoch": step / self.plan.steps_per_epoch, "step": step},
                                self.evaluate())
            self.window.start += time.perf_counter() - paused

    def end_epoch(self) -> None:
        """After an epoch's last step: the evaluation (every ``eval_every`` epochs, and at the last step), the
        task's `epoch_end` and a checkpoint; none of them counts against the throughput."""
        paused = time.perf_counter()
        self.epoch, self.step_in_epoch = self.epoch + 1, 0
        scheduled = self.epoch % self.config.evaluation.eval_every == 0
        if scheduled or self.step == self.last_step:
            self.metrics = self.evaluate()
            self.log_evaluation(f"epoch {self.epoch}", {"epoch": float(self.epoch), "step": self.step,
                                                        **({} if scheduled else {"final": True})}, self.metrics)
        self.epoch_end(self.epoch)
        self.checkpoint()
        self.window.start += time.perf_counter() - paused

    # -- what the phases share ------------------------------------------------------------------------------
    def evaluate(self) -> dict:
        """The task's evaluation of the model (and of the EMA's, as ``ema_*``), leaving the random state as it was."""
        with torch.random.fork_rng(**self.fork):
            metrics = self.task.evaluate(self.model)
            if self.ema is not None:
                metrics.update({f"ema_{k}": v for k, v in self.task.evaluate(self.ema.module).items()})
        return metrics

    def log_evaluation(self, when: str, position: dict, evaluated: dict) -> None:
        self.files.log({**position, **evaluated})
        if self.ctx.is_main:
            tqdm.write(f"{when}: " + " ".join(f"{k} {report.format_value(v)}" for k, v in evaluated.items()))

    def epoch_end(self, done_epochs: int) -> None:
        """The task's `Task.epoch_end` (main process, eval mode, the random state left as it was)."""
        if self.ctx.is_main:
            with torch.random.fork_rng(**self.fork):
                self.raw_model.eval()
                self.task.epoch_end(self.raw_model, done_epochs, self.files.root)
                self.raw_model.train()

    def checkpoint(self) -> None:
        """``checkpoints/step_XXXXXXX.pt`` and ``last.pt``: everything `restore` needs (a collective call: every
        process's random state is gathered)."""
        optimizer = self.optimizer
        payload = {
            "optimizer": optimizer.state_dict(),
            "scheduler": {"lr": [g["lr"] for g in optimizer.param_groups],
                          "weight_decay": [g["weight_decay"] for g in optimizer.param_groups]},
            "rng": distributed.all_gather_objects(rng_state(), self.ctx), "train_config": self.config.to_dict(),
            "position": {"epoch": self.epoch, "step_in_epoch": self.step_in_epoch, "step": self.step},
            "task": self.task.state_dict(), "ema": self.ema.state_dict() if self.ema is not None else None,
            "totals": dict(self.totals), "log_window": self.window.state(), "data": self.data,
        }
        with self.stop.saving():
            self.files.save(self.raw_model, self.step, payload)

    # -- after the last step --------------------------------------------------------------------------------
    def finish(self) -> TrainResult:
        """A run stopped inside an epoch (``max_steps``) is saved and evaluated; then the task's final evaluation,
        the curves and the summary (main process)."""
        config, files, task = self.config, self.files, self.task
        position = {"epoch": self.step / self.plan.steps_per_epoch, "step": self.step}
        if self.step_in_epoch:
            self.checkpoint()
            self.metrics = self.evaluate()
            files.log({**position, **self.metrics, "final": True})
        if not self.metrics:  # resumed a finished run
            self.metrics = self.evaluate()
        final = task.final_evaluate(self.model)
        if final:
            files.log({**position, **final, "final": True})
        metrics = {**self.metrics, **final, **self.totals}
        files.close()
        seconds = time.perf_counter() - self.started
        if self.ctx.is_main:
            if config.run.curves:
                report.plot_curves({files.root.name: read_metrics(files.root / "metrics.jsonl")},
                                   files.root / report.CURVES)
            summary = report.run_summary(files.root, config, steps=self.step, seconds=seconds,
                                         checkpoint=str(files.last), evaluate_command=task.evaluate_command)
            report.write_summary(files.root, summary)
            tqdm.write(report.summary_text(summary))
        return TrainResult(str(files.root), str(files.last), metrics, self.step, seconds)
