"""A checkpoint as a subject of the layer-wise family (`verify.layerwise`): the papers' layer-wise claims decided on
any network a user brings (``python -m verify.network``, whose command line is `verify.network`).

**What a network supplies** (`Network.tokens`): per batch of inputs and per layer ℓ, its token sets — LN1(Z^ℓ) (the
authors' protocol reads it), Z^{ℓ+1/2} after the attention step, Z^{ℓ+1} after the layer — and the subspaces
[U_1 … U_K]* they are measured against (MSSA's, or a ViT's value map, `crate_nn.analysis.diagnostics.subspace_weight`).
That is all a subject needs: a network of another library plugs in by overriding `Network.tokens` (forward hooks on its
blocks, its value rows as the subspaces), `Network.random` (its architecture at a seeded random initialisation) and
`Network.takes` (the sizes its inputs are cut to) — `verify.hooked` does so for a Hugging Face transformers ViT, BERT
or GPT-2 (``transformers:FOLDER``); a timm or DINO ViT is read by `crate_nn.load` into the project's ViT. A subject
that is not a CRATE (a ViT, BERT, GPT-2) gets the same rows against its random initialisations, its value rows as
the subspaces (Fig. 26). `measure` turns the token sets into every measure, per input and layer: R^c under the
authors' protocol and the paper's formula — per head and summed —, R and ΔR of Z^{ℓ+1/2}, the joint measure
(`crate_nn.analysis.protocol`, on the first ``--control-n`` inputs), ‖Z^{ℓ+1}‖₀/(dn) and Fig. 26's fraction of
|Z^{ℓ+1}| ≥ τ.

**The controls** (`Checkpoint`): random initialisations of the architecture (``--init-seeds`` from
``--init-seed-start``, never the run's own seed), a run directory's own initialisation
(`crate_nn.engine.initial_model`), and every ``--against`` network named by ``--against-name`` — a CRATE (an earlier
epoch of one's own run, Fig. 15) is a control as an initialisation is, a ViT is Fig. 26's comparison. Each is
measured on the first ``--control-n`` inputs; the model on all ``--n``.

**The rows** (`rows`): R^c falls from layer 2 to L (each protocol) and the sparsity from layer 1 to L − 1 (footnote
17); against each initialisation control and CRATE: R^c below it at every layer (each protocol), the joint
measure at every layer 2 … L − 1 and the sparsity at every layer but the last (footnote 17); against each ViT:
Fig. 26's fall of R^c and density for every τ. `Checkpoint.sample` supplies each row's numbers with its unit of
replication: the input for the network alone and against one other network (paired over the inputs both saw), the
seed against the random initialisations (this network's mean over the inputs against each seed's: the prediction
interval, `verify.statistics.compare_one`; an interval over inputs, or of the seeds' mean, would call one random
network "below" another). `verify.layerwise.decide` decides them, as it decides the audit's own rows.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from crate_nn.analysis.diagnostics import (
    OFFICIAL_EPS,
    THRESHOLDS,
    head_codes,
    sparsity,
    subspace_rates,
    subspace_weight,
    thresholded_sparsity,
    trace,
)
from crate_nn.analysis.protocol import coding_rate, joint_measures
from crate_nn.data.inputs import Inputs, dataset_images, folder_images, resized, text_windows
from crate_nn.models.mssa import MSSA
from crate_nn.models.registry import build_model, family_of, list_models
from crate_nn.weights import non_finite, read_state
from crate_nn.weights.adapter import spelled
from verify.joint import DRAWS, Sizes
from verify.layerwise import JOINT, QUANTITIES, SHOWN, Control, Decision, Object, Row, Sample, decide, slug

INIT_SEED_START = 1000
"""Where the random initialisations' seeds start by default (``--init-seed-start``), away from the small seeds runs use
(the run's own seed is skipped: its initialisation is a control of its own)."""
BATCH_TOKENS = 8192
"""Tokens per batch when ``--batch-size`` is not given (41 images of 197 tokens, 8 windows of 1,024): every layer's
three stations of a batch are held at once, so memory follows the tokens, not the inputs."""
RATES = ("official", "paper")
"""The two R^c measured per head as well as summed over the heads (``<rate>_heads``: (inputs, L, K))."""
MEASURES = ("official", "paper", "rate", "delta_r", "sparsity", *(f"above_{tau:g}" for tau in THRESHOLDS), *JOINT)
"""Every per-layer measure of a network, (inputs, L) each (the joint measure's on the first ``joint_n`` inputs)."""
THIS = Object("this network", model="this network")
"""The network a checkpoint audit asks about (its rows carry the network audit's own ids, `verify.layerwise.STATED`)."""
RANDOM = "random init"
"""The label of the random initialisations' control."""


# --------------------------------------------------------------------------------------------- networks
@dataclass(frozen=True)
class LayerTokens:
    """One layer's token sets of a batch, (batch, n, d) each — ``normed`` LN1(Z^ℓ), ``half`` Z^{ℓ+1/2}, ``output``
    Z^{ℓ+1} — and the ``subspaces`` [U_1 … U_K]* (K·p, d) of its ``heads`` K that they are measured against."""

    normed: torch.Tensor
    half: torch.Tensor
    output: torch.Tensor
    subspaces: torch.Tensor
    heads: int


@dataclass
class Network:
    """A network measured: its ``label`` in the report, the ``model``, where it came from (``spec``), its
    ``format`` and, for an initialisation, its ``seed``. A subject of another library overrides `tokens` and
    `random` (module docstring)."""

    label: str
    model: nn.Module
    spec: str
    format: str
    seed: int | None = None

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def crate(self) -> bool:
        """Its layers are MSSA layers (a CRATE), not a ViT's."""
        return all(isinstance(layer.attn, MSSA) for layer in self.model.encoder.layers)

    @property
    def depth(self) -> int:
        return len(self.model.encoder.layers)

    @property
    def takes(self):
        """What `crate_nn.data.inputs` reads to feed it: an object with ``config`` (``image_size``, ``patch_size``,
        ``in_channels``, or ``block_size`` and ``vocab_size``) and ``preprocessing`` — the model itself."""
        return self.model

    def described(self) -> dict:
        """Its config, as report.json records it."""
        return dataclasses.asdict(self.model.config)

    def tokens(self, batch: torch.Tensor) -> list[LayerTokens]:
        """Every layer's token sets of ``batch`` (`crate_nn.analysis.diagnostics.trace`)."""
        return [LayerTokens(layer.norm1(t.input), t.half, t.output, subspace_weight(layer), layer.attn.heads)
                for layer, t in zip(self.model.encoder.layers, trace(self.model, batch))]

    def random(self, seed: int) -> Network:
        """The architecture (its config) at random initialisation with ``seed`` (the global generators restored)."""
        family_of(self.model.config)  # TypeError naming the class when no registered family builds it
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = build_model(self.model.config).float().eval()
        return Network(f"{RANDOM} {seed}", model, f"seed {seed}", "random initialisation", seed)


def run_directory(spec: str) -> Path | None:
    """The run directory ``spec`` names (a folder holding ``config.json`` and ``checkpoints/last.pt``), else None."""
    path = Path(spec)
    if not path.is_dir():
        return None
    for needed in ("config.json", "checkpoints/last.pt"):
        if not (path / needed).is_file():
            raise ValueError(f"model: {spec!r} is a folder but not a run directory of crate-train (no {needed}); a "
                             "Hugging Face transformers folder is named transformers:FOLDER")
    return path


FLAGS = {"model": dict(heads="--heads K", name="--name NAME"),
         "against": dict(heads="--against-heads K", name="--against-name NAME")}
"""How the command's errors name the options a file lacks, for the model and for an ``--against`` file."""


def load_network(spec: str, label: str, *, heads: int | None = None, name: str | None = None,
                 what: str = "model") -> Network:
    """The model of ``spec`` (a weights file, ``hf-hub:…`` or a run directory) in eval mode, float32, on the CPU;
    ValueError naming ``what`` (the argument: ``model``, ``against``) for a file that does not give one, or one
    holding NaN or ±Inf. ``transformers:FOLDER`` is a transformers model (`verify.hooked`)."""
    from verify import hooked

    if spec.startswith(hooked.PREFIX):
        given = "heads" if heads is not None else "name" if name is not None and what == "model" else None
        if given:  # an --against-name is a label as well: only the model's --name is refused
            raise ValueError(f"{what}: {spec!r} is a transformers folder, whose config.json gives its heads; drop "
                             f"{FLAGS.get(what, FLAGS['model'])[given].split()[0]}")
        network = hooked.load(spec, label, what=what)
    else:
        network = _load_crate_nn(spec, label, heads, name, what)
    broken = non_finite(network.model)
    if broken:
        raise ValueError(f"{what}: {spec!r} holds non-finite weights ({broken}); no measure of it would be finite")
    return network


def _load_crate_nn(spec: str, label: str, heads: int | None, name: str | None, what: str) -> Network:
    """What `crate_nn.load` reads of ``spec`` (`load_network`)."""
    folder = run_directory(spec)
    with spelled(**FLAGS.get(what, {})):
        stored = read_state(folder / "checkpoints" / "last.pt" if folder else spec, what=what, heads=heads, name=name)
        model = stored.build()
    return Network(label, model.float().eval(), spec, stored.format)


def run_init(spec: str) -> Network | None:
    """A run directory's own initialisation (`crate_nn.engine.initial_model` of its recorded config), else None."""
    folder = run_directory(spec)
    if folder is None:
        return None
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
    vocabulary holding the model's token ids) and, a CRATE control, has its depth."""
    mine, theirs = network.takes.config, other.takes.config
    for name in ("image_size", "in_channels", "block_size"):
        if getattr(mine, name, None) != getattr(theirs, name, None):
            raise ValueError(f"against: {other.spec!r} has {name} {getattr(theirs, name, None)}, the model "
                             f"{getattr(mine, name, None)}; both must take the same inputs")
    if (getattr(theirs, "vocab_size", 0) or 0) < (getattr(mine, "vocab_size", 0) or 0):
        raise ValueError(f"against: {other.spec!r} has a vocabulary of {theirs.vocab_size}, the model "
                         f"{mine.vocab_size}")
    if other.crate and other.depth != network.depth:
        raise ValueError(f"against: {other.spec!r} is a CRATE of {other.depth} layers, the model has {network.depth}; "
                         "a CRATE control is compared layer by layer (a ViT by Fig. 26's rows)")


def against_label(spec: str, given: str | None) -> str:
    """How the report names an ``--against`` network: ``given`` (``--against-name``), else a run directory's name
    (for the run's folder or a checkpoint in its ``checkpoints/``: ``runs/epoch1/checkpoints/last.pt`` → ``epoch1``),
    else the file's name without its suffix."""
    if given:
        return given
    path = Path(spec.rsplit(":", 1)[-1].rstrip("/"))
    folder = path if path.is_dir() else path.parent.parent if path.parent.name == "checkpoints" else None
    return folder.name if folder is not None and folder.name else path.stem


# --------------------------------------------------------------------------------------------- measuring
@torch.no_grad()
def measure(network: Network, inputs: torch.Tensor, *, joint_n: int, eps: float = OFFICIAL_EPS, draws: int = DRAWS,
            seed: int = 0, batch_size: int = 32, progress: bool = True) -> dict[str, np.ndarray]:
    """Every measure of `MEASURES` per input and layer: name → (inputs, L) float64 (the joint measure's for the first
    ``joint_n`` inputs), the per-head R^c ``official_heads`` and ``paper_heads`` (inputs, L, K), and ``"sizes"``:
    d, n, heads, p of layer 1. Streams the inputs in batches."""
    values: dict[str, list[list[torch.Tensor]]] = {}
    depth = network.depth
    generator = torch.Generator().manual_seed(seed)

    def add(name: str, i: int, v: torch.Tensor) -> None:
        values.setdefault(name, [[] for _ in range(depth)])[i].append(v.to(torch.float64).cpu())

    done, sizes = 0, {}
    bar = tqdm(total=len(inputs), desc=f"measuring {network.label}", unit="input", disable=not progress,
               leave=False)
    for batch in inputs.split(batch_size):
        for i, t in enumerate(network.tokens(batch)):
            if not all(torch.isfinite(z).all() for z in (t.normed, t.half, t.output)):
                raise ValueError(f"model: {network.label} ({network.spec}) gives non-finite tokens at layer {i + 1}: "
                                 "its weights or these inputs overflow")
            sizes = sizes or {"d": t.half.shape[-1], "n": t.half.shape[-2], "heads": t.heads,
                              "p": t.subspaces.shape[0] // t.heads}
            weight = t.subspaces.to(torch.float64)
            for name, z, normalize in (("official", t.normed, True), ("paper", t.half, False)):
                codes = head_codes(z.to(torch.float64), weight, t.heads)
                per_head = subspace_rates(torch.nn.functional.normalize(codes, dim=-1) if normalize else codes, eps)
                add(name, i, per_head.sum(-1))
                add(f"{name}_heads", i, per_head)
            rate = coding_rate(t.half, eps)
            add("rate", i, rate)
            add("delta_r", i, rate - values["paper"][i][-1])
            add("sparsity", i, sparsity(t.output))
            for tau in THRESHOLDS:
                add(f"above_{tau:g}", i, thresholded_sparsity(t.output, tau))
            take = max(0, min(len(batch), joint_n - done))
            if take:
                for name, v in joint_measures(t.half[:take], t.subspaces, t.heads, eps, draws=draws,
                                              generator=generator).items():
                    if name in JOINT:
                        add(name, i, v)
        done += len(batch)
        bar.update(len(batch))
    bar.close()
    out = {name: torch.stack([torch.cat(v) for v in per_layer], 1).numpy() for name, per_layer in values.items()}
    return {**out, "sizes": sizes}


def pooled(measured: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The mean over networks (the initialisation seeds) of each measure, input by input."""
    return {name: np.mean([m[name] for m in measured], axis=0) for name in measured[0] if name != "sizes"}


# --------------------------------------------------------------------------------------------- the subject
def rows(controls: Sequence[Control], crates: Sequence[bool]) -> list[Row]:
    """The family's rows on a checkpoint (module docstring), for ``controls`` in order; ``crates``: whether each
    control is a CRATE (an initialisation, a CRATE checkpoint: compared layer by layer) or not (a ViT: Fig. 26)."""
    out = [Row(THIS, "official", None, "falls"), Row(THIS, "paper", None, "falls")]
    for control, crate in zip(controls, crates):
        if crate:
            out += [Row(THIS, "official", control, "every"), Row(THIS, "paper", control, "every"),
                    Row(THIS, "joint", control, "footnote17")]
    out.append(Row(THIS, "sparsity", None, "falls17"))
    out += [Row(THIS, "sparsity", c, "footnote17") for c, crate in zip(controls, crates) if crate]
    for control, crate in zip(controls, crates):
        if not crate:
            out += [Row(THIS, "official", control, "further"), Row(THIS, "above", control, "denser")]
    return out


@dataclass
class Checkpoint:
    """The checkpoint subject: ``network``, the ``inputs`` it is measured on (the controls on the first
    ``control_n``), its random initialisations ``inits`` (one `Network` per seed), a run directory's own
    initialisation ``own`` and the ``--against`` networks ``others``; ``options`` of `measure` (seed, batch size,
    progress). The networks are measured when a row first asks (`measured`)."""

    network: Network
    inputs: Inputs
    control_n: int
    inits: list[Network] = field(default_factory=list)
    own: Network | None = None
    others: list[Network] = field(default_factory=list)
    options: dict = field(default_factory=dict)

    @property
    def controls(self) -> list[tuple[Control, bool]]:
        """(control, whether it is a CRATE) of every control, in the report's order."""
        found = [(Control("random", RANDOM), True)] if self.inits else []
        found += [(Control("init", self.own.label), True)] if self.own is not None else []
        return found + [(Control("network", o.label), o.crate) for o in self.others]

    def rows(self) -> list[Row]:
        """The family's rows on this checkpoint (`rows`)."""
        return rows([c for c, _ in self.controls], [crate for _, crate in self.controls])

    @functools.cached_property
    def measured(self) -> dict[str, dict[str, np.ndarray]]:
        """Every network's `measure`, by label (the random initialisations by theirs: ``random init 1000`` …)."""
        head = self.inputs.tensor[:self.control_n]
        out = {self.network.label: measure(self.network, self.inputs.tensor, joint_n=self.control_n, **self.options)}
        layered = [(n, True) for n in [*self.inits, *([self.own] if self.own else [])]]
        for other, joint in [*layered, *((o, o.crate) for o in self.others)]:  # the joint measure: layer by layer
            out[other.label] = measure(other, head, joint_n=self.control_n if joint else 0, **self.options)
        return out

    @property
    def sizes(self) -> Sizes:
        """The size measured (memberships unknown: the collapse floor is the worst case over every law)."""
        s = self.measured[self.network.label]["sizes"]
        return Sizes(s["d"], s["n"], s["heads"], s["p"])

    def sample(self, row: Row) -> Sample:
        """``row``'s numbers (module docstring): this network alone over its inputs; against one network paired over
        the first ``control_n``; against the random initialisations, this network's mean over those inputs against
        each seed's."""
        measures = [m for m in QUANTITIES[row.quantity].measures if m in self.measured[self.network.label]]
        mine = self.measured[self.network.label]
        if row.control is None:
            return Sample({m: mine[m] for m in measures}, None, "alone", "inputs")
        k = self.control_n
        if row.control.kind == "random":
            seeds = [self.measured[n.label] for n in self.inits]
            return Sample({m: mine[m][:k].mean(0, keepdims=True) for m in measures},
                          {m: np.stack([s[m].mean(0) for s in seeds]) for m in measures}, "population",
                          f"{len(seeds)} initialisation seeds (each the mean over {k} inputs; prediction interval)",
                          self.sizes)
        theirs = self.measured[row.control.label]
        return Sample({m: mine[m][:len(theirs[m])] for m in measures}, {m: theirs[m] for m in measures}, "paired",
                      f"{k} inputs, paired (one network)", self.sizes)

    def decide(self) -> list[Decision]:
        """Every row decided (`verify.layerwise.decide`)."""
        return [Decision(row, decide(row, self.sample(row))) for row in self.rows()]

    def series(self) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, list[dict[str, np.ndarray]]]]:
        """What the figures draw: (label → per-input measures of this network — on its first ``control_n`` inputs
        too, where the controls saw fewer —, of the random initialisations pooled, and of each other network;
        label → the random initialisations one by one, whose bands are over the seeds)."""
        mine = self.measured[self.network.label]
        k = self.control_n
        first = ({f"this network, first {k} inputs": {m: v[:k] for m, v in mine.items() if m != "sizes"}}
                 if k < len(self.inputs) else {})
        seeds = [self.measured[n.label] for n in self.inits]
        pooled_inits = {RANDOM: pooled(seeds)} if seeds else {}
        others = [n for n in [*([self.own] if self.own else []), *self.others]]
        return ({"this network": mine, **first, **pooled_inits,
                 **{SHOWN.get(n.label, n.label): self.measured[n.label] for n in others}},
                {RANDOM: seeds} if seeds else {})

    def record(self) -> dict:
        """What report.json records of the subject: the model, the inputs and their preprocessing, the controls
        (the random initialisations' seeds among them) and the size measured with its collapse floor."""
        s = self.sizes
        return {
            "model": {"spec": self.network.spec, "format": self.network.format,
                      "parameters": self.network.parameters, "layers": self.network.depth,
                      "config": self.network.described()},
            "inputs": {"source": self.inputs.source, "n": len(self.inputs), "control_n": self.control_n,
                       "seed": self.options.get("seed", 0), "names": self.inputs.names,
                       "preprocessing": self.inputs.preprocessing},
            "controls": [*([f"{RANDOM} ×{len(self.inits)} (seeds {', '.join(str(n.seed) for n in self.inits)})"]
                           if self.inits else []), *([self.own.label] if self.own else []),
                         *(f"{o.label} ({o.format}, {o.spec})" for o in self.others)],
            "init_seeds": [n.seed for n in self.inits],
            "sizes": {"d": s.d, "n": s.n, "heads": s.heads, "p": s.p, "floor": s.floor,
                      "orthant_floor": s.collapse_floor().orthant_floor, "memberships": s.memberships},
        }


# --------------------------------------------------------------------------------------------- the command's subject
def open_checkpoint(args: argparse.Namespace) -> Checkpoint:
    """The subject the arguments of `verify.network` name, every model and input loaded and checked (one-line
    ValueErrors naming the argument), nothing measured."""
    network = load_network(args.model, "this network", heads=args.heads, name=args.name)
    if network.depth < 3:
        raise ValueError(f"model: {args.model!r} has {network.depth} layers; the claims from layer 2 on need at least 3")
    inputs = _inputs(network.takes, args)
    own = run_init(args.model)
    if not args.init_seeds and own is None and not args.against:
        raise ValueError("init-seeds: 0, and no other control (a run directory's own initialisation, --against): "
                         "the claims against a control need one")
    names = list(args.against_name or [])
    if len(names) > len(args.against):
        raise ValueError(f"against-name: {len(names)} names for {len(args.against)} --against networks; give one "
                         "--against-name per --against, in order")
    registered = set(list_models())
    others: list[Network] = []
    for spec, given in zip(args.against, names + [None] * (len(args.against) - len(names))):
        label = against_label(spec, given)
        taken = {n.label for n in others} | {"this network", RANDOM, "run init"}
        label = label if label not in taken else f"{label} ({len(others) + 1})"
        others.append(load_network(spec, label, heads=args.against_heads, what="against",
                                   name=given if given in registered else None))
        check_comparable(others[-1], network)
    taken = {own.seed} if own is not None else set()
    seeds = [s for s in range(args.init_seed_start, args.init_seed_start + args.init_seeds + 1) if s not in taken]
    shape = network.takes.config
    tokens = inputs.tensor.shape[1] if inputs.tensor.ndim == 2 else (shape.image_size // shape.patch_size) ** 2 + 1
    options = dict(seed=args.seed, batch_size=args.batch_size or max(1, BATCH_TOKENS // tokens),
                   progress=args.progress)
    return Checkpoint(network, inputs, min(args.control_n, len(inputs)),
                      [network.random(s) for s in seeds[:args.init_seeds]], own, others, options)


def _inputs(model, args: argparse.Namespace) -> Inputs:
    """The sample the arguments name (`crate_nn.data.inputs`) for ``model`` (`Network.takes`)."""
    if args.text is not None:
        if getattr(model.config, "block_size", None) is None:
            raise ValueError("text: the model is not a language model; give --images or --dataset")
        return text_windows(model, args.text, args.n, args.seed, tokenizer=args.tokenizer, window=args.window,
                            all_inputs=args.all_inputs)
    if getattr(model.config, "image_size", None) is None:
        raise ValueError("images, dataset: the model takes text; give --text")
    options = dict(all_inputs=args.all_inputs, mean=args.mean, std=args.std, channels=args.channels)
    if args.images is not None:
        return folder_images(model, args.images, args.n, args.seed, **options)
    from crate_nn.data import build_dataset

    size = model.config.image_size
    data = build_dataset(args.dataset, args.split, data_dir=None, train=False, image_size=size,
                         load_size=resized(size), eval_resize=resized(size))
    return dataset_images(model, data, args.dataset, args.split, args.n, args.seed, **options)


def default_folder(spec: str) -> Path:
    """``network-audit/<name>``: the model's file or run directory name."""
    return Path("network-audit") / (slug(Path(spec.rstrip("/").split(":")[-1]).stem) or "model")
