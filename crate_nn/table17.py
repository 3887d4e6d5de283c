"""Table 17 at laptop scale: does segmentation emerge in CRATE, and not in ViT, under supervised classification?

The controlled experiment (Sec. 4.3, App. C.10): the four architectures of Table 17 — CRATE (MSSA + ISTA),
CRATE-MLP (MSSA + MLP), CRATE-MHSA (MHSA + ISTA) and ViT (MHSA + MLP) — with the same width, depth, heads, patch
embedding, head and initialisation, trained with one recipe (the ``objects_*`` presets of
`crate_nn.tasks.classification`) on the built-in
``objects`` dataset (`crate_nn.data.objects`: digits on clutter with ground-truth masks), several seeds each. For
each trained model and, as a control, for its random initialisation (same seed), `measure` scores:

* classification top-1 on the 360 test images;
* at every layer, the masks of the class token's attention (eq. 437/438, mean over heads, 60% of the mass) and of
  MaskCut on the patch codes (one object), by mIoU (object/background), Jaccard and CorLoc against the true masks
  (`crate_nn.evaluation.segmentation.evaluate_objects`).

The layer of each method is chosen per model on the validation split (288 images, highest mIoU) and scored on the
test split, so no architecture gets a layer picked on its test numbers (the papers show the second-to-last layer
for CRATE and the last for ViT; every layer's numbers are kept in ``results.json``). Two references without a
network frame the numbers: MaskCut on the raw pixels of the patches (what low-level colour grouping gives), and
the ceiling of a patch-resolution mask (the true mask downsampled to the patch grid by majority and upsampled).

`summarize` gives each row's mean ± std over seeds; the statements of the papers are decided from the per-seed
numbers by the audit (``verify/claims/segmentation.py``, 95% intervals over the seeds). ``crate-segment
experiment`` runs it all and writes ``results.json``, ``table.md`` and figures. Other backbones — e.g. a DINO-trained CRATE or ViT — join the table as extra rows through
`measure_checkpoint` (``crate-segment experiment --extra NAME=CKPT[,CKPT...]``): any crate_nn checkpoint whose
model has a class token, a patch embedding and an encoder.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .analysis.maskcut import TAU
from .analysis.segmentation import image_backbone, upsample
from .data import build_dataset
from .data.objects import ObjectImages
from .engine.loop import initial_model, train
from .engine.task import get_preset
from .evaluation.segmentation import LayerScores, evaluate_objects, maskcut_masks, score_masks
from .models.embedding import patchify
from .tasks.classification import LABELS, OBJECTS_SIZE, VARIANTS, ClassificationConfig
from .tasks.images import evaluation_transform
from .weights import load

METHODS = ("attention", "maskcut")
METRICS = ("miou", "jaccard", "corloc")


# --------------------------------------------------------------------------------------------- measurement
def splits(config: ClassificationConfig, images: int | None = None):
    """The validation and test splits of ``config``'s dataset as evaluation sees them (the first ``images`` of
    each when given: smoke runs)."""
    data = config.data
    options = dict(data_dir=data.data_dir, train=False, image_size=data.image_size, load_size=data.image_size,
                   eval_resize=data.image_size)
    val, test = (build_dataset(data.dataset, split, **options) for split in ("val", "test"))
    if images is None:
        return val, test
    return tuple(ObjectImages(d.images[:images], d.labels[:images], d.masks[:images], d.info.classes)
                 for d in (val, test))


def _select(val: Sequence[LayerScores], test: Sequence[LayerScores]) -> dict:
    """Per method, the layer with the highest validation mIoU and its test scores."""
    chosen = {}
    for method in METHODS:
        best = max(range(len(val)), key=lambda i: getattr(val[i], method)["miou"])
        chosen[method] = {"layer": val[best].layer, **getattr(test[best], method)}
    return chosen


@torch.no_grad()
def measure(model: nn.Module, config: ClassificationConfig, *, images: int | None = None, progress: bool = False
            ) -> dict:
    """Test accuracy (when the model has a classification head) and the per-layer segmentation scores of ``model``
    on the validation and test splits of ``config``'s dataset (their first ``images`` if given), with the selected
    layer per method."""
    val, test = splits(config, images)
    transform = evaluation_transform(config.data)
    model = model.float().cpu().eval()
    val_scores = evaluate_objects(model, val, transform, progress=progress)
    test_scores = evaluate_objects(model, test, transform, progress=progress)
    accuracy = None
    if hasattr(model, "forward_head") and not isinstance(getattr(model, "head", None), nn.Identity):
        logits = torch.cat([model(transform(chunk)) for chunk in test.images.split(256)])
        accuracy = float((logits.argmax(-1) == test.labels).double().mean())
    return {"accuracy": accuracy, "val": [dataclasses.asdict(s) for s in val_scores],
            "test": [dataclasses.asdict(s) for s in test_scores], "selected": _select(val_scores, test_scores)}


def measure_checkpoint(path: str | Path, config: ClassificationConfig | None = None, *, images: int | None = None,
                       progress: bool = False) -> dict:
    """`measure` for any crate_nn checkpoint with a class-token image backbone (`image_backbone`: a classifier, a
    DINO run's teacher, a CRATE-MAE's encoder): the plug-in point for extra rows of the table (no accuracy for the
    backbones without a classification head). The data settings come from ``config`` (default: the
    ``objects_crate`` preset; the backbone must take its RGB images, 32², with a patch size dividing 32)."""
    config = config or get_preset("objects_crate")
    return measure(extra_backbone(path, config), config, images=images, progress=progress)


def extra_backbone(path: str | Path, config: ClassificationConfig) -> nn.Module:
    """The `image_backbone` of the checkpoint ``path`` for an extra row, checked against ``config``'s images
    (channels; the patch size must divide the image side); ValueError naming ``extra`` and the file otherwise."""
    model = image_backbone(load(path), f"extra: checkpoint {path}")
    data = config.data
    channels, patch = len(data.mean), model.config.patch_size
    if model.config.in_channels != channels:
        raise ValueError(f"extra: checkpoint {path} takes {model.config.in_channels}-channel images; the "
                         f"{data.dataset} images have {channels}")
    if data.image_size % patch or (data.image_size != model.config.image_size
                                   and not model.config.dynamic_img_size):
        raise ValueError(f"extra: checkpoint {path} takes {model.config.image_size}² images (patch {patch}); the "
                         f"{data.dataset} images are {data.image_size}²")
    return model


def references(config: ClassificationConfig, images: int | None = None) -> dict:
    """Scores without a network on the test split: MaskCut on the raw (normalised) patch pixels, and the ceiling of
    any mask at patch resolution (the true mask downsampled to the grid by majority, upsampled back)."""
    _, test = splits(config, images)
    patch = config.network.model_args.get("patch_size", OBJECTS_SIZE["patch_size"])
    grid = (config.data.image_size // patch, config.data.image_size // patch)
    transform = evaluation_transform(config.data)
    pixels = patchify(transform(test.images), patch).double()
    cut = upsample(maskcut_masks(pixels, grid, tau=TAU), test.masks.shape[-2:])
    coarse = torch.nn.functional.avg_pool2d(test.masks[:, None].double(), patch)[:, 0] >= 0.5
    return {"pixels_maskcut": score_masks(cut, test.masks),
            "patch_ceiling": score_masks(upsample(coarse, test.masks.shape[-2:]), test.masks)}


# --------------------------------------------------------------------------------------------- statistics
def stats(values: Sequence[float]) -> dict:
    """Mean and sample standard deviation (ddof 1; 0 for one value) of per-seed values."""
    v = np.asarray(values, dtype=np.float64)
    return {"mean": float(v.mean()), "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0, "values": v.tolist()}


def summarize(runs: Sequence[dict]) -> dict:
    """Per row (``<name>`` trained, ``<name> init`` its random initialisation): accuracy and each method's
    selected-layer scores as `stats` over seeds."""
    rows: dict[str, dict] = {}
    for run in runs:
        name = run["name"] + ("" if run["state"] == "trained" else " init")
        row = rows.setdefault(name, {})
        if run["accuracy"] is not None:
            row.setdefault("accuracy", []).append(run["accuracy"])
        for method in METHODS:
            for metric in METRICS:
                row.setdefault(f"{method}_{metric}", []).append(run["selected"][method][metric])
    return {name: {key: stats(values) for key, values in row.items()} for name, row in rows.items()}


# --------------------------------------------------------------------------------------------- the experiment
def train_in_place(config: ClassificationConfig) -> nn.Module:
    """The trained model of ``config``, trained in its ``output_dir``: a run of the same config already there is
    resumed (a finished one only re-evaluated), one of another config is replaced."""
    if (Path(config.run.output_dir) / "checkpoints" / "last.pt").is_file():
        try:
            return load(train(config.replace(resume=True)).checkpoint)
        except ValueError as err:
            if not str(err).startswith("resume:"):
                raise
    return load(train(config.replace(overwrite=True)).checkpoint)


def run_experiment(output_dir: str | Path, *, seeds: Sequence[int] = (0, 1, 2, 3, 4),
                   variants: Sequence[str] = tuple(VARIANTS), overrides: Mapping | None = None,
                   extra: Mapping[str, Sequence[str]] | None = None, images: int | None = None,
                   progress: bool = True,
                   trained: Callable[[ClassificationConfig], nn.Module] = train_in_place) -> dict:
    """Train (or reuse) every variant for every seed (its run directory ``output_dir/<variant>-seed<s>``), measure
    the trained models and their initialisations, add ``extra`` checkpoints (name → one checkpoint per seed), and
    return the results (``runs``, ``references``, ``summary``, and ``examples`` of the first seed's models).
    ``overrides``: config fields applied to every preset (e.g. ``epochs`` for a shorter schedule; recorded in the
    results); ``images``: measure on the first images of each split only (smoke runs); ``trained``: how the
    trained model of a config is obtained (default `train_in_place`; the audit passes its cache of runs)."""
    output_dir = Path(output_dir)
    overrides = dict(overrides or {})
    runs, configs, shown = [], {}, {}
    for variant in variants:
        for seed in seeds:
            config = get_preset(f"objects_{variant}", **{"progress": progress, **overrides}, seed=seed,
                                output_dir=str(output_dir / f"{variant}-seed{seed}"))
            config.validate()
            configs[variant] = {k: v for k, v in config.to_dict().items() if k not in ("seed", "output_dir")}
            for state, model in (("trained", trained(config)), ("init", initial_model(config))):
                runs.append({"name": variant, "seed": seed, "state": state, **measure(model, config, images=images)})
                if state == "trained" and seed == seeds[0]:
                    shown[variant] = examples(model, config, runs[-1]["selected"])
    base = get_preset("objects_crate", **{k: v for k, v in overrides.items() if k not in ("model", "model_args")})
    for name, paths in (extra or {}).items():
        for seed, path in enumerate(paths):
            runs.append({"name": name, "seed": seed, "state": "trained", "checkpoint": str(path),
                         **measure_checkpoint(path, base, images=images)})
    summary = summarize(runs)
    return {"seeds": list(seeds), "overrides": overrides, "images": images, "configs": configs, "runs": runs,
            "examples": shown, "references": references(base, images), "summary": summary}


# --------------------------------------------------------------------------------------------- report
EXAMPLES = 8  # test images shown in the example figures



@torch.no_grad()
def examples(model: nn.Module, config: ClassificationConfig, selected: Mapping) -> dict:
    """The head-averaged attention map and the MaskCut mask, each at its selected layer, of the first test images
    (on the patch grid, as lists for JSON)."""
    from .analysis.segmentation import cls_attention, patch_codes, patch_grid

    _, test = splits(config)
    images = evaluation_transform(config.data)(test.images[:EXAMPLES])
    grid = patch_grid(model, images)
    attention = cls_attention(model, images, selected["attention"]["layer"])[0].mean(dim=1).unflatten(-1, grid)
    codes = patch_codes(model, images, selected["maskcut"]["layer"])[0]
    return {"attention": attention.tolist(), "maskcut": maskcut_masks(codes, grid).tolist()}


def _cell(entry: Mapping | None, percent: bool = True) -> str:
    if entry is None:
        return "—"
    scale = 100 if percent else 1
    return f"{scale * entry['mean']:.1f} ± {scale * entry['std']:.1f}"


def table(results: Mapping) -> str:
    """The laptop-scale Table 17 as markdown: mean ± std over seeds (percent), then the references."""
    keys = ["accuracy"] + [f"{m}_{k}" for m in METHODS for k in METRICS]
    heads = ["top-1", "attn mIoU", "attn Jaccard", "attn CorLoc", "MaskCut mIoU", "MaskCut Jaccard", "MaskCut CorLoc"]
    lines = ["| model | seeds | " + " | ".join(heads) + " | layers (attn; MaskCut) |",
             "|---|---|" + "---|" * len(heads) + "---|"]
    for name, row in results["summary"].items():
        base = name.removesuffix(" init")
        label = LABELS.get(base, base) + (", random init" if name.endswith(" init") else "")
        runs = [r for r in results["runs"] if r["name"] == base and (r["state"] == "init") == name.endswith(" init")]
        layers = "; ".join(",".join(str(r["selected"][m]["layer"] + 1) for r in runs) for m in METHODS)
        seeds = len(next(iter(row.values()))["values"])
        lines.append(f"| {label} | {seeds} | " + " | ".join(_cell(row.get(k)) for k in keys) + f" | {layers} |")
    for name, scores in results["references"].items():
        cells = ["—"] * 4 + [f"{100 * scores[k]:.1f}" for k in METRICS]
        label = {"pixels_maskcut": "MaskCut on raw pixels", "patch_ceiling": "patch-resolution ceiling"}[name]
        if name == "patch_ceiling":
            cells = ["—"] + [f"{100 * scores[k]:.1f}" for k in METRICS] * 2
        lines.append(f"| {label} | — | " + " | ".join(cells) + " | — |")
    lines += ["", "Layers are 1-based, chosen per model on the validation split. The papers' statements are decided "
              "from the per-seed numbers of results.json by the audit's 95% intervals over the seeds: "
              "`python -m verify --only table17`."]
    return "\n".join(lines) + "\n"


def _summary_figure(results: Mapping):
    from matplotlib.figure import Figure

    summary = results["summary"]
    names = [n for n in summary if not n.endswith(" init")]
    panels = [("accuracy", "top-1"), ("attention_miou", "attention mIoU"), ("maskcut_miou", "MaskCut mIoU"),
              ("maskcut_corloc", "MaskCut CorLoc")]
    fig = Figure(figsize=(4 * len(panels), 3.6), layout="constrained")
    for ax, (key, title) in zip(fig.subplots(1, len(panels)), panels):
        x = np.arange(len(names))
        for offset, suffix, label in ((-0.2, "", "trained"), (0.2, " init", "random init")):
            rows = [summary.get(n + suffix, {}).get(key) for n in names]
            ax.bar(x + offset, [r["mean"] if r else np.nan for r in rows], 0.4, yerr=[r["std"] if r else 0 for r in rows],
                   label=label, capsize=3)
        for ref, style in (("pixels_maskcut", ":"), ("patch_ceiling", "--")):
            metric = key.split("_", 1)[-1]
            if key != "accuracy" and metric in results["references"][ref]:
                ax.axhline(results["references"][ref][metric], ls=style, color="grey", lw=0.9,
                           label={"pixels_maskcut": "MaskCut on pixels", "patch_ceiling": "patch ceiling"}[ref])
        ax.set_xticks(x, [n.replace("_", "-") for n in names], fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", lw=0.3)
    ax.legend(fontsize=7)
    fig.suptitle(f"objects test split, mean ± std over seeds {results['seeds']}", fontsize=9)
    return fig


def _layers_figure(results: Mapping):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.6), layout="constrained")
    for ax, method in zip(fig.subplots(1, 2), METHODS):
        for name in dict.fromkeys(r["name"] for r in results["runs"]):
            for state, style in (("trained", "o-"), ("init", "x:")):
                curves = [[layer[method]["miou"] for layer in r["val"]] for r in results["runs"]
                          if r["name"] == name and r["state"] == state]
                if curves:
                    ax.plot(np.arange(1, len(curves[0]) + 1), np.mean(curves, axis=0), style,
                            label=f"{name} {state}" if state == "trained" else None)
        ax.set(xlabel="layer", ylabel="validation mIoU", title=f"{method} masks per layer (mean over seeds)")
        ax.grid(lw=0.3)
        ax.legend(fontsize=7)
    return fig


def write_report(results: Mapping, output_dir: str | Path, example_images: torch.Tensor | None = None) -> list[str]:
    """``results.json``, ``table.md``, ``summary.png`` and ``layers.png`` (and ``examples.png`` when the results carry
    examples and ``example_images`` are given) in ``output_dir``; returns the paths written."""
    from .analysis.segmentation import plot_rows

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "table.md").write_text(table(results))
    written = [str(out / "results.json"), str(out / "table.md")]
    for name, fig in (("summary.png", _summary_figure(results)), ("layers.png", _layers_figure(results))):
        fig.savefig(out / name, dpi=120)
        written.append(str(out / name))
    if results.get("examples") and example_images is not None:
        size = example_images.shape[-2:]
        maps = {f"{n} attention": upsample(torch.tensor(e["attention"]), size) for n, e in results["examples"].items()}
        masks = {f"{n} MaskCut": upsample(torch.tensor(e["maskcut"]), size) for n, e in results["examples"].items()}
        plot_rows(example_images, maps, kind="map", title="head-averaged [CLS] attention (selected layer)").savefig(
            out / "examples_attention.png", dpi=120)
        plot_rows(example_images, masks, kind="mask", title="MaskCut masks (selected layer)").savefig(
            out / "examples_maskcut.png", dpi=120)
        written += [str(out / "examples_attention.png"), str(out / "examples_maskcut.png")]
    return written
