"""Configs composed of sections (`crate_nn.engine.config.Section`) held as fields: the composition changed no preset's
config, every field is declared by exactly one section and reads back from its flat name and its path, a section that
builds a component gives it every field under the field's name, no config inherits a section, an image and a text
section compose, and ``--help`` groups flags by section.

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
from crate_nn.engine.config import Section, TrainConfig, check_sections, option, section
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
def test_a_config_holds_sections_and_every_field_is_declared_by_exactly_one(config_class):
    sections = config_class.sections()
    assert [f.name for f in dataclasses.fields(config_class)] == list(sections)
    assert not any(issubclass(c, Section) for c in config_class.__mro__)
    declared = [f.name for kind in sections.values() for f in dataclasses.fields(kind)]
    assert len(declared) == len(set(declared)) and declared == list(config_class.flat_fields())
    assert not set(sections) & set(declared)  # a name is a section's or a field's, never both
    config = config_class()
    for name, (held, _) in config_class.flat_fields().items():
        assert config.resolve(name) == config.resolve(f"{held}.{name}") == (held, name)
        assert config.get(name) is config.get(f"{held}.{name}") is getattr(getattr(config, held), name)
    # config.json lists the engine's sections first (the run, from "preset"), then the task's
    assert list(config.to_dict()) == declared and declared[:2] == ["preset", "device"]
    assert list(sections)[:4] == ["run", "optim", "schedule", "evaluation"] and "data" in sections


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_reads_back_from_its_flat_dict(name):
    """What config.json, checkpoints and committed recipes hold (lists for tuples, as JSON writes them) gives the
    same config back: `from_dict` (resume checks, `recorded_config`) and `differences`."""
    config = PRESETS[name]()
    stored = json.loads(json.dumps(config.to_dict()))
    assert type(config).from_dict(stored) == config and config.differences(stored) == []


def test_replace_takes_a_field_by_name_by_path_or_a_whole_section():
    config = PRESETS["dino_digits"]()
    changed = config.replace(local_crops=2, **{"dino.teacher_temp": 0.07}, lr=1e-3)
    assert (changed.crops.local_crops, changed.dino.teacher_temp, changed.optim.lr) == (2, 0.07, 1e-3)
    assert changed.differences(config.to_dict()) == ["local_crops", "lr", "teacher_temp"]
    assert config.crops.local_crops == 4  # the original is left alone
    crops = crate_nn.tasks.dino.CropsSection(local_crops=6)
    assert config.replace(crops=crops, flip_p=0.5).crops == dataclasses.replace(crops, flip_p=0.5)
    # get_preset, smoke and the command line take a path where they take a name
    assert crate_nn.tasks.get_preset("dino_digits", **{"crops.local_crops": 2}) == changed.replace(
        teacher_temp=0.04, lr=config.optim.lr)
    assert config.smoke(**{"run.output_dir": "elsewhere"}).run.output_dir == "elsewhere"
    with pytest.raises(TypeError, match=r"^local_crop: not a field of DINOTrainConfig \(did you mean local_crops"):
        config.replace(local_crop=2)
    with pytest.raises(TypeError, match=r"^crop\.local_crops: not a field of DINOTrainConfig \(did you mean "
                                        r"crops\.local_crops"):
        config.get("crop.local_crops")
    with pytest.raises(TypeError, match=r"^dino\.local_crops: not a field"):  # a field, but not of that section
        config.get("dino.local_crops")
    with pytest.raises(TypeError, match=r"^local_crops: given twice"):
        config.replace(local_crops=2, **{"crops.local_crops": 3})
    with pytest.raises(TypeError, match=r"^crops: expected a CropsSection, got 4$"):
        dataclasses.replace(config, crops=4).validate()
    with pytest.raises(TypeError, match=r"^no_such_field: not fields of DINOTrainConfig$"):
        type(config).from_dict({**config.to_dict(), "no_such_field": 1})


COMPONENT_SECTIONS = sorted({(c, name) for c in CONFIGS for name, kind in c.sections().items()
                             if kind.component is not None}, key=lambda s: (s[0].__name__, s[1]))
"""The sections of crate_nn's configs that build a component (``Section.component``), with their config."""


def test_the_component_sections_are_those_of_the_tasks_components():
    assert sorted({c.sections()[name].__name__ for c, name in COMPONENT_SECTIONS}) == [
        "AugmentSection", "CropsSection", "DINOHeadSection", "DINOLossSection", "KNNSection", "SimDINOLossSection",
        "TokenMaskingSection"]


@pytest.mark.parametrize("config_class, name", COMPONENT_SECTIONS, ids=lambda s: getattr(s, "__name__", s))
def test_a_component_section_gives_every_field_to_its_component_under_the_field_name(config_class, name):
    """A new option of a component is a field of its section and a parameter of the component, nothing else: the
    config's `build` passes every field of the section (and every field it ``reads`` from other sections) by name."""
    kind = config_class.sections()[name]
    parameters = inspect.signature(kind.component).parameters
    arguments = config_class().arguments(name)
    assert set(arguments) == {f.name for f in dataclasses.fields(kind)} | set(kind.reads)
    assert [argument for argument in arguments if argument not in parameters] == []


def test_build_makes_the_component_from_the_config_and_the_context():
    config = PRESETS["dino_digits"]()
    crops = config.build("crops")
    assert (crops.global_crops, crops.local_crops, crops.load_size) == (2, 4, 16)
    objective = crate_nn.tasks.dino.build_objective(config, prototypes=7)
    assert (objective.prototypes, objective.student_temp, objective.center_momentum) == (7, 0.1, 0.9)
    head = config.model_config(in_channels=1)
    assert (head.out_dim, head.hidden_dim, head.bottleneck_dim, head.dim) == (1024, 256, 64, 96)
    with pytest.raises(TypeError, match="^distillation: DistillationSection configures no component$"):
        config.build("distillation")


def test_a_component_checks_its_section_when_the_config_is_validated():
    """`MultiCrop.check` and `Masking.check` run from the config's `validate`, with the fields the section reads
    from other sections (the crops: the data's image size)."""
    with pytest.raises(ValueError, match=r"^local_crop_size: a local crop \(32\) larger than the global crops "
                                         r"\(image_size=16\)$"):
        PRESETS["dino_digits"]().replace(local_crop_size=32).validate()
    with pytest.raises(ValueError, match="^mask_fraction, random_fraction: "):
        PRESETS["bert_stdlib"]().replace(mask_fraction=0.8, random_fraction=0.3).validate()


@dataclass
class Datasets(Section):
    """A second section declaring a field the image data section declares."""

    dataset: str = option("imagenet", "dataset layout")


@dataclass
class Redeclares(TrainConfig):
    task = "redeclares"

    data: ImageDataSection = section(ImageDataSection)
    extra: Datasets = section(Datasets)


@dataclass
class Inherits(ImageDataSection, TrainConfig):
    task = "inherits"


@dataclass
class Collides(TrainConfig):
    task = "collides"

    dataset: Datasets = section(Datasets)


def test_a_config_that_is_not_composed_of_sections_is_refused_naming_why():
    with pytest.raises(ValueError, match=r"^Redeclares: fields declared more than once \(dataset by data "
                                         r"\(ImageDataSection\), extra \(Datasets\)\); declare each in one section$"):
        check_sections(Redeclares)
    with pytest.raises(TypeError, match=r"^Inherits: a config holds its sections as fields \(`section`\) and "
                                        r"inherits none; it inherits ImageDataSection, DataSection, Section$"):
        check_sections(Inherits)
    with pytest.raises(ValueError, match=r"^Collides: dataset name both a section and a field"):
        check_sections(Collides)
    for config_class in CONFIGS:  # the composed configs pass
        check_sections(config_class)


@dataclass
class Captions(Section):
    """The text side of an image-text system."""

    caption_length: int = option(32, "tokens per caption", minimum=1)


@dataclass
class ImageTextConfig(TrainConfig):
    """A system reading images and text: the image data section (with ``data_dir``) and a text section of its own."""

    task = "image_text"

    data: ImageDataSection = section(ImageDataSection)
    captions: Captions = section(Captions)


@dataclass
class TwoFolders(TrainConfig):
    task = "two_folders"

    data: ImageDataSection = section(ImageDataSection)
    corpus: CorpusSection = section(CorpusSection)


def test_an_image_and_a_text_section_compose_and_two_data_folders_are_refused():
    check_sections(ImageTextConfig)
    assert list(ImageTextConfig.sections())[-2:] == ["data", "captions"]
    config = ImageTextConfig().replace(data_dir="/data/pairs", caption_length=64, dataset="digits")
    config.validate()
    assert config.to_dict()["data_dir"] == "/data/pairs" and config.captions.caption_length == 64
    assert ImageTextConfig.resolve("data_dir") == ("data", "data_dir")  # DataSection's field, in the data section
    with pytest.raises(ValueError, match="^caption_length: "):  # each section's bounds still checked
        ImageTextConfig().replace(caption_length=0).validate()
    with pytest.raises(ValueError, match="^mean, std: "):  # and each section's own checks
        ImageTextConfig().replace(mean=(0.5,)).validate()
    with pytest.raises(ValueError, match=r"data_dir by data \(ImageDataSection\), corpus \(CorpusSection\)"):
        check_sections(TwoFolders)


def _help_groups(preset: str, capsys) -> dict[str, set[str]]:
    """The flags ``--help`` lists, by the section whose group lists them (one line each)."""
    with pytest.raises(SystemExit):
        parse_args(["--preset", preset, "--help"])
    groups, current = {}, None
    for line in capsys.readouterr().out.splitlines():
        header = re.fullmatch(r"(\w+) \((\w+Section)\): .+", line)
        if header:
            current = groups.setdefault(header.group(1), set())
        elif current is not None and (flag := re.match(r"  --(?:(\w+)\.)(?:no-)?([a-z0-9-]+)", line)):
            assert flag.group(1) in groups  # a flag of its own section
            groups[flag.group(1)].add(flag.group(2).replace("-", "_"))
    return groups


@pytest.mark.parametrize("preset", ["digits", "dino_digits", "mae_digits", "bert_stdlib", "pairs_stdlib"])
def test_help_groups_flags_by_section_one_line_each(preset, capsys):
    config_class = type(PRESETS[preset]())
    expected = {name: {f.name for f in dataclasses.fields(kind)} for name, kind in config_class.sections().items()}
    expected["run"].discard("preset")  # --preset is the parser's own flag
    assert _help_groups(preset, capsys) == expected


def test_help_of_a_section_shows_its_flags_in_full_and_their_aliases(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--preset", "dino_digits", "--help", "crops"])
    out = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert "--crops.local-crops N, --local-crops N" in out and "local crops per image (seen by the student) [4]" in out
    assert "--dino." not in out and "--run." not in out  # the other sections are left out
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--preset", "dino_digits", "--help", "crop"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "argument --help: 'crop' is not a section of preset dino_digits's DINOTrainConfig" in err
    assert "(did you mean crops?)" in err


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
