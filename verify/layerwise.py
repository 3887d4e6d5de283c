"""The layer-wise family — "do CRATE layers compress and sparsify?" (long version Sec. 4.2, Figs. 14–15 and footnote
17; App. C.9, Fig. 26) — asked once, of every subject: the audit's trained runs and any checkpoint a user brings.

**A row** (`Row`) names

* its *object*: what is measured (`Object`: a population of the audit's trained runs at one of their models — the
  trained digits CRATE, a DINO teacher, epoch 30 of a recorded run — or "this network" of a checkpoint);
* its *quantity* (`QUANTITIES`): R^c under the authors' protocol (the per-head unit codes of LN1(Z^ℓ), ε² = 0.01),
  under the paper's formula (eq. (13) of Z^{ℓ+1/2}, unnormalised), the joint measure (`verify.joint`: compression
  told apart from collapse), the sparsity ‖Z^{ℓ+1}‖₀/(dn), or Fig. 26's fraction of entries with |Z^{ℓ+1}| ≥ τ;
* its *control* (`Control`): the run's own initialisation, random initialisations of its architecture, another
  network (a ViT, another checkpoint), an earlier epoch — or none, for a trend with depth;
* its *rule* (`RULES`): every layer below the control's; every layer but the last (footnote 17 exempts it: a head
  mixes its features); falls with depth from layer 2 (from layer 1 to L − 1 for the sparsity, footnote 17); falls
  further than the control's from layer 1 to L, or is sparser for every τ (Fig. 26).

`name` gives a row its id — the audit's claim ids for its trained runs (``fig15-digits-official``), the network
audit's ids stating the claim (``rc-below-random-init-official``) — and `decide` decides it, from the `Sample` a
subject supplies for it, into a `verify.registry.Result`: one function for every subject. A claim module registers
its rows (`register`: the row, its expectation as data — a verdict or a band, labels — and the claim's words); the
network audit (`verify.checkpoint`, ``python -m verify.network``) instantiates the same rows for each control of a
checkpoint.

**Subjects** supply the numbers, one array (units, L) per measure and model: `Seeds` the audit's trained runs (the
unit is the seed; a run paired with its own initialisation or earlier epoch, another architecture's runs by
Welch's interval), `verify.checkpoint.Checkpoint` a checkpoint (the unit is the input, paired over the inputs both
networks saw; against random initialisations of its architecture the unit is the seed: this network's mean over
the inputs against each seed's, by the prediction interval, `verify.statistics.compare_one`). A subject needs only
``sample(row) -> Sample``.

**Error rates.** A row's verdict is one claim, whatever its number of layers and measures, and controls its own
error rate α = 5% (`verify.statistics`, its module docstring): it *holds* when every comparison it decides on holds
at 95% — an intersection-union test, wrong with chance ≤ α/2 with no split — and *fails* when any fails, each
comparison's refuting side read at its Bonferroni share α/(2m) of the m comparisons that could refute it (``union``:
the layers decided, three per layer for the joint measure — a collapse, specific R^c higher, alignment lower — and
the τ of Fig. 26). A network drawn from the population of its controls is thus called different by a row with
chance ≤ α, per row (`tests/verify/test_layerwise_error_rates.py` measures it by simulation and on random CRATEs).

**Adding a row**: a quantity is an entry of `QUANTITIES` (its measures, which each subject supplies); a control is a
`Control` (and, on a checkpoint, one network loaded — `verify.checkpoint`); a row on the audit's runs is one
`register` call in its claim module. No id, verdict rule or report is written by hand.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from crate_nn.analysis.diagnostics import THRESHOLDS
from verify.context import Context
from verify.joint import SIDES, Sizes, compresses, describe, every_judgement, layer_labels
from verify.registry import Headline, Result, claim, deciding
from verify.statistics import Comparison, brief, compare, compare_one, every

JOINT = (*SIDES, "rate_reduction", "nonnegative")
"""The joint measure's quantities a subject supplies (`verify.joint.compresses` reads them)."""


@dataclass(frozen=True)
class Quantity:
    """What a row measures: ``name`` (how the texts name it), the ``measures`` a subject supplies for it (one array
    (units, L) each) and the ``digits`` its per-layer means are shown with. Lower is more compressed, or sparser."""

    name: str
    measures: tuple[str, ...]
    digits: int = 3


QUANTITIES = {
    "official": Quantity("R^c (authors' protocol)", ("official",)),
    "paper": Quantity("R^c (paper, eq. 13)", ("paper",)),
    "joint": Quantity("the joint measure", JOINT),
    "sparsity": Quantity("‖Z^{ℓ+1}‖₀/(dn)", ("sparsity",)),
    "above": Quantity("the fraction of entries with |Z^{ℓ+1}| ≥ τ", tuple(f"above_{tau:g}" for tau in THRESHOLDS)),
}
"""The quantities of the family (module docstring): key → `Quantity`."""

SHOWN = {"run init": "the run's starting weights"}
"""How the reports name a control whose label is terse (a run directory's own initialisation)."""
CONTROL_KINDS = {"init": "its own initialisation", "random": "random initialisations of its architecture",
                 "network": "another network", "epoch": "an earlier epoch of its training"}


@dataclass(frozen=True)
class Control:
    """What a row compares its object with: ``kind`` (`CONTROL_KINDS`), ``label`` (how the texts name it: ``init``,
    ``random init``, ``epoch 1``, ``ViT``, the name a user gave), ``model`` (the subject's key of its numbers;
    default the label) and ``word`` (its word in a registered row's id: ``epoch1``, ``vit``; none for a run's own
    initialisation)."""

    kind: str
    label: str
    model: str = ""
    word: str = ""

    def __post_init__(self) -> None:
        if self.kind not in CONTROL_KINDS:
            raise ValueError(f"kind: expected one of {tuple(CONTROL_KINDS)}, got {self.kind!r}")
        object.__setattr__(self, "model", self.model or self.label)


@dataclass(frozen=True)
class Object:
    """What a row measures: ``label`` (how the texts name it: ``trained``, ``dino``, ``epoch 30``, ``this
    network``), ``model`` (the subject's key of its numbers), ``subject`` (the context → the `Seeds` that supply a
    registered row's numbers; None for a checkpoint, which supplies them itself), and how a registered row's id reads
    (`name`): its ``prefix`` (``fig15-digits``; None: the network audit's ids, which state the claim), the vocabulary
    ``words`` naming its quantities (`WORDS`) and a ``suffix`` (``-short``)."""

    label: str
    model: str = "trained"
    subject: Callable[[Context], Seeds] | None = None
    prefix: str | None = None
    words: str = "short"
    suffix: str = ""


RULES = {
    "every": "every layer",
    "footnote17": "every layer but the last (footnote 17 exempts it: its features are mixed for the head)",
    "falls": "falls with depth from layer 2 to layer L",
    "falls17": "falls with depth from layer 1 to layer L − 1 (footnote 17 exempts the last)",
    "further": "falls further from layer 1 to L than the control's, (m_1 − m_L)/m_1 (Fig. 26)",
    "denser": "the control's mean over layers higher for every τ (Fig. 26)",
}
"""The rules of the family: key → what it asks (`decide`)."""
ALONE = ("falls", "falls17")
"""The rules that read the object alone (a trend with depth: no control)."""


@dataclass(frozen=True)
class Row:
    """One question of the family (module docstring): an object, a quantity (`QUANTITIES`), a control (None for a
    rule of `ALONE`) and a rule (`RULES`)."""

    object: Object
    quantity: str
    control: Control | None
    rule: str

    def __post_init__(self) -> None:
        if self.quantity not in QUANTITIES:
            raise ValueError(f"quantity: expected one of {tuple(QUANTITIES)}, got {self.quantity!r}")
        if self.rule not in RULES:
            raise ValueError(f"rule: expected one of {tuple(RULES)}, got {self.rule!r}")
        if (self.control is None) != (self.rule in ALONE):
            raise ValueError(f"rule {self.rule!r}: a control is for the rules comparing with one, not {ALONE}")


# --------------------------------------------------------------------------------------------- names
WORDS = {
    "short": {"official": "official", "paper": "paper", "joint": "joint", "sparsity": "sparsity"},
    "system": {"official": "compression-official", "paper": "compression-paper", "joint": "joint",
               "sparsity": "sparsity"},
    "fig26": {"official": "compression", "sparsity": "sparsity"},
}
"""How a registered row's id names its quantity, per vocabulary (`Object.words`)."""
STATED = {
    ("falls", "official"): "rc-falls-official", ("falls", "paper"): "rc-falls-paper",
    ("falls17", "sparsity"): "sparsity-rises",
    ("every", "official"): "rc-below-{control}-official", ("every", "paper"): "rc-below-{control}-paper",
    ("footnote17", "joint"): "joint-{control}", ("footnote17", "sparsity"): "sparser-than-{control}",
    ("further", "official"): "fig26-compression-vs-{control}", ("denser", "above"): "fig26-sparsity-vs-{control}",
}
"""The network audit's ids (an object without a prefix): (rule, quantity) → the claim stated, over its control."""


def slug(label: str) -> str:
    """``random-init`` of ``random init``: lower case, runs of other characters than letters and digits one dash."""
    return "-".join("".join(ch if ch.isalnum() else " " for ch in label.lower()).split())


def name(row: Row) -> str:
    """The id of ``row``: its object's prefix, its control's word and its quantity's word (`WORDS`), then the
    object's suffix (``fig15-digits-epoch1-official``, ``fig15-dino-compression-paper-short``); for the network
    audit's object (no prefix) the claim stated over the control's `slug` (`STATED`: ``joint-random-init``)."""
    if row.object.prefix is None:
        return STATED[row.rule, row.quantity].format(control=slug(row.control.label) if row.control else "")
    words = WORDS[row.object.words][row.quantity]
    return "-".join(p for p in (row.object.prefix, row.control.word if row.control else "", words) if p) \
        + row.object.suffix


def statement(row: Row) -> str:
    """What ``row`` states, in words (the network audit's statements; a registered claim states its own)."""
    q, c = QUANTITIES[row.quantity], row.control
    if row.rule in ALONE:
        return (f"{q.name} falls with depth, from layer 2 to layer L (Fig. 15: the compression term improves as ℓ "
                "increases)" if row.rule == "falls" else "The representations become sparser with depth: "
                f"{q.name} falls from layer 1 to layer L − 1 (footnote 17 exempts the last, mixed for the classifier)")
    if row.rule == "further":
        return (f"This network's {q.name} falls further from layer 1 to L than {c.label}'s (Fig. 26: a ViT does not "
                "optimise the compression term)")
    if row.rule == "denser":
        return f"{c.label}'s outputs are denser: {q.name} (mean over layers) is higher for every τ (Fig. 26)"
    where = "every layer" if row.rule == "every" else "every layer but the last (footnote 17)"
    if row.quantity == "joint":
        return (f"The layers compress the tokens relative to the {c.label}, jointly: onto their own subspaces (specific "
                f"R^c lower, alignment higher), not by collapse, at {where} from layer 2")
    return f"{q.name} lies below the {c.label}'s at {where}"


def criterion(row: Row) -> str:
    """When ``row`` holds, fails and is inconclusive (a registered claim's ``expected`` starts with it)."""
    c = row.control
    if row.rule in ALONE:
        return ("`holds` when the 95% interval of the last layer minus the first it reads lies below 0, `fails` when it "
                "lies above 0, `inconclusive` otherwise")
    versus = f"{row.object.label} − {c.label}"
    if row.rule == "further":
        return f"`holds` when the 95% interval of the fall, {versus}, lies above 0, `fails` below 0"
    if row.rule == "denser":
        return (f"`holds` when the 95% interval of {c.label} − {row.object.label} lies above 0 for every τ, `fails` "
                "when one lies below 0 at its share of the level (Bonferroni over the τ), `inconclusive` otherwise")
    layers = "layer 2 to L" if row.quantity == "joint" else "layer 1 to L"
    layers = layers.replace("L", "L − 1") if row.rule == "footnote17" else layers
    if row.quantity == "joint":
        return (f"`holds` when the joint rule (verify.joint, the collapse floor at the size measured) credits "
                f"compression to {versus} at every layer from {layers} (layer 1 reported apart"
                + (", and the last, footnote 17" if row.rule == "footnote17" else "")
                + "), `fails` when it finds a collapse or no compression at one — each refuting interval at its share "
                "of the level, three per layer (Bonferroni) —, `inconclusive` otherwise or when no layer is left")
    return (f"`holds` when the 95% interval of {versus} lies below 0 at every layer from {layers}"
            + (" (the last reported apart)" if row.rule == "footnote17" else "")
            + ", `fails` when one lies above 0 at its share of the level (Bonferroni over those layers), "
            "`inconclusive` otherwise")


# --------------------------------------------------------------------------------------------- numbers
PAIRINGS = {"paired": "paired (a unit saw both sides)", "welch": "independent populations (Welch)",
            "population": "one network against a population of seeds (prediction interval)",
            "alone": "the object alone (its layers against each other)"}


@dataclass(frozen=True)
class Sample:
    """What a subject supplies for one row: ``this`` (the object's values) and ``other`` (the control's; None for a
    rule of `ALONE`), measure → (units, L) arrays; the ``pairing`` of their units (`PAIRINGS`; ``population``:
    ``this`` holds one row, the network's mean over the units the controls saw, and ``other`` one row per seed);
    ``unit`` (what one unit is, in words) and the ``sizes`` measured (`verify.joint.Sizes`, whose collapse floor the
    joint measure reads; or the floor itself)."""

    this: Mapping[str, np.ndarray]
    other: Mapping[str, np.ndarray] | None
    pairing: str
    unit: str
    sizes: Sizes | float | None = None

    def __post_init__(self) -> None:
        if self.pairing not in PAIRINGS:
            raise ValueError(f"pairing: expected one of {tuple(PAIRINGS)}, got {self.pairing!r}")

    @property
    def depth(self) -> int:
        return next(iter(self.this.values())).shape[1]

    def at(self, side: str, layer: int, measures: Sequence[str]) -> dict[str, np.ndarray]:
        """Per-unit values of ``measures`` (those the side has) at ``layer`` (1-based) of ``side`` (this, other)."""
        values = getattr(self, side)
        return {m: np.asarray(values[m], dtype=float)[:, layer - 1] for m in measures if m in values}

    def compare(self, measure: str, layer: int, *, union: int = 1) -> Comparison:
        """This − the control, below 0, at ``layer`` (1-based), by the rule of the pairing."""
        a, b = (self.at(side, layer, [measure])[measure] for side in ("this", "other"))
        if self.pairing == "population":
            return compare_one(float(a[0]), b, direction="below", union=union)
        return compare(a, b, direction="below", paired=self.pairing == "paired", union=union)


@dataclass(frozen=True)
class Seeds:
    """The audit's trained runs as a subject: ``models`` maps a model of the runs (``trained``, ``init``,
    ``epoch 1``; another architecture's runs: ``ViT``) to measure → (seeds, L); ``sizes`` the size measured (the
    joint's floor). A control of kind ``network`` is another population of runs (Welch); the others are the same
    runs at another model (paired by seed)."""

    models: Mapping[str, Mapping[str, np.ndarray]]
    sizes: Sizes | None = None

    def sample(self, row: Row) -> Sample:
        measures = QUANTITIES[row.quantity].measures
        this, other = ({m: np.asarray(v[m], dtype=float) for m in measures if m in v}
                       for v in (self.models[row.object.model], self.models[row.control.model]))
        n, k = (len(next(iter(v.values()))) for v in (this, other))
        welch = row.control.kind == "network"
        unit = (f"{n} and {k} seeds, independent runs (Welch)" if welch
                else f"{n} seeds, each paired with its own {row.control.label}")
        return Sample(this, other, "welch" if welch else "paired", unit, self.sizes)


def joint_values(profiles: Sequence[Mapping], station: str = "half") -> dict[str, np.ndarray]:
    """Per-seed joint profiles (`crate_nn.analysis.protocol.LayerProfile.all_means`: measure → station → per layer)
    as measure → (seeds, L) at ``station``, for the measures every profile holds."""
    return {m: np.array([p[m][station] for p in profiles], dtype=float) for m in JOINT
            if all(m in p for p in profiles)}


# --------------------------------------------------------------------------------------------- the decision
def decide(row: Row, sample: Sample) -> Result:
    """THE decision of a row of the family, on any subject's `Sample`: its verdict by `RULES`' rule (module
    docstring; the refuting sides at their share of the level), the measured line, the numbers, the headline and,
    for the joint measure, the per-layer labels."""
    return _DECIDE[row.rule](row, sample)


def _curve(values: np.ndarray, digits: int) -> str:
    return "→".join(f"{v:.{digits}g}" for v in values)


def _split(union: int) -> str:
    return f"; refutations at 1 − 0.05/{union} (Bonferroni over {union})" if union > 1 else ""


DENSE = ("; Z^{ℓ+1} has no zero entry at any layer: the block's output is a residual stream (CRATE-α's ISTA block "
         "adds its input back), not the ReLU codes the claim is about, so no interval can leave 0")
"""Added to a sparsity verdict when the object's outputs are dense everywhere."""


def _dense(row: Row, sample: Sample) -> str:
    return DENSE if row.quantity == "sparsity" and np.all(sample.this["sparsity"] == 1) else ""


def _per_layer(row: Row, sample: Sample) -> Result:
    """``every`` and ``footnote17``: this below the control at every layer it decides (from layer 2 for the joint
    measure; the last apart under footnote 17)."""
    joint, exempt, depth = row.quantity == "joint", row.rule == "footnote17", sample.depth
    decided = list(range(2 if joint else 1, depth + 1 - exempt))
    union = max(1, (3 if joint else 1) * len(decided))
    versus = f"{row.object.label} − {row.control.label}"
    common = {"unit": sample.unit, "pairing": sample.pairing, "union": union, "exempt_last": exempt,
              "decided_layers": decided}
    if joint:
        judged = [compresses(sample.at("this", layer, JOINT), sample.at("other", layer, JOINT), floor=sample.sizes,
                             paired=sample.pairing == "paired", population=sample.pairing == "population",
                             union=union) for layer in range(1, depth + 1)]
        headline = decided[-1] if decided else depth
        means = {side: {m: np.asarray(v, dtype=float).mean(0) for m, v in getattr(sample, side).items()}
                 for side in ("this", "other")}
        return Result(f"{describe(judged, exempt)}; {sample.unit}{_split(union)}",
                      every_judgement([judged[layer - 1] for layer in decided]),
                      {"per_layer": [j.as_dict() for j in judged], "this": means["this"], "control": means["other"],
                       "floor": judged[0].floor, **common},
                      headline=Headline.of_judgement(f"ℓ {headline}" + ("" if decided else " (apart)"),
                                                     judged[headline - 1]),
                      labels=layer_labels(judged))
    if not decided:
        raise ValueError(f"{name(row)}: {depth} layer(s) leave no layer to decide under {RULES[row.rule]!r}")
    measure, digits = QUANTITIES[row.quantity].measures[0], QUANTITIES[row.quantity].digits
    comparisons = [sample.compare(measure, layer, union=union) for layer in range(1, depth + 1)]
    kept = [comparisons[layer - 1] for layer in decided]
    means = {side: np.asarray(getattr(sample, side)[measure]).mean(0) for side in ("this", "other")}
    layer = decided[deciding(kept)]
    return Result(f"{row.object.label} {_curve(means['this'], digits)} vs {row.control.label} "
                  f"{_curve(means['other'], digits)}; {versus} per layer {brief(comparisons)}"
                  + (" (the last layer apart, footnote 17)" if exempt else "") + f"; {sample.unit}{_split(union)}"
                  + _dense(row, sample), every(kept),
                  {"per_layer": [c.as_dict() for c in comparisons], "this": means["this"], "control": means["other"],
                   **common},
                  headline=Headline.of(f"{versus}, layer {layer}", comparisons[layer - 1].difference))


def _falls(row: Row, sample: Sample) -> Result:
    """``falls`` and ``falls17``: the object's last layer it reads below its first, over the units."""
    measure = QUANTITIES[row.quantity].measures[0]
    values = np.asarray(sample.this[measure], dtype=float)
    depth = values.shape[1]
    if depth < 3:
        raise ValueError(f"model: {depth} layers; '{statement(row)}' needs at least 3")
    first, last = (2, depth) if row.rule == "falls" else (1, depth - 1)
    overall = compare(values[:, last - 1] - values[:, first - 1], direction="below")
    steps = [compare(values[:, i] - values[:, i - 1], direction="below") for i in range(first, last)]
    apart = compare(values[:, -1] - values[:, -2], direction="below") if last < depth else None
    d = overall.difference
    text = (f"layer {last} − layer {first} Δ {d.mean:+.3g} [{d.low:+.3g}, {d.high:+.3g}] ({d.n} {sample.unit}); "
            f"{sum(c.verdict == 'holds' for c in steps)} of {len(steps)} steps from layer {first} on fall"
            + (f"; the last layer (apart) − layer {last}: {apart.difference.mean:+.3g}" if apart else ""))
    return Result(text + _dense(row, sample), overall.verdict,
                  {"overall": overall.as_dict(), "steps": [c.as_dict() for c in steps],
                   "last_layer": apart.as_dict() if apart else None, "unit": sample.unit},
                  headline=Headline.of(f"layer {last} − layer {first}", overall.difference))


def _further(row: Row, sample: Sample) -> Result:
    """``further``: (m_1 − m_L)/m_1 of the object above the control's (Fig. 26's "optimises the objective")."""
    measure = QUANTITIES[row.quantity].measures[0]

    def fall(values: np.ndarray) -> np.ndarray:
        return (values[:, 0] - values[:, -1]) / values[:, 0]

    mine, theirs = fall(np.asarray(sample.this[measure])), fall(np.asarray(sample.other[measure]))
    c = compare(mine, theirs, direction="above", paired=sample.pairing == "paired")
    d = c.difference
    return Result(f"fall {row.object.label} {mine.mean():+.3g}, {row.control.label} {theirs.mean():+.3g}; Δ "
                  f"{d.mean:+.3g} [{d.low:+.3g}, {d.high:+.3g}] ({sample.unit})", c.verdict,
                  {"comparison": c.as_dict(), "unit": sample.unit},
                  headline=Headline.of(f"{row.object.label} − {row.control.label}, fall", d))


def _denser(row: Row, sample: Sample) -> Result:
    """``denser``: the control's mean over layers above the object's, for every measure of the quantity (every τ)."""
    measures = QUANTITIES[row.quantity].measures
    dense = [compare(np.asarray(sample.other[m]).mean(1), np.asarray(sample.this[m]).mean(1), direction="above",
                     paired=sample.pairing == "paired", union=len(measures)) for m in measures]
    i = deciding(dense)
    return Result("; ".join(f"τ {tau:g}: {c.difference.mean:+.3g}" for tau, c in zip(THRESHOLDS, dense))
                  + f" ({sample.unit}{_split(len(measures))})", every(dense),
                  {"per_threshold": [c.as_dict() for c in dense], "unit": sample.unit, "union": len(measures)},
                  headline=Headline.of(f"{row.control.label} − {row.object.label}, τ {THRESHOLDS[i]:g}",
                                       dense[i].difference))


_DECIDE: dict[str, Callable[[Row, Sample], Result]] = {"every": _per_layer, "footnote17": _per_layer,
                                                       "falls": _falls, "falls17": _falls, "further": _further,
                                                       "denser": _denser}


@dataclass(frozen=True)
class Decision:
    """A row and its `verify.registry.Result`: a verdict of the network audit (which registers no claim), named and
    stated by its row."""

    row: Row
    result: Result

    @property
    def id(self) -> str:
        return name(self.row)

    @property
    def verdict(self) -> str:
        return self.result.verdict

    def to_json(self) -> dict:
        """report.json's entry: id, what it states, its rule, verdict, measured line, numbers, headline, labels and
        scope (the papers' statement, on the network and inputs measured)."""
        h = self.result.headline
        return {"id": self.id, "statement": statement(self.row), "rule": criterion(self.row), "verdict": self.verdict,
                "text": self.result.measured, "numbers": self.result.data,
                "headline": None if h is None else dataclasses.asdict(h), "labels": self.result.labels,
                "scope": "paper"}


# --------------------------------------------------------------------------------------------- registered rows
def register(row: Row, *, module: str, reason: str, figure: Callable[[Context], str | None] | None = None,
             **fields) -> None:
    """Register ``row`` as a claim of the audit (`verify.registry.claim`) of the claim module ``module``: its id by
    `name`, its measurement `decide` on its object's subject, its ``expected`` the rule's `criterion` then
    ``reason`` (why it expects its verdict, in words: the numbers are in the report), its ``figure`` (the context →
    a figure's path, or None) and ``fields``: the claim's other fields (``location``, ``quote``, ``statement``,
    ``scope``, ``setting``, ``measures``, ``tags``, ``formerly``, ``expected_verdict`` …)."""
    if row.object.subject is None:
        raise ValueError(f"{name(row)}: a registered row's object names the subject that supplies its numbers")

    def measure(ctx: Context) -> Result:
        result = decide(row, row.object.subject(ctx).sample(row))
        drawn = figure(ctx) if figure is not None else None
        result.figures += [drawn] if drawn else []
        return result

    measure.__module__, measure.__qualname__ = module, name(row)
    claim(id=name(row), expected=f"{criterion(row)}. {reason}", **fields)(measure)

