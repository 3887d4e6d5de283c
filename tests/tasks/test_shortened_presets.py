"""A preset given another run length (``--epochs``, ``--total-steps``) stays valid: its warm-up and its measurement,
k-NN, probe, figure and step cadences keep their share of the run (`crate_nn.engine.config.fit_to_run`), one line
says what changed, and values the caller sets are kept (and refused, with what to pass, when they do not fit)."""
import dataclasses
import json

import pytest

from crate_nn.engine import train
from crate_nn.engine.ema import ema_update
from crate_nn.engine.schedule import cosine
from crate_nn.tasks import PRESETS, dino, get_preset
from crate_nn.train import main, parse_args

LENGTHS = [dict(epochs=1), dict(epochs=2), dict(total_steps=3), dict(max_steps=2)]


def span_fields(config):
    return {f.name: f.metadata["span"] for f in dataclasses.fields(config) if f.metadata.get("span")}


@pytest.mark.parametrize("length", LENGTHS, ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()))
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_shortened_builds_a_valid_config(name, length, capsys):
    preset = PRESETS[name]()
    config = get_preset(name, **length)
    config.validate()
    changed = {k for k in span_fields(config) if getattr(config, k) != getattr(preset, k)}
    err = capsys.readouterr().err
    assert (err != "") == bool(changed)
    if changed:
        assert err.startswith(f"preset {name} with ") and err.count("\n") == 1
        assert all(f"{k} {getattr(preset, k)!r} → {getattr(config, k)!r}" in err for k in changed)
    if "epochs" in length and preset.total_steps is None:
        # the warm-up keeps its share of the run; a measurement at the preset's end moves to the new end
        assert config.warmup_epochs / config.epochs == pytest.approx(preset.warmup_epochs / preset.epochs, abs=1e-6)
        for field, span in span_fields(config).items():
            value = getattr(preset, field)
            if span == "epochs" and isinstance(value, tuple) and preset.epochs in value:
                assert config.epochs in getattr(config, field)
    if "total_steps" in length and preset.total_steps is None and preset.warmup_epochs:
        assert config.warmup_steps == round(3 * preset.warmup_epochs / preset.epochs)
    if "max_steps" in length:  # a stop, not a new length: the recipe is the preset's
        assert dataclasses.replace(config, max_steps=preset.max_steps) == preset


def test_digits_for_half_the_epochs(capsys):
    config = parse_args(["--preset", "digits", "--epochs", "15"])
    assert (config.epochs, config.warmup_epochs, config.measure_epochs) == (15, 1.5, (0, 15))
    assert capsys.readouterr().err == ("preset digits with epochs=15: warmup_epochs 3.0 → 1.5, measure_epochs (0, 30) "
                                       "→ (0, 15) (kept in proportion to the run; set them to choose other values)\n")
    kept = get_preset("dino_digits", epochs=5, knn_epochs=(4,))
    assert (kept.knn_epochs, kept.measure_epochs, kept.warmup_epochs) == ((4,), (0, 5), 0.666667)
    steps = get_preset("gpt_stdlib", total_steps=60)
    assert (steps.warmup_steps, steps.eval_every_steps) == (5, 20)


def test_values_given_with_the_new_length_are_kept_or_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"measure_epochs: \[30\] are after the last epoch \(15\); pass values ≤ 15 "
                                         "or a larger --epochs"):
        get_preset("digits", epochs=15, measure_epochs=(0, 30)).validate()
    with pytest.raises(SystemExit) as stop:
        main(["--preset", "dino_digits", "--epochs", "5", "--freeze-last-layer", "6", "--output-dir", str(tmp_path)])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "crate-train: error: freeze_last_layer: 6 exceeds the run's 5 epochs; pass a value ≤ 5 or a larger --epochs "
        "(see crate-train --help)")


def test_dino_schedules_span_the_engines_run_length(tmp_path, monkeypatch):
    """With --total-steps the teacher momentum follows the same run length as the learning rate: the engine's 50
    steps, not the preset's 15 epochs (300 steps). The momenta are those the run itself applies."""
    applied = []

    def recorded(teacher, student, momentum):
        applied.append(momentum)
        return ema_update(teacher, student, momentum)

    monkeypatch.setattr(dino, "ema_update", recorded)
    config = get_preset("dino_digits", total_steps=50, warmup_steps=5, max_steps=3, monitor_samples=16,
                        measure_samples=16, knn_epochs=(), eval_at_start=False, pixel_control=False,
                        output_dir=str(tmp_path), device="cpu", progress=False, curves=False)
    train(config)
    resolved = json.loads((tmp_path / "config.json").read_text())
    assert (resolved["total_steps"], resolved["steps_per_epoch"]) == (50, 20)
    expected = [cosine(step, 50, config.teacher_momentum, config.teacher_momentum_end) for step in range(3)]
    assert applied == expected
    assert applied[-1] != cosine(2, 15 * 20, config.teacher_momentum, config.teacher_momentum_end)


@pytest.mark.parametrize("name, length", [("digits", dict(epochs=1, max_steps=2)),
                                          ("dino_digits", dict(total_steps=2, monitor_samples=16, measure_samples=16)),
                                          ("mae_digits", dict(epochs=1, max_steps=2))])
def test_shortened_presets_train(name, length, tmp_path):
    """The shortened configs run, their cadences included (a measurement or figure at epoch 0)."""
    result = train(get_preset(name, **length, output_dir=str(tmp_path / "run"), device="cpu", progress=False))
    assert result.steps == 2
    resolved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert resolved["total_steps"] == length.get("total_steps", resolved["steps_per_epoch"])
    assert (tmp_path / "run" / "summary.json").is_file() and (tmp_path / "run" / "figures" / "curves.png").is_file()
