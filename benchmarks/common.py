"""What every benchmark shares: devices, paired interleaved timing, peak memory, tables and JSON.

Protocol (the same for every script): each contender is warmed up, then the contenders are run in turn,
``A B A B ...``, ``repeats`` times, so that a slow drift of the machine (other processes, clock changes) hits
all of them alike; a contender's figure is the **median** of its repeats. Numbers from different runs are
never compared: a ratio is always taken between contenders of the same run.
"""
from __future__ import annotations

import argparse
import collections
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from crate_nn.engine.distributed import resolve_device
from crate_nn.engine.precision import Product

# Peak dense (no sparsity) bf16 tensor-core throughput, in FLOP/s, from the vendor data sheets.
# Matched against torch.cuda.get_device_name() in order (first substring that matches wins).
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.4e12),
    ("H100 PCIe", 756.0e12),
    ("H100 NVL", 835.0e12),
    ("H100", 989.4e12),  # SXM5
    ("A100", 312.0e12),  # SXM4 and PCIe, 40 GB and 80 GB
)


def add_common_args(parser: argparse.ArgumentParser, repeats: int = 7, warmup: int = 2) -> None:
    """The options every benchmark takes: output path, tiny mode, repeats, warm-up, device, threads, seed."""
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON to this path")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes and 1-2 repeats (CI smoke run)")
    parser.add_argument("--repeats", type=int, default=repeats, help="timed repeats per contender (median)")
    parser.add_argument("--warmup", type=int, default=warmup, help="untimed runs per contender first")
    parser.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (cuda when available)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--seed", type=int, default=0)


def setup(args: argparse.Namespace) -> torch.device:
    """Apply ``--threads``/``--seed``, validate repeats, and return the resolved device."""
    if args.repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {args.repeats}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {args.warmup}")
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    return resolve_device(args.device)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_bf16_flops(device: torch.device | str) -> float | None:
    """Peak dense bf16 FLOP/s of a CUDA device, or of a GPU named like ``"H100"``; None for a CPU or an unknown GPU."""
    if isinstance(device, torch.device):
        if device.type != "cuda":
            return None
        device = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_FLOPS if key in device), None)


# ----------------------------------------------------------------------------------------------- timing
@dataclass
class Timing:
    """Wall and process-CPU times (seconds) of one contender's repeats; the wall ``median`` is the figure reported.

    On a CPU shared with other users, process CPU time (``time.process_time``: all threads of this process)
    leaves out the time this process waited for a core, so its ratios are the steadier ones there; with more
    than one thread it also counts OpenMP spin-waiting.
    """

    seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def cpu_median(self) -> float:
        return statistics.median(self.cpu_seconds)

    def summary(self) -> dict[str, Any]:
        return {
            "median_s": self.median,
            "min_s": min(self.seconds),
            "max_s": max(self.seconds),
            "cpu_median_s": self.cpu_median,
            "repeats": len(self.seconds),
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
        }


def paired_ratio(slow: Timing, fast: Timing) -> float:
    """Median over repeats of slow/fast wall time, each ratio taken between adjacent (A B) runs."""
    return statistics.median(s / f for s, f in zip(slow.seconds, fast.seconds))


def time_call(fn: Callable[[], Any], device: torch.device) -> tuple[float, float]:
    """(wall, process CPU) seconds of one call of ``fn``, with the device synchronised before and after."""
    synchronize(device)
    cpu, start = time.process_time(), time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start, time.process_time() - cpu


def interleaved(
    contenders: dict[str, Callable[[], Any]], repeats: int, warmup: int, device: torch.device
) -> dict[str, Timing]:
    """Time the contenders in turn (A B A B ...) after ``warmup`` untimed calls of each."""
    if not contenders:
        raise ValueError("contenders must name at least one function to time")
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    timings = {name: Timing() for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            wall, cpu = time_call(fn, device)
            timings[name].seconds.append(wall)
            timings[name].cpu_seconds.append(cpu)
    return timings


# ----------------------------------------------------------------------------------------------- memory
def allocated_bytes(device: torch.device) -> int | None:
    """Bytes the caching allocator holds allocated on a CUDA device now (after synchronising); None on a CPU."""
    if device.type != "cuda":
        return None
    synchronize(device)
    return torch.cuda.memory_allocated(device)


def peak_memory_bytes(fn: Callable[[], Any], device: torch.device) -> int:
    """Peak bytes allocated by one call of ``fn`` above what was allocated before it.

    CUDA: the caching allocator's ``max_memory_allocated``. CPU: the allocation and free events the PyTorch
    profiler records (``profile_memory=True``), summed in time order; the maximum of that running sum is the
    same quantity. Call it after a warm-up, so that one-off state (optimizer moments) already exists.
    """
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    running = peak = 0
    for event in events:
        if event.device_type() == torch.autograd.DeviceType.CPU:
            running += event.nbytes()
            peak = max(peak, running)
    return peak


class ProductCounter(FlopCounterMode):
    """`torch.utils.flop_counter.FlopCounterMode` (FLOPs of matrix products, 2 per multiply-add; elementwise work
    left out, as for MFU) that also counts the CPU's fused attention kernel (flop_counter knows only the CUDA ones)
    and records every product it counts in ``products``: (module, pass, `Product`) → calls.

    The module is the innermost one that ran the product, without the model's class and with layer indices as
    ``*`` (``encoder.layers.*.mssa.qkv``); the pass is ``forward`` or ``backward``. A product's shape and layout
    (row-major or transposed operands) are those the kernel received; attention (SDPA) is recorded as the batched
    products flop_counter counts for it (2 forward, 5 backward: the scores are recomputed).
    """

    def __init__(self) -> None:
        aten = torch.ops.aten
        mapping = {aten.mm: self._matmul(0), aten.addmm: self._matmul(1), aten.bmm: self._matmul(0),
                   aten.baddbmm: self._matmul(1)}
        for op in ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
                   "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"):
            mapping[getattr(aten, op)] = self._attention(_sdpa_forward_products)
            mapping[getattr(aten, f"{op}_backward")] = self._attention(_sdpa_backward_products)
        for formula in mapping.values():
            formula._get_raw = True  # called with the tensors (their layouts), not only their shapes
        super().__init__(display=False, custom_mapping=mapping)
        self.products: collections.Counter[tuple[str, str, Product]] = collections.Counter()

    def _record(self, products: list[Product]) -> int:
        inner = max(self.mod_tracker.parents, key=lambda name: (name.count("."), name != "Global"))
        module = ".".join("*" if part.isdigit() else part for part in inner.split(".")[1:]) or inner
        for product in products:
            self.products[module, "backward" if self.mod_tracker.is_bw else "forward", product] += 1
        return sum(product.flops for product in products)

    def _matmul(self, first: int) -> Callable[..., int]:
        """The formula of mm/bmm (``first`` = 0) or addmm/baddbmm (1: the added tensor comes first)."""

        def formula(*args, out_val=None, **kwargs) -> int:
            a, b = args[first], args[first + 1]
            batch = a.shape[0] if a.dim() == 3 else 1
            return self._record([Product(a.shape[-2], a.shape[-1], b.shape[-1], batch, _transposed(a),
                                         _transposed(b))])

        return formula

    def _attention(self, products: Callable[..., list[Product]]) -> Callable[..., int]:
        def formula(*args, out_val=None, **kwargs) -> int:
            return self._record(products(*args))

        return formula


def _transposed(x: torch.Tensor) -> bool:
    """Whether a matrix operand is stored transposed (not row-major), as a kernel sees it."""
    return x.stride(-1) != 1 and x.shape[-1] != 1


def _sdpa_forward_products(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args) -> list[Product]:
    """Scores q kᵀ and output P v, as flop_counter's ``sdpa_flop_count`` (q, k, v: (B, K, n, p))."""
    (b, h, n, p), s, pv = query.shape, key.shape[-2], value.shape[-1]
    return [Product(n, p, s, b * h, b_transposed=True), Product(n, s, pv, b * h)]


def _sdpa_backward_products(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            *args) -> list[Product]:
    """flop_counter's ``sdpa_backward_flop_count``: scores recomputed, dO vᵀ, Pᵀ dO, dS k, qᵀ dS."""
    (b, h, n, p), s, pv = query.shape, key.shape[-2], value.shape[-1]
    return [Product(n, p, s, b * h, b_transposed=True), Product(n, pv, s, b * h, b_transposed=True),
            Product(s, n, pv, b * h, a_transposed=True), Product(n, s, p, b * h),
            Product(p, n, s, b * h, a_transposed=True)]


def counted_flops(fn: Callable[[], Any]) -> int:
    """FLOPs (2 per multiply-add) of the matrix products one call of ``fn`` runs, as `ProductCounter` counts them:
    linear layers, matmuls, attention (SDPA) and convolutions; elementwise work is left out, as for MFU."""
    with ProductCounter() as counter:
        fn()
    return counter.get_total_flops()


def profile_table(fn: Callable[[], Any], device: torch.device, rows: int = 15) -> str:
    """torch.profiler's table of the ops of one call of ``fn``, by self device time (self CPU time on a CPU)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        fn()
        synchronize(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return prof.key_averages().table(sort_by=key, row_limit=rows, max_name_column_width=48)


# ----------------------------------------------------------------------------------------------- output
Column = tuple[str, str, str]  # (key in the row, header, format spec)


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    """A Markdown table (pasteable into RESULTS.md); a missing or None value prints as ``-``."""

    def cell(row: dict[str, Any], key: str, spec: str) -> str:
        value = row.get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        return format(value, spec)

    lines = ["| " + " | ".join(header for _, header, _ in columns) + " |"]
    lines.append("|" + "|".join("---" for _ in columns) + "|")
    lines += ["| " + " | ".join(cell(row, key, spec) for key, _, spec in columns) + " |" for row in rows]
    return "\n".join(lines)


def environment(device: torch.device) -> dict[str, Any]:
    """Versions, hardware and load, recorded with every result (timings mean little without them)."""
    env: dict[str, Any] = {
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": sys.argv,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "device": str(device),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "loadavg_1_5_15": list(os.getloadavg()),
        "git_commit": git_commit(),
    }
    env["cpu_model"] = cpu_model()
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["gpu_count"] = torch.cuda.device_count()
        env["gpu_capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        env["gpu_memory_gib"] = torch.cuda.get_device_properties(device).total_memory / 2**30
        env["cuda"] = torch.version.cuda
        env["cudnn"] = torch.backends.cudnn.version()
        env["driver"] = nvidia_driver()
        env["peak_bf16_flops"] = peak_bf16_flops(device)
    return env


def cpu_model() -> str | None:
    """The CPU's model name (``/proc/cpuinfo``), e.g. to tell Intel from AMD figures; None where unreadable."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def nvidia_driver() -> str | None:
    """The NVIDIA driver version from ``nvidia-smi``; None where it cannot be run."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def git_commit() -> str | None:
    """The repository's commit (short hash); None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def report(
    benchmark: str,
    device: torch.device,
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    columns: Sequence[Column],
    notes: Iterable[str] = (),
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Print the table (and notes) and write ``{benchmark, environment, args, rows, notes, ...}`` as JSON."""
    notes = list(notes)
    print(format_table(rows, columns))
    for note in notes:
        print(note)
    payload = {
        "benchmark": benchmark,
        "environment": environment(device),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "rows": rows,
        "notes": notes,
        **(extra or {}),
    }
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.out}")
    return payload
