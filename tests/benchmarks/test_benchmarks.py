"""Smoke runs of every benchmark at its --tiny size (they must keep working), plus the harness's own pieces.

No timing is asserted anywhere: speed is measured by the scripts, never by tests. What is asserted is that each
script runs, writes valid JSON with the fields RESULTS.md is built from, and that the checks the benchmarks
rely on (float64 agreement of the pair, peak memory, A B A B order) can fail.
"""
from __future__ import annotations

import json

import pytest
import torch

import crate_nn
from benchmarks import (
    bf16_accuracy,
    common,
    data,
    fast_paths,
    figures,
    gpu_check,
    inference,
    limit,
    load,
    pipeline,
    presets,
    task_step,
    theory,
    train_step,
    tssa,
)
from benchmarks.models import LOGIT_RTOL, TINY_OVERRIDES, build_pair, check_pair, forward_flops
from crate_nn import model_config


def run_tiny(module, tmp_path, *extra: str) -> dict:
    out = tmp_path / "result.json"
    returned = module.main(["--tiny", "--device", "cpu", "--out", str(out), *extra])
    written = json.loads(out.read_text())
    assert written["rows"] == json.loads(json.dumps(returned["rows"]))
    assert written["environment"]["torch"] == torch.__version__
    return written


@pytest.mark.parametrize("module", [train_step, inference], ids=["train_step", "inference"])
def test_paired_benchmark_writes_results(module, tmp_path):
    result = run_tiny(module, tmp_path, "--profile")
    assert result["benchmark"] == module.__name__.rsplit(".", 1)[1]
    (row,) = result["rows"]
    assert row["model"] == "crate_tiny" and row["batch"] == 4
    assert row["float64_logit_rel_error"] <= LOGIT_RTOL
    for key in ("baseline", "ours"):
        assert row[f"{key}_img_s"] > 0 and row[f"{key}_peak_mem_mb"] > 0
        assert row[f"{key}_timing"]["repeats"] == 1
        assert row[f"{key}_mfu"] is None  # CPU: no MFU
    assert row["ratio"] == pytest.approx(row["ours_img_s"] / row["baseline_img_s"])
    assert row["ratio_paired"] > 0 and row["ratio_cpu_time"] > 0
    assert set(row["profile"]) == {"baseline", "ours"} and "aten::" in row["profile"]["ours"]
    assert "F_fwd" in result["flops_formula"]


def test_train_step_times_ours_in_several_precisions(tmp_path):
    result = run_tiny(train_step, tmp_path, "--precision", "fp32", "bf16")
    (row,) = result["rows"]
    assert (row["ours_precision"], row["baseline_precision"]) == ("fp32", "fp32")
    assert row["ours_bf16_img_s"] > 0 and row["ours_bf16_timing"]["repeats"] == 1
    assert row["ours_bf16_ratio"] == pytest.approx(row["ours_bf16_img_s"] / row["baseline_img_s"])
    assert row["ours_bf16_ratio_paired"] > 0 and row["ours_bf16_ratio_cpu_time"] > 0
    with pytest.raises(ValueError, match="--precision: auto fp32 names a precision twice on cpu"):
        train_step.main(["--tiny", "--device", "cpu", "--precision", "auto", "fp32"])


def test_load_benchmark_writes_results(tmp_path):
    result = run_tiny(load, tmp_path)
    (row,) = result["rows"]
    assert row["model"] == "crate_tiny" and row["meta_ms"] > 0 and row["build_ms"] > 0 and row["speedup"] > 0


def test_limit_benchmark_writes_results(tmp_path):
    result = run_tiny(limit, tmp_path)
    steps = {row["precision"]: row for row in result["rows"]}
    assert set(steps) == {"fp32", "bf16"}
    for row in steps.values():
        assert row["model"] == "crate_tiny" and row["batch"] == 4 and row["limit_gflop_s"] > 0
        assert row["fraction"] == pytest.approx(row["achieved_gflop_s"] / row["limit_gflop_s"])
    products = result["products"]
    modules = {row["module"] for row in products}
    assert {"patch_embed.proj", "encoder.layers.*.mssa.qkv", "encoder.layers.*.mssa", "encoder.layers.*.ista",
            "head.fc"} <= modules
    # the products cover the counted FLOPs: shares sum to 1 up to float rounding of the per-row divisions
    assert sum(row["share"] for row in products) == pytest.approx(1.0, rel=1e-9)
    assert sum(row["gflop"] for row in products) == pytest.approx(steps["fp32"]["step_gflop"], rel=1e-9)
    assert all(row["fp32_gflop_s"] > 0 and row["bf16_gflop_s"] > 0 for row in products)


def test_bf16_accuracy_benchmark_writes_results(tmp_path):
    result = run_tiny(bf16_accuracy, tmp_path)
    assert [(row["precision"], row["seeds"]) for row in result["rows"]] == [("fp32", 2), ("bf16", 2)]
    assert [(run["precision"], run["seed"]) for run in result["runs"]] == [
        ("fp32", 0), ("bf16", 0), ("fp32", 1), ("bf16", 1)]
    assert all(0 <= run["test_top1"] <= 1 for run in result["runs"])
    difference = result["comparison"]["difference_test_top1_points"]
    assert difference["n"] == 2 and difference["ci_low"] <= difference["mean"] <= difference["ci_high"]
    assert result["comparison"]["verdict"].split()[0] in ("bf16", "inconclusive")


def test_product_counter_records_the_counted_products():
    """Every FLOP flop_counter counts is in a recorded product: the same total as torch's own counter on the
    explicit attention path, and on SDPA the products torch's SDPA formulas count (which its counter skips on a
    CPU)."""
    from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

    torch.manual_seed(0)
    model = crate_nn.create_model("crate_tiny", **TINY_OVERRIDES)
    images = torch.randn(3, 3, 32, 32)

    def step():
        model(images).logsumexp(-1).sum().backward()

    with common.ProductCounter() as fused:
        step()
    for layer in model.encoder.layers:
        layer.attn.fused_attn = False
    with common.ProductCounter() as explicit, FlopCounterMode(display=False) as reference:
        step()
    assert explicit.get_total_flops() == reference.get_total_flops()
    assert sum(p.flops * calls for (*_, p), calls in explicit.products.items()) == reference.get_total_flops()
    q = (3, 2, 17, 16)  # (batch, heads, tokens, head_dim) of the tiny model
    sdpa = len(model.encoder.layers) * (sdpa_flop_count(q, q, q) + sdpa_backward_flop_count(q, q, q, q))
    attention = sum(p.flops * calls for (module, _, p), calls in fused.products.items() if module.endswith("mssa"))
    assert attention == sdpa
    assert sum(p.flops * calls for (*_, p), calls in fused.products.items()) == fused.get_total_flops()
    assert ("encoder.layers.*.mssa.qkv", "backward") in {(module, direction) for module, direction, _ in fused.products}


def test_data_benchmark_writes_results(tmp_path):
    result = run_tiny(data, tmp_path)
    pipelines = {(row["pipeline"], row["workers"]) for row in result["rows"]}
    for workers in (0, 1):  # the --tiny worker counts
        for name in ("files-decode", "files-augment", "shard-read", "shard-augment"):
            assert (data.PIPELINES[name], workers) in pipelines
    assert (data.PIPELINES["decode_draft"], None) in pipelines
    assert (data.PIPELINES["pack-pillow"], 1) in pipelines  # the largest --tiny worker count
    assert all(row["img_s"] > 0 and row["img_s_per_core"] > 0 for row in result["rows"])
    assert result["h100_crate_base_40pct_mfu_img_s"] > 0 and result["best_jpeg_decode_img_s_per_core"] > 0


def test_task_step_benchmark_writes_results(tmp_path):
    result = run_tiny(task_step, tmp_path)
    (row,) = result["rows"]
    assert (row["preset"], row["unit"], row["batch"]) == ("digits", "images", 8)
    assert row["units_per_s"] > 0 and row["step_gflops"] > 0 and row["mfu"] is None  # CPU: no MFU
    assert row["state_mb"] > 0 and row["parameters"] > 0


def test_pipeline_benchmark_compares_the_engine_with_the_bare_step(tmp_path):
    result = run_tiny(pipeline, tmp_path)
    stages = {row["stage"]: row for row in result["rows"]}
    assert {"pack, Pillow", "bare training step (data loading excluded)", "crate-train from crate-pack shards",
            "crate-train from JPEG files (Pillow in workers)"} <= set(stages)
    for label in ("crate-train from crate-pack shards", "crate-train from JPEG files (Pillow in workers)"):
        row = stages[label]
        assert len(row["windows_img_s"]) == 2 and row["img_s"] > 0  # 4 steps, windows of 2
        assert row["ratio_to_bare"] == pytest.approx(row["img_s"] / stages[
            "bare training step (data loading excluded)"]["img_s"])


def test_gpu_check_skips_the_benchmarks_without_cuda(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this checks the CPU behaviour")
    assert gpu_check.main(["--no-install", "--skip", "tests", "--out-dir", str(tmp_path / "gpu")]) == 0
    out = capsys.readouterr().out
    assert "no CUDA device" in out and not (tmp_path / "gpu").exists()
    assert gpu_check.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert "pytest -m gpu tests/gpu" in listed and "--beside vit_base_patch16_224" in listed
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "nonsense"])


def test_gpu_check_installs_only_missing_wheels(tmp_path):
    (tmp_path / "torch-9.9.9-py3-none-any.whl").write_bytes(b"")  # installed under another version: kept
    (tmp_path / "no_such_dist_xyz-1.0-py3-none-any.whl").write_bytes(b"")
    assert [w.name for w in gpu_check.missing_wheels(tmp_path)] == ["no_such_dist_xyz-1.0-py3-none-any.whl"]


def test_theory_benchmark_writes_results(tmp_path):
    result = run_tiny(theory, tmp_path)
    methods = {(row["quantity"], row["method"]) for row in result["rows"]}
    assert ("R (eq. 8)", "smaller Gram") in methods and ("R^c (eq. 13)", "naive n×n") in methods
    for row in result["rows"]:
        assert row["ms"] > 0
        # float64: the three forms are the same number up to rounding (1e-16 per operation, ~100 operations)
        assert row["max_rel_diff_vs_crate_theory"] < 1e-12
    assert result["verify_quick"]["status"].startswith("skipped")


def test_presets_benchmark_writes_results(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = run_tiny(presets, tmp_path)
    digits, cold, warm = result["rows"]
    assert (digits["preset"], digits["steps"], digits["planned_steps"], digits["projected"]) == (
        "digits", presets.TINY_STEPS, 600, True)
    one, steps = digits["one_step"]["wall_s"], presets.TINY_STEPS
    assert digits["wall_s"] == pytest.approx(one + (digits["measured_wall_s"] - one) * 599 / (steps - 1))
    assert (cold["preset"], warm["preset"]) == ("audit (cold cache)", "audit (warm cache)")
    for row in (cold, warm, digits["one_step"], *digits["one_step"]["runs"]):  # measured (a projection may be anything)
        assert row["wall_s"] > 0 and row["cpu_s"] > 0 and row["load_1min_before"] >= 0
    assert result["environment"]["cpu_count"] > 0 and len(result["load_start_1_5_15"]) == 3
    assert "projected from runs of 1 and N steps" in result["notes"][1]
    with pytest.raises(SystemExit, match="--max-steps expects NAME=N"):
        presets.main(["--max-steps", "imagenet=10"])
    table = presets.readme_table(result).splitlines()
    assert table[2].startswith(f"| `crate-train --preset digits` | 600 (projected from {presets.TINY_STEPS}) | ")
    assert table[3].startswith("| `python -m verify`, cold cache | – | ") and "CPUs, torch" in table[-1]
    again = {**result, "rows": [{**digits, "wall_s": 1.0}]}  # a later file's row replaces the earlier one's
    assert presets.readme_table(result, again).splitlines()[2].split(" | ")[2] == "1 s"


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "forward-backward"])
def test_tssa_benchmark_writes_results(tmp_path, backward):
    result = run_tiny(tssa, tmp_path, *(["--backward"] if backward else []))
    measured = {(row["n"], row["block"]) for row in result["rows"]}
    assert measured == {(n, b) for n in (16, 32, 64) for b in tssa.CONTENDERS if b != "MSSA (explicit)" or n <= 32}
    assert all(row["ms"] > 0 and row["peak_mb"] > 0 for row in result["rows"])
    assert result["paths_max_rel_diff"] < 1e-12  # float64: the same sums in another order
    assert set(result["fits"]) == set(tssa.CONTENDERS) and set(result["crossovers"]) == set(tssa.CONTENDERS[1:])


def test_crossover_and_slope():
    """The interpolated crossover lies between the grid points where the ratio falls through 1, at the geometric
    position log-linear interpolation gives; a power law's slope is its exponent."""
    ns = [100, 200, 400, 800]
    cross = tssa.crossover(ns, [4.0, 4.0, 4.0, 4.0], [1.0, 2.0, 8.0, 32.0])
    assert cross["between"] == [200, 400] and cross["n"] == pytest.approx(200 * 2**0.5)
    assert tssa.crossover(ns, [1.0] * 4, [2.0] * 4)["n"] is None
    assert "not faster" in tssa.crossover(ns, [2.0] * 4, [1.0] * 4)["note"]
    assert tssa.slope(ns, [3 * n**1.5 for n in ns]) == pytest.approx(1.5)


def test_fast_paths_benchmark_writes_results(tmp_path):
    result = run_tiny(fast_paths, tmp_path)
    variants = {row["variant"]: row for row in result["rows"]}
    assert set(variants) == {"baseline", "ours", fast_paths.TWO_PRODUCTS}
    assert variants["ours"]["float64_logit_rel_error"] <= LOGIT_RTOL
    assert variants[fast_paths.TWO_PRODUCTS]["float64_logit_rel_error"] <= LOGIT_RTOL
    assert all(row["img_s"] > 0 for row in result["rows"])


def test_two_product_ista_gradients_match_the_folded_step():
    # The fold is an algebraic identity, so in float64 the loss and every parameter gradient agree with the
    # two-product step up to rounding (~1e-16 per operation; 1e-10 leaves room for 2 layers' growth). 3 images
    # of 17 tokens > d = 32: crate_nn folds.
    torch.manual_seed(0)
    ours = crate_nn.create_model("crate_tiny", **TINY_OVERRIDES).double()
    unfolded = fast_paths.with_two_product_ista(ours)
    images = torch.randn(3, 3, 32, 32, dtype=torch.float64)
    grads = []
    for model in (ours, unfolded):
        model.zero_grad()
        model(images).square().sum().backward()
        grads.append({name: p.grad for name, p in model.named_parameters()})
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, rtol=1e-10, atol=1e-10, msg=name)


def test_pair_check_detects_a_different_computation():
    torch.manual_seed(0)
    ours, baseline = build_pair("crate_tiny", torch.device("cpu"), **TINY_OVERRIDES)
    images = torch.randn(2, 3, 32, 32)
    assert check_pair(ours, baseline, images) <= LOGIT_RTOL
    with torch.no_grad():  # one dictionary entry changed: the computations now differ
        baseline.transformer.layers[1][1].fn.weight[0, 0] += 0.5
    with pytest.raises(AssertionError, match="disagree"):
        check_pair(ours, baseline, images)


def test_forward_flops_counts_the_published_base_size():
    # CRATE-Base at 224²: n = 197, d = Kp = 768, L = 12; hand-evaluated from FLOPS_FORMULA.
    cfg = model_config("crate_base")
    per_layer = 4 * 197 * 768 * 768 + 4 * 197**2 * 768 + 4 * 197 * 768**2
    assert forward_flops(cfg) == 2 * 196 * 768 * 768 + 12 * per_layer + 2 * 768 * 1000


def test_interleaved_runs_contenders_in_turn():
    calls: list[str] = []
    timings = common.interleaved(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, repeats=3, warmup=1,
        device=torch.device("cpu"),
    )
    assert calls == ["a", "b"] + ["a", "b"] * 3
    assert all(len(t.seconds) == len(t.cpu_seconds) == 3 for t in timings.values())


def test_peak_memory_sees_a_temporary_allocation():
    size = 8 * 2**20

    def allocate_and_free():
        buffer = torch.ones(size // 4)  # float32: size bytes, freed on return
        return buffer.sum()

    peak = common.peak_memory_bytes(allocate_and_free, torch.device("cpu"))
    assert size <= peak < 2 * size


def test_figures_are_drawn_from_the_committed_gpu_results(tmp_path):
    results = figures.ROOT / "benchmarks" / "results" / "gpu"
    written = figures.main(["--results", str(results), "--out-dir", str(tmp_path)])
    assert sorted(p.name for p in written) == ["pipeline.png", "task_step.png", "train_step.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in written)


def test_figures_refuse_a_folder_without_results(tmp_path, capsys):
    with pytest.raises(SystemExit):
        figures.main(["--results", str(tmp_path)])
    assert "holds none of the benchmarks' JSON" in capsys.readouterr().err
