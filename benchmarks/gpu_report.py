"""The figures a user plans with, read from the JSON `benchmarks.gpu_check` wrote (nothing is re-measured).

    python -m benchmarks.gpu_report                                  # benchmarks/results/gpu → text
    python -m benchmarks.gpu_report --markdown                       # the same as Markdown (RESULTS.md's tables)

From what is present in the folder:

* **step** (``train_step_base.json``): CRATE-Base's training step in every variant timed (compile mode, bf16
  activations) beside the authors' computation and timm's ViT-B/16 — images/s, MFU, a step's memory beyond the
  weights (its peak above the level before it, plus what it keeps between steps: optimizer state, CUDA graphs'
  pools); the best variant;
* **sizes** (``train_step_sizes.json`` and the base): per CRATE size its best variant's images/s, MFU and peak memory;
* **pipeline** (``pipeline.json``): the bare preset step and ``crate-train`` end to end from shards per loader,
  as a fraction of the bare step;
* **evaluation** (``inference.json``): the evaluation forward rate and its peak memory per size;
* **projection**: the wall time of the imagenet preset (its epochs, batch and evaluation cadence; ImageNet-1k's
  1,281,167 training and 50,000 validation images) on the machine that ran, from the bare model step, from the
  preset's step and end to end (each plus the evaluations at the evaluation forward rate; checkpoints and the
  layer-wise measurements, seconds per epoch, are left out).

Goals: MFU ≥ `MFU_GOAL` (stretch `MFU_STRETCH`), end to end ≥ `PIPELINE_GOAL` × the bare preset step, the 150-epoch
run ≤ `HOURS_GOAL` hours on one H100.
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IMAGENET_TRAIN = 1_281_167
IMAGENET_VAL = 50_000
MFU_GOAL, MFU_STRETCH = 0.35, 0.40
PIPELINE_GOAL = 0.9
HOURS_GOAL = 7.0


def load(folder: Path, name: str) -> dict | None:
    path = folder / name
    return json.loads(path.read_text()) if path.is_file() else None


def contenders(row: dict) -> dict[str, dict]:
    """The row's timed ways of running ours (key → precision, variant), also for rows written before variants
    existed (one contender, ``ours``)."""
    return row.get("contenders") or {"ours": {"precision": row.get("ours_precision"),
                                              "variant": row.get("compile_mode") or "eager"}}


def step_memory_gib(row: dict, key: str) -> float:
    """A contender's memory beyond the weights: its peak during a step above the level before it, plus what it
    keeps allocated between steps (optimizer state, CUDA graphs' pools) where the row records it."""
    return (row[f"{key}_peak_mem_mb"] + (row.get(f"{key}_resident_mb") or 0.0)) / 1024


def step_rows(row: dict) -> list[dict]:
    """One entry per contender of a `benchmarks.train_step` row (and the baseline and the beside model)."""
    out = [{"who": "authors' computation (fp16, eager)", "img_s": row["baseline_img_s"],
            "mfu": row.get("baseline_mfu"), "peak_gib": step_memory_gib(row, "baseline")}]
    for key, what in contenders(row).items():
        out.append({"who": f"ours, {what['variant']} ({what['precision']})", "key": key, "variant": what["variant"],
                    "img_s": row[f"{key}_img_s"], "mfu": row.get(f"{key}_mfu"), "peak_gib": step_memory_gib(row, key)})
    if row.get("beside"):
        out.append({"who": f"{row['beside']} (timm, {contenders(row)['ours']['variant']})",
                    "img_s": row["beside_img_s"], "mfu": row.get("beside_mfu"),
                    "peak_gib": step_memory_gib(row, "beside")})
    return out


def best_contender(row: dict) -> dict:
    return max((r for r in step_rows(row) if "key" in r), key=lambda r: r["img_s"])


def best_variant(folder: Path) -> tuple[str, str]:
    """(``--compile-mode``, ``--activations``) of the fastest CRATE-Base variant in ``train_step_base.json``;
    (default, fp32) when there is none (the previous default)."""
    run = load(folder, "train_step_base.json")
    if run is None:
        return "default", "fp32"
    variant = best_contender(run["rows"][0])["variant"]
    mode, _, kept = variant.partition("+")
    return ("default" if mode == "eager" else mode), ("bf16" if kept else "fp32")


def imagenet_hours(train_img_s: float, eval_img_s: float | None) -> float:
    """Hours of the imagenet preset at ``train_img_s`` training images/s and ``eval_img_s`` evaluation images/s
    (None: evaluations not counted): its epochs of ``IMAGENET_TRAIN // batch`` full batches, an evaluation of
    ``IMAGENET_VAL`` images every ``eval_every`` epochs."""
    from crate_nn.tasks import get_preset

    preset = get_preset("imagenet")
    epochs, batch = preset.schedule.epochs, preset.schedule.batch_size
    trained = epochs * (IMAGENET_TRAIN // batch) * batch
    evaluated = (epochs // preset.evaluation.eval_every) * IMAGENET_VAL
    return (trained / train_img_s + (evaluated / eval_img_s if eval_img_s else 0.0)) / 3600


def summarise(folder: Path) -> dict[str, Any]:
    """Everything the module docstring lists that the JSON in ``folder`` allows (absent parts are left out)."""
    summary: dict[str, Any] = {}
    base = load(folder, "train_step_base.json")
    if base is not None:
        row = base["rows"][0]
        summary["device"] = base["environment"].get("gpu") or base["environment"].get("device")
        summary["step"] = {"model": row["model"], "batch": row["batch"], "rows": step_rows(row),
                           "best": best_contender(row)}
    sizes = [r for run in (load(folder, "train_step_sizes.json"), base) if run for r in run["rows"]]
    if sizes:
        summary["sizes"] = {r["model"]: {k: best_contender(r)[k] for k in ("variant", "img_s", "mfu", "peak_gib")}
                            for r in sorted(sizes, key=lambda r: r["forward_gflops_per_img"])}
    inference = load(folder, "inference.json")
    if inference is not None:
        summary["evaluation"] = {r["model"]: {"img_s": r["ours_img_s"], "batch": r["batch"],
                                              "peak_gib": step_memory_gib(r, "ours")} for r in inference["rows"]}
    pipeline = load(folder, "pipeline.json")
    if pipeline is not None:
        bare = next(r for r in pipeline["rows"] if r.get("ratio_to_bare") == 1.0 and "windows_img_s" not in r)
        summary["pipeline"] = {"bare_img_s": bare["img_s"], "settings": {
            k: pipeline["args"].get(k) for k in ("compile", "compile_mode", "activations", "batch_size")},
            "runs": [{k: r.get(k) for k in ("stage", "source", "loader", "workers", "img_s", "ratio_to_bare")}
                     for r in pipeline["rows"] if "windows_img_s" in r]}
        shards = [r for r in summary["pipeline"]["runs"] if r["source"] == "shards"]
        if shards:
            summary["pipeline"]["best"] = max(shards, key=lambda r: r["img_s"])
    eval_rate = summary.get("evaluation", {}).get("crate_base", {}).get("img_s")
    projection = {}
    if "step" in summary and summary["step"]["model"] == "crate_base":
        projection["bare model step"] = summary["step"]["best"]["img_s"]
    if "pipeline" in summary:
        projection["imagenet preset step (augmentation included)"] = summary["pipeline"]["bare_img_s"]
        if "best" in summary["pipeline"]:
            projection["end to end from shards"] = summary["pipeline"]["best"]["img_s"]
    if projection:
        summary["projection"] = {"evaluation_img_s": eval_rate, "rows": [
            {"from": name, "img_s": rate, "hours": imagenet_hours(rate, eval_rate)}
            for name, rate in projection.items()]}
    return summary


def _fmt(value, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def tables(summary: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of each part of ``summary``."""
    out = []
    if "step" in summary:
        s = summary["step"]
        out.append((f"Training step, {s['model']}, batch {s['batch']} (goal: MFU ≥ {MFU_GOAL:.0%}, stretch "
                    f"{MFU_STRETCH:.0%})", ["who", "images/s", "MFU", "memory GiB"],
                    [[r["who"], _fmt(r["img_s"], ",.0f"), _fmt(r["mfu"], ".1%"), _fmt(r["peak_gib"], ".1f")]
                     for r in s["rows"]]))
    if "sizes" in summary:
        out.append(("Every size, its fastest variant", ["model", "variant", "images/s", "MFU", "memory GiB"],
                    [[m, r["variant"], _fmt(r["img_s"], ",.0f"), _fmt(r["mfu"], ".1%"), _fmt(r["peak_gib"], ".1f")]
                     for m, r in summary["sizes"].items()]))
    if "pipeline" in summary:
        p = summary["pipeline"]
        settings = p["settings"]
        compiled = f"compiled ({settings['compile_mode'] or 'default'})" if settings["compile"] else "eager"
        out.append((f"End to end (imagenet preset, batch {settings['batch_size']}, {compiled}, activations "
                    f"{settings['activations'] or 'fp32'}; goal ≥ {PIPELINE_GOAL} × the bare step)",
                    ["run", "images/s", "÷ bare step"],
                    [["bare preset step (data loading excluded)", _fmt(p["bare_img_s"], ",.0f"), "1.00"]]
                    + [[r["stage"], _fmt(r["img_s"], ",.0f"), _fmt(r["ratio_to_bare"], ".2f")] for r in p["runs"]]))
    if "evaluation" in summary:
        out.append(("Evaluation forward (eager)", ["model", "batch", "images/s", "peak GiB"],
                    [[m, str(r["batch"]), _fmt(r["img_s"], ",.0f"), _fmt(r["peak_gib"], ".1f")]
                     for m, r in summary["evaluation"].items()]))
    if "projection" in summary:
        p = summary["projection"]
        evaluation = ("plus evaluations at " + _fmt(p["evaluation_img_s"], ",.0f") + " images/s"
                      if p["evaluation_img_s"] else "evaluations not counted (no inference.json)")
        out.append((f"150-epoch imagenet preset on {summary.get('device', 'this machine')}, projected ({evaluation}; "
                    f"goal ≤ {HOURS_GOAL:g} h)", ["training at the rate of", "images/s", "hours"],
                    [[r["from"], _fmt(r["img_s"], ",.0f"), _fmt(r["hours"], ".1f")] for r in p["rows"]]))
    return out


def render(summary: dict[str, Any], markdown: bool = False) -> str:
    blocks = []
    for title, header, rows in tables(summary):
        if markdown:
            lines = [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(row) + " |" for row in rows]
        else:
            widths = [max(len(x) for x in column) for column in zip(header, *rows)]
            lines = [title] + ["  " + "  ".join(x.ljust(w) for x, w in zip(row, widths)) for row in [header, *rows]]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) if blocks else "no GPU results to summarise"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_report", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "gpu",
                        help="folder of the benchmarks' JSON")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables (for RESULTS.md)")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"--results: {args.results} is not a folder")
    summary = summarise(args.results)
    print(render(summary, args.markdown))
    return summary


if __name__ == "__main__":
    main()
