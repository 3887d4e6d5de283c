"""`TrainConfig`: what every training run needs from the engine, whatever the task; each task's config extends it.

A config is composed of sections (`Section`: dataclasses, each declaring one group of fields once), which it holds
as its fields, as DINOv2's and torchtitan's configs do: ``config.optim.lr``, ``config.crops.local_crops``.
`TrainConfig` holds the engine's four — ``run`` (`RunSection`), ``optim`` (`OptimSection`), ``schedule``
(`ScheduleSection`), ``evaluation`` (`EvaluationSection`) — and a task's config extends it with its own sections
(its model, its data, what its system adds: crops, distillation, masking …) and the checks across them
(`TrainConfig.check`). A config inherits no section (`check_sections`); a section may extend another (every data
section extends `DataSection`, the owner of ``data_dir``).

No two sections of a config declare the same field name, so a config also reads as one flat dict: ``to_dict()``
(``<output_dir>/config.json``, every checkpoint, the committed recipes, the audit's run-cache keys), `from_dict`,
and `TrainConfig.replace` and `TrainConfig.get`, which take a field's name (``local_crops``) or its path
(``crops.local_crops``). The command line does the same: ``--crops.local-crops``, with ``--local-crops`` as its
alias (`crate_nn.train`).

Every field is declared with `option`, which records in the field itself what the command line and the checks
need: its help text, its allowed values, its bounds and whether it may change when a run is resumed
(``resume_free``: bookkeeping such as the output directory or the number of workers, never anything that changes
the numbers). `TrainConfig.validate` checks every field against its type and its declaration, then each section's
own checks, then the config's across sections, and raises ValueError naming the field before any work starts.

A field declared with ``span="epochs"`` or ``span="steps"`` is a share of the run (a warm-up, the epochs after
which something is measured, an evaluation cadence): `TrainConfig.validate` refuses a value past the run's end
(``epochs``; ``total_steps`` when set), and `fit_to_run` rescales it when a preset is given another run length.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
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


def section(kind: type[Section]) -> Any:
    """A config's field holding a section of class ``kind`` (at its defaults unless the config is given one)."""
    return dataclasses.field(default_factory=kind)


@dataclass
class Section:
    """A group of config fields that belong together (the run, the optimiser, the data, DINO's crops …): a dataclass
    declaring each of its fields once, with `option`, which a config holds as one of its fields (`section`). A
    section's field names are its fields' flags (``--crops.local-crops``, alias ``--local-crops``) and their keys in
    the config's ``to_dict()``, so no two sections of one config may declare the same name (`check_sections`).

    A section checks its own fields together in ``validate`` (each field's declaration is checked before) and says
    in ``smoke`` how a smoke run changes them; what involves two sections is the config's (`TrainConfig.check`). A
    config that wants another value than a section's default sets it in its presets (DINO's ``dataset="imagenet"``
    is ``dino_imagenet``'s), never by declaring the field again.
    """

    component: ClassVar[Callable[..., Any] | None] = None
    """What the section configures when that is one object (DINO's crops: `crate_nn.data.multicrop.MultiCrop`): each
    field of the section is a keyword argument of ``component`` under the field's own name, so
    `TrainConfig.build` makes it without copying fields one by one, and a new option is a field here and a parameter
    there (``tests/engine/test_config_sections.py`` checks that every field is one). A component's static ``check``
    (its constructor's checks, without building it) runs when the config is validated."""
    reads: ClassVar[tuple[str, ...]] = ()
    """Fields of other sections that ``component`` takes too, under the same names (the crops: the data section's
    ``image_size``, ``load_size``, ``mean`` and ``std``)."""

    def validate(self) -> None:
        """The checks of this section's fields together, beyond their declarations (none by default)."""

    def smoke(self, batch_size: int) -> dict[str, Any]:
        """The changes (field name → value) a smoke run of batches of at most ``batch_size`` samples makes to this
        section (`TrainConfig.smoke`); none by default."""
        return {}


@dataclass
class RunSection(Section):
    """Where and how the run executes and what it writes: none of these changes the numbers, except the seed and
    the precision."""

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

    def validate(self) -> None:
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", self.device):
            raise ValueError(f"device: expected auto, cpu, cuda, cuda:N or mps, got {self.device!r}")
        if self.resume and self.overwrite:
            raise ValueError("resume, overwrite: choose one (continue the run, or delete it and start over)")


@dataclass
class OptimSection(Section):
    """The optimiser, its weight decay, clipping and the moving average of the weights."""

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
                             f"run's {total}; pass a smaller --schedule.warmup-epochs or --schedule.warmup-steps")
        return total, warmup


@dataclass
class EvaluationSection(Section):
    """When the task's evaluation runs (what it measures is the task's: its own evaluation sections)."""

    eval_every: int = option(1, "epochs between evaluations (and always at the end)", minimum=1, resume_free=True)
    eval_every_steps: int | None = option(None, "also evaluate every this many optimizer steps", minimum=1,
                                          resume_free=True, span="steps")
    eval_at_start: bool = option(False, "also evaluate the initial model (logged at step 0: the baseline the run's "
                                 "summary shows beside the final metrics)", resume_free=True)


@dataclass
class DataSection(Section):
    """What every system's data section shares: the local folder its data are read from (the data sections extend
    it: `crate_nn.tasks.images.ImageDataSection`, `crate_nn.tasks.language.CorpusSection`,
    `crate_nn.tasks.sequence_classification.GlueDataSection`)."""

    data_dir: str | None = option(None, "local folder of the data (what it holds: the dataset layout, a corpus "
                                  "prepared by crate-prepare-text, GLUE TSV files); None = the built-in data where "
                                  "the task has them", resume_free=True)


@functools.cache
def _hints(kind: type) -> dict[str, Any]:
    """The resolved type hints of dataclass ``kind``'s fields."""
    return typing.get_type_hints(kind)


@functools.cache
def _sections(config_class: type) -> dict[str, type[Section]]:
    """Config class ``config_class``'s sections by field name, in declaration order; TypeError naming a field that
    holds no section."""
    hints = _hints(config_class)
    found = {}
    for f in dataclasses.fields(config_class):
        kind = hints[f.name]
        if not (isinstance(kind, type) and issubclass(kind, Section)):
            raise TypeError(f"{config_class.__name__}.{f.name}: a config's fields are sections; declare the field in a "
                            "Section and hold that section (`section`)")
        found[f.name] = kind
    return found


@functools.cache
def _flat(config_class: type) -> dict[str, tuple[str, dataclasses.Field]]:
    """Every field of config class ``config_class``'s sections by its name: (the section holding it, the field), in
    the order of the sections and of their fields. ValueError naming each name two sections declare."""
    owners: dict[str, list[str]] = {}
    found: dict[str, tuple[str, dataclasses.Field]] = {}
    for name, kind in _sections(config_class).items():
        for f in dataclasses.fields(kind):
            owners.setdefault(f.name, []).append(f"{name} ({kind.__name__})")
            found.setdefault(f.name, (name, f))
    twice = {name: held for name, held in owners.items() if len(held) > 1}
    if twice:
        listed = "; ".join(f"{name} by {', '.join(held)}" for name, held in twice.items())
        raise ValueError(f"{config_class.__name__}: fields declared more than once ({listed}); declare each in one "
                         "section")
    return found


def check_sections(config_class: type) -> None:
    """Check that config class ``config_class`` is composed of sections: it inherits none (TypeError), each of its
    fields holds one, no two of them declare the same field name and no section's name is a field's (ValueError
    naming them): the flat names are the keys of ``to_dict()`` and the flags' aliases."""
    inherited = [c.__name__ for c in config_class.__mro__[1:] if issubclass(c, Section)]
    if inherited:
        raise TypeError(f"{config_class.__name__}: a config holds its sections as fields (`section`) and inherits "
                        f"none; it inherits {', '.join(inherited)}")
    clash = sorted(set(_sections(config_class)) & set(_flat(config_class)))
    if clash:
        raise ValueError(f"{config_class.__name__}: {', '.join(clash)} name both a section and a field; rename the "
                         "section")


def did_you_mean(name: str, known: Collection[str]) -> str:
    """`` (did you mean …?)`` with the names of ``known`` closest to ``name``, or nothing."""
    close = difflib.get_close_matches(name, list(known), n=3)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


@dataclass
class TrainConfig:
    """The engine's four sections: ``run``, ``optim``, ``schedule`` and ``evaluation``. A task's config extends it
    with its own sections (its model, its data, what its system adds) and its checks across them (`check`)."""

    task: ClassVar[str] = ""

    run: RunSection = section(RunSection)
    optim: OptimSection = section(OptimSection)
    schedule: ScheduleSection = section(ScheduleSection)
    evaluation: EvaluationSection = section(EvaluationSection)

    # -- the sections and their fields -------------------------------------------------------------------------
    @classmethod
    def sections(cls) -> dict[str, type[Section]]:
        """The config's sections by name (the field holding each), in the order ``to_dict`` and ``--help`` list
        them: the engine's first, then the task's."""
        return dict(_sections(cls))

    @classmethod
    def flat_fields(cls) -> dict[str, tuple[str, dataclasses.Field]]:
        """Every field of every section by its (flat) name: the name of the section holding it and its dataclass
        field (with its `option` metadata)."""
        return dict(_flat(cls))

    @classmethod
    def resolve(cls, name: str) -> tuple[str, str]:
        """(section, field) of ``name``: a field's name (``local_crops``) or its path (``crops.local_crops``);
        TypeError naming an unknown one, with the closest names."""
        flat = _flat(cls)
        held, _, field = name.rpartition(".")
        if field in flat and held in ("", flat[field][0]):
            return flat[field][0], field
        paths = [f"{owner}.{n}" for n, (owner, _) in flat.items()]
        raise TypeError(f"{name}: not a field of {cls.__name__}{did_you_mean(name, paths if held else flat)}")

    def get(self, name: str) -> Any:
        """The value of field ``name`` (its name or its path, `resolve`)."""
        held, field = self.resolve(name)
        return getattr(getattr(self, held), field)

    def replace(self, **changes) -> TrainConfig:
        """A copy of this config with ``changes``: fields by name or path (``lr=1e-3``,
        ``**{"crops.local_crops": 4}``) and whole sections by their name (``crops=CropsSection(…)``, its fields
        given beside it then applied to it). TypeError naming an unknown field or one given twice."""
        sections = self.sections()
        fields: dict[str, dict[str, Any]] = {}
        for key, value in changes.items():
            if key in sections:
                continue
            held, field = self.resolve(key)
            if field in fields.setdefault(held, {}):
                raise TypeError(f"{field}: given twice (by its name and by its path {held}.{field})")
            fields[held][field] = value
        new = {name: dataclasses.replace(changes.get(name, getattr(self, name)), **fields.get(name, {}))
               for name in sections if name in changes or name in fields}
        return dataclasses.replace(self, **new)

    def to_dict(self) -> dict:
        """Every field of every section by its name (tuples and dicts as they are; `json` writes tuples as lists),
        the sections in `sections` order: what config.json, checkpoints and the audit's keys hold."""
        return {name: value for held in self.sections()
                for name, value in dataclasses.asdict(getattr(self, held)).items()}

    @classmethod
    def from_dict(cls, fields: Mapping[str, Any]) -> TrainConfig:
        """The config of the flat ``fields`` (`to_dict`'s, or read back from JSON: a list becomes the tuple its
        field holds); the fields it lacks at their defaults. TypeError naming a name that is no field."""
        flat = _flat(cls)
        unknown = sorted(set(fields) - set(flat))
        if unknown:
            raise TypeError(f"{', '.join(unknown)}: not fields of {cls.__name__}{did_you_mean(unknown[0], flat)}")

        def value(name: str, given: Any) -> Any:
            held = _sections(cls)[flat[name][0]]
            hint, _ = strip_optional(_hints(held)[name])
            return tuple(given) if typing.get_origin(hint) is tuple and isinstance(given, list) else given

        return cls().replace(**{name: value(name, given) for name, given in fields.items()})

    # -- checks ------------------------------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ValueError (TypeError for a wrong type) naming the first field with an unusable value: every
        field against its declaration, then the shares of the run (``span``), then each section's own checks
        (`Section.validate`, and its component's ``check``), then the checks across sections (`check`)."""
        sections = self.sections()
        for name, kind in sections.items():
            if not isinstance(getattr(self, name), kind):
                raise TypeError(f"{name}: expected a {kind.__name__}, got {getattr(self, name)!r}")
        flat = _flat(type(self))
        for name, (held, f) in flat.items():
            check_field(name, self.get(name), _hints(sections[held])[name], f.metadata)
        for name, (_, f) in flat.items():
            if f.metadata.get("span"):
                self._check_span(name, f.metadata["span"])
        for name in sections:
            getattr(self, name).validate()
        for name, kind in sections.items():
            if hasattr(kind.component, "check"):
                kind.component.check(**self.arguments(name))
        self.check()

    def check(self) -> None:
        """The checks across this config's sections (the model against the data …): none in the engine's."""

    def _check_span(self, name: str, span: str) -> None:
        """ValueError, saying what to pass instead, when field ``name`` (a share of the run) falls past its end."""
        value, end = self.get(name), self.schedule.run_length(span)
        if value is None or end is None:
            return
        flag = "--schedule.epochs" if span == "epochs" else "--schedule.total-steps"
        if isinstance(value, tuple):
            late = [v for v in value if v > end]
            if late:
                raise ValueError(f"{name}: {late} are after the last {span[:-1]} ({end}); pass values ≤ {end} or a "
                                 f"larger {flag}")
        elif value > end:
            raise ValueError(f"{name}: {value} exceeds the run's {end} {span}; pass a value ≤ {end} or a larger {flag}")

    @classmethod
    def resume_free_fields(cls) -> set[str]:
        """Fields that may differ between an interrupted run and its ``--run.resume`` without changing the result."""
        return {name for name, (_, f) in _flat(cls).items() if f.metadata.get("resume_free")}

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

    # -- components and smoke runs -----------------------------------------------------------------------------
    def arguments(self, name: str) -> dict[str, Any]:
        """The keyword arguments of section ``name``'s ``component`` that this config holds: the values of the
        section's fields, then of the fields of other sections it ``reads``."""
        held = getattr(self, name)
        return {**{f.name: getattr(held, f.name) for f in dataclasses.fields(held)},
                **{read: self.get(read) for read in type(held).reads}}

    def build(self, name: str, /, **context) -> Any:
        """Section ``name``'s ``component`` made from this config (`arguments`) and ``context`` (what the run
        supplies: the number of prototypes, the processes; it overrides an argument of the same name)."""
        component = type(getattr(self, name)).component
        if component is None:
            raise TypeError(f"{name}: {type(getattr(self, name)).__name__} configures no component")
        return component(**{**self.arguments(name), **context})

    def smoke(self, steps: int = 20, batch_size: int = 32, **overrides) -> TrainConfig:
        """This run shrunk to a smoke run: ``steps`` optimizer steps of at most ``batch_size`` samples (and at most
        the run's ``micro_batch_size``, what one forward pass of the full run holds), every step logged, no
        intermediate checkpoint, no worker process, what each section changes for it (`Section.smoke`: an image
        data section read from a folder becomes built-in images), then ``overrides`` (fields by name or path). The
        recipe (optimizer, learning rate, schedules, model) is kept. A task whose run does slow extra work
        (measurements, an initial checkpoint) overrides this method to skip it; the GPU checks (`make gpu-check`)
        train every preset this way.
        """
        schedule = self.schedule
        changes = dict(
            max_steps=steps, batch_size=min(schedule.batch_size, batch_size, schedule.micro_batch_size or batch_size),
            micro_batch_size=None, log_every=1, checkpoint_every=0, num_workers=0, progress=False, tensorboard=False,
            resume=False, overwrite=False)
        for name in self.sections():
            changes.update(getattr(self, name).smoke(min(schedule.batch_size, batch_size)))
        return self.replace(**{**changes, **{self.resolve(key)[1]: value for key, value in overrides.items()}})


DEFAULT = "default"
"""A dict option's value that removes its key from the preset's (``--network.model-args depth=default``): the model's
own default applies (`merge_options`)."""


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
    ``overrides`` (by name) are the caller's and are never changed (`TrainConfig.validate` refuses them if they do
    not fit).
    ``max_steps`` stops a run early without changing its length or its schedules: nothing to fit.
    """
    ratios = {}
    schedule = preset.schedule

    def length(value) -> bool:  # a run length `validate` accepts; another one is refused there, not rescaled to
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 1

    if overrides.get("epochs", schedule.epochs) != schedule.epochs and length(overrides["epochs"]):
        ratios["epochs"] = overrides["epochs"] / schedule.epochs
    steps = overrides.get("total_steps", schedule.total_steps)
    if not length(steps):
        steps = None
    if None not in (steps, schedule.total_steps) and steps != schedule.total_steps:
        ratios["steps"] = steps / schedule.total_steps
    changes: dict[str, Any] = {}
    for name, (_, f) in preset.flat_fields().items():
        if f.metadata.get("span") in ratios and name not in overrides:
            changes[name] = _rescaled(preset.get(name), ratios[f.metadata["span"]], f.metadata)
    stated_in_epochs = schedule.total_steps is None and schedule.warmup_steps is None
    if (steps is not None and stated_in_epochs and schedule.warmup_epochs
            and not {"warmup_steps", "warmup_epochs"} & set(overrides)):
        changes["warmup_steps"] = round(steps * schedule.warmup_epochs / schedule.epochs)
    changes = {k: v for k, v in changes.items() if v != preset.get(k)}
    return changes, [f"{k} {preset.get(k)!r} → {v!r}" for k, v in changes.items()]


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
