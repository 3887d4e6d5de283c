"""The network audit's measuring and verdicts (`python -m verify.network`, whose command line is `verify.network`):
the papers' layer-wise claims decided on any checkpoint a user brings.

**Measures**, at every layer ℓ, per input (the long paper's Sec. 4.2, Figs. 15 and 26):

* R^c under the authors' protocol (the per-head unit codes of LN1(Z^ℓ), ε² = 0.01) and under the paper's formula,
  eq. (13), of the MSSA output Z^{ℓ+1/2}; R (eq. 8) of Z^{ℓ+1/2} and ΔR = R − R^c (the paper's formula);
* the joint measure (`crate_nn.analysis.protocol`: ``specific``, ``alignment``, ``spread``, ΔR of unit tokens),
  of Z^{ℓ+1/2} against the layer's subspaces, on the first ``--control-n`` inputs;
* sparsity ‖Z^{ℓ+1}‖₀/(d·n) of the ISTA output and Fig. 26's fraction of entries with |Z^{ℓ+1}| ≥ τ.

A ViT (``--against``) is measured against its value map (`crate_nn.analysis.diagnostics.subspace_weight`).

**Controls.** The same architecture at random initialisation (``--init-seeds``, 0 or ≥ 3), a run directory's own
initialisation (`crate_nn.engine.initial_model` of the config its checkpoint records), and every ``--against``
model, each measured on the first ``--control-n`` inputs of the sample (default 64); the model on all ``--n``.

**Verdicts**, each by `verify.statistics.compare` — the audit's one rule, a 95% interval, ``inconclusive`` when it
straddles the boundary — or, jointly, by `verify.joint.compresses` with the collapse floor at the size measured.
The unit of replication is stated with every verdict: the input for the claims about this network alone (its
layers against each other) and against one other network (its own initialisation, an ``--against`` model: paired
over the inputs both saw); the initialisation seed against the random initialisations (one value per seed, the
mean over the inputs, and the prediction interval of `verify.statistics.compare_one`: the spread between random
networks is large, and an interval over inputs, or of the seeds' mean, would call one random network "below"
another). Each verdict carries its scope: the papers' statement, on this network and
these inputs. The claims:

* R^c falls from layer 2 to L (each protocol): layer L − layer 2 below 0;
* R^c lies below each control at every layer (each protocol);
* the joint verdict against each initialisation: compression at every layer 2 … L − 1 (`verify.joint.from_layer_2`;
  the collapse floor of unknown memberships; footnote 17 exempts the last layer, as it does from the sparsity claims);
* sparsity rises with depth (‖Z‖₀/(dn) falls) from layer 1 to L − 1, the last layer exempt (footnote 17); the model
  sparser than each initialisation at every layer but the last;
* against each ``--against`` model (Fig. 26): its authors'-protocol R^c falls further from layer 1 to L,
  (R_1 − R_L)/R_1, and its outputs are sparser, the other's fraction of entries with |Z| ≥ τ higher (mean over
  layers) for every τ.

**The report** (`ReportFolder`): ``report.md`` opens with one sentence answering whether this network compresses and
sparsifies, and against what (`conclusion`), then the verdicts with their numbers, the per-layer means and the
figures; ``report.json`` (model, format, parameters, inputs and their preprocessing, N, seeds, versions, time,
per-layer means, every verdict with its numbers); ``figures/<measure>.png`` (per-layer means with 95% bands over
inputs for the model and its controls, over seeds for the random initialisations). Everything is written into a
folder of its own beside the report and moved into place when the audit ends, ``report.json`` last: a report
without ``report.json`` is not one, and an audit stopped before its end leaves the folder as it found it.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import platform
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from crate_nn.analysis.diagnostics import (
    OFFICIAL_EPS,
    THRESHOLDS,
    compression,
    sparsity,
    subspace_weight,
    thresholded_sparsity,
    trace,
)
from crate_nn.analysis.protocol import coding_rate, joint_measures
from crate_nn.files import atomic_write, write_json
from crate_nn.models.mssa import MSSA
from crate_nn.models.registry import build_model, family_of
from crate_nn.preprocessing import channel_count, image_pipeline
from crate_nn.weights import non_finite, read_state
from crate_nn.weights.adapter import spelled
from verify import experiments, plots
from verify.context import versions
from verify.joint import DRAWS, Judgement, Sizes, compresses, from_layer_2, layer_labels
from verify.statistics import MIN_SEEDS, Comparison, compare, compare_one, every, intervals
from verify.verdicts import exempting_the_last

SCOPE = "paper"
"""Every verdict here reads a statement of the papers, as they state it, on the network and the inputs given."""
LOCATION = "long version, Sec. 4.2, Figs. 14–15 and footnote 17; App. C.9, Fig. 26"
RATES = ("official", "paper", "rate", "delta_r")
"""R^c (authors' protocol), R^c (paper's formula), R and ΔR = R − R^c (paper) of Z^{ℓ+1/2}."""
JOINT = ("specific", "alignment", "spread", "rate_reduction", "nonnegative")
"""The joint measure's quantities `verify.joint.compresses` reads."""
NAMES = {"official": "R^c (authors' protocol)", "paper": "R^c (paper, eq. 13)", "rate": "R (eq. 8)",
         "delta_r": "ΔR = R − R^c (paper)", "sparsity": "‖Z^{ℓ+1}‖₀/(dn)",
         **{f"above_{tau:g}": f"|Z^{{ℓ+1}}| ≥ {tau:g}" for tau in THRESHOLDS},
         "specific": "specific R^c (joint)", "alignment": "alignment (joint)", "spread": "spread (joint)",
         "rate_reduction": "ΔR of unit tokens (joint)"}
"""Measure → how the report names it (Unicode; the figures' axes: `LABELS`)."""
LABELS = {"official": r"$R^c$ (authors' protocol)", "paper": r"$R^c$ (paper, eq. 13)", "rate": r"$R$ (eq. 8)",
          "delta_r": r"$\Delta R = R - R^c$ (paper)", "sparsity": r"$\|Z^{\ell+1}\|_0/(dn)$",
          **{f"above_{tau:g}": rf"$|Z^{{\ell+1}}| \geq {tau:g}$" for tau in THRESHOLDS},
          "specific": r"specific $R^c$ (joint)", "alignment": "alignment (joint)", "spread": "spread (joint)",
          "rate_reduction": r"$\Delta R$ of unit tokens (joint)"}
"""Measure → its axis label in the figures, in matplotlib's mathtext (`NAMES`' Unicode with TeX would show raw)."""
DISPLAY = {"run init": "the run's starting weights"}
"""Labels the figures and means show instead (every label holding "init" is drawn grey, the random ones')."""
INIT_SEEDS = 1000
"""The random initialisations' seeds start here, away from the small seeds runs use (and never the run's own, whose
initialisation is a control of its own)."""
BATCH_TOKENS = 8192
"""Tokens per batch when ``--batch-size`` is not given (41 images of 197 tokens, 8 windows of 1,024): every layer's
three stations of a batch are held at once, so memory follows the tokens, not the inputs."""


# --------------------------------------------------------------------------------------------- models
@dataclass
class Network:
    """A model measured: its ``label`` in the report, the model, where it came from, its format and, for an
    initialisation, its seed."""

    label: str
    model: nn.Module
    spec: str
    format: str
    seed: int | None = None

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def run_directory(spec: str) -> Path | None:
    """The run directory ``spec`` names (a folder holding ``config.json`` and ``checkpoints/last.pt``), else None."""
    path = Path(spec)
    if not path.is_dir():
        return None
    for needed in ("config.json", "checkpoints/last.pt"):
        if not (path / needed).is_file():
            raise ValueError(f"model: {spec!r} is a folder but not a run directory of crate-train (no {needed})")
    return path


FLAGS = {"model": dict(heads="--heads K", name="--name NAME"),
         "against": dict(heads="--against-heads K", name="--against-name NAME")}
"""How the command's errors name the options a file lacks, for the model and for an ``--against`` file."""


def load_network(spec: str, label: str, *, heads: int | None = None, name: str | None = None,
                 what: str = "model") -> Network:
    """The model of ``spec`` (a weights file, ``hf-hub:…`` or a run directory) in eval mode, float32, on the CPU;
    ValueError naming ``what`` (the argument: ``model``, ``against``) for a file that does not give one, or one
    holding NaN or ±Inf."""
    folder = run_directory(spec)
    with spelled(**FLAGS.get(what, {})):
        stored = read_state(folder / "checkpoints" / "last.pt" if folder else spec, what=what, heads=heads, name=name)
        model = stored.build()
    broken = non_finite(model)
    if broken:
        raise ValueError(f"{what}: {spec!r} holds non-finite weights ({broken}); no measure of it would be finite")
    return Network(label, model.float().eval(), spec, stored.format)


def random_inits(network: Network, seeds: Sequence[int]) -> list[Network]:
    """The model's architecture (its config) at random initialisation, one model per seed (the global generators
    are restored afterwards)."""
    config = network.model.config
    family_of(config)  # TypeError naming the class when no registered family builds it
    out = []
    for seed in seeds:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out.append(Network(f"random init {seed}", build_model(config).float().eval(), f"seed {seed}",
                               "random initialisation", seed))
    return out


def run_init(spec: str) -> Network | None:
    """A run directory's own initialisation (`crate_nn.engine.initial_model` of its recorded config), else None."""
    folder = run_directory(spec)
    if folder is None:
        return None
    import json

    import crate_nn.tasks  # noqa: F401 - registers the tasks whose configs runs record
    from crate_nn.engine import initial_model, recorded_config
    from crate_nn.weights import training_config

    task = json.loads((folder / "config.json").read_text()).get("task")
    config = recorded_config(training_config(folder / "checkpoints" / "last.pt"), task, str(folder))
    with torch.random.fork_rng(devices=[]):
        model = initial_model(config)
    return Network("run init", model.float().eval(), str(folder), "the run's initialisation", config.run.seed)


def check_comparable(other: Network, network: Network) -> None:
    """ValueError naming ``--against`` unless ``other`` takes the model's inputs (image size and channels, or a
    vocabulary holding the model's token ids)."""
    mine, theirs = network.model.config, other.model.config
    for name in ("image_size", "in_channels", "block_size"):
        if getattr(mine, name, None) != getattr(theirs, name, None):
            raise ValueError(f"against: {other.spec!r} has {name} {getattr(theirs, name, None)}, the model "
                             f"{getattr(mine, name, None)}; both must take the same inputs")
    if getattr(theirs, "vocab_size", 0) < getattr(mine, "vocab_size", 0):
        raise ValueError(f"against: {other.spec!r} has a vocabulary of {theirs.vocab_size}, the model "
                         f"{mine.vocab_size}")


# --------------------------------------------------------------------------------------------- inputs
@dataclass
class Inputs:
    """The sample every model sees: ``tensor``, the model inputs (normalised images (B, C, S, S) or token ids
    (B, T)), ``source`` (what they are), ``names`` (file names or window offsets), ``preprocessing`` (what was
    done to them, for report.json: the normalisation and where it came from, the files skipped; a text's
    tokenizer)."""

    tensor: torch.Tensor
    source: str
    names: list[str]
    preprocessing: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tensor)


def _count(count: int, n: int, all_inputs: bool, argument: str, where: str, unit: str) -> int:
    """How many of the ``count`` inputs ``where`` holds to take for ``--n`` ``n``: ``n``, or all ``count`` when
    fewer and ``all_inputs`` (the default ``--n``); ValueError naming ``argument`` when fewer than `MIN_SEEDS` are
    there, naming ``--n`` when an ``--n`` given exceeds them."""
    if count < MIN_SEEDS:
        raise ValueError(f"{argument}: {where} holds {count} {unit}; the audit's rule needs at least {MIN_SEEDS}")
    if count < n and not all_inputs:
        raise ValueError(f"n: {where} holds {count} {unit}; pass --n {count} or less")
    return min(n, count)


@dataclass
class ImageSample:
    """The files of an image folder drawn for the audit: ``chosen`` (a seeded order, the first ``n`` that are
    images), ``skipped`` ((name, why) of every file passed over: no image suffix, or not an image Pillow
    recognises) and ``candidates`` (the files with an image suffix)."""

    chosen: list[Path]
    skipped: list[tuple[str, str]]
    candidates: int

    def note(self) -> str:
        """``; 2 files skipped, not images (notes.txt, a.png)`` or ""."""
        if not self.skipped:
            return ""
        shown = ", ".join(name for name, _ in self.skipped[:3]) + (" …" if len(self.skipped) > 3 else "")
        return f"; {len(self.skipped)} file{'s' * (len(self.skipped) != 1)} skipped, not images ({shown})"


def image_files(root: Path, n: int, seed: int, *, grid: int, all_inputs: bool = False) -> ImageSample:
    """The images of the folder ``root`` the audit measures: in the seeded order of its files with an image suffix,
    the first ``n`` that Pillow recognises as images (read from their headers; nothing decoded). Files without an
    image suffix and files Pillow does not recognise are skipped and counted, not inputs. ValueError naming the file
    for an image larger than Pillow's decompression-bomb limit or with fewer pixels a side than the model has patches
    (``grid``: upscaled, its patches would hold less than a pixel each), and naming ``--n`` as `_count` does."""
    from PIL import Image, UnidentifiedImageError

    from crate_nn.data.images import IMAGE_EXTENSIONS, open_image

    files = sorted(f for f in root.rglob("*") if f.is_file())
    named = [f for f in files if f.suffix.lower() in IMAGE_EXTENSIONS]
    skipped = [(str(f.relative_to(root)), "no image suffix") for f in files if f.suffix.lower() not in IMAGE_EXTENSIONS]
    chosen: list[Path] = []
    for i in np.random.default_rng(seed).permutation(len(named)):
        if len(chosen) == n:
            break
        name = str(named[i].relative_to(root))
        try:
            with open_image(named[i]) as im:
                size = im.size
        except (Image.DecompressionBombWarning, Image.DecompressionBombError):
            raise ValueError(f"images: {name!r} is larger than Pillow's limit of {Image.MAX_IMAGE_PIXELS:,} pixels "
                             "(PIL.Image.MAX_IMAGE_PIXELS, against decompression bombs)") from None
        except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
            skipped.append((name, f"not an image Pillow recognises ({type(err).__name__})"))
            continue
        if min(size) < grid:
            raise ValueError(f"images: {name!r} is {size[0]}×{size[1]} pixels, fewer a side than the model's "
                             f"{grid}×{grid} patches (upscaled, each patch would hold less than a pixel); remove it")
        chosen.append(named[i])
    sample = ImageSample(chosen, skipped, len(named))
    _count(len(chosen), n, all_inputs, "images", repr(str(root)), "images" + sample.note())
    return sample


def image_inputs(model: nn.Module, n: int, seed: int, *, folder: str | None = None, dataset: str | None = None,
                 split: str = "test", all_inputs: bool = False, mean: Sequence[float] | None = None,
                 std: Sequence[float] | None = None, channels: int | None = None) -> Inputs:
    """``n`` images (a seeded sample: `image_files` of an image folder, or of a built-in dataset; all of them when
    fewer and ``all_inputs``), as the model takes them: resized, centre-cropped and normalised as
    `crate_nn.preprocessing.image_pipeline` decides from ``mean``, ``std``, ``channels`` and the model's record."""
    from crate_nn.data.batching import CorruptImageError
    from crate_nn.data.images import ImageFiles
    from crate_nn.data.registry import build_dataset
    from crate_nn.data.transforms import DeviceTransform

    size = model.config.image_size
    resize = max(size, round(size * 256 / 224))
    if folder is not None:
        root = Path(folder)
        if not root.is_dir():
            raise ValueError(f"images: {folder!r} does not exist or is not a folder")
        sample = image_files(root, n, seed, grid=size // model.config.patch_size, all_inputs=all_inputs)
        data = ImageFiles([(str(f), 0) for f in sample.chosen], ["-"], train=False, image_size=size,
                          load_size=resize, eval_resize=resize, strict=True)
        try:
            images = torch.stack([data[i][0] for i in range(len(data))])
        except CorruptImageError as err:
            raise ValueError(f"images: {err}") from None
        names, source = [str(f.relative_to(root)) for f in sample.chosen], f"image folder {folder}"
        drawn = f"{len(names)} of {sample.candidates} files with an image suffix{sample.note()}"
        skipped = [{"file": name, "why": why} for name, why in sample.skipped]
    else:
        data = build_dataset(dataset, split, data_dir=None, train=False, image_size=size, load_size=resize,
                             eval_resize=resize)
        take = _count(len(data), n, all_inputs, "dataset", f"{dataset} ({split} split)", "images")
        chosen = np.random.default_rng(seed).permutation(len(data))[:take]
        images = torch.stack([data[int(i)][0] for i in chosen])
        names, source = [f"{dataset}/{split}/{i}" for i in chosen], f"built-in dataset {dataset} ({split} split)"
        native = data.info.image_size
        drawn = f"{len(names)} of {len(data)}" + (f", {native}×{native} resized to {size}×{size}"
                                                  if native and native != size else "")
        skipped = []
    pipeline = image_pipeline(model, images.shape[1], source, mean=mean, std=std, channels=channels)
    transform = DeviceTransform(size, pipeline.mean, pipeline.std, train=False, channels=pipeline.channels)
    return Inputs(transform(images), f"{source}, {drawn}", names, {**pipeline.to_dict(), "skipped": skipped})


def text_inputs(model: nn.Module, path: str, n: int, seed: int, *, tokenizer: str | None = None,
                window: int | None = None, all_inputs: bool = False) -> Inputs:
    """``n`` windows of the text file ``path`` tokenised by the model's tokenizer: a seeded sample of its
    non-overlapping windows (overlapping ones would share tokens, and the intervals over them would claim more than
    the text holds); ValueError naming ``--n`` when it holds fewer (all of them taken when ``all_inputs``), naming
    ``text`` for an empty file and for one holding NUL bytes (a binary file: no text has them)."""
    from crate_nn.data.tokenizers import get_tokenizer

    recorded = getattr(getattr(model, "preprocessing", None), "tokenizer", None)
    spec = tokenizer or recorded
    if spec is None:
        raise ValueError("tokenizer: the checkpoint records no tokenizer; pass --tokenizer (bytes, tiktoken:gpt2, "
                         "hf:<name or tokenizer.json>)")
    if not Path(path).is_file():
        raise ValueError(f"text: {path!r} does not exist or is not a file")
    data = Path(path).read_bytes()
    if not data:
        raise ValueError(f"text: {path!r} is empty")
    first = data.find(b"\0")
    if first >= 0:
        raise ValueError(f"text: {path!r} holds NUL bytes (the first at byte {first:,}): a binary file, not text")
    ids = np.asarray(get_tokenizer(spec).encode(data.decode("utf-8", errors="replace")))
    block = window or model.config.block_size
    if block > model.config.block_size:
        raise ValueError(f"window: {block} exceeds the model's block_size {model.config.block_size}")
    vocab = model.config.vocab_size
    if ids.size and ids.max() >= vocab:
        raise ValueError(f"tokenizer: {spec} gives ids up to {ids.max()}, the model's vocabulary has {vocab}")
    count = ids.size // block
    take = _count(count, n, all_inputs, "text", f"{path!r} ({ids.size:,} tokens)",
                  f"non-overlapping windows of {block} tokens (a shorter --window gives more)")
    starts = block * np.random.default_rng(seed).permutation(count)[:take]
    windows = torch.from_numpy(np.stack([ids[s:s + block] for s in starts]).astype(np.int64))
    return Inputs(windows, f"text {path} ({ids.size} tokens, {spec}), {len(starts)} windows of {block}",
                  [f"tokens {s}–{s + block}" for s in starts], {"tokenizer": spec})


# --------------------------------------------------------------------------------------------- measuring
@torch.no_grad()
def measure(network: Network, inputs: torch.Tensor, *, joint_n: int, eps: float = OFFICIAL_EPS, draws: int = DRAWS,
            seed: int = 0, batch_size: int = 32, progress: bool = True) -> dict[str, np.ndarray]:
    """Every measure of the module docstring per input and layer: name → (inputs, L) float64 (the joint measure's
    for the first ``joint_n`` inputs; ``"sizes"``: d, n, heads, p of layer 1). Streams the inputs in batches."""
    model = network.model
    layers = model.encoder.layers
    generator = torch.Generator().manual_seed(seed)
    values: dict[str, list[list[torch.Tensor]]] = {}

    def add(name: str, i: int, v: torch.Tensor) -> None:
        values.setdefault(name, [[] for _ in layers])[i].append(v.to(torch.float64).cpu())

    done, sizes = 0, {}
    bar = tqdm(total=len(inputs), desc=f"measuring {network.label}", unit="input", disable=not progress,
               leave=False)
    for batch in inputs.split(batch_size):
        for i, (layer, t) in enumerate(zip(layers, trace(model, batch))):
            if not all(torch.isfinite(z).all() for z in (t.input, t.half, t.output)):
                raise ValueError(f"model: {network.label} ({network.spec}) gives non-finite tokens at layer {i + 1}: "
                                 "its weights or these inputs overflow")
            weight, heads = subspace_weight(layer), layer.attn.heads
            sizes = sizes or {"d": t.half.shape[-1], "n": t.half.shape[-2], "heads": heads,
                              "p": weight.shape[0] // heads}
            paper = compression(t.half, weight, heads, eps)
            rate = coding_rate(t.half, eps)
            add("official", i, compression(layer.norm1(t.input), weight, heads, eps, normalize=True))
            add("paper", i, paper)
            add("rate", i, rate)
            add("delta_r", i, rate - paper)
            add("sparsity", i, sparsity(t.output))
            for tau in THRESHOLDS:
                add(f"above_{tau:g}", i, thresholded_sparsity(t.output, tau))
            take = max(0, min(len(batch), joint_n - done))
            if take:
                for name, v in joint_measures(t.half[:take], weight, heads, eps, draws=draws,
                                              generator=generator).items():
                    if name in JOINT:
                        add(name, i, v)
        done += len(batch)
        bar.update(len(batch))
    bar.close()
    out = {name: torch.stack([torch.cat(v) for v in per_layer], 1).numpy() for name, per_layer in values.items()}
    return {**out, "sizes": sizes}


def pooled(measured: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The mean over models (the initialisation seeds) of each measure, input by input."""
    return {name: np.mean([m[name] for m in measured], axis=0) for name in measured[0] if name != "sizes"}


# --------------------------------------------------------------------------------------------- verdicts
@dataclass
class Verdict:
    """One claim decided on the network: ``id``, the ``statement`` read, the ``rule``, the ``verdict`` by the
    audit's one rule, a ``text`` with the numbers, and ``numbers`` (JSON) for report.json."""

    id: str
    statement: str
    rule: str
    verdict: str
    text: str
    numbers: dict = field(default_factory=dict)
    scope: str = SCOPE


def _text(c: Comparison) -> str:
    """``Δ mean [low, high] (n inputs)``: a comparison over inputs as the report prints it."""
    d = c.difference
    return f"Δ {d.mean:+.3g} [{d.low:+.3g}, {d.high:+.3g}] ({d.n} inputs)"


def _steps(values: np.ndarray, first: int, last: int) -> list[Comparison]:
    """Consecutive-layer differences ℓ+1 − ℓ for ℓ = first … last − 1 (1-based), each `compare`d below 0."""
    return [compare(values[:, i] - values[:, i - 1], direction="below") for i in range(first, last)]


def falls(measured: Mapping[str, np.ndarray], protocol: str) -> Verdict:
    """R^c (``protocol``) falls from layer 2 to L: layer L − layer 2 below 0 over the inputs."""
    rc = measured[protocol]
    depth = rc.shape[1]
    if depth < 3:
        raise ValueError(f"model: {depth} layers; 'R^c falls from layer 2 to L' needs at least 3")
    overall = compare(rc[:, -1] - rc[:, 1], direction="below")
    steps = _steps(rc, 2, depth)
    down = sum(c.verdict == "holds" for c in steps)
    return Verdict(f"rc-falls-{protocol}", f"{NAMES[protocol]} falls with depth, from layer 2 to layer L "
                   "(Fig. 15: the compression term improves as ℓ increases)",
                   "layer L − layer 2, 95% interval over inputs below 0", overall.verdict,
                   f"layer {depth} − layer 2 {_text(overall)}; {down} of {len(steps)} steps from layer 2 on fall",
                   {"overall": overall.as_dict(), "steps": [c.as_dict() for c in steps]})


def units(measured: Mapping[str, np.ndarray], control: Sequence[Mapping[str, np.ndarray]], name: str,
          layer: int) -> tuple[np.ndarray, np.ndarray, str]:
    """(this network's values, the control's, what one value is) of measure ``name`` at ``layer`` (0-based), paired.

    A control of several initialisations (≥ `verify.statistics.MIN_SEEDS` seeds) is a population of networks: one
    value per seed, the mean over the inputs both saw, against this network's mean over the same inputs, compared by
    the prediction interval (`verify.statistics.compare_one`): the spread between random initialisations is then in
    the interval (it is large: a random CRATE-α B/16's R^c moves by several nats from one seed to another), and a
    network drawn from the population itself lies outside it in 5% of draws. A control of one network (a run's own
    initialisation) is compared input by input: the interval says whether this pair of networks differs on such
    inputs."""
    k = len(control[0][name])
    if len(control) >= MIN_SEEDS:
        b = np.array([c[name][:, layer].mean() for c in control])
        return np.full(len(b), measured[name][:k, layer].mean()), b, (f"{len(b)} initialisation seeds (each the "
                                                                      f"mean over {k} inputs; prediction interval)")
    if len(control) != 1:
        raise ValueError(f"control: expected one network or at least {MIN_SEEDS} seeds, got {len(control)}")
    return measured[name][:k, layer], control[0][name][:, layer], f"{k} inputs, paired (one network)"


def _against(a: np.ndarray, b: np.ndarray, control: Sequence, direction: str) -> Comparison:
    """The comparison of `units`' values: against seeds, `verify.statistics.compare_one` (this network is one, the
    seeds draws of a population: does it lie outside it?); over inputs, `verify.statistics.compare`, paired."""
    if len(control) >= MIN_SEEDS:
        return compare_one(float(a[0]), b, direction=direction)
    return compare(a, b, direction=direction)


def below(measured: Mapping[str, np.ndarray], control: Sequence[Mapping[str, np.ndarray]], label: str,
          protocol: str) -> Verdict:
    """R^c (``protocol``) lies below the control's at every layer (`units`)."""
    depth = measured[protocol].shape[1]
    pairs = [units(measured, control, protocol, i) for i in range(depth)]
    comparisons = [_against(a, b, control, "below") for a, b, _ in pairs]
    return Verdict(f"rc-below-{_slug(label)}-{protocol}", f"{NAMES[protocol]} lies below the {label}'s at "
                   "every layer", f"this − {label} per layer over {pairs[0][2]}, every interval below 0",
                   every(comparisons), "per layer " + "; ".join(f"{c.difference.mean:+.3g}" for c in comparisons)
                   + f" ({sum(c.verdict == 'holds' for c in comparisons)} of {depth} layers below, "
                   f"{sum(c.verdict == 'fails' for c in comparisons)} above)",
                   {"unit": pairs[0][2], "per_layer": [c.as_dict() for c in comparisons]})


def joint(measured: Mapping[str, np.ndarray], control: Sequence[Mapping[str, np.ndarray]], label: str,
          sizes: Sizes) -> Verdict:
    """The joint verdict of the model against an initialisation at every layer but the first and the last
    (`verify.joint.from_layer_2` with footnote 17's exemption, as the sparsity verdicts), each measure compared over
    `units`."""
    depth = measured["specific"].shape[1]
    judged: list[Judgement] = []
    for i in range(depth):
        pairs = {name: units(measured, control, name, i) for name in JOINT}
        judged.append(compresses({n: a for n, (a, _, _) in pairs.items()}, {n: b for n, (_, b, _) in pairs.items()},
                                 floor=sizes, population=len(control) >= MIN_SEEDS))
    unit = units(measured, control, "specific", 0)[2]
    last = judged[-1]
    return Verdict(f"joint-{_slug(label)}", f"The layers compress the tokens relative to the {label}, jointly: "
                   "onto their own subspaces (specific R^c lower, alignment higher), not by collapse",
                   f"verify.joint.compresses per layer over {unit}, collapse floor {sizes.floor:.4g} at d {sizes.d}, "
                   f"n {sizes.n}, K {sizes.heads} (memberships unknown: every token of an input on one subspace); "
                   "holds when layers 2 … L − 1 all compress (layer 1 and, footnote 17, the last reported apart)",
                   from_layer_2(judged, exempt_last=True),
                   f"{layer_labels(judged)} (layer {depth} apart: footnote 17); ΔR of unit tokens at the last layer, "
                   f"this − {label}: " + (f"{last.rate_reduction.difference.mean:+.3g}" if last.rate_reduction else "—")
                   + "".join(f"; layer {i}: {j.objective}" for i, j in enumerate(judged, 1) if j.objective),
                   {"unit": unit, "per_layer": [j.as_dict() for j in judged], "floor": sizes.floor,
                    "labels": [j.label for j in judged], "exempt_last": True})


DENSE = ("; Z^{ℓ+1} has no zero entry at any layer: the block's output is a residual stream (CRATE-α's ISTA block "
         "adds its input back), not the ReLU codes the claim is about, so no interval can leave 0")
"""Added to a sparsity verdict when the model's outputs are dense everywhere."""


def _dense(values: np.ndarray) -> str:
    return DENSE if np.all(values == 1) else ""


def sparsity_rises(measured: Mapping[str, np.ndarray]) -> Verdict:
    """‖Z‖₀/(dn) falls from layer 1 to L − 1 (footnote 17 exempts the last layer)."""
    values = measured["sparsity"]
    depth = values.shape[1]
    if depth < 3:
        raise ValueError(f"model: {depth} layers; 'sparsity rises with depth' needs at least 3")
    overall = compare(values[:, -2] - values[:, 0], direction="below")
    last = compare(values[:, -1] - values[:, -2], direction="below")
    return Verdict("sparsity-rises", "The representations become sparser with depth: ‖Z^{ℓ+1}‖₀/(dn) falls from "
                   "layer 1 to layer L − 1 (footnote 17 exempts the last, mixed for the classifier)",
                   "layer L − 1 − layer 1, 95% interval over inputs below 0",
                   overall.verdict, f"layer {depth - 1} − layer 1 {_text(overall)}; the last layer (apart) − layer "
                   f"{depth - 1}: {last.difference.mean:+.3g}" + _dense(values),
                   {"overall": overall.as_dict(), "last_layer": last.as_dict()})


def sparser(measured: Mapping[str, np.ndarray], control: Sequence[Mapping[str, np.ndarray]],
            label: str) -> Verdict:
    """‖Z‖₀/(dn) below the control's at every layer but the last (footnote 17), over `units`."""
    pairs = [units(measured, control, "sparsity", i) for i in range(measured["sparsity"].shape[1])]
    comparisons = [_against(a, b, control, "below") for a, b, _ in pairs]
    verdict, text = exempting_the_last(comparisons)
    return Verdict(f"sparser-than-{_slug(label)}", f"The representations are sparser than the {label}'s at every "
                   "layer but the last (footnote 17)", f"this − {label} per layer over {pairs[0][2]}",
                   verdict, text + _dense(measured["sparsity"]),
                   {"unit": pairs[0][2], "per_layer": [c.as_dict() for c in comparisons]})


def versus(measured: Mapping[str, np.ndarray], other: Mapping[str, np.ndarray], label: str) -> list[Verdict]:
    """Fig. 26 against another model: the authors' R^c falls further, (R_1 − R_L)/R_1, and the outputs are sparser
    (the other's fraction of |Z| ≥ τ higher, mean over layers, for every τ), paired over the inputs both saw."""
    k = len(other["official"])

    def fall(values: np.ndarray) -> np.ndarray:
        return (values[:, 0] - values[:, -1]) / values[:, 0]

    compression_ = compare(fall(measured["official"][:k]), fall(other["official"]), direction="above")
    dense = [compare(other[f"above_{tau:g}"].mean(1), measured[f"above_{tau:g}"][:k].mean(1), direction="above")
             for tau in THRESHOLDS]
    return [
        Verdict(f"fig26-compression-vs-{_slug(label)}", f"This network's authors'-protocol R^c falls further from "
                f"layer 1 to L than {label}'s (Fig. 26: a ViT does not optimise the compression term)",
                f"(R_1 − R_L)/R_1, this − {label}, paired over {k} inputs, interval above 0", compression_.verdict,
                f"fall this {fall(measured['official'][:k]).mean():+.3g}, {label} {fall(other['official']).mean():+.3g};"
                f" {_text(compression_)}", {"comparison": compression_.as_dict()}),
        Verdict(f"fig26-sparsity-vs-{_slug(label)}", f"{label}'s outputs are denser: its fraction of entries with "
                "|Z^{ℓ+1}| ≥ τ (mean over layers) is higher for every τ (Fig. 26)",
                f"{label} − this for τ ∈ {THRESHOLDS}, paired over {k} inputs, every interval above 0", every(dense),
                "; ".join(f"τ {tau:g}: {c.difference.mean:+.3g}" for tau, c in zip(THRESHOLDS, dense)),
                {"per_threshold": [c.as_dict() for c in dense]}),
    ]


def _slug(label: str) -> str:
    return "-".join("".join(ch if ch.isalnum() else " " for ch in label.lower()).split())


def decide(measured: Mapping[str, np.ndarray], inits: Mapping[str, Sequence[Mapping[str, np.ndarray]]],
           against: Mapping[str, Mapping[str, np.ndarray]], sizes: Sizes) -> list[Verdict]:
    """Every claim of the module docstring: ``inits`` the initialisation controls by label (same architecture; one
    measurement per network: several seeds, or one network), ``against`` the other models by label."""
    out = [falls(measured, "official"), falls(measured, "paper")]
    for label, control in inits.items():
        out += [below(measured, control, label, "official"), below(measured, control, label, "paper"),
                joint(measured, control, label, sizes)]
    out.append(sparsity_rises(measured))
    out += [sparser(measured, control, label) for label, control in inits.items()]
    for label, other in against.items():
        out += versus(measured, other, label)
    return out


# --------------------------------------------------------------------------------------------- the report
def _band(values: np.ndarray) -> tuple[list[float], list[float]]:
    """Per-layer 95% interval of the mean over the rows of ``values`` (inputs or seeds)."""
    found = intervals(values)
    return [c.low for c in found], [c.high for c in found]


def figures(folder: Path, series: Mapping[str, Mapping[str, np.ndarray]], title: str,
            seeds: Mapping[str, Sequence[Mapping[str, np.ndarray]]]) -> list[str]:
    """One figure per measure (its axis `LABELS`): per-layer means, a curve per network measured, with 95% bands over
    inputs — or, for a control of several initialisations (``seeds``: label → one measurement per seed), over the
    seeds' means, the spread its verdicts weigh."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in NAMES:
        curves = {label: values[name] for label, values in series.items() if name in values}
        if not curves:
            continue
        bands = {k: _band(np.array([[m[name][:, i].mean() for i in range(v.shape[1])] for m in seeds[k]])
                          if k in seeds else v) for k, v in curves.items()}
        panel = LABELS[name]
        paths.append(plots.per_layer(folder / f"{name}.png", {panel: {k: list(v.mean(0)) for k, v in curves.items()}},
                                     title=title, bands={panel: bands}))
    return paths


def _state(verdicts: Sequence[str]) -> str:
    """What a group of verdicts says together: ``yes`` (all hold), ``no`` (all fail), ``mixed`` (some hold, some
    fail) or ``open`` (else: an inconclusive one among them)."""
    if all(v == "holds" for v in verdicts):
        return "yes"
    if all(v == "fails" for v in verdicts):
        return "no"
    return "mixed" if {"holds", "fails"} <= set(verdicts) else "open"


def _clause(found: Mapping[str, str], ids: Sequence[str], forms: tuple[str, str, str], what: str) -> str:
    """``compresses (R^c from layer 2 to L: holds, holds)``: the verdicts ``ids`` as a verb phrase; ``forms`` are
    the phrase when they hold, fail and the verb's base (``is not shown to …``)."""
    verdicts = [found[i] for i in ids if i in found]
    yes, no, base = forms
    verb = {"yes": yes, "no": no, "mixed": f"{yes} by some measures, not by others",
            "open": f"is not shown to {base}"}[_state(verdicts)]
    return f"{verb} ({what}: {', '.join(verdicts)})"


COMPRESS = ("compresses", "does not compress", "compress")
SPARSIFY = ("sparsifies", "does not sparsify", "sparsify")
COMPRESS_MORE = ("compresses more", "does not compress more", "compress more")
SPARSER = ("is sparser", "is not sparser", "be sparser")


def conclusion(verdicts: Sequence[Verdict], n: int, inits: Mapping[str, int], against: Sequence[str]) -> str:
    """The report's opening sentence: does this network compress and sparsify, and against what — with depth (its
    layers against each other, over ``n`` inputs), against each initialisation control (``inits``: label → networks)
    and against each ``--against`` model — each part the verdicts it stands on, in order."""
    found = {v.id: v.verdict for v in verdicts}
    parts = [f"On these {n} inputs, with depth this network "
             + _clause(found, ["rc-falls-official", "rc-falls-paper"], COMPRESS,
                       "R^c from layer 2 to L, authors' protocol and paper's formula")
             + " and " + _clause(found, ["sparsity-rises"], SPARSIFY, "‖Z‖₀/(dn) from layer 1 to L − 1")]
    for label, count in inits.items():
        slug = _slug(label)
        name = (f"{count} random initialisations of its architecture" if count > 1
                else DISPLAY.get(label, label))
        parts.append(f"against {name} it "
                     + _clause(found, [f"rc-below-{slug}-official", f"rc-below-{slug}-paper", f"joint-{slug}"],
                               COMPRESS_MORE, "R^c below at every layer, both protocols, and jointly")
                     + " and " + _clause(found, [f"sparser-than-{slug}"], SPARSER, "every layer but the last"))
    for label in against:
        slug = _slug(label)
        parts.append(f"against {label} it " + _clause(found, [f"fig26-compression-vs-{slug}"], COMPRESS_MORE,
                                                      "(R_1 − R_L)/R_1")
                     + " and " + _clause(found, [f"fig26-sparsity-vs-{slug}"], SPARSER, "|Z| ≥ τ for every τ"))
    return "; ".join(parts) + "."


def markdown(meta: Mapping, verdicts: Sequence[Verdict], means: Mapping[str, Mapping[str, list[float]]],
             figure_paths: Sequence[str], folder: Path) -> str:
    """report.md: the conclusion, what was measured, the verdicts with their numbers, the per-layer means, the
    figures."""
    lines = [f"# White-box audit of {meta['model']['spec']}", "", f"**{meta['conclusion']}**", "",
             f"- model: {meta['model']['format']}, {meta['model']['parameters']:,} parameters, "
             f"{meta['model']['layers']} layers (d {meta['sizes']['d']}, n {meta['sizes']['n']} tokens per input, "
             f"K {meta['sizes']['heads']})",
             f"- inputs: {meta['inputs']['source']}; seed {meta['inputs']['seed']}; controls on the first "
             f"{meta['inputs']['control_n']}" + _preprocessed(meta['inputs']['preprocessing']),
             f"- controls: {', '.join(meta['controls']) or 'none'}",
             f"- scope: the papers' statements ({LOCATION}) on this network and these inputs; each rule names its "
             "unit of replication (inputs, paired where both sides saw them, or initialisation seeds)",
             f"- time: {meta['seconds']:.0f} s on {meta['machine']}; crate_nn code {meta['versions']['crate_nn code']}, "
             f"torch {meta['versions']['torch']}", "",
             "| claim | verdict | rule | numbers |", "|---|---|---|---|"]

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines += [f"| `{v.id}`: {cell(v.statement)} | **{v.verdict}** | {cell(v.rule)} | {cell(v.text)} |"
              for v in verdicts]
    lines += ["", "## Per-layer means", ""]
    for name, by_label in means.items():
        lines.append(f"**{NAMES[name]}**: " + "; ".join(f"{label} " + " ".join(f"{x:.4g}" for x in values)
                                                        for label, values in by_label.items()))
        lines.append("")
    lines += [f"![{Path(p).stem}]({Path(p).relative_to(folder).as_posix()})" for p in figure_paths]
    return "\n".join(lines) + "\n"


def _preprocessed(done: Mapping) -> str:
    """``; normalised by mean (…) and std (…), ImageNet's (…); converted to 3 channels`` for report.md."""
    if "mean" not in done:
        return f"; tokenizer {done['tokenizer']}" if "tokenizer" in done else ""
    return (f"; normalised by mean {tuple(done['mean'])} and std {tuple(done['std'])}, {done['source']}"
            + (f"; converted to {channel_count(done['channels'])}" if done["channels"] else ""))


def summary(meta: Mapping, verdicts: Sequence[Verdict], folder: Path) -> str:
    """The console's summary, at most 15 lines: what was audited, the conclusion, the verdicts, the report."""
    counts = {v: sum(x.verdict == v for x in verdicts) for v in ("holds", "fails", "inconclusive")}
    head = [f"{meta['model']['spec']} ({meta['model']['format']}, {meta['model']['parameters']:,} parameters), "
            f"{meta['inputs']['n']} inputs, {meta['seconds']:.0f} s",
            meta["conclusion"],
            f"{len(verdicts)} claims (the papers' statements on this network): "
            + ", ".join(f"{n} {v}" for v, n in counts.items())]
    body = [f"  {v.verdict:<12} {v.id}: {v.text}" for v in verdicts]
    room = 15 - len(head) - 1
    if len(body) > room:
        body = body[:room - 1] + [f"  … {len(body) - room + 1} more in the report"]
    return "\n".join([*head, *(line if len(line) <= 160 else line[:157] + "…" for line in body),
                      f"report: {folder / 'report.md'}"])


# --------------------------------------------------------------------------------------------- the report folder
class ReportFolder:
    """Where one audit writes its report, held from before the measuring to the end: ``with ReportFolder(path,
    overwrite) as out: … out.publish(write)``.

    Entering checks the folder — not a file, no report already in it unless ``overwrite`` (a report is a folder
    holding ``report.json``) — takes its lock (`crate_nn.files.FileLock` on ``.network-audit.lock``: a second audit
    of the same folder is refused, naming the first) and makes a staging folder inside it (so a folder that cannot
    be written is told before minutes of measuring). `publish` has ``write(staging)`` write the report there, then
    moves it into place: the old report's ``report.json`` removed first, ``report.json`` moved last, so that a
    folder holding ``report.json`` holds a whole report. Leaving without publishing (an error, SIGTERM, SIGINT)
    removes the staging folder, and the folder itself when the audit made it; a report already there is untouched."""

    LOCK = ".network-audit.lock"
    STAGING = ".network-audit-partial-"

    def __init__(self, path: Path, overwrite: bool) -> None:
        self.path, self.overwrite = Path(path), overwrite
        self.made, self.published, self.staging, self.lock = False, False, None, None

    def __enter__(self) -> ReportFolder:
        from crate_nn.files import FileLock

        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"out: {str(self.path)!r} is a file, not a folder")
        if (self.path / "report.json").exists() and not self.overwrite:
            raise ValueError(f"out: {str(self.path)!r} holds a report already; pass --overwrite to replace it, or "
                             "another --out")
        try:
            self.made = not self.path.exists()
            self.path.mkdir(parents=True, exist_ok=True)
            self.lock = FileLock(self.path / self.LOCK, refuse=lambda holder: ValueError(
                f"out: {str(self.path)!r} is being written by another audit ({holder}); wait for it, or pass "
                "another --out"))
            self.lock.__enter__()
            for stale in self.path.glob(self.STAGING + "*"):  # left by an audit killed outright (we hold the lock)
                shutil.rmtree(stale, ignore_errors=True)
            self.staging = self.path / f"{self.STAGING}{os.getpid()}"
            self.staging.mkdir()
        except OSError as err:
            self._leave()
            raise ValueError(f"out: cannot write in {str(self.path)!r}: {err.strerror or err}") from None
        except BaseException:
            self._leave()
            raise
        return self

    def publish(self, write) -> None:
        """``write(staging folder)``, then its files moved into the folder, ``report.json`` last."""
        write(self.staging)
        made = sorted(p.name for p in self.staging.iterdir())
        (self.path / "report.json").unlink(missing_ok=True)
        for name in [*(n for n in made if n != "report.json"), *(n for n in made if n == "report.json")]:
            target = self.path / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(self.staging / name, target)
        self.published = True

    def _leave(self) -> None:
        if self.staging is not None:
            shutil.rmtree(self.staging, ignore_errors=True)
        if self.lock is not None:
            if self.made and not self.published:
                (self.path / self.LOCK).unlink(missing_ok=True)
            self.lock.__exit__(None, None, None)
        if self.made and not self.published:
            with contextlib.suppress(OSError):
                self.path.rmdir()  # only when empty: what the audit made, nothing else

    def __exit__(self, *exc) -> None:
        self._leave()


# --------------------------------------------------------------------------------------------- the audit
def audit(args: argparse.Namespace, progress: bool = True) -> tuple[dict, list[Verdict], Path]:
    """Load, sample, measure every network, decide, write the report (the arguments of `verify.network`);
    (report.json's dict, verdicts, folder). Every input is checked — the models, the sample, its preprocessing —
    before the report folder is taken (`ReportFolder`), and the folder before anything is measured."""
    start, cpu = time.perf_counter(), time.process_time()
    if args.threads:
        torch.set_num_threads(args.threads)
    network = load_network(args.model, "this network", heads=args.heads, name=args.name)
    model = network.model
    if not all(isinstance(layer.attn, MSSA) for layer in model.encoder.layers):
        raise ValueError(f"model: {args.model!r} has no MSSA layers (a ViT?); bring it as --against beside a CRATE")
    if len(model.encoder.layers) < 3:
        raise ValueError(f"model: {args.model!r} has {len(model.encoder.layers)} layers; the claims from layer 2 on "
                         "need at least 3")
    if args.text is not None:
        if not hasattr(model.config, "block_size"):
            raise ValueError("text: the model is not a language model; give --images or --dataset")
        inputs = text_inputs(model, args.text, args.n, args.seed, tokenizer=args.tokenizer, window=args.window,
                             all_inputs=args.all_inputs)
    else:
        if not hasattr(model.config, "image_size"):
            raise ValueError("images, dataset: the model takes text; give --text")
        inputs = image_inputs(model, args.n, args.seed, folder=args.images, dataset=args.dataset, split=args.split,
                              all_inputs=args.all_inputs, mean=args.mean, std=args.std, channels=args.channels)
    control_n = min(args.control_n, len(inputs))
    own = run_init(args.model)
    if not args.init_seeds and own is None and not args.against:
        raise ValueError("init-seeds: 0, and no other control (a run directory's own initialisation, --against): "
                         "the claims against a control need one")
    others = []
    for spec in args.against:
        label = Path(spec.rsplit(":", 1)[-1]).stem
        label = label if label not in [o.label for o in others] else f"{label} ({len(others) + 1})"
        others.append(load_network(spec, label, heads=args.against_heads, name=args.against_name, what="against"))
    for other in others:
        check_comparable(other, network)
    folder = Path(args.out or Path("network-audit") / _slug(Path(args.model.rstrip("/").split(":")[-1]).stem
                                                            or "model"))
    with ReportFolder(folder, args.overwrite) as out:
        report, verdicts = measure_and_decide(args, network, inputs, control_n, own, others, progress)
        report["seconds"] = time.perf_counter() - start
        report["cpu_seconds"] = time.process_time() - cpu

        def write(staging: Path) -> None:
            paths = figures(staging / "figures", report.pop("series"), f"{args.model}: per-layer means, 95% bands "
                            "(over inputs; random initialisations: over seeds)", report.pop("seeds"))
            report["figures"] = [Path(p).relative_to(staging).as_posix() for p in paths]
            text = markdown(report, verdicts, report["means"], paths, staging)
            with atomic_write(staging / "report.md", "network audit report") as f:
                f.write(text.encode())
            write_json(staging / "report.json", report, "network audit report", indent=1)

        out.publish(write)
    return report, verdicts, folder


def measure_and_decide(args: argparse.Namespace, network: Network, inputs: Inputs, control_n: int,
                       own: Network | None, others: Sequence[Network], progress: bool) -> tuple[dict, list[Verdict]]:
    """Every network measured, the claims decided: (report.json's dict without its times and figures, with
    ``series`` and ``seeds`` for `figures`; the verdicts)."""
    model = network.model
    taken = {own.seed} if own is not None else set()
    controls = random_inits(network, [s for s in range(INIT_SEEDS, INIT_SEEDS + args.init_seeds + 1)
                                      if s not in taken][:args.init_seeds])
    tokens = inputs.tensor.shape[1] if inputs.tensor.ndim == 2 else \
        (model.config.image_size // model.config.patch_size) ** 2 + 1
    options = dict(seed=args.seed, batch_size=args.batch_size or max(1, BATCH_TOKENS // tokens), progress=progress)
    measured = measure(network, inputs.tensor, joint_n=control_n, **options)
    head = inputs.tensor[:control_n]
    inits = {}
    if controls:
        inits["random init"] = [measure(c, head, joint_n=control_n, **options) for c in controls]
    if own is not None:
        inits[own.label] = [measure(own, head, joint_n=control_n, **options)]
    against = {o.label: measure(o, head, joint_n=0, **options) for o in others}
    s = measured["sizes"]
    sizes = Sizes(s["d"], s["n"], s["heads"], s["p"])  # memberships unknown: the worst case over every law
    verdicts = decide(measured, inits, against, sizes)
    first = {f"this network, first {control_n} inputs": {k: v[:control_n] for k, v in measured.items()
                                                        if k != "sizes"}} if control_n < len(inputs) else {}
    shown = {label: DISPLAY.get(label, label) for label in inits}
    series = {"this network": measured, **first, **{shown[label]: pooled(m) for label, m in inits.items()},
              **against}
    means = {name: {label: [float(x) for x in v[name].mean(0)] for label, v in series.items() if name in v}
             for name in NAMES}
    report = {
        "model": {"spec": args.model, "format": network.format, "parameters": network.parameters,
                  "layers": len(model.encoder.layers), "config": dataclasses.asdict(model.config)},
        "inputs": {"source": inputs.source, "n": len(inputs), "control_n": control_n, "seed": args.seed,
                   "names": inputs.names, "preprocessing": inputs.preprocessing},
        "controls": [*([f"random init ×{len(controls)} (seeds {', '.join(str(c.seed) for c in controls)})"]
                       if controls else []), *([own.label] if own else []),
                     *(f"{o.label} ({o.format}, {o.spec})" for o in others)],
        "conclusion": conclusion(verdicts, len(inputs), {label: len(m) for label, m in inits.items()},
                                 list(against)),
        "sizes": {**s, "floor": sizes.floor, "orthant_floor": sizes.collapse_floor().orthant_floor,
                  "memberships": sizes.memberships},
        "versions": {**versions(), "python": platform.python_version(), "crate_nn code": experiments.CODE},
        "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "means": means, "verdicts": [dataclasses.asdict(v) for v in verdicts],
        "series": series, "seeds": {shown[label]: m for label, m in inits.items() if len(m) >= MIN_SEEDS},
    }
    return report, verdicts
