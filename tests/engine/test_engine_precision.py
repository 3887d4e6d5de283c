"""Precision names → autocast dtypes; ``bf16-if-faster`` decides on a CPU by measuring, with the measured rates
monkeypatched here (no test times anything: the speed itself is measured by ``benchmarks/``)."""
import contextlib

import pytest
import torch

from crate_nn.engine import precision
from crate_nn.engine.task import PRESETS
from crate_nn.tasks import get_preset
from verify.digits import recipe

CPU = torch.device("cpu")


@pytest.fixture
def rates(monkeypatch):
    """Set the rates `precision.product_rates` reports as ``rates(fp32=..., bf16=...)`` (GFLOP/s); count calls.
    Each test starts with no decision remembered."""
    monkeypatch.setattr(precision, "_CPU_BF16_FASTER", {})
    calls = []

    def set_rates(fp32: float, bf16: float) -> list:
        def measured(product, dtypes, device, **kwargs):
            calls.append(product)
            return {torch.float32: fp32 * 1e9, torch.bfloat16: bf16 * 1e9}

        monkeypatch.setattr(precision, "product_rates", measured)
        return calls

    return set_rates


@pytest.fixture
def unmeasured(monkeypatch):
    """Any measurement fails the test: the precisions that must decide without one."""
    monkeypatch.setattr(precision, "_CPU_BF16_FASTER", {})

    def measured(*args, **kwargs):
        raise AssertionError("measured the bf16 rate")

    monkeypatch.setattr(precision, "product_rates", measured)


def test_bf16_if_faster_takes_bf16_on_a_cpu_measured_faster(rates, capsys):
    calls = rates(fp32=90.0, bf16=210.0)
    assert precision.autocast_dtype(CPU, precision.MEASURED) is torch.bfloat16
    assert precision.autocast_dtype(CPU, precision.MEASURED) is torch.bfloat16
    assert calls == [precision.PROBE]  # measured once per process and thread count
    (line,) = capsys.readouterr().err.splitlines()
    assert "210 GFLOP/s in bfloat16, 90 GFLOP/s in float32: training in bf16 autocast" in line


@pytest.mark.parametrize("bf16", [90.0, 100.0])  # as fast, and faster but below MIN_SPEEDUP = 1.2
def test_bf16_if_faster_falls_back_to_float32_with_one_line(rates, capsys, bf16):
    rates(fp32=90.0, bf16=bf16)
    assert precision.autocast_dtype(CPU, precision.MEASURED) is None
    assert isinstance(precision.autocast(CPU, precision.MEASURED), contextlib.nullcontext)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"precision {precision.MEASURED}:") and "training in float32" in line


def test_bf16_if_faster_remembers_per_thread_count(rates):
    calls = rates(fp32=90.0, bf16=210.0)
    threads = torch.get_num_threads()
    try:
        precision.cpu_bf16_faster()
        torch.set_num_threads(threads + 1)
        precision.cpu_bf16_faster()
    finally:
        torch.set_num_threads(threads)
    precision.cpu_bf16_faster()
    assert len(calls) == 2


def test_a_settled_decision_overrules_the_measurement(rates):
    rates(fp32=90.0, bf16=210.0)
    assert precision.cpu_bf16_faster()
    precision.settle_cpu_bf16(False)  # another process of the run measured bf16 slower
    assert precision.autocast_dtype(CPU, precision.MEASURED) is None


def test_precisions_that_need_no_measurement(unmeasured):
    assert precision.autocast_dtype(torch.device("cuda"), precision.MEASURED) is torch.bfloat16
    assert precision.autocast_dtype(torch.device("cuda"), "auto") is torch.bfloat16
    assert precision.autocast_dtype(CPU, "auto") is None
    assert precision.autocast_dtype(CPU, "fp32") is None
    assert precision.autocast_dtype(CPU, "bf16") is torch.bfloat16  # asked for: no measurement
    with pytest.raises(ValueError, match="precision: expected auto, bf16-if-faster or one of fp32, bf16, fp16"):
        precision.autocast_dtype(CPU, "bf17")


def test_no_preset_and_not_the_audit_pick_bf16_on_a_cpu(unmeasured):
    """bf16 on a CPU is opt-in: every preset (and the audit's digits runs, ``verify/``) trains a CPU in float32
    without measuring anything; the float64 tests run without autocast."""
    for name in PRESETS:
        assert precision.autocast_dtype(CPU, get_preset(name).run.precision) is None, name
    assert precision.autocast_dtype(CPU, recipe().run.precision) is None


def test_product_rates_measures_both_dtypes():
    product = precision.Product(8, 16, 4, batch=3, a_transposed=True)
    a, b = product.operands(torch.float32, CPU)
    assert a.shape == (3, 8, 16) and b.shape == (3, 16, 4) and a.stride()[-2:] == (1, 8)  # column-major a
    measured = precision.product_rates(product, (torch.float32, torch.bfloat16), CPU, repeats=2, min_seconds=1e-4)
    assert set(measured) == {torch.float32, torch.bfloat16} and all(rate > 0 for rate in measured.values())
    assert product.flops == 2 * 3 * 8 * 16 * 4
    with pytest.raises(ValueError, match="repeats must be >= 1, got 0"):
        precision.product_rates(product, (torch.float32,), CPU, repeats=0)
