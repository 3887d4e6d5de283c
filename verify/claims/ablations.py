"""The papers' ablation tables at laptop scale (004 App. C: Tables 11, 12, 13 and 15), on the built-in digits.

Every row is the ``digits`` preset (CRATE d = 96, L = 3, K = 4, 30 epochs; `verify.digits.recipe`) with one
architectural change — the η and λ of ISTA (Table 11), MSSA's output tied to its bases, β[U_1 … U_K] without W
(eq. 36, Table 12), the majorisation-minimisation step (123) in place of ISTA (Table 12), soft-thresholding with the
paper's λ = 10 in place of the ReLU (Table 13), no ISTA block (Table 15) — trained for `SEEDS` seeds; a seed fixes
the data order and the initialisation. The number compared is the test top-1 on the 360 held-out digits; the paper's
is CRATE-B's ImageNet-1K top-1, printed beside it.

Why the digits and not ``mnist5k``, where the rows would have more headroom: a digits run takes ≈ 15 s on one core,
a ``mnist5k`` run 2–3 min, and the table has 9 rows × 5 seeds. Near 97% a digit is 0.28 points, so small
differences drown: a verdict `inconclusive` here says the digits cannot tell, not that the paper is wrong.

Quick mode reads the committed run (``results/ablations/results.json``, written by ``python -m
verify.claims.ablations``) after checking that its recipe is the one this module builds now; ``--full`` trains the
rows again (runs cached by `verify.experiments`). Either way the verdicts come from the per-seed numbers by the
audit's rule (`verify.statistics.compare`): paired by seed when the two rows have the same parameters (then a seed
gives both the same initialisation), Welch otherwise.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import sys
from pathlib import Path

import numpy as np
import torch

from crate_nn.tasks.classification import ClassificationConfig, build_classifier
from verify import digits, experiments
from verify.context import MODES
from verify.registry import Headline, Result, claim
from verify.statistics import Comparison, compare, every

RESULTS = Path(__file__).resolve().parents[2] / "results" / "ablations" / "results.json"
SEEDS = 5
DEFAULT = "default"
VARIANTS: dict[str, dict] = {
    DEFAULT: {},
    "η 0.02": dict(eta=0.02),
    "η 0.5": dict(eta=0.5),
    "λ 0.02": dict(lam=0.02),
    "λ 0.5": dict(lam=0.5),
    "tied output β[U]": dict(mssa_output="tied"),
    "MM step (123)": dict(ista="mm"),
    "soft threshold, λ 10": dict(ista="soft", lam=10.0),
    "without ISTA": dict(feedforward="none"),
}
"""Row → the model arguments it changes in the digits preset."""
PAPER = {DEFAULT: 70.8, "η 0.02": 70.7, "η 0.5": 66.7, "λ 0.02": 70.8, "λ 0.5": 70.5, "tied output β[U]": 63.3,
         "MM step (123)": 68.6, "soft threshold, λ 10": 67.6, "without ISTA": 61.9}
"""CRATE-B's ImageNet-1K top-1 (%) in the paper's Tables 11, 12, 13 and 15 (paper-notes)."""
MARGIN = 0.01
"""'Insensitive' (Table 11's λ) read as: neither 1 point (3.6 of the 360 test digits) worse nor better than the
default — the 95% interval of the difference inside ±1 point; fixed before measuring, between the paper's
'insensitive' changes (≤ 0.3 points) and its losses (≥ 2.2 points), and the margin of the ToST claims."""


def config(variant: str) -> ClassificationConfig:
    """The digits recipe with ``variant``'s model arguments (`VARIANTS`)."""
    base = digits.recipe()
    return dataclasses.replace(base, model_args={**base.model_args, **VARIANTS[variant]})


def _recipe() -> dict:
    """Row → its recipe (`verify.experiments.recipe`), what the committed run records it was trained with."""
    return {v: experiments.recipe(config(v)) for v in VARIANTS}


@functools.cache
def same_parameters(a: str, b: str) -> bool:
    """Whether rows ``a`` and ``b`` build models with the same parameter names and shapes: then a seed gives both
    the same initialisation and their comparison pairs by seed."""
    def shapes(variant: str) -> dict:
        model = build_classifier(config(variant), {"image_size": 8, "num_classes": 10, "in_channels": 1})
        return {k: tuple(v.shape) for k, v in model.state_dict().items()}
    return shapes(a) == shapes(b)


def measure(seeds) -> dict:
    """Train (or read from the cache) every row for ``seeds``: {"recipe", "seeds", "test_top1": {row: [per seed]},
    "seconds": {row: [per seed]}}."""
    out = {"recipe": _recipe(), "seeds": list(seeds), "test_top1": {}, "seconds": {}}
    for variant in VARIANTS:
        runs = experiments.runs(config(variant), list(seeds))
        out["test_top1"][variant] = [run.metrics["test_top1"] for run in runs]
        out["seconds"][variant] = [run.seconds for run in runs]
    return out


@functools.lru_cache(maxsize=2)
def _results(mode: str, seed: int) -> tuple[dict, str]:
    """The table's per-seed numbers and where they come from: the committed run (quick) or a fresh one (full)."""
    if mode == "full":
        seeds = experiments.seeds(seed, SEEDS)
        return measure(seeds), f"measured now, seeds {seeds}"
    if not RESULTS.is_file():
        raise FileNotFoundError(f"{RESULTS} is missing: run `python -m verify.claims.ablations` (or python -m "
                                "verify --full)")
    results = json.loads(RESULTS.read_text())
    if set(results["recipe"]) != set(VARIANTS) or any(experiments.recipe_differences(saved, config(v))
                                                       for v, saved in results["recipe"].items()):
        raise ValueError(f"{RESULTS} was measured with another recipe than verify.claims.ablations builds now; re-run "
                         "`python -m verify.claims.ablations`")
    return results, f"committed run {RESULTS.relative_to(RESULTS.parents[2])}, seeds {results['seeds']}"


def _versus(results: dict, a: str, b: str, direction: str, boundary: float = 0.0) -> Comparison:
    x, y = results["test_top1"][a], results["test_top1"][b]
    return compare(x, y, direction=direction, boundary=boundary, paired=same_parameters(a, b))


def _row(results: dict, variant: str) -> str:
    x = 100 * np.asarray(results["test_top1"][variant])
    return f"{variant} {x.mean():.2f} ± {x.std(ddof=1):.2f}% (paper {PAPER[variant]})"


def _table_claim(id: str, table: str, statement: str, rows: tuple[str, ...], expected_verdict: str,
                 note: str, insensitive: bool = False) -> None:
    """A claim "each of ``rows`` is worse than the default" (or, ``insensitive``, within ±`MARGIN` of it)."""
    rule = ("the 95% interval of each row − default lies inside ±1 point (`MARGIN`): above −1 point and below +1"
            if insensitive else "the 95% interval of default − row lies above 0")

    @claim(id=id, tags=("ablation", "digits", "nn"), reference=f"004 {table}", statement=statement,
           measures=f"test top-1 on the 360 held-out digits, the digits preset (30 epochs) with each row's change, "
                    f"{SEEDS} seeds (paired by seed when the rows share their parameters, Welch otherwise); quick "
                    "mode reads the committed run (results/ablations), --full trains it again (≈ 12 min on one core)",
           expected=f"`holds` when {rule}; `fails` when an interval lies on the other side. {note}",
           expected_verdict=expected_verdict, modes=MODES if RESULTS.is_file() else ("full",),
           kind="trained", provenance="measurement" if note.startswith("Recorded after") else "analysis")
    def measure_claim(ctx) -> Result:
        results, source = _results(ctx.mode, ctx.seed)
        if insensitive:
            comparisons = [c for row in rows for c in (_versus(results, row, DEFAULT, "above", -MARGIN),
                                                       _versus(results, row, DEFAULT, "below", MARGIN))]
        else:
            comparisons = [_versus(results, DEFAULT, row, "above") for row in rows]
        shown = [comparisons[i] for i in range(0, len(comparisons), 2 if insensitive else 1)]
        differences = "; ".join(f"{'row' if insensitive else 'default'} − {'default' if insensitive else 'row'} "
                                f"({row}) {c.text()}" for row, c in zip(rows, shown))
        return Result(f"{_row(results, DEFAULT)}; " + "; ".join(_row(results, r) for r in rows)
                      + f" ({source}); {differences}", every(comparisons),
                      {"test_top1": {r: results["test_top1"][r] for r in (DEFAULT, *rows)},
                       "paper": {r: PAPER[r] for r in (DEFAULT, *rows)},
                       "comparisons": [c.as_dict() for c in comparisons], "seeds": results["seeds"],
                       "source": source}, [],
                      Headline.of(f"default − {rows[-1]} (points)", shown[-1].difference, scale=100)
                      if not insensitive else Headline.of(f"{rows[-1]} − default (points)", shown[-1].difference,
                                                          scale=100))


_table_claim("C.5-table11-eta", "App. C.5, Table 11",
             "A large ISTA step hurts: η = 0.5 gives a lower accuracy than the default "
             "η = 0.1 (ImageNet-1K 66.7 vs 70.8%)", ("η 0.5",), "inconclusive",
             "Recorded after measuring (the committed run, seeds 0–4): 97.44 ± 0.84 vs 97.72 ± 0.30%, default − row "
             "+0.28 [−1.01, +1.57] points — η = 0.5 widens the seed spread but the digits cannot tell a loss")
_table_claim("C.5-table11-lambda", "App. C.5, Table 11",
             "Accuracy is insensitive to ISTA's sparsity weight λ: λ = 0.02 and "
             "λ = 0.5 score as the default λ = 0.1 does (70.8, 70.5 vs 70.8%)", ("λ 0.02", "λ 0.5"), "holds", "",
             insensitive=True)
_table_claim("C.5-table12-tied-output", "App. C.5, Table 12",
             "MSSA needs its output matrix W: the output tied to the bases, "
             "β[U_1 … U_K] (eq. 36), without W, gives a lower accuracy (63.3 vs 70.8%)", ("tied output β[U]",),
             "holds", "")
_table_claim("C.5-table12-mm-step", "App. C.5, Table 12",
             "The ISTA block beats the majorisation-minimisation step of eq. (123) "
             "(68.6 vs 70.8%)", ("MM step (123)",), "inconclusive",
             "Recorded after measuring (the committed run, seeds 0–4): 97.83 ± 0.36 vs 97.72 ± 0.30%, default − row "
             "−0.11 [−0.50, +0.28] points")
_table_claim("C.5-table13-soft-threshold", "App. C.5, Table 13",
             "ISTA's non-negative ReLU beats plain soft-thresholding S_{ηλ} "
             "(λ = 10): 70.8 vs 67.6%", ("soft threshold, λ 10",), "inconclusive",
             "Recorded after measuring (the committed run, seeds 0–4): 97.50 ± 0.28 vs 97.72 ± 0.30%, default − row "
             "+0.22 [−0.07, +0.51] points")
_table_claim("C.6-table15-without-ista", "App. C.6, Table 15",
             "The ISTA block matters: CRATE without it classifies worse "
             "(61.9 vs 70.8%)", ("without ISTA",), "inconclusive",
             "Recorded after measuring (the committed run, seeds 0–4): 97.11 ± 0.64 vs 97.72 ± 0.30%, default − row "
             "+0.61 [−0.17, +1.40] points (Welch)")


def table(results: dict) -> str:
    """The Markdown table of a results dict: rows, the paper's number, ours (mean ± std), the difference with its
    95% interval and the verdict of "worse than the default"."""
    lines = ["| row | paper (IN-1K, CRATE-B) | ours (digits, test top-1) | default − row (points) | worse? |",
             "|---|---|---|---|---|"]
    for variant in VARIANTS:
        x = 100 * np.asarray(results["test_top1"][variant])
        if variant == DEFAULT:
            lines.append(f"| {variant} | {PAPER[variant]} | {x.mean():.2f} ± {x.std(ddof=1):.2f} | | |")
            continue
        c = _versus(results, DEFAULT, variant, "above")
        d = c.difference
        lines.append(f"| {variant} | {PAPER[variant]} | {x.mean():.2f} ± {x.std(ddof=1):.2f} | {100 * d.mean:+.2f} "
                     f"[{100 * d.low:+.2f}, {100 * d.high:+.2f}] ({'paired' if c.paired else 'Welch'}) | "
                     f"{c.verdict} |")
    seconds = [s for row in results["seconds"].values() for s in row]
    lines += ["", f"{len(results['seeds'])} seeds ({results['seeds']}), the digits preset's 30 epochs; CPU time "
              f"{sum(seconds) / 60:.1f} min in all ({np.median(seconds):.1f} s a run, median). Re-measure: "
              "`python -m verify.claims.ablations`; decide: `python -m verify --only C.5 C.6`."]
    return "\n".join(lines) + "\n"


def figure(results: dict, path: Path) -> None:
    """Per-seed test top-1 of each row beside the paper's ImageNet numbers (two panels)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(VARIANTS)
    fig, (ours, paper) = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    for i, name in enumerate(names):
        x = 100 * np.asarray(results["test_top1"][name])
        ours.scatter(np.full(x.size, i), x, s=14, color="tab:blue", alpha=0.7)
        ours.errorbar(i + 0.18, x.mean(), yerr=x.std(ddof=1), fmt="o", color="black", ms=4)
    paper.bar(range(len(names)), [PAPER[n] for n in names], color="tab:gray")
    paper.set_ylim(55, 75)
    for ax, title, label in ((ours, f"digits, {len(results['seeds'])} seeds (dots), mean ± std", "test top-1 (%)"),
                             (paper, "paper: CRATE-B, ImageNet-1K", "top-1 (%)")):
        ax.set_xticks(range(len(names)), names, rotation=40, ha="right", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    """``python -m verify.claims.ablations``: train (or read from the cache) every row and write
    results/ablations/{results.json, table.md, ablations.png}."""
    parser = argparse.ArgumentParser(prog="python -m verify.claims.ablations", description=main.__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(SEEDS)), help="run seeds (default 0–4)")
    parser.add_argument("--out", type=Path, default=RESULTS.parent, help="folder to write (default results/ablations)")
    parser.add_argument("--redraw", action="store_true", help="rewrite table.md and the figure from the folder's "
                                                                "results.json, training nothing")
    args = parser.parse_args(argv)
    if args.redraw:
        results = json.loads((args.out / "results.json").read_text())
    else:
        torch.set_num_threads(1)
        results = measure(args.seeds)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    (args.out / "table.md").write_text(table(results))
    figure(results, args.out / "ablations.png")
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
