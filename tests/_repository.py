"""The repository's files as git lists them: the set the tests that scan documents and sources read."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def repository_files() -> list[Path]:
    """Every file git tracks or would track (``git ls-files -co --exclude-standard``), as paths under the root. Skips
    outside a git checkout: the set is git's (a source tree without it has build outputs and caches beside it that
    no rule here tells apart); CI runs on a clone."""
    try:
        listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                                text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the files to scan are git's")
    return [ROOT / name for name in listed if (ROOT / name).is_file()]
