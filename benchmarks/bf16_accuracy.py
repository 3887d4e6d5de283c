"""Does bf16 autocast change what a training reaches? The digits preset trained in two precisions with the same seeds.

Each seed fixes the initialisation and the data order, so the two precisions of one seed differ only in rounding;
the runs alternate (seed 0 in each precision, then seed 1, …). Reported per precision: test top-1 (the 360
held-out digits) and validation top-1, mean ± std over the seeds and the 95% t-interval of the mean
(`verify.statistics.interval`), and the median wall time of a run. The verdict uses the audit's one rule for a
difference (verify/statistics.py): the 95% interval of the per-seed differences (second − first precision) lies
entirely above or below 0, and is inconclusive when it contains 0. Also reported: whether the second precision's
mean lies inside the first's 95% interval.

    python -m benchmarks.bf16_accuracy --out benchmarks/results/cpu/bf16_accuracy_digits.json
    python -m benchmarks.bf16_accuracy --seeds 3 --precision fp32 bf16-if-faster
    python -m benchmarks.bf16_accuracy --precision bf16 bf16+bf16-activations   # activations kept in bf16

A precision written ``PRECISION+bf16-activations`` also keeps the activations in bfloat16 between layers
(``crate-train --run.activations bf16``).

Time: ≈ 5 s per run on one core (5 seeds × 2 precisions ≈ 1 min). Expected: test top-1 ≈ 97.5 % in both, the
difference inconclusive (benchmarks/RESULTS.md, "CPU: bf16 autocast and the GEMM limit").
"""
from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from benchmarks import common
from crate_nn.engine import train
from crate_nn.engine.config import PRECISIONS
from crate_nn.engine.distributed import resolve_device
from crate_nn.tasks import get_preset
from verify.statistics import interval

METRICS = ("test_top1", "val_top1")
COLUMNS: list[common.Column] = [
    ("precision", "precision", ""), ("seeds", "seeds", "d"), ("test_top1", "test top-1 (mean ± std)", ""),
    ("test_top1_ci", "95% interval", ""), ("val_top1", "val top-1 (mean ± std)", ""),
    ("run_s", "s per run (median)", ".1f"),
]


KEPT = "+bf16-activations"


def precision_option(text: str) -> str:
    """``PRECISION`` or ``PRECISION+bf16-activations`` (argparse type)."""
    if text.removesuffix(KEPT) not in PRECISIONS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(PRECISIONS)}, optionally followed by {KEPT}, "
                                         f"got {text!r}")
    return text


def run(precision: str, seed: int, device: str, tiny: bool) -> dict:
    """Train the digits preset (no in-training measurements) in ``precision`` (`precision_option`) from ``seed``:
    its final metrics."""
    with tempfile.TemporaryDirectory(prefix="crate_bf16_accuracy_") as tmp, contextlib.redirect_stdout(io.StringIO()):
        config = get_preset("digits", seed=seed, precision=precision.removesuffix(KEPT), device=device,
                            activations="bf16" if precision.endswith(KEPT) else "fp32", progress=False,
                            measure_epochs=(), output_dir=str(Path(tmp) / "run"))
        result = train(config.smoke(4, 32) if tiny else config)  # tiny: 4 steps of 32 images
    return {"precision": precision, "seed": seed, "seconds": result.seconds,
            **{key: result.metrics[key] for key in METRICS}}


def summary(precision: str, runs: list[dict]) -> dict:
    """One table row: the precision's metrics as mean ± std and intervals, and its median run time."""
    row: dict = {"precision": precision, "seeds": len(runs),
                 "run_s": statistics.median(r["seconds"] for r in runs)}
    for key in METRICS:
        stats = interval([100 * r[key] for r in runs])
        row[key] = f"{stats.mean:.2f} ± {stats.std:.2f} %"
        row[f"{key}_stats"] = stats.as_dict()
    stats = row["test_top1_stats"]
    row["test_top1_ci"] = f"[{stats['ci_low']:.2f}, {stats['ci_high']:.2f}] %"
    return row


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bf16_accuracy", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON to this path")
    parser.add_argument("--tiny", action="store_true", help="2 seeds of 4 steps (CI smoke run)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N or auto")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--seeds", type=int, default=5, help="trainings per precision (seeds 0, 1, …)")
    parser.add_argument("--precision", nargs=2, default=["fp32", "bf16"], type=precision_option,
                        metavar=("REFERENCE", "CANDIDATE"),
                        help=f"the two precisions (default: fp32 bf16), each optionally with {KEPT}")
    args = parser.parse_args(argv)
    if args.tiny:
        args.seeds = 2
    if args.seeds < 2:
        raise ValueError(f"--seeds must be >= 2 (an interval needs two), got {args.seeds}")
    if args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    reference, candidate = args.precision
    runs = []
    for seed in range(args.seeds):
        for precision in args.precision:
            runs.append(run(precision, seed, str(device), args.tiny))
            print(f"seed {seed}, {precision}: test top-1 {100 * runs[-1]['test_top1']:.2f} %, "
                  f"{runs[-1]['seconds']:.1f} s", file=sys.stderr)
    by_precision = {p: [r for r in runs if r["precision"] == p] for p in args.precision}
    rows = [summary(p, by_precision[p]) for p in args.precision]
    differences = interval([100 * (b["test_top1"] - a["test_top1"])
                            for a, b in zip(by_precision[reference], by_precision[candidate])])
    verdict = {-1: f"{candidate} lower", 0: "inconclusive (the interval contains 0)", 1: f"{candidate} higher"}
    first = rows[0]["test_top1_stats"]
    comparison = {
        "difference_test_top1_points": differences.as_dict(),
        "verdict": verdict[differences.sign()],
        "candidate_mean_inside_reference_interval": bool(first["ci_low"] <= rows[1]["test_top1_stats"]["mean"]
                                                         <= first["ci_high"]),
    }
    notes = [
        f"test top-1 {candidate} − {reference} per seed: {differences.text(2)} points, 95% interval "
        f"[{differences.low:.2f}, {differences.high:.2f}]: {comparison['verdict']}",
        f"{candidate}'s mean inside {reference}'s 95% interval: {comparison['candidate_mean_inside_reference_interval']}",
    ]
    return common.report("bf16_accuracy", device, args, rows, COLUMNS, notes,
                         extra={"comparison": comparison, "runs": runs})


if __name__ == "__main__":
    main()
