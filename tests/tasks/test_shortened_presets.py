"""A preset given another run length (``--epochs``, ``--total-steps``) stays valid: its warm-up and its measurement,
k-NN, probe, figure and step cadences keep their share of the run (`crate_nn.engine.config.fit_to_run`), one line
says what changed, and values the caller sets are kept (and refused, with what to pass, when they do not fit)."""
import json

import pytest

from crate_nn.engine import train
from crate_nn.engine.ema import ema_update
from crate_nn.engine.schedule import cosine
from crate_nn.tasks import PRESETS, dino, get_preset
from crate_nn.train import main, parse_args

LENGTHS = [dict(epochs=1), dict(epochs=2), dict(total_steps=3), dict(max_steps=2)]


def span_fields(config):
    return {name: f.metadata["span"] for name, (_, f) in config.flat_fields().items() if f.metadata.get("span")}


@pytest.mark.parametrize("length", LENGTHS, ids=lambda d: "-".join(f"{k}={v}" for k, v in d.items()))
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_shortened_builds_a_valid_config(name, length, capsys):
    preset = PRESETS[name]()
    config = get_preset(name, **length)
    config.validate()
    changed = {k for k in span_fields(config) if config.get(k) != preset.get(k)}
    err = capsys.readouterr().err
    assert (err != "") == bool(changed)
    if changed:
        assert err.startswith(f"preset {name} with ") and err.count("\n") == 1
        assert all(f"{k} {preset.get(k)!r} → {config.get(k)!r}" in err for k in changed)
    before, after = preset.schedule, config.schedule
    if "epochs" in length and before.total_steps is None:
        # the warm-up keeps its share of the run; a measurement at the preset's end moves to the new end
        assert after.warmup_epochs / after.epochs == pytest.approx(before.warmup_epochs / before.epochs, abs=1e-6)
        for field, span in span_fields(config).items():
            value = preset.get(field)
            if span == "epochs" and isinstance(value, tuple) and before.epochs in value:
                assert after.epochs in config.get(field)
    if "total_steps" in length and before.total_steps is None and before.warmup_epochs:
        assert after.warmup_steps == round(3 * before.warmup_epochs / before.epochs)
    if "max_steps" in length:  # a stop, not a new length: the recipe is the preset's
        assert config.replace(max_steps=before.max_steps) == preset


def test_digits_for_half_the_epochs(capsys):
    config = parse_args(["--preset", "digits", "--schedule.epochs", "15"])
    assert (config.schedule.epochs, config.schedule.warmup_epochs, config.measure.measure_epochs) == (15, 1.5, (0, 15))
    assert capsys.readouterr().err == ("preset digits with epochs=15: warmup_epochs 3.0 → 1.5, measure_epochs (0, 30) "
                                       "→ (0, 15) (kept in proportion to the run; set them to choose other values)\n")
    kept = get_preset("dino_digits", epochs=5, knn_epochs=(4,))
    assert (kept.cadence.knn_epochs, kept.measure.measure_epochs, kept.schedule.warmup_epochs) == (
        (4,), (0, 5), 0.666667)
    steps = get_preset("gpt_stdlib", total_steps=60)
    assert (steps.schedule.warmup_steps, steps.evaluation.eval_every_steps) == (5, 20)


def test_values_given_with_the_new_length_are_kept_or_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"measure_epochs: \[30\] are after the last epoch \(15\); pass values ≤ 15 "
                                         "or a larger --schedule.epochs"):
        get_preset("digits", epochs=15, measure_epochs=(0, 30)).validate()
    with pytest.raises(SystemExit) as stop:
        main(["--preset", "dino_digits", "--epochs", "5", "--distillation.freeze-last-layer", "6", "--output-dir",
              str(tmp_path)])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "crate-train: error: freeze_last_layer: 6 exceeds the run's 5 epochs; pass a value ≤ 5 or a larger "
        "--schedule.epochs (see crate-train --help)")


@pytest.mark.parametrize("flag, value", [("--epochs", "-3"), ("--epochs", "0"), ("--total-steps", "-5")])
def test_a_length_out_of_range_is_refused_without_rescaling_the_preset_to_it(flag, value, tmp_path, capsys):
    """A nonsense length is refused in one line, with no "warmup_epochs 3.0 → -0.3" line rescaling the preset to it."""
    with pytest.raises(SystemExit) as stop:
        main(["--preset", "digits", flag, value, "--output-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "→" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("crate-train: error: ") and value in err


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
    momentum = (config.distillation.teacher_momentum, config.distillation.teacher_momentum_end)
    expected = [cosine(step, 50, *momentum) for step in range(3)]
    assert applied == expected
    assert applied[-1] != cosine(2, 15 * 20, *momentum)


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
