"""Figures of a benchmark run, drawn from the JSON the benchmarks wrote (nothing is re-measured).

    python -m benchmarks.figures                                   # benchmarks/results/gpu/*.json → *.png there
    python -m benchmarks.figures --results benchmarks/results/gpu --out-dir /tmp/figs

Draws what is present, each figure from one JSON (ratios are never taken across runs):

    train_step.png   training-step images/s per CRATE size: the authors' computation, every variant of ours timed
                     and the timm model run beside, if any; MFU on each bar (train_step_base.json, train_step_sizes.json)
    task_step.png    every preset's step: MFU and the step's peak memory                        (task_step.json)
    pipeline.png     images/s over an end-to-end crate-train run (shards, JPEG files) against the bare step
                                                                                                  (pipeline.json)
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def load(folder: Path, name: str) -> dict | None:
    path = folder / name
    return json.loads(path.read_text()) if path.is_file() else None


def save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def device_name(result: dict) -> str:
    env = result.get("environment", {})
    return env.get("gpu") or env.get("cpu_model") or env.get("device", "?")


def train_step_figure(runs: list[dict], path: Path) -> None:
    """Grouped bars per model: the authors' computation, each variant of ours and the model timed beside (each
    from its run)."""
    from benchmarks.gpu_report import step_rows

    rows = [row for run in runs for row in run["rows"]]
    groups = [step_rows(row) for row in rows]
    width = 0.8 / max(len(group) for group in groups)
    colours = {}
    fig, ax = plt.subplots(figsize=(max(7.5, 1.6 * len(rows) * max(len(g) for g in groups) / 3), 4))
    for i, group in enumerate(groups):
        for j, bar in enumerate(group):
            label = bar["who"]
            colour = colours.setdefault(label, f"C{len(colours)}")
            x = i + (j - (len(group) - 1) / 2) * width
            ax.bar(x, bar["img_s"], width, color=colour, label=label if label not in ax.get_legend_handles_labels()[1]
                   else None)
            if bar["mfu"] is not None:
                ax.text(x, bar["img_s"], f"{bar['mfu']:.0%}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(rows)), [f"{r['model']}\n(batch {r['batch']})" for r in rows])
    ax.set_ylabel("images / s (224²)")
    ax.set_title(f"Training step on {device_name(runs[0])} (MFU on the bars)", fontsize=9)
    ax.legend(fontsize=6)
    save(fig, path)


def task_step_figure(run: dict, path: Path) -> None:
    rows = run["rows"]
    names = [f"{r['preset']} ({r['batch']})" for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 0.28 * len(rows) + 1.5), sharey=True)
    left.barh(names, [100 * (r["mfu"] or 0) for r in rows], color="tab:blue")
    left.set_xlabel("MFU (%, executed FLOPs / peak bf16)")
    right.barh(names, [r["peak_mem_mb"] / 1024 for r in rows], color="tab:purple", label="step peak")
    right.barh(names, [r["state_mb"] / 1024 for r in rows], color="tab:gray", alpha=0.7, label="training state")
    right.set_xscale("log")
    right.set_xlabel("GiB")
    right.legend(fontsize=7)
    left.invert_yaxis()
    fig.suptitle(f"One optimizer step of every preset on {device_name(run)} (batch in brackets)", fontsize=9)
    save(fig, path)


def pipeline_figure(run: dict, path: Path) -> None:
    rows = {r["stage"]: r for r in run["rows"]}
    bare = next(r for r in run["rows"] if "ratio_to_bare" in r and r["ratio_to_bare"] == 1.0)
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    for stage, row in rows.items():
        if "windows_img_s" in row:
            ax.plot(range(1, len(row["windows_img_s"]) + 1), row["windows_img_s"], marker="o",
                    label=f"{stage}: {row['img_s']:,.0f} ({row['ratio_to_bare']:.2f} × bare)")
    ax.axhline(bare["img_s"], color="black", ls="--", label=f"bare step: {bare['img_s']:,.0f}")
    ax.axhline(run.get("goal_ratio", 0.9) * bare["img_s"], color="tab:red", ls=":", label="goal")
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel(f"log window ({run['args']['log_every']} steps each; the first is dropped from the median)")
    ax.set_ylabel("images / s")
    ax.set_title(f"crate-train end to end on {device_name(run)}", fontsize=9)
    ax.legend(fontsize=7)
    save(fig, path)


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.figures", description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "gpu",
                        help="folder of the benchmarks' JSON")
    parser.add_argument("--out-dir", type=Path, default=None, help="where to write the PNGs (default: --results)")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"--results: {args.results} is not a folder")
    out = args.out_dir or args.results
    out.mkdir(parents=True, exist_ok=True)
    written = []
    steps = [r for r in (load(args.results, "train_step_base.json"), load(args.results, "train_step_sizes.json"))
             if r is not None]
    if steps:
        train_step_figure(steps, out / "train_step.png")
        written.append(out / "train_step.png")
    for name, draw in (("task_step", task_step_figure), ("pipeline", pipeline_figure)):
        run = load(args.results, f"{name}.json")
        if run is not None:
            draw(run, out / f"{name}.png")
            written.append(out / f"{name}.png")
    if not written:
        parser.error(f"--results: {args.results} holds none of the benchmarks' JSON this script draws")
    for path in written:
        print(f"wrote {path}")
    return written


if __name__ == "__main__":
    main()
