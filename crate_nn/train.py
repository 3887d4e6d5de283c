"""``crate-train``: train any CRATE system from a preset; every field of the preset's config is a flag.

A flag is ``--SECTION.FIELD``: the section of the config that holds the field (run, optim, schedule, evaluation,
data, and the system's own: network, crops, distillation, masking …), then the field; the field alone,
``--FIELD``, is the same flag (``--schedule.epochs 15`` is ``--epochs 15``). A boolean field is set by
``--SECTION.FIELD`` and cleared by ``--SECTION.no-FIELD``.

One process (CPU or one GPU):
    crate-train --preset digits
    crate-train --preset imagenet --data.data-dir /data/imagenet --schedule.micro-batch-size 256
One node, 8 GPUs (DistributedDataParallel, NCCL):
    torchrun --standalone --nproc_per_node 8 -m crate_nn.train --preset imagenet --data.data-dir /data/imagenet
Two nodes, 8 GPUs each (run on both nodes; HOST:PORT reachable from both):
    torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m crate_nn.train --preset imagenet --data.data-dir /data/imagenet
Resume an interrupted or preempted run (same command plus --run.resume); start over in the same directory:
    crate-train --preset imagenet --data.data-dir /data/imagenet --run.resume
    crate-train --preset digits --run.overwrite
List the presets of every task, then the flags of one preset with its values, one group per section of its config
(one line each), then one section's flags in full. Without --preset, crate-train lists the presets on stderr and
exits with status 2: there is no default experiment to start by accident:
    crate-train --list-presets
    crate-train --preset digits --help
    crate-train --preset digits --help schedule
Shorten a preset: --schedule.epochs or --schedule.total-steps keep its warm-up and its measurement, k-NN, probe and
figure epochs in proportion to the new length (one line on stderr says what changed; values given on the same
command line are kept as given, and refused with what to pass instead when they do not fit);
--schedule.max-steps stops the run early with the preset's schedules:
    crate-train --preset digits --schedule.epochs 15
--network.model-args KEY=VALUE changes those keys of the preset's model arguments and keeps the others
(KEY=default removes one: the model's own default applies):
    crate-train --preset gpt_stdlib --network.model-args feedforward=none

A run directory (--output-dir) holds config.json (the resolved config), metrics.jsonl, checkpoints/
(step_XXXXXXX.pt and last.pt: ``crate_nn.load`` reads the model, ``--run.resume`` everything), summary.json and
figures/curves.png (printed and drawn at the end: final metrics and their baselines, wall time, the checkpoint, the
commands to resume and to evaluate; ``crate-compare RUN_DIR...`` puts several runs side by side) and what the task
adds (measurements/, figures/). SIGTERM/SIGINT finish the current optimizer step, write a checkpoint and exit with
status 128 + the signal number. From Python: ``crate_nn.engine.train(crate_nn.tasks.get_preset("digits"))``.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import shutil
import sys
import textwrap
import typing
from collections.abc import Sequence

from . import cli, extras
from .engine.config import DEFAULT, TrainConfig, did_you_mean, strip_optional
from .engine.loop import Preempted, train
from .tasks import PRESETS, get_preset, list_presets


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line naming the flag (the usage is one ``--help`` away)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


METAVARS = {int: "N", float: "X", str: "TEXT"}
"""What ``--help`` shows after a flag, by the field's type: short, so that most flags keep their help on their line."""


class Switch(argparse.Action):
    """A boolean field's flags: ``--SECTION.FIELD`` (and ``--FIELD``) set it, ``--SECTION.no-FIELD`` (and
    ``--no-FIELD``) clear it."""

    def __init__(self, option_strings: list[str], dest: str, negated: Sequence[str] = (), **kwargs) -> None:
        super().__init__([*option_strings, *negated], dest, nargs=0, **kwargs)
        self.negated = set(negated)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, option_string not in self.negated)


def _field_parser(hint) -> dict:
    """argparse keyword arguments for a config field of type ``hint``."""
    hint, optional = strip_optional(hint)
    origin = typing.get_origin(hint)
    if hint is bool:
        return {"action": Switch}
    if origin is tuple:
        item = typing.get_args(hint)[0]
        return {"nargs": "*", "type": _none_or(item, False), "metavar": METAVARS.get(item, "VALUE")}
    if hint is dict or origin is dict:
        return {"nargs": "*", "type": _key_value, "metavar": "KEY=VALUE"}
    return {"type": _none_or(hint, optional), "metavar": METAVARS.get(hint, "VALUE")}


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The description, the epilog and the groups' descriptions as written; flags and their help in two columns, the
    help from column 30."""

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


def flag(section: str, name: str) -> str:
    """The flag of field ``name`` of section ``section``: ``--section.field-name``."""
    return f"--{section}.{name.replace('_', '-')}"


def _as_flags(section: str, name: str, value) -> str:
    """The flag of field ``name`` of ``section`` followed by ``value`` as the command line takes it (a boolean: the
    flag that sets it, or ``--SECTION.no-FIELD``): what gives the field that value."""
    if isinstance(value, bool):
        return flag(section, name) if value else f"--{section}.no-{name.replace('_', '-')}"
    if value is None:
        words = ["none"]
    elif isinstance(value, tuple):
        words = [str(v) for v in value]
    elif isinstance(value, dict):
        words = [f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in value.items()]
    else:
        words = [str(value)]
    return " ".join([flag(section, name), *words])


def _cut(text: str, width: int) -> str:
    """``text`` cut at a word to fit ``width`` characters, ending with "…" when cut."""
    if len(text) <= width:
        return text
    head = text[:max(width - 1, 0)]
    return (head.rsplit(" ", 1)[0] if " " in head else head).rstrip(" ,;:(") + "…"


def _doc(kind: type) -> str:
    """The first paragraph of class ``kind``'s docstring, on one line."""
    return " ".join((inspect.getdoc(kind) or "").split("\n\n")[0].split())


def _summary(kind: type) -> str:
    """The first clause of section class ``kind``'s docstring: up to its first colon or full stop outside
    parentheses."""
    text, depth = _doc(kind), 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and text[i:i + 2] in (": ", ". "):
            return text[:i]
    return text.rstrip(".")


def _sections_text(config_class: type[TrainConfig], defaults: TrainConfig, width: int) -> str:
    """Every section of ``config_class``, one line per flag: the flag with the preset's value, as the command line
    takes it, and the field's help cut to the line (``--help SECTION`` shows it in full)."""
    blocks = []
    for section, kind in config_class.sections().items():
        rows = [(_as_flags(section, f.name, defaults.get(f.name)), f.metadata.get("help", ""))
                for f in dataclasses.fields(kind) if f.name != "preset"]
        column = min(max(len(left) for left, _ in rows), 40)
        lines = [_cut(f"{section} ({kind.__name__}): {_summary(kind)}", width)]
        for left, text in rows:
            if len(left) > column:
                lines.append(f"  {left}")
                left = ""
            lines.append(f"  {left.ljust(column)}  {_cut(text, width - column - 4)}".rstrip())
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _help_mode(config_class: type[TrainConfig], asked: str | None, preset: str, parser: OneLineParser) -> set[str]:
    """The sections whose flags ``--help`` shows in full: none for ``--help`` alone (every section, one line per
    flag), the one ``--help SECTION`` names; an unknown name is refused with the closest ones."""
    if not asked:
        return set()
    sections = config_class.sections()
    if asked not in sections:
        parser.error(f"argument --help: {asked!r} is not a section of preset {preset}'s {config_class.__name__} "
                     f"(one of {', '.join(sections)}){did_you_mean(asked, sections)}")
    return {asked}


def _suggestion(word: str, flags: Sequence[str]) -> str:
    """The flags to suggest for the unknown ``word``: for a ``--SECTION.FIELD``, the flag of that field in its own
    section when the field exists elsewhere (``--dino.local-crops`` → ``--crops.local-crops``), else the closest
    dotted flags; for a ``--FIELD``, the closest aliases."""
    dotted = [f for f in flags if "." in f]
    if "." not in word:
        return did_you_mean(word, [f for f in flags if "." not in f])
    field = word.split(".", 1)[1].replace("_", "-")
    elsewhere = [f for f in dotted if f.split(".", 1)[1] == field]
    return f" (did you mean {' or '.join(elsewhere)}?)" if elsewhere else did_you_mean(word, dotted)


def parse_args(argv: Sequence[str] | None = None) -> TrainConfig:
    """``--preset NAME`` then any ``--SECTION.FIELD VALUE`` (or ``--FIELD VALUE``) of that preset's config (tuples:
    several values; dicts: KEY=VALUE; booleans: ``--SECTION.FIELD`` / ``--SECTION.no-FIELD``). The result is
    validated; errors (an unknown or misspelt flag included) exit with status 2 and one line naming the flag."""
    first = OneLineParser(add_help=False)
    first.add_argument("--preset")
    first.add_argument("--list-presets", action="store_true")
    first.add_argument("-h", "--help", nargs="?", const="", default=None)
    known, _ = first.parse_known_args(argv)
    if known.list_presets:
        print(_presets_text())
        raise SystemExit(0)
    general = __doc__.split("\n\n", 1)[1] + "\n"
    parser = OneLineParser(prog="crate-train", usage="crate-train --preset NAME [--SECTION.FIELD VALUE ...]",
                           description=__doc__.split("\n\n")[0], formatter_class=_HelpFormatter, add_help=False,
                           allow_abbrev=False,
                           epilog=(general if known.preset is None else USAGE_POINTER) + _presets_text())
    parser.add_argument("-h", "--help", nargs="?", const="", metavar="SECTION",
                        help="show the flags (with a preset: one line each; --help SECTION: that section's in full) "
                             "and exit")
    parser.add_argument("--preset", choices=sorted(PRESETS), metavar="NAME",
                        help="the experiment whose values the other flags override (required; see below)")
    parser.add_argument("--list-presets", action="store_true", help="list the presets of every task and exit")
    if known.preset is None:
        if known.help is not None:
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
    full = _help_mode(config_class, known.help, known.preset, parser)
    width = shutil.get_terminal_size().columns - 2
    parser.description += "\n\n" + textwrap.fill(
        f"The flags of {config_class.__name__} ({config_class.task}), one group per section of the config; each "
        "flag --SECTION.FIELD is also --FIELD. "
        + (f"In brackets, the values of preset {known.preset}." if full else
           f"Each line is a flag with the value of preset {known.preset}, and its help cut to the line: "
           f"crate-train --preset {known.preset} --help SECTION shows a section's flags in full."), width)
    if not full:
        parser.epilog = _sections_text(config_class, defaults, width) + "\n\n" + parser.epilog
    for name, kind in config_class.sections().items():
        hints = typing.get_type_hints(kind)
        group = (parser.add_argument_group(f"{name} ({kind.__name__})", textwrap.fill(_doc(kind), width - 2))
                 if name in full else parser.add_argument_group())  # --help alone: `_sections_text` lists them
        for field in dataclasses.fields(kind):
            if field.name == "preset":
                continue
            choices = field.metadata.get("choices")
            text = field.metadata.get("help", "")
            if strip_optional(hints[field.name])[0] is dict:
                text += f"; merged into the preset's (KEY={DEFAULT} removes one, for the model's own default)"
            value = f"{defaults.get(field.name)!r}"
            text += f" [{value}; one of {', '.join(map(str, choices))}]" if choices else f" [{value}]"
            options = {**_field_parser(hints[field.name]), "dest": f"{name}.{field.name}"}
            if options.get("action") is Switch:
                options["negated"] = [f"--{name}.no-{field.name.replace('_', '-')}",
                                      f"--no-{field.name.replace('_', '-')}"]
            group.add_argument(flag(name, field.name), "--" + field.name.replace("_", "-"), default=argparse.SUPPRESS,
                               help=text.replace("%", "%%") if name in full else argparse.SUPPRESS, **options)
    if known.help is not None:
        parser.print_help()
        raise SystemExit(0)
    parsed, unknown = parser.parse_known_args(argv)
    if unknown:
        word = next((w for w in unknown if w.startswith("-")), unknown[0]).split("=", 1)[0]
        flags = [o for action in parser._actions for o in action.option_strings]
        parser.error(f"unrecognized argument {word}{_suggestion(word, flags) if word.startswith('-') else ''}")
    overrides = vars(parsed)
    preset = overrides.pop("preset")
    overrides.pop("list_presets")
    overrides.pop("help", None)
    for name, value in overrides.items():
        if isinstance(value, list):
            overrides[name] = dict(value) if isinstance(defaults.get(name), dict) else tuple(value)
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
