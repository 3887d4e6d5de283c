"""Numerical precision of forward passes: bf16 autocast on GPUs, float32 on CPUs unless asked otherwise.

Training takes ``auto``, ``bf16-if-faster``, ``bf16`` or ``fp32``; ``fp16`` exists for measurements against the
authors' fp16 code (``benchmarks/``), since training in fp16 would need a gradient scaler.

* ``auto``: bf16 autocast on CUDA, float32 elsewhere (the default; nothing is measured).
* ``bf16-if-faster``: bf16 autocast where it pays. On CUDA that is always (as ``auto``). On a CPU it depends on
  the chip — with AVX512-BF16 or AMX (AMD Zen 4 and later, Intel Cooper Lake / Sapphire Rapids and later)
  bfloat16 matrix products run about twice as fast as float32 ones (an AMD EPYC Zen 4: 1.9–3.0×), without such
  instructions they are converted to float32 and are not expected to gain — so it is decided by a measurement,
  not by the CPU's name: a 512×512×512 product in bfloat16 against float32 on the current thread count
  (`cpu_bf16_faster`, ≈ 0.1 s, once per process and thread count). bf16 autocast is used when bfloat16 is at
  least `MIN_SPEEDUP` times faster, float32 otherwise; either way one line on stderr says which and why.
  The probe has the size of CRATE-T/S/B's products; a much smaller model pays autocast's casts without gaining
  on its products (the digits preset, d = 96, trains slower in bf16 on that EPYC: benchmarks/RESULTS.md), so
  keep such models in ``fp32``.
* ``bf16``: bf16 autocast on any device, measured or not (on a CPU without bf16 units it is slow but correct).
* ``fp32``: no autocast.

Autocast keeps the parameters, their gradients and the optimizer state in float32 ("master weights") and rounds
only the inputs of matrix products to bfloat16; the float64 tests and the audit (``verify/``) never ask for bf16.

Under bf16 autocast the activations between layers are float32 by default (autocast widens every LayerNorm's
input and output to float32, and the next product rounds it back). ``activations="bf16"`` (`keep_activations`)
keeps them in bfloat16 in the models that offer it (the image classifiers): fewer bytes moved and no casts, the
same float32 master weights; the tokens are then rounded to bfloat16 at every residual sum too
(tests/models/test_bf16_activations.py bounds what that does to the logits).
"""
from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
ACTIVATIONS = {"fp32": None, "bf16": torch.bfloat16}
"""``--run.activations``: the dtype the model keeps its activations in under an autocast of that dtype."""
MEASURED = "bf16-if-faster"
"""The precision decided per device: bf16 autocast on CUDA, on a CPU only where `cpu_bf16_faster`."""

# bf16 autocast adds work a float32 step does not have — rounding every weight and activation that enters a
# product to bfloat16, and mixed-dtype backward passes of the ops autocast keeps in float32 (LayerNorm) — about
# 10 % of a crate_tiny step on the AMD EPYC of benchmarks/RESULTS.md; a bf16 product only marginally faster
# than the float32 one would not pay for that. With bf16 instructions the probe runs ≥ 2× faster there; without
# them the products are emulated through float32 and gain nothing; 1.2 separates the two with room for noise.
MIN_SPEEDUP = 1.2


@dataclass(frozen=True)
class Product:
    """A matrix product ``batch`` × (m×k @ k×n); an operand is either row-major or the transpose of a row-major
    tensor (``a_transposed``, ``b_transposed``: column-major, as backward passes hand them to the kernel)."""

    m: int
    k: int
    n: int
    batch: int = 1
    a_transposed: bool = False
    b_transposed: bool = False

    @property
    def flops(self) -> int:
        """2 per multiply-add, as `torch.utils.flop_counter` counts."""
        return 2 * self.batch * self.m * self.k * self.n

    def operands(self, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Random operands of this shape and layout."""

        def operand(rows: int, cols: int, transposed: bool) -> torch.Tensor:
            x = torch.randn(self.batch, *((cols, rows) if transposed else (rows, cols)), dtype=dtype, device=device)
            x = x.transpose(-2, -1) if transposed else x
            return x if self.batch > 1 else x[0]

        return operand(self.m, self.k, self.a_transposed), operand(self.k, self.n, self.b_transposed)


PROBE = Product(512, 512, 512)
"""The product `cpu_bf16_faster` times: the size of CRATE's d×d weights, large enough to run at the kernel's rate."""


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def product_runner(product: Product, dtype: torch.dtype, device: torch.device,
                   min_seconds: float = 0.01) -> tuple[Callable[[], None], int]:
    """(a closure running ``product`` ``calls`` times in ``dtype`` on ``device``, ``calls``): ``calls`` is chosen, by
    running it (which also warms the kernel up), so that one call of the closure lasts at least ``min_seconds``."""
    a, b = product.operands(dtype, device)
    calls = 1

    def run() -> None:
        for _ in range(calls):
            torch.matmul(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    while (elapsed := _seconds(run)) < min_seconds:
        calls = max(2 * calls, int(1.2 * calls * min_seconds / max(elapsed, 1e-9)))
    return run, calls


def product_rates(product: Product, dtypes: Iterable[torch.dtype], device: torch.device, repeats: int = 5,
                  min_seconds: float = 0.01) -> dict[torch.dtype, float]:
    """FLOP/s of ``product`` in each dtype on ``device`` (the current thread count): `product_runner`'s samples,
    the dtypes in turn (A B A B …) for ``repeats`` samples, so that a drift of the machine hits them alike; the rate
    is the FLOPs over the median time of one product."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    runners = {dtype: product_runner(product, dtype, device, min_seconds) for dtype in dtypes}
    samples: dict[torch.dtype, list[float]] = {dtype: [] for dtype in runners}
    for _ in range(repeats):
        for dtype, (run, calls) in runners.items():
            samples[dtype].append(_seconds(run) / calls)
    return {dtype: product.flops / statistics.median(times) for dtype, times in samples.items()}


_CPU_BF16_FASTER: dict[int, bool] = {}  # per torch thread count: this process's decision


def cpu_bf16_faster() -> bool:
    """Whether this CPU multiplies bfloat16 matrices at least `MIN_SPEEDUP` × faster than float32 ones on the
    current thread count: `PROBE` timed by `product_rates` on the first call per thread count (one line on stderr
    says the rates and the decision), remembered after that."""
    threads = torch.get_num_threads()
    if threads not in _CPU_BF16_FASTER:
        rates = product_rates(PROBE, (torch.float32, torch.bfloat16), torch.device("cpu"))
        fp32, bf16 = rates[torch.float32] / 1e9, rates[torch.bfloat16] / 1e9
        faster = bf16 >= MIN_SPEEDUP * fp32
        choice = "bf16 autocast" if faster else f"float32 (bf16 needs ≥ {MIN_SPEEDUP}× float32's rate)"
        print(f"precision {MEASURED}: 512³ products on this CPU ({threads} thread{'s' * (threads > 1)}) run at "
              f"{bf16:.0f} GFLOP/s in bfloat16, {fp32:.0f} GFLOP/s in float32: training in {choice}",
              file=sys.stderr)
        _CPU_BF16_FASTER[threads] = faster
    return _CPU_BF16_FASTER[threads]


def settle_cpu_bf16(faster: bool) -> None:
    """Overrule this process's `cpu_bf16_faster` for the current thread count (the processes of one run agree
    on a decision, `crate_nn.engine.loop`)."""
    _CPU_BF16_FASTER[torch.get_num_threads()] = faster


def autocast_dtype(device: torch.device, precision: str) -> torch.dtype | None:
    """The autocast dtype of ``precision`` on ``device``: ``auto`` is bf16 on CUDA and none (float32) elsewhere;
    ``bf16-if-faster`` is bf16 on CUDA, and on a CPU bf16 where `cpu_bf16_faster`, else none."""
    if precision == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    if precision == MEASURED:
        return torch.bfloat16 if device.type == "cuda" or cpu_bf16_faster() else None
    if precision not in DTYPES:
        raise ValueError(f"precision: expected auto, {MEASURED} or one of {', '.join(DTYPES)}, got {precision!r}")
    return DTYPES[precision]


def autocast(device: torch.device, precision: str | torch.dtype | None):
    """``torch.autocast`` for a precision name (see `autocast_dtype`) or a dtype; nothing for float32/None."""
    dtype = autocast_dtype(device, precision) if isinstance(precision, str) else precision
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def keep_activations(model: torch.nn.Module, activations: str) -> None:
    """Ask ``model`` to keep its activations in the dtype ``activations`` names (`ACTIVATIONS`) under an autocast of
    that dtype (its ``keep_activations`` method); ``"fp32"`` asks nothing. ValueError naming the option when the
    model cannot."""
    if activations not in ACTIVATIONS:
        raise ValueError(f"activations: expected one of {', '.join(ACTIVATIONS)}, got {activations!r}")
    if ACTIVATIONS[activations] is None:
        return
    keep = getattr(model, "keep_activations", None)
    if keep is None:
        raise ValueError(f"activations: {type(model).__name__} cannot keep its activations in {activations} (the "
                         "image classifiers can); use --run.activations fp32")
    keep(ACTIVATIONS[activations])
