"""Speed of crate_theory's hot functions against the naive n×n forms, and the wall time of ``verify --quick``.

For token sets Z (d, n) in float64, in one run, interleaved, each contender checked against the others first:

* coding rate R(Z) = ½ logdet(I + α·Gram), eq. (8): ``crate_theory.coding_rate`` (thin SVD, see its module
  docstring) vs the **naive** form ``½ slogdet(I_n + α ZᵀZ)`` (n×n, as the equation is usually written) vs
  the **smaller Gram** ``½ logdet(I_m + α G)`` by Cholesky, G the min(d, n)-sided Gram matrix (Sylvester);
* its gradient ∇R = α Z (I_n + αZᵀZ)⁻¹ = α (I_d + αZZᵀ)⁻¹ Z, eq. (109): ``coding_rate_grad`` vs the n×n solve
  vs the smaller-Gram Cholesky solve;
* the compression term R^c(Z | U_[K]) = Σ_k R(U_kᵀZ), eq. (13): ``compression_rate`` vs K naive n×n logdets.

Scaling: time and peak memory of each float64 reference function against the number of tokens n at
d = 64 and 384 (n = 1e3, 1e4 by default; ``--large`` adds n = 1e5), with the least-squares log-log slope against
n per function and d. Each point is called once for its peak memory (also the warm-up), then timed: the fastest of up to ``--repeats``
calls within about a second (a call slower than ``SLOW_S`` is not repeated: the memory call is its timing). Peak
memory has two readings: the NumPy arrays
allocated during the call (``tracemalloc``, which NumPy reports to) and the process's resident-set high-water mark
above its level before the call (``/proc/self/status`` VmHWM after resetting it through ``/proc/self/clear_refs``;
this also sees LAPACK's workspaces, which NumPy's linalg allocates outside tracemalloc).

With ``--verify``, ``python -m verify --quick`` is then run once as a subprocess (when the verify package has a
``__main__``); it is not part of the short default run (about 50 s on one core of the machine in RESULTS.md).

    python -m benchmarks.theory --out benchmarks/results/cpu/theory.json        # short default run (< 1 min)
    python -m benchmarks.theory --verify --out benchmarks/results/cpu/theory.json   # + verify --quick
    python -m benchmarks.theory --large --only-scaling --out benchmarks/results/cpu/theory_scaling.json  # ~15 min
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.linalg as sla
import torch
from tqdm import tqdm

import crate_theory
from benchmarks import common

EPS = 0.5  # ε; α = d/(nε²) is then O(1)–O(10) for these sizes, a regime where every form is well conditioned


def _alpha(Z: np.ndarray, eps: float) -> float:
    d, n = Z.shape
    return d / (n * eps**2)


def rate_naive(Z: np.ndarray, eps: float) -> float:
    """½ logdet(I_n + α ZᵀZ) by LU (numpy slogdet): the n×n form of eq. (8)."""
    n = Z.shape[1]
    return 0.5 * np.linalg.slogdet(np.eye(n) + _alpha(Z, eps) * (Z.T @ Z))[1]


def rate_small_gram(Z: np.ndarray, eps: float) -> float:
    """½ logdet(I_m + α G) by Cholesky, G = ZᵀZ or ZZᵀ whichever is smaller (m = min(d, n))."""
    G = Z.T @ Z if Z.shape[1] <= Z.shape[0] else Z @ Z.T
    L = sla.cholesky(np.eye(G.shape[0]) + _alpha(Z, eps) * G, lower=True)
    return float(np.log(np.diag(L)).sum())


def grad_naive(Z: np.ndarray, eps: float) -> np.ndarray:
    """α Z (I_n + αZᵀZ)⁻¹ by an n×n solve (eq. 109)."""
    a, n = _alpha(Z, eps), Z.shape[1]
    return a * np.linalg.solve(np.eye(n) + a * (Z.T @ Z), Z.T).T  # the matrix is symmetric


def grad_small_gram(Z: np.ndarray, eps: float) -> np.ndarray:
    """The same gradient from a Cholesky of the smaller Gram matrix."""
    a = _alpha(Z, eps)
    d, n = Z.shape
    if d <= n:
        return a * sla.cho_solve(sla.cho_factor(np.eye(d) + a * (Z @ Z.T)), Z)
    return a * sla.cho_solve(sla.cho_factor(np.eye(n) + a * (Z.T @ Z)), Z.T).T


def compression_naive(Z: np.ndarray, U: np.ndarray, eps: float) -> float:
    """Σ_k ½ logdet(I_n + β (U_kᵀZ)ᵀ(U_kᵀZ)), β = p/(nε²) (eq. 13), each by an n×n slogdet."""
    return sum(rate_naive(U_k.T @ Z, eps) for U_k in U)


def cases(tiny: bool) -> list[tuple[str, int, int, int]]:
    """(label, d, n, K) — CRATE token sets (n = 197 at 224²/16², p = d/K) and a long-sequence case."""
    if tiny:
        return [("tiny", 16, 12, 2)]
    return [("crate_tiny layer", 384, 197, 6), ("crate_base layer", 768, 197, 12), ("long n", 64, 2048, 4)]


def bench_case(label: str, d: int, n: int, K: int, rng: np.random.Generator, args) -> list[dict]:
    Z = rng.standard_normal((d, n)) / np.sqrt(d)
    p = d // K  # orthonormal bases U_k (d, p) from one QR, as in CRATE (p = d/K)
    U = np.linalg.qr(rng.standard_normal((d, d)))[0][:, : K * p].reshape(d, K, p).transpose(1, 0, 2)
    groups: dict[str, dict[str, Callable[[], object]]] = {
        "R (eq. 8)": {
            "crate_theory": lambda: crate_theory.coding_rate(Z, EPS),
            "naive n×n": lambda: rate_naive(Z, EPS),
            "smaller Gram": lambda: rate_small_gram(Z, EPS),
        },
        "∇R (eq. 109)": {
            "crate_theory": lambda: crate_theory.coding_rate_grad(Z, EPS),
            "naive n×n": lambda: grad_naive(Z, EPS),
            "smaller Gram": lambda: grad_small_gram(Z, EPS),
        },
        "R^c (eq. 13)": {
            "crate_theory": lambda: crate_theory.compression_rate(Z, U, EPS),
            "naive n×n": lambda: compression_naive(Z, U, EPS),
        },
    }
    rows = []
    for quantity, contenders in groups.items():
        values = {name: np.asarray(fn()) for name, fn in contenders.items()}
        reference = values["crate_theory"]
        timings = common.interleaved(contenders, args.repeats, args.warmup, torch.device("cpu"))
        naive = timings["naive n×n"].median
        for name, timing in timings.items():
            rows.append({
                "case": label, "d": d, "n": n, "K": K, "quantity": quantity, "method": name,
                "ms": 1e3 * timing.median, "speedup_vs_naive": naive / timing.median,
                "max_rel_diff_vs_crate_theory": float(np.abs(values[name] - reference).max()
                                                      / np.abs(reference).max()),
                "timing": timing.summary(),
            })
    return rows


# ----------------------------------------------------------------------------------------------------------------
# scaling against n
# ----------------------------------------------------------------------------------------------------------------
SCALING_FUNCTIONS = ("coding_rate", "coding_rate_grad", "compression_rate", "compression_rate_grad",
                     "coding_rate_hvp", "ista", "mm_step", "mssa")
HEADS = {64: 4, 384: 6}  # K per d (p = d/K = 16 and 64, CRATE's head sizes)
MSSA_MAX_N = {64: 100_000, 384: 10_000}
SLOW_S = 20.0  # a call slower than this is timed once, by the memory measurement (tracemalloc's overhead on a few
# large NumPy allocations is negligible at that length)  # n = 1e5 at d = 384 would take ~10 min of one core (O(K p n²) work)


def scaling_calls(d: int, n: int, rng: np.random.Generator) -> dict[str, Callable[[], object]]:
    """One zero-argument call per function at (d, n); Z ~ N(0, 1/d) so that α‖Z‖² is O(1) at ε = 0.5."""
    Z = rng.standard_normal((d, n)) / np.sqrt(d)
    V = rng.standard_normal((d, n))
    K = HEADS.get(d, 4)
    U = np.linalg.qr(rng.standard_normal((d, d)))[0].reshape(d, K, d // K).transpose(1, 0, 2).copy()
    D = np.linalg.qr(rng.standard_normal((d, d)))[0]
    return {
        "coding_rate": lambda: crate_theory.coding_rate(Z, EPS),
        "coding_rate_grad": lambda: crate_theory.coding_rate_grad(Z, EPS),
        "compression_rate": lambda: crate_theory.compression_rate(Z, U, EPS),
        "compression_rate_grad": lambda: crate_theory.compression_rate_grad(Z, U, EPS),
        "coding_rate_hvp": lambda: crate_theory.coding_rate_hvp(Z, V, EPS),
        "ista": lambda: crate_theory.ista(Z, D, 0.1, 0.1),
        "mm_step": lambda: crate_theory.mm_step(Z, D, EPS, 0.1),
        "mssa": lambda: crate_theory.mssa(Z, U, EPS),
    }


def _rss_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))
    except (OSError, StopIteration):
        return None


def peak_memory(fn: Callable[[], object]) -> tuple[float, float | None, float]:
    """(peak MiB of NumPy arrays allocated during ``fn()`` (tracemalloc), peak resident-set MiB above the level
    before the call, or None where ``/proc/self/clear_refs`` cannot reset the high-water mark, seconds)."""
    rss_before = _rss_kib("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # reset VmHWM to the current RSS
    except OSError:
        rss_before = None
    tracemalloc.start()
    try:
        start = time.perf_counter()
        fn()
        seconds = time.perf_counter() - start
        traced = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    hwm = _rss_kib("VmHWM")
    rss = None if rss_before is None or hwm is None else max(hwm - rss_before, 0) / 1024
    return traced / 2**20, rss, seconds


def time_once(fn: Callable[[], object], budget_s: float, max_repeats: int) -> tuple[float, int]:
    """Fastest of up to ``max_repeats`` calls, stopping once ``budget_s`` is spent (after at least one)."""
    best, spent, repeats = float("inf"), 0.0, 0
    while repeats < max_repeats and (repeats == 0 or spent < budget_s):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        best, spent, repeats = min(best, elapsed), spent + elapsed, repeats + 1
    return best, repeats


def slope(ns: list[int], values: list[float]) -> float | None:
    """Least-squares slope of log(value) against log(n); None with fewer than two points."""
    if len(ns) < 2:
        return None
    return float(np.polyfit(np.log(ns), np.log(values), 1)[0])


def bench_scaling(ds: list[int], ns: list[int], functions: list[str], args) -> tuple[list[dict], dict]:
    rows = []
    for d in ds:
        for n in ns:
            calls = scaling_calls(d, n, np.random.default_rng(args.seed))
            for name in functions:
                if name == "mssa" and n > MSSA_MAX_N.get(d, 10_000) and not args.tiny:
                    continue
                fn = calls[name]
                traced, rss, first = peak_memory(fn)  # also the warm-up
                if first > SLOW_S:  # minutes at n = 1e5: this one call (under tracemalloc) is the timing
                    seconds, repeats = first, 1
                else:
                    seconds, repeats = time_once(fn, budget_s=1.0, max_repeats=args.repeats)
                rows.append({"function": name, "d": d, "n": n, "s": seconds, "repeats": repeats,
                             "peak_traced_mib": traced, "peak_rss_mib": rss})
                print(f"  {name:22s} d={d:4d} n={n:7d}: {seconds:9.4f} s  traced {traced:9.1f} MiB  "
                      f"rss {rss if rss is None else round(rss, 1)} MiB", flush=True)
    fits = {}
    for d in ds:
        for name in functions:
            pts = sorted((r["n"], r) for r in rows if r["function"] == name and r["d"] == d)
            if len(pts) < 2:
                continue
            ns_f = [n for n, _ in pts]
            fits[f"{name} d={d}"] = {
                "n": ns_f,
                "time_slope": slope(ns_f, [r["s"] for _, r in pts]),
                "traced_slope": slope(ns_f, [max(r["peak_traced_mib"], 1e-6) for _, r in pts]),
            }
    return rows, fits


def compare_table(before: list[dict], after: list[dict]) -> str:
    """Markdown: per function and d, seconds and traced MiB before → after at each n, and the fitted time slopes."""
    def index(rows):
        return {(r["function"], r["d"], r["n"]): r for r in rows}

    b, a = index(before), index(after)
    ns = sorted({key[2] for key in a})  # the slopes use every point of each run
    head = "| function | d | " + " | ".join(f"n = {n:.0e}: s, MiB" for n in ns) + " | time slope |"
    lines = [head, "|" + "---|" * (3 + len(ns))]
    for name in SCALING_FUNCTIONS:
        for d in sorted({key[1] for key in a if key[0] == name}):
            cells = []
            for n in ns:
                old, new = b.get((name, d, n)), a.get((name, d, n))
                if new is None:
                    cells.append("–")
                    continue
                t_old = f"{old['s']:.3g}" if old else "–"
                m_old = f"{old['peak_traced_mib']:.3g}" if old else "–"
                cells.append(f"{t_old} → **{new['s']:.3g}**; {m_old} → **{new['peak_traced_mib']:.3g}**")
            slopes = []
            for rows in (b, a):
                pts = sorted((n, r["s"]) for (f, dd, n), r in rows.items() if f == name and dd == d)
                fit = slope([n for n, _ in pts], [t for _, t in pts])
                slopes.append("–" if fit is None else f"{fit:.2f}")
            lines.append(f"| {name} | {d} | " + " | ".join(cells) + f" | {slopes[0]} → **{slopes[1]}** |")
    return "\n".join(lines)


def time_verify_quick(timeout: float) -> dict:
    """Wall time and exit status of ``python -m verify --quick`` in a subprocess (report in a temp dir)."""
    main_module = Path(__file__).resolve().parents[1] / "verify" / "__main__.py"
    if not main_module.is_file():
        return {"status": "absent: verify/__main__.py does not exist yet"}
    with tempfile.TemporaryDirectory(prefix="crate_verify_bench_") as tmp:
        command = [sys.executable, "-m", "verify", "--quick", "--no-progress", "--output-dir", tmp]
        start = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  cwd=main_module.parents[1])
        except subprocess.TimeoutExpired:
            return {"status": f"timed out after {timeout:.0f} s", "command": " ".join(command[1:])}
    return {"status": "ran", "returncode": done.returncode, "wall_s": time.perf_counter() - start,
            "command": " ".join(["python"] + command[1:3])}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.theory", description=__doc__.splitlines()[0])
    common.add_common_args(parser, repeats=7, warmup=1)
    parser.add_argument("--verify", action="store_true",
                        help="also time python -m verify --quick (20 s warm, 2-3 min cold: not in the short default run)")
    parser.add_argument("--no-verify", action="store_true", help="do not time python -m verify --quick (the default)")
    parser.add_argument("--verify-timeout", type=float, default=600.0)
    parser.add_argument("--large", action="store_true", help="add the n = 1e5 points to the scaling run (minutes)")
    parser.add_argument("--only-scaling", action="store_true", help="skip the contender comparison")
    parser.add_argument("--functions", nargs="+", default=list(SCALING_FUNCTIONS), choices=SCALING_FUNCTIONS,
                        help="functions of the scaling run")
    parser.add_argument("--ns", nargs="+", type=int, default=None, help="token counts of the scaling run")
    parser.add_argument("--ds", nargs="+", type=int, default=[64, 384], help="dimensions of the scaling run")
    parser.add_argument("--compare", type=Path, nargs="+", default=None,
                        help="print only a before → after markdown table of these scaling JSONs (the last is after)")
    args = parser.parse_args(argv)
    if args.compare:
        runs = [json.loads(path.read_text())["scaling"] for path in args.compare]
        table = compare_table([row for run in runs[:-1] for row in run], runs[-1])
        print(table)
        return {"table": table}
    if args.tiny:
        args.repeats, args.warmup, args.no_verify = 2, 1, True
    common.setup(args)
    rng = np.random.default_rng(args.seed)
    rows = []
    if not args.only_scaling:
        for label, d, n, K in tqdm(cases(args.tiny), desc="theory", unit="case"):
            rows += bench_case(label, d, n, K, rng, args)
    if args.tiny:
        ds, ns = [8], [16, 32]
    else:
        ds, ns = args.ds, args.ns or ([1_000, 10_000, 100_000] if args.large else [1_000, 10_000])
    scaling, fits = bench_scaling(ds, ns, args.functions, args)
    if args.verify and not args.no_verify:
        verify = time_verify_quick(args.verify_timeout)
    else:
        verify = {"status": "skipped (--tiny, --no-verify or no --verify)"}
    notes = [
        f"float64 NumPy/SciPy, ε = {EPS}; median of {args.repeats} interleaved repeats; "
        "max_rel_diff = max |value − crate_theory's| / max |crate_theory's|",
        "verify --quick: " + ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in verify.items()),
    ]
    columns: list[common.Column] = [
        ("case", "case", ""), ("d", "d", "d"), ("n", "n", "d"), ("quantity", "quantity", ""), ("method", "method", ""),
        ("ms", "ms", ".3f"), ("speedup_vs_naive", "× vs naive", ".2f"),
        ("max_rel_diff_vs_crate_theory", "rel. diff", ".1e"),
    ]
    notes += [f"scaling: {key}: time slope {fit['time_slope']:.2f}, traced-memory slope {fit['traced_slope']:.2f} "
              f"over n = {fit['n']}" for key, fit in fits.items()]
    return common.report("theory", torch.device("cpu"), args, rows, columns, notes,
                         extra={"verify_quick": verify, "numpy": np.__version__, "scaling": scaling,
                                "scaling_fits": fits})


if __name__ == "__main__":
    main()
