"""The claim registry: every checkable statement of the papers is one :class:`Claim`.

A claim module (``verify/claims/*.py``) declares a claim with the :func:`claim` decorator on its measurement
function::

    @claim(
        id="lemma11-hessian-bound", formerly="2.4-lemma11",
        tags=("calculus", "hessian"),
        location="long version, Lemma 11, eq. (136)",
        scope="paper",
        quote="For all Z, sup over ‖Δ‖_F ≤ 1 of ‖∇²R(Z)[Δ]‖_F ≤ 9α/4.",
        statement="sup over ‖Δ‖_F ≤ 1 of ‖∇²R(Z)[Δ]‖_F / α is at most 9/4, for every Z",
        measures="sup of ‖∇²R(Z)‖/α over random and optimised Z",
        expected="≤ 9/4 (the lemma); `loose` when the supremum is below 2/3 of it",
        expected_verdict="loose",
        kind="theory", provenance="analysis",
    )
    def lemma11(ctx: Context) -> Result:
        ...

The measurement function receives a :class:`~verify.context.Context` and returns a :class:`Result`: the
measured figure(s), the verdict *computed from them* (see :mod:`verify.verdicts`) and the raw numbers, and
optionally a :class:`Headline`: the one number the report's summary shows for the claim.

``id`` names the papers' object the claim tests (``eq8-…``, ``fig15-…``; the long version's unless prefixed by
another source) and ``formerly`` its ids before (``--only`` accepts them); ``scope`` says what it tests
(:data:`SCOPES`: the papers' statement as printed, a replication at laptop scale whose ``setting`` names the scale,
or a probe of the audit's own whose ``setting`` names the construct); ``quote`` is the statement as the source prints
it and ``location`` where (starting with a label of :data:`SOURCES`).

``expected_verdict`` records the verdict the claim expects, so that the audit doubles as a regression check: one
verdict where the claim gives it at every base seed of the panel it was measured on (*stable*), or a **band**, the
tuple of verdicts seen over that panel (``("holds", "inconclusive")``: *seed-sensitive*, a claim near its boundary
whose verdict moves with the seeds, or with the last bits of a training's rounding, which differ between
processors). A band never holds both ``fails`` and ``holds`` (or ``loose``): a claim that moves between them is
made decisive, not banded (`Band`). ``expected_labels`` (optional) the labels it expects where one verdict covers
several outcomes (the joint rule's ``collapse`` and ``no compression`` both fail): a regular expression the
result's ``labels`` must match in full, a band of labels written as alternatives (``(collapse|no compression)``);
``provenance`` says where that expectation comes from (:data:`PROVENANCES`): an analysis written before measuring,
or a measurement — for the latter "as expected" is a regression check only. ``kind`` says what sort of check the
claim is (:data:`KINDS`). Both are required, and put last in each decorator.

A ``paper`` claim expected to fail is an error of the papers: it names the kind of error (``error_kind``, one of
:data:`ERROR_KINDS`: an erratum or a substantive error), the ``correction`` and a ``witness``: a function of one
argument, ``corrected``, that checks the printed statement (``False``) or the corrected one (``True``) in seconds and
returns a :class:`Check`; it fails on the first and holds on the second (``python -m verify.errata`` runs them and
writes the errors as a dataset).
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verify.context import MODES, RESULTS, stored_file
from verify.statistics import Interval, interval

VERDICTS = ("holds", "fails", "loose", "inconclusive")
"""``holds``: the statement is confirmed; ``fails``: it is contradicted by the measurement; ``loose``: it is
true, but with a bound the data beat by a wide margin; ``inconclusive``: a comparison over seeds whose 95% interval
contains its boundary (`verify.statistics.compare`)."""

KINDS = {
    "identity": ("identity or cross-check", "two implementations, or the two sides of an identity, agree to round-off"),
    "printed": ("printed number or formula", "a number or formula printed in the papers, checked against a "
                "computation, which can only hold or fail"),
    "control": ("control comparison", "a comparison with a trivial control"),
    "theory": ("theory on synthetic data", "a property of the theory, measured on synthetic data"),
    "ideal": ("ideal CRATE stack", "a hand-built CRATE stack on synthetic data"),
    "trained": ("trained network", "a network trained on data, against its initialisation or a baseline"),
}
"""What sort of check a claim is: kind → (short name, description); the report counts verdicts per kind, in this
order."""

SCOPES = {
    "paper": ("the papers' statements", "the papers' statement as printed: an identity, a formula, a printed number, "
              "a theorem's conclusion under its hypotheses; a `fails` here is an error of the papers"),
    "replication": ("replications at laptop scale", "the papers' statement at their protocol, replicated at the "
                    "scale the claim's setting names (data, d, L, epochs); a `fails` here does not replicate at "
                    "that scale"),
    "probe": ("the audit's own probes", "a construct, a control, a stricter reading or a baseline of the audit's "
              "own, which the papers do not state; a `fails` here is a finding of the audit"),
    "versions": ("differences between the versions", "one object as two versions of the papers print it (the "
                 "NeurIPS and the long version): a `fails` records a difference between them, neither an error of "
                 "either version nor a finding of the audit"),
}
"""What a claim tests: scope → (heading, description). The headline counts verdicts per scope, the papers'
statements first; only a ``paper`` ``fails`` is called an error of the papers."""

ERROR_KINDS = {
    "erratum": ("erratum", "errata", "a printed slip — a typo, a printed number or formula, a caption, an off-by-one, "
                "a count"),
    "substantive": ("substantive error", "substantive errors", "a step of an argument or a claimed behaviour"),
}
"""What kind of error a ``paper`` claim expected to fail records: kind → (singular, plural, description). The headline
counts the errors of the papers per kind (`errors_of_kind`)."""


def errors_of_kind(kind: str, n: int) -> str:
    """``7 errata``, ``1 substantive error``: ``n`` errors of ``kind`` (a kind not in `ERROR_KINDS` by its name)."""
    singular, plural, _ = ERROR_KINDS.get(kind, (kind, kind, ""))
    return f"{n} {singular if n == 1 else plural}"


SOURCES = {
    "long version": "White-Box Transformers via Sparse Rate Reduction: Compression Is All There Is? (Yu, Buchanan, "
                    "Pai, Chu, Wu, Tong, Bai, Zhai, Haeffele, Ma; JMLR 2024, arXiv 2311.13110 v4)",
    "NeurIPS 2023": "White-Box Transformers via Sparse Rate Reduction (Yu, Buchanan, Pai, Chu, Wu, Tong, Haeffele, "
                    "Ma; NeurIPS 2023, arXiv 2306.01129)",
    "ToST": "Token Statistics Transformer: Linear-Time Attention via Variational Rate Reduction (Wu, Ding, Lu, Pai, "
            "Zhang, Wang, Yu, Ma, Haeffele; ICLR 2025, arXiv 2412.17810), and its code (github.com/RobinWu218/ToST)",
    "SimDINO": "Simplifying DINO via Coding Rate Regularization (Wu, Zhang, Pai, Wang, Singh, Yang, Gao, Ma; ICML "
               "2025, arXiv 2502.10385), and its code (github.com/RobinWu218/SimDINO)",
}
"""The sources a claim's ``location`` starts with (label → the work); docs/papers.md lists them."""

QUOTE_CHARS = 240
"""The longest ``quote`` (≈ 2 lines): the statement as the source prints it, math restored where the text lost it."""

PROVENANCES = {
    "analysis": "set before measuring, from an analysis: the paper's derivation or statement, an identity, a closed "
                "form",
    "measurement": "set from a measurement: 'as expected' is a regression check only",
}
"""Where a claim's expected verdict comes from."""


def _check(claim_id: str, name: str, value: str, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name} of {claim_id!r} must be one of {tuple(allowed)}, got {value!r}")


PANEL = ("Seed-sensitive over the panel (python -m verify.panel: base seeds 0–9, 0–4 also with training perturbed "
         "by one unit in the last place, 0 by two, three and four; 18 quick audits): ")
"""How a seed-sensitive claim's reason introduces where its verdict moved over the panel its `Band` was recorded on
(docs/audit.md, "Reproducibility")."""
AGREE = ("holds", "loose")
"""The verdicts that say the statement is true (``loose``: true with room to spare); a band never holds one of them
together with ``fails``."""


@dataclass(frozen=True)
class Band:
    """The verdicts a claim is expected to give: one (stable) or several seen over a panel of base seeds
    (seed-sensitive). A verdict inside the band matches the expectation; one outside it, an error, or a band that
    would hold both ``fails`` and a verdict of `AGREE` does not (refused here, at registration)."""

    verdicts: tuple[str, ...]

    @classmethod
    def of(cls, claim_id: str, name: str, value: str | Iterable[str]) -> Band:
        """``value`` (a verdict, or an iterable of them) as a band of claim ``claim_id``'s field ``name``; ValueError
        naming both for an unknown verdict, an empty band, a repeated verdict or a band across fails and holds."""
        verdicts = (value,) if isinstance(value, str) else tuple(value)
        for v in verdicts:
            _check(claim_id, name, v, VERDICTS)
        if not verdicts or len(set(verdicts)) != len(verdicts):
            raise ValueError(f"{name} of {claim_id!r}: expected one verdict or a band of distinct verdicts, got "
                             f"{verdicts!r}")
        if "fails" in verdicts and set(AGREE) & set(verdicts):
            raise ValueError(f"{name} of {claim_id!r}: a band {verdicts!r} spans fails and holds; a claim that moves "
                             "between them is made decisive (more seeds, a larger effect), not banded")
        return cls(tuple(sorted(verdicts, key=VERDICTS.index)))

    @property
    def stable(self) -> bool:
        """One verdict: the claim gave it at every base seed of its panel."""
        return len(self.verdicts) == 1

    def __contains__(self, verdict: object) -> bool:
        return verdict in self.verdicts

    def __str__(self) -> str:
        """``holds``, or ``holds or inconclusive`` for a band."""
        return " or ".join(self.verdicts)


def deciding(comparisons) -> int:
    """The index of the `verify.statistics.compare` result that decides an every-item verdict
    (`verify.statistics.every`): the first that fails, else the first inconclusive, else the one nearest its
    boundary."""
    comparisons = list(comparisons)
    for verdict in ("fails", "inconclusive"):
        found = [i for i, c in enumerate(comparisons) if c.verdict == verdict]
        if found:
            return found[0]
    return int(np.argmin([min(abs(c.difference.low - c.boundary), abs(c.difference.high - c.boundary))
                          for c in comparisons]))


@dataclass(frozen=True)
class Headline:
    """The one number the report's summary shows for a claim: ``value`` named by ``label`` (e.g. "trained − init,
    layer 3"), with its 95% interval [``low``, ``high``] over ``seeds`` seeds where there is one."""

    label: str
    value: float
    low: float | None = None
    high: float | None = None
    seeds: int | None = None

    @classmethod
    def of(cls, label: str, interval: Interval, scale: float = 1.0) -> Headline:
        """From a :class:`verify.statistics.Interval` (its mean, 95% interval and number of seeds), each value times
        ``scale`` (e.g. 100 for fractions shown as points)."""
        return cls(label, scale * interval.mean, scale * interval.low, scale * interval.high, interval.n)

    @classmethod
    def from_seeds(cls, label: str, values) -> Headline:
        """One value per seed: their mean with its 95% t-interval, or the value alone for one seed."""
        values = np.asarray(values, dtype=float).ravel()
        return cls.of(label, interval(values)) if values.size > 1 else cls(label, float(values[0]), seeds=1)

    @classmethod
    def of_judgement(cls, label: str, judgement) -> Headline:
        """From a `verify.joint.Judgement`: its label and the difference of the measure that decides it."""
        name, comparison = judgement.deciding()
        return cls.of(f"{label} {judgement.label}, {name}", comparison.difference)

    @classmethod
    def of_layers(cls, label: str, comparisons) -> Headline:
        """From per-layer `verify.statistics.compare` results (as `verify.statistics.every` decides them): the layer
        that decides the verdict — the first that fails, else the first inconclusive, else the one nearest its
        boundary — named in the label (``label, layer ℓ``)."""
        comparisons = list(comparisons)
        layer = deciding(comparisons)
        return cls.of(f"{label}, layer {layer + 1}", comparisons[layer].difference)

    def text(self) -> str:
        """``label: value [low, high]`` (two significant digits with an interval, three without)."""
        if self.low is None or self.high is None:
            return f"{self.label}: {self.value:.3g}"
        return f"{self.label}: {self.value:+.2g} [{self.low:.2g}, {self.high:.2g}]"


WITNESS_SEED = 0
"""The seed of every witness's draws: a witness is a demonstration, the same numbers at every run."""


@dataclass(frozen=True)
class Check:
    """What a witness (`Claim.witness`) found for one statement, printed or corrected: whether it ``holds``, and the
    ``numbers`` that decide it (JSON-serialisable)."""

    holds: bool
    numbers: dict[str, Any]


@dataclass
class Result:
    """What a measurement function returns.

    ``measured``: the measured figure(s) as one short line for the table; ``verdict``: one of :data:`VERDICTS`,
    computed from the numbers; ``data``: the numbers themselves (JSON-serialisable) for ``report.json``;
    ``figures``: paths of the PNG files written (relative to the output directory or absolute); ``headline``: the
    number the report's summary shows (optional; the summary falls back to ``measured``); ``labels``: the labels
    behind the verdict, e.g. the joint rule's per layer (`verify.joint.layer_labels`), which a claim's
    ``expected_labels`` are compared with.
    """

    measured: str
    verdict: str
    data: dict[str, Any] = field(default_factory=dict)
    figures: list[str] = field(default_factory=list)
    headline: Headline | None = None
    labels: str | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


@dataclass(frozen=True)
class Claim:
    """One checkable statement: what the paper says, where, how it is measured, what we expect and why (the
    ``provenance`` of the expectation), and what ``kind`` of check it is."""

    id: str
    tags: tuple[str, ...]
    location: str
    statement: str
    measures: str
    expected: str
    expected_verdict: Band
    kind: str
    provenance: str
    measure: Callable[..., Result]
    module: str = ""
    modes: tuple[str, ...] = MODES
    full_verdict: Band | None = None
    committed: str | None = None
    scope: str | None = None
    quote: str | None = None
    setting: str | None = None
    formerly: tuple[str, ...] = ()
    expected_labels: str | None = None
    full_labels: str | None = None
    error_kind: str | None = None
    correction: str | None = None
    witness: Callable[[bool], Check] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "expected_verdict", Band.of(self.id, "expected_verdict", self.expected_verdict.verdicts
                                                             if isinstance(self.expected_verdict, Band)
                                                             else self.expected_verdict))
        if self.full_verdict is not None and not isinstance(self.full_verdict, Band):
            object.__setattr__(self, "full_verdict", Band.of(self.id, "full_verdict", self.full_verdict))
        self._check_error()
        if self.scope is not None:
            _check(self.id, "scope", self.scope, SCOPES)
            if self.scope != "paper" and not self.setting:
                raise ValueError(f"claim {self.id!r}: a {self.scope} claim names its setting (the scale or the "
                                 "construct it measures)")
        if self.quote is not None and not 0 < len(self.quote) <= QUOTE_CHARS:
            raise ValueError(f"quote of {self.id!r}: expected 1 to {QUOTE_CHARS} characters, got {len(self.quote)}")
        if self.full_verdict is not None:
            if self.modes != MODES:
                raise ValueError(f"full_verdict of {self.id!r} is for a claim measured in both modes, got modes "
                                 f"{self.modes!r}")
        _check(self.id, "kind", self.kind, KINDS)
        _check(self.id, "provenance", self.provenance, PROVENANCES)
        if self.kind == "printed":
            for band in (self.expected_verdict, self.full_verdict or self.expected_verdict):
                if not band.stable:
                    raise ValueError(f"expected_verdict of {self.id!r}: a printed-number check gives one verdict at "
                                     f"every seed, got the band {band.verdicts!r}")
                _check(self.id, "expected_verdict (a printed-number check)", band.verdicts[0], ("holds", "fails"))
        if not self.modes or any(m not in MODES for m in self.modes):
            raise ValueError(f"modes of {self.id!r} must be a non-empty subset of {MODES}, got {self.modes!r}")

    def _check_error(self) -> None:
        """An error kind, a correction and a witness together, on a ``paper`` claim expected to fail (in either mode),
        and only there."""
        expects_failure = self.may_give("fails")
        named = [name for name in ("error_kind", "correction", "witness") if getattr(self, name) is not None]
        if named and self.scope != "paper":
            raise ValueError(f"claim {self.id!r}: {', '.join(named)} is for a paper claim (an error of the papers), "
                             f"got scope {self.scope!r}")
        if named and not expects_failure:
            raise ValueError(f"claim {self.id!r}: {', '.join(named)} is for a claim expected to fail, got "
                             f"expected verdict {str(self.expected_verdict)!r}")
        if self.scope == "paper" and expects_failure and len(named) < 3:
            missing = [n for n in ("error_kind", "correction", "witness") if n not in named]
            raise ValueError(f"claim {self.id!r}: a paper claim expected to fail is an error of the papers and names "
                             f"its {', '.join(missing)} ({' or '.join(ERROR_KINDS)}, the corrected statement, a "
                             "witness function)")
        if self.error_kind is not None:
            _check(self.id, "error_kind", self.error_kind, ERROR_KINDS)
        if self.witness is not None and not callable(self.witness):
            raise ValueError(f"witness of {self.id!r} must be a function of `corrected`, got {self.witness!r}")

    def may_give(self, verdict: str) -> bool:
        """Whether ``verdict`` lies in the claim's expected band in either mode."""
        return any(verdict in band for band in (self.expected_verdict, self.full_verdict) if band is not None)

    def expected_in(self, mode: str) -> Band:
        """The expected verdicts of a ``mode`` audit: ``full_verdict`` under --full where one is given (a claim whose
        quick runs resolve less or otherwise than the preset's), else ``expected_verdict``."""
        return self.full_verdict if mode == "full" and self.full_verdict is not None else self.expected_verdict

    def labels_match(self, result: Result | None, mode: str) -> bool:
        """Whether ``result``'s labels are those expected in ``mode`` (``expected_labels`` in quick mode,
        ``full_labels`` under --full), a regular expression matched in full (a plain string of labels matches
        itself; ``(collapse|no compression)`` accepts either where a label sits at the rule's boundary and moves
        with the base seed); True where none are expected."""
        expected = self.full_labels if mode == "full" else self.expected_labels
        return expected is None or (result is not None and result.labels is not None
                                    and re.fullmatch(expected, result.labels) is not None)

    def matches(self, selector: str) -> bool:
        """True when ``selector`` is this claim's id or a former id of it, a prefix of either ending at a dash/dot
        (``fig15``; a former ``2.11``), a tag, or the claim module's name."""
        if selector == self.id or selector in self.formerly or selector in self.tags or selector == self.module:
            return True
        return any(name.startswith(selector) and name[len(selector)] in "-." for name in (self.id, *self.formerly))


_REGISTRY: dict[str, Claim] = {}


def claim(
    *,
    id: str,
    tags: Iterable[str],
    location: str,
    statement: str,
    measures: str,
    expected: str,
    expected_verdict: str | tuple[str, ...],
    modes: Iterable[str] = MODES,
    kind: str,
    provenance: str,
    full_verdict: str | tuple[str, ...] | None = None,
    committed: str | None = None,
    scope: str,
    quote: str,
    setting: str | None = None,
    formerly: str | Iterable[str] = (),
    expected_labels: str | None = None,
    full_labels: str | None = None,
    error_kind: str | None = None,
    correction: str | None = None,
    witness: Callable[[bool], Check] | None = None,
) -> Callable[[Callable[..., Result]], Callable[..., Result]]:
    """Register the decorated measurement function as a claim (see the module docstring).

    ``modes``: the audit modes that measure the claim; ``("full",)`` for a claim whose measurement does not fit
    the quick mode's time budget (it is listed, and named in the quick report as not run). ``kind``: one of
    :data:`KINDS`; ``provenance``: one of :data:`PROVENANCES`; ``expected_verdict``: a verdict, or a band of them
    (`Band`: the verdicts seen over a panel of base seeds, ``python -m verify.panel``); ``full_verdict``: the
    verdict (or band) expected under --full where it differs from the quick mode's ``expected_verdict`` (the
    ``expected`` text says why);
    ``committed``: the replication (``results/NAME``, `verify.committed`) whose committed runs a ``--full``-only
    trained claim reads in quick mode — measured in both modes once its file (``results/NAME/runs.json``,
    `verify.context.stored_file`) exists, under --full only before; ``expected_labels`` / ``full_labels``: the
    `Result.labels` expected in quick mode / under --full (optional; a claim whose labels differ from them does not
    match its expectation, verdict alike); ``scope``, ``quote``, ``location``, ``setting``: what the claim tests
    and where the papers state it (`SCOPES`, `SOURCES`); ``formerly``: its former ids; ``error_kind``,
    ``correction``, ``witness``: for a ``paper`` claim expected to fail, the kind of error (`ERROR_KINDS`), the
    corrected statement and the function that checks both (see the module docstring). Registration refuses an
    unknown verdict, mode, kind, provenance, scope or error kind, an error kind on a claim that is not a paper claim
    expected to fail and one missing on such a claim (``ValueError``, see :class:`Claim`), and a function that does
    not take the context alone (``TypeError``).
    """
    modes = tuple(modes)
    if committed is not None:
        if modes != ("full",):
            raise ValueError(f"claim {id!r}: committed is for a claim that trains under --full only, got modes {modes!r}")
        modes = MODES if stored_file(committed, RESULTS).is_file() else modes
        measures += (f"; trained under --full, read from the committed runs of results/{committed} in quick mode "
                     f"(python -m verify.record {committed} records them)")
    spec = dict(id=id, tags=tuple(tags), location=location, statement=statement, measures=measures,
                expected=expected, expected_verdict=Band.of(id, "expected_verdict", expected_verdict), kind=kind,
                provenance=provenance, modes=modes,
                full_verdict=None if full_verdict is None else Band.of(id, "full_verdict", full_verdict),
                committed=committed, scope=scope, quote=quote,
                setting=setting, formerly=(formerly,) if isinstance(formerly, str) else tuple(formerly),
                expected_labels=expected_labels, full_labels=full_labels, error_kind=error_kind,
                correction=correction, witness=witness)

    def register(fn: Callable[..., Result]) -> Callable[..., Result]:
        required = [p for p in inspect.signature(fn).parameters.values() if p.default is p.empty
                    and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(required) != 1:  # the runner calls measure(ctx): a decorator left on a helper would raise at run time
            raise TypeError(f"claim {id!r}: the decorated {fn.__qualname__} must take the context alone, got "
                            f"parameters {[p.name for p in required]}")
        if id in _REGISTRY:
            raise ValueError(f"claim id {id!r} is registered twice ({_REGISTRY[id].measure.__module__} and "
                             f"{fn.__module__})")
        _REGISTRY[id] = Claim(**spec, measure=fn, module=fn.__module__.rsplit(".", 1)[-1])
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

    return Claim(id=f"0-import-{module}", tags=("import",), location="—", statement=f"verify.claims.{module} imports",
                 measures="import of the claim module", expected="imports", expected_verdict="holds",
                 kind="identity", provenance="analysis", measure=measure, module=module, scope="probe",
                 setting="the audit's own code")


MODULE_ORDER = ("calculus", "compression", "sparsification", "cross_implementation", "denoising", "theorem16",
                "diffusion", "decoder", "params", "layers", "digits", "figures", "mae", "dino", "language",
                "segmentation", "ablations", "tssa")
"""The claim modules in the order of the papers: the long version's Sec. 2 (coding rates, MSSA, ISTA, the layer),
Sec. 3 (denoising, Theorem 16, diffusion, the decoder), Sec. 4 and App. C (the models and their experiments),
then ToST. A claim module not listed comes last."""


def _order(claim: Claim) -> int:
    return MODULE_ORDER.index(claim.module) if claim.module in MODULE_ORDER else len(MODULE_ORDER)


def all_claims() -> list[Claim]:
    """Every registered claim, in the papers' order (`MODULE_ORDER`; within a module, as registered); a claim module
    that fails to import comes first, as a claim that raises."""
    _load_claim_modules()
    broken = [_broken_module_claim(m, t) for m, t in _BROKEN.items()]
    return broken + sorted(_REGISTRY.values(), key=_order)


def select(claims: list[Claim], only: Iterable[str] | None) -> list[Claim]:
    """The claims matching any selector in ``only``: a claim's id or former id selects that claim alone; otherwise an
    id prefix (``fig15``), a tag or a module name selects every claim it matches.

    Raises ``ValueError`` naming the selectors that match nothing.
    """
    if not only:
        return list(claims)
    selectors = [s for s in only if s]
    unknown = [s for s in selectors if not any(c.matches(s) for c in claims)]
    if unknown:
        raise ValueError(f"--only: no claim id, prefix or tag matches {unknown}; use --list to see them")
    chosen: set[str] = set()
    for s in selectors:
        named = [c for c in claims if s == c.id or s in c.formerly]
        for c in named:
            if s != c.id:
                print(f"note: claim {s} is now {c.id}", file=sys.stderr)
        matched = named or [c for c in claims if c.matches(s)]
        if not named and not any(c.id.startswith(s) or s in c.tags or s == c.module for c in matched):
            print(f"note: {s} selects former ids, now {', '.join(c.id for c in matched)}", file=sys.stderr)
        chosen.update(c.id for c in matched)
    return [c for c in claims if c.id in chosen]
