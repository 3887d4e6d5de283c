"""The claim registry: every checkable statement of the papers is one :class:`Claim`.

A claim module (``verify/claims/*.py``) declares a claim with the :func:`claim` decorator on its measurement
function::

    @claim(
        id="2.4-lemma11",
        tags=("calculus", "hessian"),
        reference="004 eq. (136), Lemma 11",
        statement="sup over ‖Δ‖_F ≤ 1 of ‖∇²R(Z)[Δ]‖_F / α is at most 9/4, for every Z",
        measures="sup of ‖∇²R(Z)‖/α over random and optimised Z",
        expected="≤ 9/4 (the lemma); `loose` when the supremum is below 2/3 of it",
        expected_verdict="loose",
    )
    def lemma11(ctx: Context) -> Result:
        ...

The measurement function receives a :class:`~verify.context.Context` and returns a :class:`Result`: the
measured figure(s), the verdict *computed from them* (see :mod:`verify.verdicts`) and the raw numbers.
``expected_verdict`` records what the analysis (paper-notes §2) expects, so that the audit doubles as a
regression check.
"""
from __future__ import annotations

import importlib
import pkgutil
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from verify.context import MODES

VERDICTS = ("holds", "fails", "loose", "inconclusive")
"""``holds``: the statement is confirmed; ``fails``: it is contradicted by the measurement; ``loose``: it is
true, but with a bound the data beat by a wide margin; ``inconclusive``: a comparison over seeds whose 95% interval
contains its boundary (`verify.statistics.compare`)."""


@dataclass
class Result:
    """What a measurement function returns.

    ``measured``: the measured figure(s) as one short line for the table; ``verdict``: one of :data:`VERDICTS`,
    computed from the numbers; ``data``: the numbers themselves (JSON-serialisable) for ``report.json``;
    ``figures``: paths of the PNG files written (relative to the output directory or absolute).
    """

    measured: str
    verdict: str
    data: dict[str, Any] = field(default_factory=dict)
    figures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


@dataclass(frozen=True)
class Claim:
    """One checkable statement: what the paper says, where, how it is measured and what we expect."""

    id: str
    tags: tuple[str, ...]
    reference: str
    statement: str
    measures: str
    expected: str
    expected_verdict: str
    measure: Callable[..., Result]
    module: str = ""
    modes: tuple[str, ...] = MODES

    def matches(self, selector: str) -> bool:
        """True when ``selector`` is this claim's id, an id prefix ending at a dash/dot (``2.11``), or a tag."""
        if selector == self.id or selector in self.tags or selector == self.module:
            return True
        return self.id.startswith(selector) and self.id[len(selector)] in "-."


_REGISTRY: dict[str, Claim] = {}


def claim(
    *,
    id: str,
    tags: Iterable[str],
    reference: str,
    statement: str,
    measures: str,
    expected: str,
    expected_verdict: str,
    modes: Iterable[str] = MODES,
) -> Callable[[Callable[..., Result]], Callable[..., Result]]:
    """Register the decorated measurement function as a claim (see the module docstring).

    ``modes``: the audit modes that measure the claim; ``("full",)`` for a claim whose measurement does not fit
    the quick mode's time budget (it is listed, and named in the quick report as not run).
    """
    if expected_verdict not in VERDICTS:
        raise ValueError(f"expected_verdict of {id!r} must be one of {VERDICTS}, got {expected_verdict!r}")
    modes = tuple(modes)
    if not modes or any(m not in MODES for m in modes):
        raise ValueError(f"modes of {id!r} must be a non-empty subset of {MODES}, got {modes!r}")

    def register(fn: Callable[..., Result]) -> Callable[..., Result]:
        if id in _REGISTRY:
            raise ValueError(f"claim id {id!r} is registered twice ({_REGISTRY[id].measure.__module__} and {fn.__module__})")
        module = fn.__module__.rsplit(".", 1)[-1]
        _REGISTRY[id] = Claim(id, tuple(tags), reference, statement, measures, expected, expected_verdict, fn, module,
                              modes)
        return fn

    return register


_BROKEN: dict[str, str] = {}
"""Claim modules that failed to import, with the traceback: each is reported as a claim that raised."""


def _load_claim_modules() -> None:
    import verify.claims as package

    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        try:
            importlib.import_module(f"{package.__name__}.{info.name}")
        except Exception:  # noqa: BLE001 - one broken module must not hide the other claims
            _BROKEN[info.name] = traceback.format_exc()


def _broken_module_claim(module: str, trace: str) -> Claim:
    def measure(ctx):
        raise ImportError(f"claim module verify.claims.{module} failed to import:\n{trace}")

    return Claim(id=f"0-import-{module}", tags=("import",), reference="—", statement=f"verify.claims.{module} imports",
                 measures="import of the claim module", expected="imports", expected_verdict="holds",
                 measure=measure, module=module)


def _id_key(claim_id: str) -> tuple:
    """Sort ``2.9-x`` before ``2.11-y`` by the numeric section (registration order within a section)."""
    head = claim_id.partition("-")[0]
    return tuple(int(p) if p.isdigit() else 10**6 for p in head.split("."))


def all_claims() -> list[Claim]:
    """Every registered claim, ordered by its paper-notes §2 number (a stable sort keeps registration order)."""
    _load_claim_modules()
    broken = [_broken_module_claim(m, t) for m, t in _BROKEN.items()]
    return broken + sorted(_REGISTRY.values(), key=lambda c: _id_key(c.id))


def select(claims: list[Claim], only: Iterable[str] | None) -> list[Claim]:
    """The claims matching any selector in ``only`` (ids, id prefixes such as ``2.11``, tags, module names).

    Raises ``ValueError`` naming the selectors that match nothing.
    """
    if not only:
        return list(claims)
    selectors = [s for s in only if s]
    unknown = [s for s in selectors if not any(c.matches(s) for c in claims)]
    if unknown:
        raise ValueError(f"--only: no claim id, prefix or tag matches {unknown}; use --list to see them")
    return [c for c in claims if any(c.matches(s) for s in selectors)]
