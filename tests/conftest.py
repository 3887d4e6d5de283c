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
