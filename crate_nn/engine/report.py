"""What a run says about itself when it ends, and what ``crate-compare`` reads back: final metrics, curves.

* `final_metrics`: the last logged value of every metric of a metrics.jsonl; `baselines`: the same metric of the
  model before training where the run has it (the evaluation at step 0 of ``eval_at_start``, or a
  ``<metric>_random_init`` the task logs itself, e.g. CRATE-MAE's probe of its initialisation).
* `run_summary` / `summary_text`: those metrics with their baselines, the wall time, the checkpoint, the figures,
  and the commands that resume the run and score its checkpoint; the engine prints the text and saves the summary
  as ``<output_dir>/summary.json`` at the end of every run.
* `plot_curves`: loss, learning rate and every evaluation metric against the optimizer step, for one run
  (``<output_dir>/figures/curves.png``) or several side by side (``crate-compare``). Metrics of one kind share a
  panel (``train_loss`` and ``val_loss``; ``val_top1`` and ``test_top1``; the k-NN accuracy at every k). Drawn
  on a `matplotlib.figure.Figure` without pyplot, so no display or global backend is needed; missing, partial,
  non-finite or non-numeric values are left out, and an empty log gives a figure that says so.
"""
from __future__ import annotations

import ast
import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

from .config import DEFAULT, TrainConfig
from .task import PRESETS

SUMMARY = "summary.json"
CURVES = Path("figures") / "curves.png"
BOOKKEEPING = ("epoch", "step", "final")
SPLIT_PREFIXES = ("ema_", "train_", "val_", "test_")
RANDOM_INIT = "_random_init"


def is_number(value) -> bool:
    """A finite int or float (not a bool): what a curve or a table can show."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def format_value(value) -> str:
    """A metric as text: an integer as an integer (``144``), a float with 4 decimals (``0.9792``), or 4 significant
    digits when 4 decimals would hide it (``3.2e-05``, ``1.235e+06``); anything else as ``str``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4f}" if value == 0 or 1e-3 <= abs(value) < 1e6 else f"{value:.4g}"
    return str(value)


def final_metrics(records: Sequence[Mapping]) -> dict:
    """Every metric's last logged value (in the order metrics first appear), the learning rate left out."""
    final: dict = {}
    for record in records:
        final.update({k: v for k, v in record.items() if k not in BOOKKEEPING and k != "lr" and is_number(v)})
    return final


def baselines(records: Sequence[Mapping], final: Mapping) -> dict:
    """The value before training of each metric of ``final`` the run measured then: logged at step 0 (the
    ``eval_at_start`` evaluation), else ``final[<metric>_random_init]``."""
    start = {k: v for r in records if r.get("step") == 0 and "train_loss" not in r for k, v in r.items()
             if k not in BOOKKEEPING and is_number(v)}
    found = {k: start[k] for k in final if k in start}
    found.update({k: final[k + RANDOM_INIT] for k in final if k + RANDOM_INIT in final and k not in found})
    return found


def command_line(config: TrainConfig, *extra: str) -> str | None:
    """The ``crate-train`` command that rebuilds ``config`` (its preset, then a flag ``--SECTION.FIELD`` for every
    field that differs from the preset), then ``extra``; None for a config that did not come from a registered
    preset."""
    if config.run.preset not in PRESETS:
        return None
    preset = PRESETS[config.run.preset]()
    words = ["crate-train", "--preset", config.run.preset]
    for name, (held, _) in config.flat_fields().items():
        value = config.get(name)
        if name in ("preset", "resume", "overwrite") or value == preset.get(name):
            continue
        flag = f"--{held}.{name.replace('_', '-')}"
        if isinstance(value, bool):
            words.append(flag if value else f"--{held}.no-{name.replace('_', '-')}")
        elif value is None:
            words += [flag, "none"]
        elif isinstance(value, tuple):
            words += [flag, *map(str, value)]
        elif isinstance(value, dict):  # merged into the preset's (`merge_options`): what changed, what was removed
            given = preset.get(name)
            words += [flag, *(f"{k}={_literal(v)}" for k, v in value.items() if k not in given or given[k] != v),
                      *(f"{k}={DEFAULT}" for k in given if k not in value)]
        else:
            words += [flag, str(value)]
    return " ".join(shlex.quote(w) for w in [*words, *extra])


def _literal(value) -> str:
    """``value`` as ``crate-train`` reads a KEY=VALUE option: a string that reads as a Python literal is quoted."""
    text = str(value)
    if not isinstance(value, str):
        return text
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return repr(value)


def run_summary(root: Path, config: TrainConfig, *, steps: int, seconds: float, checkpoint: str,
                evaluate_command: str | None) -> dict:
    """The summary of the run in ``root`` (its metrics.jsonl read now): final metrics with baselines, steps, wall
    time, the checkpoint, the figures, and the commands that resume it and score its checkpoint
    (``evaluate_command``: the task's template with ``{checkpoint}``)."""
    from .run_dir import read_metrics

    log = root / "metrics.jsonl"
    records = read_metrics(log) if log.is_file() else []
    final = final_metrics(records)
    base = baselines(records, final)
    metrics = {k: {"final": v, **({"baseline": base[k]} if k in base else {})} for k, v in final.items()
               if not (k.endswith(RANDOM_INIT) and k[:-len(RANDOM_INIT)] in final)}
    figures = sorted(str(p) for folder in ("figures", "measurements") for p in (root / folder).rglob("*.png"))
    return {
        "output_dir": str(root), "preset": config.run.preset, "task": config.task, "steps": steps,
        "seconds": round(seconds, 1), "metrics": metrics, "checkpoint": checkpoint, "figures": figures,
        "resume": command_line(config, "--run.resume"),
        "evaluate": evaluate_command.format(checkpoint=shlex.quote(checkpoint)) if evaluate_command else None,
    }


def summary_text(summary: Mapping) -> str:
    """``summary`` (`run_summary`) as the lines a person reads at the end of a run."""
    origin = f"preset {summary['preset']}, " if summary["preset"] else ""
    lines = [f"run {summary['output_dir']} ({origin}task {summary['task']}): {summary['steps']} optimizer steps "
             f"in {_duration(summary['seconds'])}"]
    metrics = summary["metrics"]
    if metrics:
        width = max(len("metric"), *map(len, metrics))
        lines.append(f"  {'metric':<{width}}  {'final':>10}  {'baseline':>10}")
        for key, entry in metrics.items():
            baseline = format_value(entry["baseline"]) if "baseline" in entry else ""
            lines.append(f"  {key:<{width}}  {format_value(entry['final']):>10}  {baseline:>10}".rstrip())
        if any("baseline" in entry for entry in metrics.values()):
            lines.append("  (baseline: the model before training)")
    resume = summary["resume"] or "train the same config again with resume=True"
    lines += [f"checkpoint  {summary['checkpoint']}",
              f"figures     {', '.join(summary['figures']) or 'none'}",
              f"resume      {resume}"]
    if summary["evaluate"]:
        lines.append(f"evaluate    {summary['evaluate']}")
    lines.append(f"summary     {Path(summary['output_dir']) / SUMMARY}")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    minutes, rest = divmod(seconds, 60)
    hours, minutes = divmod(int(minutes), 60)
    return (f"{hours} h {minutes} min" if hours else f"{minutes} min {rest:.0f} s" if minutes else f"{rest:.1f} s")


def write_summary(root: Path, summary: Mapping) -> Path:
    """Save ``summary`` as ``<root>/summary.json``; returns its path."""
    path = root / SUMMARY
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path


# ----------------------------------------------------------------------------------------------------- curves
def panel_of(key: str) -> str:
    """The panel a metric is drawn in: its name without split prefixes (``ema_``, ``train_``, ``val_``,
    ``test_``) and without a trailing ``_k<N>`` (the k-NN's k) or ``_random_init`` (its baseline); every loss in
    "loss", the rate in "learning rate"."""
    if key == "lr":
        return "learning rate"
    name = key
    while name.startswith(SPLIT_PREFIXES):
        name = name.split("_", 1)[1]
    name = re.sub(r"_k\d+$", "", name.removesuffix(RANDOM_INIT))
    return "loss" if "loss" in name else name


def curves(records: Sequence[Mapping]) -> dict[str, dict[str, tuple[list, list]]]:
    """panel → metric → (steps, values) of one run's records. Left out: non-finite and non-numeric values,
    throughput (``*_per_s``) and counts (metrics logged as integers only: images evaluated, files skipped, the
    k-NN's chosen k)."""
    series: dict[str, tuple[list, list]] = {}
    for record in records:
        step = record.get("step")
        if not is_number(step):
            continue
        for key, value in record.items():
            if key not in BOOKKEEPING and not key.endswith("_per_s") and is_number(value):
                steps, values = series.setdefault(key, ([], []))
                steps.append(step)
                values.append(value)
    panels: dict[str, dict[str, tuple[list, list]]] = {}
    for key, points in series.items():
        if not all(isinstance(v, int) for v in points[1]):
            panels.setdefault(panel_of(key), {})[key] = points
    first = [p for p in ("loss", "learning rate") if p in panels]
    return {p: panels[p] for p in [*first, *sorted(set(panels) - set(first))]}


def plot_curves(runs: Mapping[str, Sequence[Mapping]], path: Path, columns: int = 3) -> Path:
    """Draw the curves of ``runs`` (name → metrics.jsonl records) into ``path`` (PNG): one panel per kind of
    metric, one colour per metric (one per run, and a line style per metric, when there are several runs); a
    metric logged once is a point. Returns ``path``."""
    from matplotlib.figure import Figure

    per_run = {name: curves(records) for name, records in runs.items()}
    panels = list(dict.fromkeys(p for panels in per_run.values() for p in panels))
    cols = max(1, min(columns, len(panels)))
    rows = max(1, math.ceil(len(panels) / cols))
    fig = Figure(figsize=(4.2 * cols, 3.0 * rows), layout="constrained")
    if not panels:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no metrics logged", ha="center", va="center")
        ax.set_axis_off()
    styles = ("-", "--", ":", "-.")
    for index, panel in enumerate(panels):
        ax = fig.add_subplot(rows, cols, index + 1)
        for run_number, (name, run_panels) in enumerate(per_run.items()):
            for number, (key, (steps, values)) in enumerate(run_panels.get(panel, {}).items()):
                several = len(runs) > 1
                style = styles[number % len(styles)] if several else "-"
                ax.plot(steps, values, linestyle=style if len(steps) > 1 else "none",
                        marker="o" if len(steps) < 30 else None, markersize=3,
                        color=f"C{(run_number if several else number) % 10}",
                        label=f"{name}: {key}" if several else key)
        ax.set_title(panel)
        ax.set_xlabel("optimizer step")
        if panel == "learning rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        if len(ax.get_lines()) > 1:
            ax.legend(fontsize="x-small")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
