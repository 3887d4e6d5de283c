"""Shared pytest configuration: hypothesis profiles and the matplotlib backend.

The ``ci`` profile (derandomised, no deadline, no example database, bounded examples) is selected when the
``CI`` environment variable is set, so CI runs are reproducible and bounded in time; ``dev`` draws more
examples for local runs.
"""
import os

import matplotlib
from hypothesis import HealthCheck, settings

matplotlib.use("Agg")

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
