"""What a system supplies to the engine: a `Task` — its model, its data, the loss of a micro-batch, its evaluation.

The engine (`crate_nn.engine.loop.train`) owns everything else: the process group, the data order, gradient
accumulation, autocast, ``torch.compile``, DistributedDataParallel, clipping, the optimizer and its schedules,
the EMA, the NaN stop, preemption, checkpoints, exact resume, the progress bar and metrics.jsonl.

The engine owns the run's arithmetic and its position too. It resolves the micro-batch, the accumulation, the
steps per epoch and the run's length once (`RunPlan`) and hands them to the task with `Task.start` before training;
while it trains it keeps ``task.clock`` (`Clock`: optimizer steps done, epoch) current, restored on ``--run.resume``
from the checkpoint's position. A task keeps no step counter of its own: its per-step and per-epoch schedules (a
teacher's momentum, a temperature warm-up, the epoch of its masks) read ``self.plan`` and ``self.clock``.

A task is registered with its config class (``@register_task(MyConfig)``); a *preset* is a function returning a
filled config of some task, registered with ``@preset`` under its function name and listed by ``crate-train
--help``. ``train(config)`` finds the task from the config's class.
"""
from __future__ import annotations

import abc
import dataclasses
import functools
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn
from torch.utils.data import Dataset

from ..data.batching import collate
from ..preprocessing import Preprocessing, from_training
from .config import TrainConfig, check_sections, fit_to_run, merge_options
from .distributed import Context


class LossOutput(NamedTuple):
    """The loss of one micro-batch and what to log with it.

    ``loss``: the scalar to minimise (its mean over the micro-batch). ``metrics``: scalars averaged like the loss
    (over micro-batches, processes and the log window) and logged as ``train_<name>``. ``counts``: numbers summed
    over the whole run (e.g. unreadable files skipped), logged under their name and saved in checkpoints.
    """

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor | float] = {}
    counts: dict[str, torch.Tensor | float] = {}


def resolve_batches(config: TrainConfig, world_size: int) -> tuple[int, int]:
    """(micro-batch per process, accumulation steps) such that micro × accumulation × processes = batch_size."""
    schedule = config.schedule
    if schedule.batch_size % world_size:
        raise ValueError(f"batch_size: {schedule.batch_size} is not divisible across {world_size} processes")
    per_process = schedule.batch_size // world_size
    micro = schedule.micro_batch_size or per_process
    if per_process % micro:
        raise ValueError(
            f"micro_batch_size: {micro} does not divide the per-process batch {per_process} "
            f"(batch_size {schedule.batch_size} / {world_size} processes)"
        )
    return micro, per_process // micro


class Clock(NamedTuple):
    """The engine's position: ``step`` optimizer steps done, in ``epoch`` (0-based, ``step // steps_per_epoch``).

    During the hooks of optimizer step s (``loss``, ``before_optimizer_step``, ``after_optimizer_step``) ``step``
    is s; after an epoch's last step (``evaluate``, ``epoch_end``) ``epoch`` counts the epochs completed.
    """

    step: int
    epoch: int


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """The run as the engine resolved it, once, from the config, the task's data and the processes (`Task.start`).

    ``micro_batch`` samples per process and forward pass, ``accumulation`` micro-batches per optimizer step and
    process, ``world_size`` processes (micro_batch × accumulation × world_size = batch_size); ``steps_per_epoch``
    optimizer steps per epoch; ``total_steps`` the steps the schedules span (``total_steps``, else ``epochs``
    epochs; ``max_steps`` stops a run earlier without changing it), ``warmup_steps`` those of the warm-up.
    """

    micro_batch: int
    accumulation: int
    world_size: int
    steps_per_epoch: int
    total_steps: int
    warmup_steps: int

    @classmethod
    def resolve(cls, config: TrainConfig, task: Task, world_size: int) -> RunPlan:
        """The run of ``task`` (built from ``config``) on ``world_size`` processes; ValueError naming the field
        when the batch does not split across the processes or exceeds the training data."""
        micro, accumulation = resolve_batches(config, world_size)
        batch_size = config.schedule.batch_size
        steps_per_epoch = task.steps_per_epoch(batch_size)
        if steps_per_epoch < 1:
            raise ValueError(f"batch_size: {batch_size} exceeds the {len(task.train_set)} training samples")
        total, warmup = config.schedule.run_steps(steps_per_epoch)
        return cls(micro, accumulation, world_size, steps_per_epoch, total, warmup)

    def clock(self, step: int) -> Clock:
        """The position after ``step`` optimizer steps."""
        return Clock(step, step // self.steps_per_epoch)


class Task(abc.ABC):
    """One system's training: built in every process from its config and this process's context.

    The constructor builds ``self.model`` (on the CPU; the engine moves it, compiles and wraps it) and
    ``self.train_set`` (a map-style dataset; the engine draws its deterministic batches) and anything the
    evaluation needs. It must not communicate with other processes: it runs before the process group forms, so a
    failure here (missing data, bad option) stops every process with its message instead of a hang.

    Then the engine calls ``start(plan)`` (``self.plan``: the `RunPlan`) before any other hook, and keeps ``self.clock``
    (the `Clock`, ``Clock(0, 0)`` until training moves it) at its position: the task reads both and writes
    neither. Code that drives a task without the engine (a measurement, a benchmark) starts it itself:
    ``task.start(RunPlan.resolve(config, task, ctx.world_size))``.
    """

    config_class: ClassVar[type[TrainConfig]]
    unit: ClassVar[str] = "samples"  # what throughput counts: "<unit>_per_s" in metrics.jsonl
    evaluate_command: ClassVar[str | None] = None  # the command the run summary gives to score its checkpoint

    model: nn.Module
    train_set: Dataset
    plan: RunPlan
    clock: Clock

    def __init__(self, config: TrainConfig, ctx: Context) -> None:
        self.config, self.ctx = config, ctx
        self.clock = Clock(0, 0)

    def start(self, plan: RunPlan) -> None:
        """Receive the run the engine resolved (after the constructor, before a resumed run's state is loaded and
        before any other hook)."""
        self.plan = plan

    # -- data -----------------------------------------------------------------------------------------------
    def collate(self, items: list) -> Any:
        """Stack dataset items into a micro-batch (default: (image, label, index) triples → `Batch`)."""
        return collate(items)

    def steps_per_epoch(self, batch_size: int) -> int:
        """Optimizer steps in one epoch: full global batches of ``train_set``."""
        return len(self.train_set) // batch_size

    def units_per_sample(self) -> int:
        """How many ``unit`` one sample counts for (e.g. tokens per sequence); 1 by default."""
        return 1

    # -- training -------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def loss(self, model: nn.Module, batch: Any) -> LossOutput:
        """Forward one micro-batch (as yielded by the data loader, still on the CPU) through ``model`` (possibly
        wrapped by DDP/compile; the engine has entered autocast) and return its loss."""

    def before_optimizer_step(self, model: nn.Module, step: int, epoch: int) -> None:
        """After the gradients of optimizer step ``step`` (0-based) are accumulated and clipped, before the update."""

    def after_optimizer_step(self, model: nn.Module, step: int) -> None:
        """After the update of optimizer step ``step`` (0-based), e.g. an EMA teacher."""

    # -- evaluation and outputs -------------------------------------------------------------------------------
    @abc.abstractmethod
    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """Held-out metrics (every process calls it; reduce across processes inside). Keys are logged as given."""

    def final_evaluate(self, model: nn.Module) -> dict[str, float]:
        """Metrics computed once at the end of the run (e.g. a test split); none by default."""
        return {}

    def epoch_end(self, model: nn.Module, epoch: int, run_dir: Path) -> None:
        """Main process only, after ``epoch`` epochs (0 = before training): measurements, figures."""

    # -- state ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Task state a resumed run needs besides the model, the optimizer and the engine's position (e.g. a
        running sum); none by default."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of `state_dict`. The default ignores ``state``: the checkpoints of tasks that counted their own
        optimizer steps hold ``{"step": N}``, which the engine's position (``self.clock``) has replaced."""

    def preprocessing(self) -> Preprocessing:
        """What the model's inputs go through (`crate_nn.preprocessing`), recorded in the run's checkpoints: by
        default the config's ``mean``, ``std``, ``image_size`` and ``tokenizer`` where it has them, and the model's
        patch size."""
        return from_training(self.config.to_dict(), getattr(self.model, "config", None))

    def resolved(self) -> dict:
        """What the task resolved from its config, recorded in config.json (e.g. the model's full config)."""
        config = getattr(self.model, "config", None)
        return {"model_config": dataclasses.asdict(config)} if dataclasses.is_dataclass(config) else {}


def require_classes(classes: Sequence[str], where: str) -> None:
    """ValueError unless a classifier's training data (``where``: the option and what it names) has at least two
    classes: a one-way head predicts its only class whatever the input, so it "learns" to accuracy 1.0."""
    if len(classes) < 2:
        found = f"one class, {list(classes)}" if classes else "no classes"
        raise ValueError(f"{where} holds {found}; a classifier needs at least two")


TASKS: dict[type[TrainConfig], type[Task]] = {}
PRESETS: dict[str, Callable[[], TrainConfig]] = {}


def register_task(config_class: type[TrainConfig]) -> Callable[[type[Task]], type[Task]]:
    """Class decorator: ``config_class`` configures this task (``train(config)`` dispatches on it). ValueError when
    the config does not name its task, or is not composed of sections (`check_sections`: it inherits one, or two
    of its sections declare one field name)."""

    def wrap(cls: type[Task]) -> type[Task]:
        if not config_class.task:
            raise ValueError(f"{config_class.__name__}.task must name the task")
        check_sections(config_class)
        cls.config_class = config_class
        TASKS[config_class] = cls
        return cls

    return wrap


def task_for(config: TrainConfig) -> type[Task]:
    """The task registered for ``type(config)`` (TypeError naming the registered config classes otherwise)."""
    if type(config) not in TASKS:
        raise TypeError(f"no task is registered for {type(config).__name__}; registered: "
                        f"{sorted(c.__name__ for c in TASKS)}")
    return TASKS[type(config)]


def recorded_config(fields: Mapping, task: str, source: str) -> TrainConfig:
    """The config a run trained with, from what it recorded: ``fields``, the ``train_config`` its checkpoints hold
    (`crate_nn.weights.training_config`; config.json holds resolved values under some of the same names), as the
    config class of ``task`` (config.json's ``task``); JSON's lists go back to tuples where the field holds one.
    ValueError naming ``source`` for a task that is not registered (import ``crate_nn.tasks`` first: it registers
    them)."""
    classes = {c.task: c for c in TASKS}
    if task not in classes:
        raise ValueError(f"{source}: expected a run's task (one of {sorted(classes)}), got {task!r}")
    config_class = classes[task]
    known = config_class.flat_fields()
    return config_class.from_dict({name: value for name, value in fields.items() if name in known})


def preset(fn: Callable[[], TrainConfig]) -> Callable[[], TrainConfig]:
    """Function decorator: register ``fn`` as the preset named ``fn.__name__`` (its docstring gives the command,
    the expected wall time and the expected result); the configs it returns carry that name in ``preset``."""
    name = fn.__name__
    if name in PRESETS:
        raise ValueError(f"preset {name!r} is already registered")

    @functools.wraps(fn)
    def named() -> TrainConfig:
        return fn().replace(preset=name)

    PRESETS[name] = named
    return named


def get_preset(name: str, **overrides) -> TrainConfig:
    """The preset ``name`` with ``overrides`` (fields of its config by name or path: ``lr=1e-3``,
    ``**{"optim.lr": 1e-3}``) applied; nothing is validated yet (``train`` validates; ``crate-train`` validates
    before it starts).

    When ``overrides`` change the run's length (``epochs``, ``total_steps``), the preset's warm-up and its
    measurement, k-NN, probe, figure and step cadences that ``overrides`` leave alone keep their share of the run
    (`crate_nn.engine.config.fit_to_run`), and one line on stderr says what changed. Values given in ``overrides``
    are kept as given: one past the run's end is refused by ``validate`` with what to pass instead. A dict field
    (``model_args``) is merged into the preset's (`crate_nn.engine.config.merge_options`: the keys given replace the
    preset's, the others are kept, a key given as ``"default"`` is removed).
    """
    if name not in PRESETS:
        raise ValueError(f"preset: expected one of {', '.join(sorted(PRESETS))}, got {name!r}")
    config = PRESETS[name]()
    by_name: dict[str, Any] = {}
    for key, value in overrides.items():
        try:
            field = config.resolve(key)[1]
        except TypeError as err:
            raise TypeError(f"preset {name!r}: {err}") from None
        if field in by_name:
            raise TypeError(f"{field}: given twice (by its name and by its path)")
        current = config.get(field)
        by_name[field] = merge_options(current, value) if isinstance(value, Mapping) and isinstance(current, dict) \
            else value
    fitted, changes = fit_to_run(config, by_name)
    if changes:
        length = ", ".join(f"{k}={by_name[k]}" for k in ("epochs", "total_steps") if k in by_name)
        print(f"preset {name} with {length}: {', '.join(changes)} (kept in proportion to the run; set them to "
              "choose other values)", file=sys.stderr)
    return config.replace(**by_name, **fitted)


def list_presets() -> dict[str, list[str]]:
    """Preset names grouped by task name."""
    grouped: dict[str, list[str]] = {}
    for name, fn in PRESETS.items():
        grouped.setdefault(fn().task, []).append(name)
    return grouped
