"""Execute every notebook of ``notebooks/`` top to bottom; a notebook fails its test on any cell error.

The notebooks are stored as jupytext percent-format ``.py`` files (readable diffs, no outputs in git). Each test
converts one to a notebook with jupytext and runs it with nbclient in a kernel started from *this* interpreter
(a kernelspec written to a temporary directory, so no user-level or system kernel named ``python3`` can be picked
up instead of the project's ``.venv``). The kernel's working directory is the repository root and the root is on
its ``PYTHONPATH``, so ``import crate_theory`` works from a fresh clone before ``pip install -e .``.

Each notebook ends with assertions on its key numbers, so a regression in the library or the audit fails here.
The eight together must stay within the notebooks' CI budget (≤ 120 s on one core): the wall time of each run is
printed (``pytest -s``) and also visible with ``--durations``.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import jupytext
import pytest
from ipykernel.kernelspec import write_kernel_spec
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))
KERNEL_NAME = "crate-notebooks"
CELL_TIMEOUT_S = 600  # generous: the machine running CI may be shared; the budget is checked by wall time, not here


def test_the_eight_notebooks_exist():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(1, 9)], [p.name for p in NOTEBOOKS]


@pytest.fixture(scope="session")
def kernel_dir(tmp_path_factory) -> Path:
    """A kernelspec directory holding one kernel that runs ``sys.executable -m ipykernel_launcher``."""
    root = tmp_path_factory.mktemp("kernels")
    write_kernel_spec(root / KERNEL_NAME)
    return root


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, kernel_dir: Path, tmp_path: Path, monkeypatch):
    nb = jupytext.read(path)
    # The kernel inherits this environment: the repository importable, the Agg backend, one thread per kernel
    # (CI runs two pytest workers on two cores), and a private cache so the notebooks never touch ~/.cache.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    monkeypatch.setenv("CRATE_WHITEBOX_CACHE", str(tmp_path / "cache"))
    km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernel_dir)]))
    client = NotebookClient(
        nb,
        km=km,
        timeout=CELL_TIMEOUT_S,
        allow_errors=False,
        resources={"metadata": {"path": str(ROOT)}},
    )
    start = time.perf_counter()
    client.execute()
    print(f"{path.name}: executed in {time.perf_counter() - start:.1f} s", file=sys.stderr)
