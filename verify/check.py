"""``python -m verify.record --check NAME``: re-train a stated sample of a stored replication with today's code and
compare it with the stored numbers, within the spread of the stored seeds.

**The sample.** A replication's runs (``results/NAME/runs.json``) fall into *configurations*: runs of one task and
one recipe that differ only in their seed (a fine-tuning's configuration names the configuration of the run it
starts from, not that run: `configurations`). The check re-trains the lowest seed of each configuration, with every
stored run a re-trained one starts from or whose numbers it reads (a fine-tuning's pre-training, DINO's supervised
reference: `sample`), with today's code through the audit's cache (`verify.experiments`), and measures them as the
replication's claims do: the claims run under ``--full`` while `verify.experiments.run` answers each sampled config
by training it now and every other from the stored file (`Sampled`), so a re-trained run gets its derived numbers
from today's measuring code too. Table 17 (``segmentation``) re-trains and re-measures the lowest seed of each
architecture, its trained model and its initialisation (`crate_nn.table17.run_experiment` at that seed). The
sample's CPU time is about its runs' stored training time (`plan`; ``--help`` lists each replication's).

**The quantities.** Every number a stored run holds — final metrics, layer-wise measurements, derived numbers —
as one named scalar each (`quantities`: ``metrics.test_top1``, ``derived.figure-measures.trained.official[2]``),
except the per-input samples under a ``values`` key, which the mean and std stored beside them summarise.

**The rule** (`compare`). If today's code trains the same population of runs as the code that recorded them, a
re-trained run is one more draw of it, and each of its quantities lies inside the stored seeds' prediction interval
(`verify.statistics.prediction_interval`: mean ± t_{S−1}·s·√(1 + 1/S), the interval `verify.statistics.compare_one`
reads) with the interval's probability. A check reads m quantities — hundreds, correlated in ways three or five
seeds cannot estimate — so at 95% about 5% of them would lie outside by chance. A quantity has *moved* when it lies
outside its interval at level 1 − 0.05/m (Bonferroni): a check of faithful code reports a moved quantity with
probability at most 5%, whatever the correlation. The price is width: with 5 seeds and m = 150 the interval spans
±12.5 stored standard deviations, with 3 seeds and m = 60 ±40 — a check catches code that trains or measures
something else (a broken step, a changed default or measure), not a shift of a few seeds' spread; the quantities
outside their plain 95% intervals are counted beside it. Exact reproduction is the stronger statement and is counted
first: training on the CPU is deterministic, so code whose arithmetic did not change gives the stored seed's numbers
again (to `RTOL`), and a reproduced quantity never moved. Seeds that agree exactly (352/360 test digits on all three
seeds, the raw pixels' k-NN that no seed moves) give an interval of width 0: such a quantity takes as its spread its
*resolution*, the smallest difference between two stored values of it anywhere in the file (1/360 for that
accuracy), and one that never differs anywhere (a setting such as ε) must be reproduced. A stored quantity the
re-trained run lacks has moved (today's code no longer measures it); one it adds is not compared.

**The record.** ``results/NAME/check.json``, sealed (`verify.integrity`) and committed beside the replication, never
touching its ``runs.json``: when, by which code (`verify.committed.identity`), of which recording (its SHA-256),
the sample, the rule, the CPU time, each re-trained run's quantities with their intervals and states, and what
moved. Written whole at the end (atomically): a check stopped by SIGTERM/SIGINT, or one whose claims raised,
leaves the previous record as it was. The quick audit reads it (`verify.committed.Replication.check`): a
replication whose last check failed has its verdicts marked stale and left out of the counts.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

import numpy as np

from crate_nn import table17
from crate_nn.tasks import get_preset
from verify import committed, experiments, integrity, stopping
from verify.context import TABLE17
from verify.integrity import StoredDataError
from verify.registry import all_claims
from verify.runner import run_claims
from verify.statistics import LEVEL, MIN_SEEDS, prediction_interval

ALPHA = 0.05
"""A check's chance of reporting a moved quantity when today's code trains the stored population (Bonferroni)."""
RTOL = 1e-9
"""A quantity equal to its stored seed's within this relative tolerance is reproduced: float32 training that
differs at all ends macroscopically apart, so only float64 measurements summed in another order (≈ 1e-15 relative
per operation) differ below it."""
SAMPLE = ("the lowest seed of each configuration — runs of one task and recipe that differ only in the seed — and "
          "the stored runs those start from or read")
"""The sample, in words (`sample`)."""
RUN_NAME = re.compile(r"\b\w+-[0-9a-f]{16}\b")
"""A stored run's name in a recipe or a derived number's parameters: ``<task>-<config hash>`` (`verify.committed`)."""
STATES = ("reproduced", "within", "outside 95%", "moved", "not compared")
"""A quantity's state: equal to its stored seed's; inside its 95% prediction interval; outside it but inside the
check's Bonferroni interval; outside that too (or missing from the re-trained run); fewer than `MIN_SEEDS` stored
values to compare with."""


# --------------------------------------------------------------------------------------------- the sample
def run_name(entry: dict) -> str:
    """A stored run's name, ``<task>-<config hash>`` of its recipe and seed (as recorded: `verify.committed.Store`)."""
    return f"{entry['task']}-{experiments.fields_hash(entry['task'], {**entry['recipe'], 'seed': entry['seed']})}"


def _names(runs: list[dict]) -> dict[str, int]:
    """Each stored run's index by its name (`run_name`)."""
    return {run_name(e): i for i, e in enumerate(runs)}


def _referenced(text: str, names: dict[str, int]) -> list[int]:
    """The indices of the stored runs ``text`` names (``names``: `_names`)."""
    return [names[m.group(0)] for m in RUN_NAME.finditer(text) if m.group(0) in names]


def configurations(runs: list[dict]) -> list[str]:
    """Each run's configuration: a hash of its task and its recipe without the seed, in which a stored run named
    (a fine-tuning's ``init_from``) is replaced by that run's configuration."""
    names = _names(runs)
    keys: dict[int, str] = {}

    def key(i: int) -> str:
        if i not in keys:
            keys[i] = "cycle"  # a recipe naming itself, through others: never recorded; stops the recursion
            text = RUN_NAME.sub(lambda m: (f"<{key(names[m.group(0)])}>" if m.group(0) in names else m.group(0)),
                                json.dumps(runs[i]["recipe"], sort_keys=True))
            keys[i] = f"{runs[i]['task']}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
        return keys[i]

    return [key(i) for i in range(len(runs))]


def sample(runs: list[dict]) -> list[int]:
    """The indices of the runs a check re-trains (`SAMPLE`): the lowest seed of each configuration, closed under the
    stored runs a sampled run names in its recipe or its derived numbers' parameters."""
    groups = configurations(runs)
    chosen = {min((i for i, g in enumerate(groups) if g == group), key=lambda i: runs[i]["seed"])
              for group in set(groups)}
    names = _names(runs)
    todo = list(chosen)
    while todo:
        entry = runs[todo.pop()]
        text = json.dumps(entry["recipe"]) + json.dumps([d["params"] for d in entry.get("derived", [])])
        for i in _referenced(text, names):
            if i not in chosen:
                chosen.add(i)
                todo.append(i)
    return sorted(chosen)


def describe(runs: list[dict], i: int) -> str:
    """Run ``i`` in words: its task, its preset and the recipe fields in which it differs from the preset (a dict
    field key by key; a fine-tuning's start described in turn), and its seed."""
    entry = runs[i]
    recipe = entry["recipe"]
    names = _names(runs)
    try:
        base = json.loads(json.dumps(get_preset(recipe["preset"]).to_dict(), default=str))
    except (KeyError, ValueError, TypeError):  # a preset removed since: the recipe speaks for itself
        base = {}
    parts = []
    for k in sorted(set(recipe) - set(experiments.RUN_ONLY) - {"preset"}):
        value, default = recipe[k], base.get(k)
        if isinstance(value, str) and _referenced(value, names):
            start = _referenced(value, names)[0]
            parts.append(f"{k}=[{describe(runs, start)}]")
        elif isinstance(value, dict) and isinstance(default, dict):
            parts += [f"{k}.{f}={value.get(f)}" for f in sorted(set(value) | set(default))
                      if value.get(f) != default.get(f)]
        elif value != default:
            parts.append(f"{k}={value}")
    return f"{entry['task']} {recipe.get('preset')}" + (f" ({', '.join(parts)})" if parts else "") + \
        f", seed {entry['seed']}"


def plan(name: str) -> tuple[str, float | None]:
    """What a check of replication ``name`` re-trains, in words, and the sampled runs' training time as stored
    (seconds of wall time when recorded; None for Table 17, whose file keeps no times)."""
    stored = committed.replication(name)
    if name == TABLE17:
        variants = list(stored.content["configs"])
        return f"seed {stored.content['seeds'][0]} of each of its {len(variants)} architectures", None
    runs = stored.runs
    chosen = sample(runs)
    kinds = len(set(configurations(runs)))
    return (f"{len(chosen)} of its {len(runs)} runs ({kinds} configuration{'' if kinds == 1 else 's'})",
            sum(runs[i]["seconds"] for i in chosen))


# --------------------------------------------------------------------------------------------- the quantities
def _leaves(value: Any, path: str) -> Iterator[tuple[str, float]]:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        yield path, value
    elif isinstance(value, dict):
        for k, v in value.items():
            if k != "values":  # per-input samples: summarised by the mean and std beside them
                yield from _leaves(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, f"{path}[{i}]")


def quantities(entry: dict) -> dict[str, float]:
    """Every number of a ``runs.json`` entry as one named scalar (module docstring): its metrics, measurements and
    derived numbers, a derived number named by its name (and, where the entry holds several of one name, by its
    parameters with the stored runs they name written ``<task>-*``, which differ from seed to seed)."""
    derived = entry.get("derived", [])
    counts: dict[str, int] = {}
    for d in derived:
        counts[d["name"]] = counts.get(d["name"], 0) + 1
    out = dict(_leaves(entry.get("metrics", {}), "metrics"))
    out.update(_leaves(entry.get("measurements", {}), "measurements"))
    for d in derived:
        key = d["name"] if counts[d["name"]] == 1 else f"{d['name']}{RUN_NAME.sub(_masked, d['params'])}"
        out.update(_leaves(d["value"], f"derived.{key}"))
    return out


def _masked(m: re.Match) -> str:
    return m.group(0).rsplit("-", 1)[0] + "-*"


def row_quantities(row: dict) -> dict[str, float]:
    """Every number of a Table 17 run (`crate_nn.table17.run_experiment`'s rows): accuracy, per-layer scores and
    the selected layers'."""
    return {k: v for part in ("accuracy", "val", "test", "selected") for k, v in _leaves(row.get(part), part)}


# --------------------------------------------------------------------------------------------- the rule
def _resolution(values: list[float]) -> float:
    """The smallest difference between two distinct finite values (0 when all are equal)."""
    distinct = np.unique([v for v in values if math.isfinite(v)])
    return float(np.diff(distinct).min()) if distinct.size > 1 else 0.0


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=RTOL, abs_tol=0.0) or (math.isnan(a) and math.isnan(b))


def judge(value: float, own: float | None, population: list[float], step: float, level: float) -> dict:
    """One quantity by the rule of the module docstring: ``value`` re-trained, ``own`` its stored seed's,
    ``population`` the stored seeds' (its own included), ``step`` its resolution in the file, ``level`` the check's.
    Returns its state (`STATES`) and, where an interval decided it, the interval: mean, spread, low, high."""
    finite = [v for v in population if math.isfinite(v)]  # a diverged seed's loss is no spread
    if own is not None and _same(value, own):
        return {"state": "reproduced"}
    if not math.isfinite(value):
        return {"state": "moved"}
    if len(finite) < MIN_SEEDS:
        return {"state": "not compared"}
    spread = float(np.std(finite))
    if spread == 0.0 and step == 0.0:
        return {"state": "moved"}  # never differs anywhere in the file: a setting, which only reproduction satisfies
    least = step if spread == 0.0 else 0.0
    wide = prediction_interval(finite, level=level, least_std=least)
    plain = prediction_interval(finite, level=LEVEL, least_std=least)
    state = ("moved" if not wide.low <= value <= wide.high
             else "outside 95%" if not plain.low <= value <= plain.high else "within")
    return {"mean": wide.mean, "std": wide.std, "low": wide.low, "high": wide.high, "state": state}


def compare(stored: list[dict], groups: list[str], fresh: dict[int, dict],
            flatten: Callable[[dict], dict[str, float]] = quantities, alpha: float = ALPHA) -> dict:
    """Compare each re-trained run ``fresh[i]`` with the stored runs of its configuration ``groups[i]`` (``stored``:
    the stored runs, ``flatten`` their quantities), each quantity by `judge` at the level 1 − ``alpha``/m, m the
    quantities compared. Returns the check's result: ``runs`` (per re-trained run and quantity: the value, its
    stored seed's, the number of stored seeds, the state and the interval that decided it), ``counts`` (per state),
    ``moved`` (``"<run index>: <quantity>"``), ``quantities`` (m), ``level`` and ``passed``."""
    values = [flatten(e) for e in stored]
    pooled: dict[str, list[float]] = {}
    for q in values:
        for path, v in q.items():
            pooled.setdefault(path, []).append(v)
    compared: list[tuple[int, str, float, list[float]]] = []
    runs: dict[int, dict] = {i: {} for i in fresh}
    for i, entry in fresh.items():
        mine = flatten(entry)
        seeds = [j for j, g in enumerate(groups) if g == groups[i]]
        for path in sorted(set().union(*(values[j] for j in seeds))):
            population = [values[j][path] for j in seeds if path in values[j]]
            if path not in mine:  # today's code no longer measures it
                runs[i][path] = {"value": None, "stored": values[i].get(path), "state": "moved"}
            elif len(population) >= MIN_SEEDS:
                compared.append((i, path, mine[path], population))
        for path in sorted(set(mine) - set().union(*(values[j] for j in seeds))):
            runs[i][path] = {"value": mine[path], "stored": None, "state": "not compared"}  # new since recorded
    level = 1 - alpha / max(len(compared), 1)
    for i, path, value, population in compared:
        own = values[i].get(path)
        runs[i][path] = {"value": value, "stored": own, "n": len(population),
                         **judge(value, own, population, _resolution(pooled[path]), level)}
    for i, entry in fresh.items():  # stored on fewer than MIN_SEEDS seeds of its configuration
        for path, value in flatten(entry).items():
            runs[i].setdefault(path, {"value": value, "stored": values[i].get(path), "state": "not compared"})
    counts = {s: sum(r["state"] == s for q in runs.values() for r in q.values()) for s in STATES}
    moved = [f"{i}: {path}" for i, q in runs.items() for path, r in q.items() if r["state"] == "moved"]
    return {"runs": runs, "counts": counts, "moved": moved, "quantities": len(compared), "level": level,
            "passed": not moved}


# --------------------------------------------------------------------------------------------- re-training
class Sampled:
    """`verify.experiments.run`'s stand-in during a check: a config of a sampled stored run is trained now with
    today's code (`verify.experiments.trained`), every other answered from the stored file
    (`verify.committed.Store`)."""

    def __init__(self, name: str, chosen: list[int]):
        self.store = committed.Store(name)
        self.chosen = set(chosen)
        self.fresh: dict[int, experiments.Run] = {}

    def __call__(self, config):
        stored = self.store.run(config)
        index = next(i for i, e in enumerate(self.store.runs) if e is stored.entry)
        if index not in self.chosen:
            return stored
        self.fresh[index] = experiments.trained(config)
        return self.fresh[index]


def _retrain(name: str, progress: bool) -> tuple[list[dict], list[str], dict[int, dict], dict[int, str]]:
    """Re-train replication ``name``'s sample by measuring its claims under --full (`Sampled`): the stored runs,
    their configurations, the re-trained runs as ``runs.json`` entries, and each one's description."""
    stored = committed.replication(name)
    runs, chosen = stored.runs, sample(stored.runs)
    sampled = Sampled(name, chosen)
    with tempfile.TemporaryDirectory(prefix=f"verify-check-{name}-") as tmp, experiments.answered_by(sampled):
        outcomes = run_claims([c for c in all_claims() if c.committed == name], mode="full", seed=stored.base_seed,
                              output_dir=tmp, progress=progress, figures=False)
    raised = [o.claim.id for o in outcomes if o.error]
    if raised:
        first = next(o.error for o in outcomes if o.error).strip().splitlines()[-1]
        raise StoredDataError(f"{len(raised)} of {len(outcomes)} claims of {name} raised ({', '.join(raised)}; "
                              f"{first}): nothing written")
    unasked = [i for i in chosen if i not in sampled.fresh]
    if unasked:
        raise StoredDataError(f"today's claims of {name} no longer read the stored runs {unasked} "
                              f"({describe(runs, unasked[0])}, …): re-record it: {committed.record_command(name)}")
    derived = {run.folder: d for run, d in experiments.touched()}
    fresh = {i: committed.entry(run, derived.get(run.folder, {})) for i, run in sampled.fresh.items()}
    return runs, configurations(runs), fresh, {i: describe(runs, i) for i in chosen}


def _retrain_table17(progress: bool) -> tuple[list[dict], list[str], dict[int, dict], dict[int, str]]:
    """Table 17's sample: the lowest stored seed of each architecture trained (through the audit's cache) and
    measured now with its initialisation, matched with the stored rows of the same architecture, state and seed."""
    stored = committed.replication(TABLE17)
    content = stored.content
    changed = [v for v, c in content["configs"].items()
               if experiments.recipe_differences(c, get_preset(f"objects_{v}"))]
    if changed:
        raise StoredDataError(f"{committed.shown(stored.file)}: the recipe of {', '.join(changed)} changed since it "
                              f"was recorded: re-record it: {committed.record_command(TABLE17, stored.base_seed)}")
    seed = content["seeds"][0]
    with tempfile.TemporaryDirectory(prefix="verify-check-segmentation-") as tmp:
        results = table17.run_experiment(tmp, seeds=[seed], variants=list(content["configs"]), progress=progress,
                                         trained=lambda config: experiments.trained(config).model("trained"))
    rows = content["runs"]
    groups = [f"{r['name']} {r['state']}" for r in rows]
    fresh, described = {}, {}
    for row in json.loads(json.dumps(results["runs"])):
        i = next(j for j, r in enumerate(rows)
                 if (r["name"], r["state"], r["seed"]) == (row["name"], row["state"], seed))
        fresh[i], described[i] = row, f"{row['name']} {row['state']}, seed {seed}"
    return rows, groups, fresh, described


def check(name: str, progress: bool = True) -> int:
    """Re-check replication ``name`` (module docstring): re-train its sample, compare, and write
    ``results/NAME/check.json``. Returns 0 when it passed, 1 when a quantity moved; raises
    `verify.integrity.StoredDataError` (one line, nothing written) when the stored file is refused or the claims
    raised."""
    stored = committed.replication(name)
    what, seconds = plan(name)
    print(f"checking {name}: re-training {what} with today's code"
          + (f" (they trained in {seconds / 60:.1f} min when recorded)" if seconds else ""), flush=True)
    started, cpu = time.perf_counter(), time.process_time()
    if name == TABLE17:
        runs, groups, fresh, described = _retrain_table17(progress)
        result = compare(runs, groups, fresh, row_quantities)
    else:
        runs, groups, fresh, described = _retrain(name, progress)
        result = compare(runs, groups, fresh)
    code = committed.identity()
    doc = {
        "replication": name,
        "checked": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "command": f"python -m verify.record --check {name}",
        "stored": {"file": committed.shown(stored.file), "sha256": stored.sha256, "recorded": stored.seal["recorded"],
                   "commit": stored.seal["code"]["commit"], "code_hash": stored.seal["code"]["hash"]},
        "code": code,
        "sample": {"rule": SAMPLE if name != TABLE17 else "the lowest seed of each architecture, trained and at "
                   "initialisation", "runs": [described[i] for i in sorted(fresh)]},
        "rule": {"alpha": ALPHA, "level": result["level"], "quantities": result["quantities"], "rtol": RTOL},
        "cpu_seconds": round(time.process_time() - cpu, 1),
        "wall_seconds": round(time.perf_counter() - started, 1),
        "passed": result["passed"],
        "counts": result["counts"],
        "moved": [_named(item, described) for item in result["moved"]],
        "runs": [{"run": described[i], "seconds": fresh[i].get("seconds"), "stored_seconds": runs[i].get("seconds"),
                  "quantities": result["runs"][i]} for i in sorted(fresh)],
    }
    file = integrity.write(committed.check_path(name), doc, indent=1)
    counts = result["counts"]
    print(f"{'passed' if result['passed'] else 'FAILED'}: {len(fresh)} sampled runs re-run, "
          f"{result['quantities']} quantities compared: {counts['reproduced']} reproduced, {counts['within']} within 95%, "
          f"{counts['outside 95%']} outside 95%, {counts['moved']} moved; {doc['cpu_seconds'] / 60:.1f} min of CPU; "
          f"written to {committed.shown(file)}")
    for item in doc["moved"][:20]:
        print(f"  moved: {item}")
    for run in doc["runs"]:  # where a run reproduced the rest, a number that differs was measured (or edited) anew
        quantities = run["quantities"].items()
        if sum(q["state"] == "reproduced" for _, q in quantities) > len(quantities) / 2:
            for path, q in quantities:
                if q["state"] in ("within", "outside 95%"):
                    print(f"  not reproduced: {run['run']}: {path} = {q['value']:.6g} (stored {q['stored']:.6g})")
    return 0 if result["passed"] else 1


def _named(item: str, described: dict[int, str]) -> str:
    index, path = item.split(": ", 1)
    return f"{described[int(index)]}: {path}"


def main(name: str, progress: bool = True) -> int:
    """Check replication ``name`` (`check`) under `verify.stopping.on_signals`; a refused file or a raising claim is
    one line on stderr (exit 1), a signal exits 128 + it with nothing written."""
    with stopping.on_signals():
        try:
            return check(name, progress)
        except StoredDataError as err:
            print(f"verify.record --check: {err}", file=sys.stderr)
            return 1
        except (stopping.Interrupted, KeyboardInterrupt) as stop:
            print("\n" + stopping.message("python -m verify.record --check", stop, str(experiments.root())),
                  file=sys.stderr)
            return stopping.status(stop)
