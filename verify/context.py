"""The measurement context handed to every claim."""
from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

MODES = ("quick", "full")
ROOT = Path(__file__).resolve().parents[1]
"""The repository (the documents `verify.documents` writes parts of)."""
RESULTS = ROOT / "results"
"""The repository's committed runs (`verify.committed`)."""
TABLE17 = "segmentation"
"""The replication whose file is the Table 17 experiment's ``results.json`` (`crate_nn.tasks.segmentation`)."""


def versions() -> dict[str, str]:
    """The versions of the numerical libraries a report records (torch where it is installed)."""
    import scipy

    found = {"numpy": np.__version__, "scipy": scipy.__version__}
    try:
        import torch

        found["torch"] = torch.__version__
    except ImportError:  # pragma: no cover - torch is a dependency; the calculus claims run without it
        pass
    return found


def stored_file(name: str, results: Path = RESULTS) -> Path:
    """The file that holds replication ``name``'s committed numbers: ``results/NAME/runs.json``, and for Table 17
    (`TABLE17`) the experiment's ``results/segmentation/results.json``."""
    return results / name / ("results.json" if name == TABLE17 else "runs.json")
T = TypeVar("T")


def cache_dir() -> Path:
    """Where the audit caches expensive artefacts: its trained runs live in ``cache_dir()/verify``
    (`verify.experiments`), which ``make clean`` deletes.

    ``$CRATE_WHITEBOX_CACHE`` if set, else ``$XDG_CACHE_HOME/crate-whitebox``, else ``~/.cache/crate-whitebox``.
    """
    if os.environ.get("CRATE_WHITEBOX_CACHE"):
        return Path(os.environ["CRATE_WHITEBOX_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "crate-whitebox"


@dataclass
class Context:
    """What a measurement needs: the mode, a per-claim seeded generator and where to put figures.

    ``rng`` is seeded from ``(seed, claim id)``, so a claim measures the same numbers whether it runs alone
    (``--only``) or within the whole audit. ``torch_seed`` is an integer from the same source for torch.
    """

    mode: str
    seed: int
    claim_id: str
    output_dir: Path
    rng: np.random.Generator = field(init=False)
    torch_seed: int = field(init=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        stream = zlib.crc32(self.claim_id.encode())
        self.rng = np.random.default_rng([self.seed, stream])
        self.torch_seed = int(np.random.default_rng([self.seed, stream, 1]).integers(2**31))
        self.output_dir = Path(self.output_dir)

    @property
    def quick(self) -> bool:
        return self.mode == "quick"

    def pick(self, quick: T, full: T) -> T:
        """``quick`` in quick mode, ``full`` under ``--full``."""
        return quick if self.quick else full

    def rng_for(self, stream: str) -> np.random.Generator:
        """A generator shared by the claims that name the same ``stream``, for a measurement several claims read
        (computed once and memoised by the claim module). A stream's name is the key of its draws, not a claim's id:
        streams named while the claims were numbered (``2.16-sweep``) keep those names, since a new name would draw
        other data than the verdicts were recorded on."""
        return np.random.default_rng([self.seed, zlib.crc32(stream.encode())])

    def torch_seed_for(self, stream: str) -> int:
        """A torch seed shared by the claims that name the same ``stream`` (e.g. one trained model for several claims)."""
        return int(np.random.default_rng([self.seed, zlib.crc32(stream.encode()), 1]).integers(2**31))

    def figure_path(self, name: str) -> Path:
        """Path of a PNG figure for this claim inside the output directory (the ``figures/`` folder is created):
        ``figures/<claim id>-<name>.png``, or ``figures/<claim id>.png`` where the id already holds ``name``'s words
        in order (``fig15-digits-weight-decay`` drawing ``weight-decay``), so that no file name says a word twice.
        A figure several claims share is drawn under a context whose id is the prefix or tag that selects them
        (``fig15-digits``, ``ideal``)."""
        folder = self.output_dir / "figures"
        folder.mkdir(parents=True, exist_ok=True)
        words, extra = self.claim_id.split("-"), name.split("-")
        held = any(words[i:i + len(extra)] == extra for i in range(len(words) - len(extra) + 1))
        return folder / f"{self.claim_id if held else f'{self.claim_id}-{name}'}.png"
