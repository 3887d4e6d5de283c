"""Execute every notebook of ``notebooks/`` top to bottom; a notebook fails its test on any cell error.

The notebooks are stored as jupytext percent-format ``.py`` files (readable diffs, no outputs in git). Each test
runs one as ``python -m notebooks.run`` does (`notebooks.run.execute`): converted with jupytext and executed with
nbclient in a kernel started from *this* interpreter
(a kernelspec written to a temporary directory, so no user-level or system kernel named ``python3`` can be picked
up instead of the project's ``.venv``). The kernel's working directory is the repository root and the root is on
its ``PYTHONPATH``, so ``import crate_theory`` works from a fresh clone before ``pip install -e .``.

Each notebook ends with assertions on its key numbers, so a regression in the library or the audit fails here.
The eight together must stay within the notebooks' CI budget (≤ 120 s on one core): the wall time of each run is
printed (``pytest -s``) and also visible with ``--durations``.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from notebooks.run import NOTEBOOKS, execute, kernel_environment, main, write_kernel


def test_the_eight_notebooks_exist():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(1, 9)], [p.name for p in NOTEBOOKS]


@pytest.fixture(scope="session")
def kernel_dir(tmp_path_factory) -> Path:
    """A kernelspec directory holding one kernel that runs ``sys.executable -m ipykernel_launcher``."""
    return write_kernel(tmp_path_factory.mktemp("kernels"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, kernel_dir: Path, tmp_path: Path):
    # The kernel's environment: the repository importable, a private cache so the notebooks never touch ~/.cache,
    # the Agg backend and one thread per kernel (CI runs two pytest workers on two cores).
    env = {**kernel_environment(tmp_path / "cache"), "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    start = time.perf_counter()
    execute(path, kernel_dir, env)
    print(f"{path.name}: executed in {time.perf_counter() - start:.1f} s", file=sys.stderr)


def test_the_run_command_writes_html_a_browser_opens(tmp_path, capsys):
    """``python -m notebooks.run 01``: the executed notebook, its printed numbers and figures inside, as HTML."""
    assert main(["01", "--output-dir", str(tmp_path)]) == 0
    page = tmp_path / "01_coding_rates.html"
    assert capsys.readouterr().out.startswith(f"{page}  (")
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "Sylvester" in html
    assert html.count("data:image/png;base64") >= 2  # the notebook's figures, drawn inline
    with pytest.raises(SystemExit, match="no notebook"):
        main(["99"])


def test_a_failing_cell_still_writes_the_notebook_and_exits_non_zero(tmp_path, monkeypatch, capsys):
    """A failing last cell used to write nothing, losing every plot before it: the page is written as far as the
    notebook ran (its figure and its error inside), the failure is one line on stderr, and the exit status is 1."""
    import notebooks.run as runner

    notebook = tmp_path / "09_failing.py"
    notebook.write_text("# %%\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3]); plt.show()\n\n"
                        "# %%\nprint('before the failure')\n\n# %%\nraise ValueError('the last cell fails')\n")
    monkeypatch.setattr(runner, "NOTEBOOKS", [notebook])
    assert main(["09", "--output-dir", str(tmp_path / "out")]) == 1
    html = (tmp_path / "out" / "09_failing.html").read_text()
    assert "data:image/png;base64" in html and "before the failure" in html and "the last cell fails" in html
    err = capsys.readouterr().err.splitlines()
    assert err == [f"notebooks.run: 09_failing.py failed at cell 3: ValueError: the last cell fails; written as far "
                   f"as it ran: {tmp_path / 'out' / '09_failing.html'}", "notebooks.run: 1 of 1 notebooks failed: "
                   "09_failing"]
