"""`TrainConfig`: what every training run needs from the engine, whatever the task; each task's config extends it.

A config is composed of sections (`Section`: dataclass mixins, each declaring its fields once): the engine's are
`RunSection`, `OptimSection`, `ScheduleSection` and `EvaluationSection` (`TrainConfig` is these four), and
`DataSection` owns the ``data_dir`` every system's data section extends; a task's config lists its sections (its
model, its data, what its system adds: crops, distillation, masking …) and may declare fields of its own.
``Config.sections()`` lists them; ``crate-train --help`` shows one group of flags per section. The fields stay flat:
a field's name is its flag and its key in ``to_dict()``, whatever section declares it.

Every field is declared with `option`, which records in the field itself what the command line and the checks
need: its help text, its allowed values, its bounds and whether it may change when a run is resumed
(``resume_free``: bookkeeping such as the output directory or the number of workers, never anything that changes
the numbers). `validate` checks every field against its type and its declaration and raises ValueError naming
the field, before any work starts. The resolved config is written to ``<output_dir>/config.json`` and into every
checkpoint.

A field declared with ``span="epochs"`` or ``span="steps"`` is a share of the run (a warm-up, the epochs after
which something is measured, an evaluation cadence): `validate` refuses a value past the run's end (``epochs``;
``total_steps`` when set), and `fit_to_run` rescales it when a preset is given another run length.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import math
import re
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .precision import ACTIVATIONS, MEASURED
from .schedule import LR_SCHEDULES

OPTIMIZERS = ("lion", "adamw")
PRECISIONS = ("auto", MEASURED, "bf16", "fp32")
GRAD_CLIP_MODES = ("global", "per_tensor")
LOADERS = ("processes", "threads")
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
_MISSING = dataclasses.MISSING


SPANS = ("epochs", "steps")


def option(default: Any = _MISSING, help: str = "", *, factory: Any = _MISSING, choices: tuple | None = None,
           minimum: float | None = None, above: float | None = None, maximum: float | None = None,
           resume_free: bool = False, span: str | None = None) -> Any:
    """A dataclass field with its command-line help, allowed ``choices`` and bounds (``minimum`` ≤ value,
    ``above`` < value, value ≤ ``maximum``; for tuples, each element), whether it is ``resume_free``, and the run
    length it is a share of (``span``: "epochs" or "steps"; see `fit_to_run`)."""
    if span not in (None, *SPANS):
        raise ValueError(f"span: expected one of {', '.join(SPANS)} or None, got {span!r}")
    metadata = dict(help=help, choices=choices, minimum=minimum, above=above, maximum=maximum,
                    resume_free=resume_free, span=span)
    if factory is not _MISSING:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def own_fields(cls: type) -> list[str]:
    """The dataclass fields ``cls`` itself declares (not those it inherits), in declaration order."""
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return [name for name in inspect.get_annotations(cls) if name in fields]


def check_sections(cls: type) -> None:
    """ValueError naming each field of config class ``cls`` that more than one of its sections (or the class itself)
    declares: a field is declared once, by one section (`Section`)."""
    owners: dict[str, list[str]] = {}
    for c in cls.__mro__:
        for name in own_fields(c):
            owners.setdefault(name, []).append(c.__name__)
    twice = {name: classes for name, classes in owners.items() if len(classes) > 1}
    if twice:
        listed = "; ".join(f"{name} by {', '.join(classes)}" for name, classes in twice.items())
        raise ValueError(f"{cls.__name__}: fields declared more than once ({listed}); declare each in one section")


@dataclass
class Section:
    """A group of config fields that belong together (the run, the optimiser, the data, DINO's crops …): a dataclass
    mixin declaring each of its fields once, with `option`. A config is composed of sections (its bases) plus the
    fields it declares itself; `sections` lists them, ``crate-train --help`` shows one group of flags per section
    ``title`` (sections with the same title share a group: an image data section extends `DataSection`, the section
    that owns ``data_dir``). The flat field names are the flags and the keys of ``to_dict()``, so no two sections of
    one config may declare the same name (``tests/engine/test_config_sections.py``).

    A section may check its own fields in ``validate`` (call ``super().validate()`` first: `TrainConfig`'s type,
    choice and bound checks then run before any section's) and adjust a smoke run in ``smoke`` (call
    ``super().smoke``). A field is declared once: a config that wants another default than its section's sets it
    in its presets (DINO's ``dataset="imagenet"`` is ``dino_imagenet``'s), never by re-declaring the field.
    """

    title: ClassVar[str] = ""
    component: ClassVar[Callable[..., Any] | None] = None
    """What the section configures when that is one object (DINO's crops: `crate_nn.data.multicrop.MultiCrop`): each
    field the section declares is a keyword argument of ``component`` under the field's own name, so `build` makes
    it without copying fields one by one, and a new option is a field here and a parameter there
    (``tests/engine/test_config_sections.py`` checks that every field is one)."""
    reads: ClassVar[tuple[str, ...]] = ()
    """Fields of other sections that ``component`` takes too, under the same names (the crops: the data section's
    ``image_size``, ``load_size``, ``mean`` and ``std``)."""

    def validate(self) -> None:
        """The checks of this section's fields beyond their declarations (the root: none)."""

    def arguments(self, section: type[Section]) -> dict[str, Any]:
        """The keyword arguments of ``section``'s ``component`` that this config holds: the values of the fields
        ``section`` declares (and the sections it extends), then of its ``reads``."""
        names = [n for c in reversed(section.__mro__) if issubclass(c, Section) for n in own_fields(c)]
        return {name: getattr(self, name) for name in [*names, *section.reads]}

    def build(self, section: type[Section], /, **context) -> Any:
        """``section``'s ``component`` made from this config (`arguments`) and ``context`` (what the run supplies: the
        number of prototypes, the processes; it overrides an argument of the same name)."""
        if section.__dict__.get("component") is None:
            raise TypeError(f"{section.__name__} configures no component")
        return section.component(**{**self.arguments(section), **context})

    @classmethod
    def sections(cls) -> list[type]:
        """The classes this config's fields are declared in, in the order ``--help`` shows them: the config's own
        fields first (when it declares any), then each section of its bases (method resolution order)."""
        return [c for c in cls.__mro__ if dataclasses.is_dataclass(c) and own_fields(c)]

    @classmethod
    def section_title(cls, section: type) -> str:
        """The group ``section``'s fields are shown under: its ``title`` (a section extending another without a title
        of its own shares its parent's); for a config's own fields, its task."""
        return section.__dict__.get("task") or getattr(section, "title", "") or section.__name__

    @classmethod
    def section_of(cls, name: str) -> type:
        """The section (or config class) that declares field ``name``."""
        for section in cls.sections():
            if name in own_fields(section):
                return section
        raise ValueError(f"{name}: not a field of {cls.__name__}")


@dataclass
class RunSection(Section):
    """Where and how the run executes and what it writes: none of these changes the numbers, except the seed and
    the precision."""

    title = "run"

    preset: str = option("", "the preset these values started from", resume_free=True)
    device: str = option("auto", "auto (cuda if available, else cpu), cpu, cuda, cuda:N", resume_free=True)
    seed: int = option(0, "seed of initialisation, data order and augmentation", minimum=0)
    precision: str = option("auto", f"auto: bf16 autocast on CUDA, float32 on CPU; {MEASURED}: bf16 also on a CPU "
                            "whose bf16 matrix products are measured faster (crate_nn.engine.precision)",
                            choices=PRECISIONS)
    activations: str = option("fp32", "under bf16 autocast, the activations between layers: fp32 (autocast's) or bf16 "
                              "(kept in bfloat16 from the embedding to the logits; weights, gradients and optimizer "
                              "state stay float32; image classifiers)", choices=tuple(ACTIVATIONS))
    compile: bool = option(False, "torch.compile the model", resume_free=True)
    compile_mode: str = option("default", "torch.compile's mode with compile (reduce-overhead: CUDA graphs, which "
                               "the fixed training batches allow; max-autotune: also searches GEMM kernels)",
                               choices=COMPILE_MODES, resume_free=True)
    output_dir: str = option("runs/run", "the run directory", resume_free=True)
    resume: bool = option(False, "continue the run in output_dir from checkpoints/last.pt", resume_free=True)
    overwrite: bool = option(False, "delete the run already in output_dir and start over", resume_free=True)
    num_workers: int = option(8, "DataLoader workers reading the training batches (0: the main process)", minimum=0,
                              resume_free=True)
    loader: str = option("processes", "the workers are processes (DataLoader) or threads of this process (no copy "
                         "between processes: for memory-mapped shards)", choices=LOADERS, resume_free=True)
    checkpoint_every: int = option(
        1000, "optimizer steps between checkpoints (also at every epoch end); 0 = epoch ends only", minimum=0,
        resume_free=True)
    keep_checkpoints: int = option(3, "newest step_*.pt files kept (last.pt always); 0 = keep all", minimum=0,
                                   resume_free=True)
    log_every: int = option(20, "optimizer steps between metrics.jsonl lines", minimum=1, resume_free=True)
    tensorboard: bool = option(False, "also write TensorBoard scalars", resume_free=True)
    progress: bool = option(True, "tqdm progress bar", resume_free=True)
    curves: bool = option(True, "draw figures/curves.png at the end (summary.json is always written)",
                          resume_free=True)


@dataclass
class OptimSection(Section):
    """The optimiser, its weight decay, clipping and the moving average of the weights."""

    title = "optimiser"

    optimizer: str = option("lion", "optimizer", choices=OPTIMIZERS)
    lr: float = option(2.4e-4, "peak learning rate (after warm-up)", above=0.0)
    weight_decay: float = option(0.5, "weight decay (decoupled) at the start of training", minimum=0.0)
    weight_decay_end: float | None = option(
        None, "weight decay at the end of a cosine schedule from weight_decay (DINO); None = constant", minimum=0.0)
    betas: tuple[float, float] = option((0.9, 0.99), "the optimizer's β1 β2", minimum=0.0, maximum=1.0)
    weight_decay_all: bool = option(False, "decay every parameter; default: no decay on norms, biases, embeddings")
    grad_clip: float | None = option(None, "max global gradient norm; None = no clipping", above=0.0)
    grad_clip_mode: str = option("global", "grad_clip bounds the norm of all gradients together (global) or of "
                                 "each parameter's gradient (per_tensor, DINO)", choices=GRAD_CLIP_MODES)
    ema: bool = option(False, "keep an exponential moving average of the weights (evaluated as ema_*)")
    ema_momentum: float = option(0.9999, "EMA momentum m: ema ← m·ema + (1 − m)·weights", minimum=0.0, maximum=1.0)
    ema_momentum_end: float | None = option(
        None, "EMA momentum at the end of a cosine schedule from ema_momentum; None = constant",
        minimum=0.0, maximum=1.0)


@dataclass
class ScheduleSection(Section):
    """The batch, the run's length, the warm-up and the learning rate's decay."""

    title = "schedule"

    batch_size: int = option(2048, "global batch per optimizer step, over all processes and accumulation steps",
                             minimum=1)
    micro_batch_size: int | None = option(
        None, "per process and forward pass (gradient accumulation); None = batch_size / processes", minimum=1,
        resume_free=True)
    epochs: int = option(150, "epochs the schedules span", minimum=1)
    warmup_epochs: float = option(5.0, "linear learning-rate warm-up, in epochs (fractions allowed)", minimum=0.0,
                                  span="epochs")
    total_steps: int | None = option(
        None, "optimizer steps the schedules span, instead of `epochs` (recipes stated in steps)", minimum=1)
    warmup_steps: int | None = option(None, "linear learning-rate warm-up in optimizer steps, instead of "
                                      "`warmup_epochs`", minimum=0, span="steps")
    lr_schedule: str = option("cosine", "learning-rate decay after the warm-up", choices=LR_SCHEDULES)
    min_lr_ratio: float = option(0.0, "final learning rate / lr of the decay", minimum=0.0, maximum=1.0)
    max_steps: int | None = option(
        None, "stop after this many optimizer steps (the schedules still span `epochs`)", minimum=1,
        resume_free=True)

    def run_length(self, span: str) -> int | None:
        """The run's length in ``span`` ("epochs", or "steps": ``total_steps``, None for a run stated in epochs)."""
        return self.epochs if span == "epochs" else self.total_steps

    def run_steps(self, steps_per_epoch: int) -> tuple[int, int]:
        """(optimizer steps the schedules span, warm-up steps) of this run when an epoch is ``steps_per_epoch``
        steps: ``total_steps`` or ``epochs`` epochs; ``warmup_steps`` or ``warmup_epochs`` epochs. The engine's
        schedules and a task's own (e.g. DINO's teacher momentum) read the run's length here."""
        total = self.total_steps or self.epochs * steps_per_epoch
        warmup = self.warmup_steps if self.warmup_steps is not None else round(self.warmup_epochs * steps_per_epoch)
        if warmup > total:
            raise ValueError(f"warmup_epochs: {self.warmup_epochs} epochs are {warmup} optimizer steps, more than the "
                             f"run's {total}; pass a smaller --warmup-epochs or --warmup-steps")
        return total, warmup


@dataclass
class EvaluationSection(Section):
    """When the task's evaluation runs (what it measures is the task's: its own evaluation sections)."""

    title = "evaluation"

    eval_every: int = option(1, "epochs between evaluations (and always at the end)", minimum=1, resume_free=True)
    eval_every_steps: int | None = option(None, "also evaluate every this many optimizer steps", minimum=1,
                                          resume_free=True, span="steps")
    eval_at_start: bool = option(False, "also evaluate the initial model (logged at step 0: the baseline the run's "
                                 "summary shows beside the final metrics)", resume_free=True)


@dataclass
class DataSection(Section):
    """What every system's data section shares: the local folder its data are read from. Image and text data
    sections extend it, so one config can hold both (one ``data_dir``; `crate_nn.tasks.images.ImageDataSection`,
    `crate_nn.tasks.language.CorpusSection`)."""

    title = "data"

    data_dir: str | None = option(None, "local folder of the data (what it holds: the dataset layout, a corpus "
                                  "prepared by crate-prepare-text, GLUE TSV files); None = the built-in data where "
                                  "the task has them", resume_free=True)


@dataclass
class TrainConfig(RunSection, OptimSection, ScheduleSection, EvaluationSection):
    """The engine's fields, in four sections: the run, the optimiser, the schedule, the evaluation cadence. A task's
    config extends it with its own sections (its model, its data, what its system adds) and its own fields."""

    task: ClassVar[str] = ""

    def validate(self) -> None:
        """Raise ValueError (TypeError for a wrong type) naming the first field with an unusable value."""
        super().validate()
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            check_field(f.name, getattr(self, f.name), hints[f.name], f.metadata)
            if f.metadata.get("span"):
                self._check_span(f.name, f.metadata["span"])
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", self.device):
            raise ValueError(f"device: expected auto, cpu, cuda, cuda:N or mps, got {self.device!r}")
        if self.resume and self.overwrite:
            raise ValueError("resume, overwrite: choose one (continue the run, or delete it and start over)")

    def _check_span(self, name: str, span: str) -> None:
        """ValueError, saying what to pass instead, when field ``name`` (a share of the run) falls past its end."""
        value, end = getattr(self, name), self.run_length(span)
        if value is None or end is None:
            return
        flag = "--epochs" if span == "epochs" else "--total-steps"
        if isinstance(value, tuple):
            late = [v for v in value if v > end]
            if late:
                raise ValueError(f"{name}: {late} are after the last {span[:-1]} ({end}); pass values ≤ {end} or a "
                                 f"larger {flag}")
        elif value > end:
            raise ValueError(f"{name}: {value} exceeds the run's {end} {span}; pass a value ≤ {end} or a larger {flag}")

    @classmethod
    def resume_free_fields(cls) -> set[str]:
        """Fields that may differ between an interrupted run and its ``--resume`` without changing the result."""
        return {f.name for f in dataclasses.fields(cls) if f.metadata.get("resume_free")}

    @classmethod
    def field_order(cls) -> list[str]:
        """The field names in the order ``to_dict`` (and so config.json) lists them: the engine's sections (run,
        optimiser, schedule, evaluation), then the config's own fields and its other sections as `sections` lists
        them (the dataclass's own order follows the bases from the last)."""
        engine = [s for s in cls.sections() if issubclass(TrainConfig, s)]
        return [name for s in engine + [s for s in cls.sections() if s not in engine] for name in own_fields(s)]

    def to_dict(self) -> dict:
        """Every field by name (tuples and dicts as they are; `json` writes tuples as lists), in `field_order`."""
        values = dataclasses.asdict(self)
        return {name: values[name] for name in self.field_order()}

    def differences(self, saved: Mapping, ignore: Collection[str] = ()) -> list[str]:
        """The fields (outside ``ignore``) on which this config differs from ``saved``, a config of the same class as
        JSON (a checkpoint's, a committed run's). A field ``saved`` lacks was added since it was written: it differs
        only when this config holds another value than the field's default (a new option defaults to what older
        runs did, or changes nothing they trained)."""
        current = json.loads(json.dumps(self.to_dict(), default=str))
        defaults = json.loads(json.dumps(type(self)().to_dict(), default=str))
        saved = json.loads(json.dumps(dict(saved), default=str))
        return sorted(k for k in set(saved) | set(current) if k not in ignore
                      and (saved[k] != current.get(k) if k in saved else current[k] != defaults[k]))

    def smoke(self, steps: int = 20, batch_size: int = 32, **overrides) -> TrainConfig:
        """This run shrunk to a smoke run: ``steps`` optimizer steps of at most ``batch_size`` samples (and at most
        the run's ``micro_batch_size``, what one forward pass of the full run holds), every step logged, no
        intermediate checkpoint, no worker process, then ``overrides``. The recipe (optimizer, learning rate,
        schedules, model) is kept. A task whose data needs a local folder, or whose run does slow extra work
        (measurements, an initial checkpoint), overrides this method to switch to its built-in data and to skip that
        work; the GPU checks (`make gpu-check`) train every preset this way.
        """
        shrunk = dataclasses.replace(
            self, max_steps=steps, batch_size=min(self.batch_size, batch_size, self.micro_batch_size or batch_size),
            micro_batch_size=None,
            log_every=1, checkpoint_every=0, num_workers=0, progress=False, tensorboard=False, resume=False,
            overwrite=False)
        return dataclasses.replace(shrunk, **overrides)


DEFAULT = "default"
"""A dict option's value that removes its key from the preset's (``--model-args depth=default``): the model's own
default applies (`merge_options`)."""


def merge_options(preset: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """A dict option (``model_args``) given on top of its preset's: the given keys replace the preset's, the others
    are kept, and a key given as `DEFAULT` is removed."""
    merged = {**preset, **given}
    return {k: v for k, v in merged.items() if not (isinstance(v, str) and v == DEFAULT)}


def fit_to_run(preset: TrainConfig, overrides: typing.Mapping[str, Any]) -> tuple[dict, list[str]]:
    """The changes that keep ``preset``'s shares of the run (its ``span`` fields: warm-ups, measurement, k-NN, probe
    and figure epochs, step cadences) in proportion when ``overrides`` give the run another length, and one
    ``"name old → new"`` text per change.

    A new ``epochs`` rescales the "epochs" fields by new/old epochs; a new ``total_steps`` rescales the "steps"
    fields of a run stated in steps, and gives a run stated in epochs a ``warmup_steps`` holding the warm-up's
    share of it (its epoch lists cannot be converted before the data are known: those past the run's end do not
    fire). A rescaled epoch list keeps 0 (the initialisation) and its positive entries stay ≥ 1. Fields set in
    ``overrides`` are the caller's and are never changed (`TrainConfig.validate` refuses them if they do not fit).
    ``max_steps`` stops a run early without changing its length or its schedules: nothing to fit.
    """
    ratios = {}
    if overrides.get("epochs", preset.epochs) != preset.epochs:
        ratios["epochs"] = overrides["epochs"] / preset.epochs
    steps = overrides.get("total_steps", preset.total_steps)
    if None not in (steps, preset.total_steps) and steps != preset.total_steps:
        ratios["steps"] = steps / preset.total_steps
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(preset):
        if f.metadata.get("span") in ratios and f.name not in overrides:
            changes[f.name] = _rescaled(getattr(preset, f.name), ratios[f.metadata["span"]], f.metadata)
    stated_in_epochs = preset.total_steps is None and preset.warmup_steps is None
    if (steps is not None and stated_in_epochs and preset.warmup_epochs
            and not {"warmup_steps", "warmup_epochs"} & set(overrides)):
        changes["warmup_steps"] = round(steps * preset.warmup_epochs / preset.epochs)
    changes = {k: v for k, v in changes.items() if v != getattr(preset, k)}
    return changes, [f"{k} {getattr(preset, k)!r} → {v!r}" for k, v in changes.items()]


def _rescaled(value, ratio: float, meta: typing.Mapping):
    """``value`` (a number, None, or a tuple of epochs) times ``ratio``: integers rounded and kept ≥ the field's
    ``minimum``; a tuple's 0 kept, its positive entries ≥ 1, sorted without repeats; floats to 6 decimals."""
    if value is None:
        return None
    if isinstance(value, tuple):
        return tuple(sorted({v and max(1, round(v * ratio)) for v in value}))
    if isinstance(value, float):
        return round(value * ratio, 6)
    return max(int(meta.get("minimum") or 0), round(value * ratio))


def strip_optional(hint) -> tuple[Any, bool]:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return hint, False


def _check_scalar(name: str, value, hint, meta: typing.Mapping) -> None:
    if hint is bool:
        if not isinstance(value, bool):
            raise TypeError(f"{name}: expected True or False, got {value!r}")
        return
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: expected an integer, got {value!r}")
    elif hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{name}: expected a finite number, got {value!r}")
    elif hint is str:
        if not isinstance(value, str):
            raise TypeError(f"{name}: expected a string, got {value!r}")
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise ValueError(f"{name}: expected one of {', '.join(map(str, choices))}, got {value!r}")
    low, above, high = meta.get("minimum"), meta.get("above"), meta.get("maximum")
    if low is not None and value < low:
        expected = "a non-negative value" if low == 0 else f"a value ≥ {low}"
        raise ValueError(f"{name}: expected {expected}, got {value!r}")
    if above is not None and not value > above:
        expected = "a positive value" if above == 0 else f"a value > {above}"
        raise ValueError(f"{name}: expected {expected}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name}: expected a value ≤ {high}, got {value!r}")


def check_field(name: str, value, hint, meta: typing.Mapping) -> None:
    """Check one field's value against its type hint and its `option` declaration."""
    hint, optional = strip_optional(hint)
    if value is None:
        if not optional:
            raise TypeError(f"{name}: expected a value, got None")
        return
    origin = typing.get_origin(hint)
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, (tuple, list)):
            raise TypeError(f"{name}: expected a tuple, got {value!r}")
        variadic = len(args) == 2 and args[1] is Ellipsis
        if not variadic and len(value) != len(args):
            raise ValueError(f"{name}: expected {len(args)} values, got {len(value)}: {tuple(value)!r}")
        for i, item in enumerate(value):
            _check_scalar(f"{name}[{i}]", item, args[0], meta)
        return
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise TypeError(f"{name}: expected a dict of KEY=VALUE options, got {value!r}")
        return
    _check_scalar(name, value, hint, meta)
