"""When a run's evaluators run: each named in the config with its cadence (as big_vision's ``config.evals`` names its
evaluators with theirs), so a task asks which are due instead of reading one epoch list per evaluation.

    evals = {"knn": Cadence((0, 5, 10), final=True), "probe": Cadence((10,), final=True)}
    due(evals, 5)         # after epoch 5: {"knn"}
    final(evals)          # at the end of training: {"knn", "probe"}
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Cadence:
    """After which epochs an evaluator runs (0: the initial model, for a run that evaluates at its start) and whether
    it runs once more at the end of training."""

    epochs: tuple[int, ...] = ()
    final: bool = False

    def __post_init__(self) -> None:
        epochs = tuple(self.epochs)
        if not all(isinstance(e, int) and not isinstance(e, bool) and e >= 0 for e in epochs):
            raise ValueError(f"epochs: expected non-negative integers, got {self.epochs!r}")
        object.__setattr__(self, "epochs", epochs)


def due(evals: Mapping[str, Cadence], epoch: int | None) -> set[str]:
    """The names of the evaluators of ``evals`` that run after ``epoch`` epochs (None, an evaluation that falls
    between epoch ends: none)."""
    return set() if epoch is None else {name for name, cadence in evals.items() if epoch in cadence.epochs}


def final(evals: Mapping[str, Cadence]) -> set[str]:
    """The names of the evaluators of ``evals`` that run at the end of training."""
    return {name for name, cadence in evals.items() if cadence.final}
