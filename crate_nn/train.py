"""``crate-train``: train any CRATE system from a preset; every field of the preset's config is a flag.

One process (CPU or one GPU):
    crate-train --preset digits
    crate-train --preset imagenet --data-dir /data/imagenet --micro-batch-size 256
One node, 8 GPUs (DistributedDataParallel, NCCL):
    torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset imagenet --data-dir /data/imagenet
Two nodes, 8 GPUs each (run on both nodes; HOST:PORT reachable from both):
    torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m crate_nn.train --preset imagenet --data-dir /data/imagenet
Resume an interrupted or preempted run (same command plus --resume); start over in the same directory:
    crate-train --preset imagenet --data-dir /data/imagenet --resume
    crate-train --preset digits --overwrite
List the presets of every task, then the fields of one preset with its values, one group per section of its config
(run, optimiser, schedule, evaluation, data, and the system's own: model, crops, distillation, masking …). Without
--preset, crate-train lists the presets on stderr and exits with status 2: there is no default experiment to start
by accident:
    crate-train --list-presets
    crate-train --preset digits --help
Shorten a preset: --epochs or --total-steps keep its warm-up and its measurement, k-NN, probe and figure epochs in
proportion to the new length (one line on stderr says what changed; values given on the same command line are
kept as given, and refused with what to pass instead when they do not fit); --max-steps stops the run early with
the preset's schedules:
    crate-train --preset digits --epochs 15
--model-args KEY=VALUE changes those keys of the preset's model arguments and keeps the others (KEY=default
removes one: the model's own default applies):
    crate-train --preset gpt_stdlib --model-args feedforward=none

A run directory (--output-dir) holds config.json (the resolved config), metrics.jsonl, checkpoints/
(step_XXXXXXX.pt and last.pt: ``crate_nn.load`` reads the model, ``--resume`` everything), summary.json and
figures/curves.png (printed and drawn at the end: final metrics and their baselines, wall time, the checkpoint, the
commands to resume and to evaluate; ``crate-compare RUN_DIR...`` puts several runs side by side) and what the task
adds (measurements/, figures/). SIGTERM/SIGINT finish the current optimizer step, write a checkpoint and exit with
status 128 + the signal number. From Python: ``crate_nn.engine.train(crate_nn.tasks.get_preset("digits"))``.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import sys
import typing
from collections.abc import Sequence

from . import cli, extras
from .engine.config import DEFAULT, TrainConfig, own_fields, strip_optional
from .engine.loop import Preempted, train
from .tasks import PRESETS, get_preset, list_presets


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the flag (the usage is one ``--help`` away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


METAVARS = {int: "N", float: "X", str: "TEXT"}
"""What ``--help`` shows after a flag, by the field's type: short, so that most flags keep their help on their line."""


def _field_parser(hint) -> dict:
    """argparse keyword arguments for a config field of type ``hint``."""
    hint, optional = strip_optional(hint)
    origin = typing.get_origin(hint)
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return {"nargs": "*", "type": _none_or(item, False), "metavar": METAVARS.get(item, "VALUE")}
    if hint is dict or origin is dict:
        return {"nargs": "*", "type": _key_value, "metavar": "KEY=VALUE"}
    return {"type": _none_or(hint, optional), "metavar": METAVARS.get(hint, "VALUE")}


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description and epilog as written; flags and their help in two columns, the help from column 30."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=30)


def _none_or(kind, optional: bool):
    def convert(text: str):
        if optional and text.lower() == "none":
            return None
        try:
            return kind(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from err

    convert.__name__ = kind.__name__
    return convert


def _key_value(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, value = text.split("=", 1)
    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


USAGE_POINTER = "crate-train --help: several GPUs, resume, start over, shorten a preset; what a run directory holds.\n\n"


def _presets_text() -> str:
    lines = ["presets by task (crate-train --preset NAME --help shows one preset's fields and values):"]
    for task, names in list_presets().items():
        lines.append(f"  {task}: {', '.join(names)}")
    return "\n".join(lines)


def _flag_groups(config_class: type[TrainConfig]) -> dict[str, list[type]]:
    """The config's sections (`TrainConfig.sections`) grouped by title, in the order they are listed: the groups of
    flags ``--help`` shows (sections with one title, such as an image data section and `DataSection`, share one)."""
    groups: dict[str, list[type]] = {}
    for section in config_class.sections():
        groups.setdefault(config_class.section_title(section), []).append(section)
    return groups


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    """``--preset NAME`` then any ``--field-name VALUE`` of that preset's config (tuples: several values;
    dicts: KEY=VALUE). The result is validated; errors exit with status 2 and one line naming the flag."""
    first = OneLineParser(add_help=False)
    first.add_argument("--preset")
    first.add_argument("--list-presets", action="store_true")
    first.add_argument("-h", "--help", action="store_true")
    known, _ = first.parse_known_args(argv)
    if known.list_presets:
        print(_presets_text())
        raise SystemExit(0)
    general = __doc__.split("\n\n", 1)[1] + "\n"
    parser = OneLineParser(prog="crate-train", usage="crate-train --preset NAME [--FIELD VALUE ...]",
                           description=__doc__.split("\n\n")[0], formatter_class=_HelpFormatter,
                           epilog=(general if known.preset is None else USAGE_POINTER) + _presets_text())
    parser.add_argument("--preset", choices=sorted(PRESETS), metavar="NAME",
                        help="the experiment whose values the other flags override (required; see below)")
    parser.add_argument("--list-presets", action="store_true", help="list the presets of every task and exit")
    if known.preset is None:
        if known.help:
            parser.print_help()
            raise SystemExit(0)
        print(_presets_text(), file=sys.stderr)
        parser.error("argument --preset: choose one of the presets above, e.g. --preset digits (a CPU run of "
                     "seconds)")
    if known.preset not in PRESETS:
        parser.error(f"argument --preset: invalid choice: {known.preset!r} (choose from {', '.join(sorted(PRESETS))})")
    defaults = PRESETS[known.preset]()
    config_class = type(defaults)
    module = sys.modules[config_class.__module__]
    if getattr(module, "DATA_LAYOUTS", None):
        parser.epilog += "\n\n" + module.DATA_LAYOUTS
    hints = typing.get_type_hints(config_class)
    parser.description += (f"\n\nThe flags of {config_class.__name__} ({config_class.task}), one group per section of "
                           f"the config; in brackets, the values of preset {known.preset}.")
    for title, sections in _flag_groups(config_class).items():
        names = ", ".join(section.__name__ for section in sections)
        group = parser.add_argument_group(f"{title} ({names})")
        fields = {f.name: f for f in dataclasses.fields(config_class)}
        for f in (fields[name] for section in sections for name in own_fields(section) if name != "preset"):
            choices = f.metadata.get("choices")
            text = f.metadata.get("help", "")
            if strip_optional(hints[f.name])[0] is dict:
                text += f"; merged into the preset's (KEY={DEFAULT} removes one, for the model's own default)"
            text += f" [{getattr(defaults, f.name)!r}" + (
                f"; one of {', '.join(map(str, choices))}]" if choices else "]")
            group.add_argument("--" + f.name.replace("_", "-"), dest=f.name, default=argparse.SUPPRESS,
                               help=text.replace("%", "%%"), **_field_parser(hints[f.name]))
    overrides = vars(parser.parse_args(argv))
    preset = overrides.pop("preset")
    overrides.pop("list_presets")
    for name, value in overrides.items():
        if isinstance(value, list):
            overrides[name] = dict(value) if strip_optional(hints[name])[0] is dict else tuple(value)
    config = get_preset(preset, **overrides)
    try:
        config.validate()
    except (ValueError, TypeError) as err:
        parser.error(str(err))
    return config


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``crate-train`` and ``python -m crate_nn.train``."""
    config = parse_args(argv)
    try:
        extras.check_config(config)  # before the run directory exists: a missing package leaves nothing behind
        train(config)  # prints the run's summary (and saves it as <output_dir>/summary.json)
    except Preempted as stop:
        print(f"crate-train: {stop}", file=sys.stderr)
        return 128 + int(stop.signum)
    except cli.EXPECTED as err:
        return cli.fail("crate-train", err, 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
