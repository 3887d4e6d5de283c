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
    collapse_floor,
    common,
    data,
    fast_paths,
    figures,
    fusion,
    gpu_check,
    gpu_report,
    inference,
    joint_measure,
    limit,
    load,
    pipeline,
    task_step,
    theory,
    train_step,
    tssa,
)
from benchmarks.models import LOGIT_RTOL, TINY_OVERRIDES, build_pair, check_pair, forward_flops
from crate_nn import model_config


@pytest.fixture(scope="module")
def gpu_folder(tmp_path_factory):
    """A results folder as `benchmarks.gpu_check` writes it: the committed training-step JSON of the last GPU run
    and this CPU's --tiny pipeline and task_step results."""
    folder = tmp_path_factory.mktemp("gpu")
    committed = figures.ROOT / "benchmarks" / "results" / "gpu"
    for name in ("train_step_base.json", "train_step_sizes.json"):
        (folder / name).write_text((committed / name).read_text())
    for module, name in ((pipeline, "pipeline.json"), (task_step, "task_step.json")):
        work = tmp_path_factory.mktemp(name.split(".")[0])
        run_tiny(module, work)
        (work / "result.json").rename(folder / name)
    return folder


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


def test_train_step_times_ours_in_several_variants(tmp_path):
    result = run_tiny(train_step, tmp_path, "--precision", "bf16", "--variants", "eager", "eager+bf16-activations")
    (row,) = result["rows"]
    assert row["contenders"] == {"ours": {"precision": "bf16", "variant": "eager"},
                                 "ours_eager_bf16_activations": {"precision": "bf16",
                                                                 "variant": "eager+bf16-activations"}}
    key = "ours_eager_bf16_activations"
    assert row[f"{key}_img_s"] > 0 and row[f"{key}_peak_mem_mb"] > 0 and row[f"{key}_timing"]["repeats"] == 1
    assert row[f"{key}_ratio"] == pytest.approx(row[f"{key}_img_s"] / row["baseline_img_s"])
    for bad, message in ((["fastest"], "--variants: expected MODE"), (["eager", "eager"], "names a variant twice")):
        with pytest.raises(ValueError, match=message):
            train_step.main(["--tiny", "--device", "cpu", "--variants", *bad])


def test_bf16_accuracy_takes_kept_activations_as_a_precision():
    assert bf16_accuracy.precision_option("bf16+bf16-activations") == "bf16+bf16-activations"
    with pytest.raises(Exception, match="expected one of"):
        bf16_accuracy.precision_option("bf16+fp8-activations")


def test_collapse_floor_benchmark_writes_results(tmp_path):
    row = run_tiny(collapse_floor, tmp_path)["rows"][0]
    assert row["size"] == "d 32, n 16, K 4" and row["previous_s"] > 0 and row["new_s"] > 0
    # two Monte-Carlo estimates of one expectation (one subspace per input): the previous one's standard error is
    # about 5e-4 at its 1,024 sets, the new one's at most 0.5% of 0.17 — 4 combined standard errors are 0.004
    assert abs(row["new_floor"] - row["previous_one_subspace"]) <= 0.004
    assert row["new_orthant_floor"] >= row["new_floor"] and row["previous_floor"] >= row["previous_one_subspace"]


def test_joint_measure_benchmark_writes_results(tmp_path):
    result = run_tiny(joint_measure, tmp_path)
    assert [row["size"] for row in result["rows"]] == ["n 40, d 32, K 4 (4 sets)", "n 12, d 32, K 4 (8 sets)"]
    assert all(row["previous_ms"] > 0 and row["new_ms"] > 0 for row in result["rows"])
    assert {row["kind"] for row in result["precision"]} == set(joint_measure.KINDS)
    for row in result["precision"]:
        # two independent means of 64 sets of one expectation: 4 combined standard errors; the control variate
        # keeps a set's spread within 2× the rotation's (its standard deviations estimated to ≈ 9% from 64 sets)
        assert abs(row["z"]) <= 4 and row["new_over_rotation"] <= 2


def test_the_previous_joint_measure_is_the_same_measure():
    """The baseline the benchmark times is the measure it replaced: given the same tokens both agree on the
    yardstick-free measures exactly (rounding) and on the rest within their Monte-Carlo error."""
    torch.manual_seed(0)
    z, weight = torch.randn(64, 6, 8, dtype=torch.float64), torch.randn(8, 8, dtype=torch.float64)
    old = joint_measure.previous_joint_measures(z, weight, 2, draws=8, generator=torch.Generator().manual_seed(1))
    new = crate_nn.analysis.protocol.joint_measures(z, weight, 2, draws=8, generator=torch.Generator().manual_seed(2))
    for name in ("alignment", "rate_reduction", "nonnegative"):
        torch.testing.assert_close(old[name], new[name], rtol=1e-12, atol=1e-12)  # the same formulas, rounding
    for name in ("specific", "spread"):
        # the difference of the two means over 64 sets (8 draws each) has a standard deviation of 0.005 for the
        # spread, 0.0035 for specific (measured over 20 seeds); 5 of them: 0.025
        assert abs((old[name] - new[name]).mean().item()) <= 0.025, name


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
    pipelines = {(row["pipeline"], row["workers"], row["loader"]) for row in result["rows"]}
    for name in ("files-decode", "files-augment", "shard-read", "shard-augment"):
        assert (data.PIPELINES[name], 0, "main") in pipelines
        for loader in ("processes", "threads"):  # the --tiny worker counts: 0 and 1
            assert (data.PIPELINES[name], 1, loader) in pipelines
    assert (data.PIPELINES["decode_draft"], None, None) in pipelines
    assert (data.PIPELINES["augment"], None, None) in pipelines and (data.PIPELINES["augment-kornia"], None,
                                                                      None) in pipelines
    assert (data.PIPELINES["pack-pillow"], 1, "processes") in pipelines  # the largest --tiny worker count
    assert all(row["img_s"] > 0 and row["img_s_per_core"] > 0 for row in result["rows"])
    assert result["h100_crate_base_40pct_mfu_img_s"] > 0 and result["best_jpeg_decode_img_s_per_core"] > 0


def test_task_step_benchmark_writes_results(gpu_folder):
    result = json.loads((gpu_folder / "task_step.json").read_text())
    (row,) = result["rows"]
    assert (row["preset"], row["unit"], row["batch"]) == ("digits", "images", 8)
    assert row["units_per_s"] > 0 and row["step_gflops"] > 0 and row["mfu"] is None  # CPU: no MFU
    assert row["state_mb"] > 0 and row["parameters"] > 0


def test_pipeline_benchmark_compares_the_engine_with_the_bare_step(gpu_folder):
    result = json.loads((gpu_folder / "pipeline.json").read_text())
    stages = {row["stage"]: row for row in result["rows"]}
    bare = stages["bare training step (data loading excluded)"]
    assert {"pack, Pillow", "crate-train from crate-pack shards, 1 thread",
            "crate-train from crate-pack shards, 1 process", "crate-train from crate-pack shards, main process",
            "crate-train from JPEG files (Pillow), 1 process"} <= set(stages)
    runs = [row for row in result["rows"] if "windows_img_s" in row]
    assert [(row["source"], row["loader"], row["workers"]) for row in runs] == [
        ("shards", "threads", 1), ("shards", "processes", 1), ("shards", "processes", 0),
        ("imagenet", "processes", 1)]
    for row in runs:
        assert len(row["windows_img_s"]) == 2 and row["img_s"] > 0  # 4 steps, windows of 2
        assert row["ratio_to_bare"] == pytest.approx(row["img_s"] / bare["img_s"])
    best = max(runs[:3], key=lambda row: row["img_s"])
    assert result["best_from_shards"]["stage"] == best["stage"]
    with pytest.raises(ValueError, match="--loaders"):
        pipeline.loader_option("fibres:2")
    assert pipeline.loader_option("main") == ("processes", 0) and pipeline.loader_option("threads:12") == (
        "threads", 12)


def test_fusion_benchmark_lists_the_layer_norm_kernels(tmp_path):
    result = run_tiny(fusion, tmp_path)
    assert [row["activations"] for row in result["rows"]] == ["fp32", "bf16"]
    for row in result["rows"]:
        assert row["kernels"] == len(row["all_kernels"]) > 0
        assert row["layer_norm_forward"] and set(row["layer_norm_forward"]) <= set(row["all_kernels"])
        assert row["sum_fused_with_layer_norm"] == any("_add_" in k for k in row["layer_norm_forward"])


def test_the_projection_reproduces_the_hours_of_the_measured_rates():
    """150 epochs of 625 batches of 2,048 images (ImageNet-1k's 1,281,167 training images), at the rates of the
    2026-11-24 H100 run: 6,899 images/s (bare step) → 7.7 h, 4,721 (the preset's step) → 11.3 h, 3,655 (end to
    end) → 14.6 h; an evaluation of 50,000 images per epoch at 20,000 images/s adds 150 × 2.5 s."""
    assert gpu_report.imagenet_hours(6899, None) == pytest.approx(150 * 625 * 2048 / 6899 / 3600)
    assert [round(gpu_report.imagenet_hours(rate, None), 1) for rate in (6899, 4721, 3655)] == [7.7, 11.3, 14.6]
    assert gpu_report.imagenet_hours(6899, 20_000) - gpu_report.imagenet_hours(6899, None) == pytest.approx(
        150 * 2.5 / 3600)


def test_the_gpu_report_summarises_what_the_stages_wrote(gpu_folder, tmp_path, capsys):
    results = gpu_folder
    summary = gpu_report.main(["--results", str(results), "--markdown"])
    out = capsys.readouterr().out
    assert summary["step"]["model"] == "crate_base" and summary["step"]["best"]["img_s"] > 0
    assert set(summary["sizes"]) == {"crate_tiny", "crate_small", "crate_base", "crate_large"}
    assert summary["pipeline"]["best"]["source"] == "shards"
    hours = {row["from"]: row["hours"] for row in summary["projection"]["rows"]}
    assert hours["bare model step"] == pytest.approx(gpu_report.imagenet_hours(summary["step"]["best"]["img_s"], None))
    assert "end to end from shards" in hours and summary["projection"]["evaluation_img_s"] is None
    assert "| ours, default (bf16) |" in out and "evaluations not counted" in out
    assert gpu_report.best_variant(results) == ("default", "fp32")
    assert gpu_report.best_variant(tmp_path) == ("default", "fp32")  # no step results yet


def test_gpu_check_skips_the_benchmarks_without_cuda(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this checks the CPU behaviour")
    assert gpu_check.main(["--no-install", "--skip", "tests", "--out-dir", str(tmp_path / "gpu")]) == 0
    out = capsys.readouterr().out
    assert "no CUDA device" in out and not (tmp_path / "gpu").exists()
    assert gpu_check.main(["--list"]) == 0
    listed = capsys.readouterr().out
    assert "pytest -m gpu tests/gpu" in listed and "--beside vit_base_patch16_224" in listed
    assert "--variants default default+bf16-activations reduce-overhead reduce-overhead+bf16-activations" in listed
    assert [line.split()[0] for line in listed.splitlines()][:2] == ["step", "pipeline"]
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "nonsense"])


def test_gpu_check_passes_the_fastest_variant_on_and_has_no_budget_by_default(tmp_path):
    plan = {stage.name: stage for stage in gpu_check.stages(tmp_path, 12)}
    assert "--compile-mode default --activations fp32" in " ".join(plan["pipeline"].command())  # nothing measured
    row = {"model": "crate_base", "batch": 256, "beside": None, "baseline_img_s": 1.0, "baseline_peak_mem_mb": 1.0,
           "contenders": {"ours": {"precision": "bf16", "variant": "default"},
                          "ours_fast": {"precision": "bf16", "variant": "reduce-overhead+bf16-activations"}},
           "ours_img_s": 2.0, "ours_peak_mem_mb": 1.0, "ours_fast_img_s": 3.0, "ours_fast_peak_mem_mb": 1.0}
    (tmp_path / "train_step_base.json").write_text(json.dumps({"rows": [row], "environment": {}}))
    assert "--compile-mode reduce-overhead --activations bf16" in " ".join(plan["pipeline"].command())
    assert "--variants default reduce-overhead+bf16-activations" in " ".join(plan["sizes"].command())
    with pytest.raises(SystemExit):
        gpu_check.main(["--budget", "0"])


def test_gpu_check_runs_every_stage_under_its_own_limit_unless_given_a_budget(tmp_path, monkeypatch, capsys):
    """Without --budget a stage runs under its own time limit; with one, under what is left of it, and a stage that
    needs more than is left is skipped and named (CUDA and the stage's process are stood in for)."""
    limits = []

    def run_stage(name, args, env, timeout, output):
        limits.append(timeout)
        return {"status": "ok"}

    monkeypatch.setattr(gpu_check, "environment", lambda: {"cuda_available": True})
    monkeypatch.setattr(gpu_check, "run_stage", run_stage)
    common_args = ["--no-install", "--only", "inference", "--out-dir", str(tmp_path)]
    limit = next(s.limit_s for s in gpu_check.stages(tmp_path, 1) if s.name == "inference")
    assert gpu_check.main(common_args) == 0 and limits == [limit]
    assert gpu_check.main([*common_args, "--budget", "100"]) == 0 and 90 < limits[-1] <= 100
    fresh = ["--no-install", "--only", "inference", "--out-dir", str(tmp_path / "fresh")]  # no earlier record
    assert gpu_check.main([*fresh, "--budget", "30"]) == 0 and len(limits) == 2
    record = json.loads((tmp_path / "fresh" / "gpu_check.json").read_text())
    assert record["stages"]["inference"]["status"].startswith("skipped: 30 s of the budget left")
    assert "no GPU results to summarise" in capsys.readouterr().out


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


def test_figures_are_drawn_from_the_gpu_results(gpu_folder, tmp_path):
    written = figures.main(["--results", str(gpu_folder), "--out-dir", str(tmp_path / "figures")])
    assert sorted(p.name for p in written) == ["pipeline.png", "task_step.png", "train_step.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in written)


def test_figures_refuse_a_folder_without_results(tmp_path, capsys):
    with pytest.raises(SystemExit):
        figures.main(["--results", str(tmp_path)])
    assert "holds none of the benchmarks' JSON" in capsys.readouterr().err
