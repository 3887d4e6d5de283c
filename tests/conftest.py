"""Shared pytest configuration: hypothesis profiles, BLAS threads, the matplotlib backend, and the ``slow`` marker
derived from the recorded test durations (``tests/durations.json``, `SLOW_SECONDS`).

The ``ci`` profile (derandomised, no deadline, no example database, bounded examples) is selected when the
``CI`` environment variable is set, so CI runs are reproducible and bounded in time; ``dev`` draws more
examples for local runs.
"""
import json
import os
import time
from pathlib import Path

# OpenBLAS's own threads oversubscribe the 2 cores when pytest-xdist runs workers side by side: a 768×196 SVD
# then takes ~2 s instead of ~10 ms. One BLAS thread per process is both faster and reproducible.
# torch's intra-op threads oversubscribe the same way (digits training ~19x slower with two workers × two threads).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import matplotlib  # noqa: E402
import pytest  # noqa: E402
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
``ci`` hypothesis profile, an empty audit cache), and the setup time of every fixture wider than a test (a module's
trained model, the session's quick audit), written by ``make durations``: re-record it after adding or speeding up
tests, and commit it."""
SLOW_SECONDS = 1.0
"""A test is marked ``slow`` when its recorded duration exceeds this, or when it uses a module or session fixture
whose setup did (the fixture's cost falls on whichever test sets it up first): `make test-fast` (``-m "not slow"``)
runs every other test, and the tests recorded since (none yet: not slow); CI and `make test` run everything. One
second keeps what checks the arithmetic (losses, layers, configs, files, a few training steps) and leaves out what
trains for longer, spawns processes or runs the audit, notebooks and README (recorded times vary by about 2× with
the machine's load, so a test recorded near the threshold may land on either side)."""


def pytest_addoption(parser):
    parser.addoption("--record-durations", metavar="PATH", default=None,
                     help="write every test's duration (setup + call + teardown, seconds) and every module or "
                          "session fixture's setup time to PATH as JSON (`make durations` writes tests/durations.json, "
                          "which marks the slow tests)")


_DURATIONS: dict[str, float] = {}
_FIXTURES: dict[str, float] = {}


def _fixture_key(fixturedef) -> str:
    """A fixture wider than a test: where it is defined and its name (``tests/verify::quick_audit``)."""
    return f"{fixturedef.baseid}::{fixturedef.argname}"


class _FixtureTimer:
    """Times the setup of every module and session fixture, as a property of the test that set it up (carried to the
    xdist controller). A plugin of its own: pytest calls a session fixture's hooks with the root's plugins only."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        start = time.perf_counter()
        yield
        item = getattr(request, "_pyfuncitem", None)
        if fixturedef.scope != "function" and item is not None:
            item.user_properties.append(("fixture_seconds", (_fixture_key(fixturedef), time.perf_counter() - start)))


def pytest_configure(config):
    if config.getoption("--record-durations"):
        config.pluginmanager.register(_FixtureTimer(), "crate-fixture-timer")


def pytest_runtest_logreport(report):
    _DURATIONS[report.nodeid] = _DURATIONS.get(report.nodeid, 0.0) + report.duration
    for name, value in report.user_properties:
        if name == "fixture_seconds" and report.when == "setup":
            _FIXTURES[value[0]] = max(_FIXTURES.get(value[0], 0.0), value[1])


def pytest_sessionfinish(session, exitstatus):
    path = session.config.getoption("--record-durations")
    if path and not hasattr(session.config, "workerinput"):  # the controller of pytest-xdist (or the only process)
        record = {"recorded": {"command": "make durations", "cpus": os.cpu_count(),
                               "load_average": [round(x, 1) for x in os.getloadavg()]},
                  "fixtures": {k: round(v, 3) for k, v in sorted(_FIXTURES.items()) if v >= 0.01},
                  "durations": {k: round(v, 3) for k, v in sorted(_DURATIONS.items())}}
        Path(path).write_text(json.dumps(record, indent=0) + "\n")


def _wide_fixtures(item) -> list[str]:
    """The module and session fixtures ``item`` uses, directly or through other fixtures."""
    info = getattr(item, "_fixtureinfo", None)
    return [_fixture_key(defs[-1]) for defs in (info.name2fixturedefs.values() if info else ())
            if defs and defs[-1].scope != "function"]


def pytest_collection_modifyitems(config, items):
    recorded = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    durations, fixtures = recorded.get("durations", {}), recorded.get("fixtures", {})
    for item in items:
        if durations.get(item.nodeid, 0.0) > SLOW_SECONDS or any(
                fixtures.get(key, 0.0) > SLOW_SECONDS for key in _wide_fixtures(item)):
            item.add_marker(pytest.mark.slow)
