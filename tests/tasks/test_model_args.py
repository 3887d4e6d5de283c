"""``--network.model-args KEY=VALUE`` (alias ``--model-args``) changes the named keys of the preset's model arguments and keeps the others (a key set
to ``default`` is removed, so the model's own default applies): the documented commands build the models they name."""
import shlex

import pytest

from crate_nn.engine import initial_model, report
from crate_nn.engine.config import DEFAULT
from crate_nn.tasks import get_preset
from crate_nn.train import parse_args


def _parameters(config) -> int:
    return sum(p.numel() for p in initial_model(config).parameters())


def test_the_readme_table16_command_builds_crate_gpt_without_ista():
    """docs/language.md's "CRATE-GPT without ISTA, 0.18M" row: the gpt_stdlib model (d 128, K 4, L 4) without its ISTA
    block — 181,760 parameters at a vocabulary of 256, 182,016 with the byte tokenizer's 258 ids (256 bytes,
    end-of-text, mask) the task builds. Replacing the preset's arguments instead built crate_gpt_small's d 512,
    L 12: 6,507,520 parameters."""
    config = parse_args(["--preset", "gpt_stdlib", "--model-args", "feedforward=none"])
    assert config.network.model_args == {"dim": 128, "heads": 4, "depth": 4, "feedforward": "none"}
    assert _parameters(config) == 181_760 + 2 * 128  # the two special ids' rows of the tied embedding


def test_model_args_merge_into_every_kind_of_preset():
    digits = parse_args(["--preset", "digits", "--network.model-args", "heads=8", "patch_size=4"])
    assert digits.network.model_args == {"patch_size": 4, "dim": 96, "depth": 3, "heads": 8}
    assert _parameters(digits) == _parameters(get_preset("digits", model_args={"heads": 8}))
    assert _parameters(digits) < 200_000  # d 96, L 3 (a replaced dict built crate_tiny's d 192, L 12: 5.3M)
    mae = parse_args(["--preset", "mae_digits", "--model-args", "wiring='paper'"])
    assert mae.network.model_args == {**get_preset("mae_digits").network.model_args, "wiring": "paper"}
    assert initial_model(mae).config.wiring == "paper"  # built: the preset's patch size is kept


def test_a_key_set_to_default_is_removed():
    config = parse_args(["--preset", "digits", "--model-args", "depth=default", "dim=48"])
    assert config.network.model_args == {"patch_size": 4, "dim": 48, "heads": 4}
    assert initial_model(config).config.depth == 12  # crate_tiny's own depth
    assert get_preset("digits", model_args={"depth": DEFAULT}).network.model_args == {"patch_size": 4, "dim": 96,
                                                                                       "heads": 4}


@pytest.mark.parametrize("model_args", [{"heads": 8}, {"depth": DEFAULT, "pool": "mean"}, {}])
def test_the_resume_command_rebuilds_merged_model_args(tmp_path, model_args):
    config = get_preset("digits", model_args=model_args, output_dir=str(tmp_path / "run"))
    command = report.command_line(config, "--run.resume")
    assert "--network.model-args" in command if model_args else "model-args" not in command
    assert parse_args(shlex.split(command)[1:]).network.model_args == config.network.model_args
