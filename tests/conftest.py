"""Shared pytest configuration: hypothesis profiles, BLAS threads, the matplotlib backend, and the ``slow`` marker
derived from the recorded test durations (``tests/durations.json``, `SLOW_SECONDS`).

The ``ci`` profile (derandomised, no deadline, no example database, bounded examples) is selected when the
``CI`` environment variable is set, so CI runs are reproducible and bounded in time; ``dev`` draws more
examples for local runs.
"""
import json
import os
from pathlib import Path

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


DURATIONS = Path(__file__).with_name("durations.json")
"""Every test's duration (seconds: setup + call + teardown) in a run of the whole suite as CI runs it (``-n 2``, the
``ci`` hypothesis profile, an empty audit cache), written by ``make durations``: re-record it after adding or
speeding up tests, and commit it."""
SLOW_SECONDS = 2.0
"""A test is marked ``slow`` when its recorded duration exceeds this: `make test-fast` (``-m "not slow"``) runs every
test recorded at or under it, and the tests recorded since (none yet: not slow); CI and `make test` run everything.
Two seconds keeps what checks the arithmetic (losses, layers, configs, files) and leaves out what trains, spawns
processes or runs the audit, notebooks and README."""


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write every test's duration (setup + call + teardown, seconds) to PATH as JSON "
                          "(`make durations` writes tests/durations.json, which marks the slow tests)")


_DURATIONS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--record-durations")
    if path and not hasattr(session.config, "workerinput"):  # the controller of pytest-xdist (or the only process)
        record = {"recorded": {"command": "make durations", "cpus": os.cpu_count(),
                               "load_average": [round(x, 1) for x in os.getloadavg()]},
                  "durations": {k: round(v, 3) for k, v in sorted(_DURATIONS.items())}}
        Path(path).write_text(json.dumps(record, indent=0) + "\n")


def pytest_collection_modifyitems(config, items):
    import pytest

    recorded = json.loads(DURATIONS.read_text())["durations"] if DURATIONS.is_file() else {}
    for item in items:
        if recorded.get(item.nodeid, 0.0) > SLOW_SECONDS:
            item.add_marker(pytest.mark.slow)
