"""Execute the notebooks and write each one with its outputs — text, tables and figures — as HTML any browser opens
(or as an ``.ipynb`` for Jupyter):

    python -m notebooks.run                              # all eight → notebooks/html/NN_name.html
    python -m notebooks.run 01 07                        # by number (or name)
    python -m notebooks.run --format ipynb --output-dir executed/

Run it from the repository root with the ``notebooks`` extra installed (``pip install -e ".[notebooks]"``; ``make
setup`` installs it). Each notebook runs in a kernel of this interpreter (a kernelspec written to a temporary
folder, so no other ``python3`` kernel is picked up) with the repository root as its working directory and on its
``PYTHONPATH``, and a private audit cache. A cell that fails stops its notebook: the notebook is written all the
same, with every output up to the failing cell and its error (so the plots before it are kept), the failure is
named in one line on stderr, the other notebooks run, and the exit status is 1. The tests (``tests/notebooks``)
execute them the same way.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.py"))
KERNEL_NAME = "crate-notebooks"
CELL_TIMEOUT_S = 600  # generous: a shared machine may be slow; the tests check the budget by wall time


def write_kernel(folder: Path) -> Path:
    """A kernelspec folder holding one kernel, `KERNEL_NAME`, that runs this interpreter's ipykernel."""
    from ipykernel.kernelspec import write_kernel_spec

    write_kernel_spec(folder / KERNEL_NAME)
    return folder


def kernel_environment(cache: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with the repository on ``PYTHONPATH`` (so ``import
    crate_theory`` works before ``pip install -e .``) and ``cache`` as the audit's cache."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["CRATE_WHITEBOX_CACHE"] = str(cache)
    return env


class NotebookFailed(Exception):
    """A cell of a notebook failed: ``notebook`` holds the notebook as executed (every output up to the failing
    cell, and its error), ``cell`` the failing cell's number (1-based, among all cells)."""

    def __init__(self, notebook, cell: int | None, reason: str) -> None:
        super().__init__(f"cell {cell}: {reason}" if cell else reason)
        self.notebook, self.cell = notebook, cell


def execute(path: Path, kernels: Path, env: Mapping[str, str]):
    """The notebook of the jupytext file ``path`` executed top to bottom in the kernel of ``kernels``, started with
    the environment ``env`` in the repository root; `NotebookFailed` (holding the notebook as far as it ran) on the
    first failing cell."""
    import jupytext
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = jupytext.read(path)
    km = KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(kernels)]))
    try:
        NotebookClient(nb, km=km, timeout=CELL_TIMEOUT_S, allow_errors=False,
                       resources={"metadata": {"path": str(ROOT)}}).execute(env=dict(env))  # the kernel's environment
    except CellExecutionError as err:
        failed = next((i for i, cell in enumerate(nb.cells, 1)
                       if any(out.get("output_type") == "error" for out in cell.get("outputs", []))), None)
        reason = f"{err.ename}: {err.evalue}" if getattr(err, "ename", None) else str(err).strip().splitlines()[-1]
        raise NotebookFailed(nb, failed, " ".join(reason.split())[:300]) from err
    return nb


def _select(names: Sequence[str]) -> list[Path]:
    if not names:
        return NOTEBOOKS
    chosen = [p for p in NOTEBOOKS if any(p.stem.startswith(n) or p.stem == n or p.name == n for n in names)]
    unknown = [n for n in names if not any(p.stem.startswith(n) or p.name == n for p in NOTEBOOKS)]
    if unknown:
        raise SystemExit(f"notebooks.run: no notebook {unknown}; the notebooks are "
                         f"{', '.join(p.stem for p in NOTEBOOKS)}")
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m notebooks.run", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="numbers or names (default: all)")
    parser.add_argument("--format", choices=("html", "ipynb"), default="html")
    parser.add_argument("--output-dir", type=Path, default=None, help="default: notebooks/html (or notebooks/ipynb)")
    args = parser.parse_args(argv)
    paths = _select(args.notebooks)
    try:
        import nbformat
        if args.format == "html":
            from nbconvert import HTMLExporter
    except ImportError as err:
        raise SystemExit(f"notebooks.run: {err.name} is missing: pip install -e \".[notebooks]\"") from err
    out = args.output_dir or NOTEBOOK_DIR / args.format
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="crate-notebooks-") as tmp:
        kernels = write_kernel(Path(tmp) / "kernels")
        # figures as images in the output, whatever MPLBACKEND this shell has
        env = {**kernel_environment(Path(tmp) / "cache"), "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
        failed = []
        for path in paths:
            start = time.perf_counter()
            try:
                nb, error = execute(path, kernels, env), None
            except NotebookFailed as err:
                nb, error = err.notebook, err
            target = out / f"{path.stem}.{args.format}"
            if args.format == "html":
                target.write_text(HTMLExporter().from_notebook_node(nb)[0])
            else:
                nbformat.write(nb, target)
            print(f"{target}  ({time.perf_counter() - start:.0f} s)", flush=True)
            if error is not None:
                print(f"notebooks.run: {path.name} failed at {error}; written as far as it ran: {target}",
                      file=sys.stderr, flush=True)
                failed.append(path.stem)
    if failed:
        print(f"notebooks.run: {len(failed)} of {len(paths)} notebooks failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
