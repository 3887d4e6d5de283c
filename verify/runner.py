"""Run a list of claims and collect one :class:`Outcome` per claim (a raising measurement is recorded, not fatal).

In quick mode a claim of a committed replication (``Claim.committed``, `verify.committed`) is decided from the
replication's stored numbers: its outcome names the replication (``stored``) and the base seed it was recorded at.
At another base seed the claim is not measured (``skipped``: "recorded at base seed 0 only", with the command that
records it at this one), which is neither a verdict nor an error. A replication whose last re-check failed
(`verify.committed.Replication.stale`: today's code no longer trains what it stores) gives *stale* verdicts: measured
from the stored numbers and shown, but neither counted nor compared with their expectation. A file refused
(damaged, edited, unsealed) or lacking what a claim asks is that claim's error, in one line. SIGTERM/SIGINT stop the
run (`verify.stopping.Interrupted`, also when the engine reports them as `crate_nn.engine.Preempted`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from threadpoolctl import threadpool_limits  # installed with scikit-learn
from tqdm.auto import tqdm

from crate_nn.engine import Preempted
from verify import committed, plots
from verify.context import Context
from verify.integrity import StoredDataError
from verify.registry import Band, Claim, Result
from verify.stopping import Interrupted

NOT_MEASURED = "not re-measured"
"""The verdict shown for a stored claim at a base seed other than its replication's (`Outcome.skipped`)."""


@dataclass
class Outcome:
    """A claim together with what its measurement gave (or the error it raised)."""

    claim: Claim
    result: Result | None
    seconds: float
    error: str | None = None
    figures: list[str] = field(default_factory=list)
    mode: str = "quick"
    stored: str | None = None
    """The replication (``results/NAME``) whose stored numbers decided the verdict; None: measured now."""
    recorded_seed: int | None = None
    """The base seed the stored replication was recorded at."""
    skipped: str | None = None
    """Why a stored claim was not measured: recorded at another base seed only (and how to record it)."""
    seed: int = 0
    """The audit's base seed."""
    stale: str | None = None
    """Why a stored verdict is stale (its replication's last check failed), or None."""

    @property
    def band(self) -> Band:
        """The claim's expected verdicts in the mode it was measured in (`Claim.expected_in`): one, or a band seen
        over a panel of base seeds."""
        return self.claim.expected_in(self.mode)

    @property
    def expected_verdict(self) -> str:
        """The expected verdicts as text: ``holds``, or ``holds or inconclusive`` for a band."""
        return str(self.band)

    @property
    def seed_sensitive(self) -> bool:
        """The claim's expectation is a band: its verdict moves with the base seed (or a training's last bits)."""
        return not self.band.stable

    @property
    def verdict(self) -> str:
        if self.skipped:
            return NOT_MEASURED
        return self.result.verdict if self.result is not None else "error"

    @property
    def matches(self) -> bool:
        """True when the measured verdict lies in the claim's expected band (its one verdict, for a stable claim) and
        the labels, where the claim expects some, match."""
        return (self.error is None and self.verdict in self.band
                and self.claim.labels_match(self.result, self.mode))

    @property
    def unexpected(self) -> bool:
        """A measured verdict other than the expected one, or an error (what the exit status counts); a claim not
        measured (``skipped``) or stale is neither."""
        return not self.skipped and not self.stale and not self.matches

    @property
    def counted(self) -> bool:
        """Whether its verdict counts (the headline, the summary): neither `skipped` nor `stale`."""
        return not self.skipped and not self.stale

    def to_json(self) -> dict[str, Any]:
        c = self.claim
        return {
            "id": c.id,
            "tags": list(c.tags),
            "location": c.location,
            "statement": c.statement,
            "measures": c.measures,
            "measured": self.result.measured if self.result else None,
            "expected": c.expected,
            "verdict": self.verdict,
            "expected_verdict": self.expected_verdict,
            "expected_band": list(self.band.verdicts),
            "seed_sensitive": self.seed_sensitive,
            "matches_expectation": self.matches,
            "scope": c.scope,
            "setting": c.setting,
            "quote": c.quote,
            "formerly": list(c.formerly),
            "kind": c.kind,
            "provenance": c.provenance,
            "error_kind": c.error_kind,
            "correction": c.correction,
            "headline": dataclasses.asdict(self.result.headline) if self.result and self.result.headline else None,
            "data": self.result.data if self.result else {},
            "figures": self.figures,
            "seconds": round(self.seconds, 3),
            "error": self.error,
            "stored": self.stored,
            "recorded_seed": self.recorded_seed,
            "skipped": self.skipped,
            "labels": self.result.labels if self.result else None,
            "stale": self.stale,
        }


@contextlib.contextmanager
def single_threaded(mode: str):
    """One torch thread (all the audit's torch work is tiny: the digits model trains in 3.6 s on one thread and
    took 68 s on two while the second core was busy — spinning intra-op threads); in quick mode also one BLAS
    thread (matrices ≤ 256 wide). Restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(limits=1) if mode == "quick" else contextlib.nullcontext():
            yield
    finally:
        torch.set_num_threads(previous)


def run_claims(
    claims: list[Claim], *, mode: str, seed: int, output_dir: Path, progress: bool = True, figures: bool = True
) -> list[Outcome]:
    """Measure each claim in order, with a tqdm progress bar; exceptions are caught and recorded per claim.
    ``figures``: draw the claims' figures (`verify.plots.drawing`)."""
    with single_threaded(mode), plots.drawing(figures):
        return _run(claims, mode, seed, Path(output_dir), progress)


def _run(claims: list[Claim], mode: str, seed: int, output_dir: Path, progress: bool) -> list[Outcome]:
    outcomes = []
    bar = tqdm(claims, desc="verify", unit="claim", disable=not progress, dynamic_ncols=True)
    for claim in bar:
        bar.set_postfix_str(claim.id)
        start = time.perf_counter()
        stored = claim.committed if claim.committed and mode == "quick" else None
        recorded = skipped = stale = result = error = None
        try:
            if stored:
                replication = committed.replication(stored)
                recorded, stale = replication.base_seed, replication.stale
                if recorded != seed:
                    skipped = (f"recorded at base seed {recorded} only (re-record: "
                               f"{committed.record_command(stored, seed)})")
            if not skipped:
                with committed.reading(stored) if stored else contextlib.nullcontext():
                    result = claim.measure(Context(mode="full" if claim.committed else mode, seed=seed,
                                                   claim_id=claim.id, output_dir=output_dir))
                if not isinstance(result, Result):
                    raise TypeError(f"claim {claim.id} returned {type(result).__name__}, expected "
                                    "verify.registry.Result")
        except Preempted as stop:  # the engine's answer to SIGTERM/SIGINT during a training: the audit stops
            raise Interrupted(stop.signum) from None
        except StoredDataError as err:  # a stored file refused or lacking: its one line, no traceback
            result, error = None, str(err)
        except Exception:  # noqa: BLE001 - a broken measurement is reported, the audit goes on
            result, error = None, traceback.format_exc()
        seconds = time.perf_counter() - start
        figures = [_relative(f, output_dir) for f in (result.figures if result else []) if f]
        outcomes.append(Outcome(claim, result, seconds, error, figures, mode, stored, recorded, skipped, seed,
                                stale if result is not None and not skipped else None))
    return outcomes


def _relative(path: str, root: Path) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(p)
