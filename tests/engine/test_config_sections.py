"""Configs composed of sections (`crate_nn.engine.config.Section`): the composition changed no preset's config, every
field is declared by exactly one section, a section that builds a component gives it every field under the field's
name, an image and a text section compose, and ``--help`` groups flags by section.

``data/preset_configs.json`` holds every registered preset's ``to_dict()`` and every task config's defaults as they
were before configs were composed of sections (written by `snapshot` on the code of that time). Committed results
(recipes compared by ``verify.experiments.recipe_differences``), checkpoints (``--resume`` checks) and the audit's
run-cache keys read these flat dicts, so a refactor of the configs must leave them equal. A new preset or task config
is added to it by ``python -m tests.engine.test_config_sections`` (which writes the entries missing, never changing
one); change an entry only for an intended change of a preset or a default, and say so in the commit.
"""
from __future__ import annotations

import dataclasses
import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import crate_nn.tasks  # noqa: F401 - registers every task and preset
from crate_nn.engine.config import DataSection, Section, TrainConfig, check_sections, option, own_fields
from crate_nn.engine.task import PRESETS, TASKS
from crate_nn.tasks.images import ImageDataSection
from crate_nn.tasks.language import CorpusSection
from crate_nn.train import parse_args

CONFIGS = sorted((c for c in TASKS if c.__module__.startswith("crate_nn.")), key=lambda c: c.__name__)
"""The task configs crate_nn registers (tests register toy tasks of their own)."""
SNAPSHOT_FILE = Path(__file__).parent / "data" / "preset_configs.json"
SNAPSHOT = json.loads(SNAPSHOT_FILE.read_text(encoding="utf-8"))

DEFAULT_CHANGES = {"DINOTrainConfig": {"dataset": ("imagenet", "synthetic")}}
"""Class defaults deliberately changed by the composition: DINO re-declared ``dataset`` only to default to imagenet;
the data section declares it once (default synthetic) and ``dino_imagenet`` sets imagenet (its to_dict unchanged)."""


def snapshot(config: TrainConfig) -> dict:
    """What the snapshot records of a config: its class, its fields as JSON, the Python type of each value."""
    values = config.to_dict()
    return {"class": type(config).__name__, "fields": json.loads(json.dumps(values, default=str)),
            "types": {k: type(v).__name__ for k, v in values.items()}}


def test_the_snapshot_covers_every_preset_and_task():
    assert sorted(SNAPSHOT["presets"]) == sorted(PRESETS)
    assert sorted(SNAPSHOT["defaults"]) == [c.__name__ for c in CONFIGS]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_to_dict_is_the_snapshot(name):
    assert snapshot(PRESETS[name]()) == SNAPSHOT["presets"][name]


@pytest.mark.parametrize("config_class", CONFIGS, ids=lambda c: c.__name__)
def test_task_config_defaults_are_the_snapshot_but_the_documented_changes(config_class):
    expected = json.loads(json.dumps(SNAPSHOT["defaults"][config_class.__name__]))
    for name, (before, after) in DEFAULT_CHANGES.get(config_class.__name__, {}).items():
        assert expected["fields"][name] == before
        expected["fields"][name] = after
    assert snapshot(config_class()) == expected


@pytest.mark.parametrize("config_class", CONFIGS, ids=lambda c: c.__name__)
def test_every_field_is_declared_by_exactly_one_section(config_class):
    declared = [name for section in config_class.sections() for name in own_fields(section)]
    assert sorted(declared) == sorted(f.name for f in dataclasses.fields(config_class))
    assert len(declared) == len(set(declared))
    for name in declared:
        assert name in own_fields(config_class.section_of(name))
    # config.json lists the engine's sections first (the run, from "preset"), then the task's
    assert list(config_class().to_dict()) == config_class.field_order()
    assert config_class.field_order()[:2] == ["preset", "device"]
    titles = [config_class.section_title(s) for s in config_class.sections()]
    assert {"run", "optimiser", "schedule", "evaluation", "data"} <= set(titles)


COMPONENT_SECTIONS = sorted({s for c in CONFIGS for s in c.__mro__ if isinstance(s, type) and issubclass(s, Section)
                             and s.__dict__.get("component") is not None}, key=lambda s: s.__name__)
"""The sections of crate_nn's configs that build a component (``Section.component``)."""


def test_the_component_sections_are_those_of_the_tasks_components():
    assert [s.__name__ for s in COMPONENT_SECTIONS] == [
        "AugmentSection", "CropsSection", "DINOHeadSection", "DINOLossSection", "KNNSection", "SimDINOLossSection",
        "TokenMaskingSection"]


@pytest.mark.parametrize("section", COMPONENT_SECTIONS, ids=lambda s: s.__name__)
def test_a_component_section_gives_every_field_to_its_component_under_the_field_name(section):
    """A new option of a component is a field of its section and a parameter of the component, nothing else: the
    section's `build` passes every field (and every field it ``reads`` from other sections) by name."""
    parameters = inspect.signature(section.component).parameters
    config_class = next(c for c in CONFIGS if issubclass(c, section))
    arguments = config_class().arguments(section)
    assert set(arguments) == {n for c in section.__mro__ if issubclass(c, Section) for n in own_fields(c)} | set(
        section.reads)
    assert [name for name in arguments if name not in parameters] == []


def test_build_makes_the_component_from_the_config_and_the_context():
    config = PRESETS["dino_digits"]()
    crops = config.build(crate_nn.tasks.dino.CropsSection)
    assert (crops.global_crops, crops.local_crops, crops.load_size) == (2, 4, 16)
    objective = crate_nn.tasks.dino.build_objective(config, prototypes=7)
    assert (objective.prototypes, objective.student_temp, objective.center_momentum) == (7, 0.1, 0.9)
    head = config.model_config(in_channels=1)
    assert (head.out_dim, head.hidden_dim, head.bottleneck_dim, head.dim) == (1024, 256, 64, 96)
    with pytest.raises(TypeError, match="^DistillationSection configures no component$"):
        config.build(crate_nn.tasks.dino.DistillationSection)


def test_a_redeclared_field_is_refused_naming_it():
    @dataclass
    class Redeclares(ImageDataSection, TrainConfig):
        task = "redeclares"
        dataset: str = option("imagenet", "dataset layout")

    with pytest.raises(ValueError, match=r"dataset by Redeclares, ImageDataSection"):
        check_sections(Redeclares)
    check_sections(crate_nn.tasks.DINOTrainConfig)  # the composed configs pass


@dataclass
class Captions(Section):
    title = "captions"
    caption_length: int = option(32, "tokens per caption", minimum=1)


@dataclass
class ImageTextConfig(Captions, ImageDataSection, CorpusSection, TrainConfig):
    """A system reading images and text: both data sections extend DataSection, which owns data_dir."""

    task = "image_text"


def test_an_image_and_a_text_data_section_compose_with_one_data_dir():
    names = [f.name for f in dataclasses.fields(ImageTextConfig)]
    assert names.count("data_dir") == 1
    assert {"dataset", "image_size", "block_size", "caption_length", "lr"} <= set(names)
    check_sections(ImageTextConfig)
    assert ImageTextConfig.section_of("data_dir") is DataSection
    assert ImageTextConfig.section_of("block_size") is CorpusSection
    assert [ImageTextConfig.section_title(s) for s in ImageTextConfig.sections()][:4] == ["captions", "data", "data",
                                                                                          "data"]
    config = ImageTextConfig(data_dir="/data/pairs", block_size=64, dataset="digits")
    config.validate()
    assert config.to_dict()["data_dir"] == "/data/pairs"
    with pytest.raises(ValueError, match="^block_size: "):  # each section's bounds still checked
        ImageTextConfig(block_size=0).validate()
    with pytest.raises(ValueError, match="^mean, std: "):  # and each section's own checks
        ImageTextConfig(mean=(0.5,)).validate()


def _help_groups(preset: str, capsys) -> dict[str, set[str]]:
    with pytest.raises(SystemExit):
        parse_args(["--preset", preset, "--help"])
    groups, current = {}, None
    for line in capsys.readouterr().out.splitlines():
        header = re.fullmatch(r"(\S.*) \((\w+(?:Section|Config)(?:, \w+(?:Section|Config))*)\):", line)
        if header:
            current = groups.setdefault(header.group(1), set())
        elif current is not None and (flag := re.match(r"  --([a-z0-9-]+)", line)):
            current.add(flag.group(1).replace("-", "_"))
    return groups


@pytest.mark.parametrize("preset", ["digits", "dino_digits", "mae_digits", "bert_stdlib", "pairs_stdlib"])
def test_help_groups_flags_by_section(preset, capsys):
    config_class = type(PRESETS[preset]())
    expected: dict[str, set[str]] = {}
    for section in config_class.sections():
        expected.setdefault(config_class.section_title(section), set()).update(own_fields(section))
    expected["run"].discard("preset")  # --preset is the parser's own flag
    assert _help_groups(preset, capsys) == expected


def add_missing() -> list[str]:
    """Write the snapshot entries of the presets and task configs registered since it was written (never changing an
    entry); return their names."""
    added = [name for name in sorted(PRESETS) if name not in SNAPSHOT["presets"]]
    added += [c.__name__ for c in CONFIGS if c.__name__ not in SNAPSHOT["defaults"]]
    for name in sorted(PRESETS):
        SNAPSHOT["presets"].setdefault(name, snapshot(PRESETS[name]()))
    for config in CONFIGS:
        SNAPSHOT["defaults"].setdefault(config.__name__, snapshot(config()))
    SNAPSHOT_FILE.write_text(json.dumps(SNAPSHOT, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return added


if __name__ == "__main__":
    print("added:", ", ".join(add_missing()) or "nothing")
