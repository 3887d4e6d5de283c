"""One quick audit per test session, shared by every test in this folder (and across pytest-xdist workers).

The CLI runs once (``main(["--quick", ...])``) into a temporary folder; each per-claim test then reads that claim's
entry from ``report.json``. Under xdist the first worker to take the file lock runs the audit, the others wait and
read its result. The trained-checkpoint cache points into the same temporary folder, so the run is that of a
fresh machine.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest
from filelock import FileLock  # a dependency of torch, always installed with it


@dataclass
class AuditRun:
    exit_status: int
    output_dir: Path
    report: dict
    stdout: str

    def claim(self, claim_id: str) -> dict:
        return next(c for c in self.report["claims"] if c["id"] == claim_id)


def _run(root: Path) -> None:
    from verify.__main__ import main

    out = root / "verify-report"
    previous = os.environ.get("CRATE_WHITEBOX_CACHE")
    os.environ["CRATE_WHITEBOX_CACHE"] = str(root / "cache")
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            status = main(["--quick", "--figures", "--output-dir", str(out), "--no-progress"])  # figures tested too
    finally:
        if previous is None:
            os.environ.pop("CRATE_WHITEBOX_CACHE")
        else:
            os.environ["CRATE_WHITEBOX_CACHE"] = previous
    (root / "stdout.txt").write_text(buffer.getvalue(), encoding="utf-8")
    (root / "exit_status").write_text(str(status))


@pytest.fixture(scope="session")
def quick_audit(tmp_path_factory, worker_id) -> AuditRun:
    # under xdist every worker's base temp is a child of one per-session folder; alone, use a fresh folder
    root = tmp_path_factory.getbasetemp().parent if worker_id != "master" else tmp_path_factory.mktemp("audit")
    root = root / "quick-audit"
    root.mkdir(exist_ok=True)
    with FileLock(str(root / "lock")):
        if not (root / "exit_status").exists():
            _run(root)
    out = root / "verify-report"
    return AuditRun(int((root / "exit_status").read_text()), out,
                    json.loads((out / "report.json").read_text()), (root / "stdout.txt").read_text())
