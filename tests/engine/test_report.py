"""What a run says about itself (`crate_nn.engine.report`) and `crate-compare`: the summary and curves.png a run
leaves, its baselines, the command that rebuilds its config, the number format, curves drawn from awkward logs,
and two runs compared."""
import json
import math
import shlex

import pytest
from _toy_task import toy
from matplotlib.image import imread

from crate_nn import checkpoint
from crate_nn.compare import main as compare_main
from crate_nn.engine import report, train
from crate_nn.tasks import get_preset
from crate_nn.train import parse_args


def test_integers_print_as_integers_and_floats_keep_their_digits():
    assert [report.format_value(v) for v in (144, 0, 0.0, 0.97916666, 2.5e-5, 1234567.0, True, "x")] == [
        "144", "0", "0.0000", "0.9792", "2.5e-05", "1.235e+06", "True", "x"]


RECORDS = [
    {"epoch": 0.0, "step": 0, "val_loss": 2.3, "val_top1": 0.1, "val_images": 144},
    {"epoch": 0.5, "step": 2, "train_loss": 2.0, "lr": 1e-3, "images_per_s": 900.0, "skipped_images": 0},
    {"epoch": 1.0, "step": 4, "train_loss": 1.5, "lr": 5e-4, "images_per_s": 950.0, "skipped_images": 0},
    {"epoch": 1.0, "step": 4, "val_loss": 1.2, "val_top1": 0.6, "val_images": 144},
    {"epoch": 1.0, "step": 4, "test_top1": 0.55, "probe_top1": 0.8, "probe_top1_random_init": 0.4, "final": True},
]


def test_final_metrics_and_their_baselines():
    final = report.final_metrics(RECORDS)
    assert final == {"val_loss": 1.2, "val_top1": 0.6, "val_images": 144, "train_loss": 1.5, "images_per_s": 950.0,
                     "skipped_images": 0, "test_top1": 0.55, "probe_top1": 0.8, "probe_top1_random_init": 0.4}
    # step 0's evaluation for what it measured, the task's own "<metric>_random_init" for the probe
    assert report.baselines(RECORDS, final) == {"val_loss": 2.3, "val_top1": 0.1, "val_images": 144,
                                                 "probe_top1": 0.4}


def test_curves_group_metrics_by_kind_and_leave_out_counts_throughput_and_junk():
    records = [*RECORDS, {"step": 6, "val_loss": float("nan"), "val_top1": "n/a", "note": None},
               {"epoch": 2.0, "val_loss": 0.1}, {"step": 8, "val_knn_top1_k10": 0.5, "val_knn_top1_k20": 0.6}]
    panels = report.curves(records)
    assert list(panels) == ["loss", "learning rate", "knn_top1", "probe_top1", "top1"]
    assert panels["loss"] == {"val_loss": ([0, 4], [2.3, 1.2]), "train_loss": ([2, 4], [2.0, 1.5])}
    assert set(panels["top1"]) == {"val_top1", "test_top1"} and set(panels["knn_top1"]) == {
        "val_knn_top1_k10", "val_knn_top1_k20"}


@pytest.mark.parametrize("records", [[], [{"step": 0, "val_loss": 1.0}], RECORDS,
                                     [{"step": 1, "train_loss": float("inf"), "lr": "?"}]])
def test_plot_curves_draws_any_log(tmp_path, records):
    """An empty log, one point, a normal run, a log of nothing drawable: each gives a PNG (one run and two)."""
    for runs in ({"run": records}, {"a": records, "b": RECORDS}):
        path = report.plot_curves(runs, tmp_path / "deep" / "curves.png")
        assert imread(path).shape[2] == 4


def test_a_run_ends_with_its_summary_and_curves(tmp_path, capsys):
    result = train(toy(tmp_path / "run", eval_at_start=True, epochs=2, log_every=2))
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == result.steps == 16 and summary["checkpoint"] == str(run / "checkpoints" / "last.pt")
    mse = summary["metrics"]["val_mse"]
    assert mse["final"] == result.metrics["val_mse"] and mse["baseline"] > mse["final"]
    assert summary["figures"] == [str(run / "figures" / "curves.png")]
    assert summary["resume"] is None  # the toy config comes from no preset: resume=True from Python
    text = capsys.readouterr().out
    assert f"run {run} (task toy): 16 optimizer steps in " in text and "baseline: the model before training" in text
    assert f"summary     {run / 'summary.json'}" in text
    assert imread(run / "figures" / "curves.png").shape[2] == 4


def test_curves_false_writes_the_summary_without_the_figure(tmp_path):
    train(toy(tmp_path / "run", epochs=1, curves=False))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["figures"] == [] and not (tmp_path / "run" / "figures" / "curves.png").exists()


def test_evaluating_at_the_start_changes_no_weight(tmp_path):
    plain = checkpoint.read(train(toy(tmp_path / "a", epochs=1)).checkpoint)["model"]
    evaluated = checkpoint.read(train(toy(tmp_path / "b", epochs=1, eval_at_start=True)).checkpoint)["model"]
    assert all((plain[k] == evaluated[k]).all() for k in plain)


def test_the_resume_command_rebuilds_the_config(tmp_path):
    config = get_preset("digits", epochs=2, output_dir=str(tmp_path / "my run"), model_args=dict(
        patch_size=4, dim=32, depth=1, heads=2, pool="mean"), test_split=None, betas=(0.8, 0.9), progress=False)
    command = report.command_line(config, "--resume")
    assert command.startswith("crate-train --preset digits ") and command.endswith(" --resume")
    assert parse_args(shlex.split(command)[1:]) == config.replace(resume=True)


def test_crate_compare_tabulates_and_plots_two_runs(tmp_path, capsys):
    for name, lr in (("slow", 0.01), ("fast", 0.05)):
        train(toy(tmp_path / name, lr=lr, epochs=1))
    capsys.readouterr()
    out = tmp_path / "figs" / "both.png"
    assert compare_main([str(tmp_path / "slow"), str(tmp_path / "fast"), "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["metric", "slow", "fast"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:-1]}
    assert rows["steps"] == ["8", "8"]  # integers as integers
    slow, fast = (json.loads((tmp_path / n / "summary.json").read_text())["metrics"]["val_mse"]["final"]
                  for n in ("slow", "fast"))
    assert rows["val_mse"] == [report.format_value(slow), report.format_value(fast)]
    assert lines[-1] == f"curves: {out}" and imread(out).shape[2] == 4
    assert not math.isclose(slow, fast)


def test_crate_compare_refuses_what_is_not_a_run(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert compare_main([str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err == (f"crate-compare: RUN_DIR: '{tmp_path / 'empty'}' holds no metrics.jsonl (not "
                                       "a crate-train run directory)\n")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "metrics.jsonl").write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    assert compare_main([str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err.startswith(f"crate-compare: {tmp_path / 'bad' / 'metrics.jsonl'}: line 2 is not")
