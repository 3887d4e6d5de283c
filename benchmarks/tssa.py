"""TSSA against MSSA: time and peak memory of one attention block against the number of tokens n.

At each n (batch 1, float32; by default d = 384, K = 6, p = 64, a CRATE-Tiny layer's block, n = 32 … 16,384),
interleaved: ToST's TSSA (`crate_nn.models.tssa`, its linear path), MSSA as crate_nn runs it (fused SDPA) and MSSA's
explicit path (its (K, n, n) maps take K·n²·4 bytes, so it runs only up to ``--explicit-max-n``). Each contender runs
the block's forward pass (``--backward``: forward and backward, a training step's share). Reported per n: the median
wall and process-CPU time (the steadier one on a shared machine) and the peak memory of one call above what was
allocated before it; then, per contender, the log-log slope of time and memory against n (least squares over
n ≥ ``--fit-from``, where fixed per-call costs no longer dominate), and the crossover n at which TSSA becomes faster
than each MSSA path (log-log interpolation between the two grid points where the time ratio crosses 1). Before
timing, TSSA's linear and explicit paths are checked equal in float64 at a small n.

    python -m benchmarks.tssa --threads 1 --out benchmarks/results/cpu/tssa_scaling.json
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from benchmarks import common
from crate_nn.models.mssa import MSSA
from crate_nn.models.tssa import TSSA

CONTENDERS = ("TSSA", "MSSA (SDPA)", "MSSA (explicit)")


def build(d: int, heads: int, seed: int) -> dict[str, nn.Module]:
    """The three blocks, each with the same d, K, p = d/K and its own default initialisation."""
    torch.manual_seed(seed)
    tssa, fused, explicit = TSSA(d, heads, d // heads), MSSA(d, heads, d // heads), MSSA(d, heads, d // heads)
    explicit.fused_attn = False
    return dict(zip(CONTENDERS, (tssa, fused, explicit)))


def call(block: nn.Module, x: torch.Tensor, backward: bool) -> Callable[[], None]:
    """One forward pass under inference mode, or forward and backward (the gradients accumulate; their size is
    fixed, so the repeats allocate alike)."""
    if backward:
        return lambda: block(x).square().mean().backward()

    def forward() -> None:
        with torch.inference_mode():
            block(x)

    return forward


@torch.no_grad()
def paths_error(d: int, heads: int, n: int, seed: int) -> float:
    """max |linear − explicit| / max |explicit| of TSSA in float64 (the timed path against the n × n one)."""
    tssa = build(d, heads, seed)["TSSA"].double()
    x = torch.randn(1, n, d, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    linear = tssa(x)
    tssa.fused_attn = False
    explicit = tssa(x)
    return float((linear - explicit).abs().max() / explicit.abs().max())


def slope(ns: list[int], values: list[float]) -> float | None:
    """Least-squares slope of log(value) against log(n); None with fewer than two points."""
    if len(ns) < 2:
        return None
    return float(np.polyfit(np.log(ns), np.log(values), 1)[0])


def crossover(ns: list[int], ours: list[float], theirs: list[float]) -> dict:
    """Where ours/theirs falls through 1 (log-log interpolation between grid points): the n beyond which ours is the
    faster at every n measured, or why there is none."""
    ratios = np.log(np.asarray(ours) / np.asarray(theirs))
    if (ratios < 0).all():
        return {"n": None, "note": f"TSSA faster at every n measured (from n = {ns[0]})"}
    if ratios[-1] >= 0:
        return {"n": None, "note": f"TSSA not faster at the largest n measured ({ns[-1]})"}
    i = int(np.flatnonzero(ratios >= 0)[-1])  # the last n where ours is not faster
    a, b = math.log(ns[i]), math.log(ns[i + 1])
    n_star = math.exp(a + (b - a) * ratios[i] / (ratios[i] - ratios[i + 1]))
    return {"n": n_star, "between": [ns[i], ns[i + 1]], "note": "interpolated"}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tssa", description=__doc__.splitlines()[0])
    common.add_common_args(parser, repeats=3, warmup=1)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--heads", type=int, default=6)
    parser.add_argument("--tokens", type=int, nargs="+", default=[2**k for k in range(5, 15)], help="the n measured")
    parser.add_argument("--explicit-max-n", type=int, default=4096, help="largest n for MSSA's explicit path")
    parser.add_argument("--fit-from", type=int, default=1024, help="smallest n in the log-log fits")
    parser.add_argument("--backward", action="store_true", help="time forward + backward instead of forward")
    args = parser.parse_args(argv)
    if args.tiny:
        args.dim, args.heads, args.tokens, args.explicit_max_n, args.fit_from = 16, 2, [16, 32, 64], 32, 16
        args.repeats, args.warmup = 1, 0
    device = common.setup(args)
    error = paths_error(args.dim, args.heads, 64, args.seed)
    blocks = {name: block.to(device) for name, block in build(args.dim, args.heads, args.seed).items()}
    rows, series = [], {name: {"n": [], "wall": [], "cpu": [], "memory": []} for name in CONTENDERS}
    for n in tqdm(sorted(args.tokens), desc="tssa", unit="n"):
        x = torch.randn(1, n, args.dim, generator=torch.Generator().manual_seed(args.seed + n)).to(device)
        names = [c for c in CONTENDERS if c != "MSSA (explicit)" or n <= args.explicit_max_n]
        calls = {name: call(blocks[name], x, args.backward) for name in names}
        timings = common.interleaved(calls, args.repeats, args.warmup, device)
        for name in names:
            memory = common.peak_memory_bytes(calls[name], device)
            timing = timings[name]
            for key, value in (("n", n), ("wall", timing.median), ("cpu", timing.cpu_median), ("memory", memory)):
                series[name][key].append(value)
            rows.append({"n": n, "block": name, "ms": 1e3 * timing.median, "cpu_ms": 1e3 * timing.cpu_median,
                         "peak_mb": memory / 2**20, "timing": timing.summary()})
    fits, crossovers = {}, {}
    for name, s in series.items():
        keep = [i for i, n in enumerate(s["n"]) if n >= args.fit_from]
        fits[name] = {f"{key}_slope": slope([s["n"][i] for i in keep], [s[key][i] for i in keep])
                      for key in ("wall", "cpu", "memory")}
    for name in CONTENDERS[1:]:
        measured = len(series[name]["n"])  # MSSA's explicit path stops early; the grid is otherwise shared
        crossovers[name] = {key: crossover(series[name]["n"], series["TSSA"][key][:measured], series[name][key])
                            for key in ("wall", "cpu")}
    notes = [f"d = {args.dim}, K = {args.heads}, p = {args.dim // args.heads}, batch 1, float32, "
             f"{'forward + backward' if args.backward else 'forward (inference mode)'}, median of {args.repeats} "
             f"interleaved repeats; TSSA linear vs explicit path, float64, n = 64: max rel. diff {error:.1e}"]
    for name, fit in fits.items():
        notes.append(f"{name}: log-log slope over n ≥ {args.fit_from}: " + ", ".join(
            f"{k.split('_')[0]} {'-' if v is None else format(v, '.2f')}" for k, v in fit.items()))
    for name, by_clock in crossovers.items():
        notes.append(f"TSSA vs {name}: crossover " + "; ".join(
            f"{clock} {c['n']:.0f} (between {c['between']})" if c["n"] else f"{clock}: {c['note']}"
            for clock, c in by_clock.items()))
    columns: list[common.Column] = [("n", "n", "d"), ("block", "block", ""), ("ms", "wall ms", ".2f"),
                                    ("cpu_ms", "CPU ms", ".2f"), ("peak_mb", "peak MiB", ".2f")]
    return common.report("tssa", device, args, rows, columns, notes,
                         extra={"fits": fits, "crossovers": crossovers, "paths_max_rel_diff": error})


if __name__ == "__main__":
    main()
