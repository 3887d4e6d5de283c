"""Shared pytest configuration: hypothesis profiles, BLAS threads and the matplotlib backend.

The ``ci`` profile (derandomised, no deadline, no example database, bounded examples) is selected when the
``CI`` environment variable is set, so CI runs are reproducible and bounded in time; ``dev`` draws more
examples for local runs.
"""
import os

# OpenBLAS's own threads oversubscribe the 2 cores when pytest-xdist runs workers side by side: a 768×196 SVD
# then takes ~2 s instead of ~10 ms. One BLAS thread per process is both faster and reproducible.
# torch's intra-op threads oversubscribe the same way (digits training ~19x slower with two workers × two threads).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import matplotlib  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

matplotlib.use("Agg")
threadpool_limits(limits=1, user_api="blas")  # in case numpy was imported before this file

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    database=None,
    max_examples=20,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", deadline=None, max_examples=50)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


SLOW = {
    "tests/verify/test_claims.py": "runs the whole quick audit from an empty cache (≈ 2.5 min)",
    "tests/verify/test_documents.py::test_each_generated_part_says_what_the_quick_audit_says":
        "reads the whole quick audit (test_claims.py runs it)",
    "tests/verify/test_seed_independence.py": "the fast claims again at two other base seeds (≈ 1 min)",
    "tests/test_readme.py": "every command and snippet of README.md, docs/ and results/README.md (≈ 100 s)",
    "tests/notebooks": "executes every notebook in a kernel (≈ 140 s)",
    "tests/engine/test_engine_ddp.py": "torchrun with two processes",
    "tests/engine/test_engine_toy.py::test_hard_kills_and_terminations_at_random_steps_then_resume_equal_uninterrupted":
        "kills and resumes many subprocesses",
    "tests/engine/test_engine_toy.py::test_torchrun_two_processes_equal_one_process_and_stop_together":
        "torchrun with two processes",
    "tests/evaluation/test_features.py::test_two_processes_return_what_one_process_returns": "torchrun",
    "tests/engine/test_run_dir.py::test_a_bad_output_dir_stops_every_torchrun_process_with_its_message": "torchrun",
    "tests/models/test_models.py::test_torch_compile_agrees_with_eager": "torch.compile",
    "tests/models/test_bf16_activations.py::test_compiled_bf16_activations_stay_within_the_bound": "torch.compile",
    "tests/benchmarks/test_benchmarks.py::test_fusion_benchmark_lists_the_layer_norm_kernels": "torch.compile",
    "tests/engine/test_engine_fast_paths.py::test_a_model_compiled_for_cuda_graphs_computes_what_the_eager_one_does":
        "torch.compile",
    "tests/tasks": "trains every system's presets (seconds each, minutes in all)",
}
"""Tests marked ``slow`` (node-id prefix → why): `make test-fast` (``-m "not slow"``) leaves them out for a quick
check while developing; CI and `make test` run everything."""


def pytest_collection_modifyitems(config, items):
    import pytest

    for item in items:  # a prefix names a folder, a file or a test (with or without its parameters)
        if any(item.nodeid == p or item.nodeid.startswith((p + "/", p + "::", p + "[")) for p in SLOW):
            item.add_marker(pytest.mark.slow)
