"""A Hugging Face ``transformers`` ViT, BERT or GPT-2 as a subject of the network audit (``python -m verify.network
transformers:FOLDER``), read through forward hooks on the library's own modules — its weights are never converted.

**The network** (`load`): ``FOLDER`` holds ``config.json`` (read by ``AutoConfig``; its ``model_type`` picks
``ViTModel``, ``BertModel`` or ``GPT2Model``, `FAMILIES`) and ``model.safetensors`` or ``pytorch_model.bin`` (or
their sharded index), loaded with ``local_files_only=True``: nothing is downloaded. A folder whose weights leave one
of the model's tensors unset (they would be random) is refused in one line, as is one transformers cannot read. Its
random initialisations (`HookedNetwork.random`) are the same class built from the same config under a seed.

**The token sets of layer ℓ** (`HookedNetwork.tokens`, batch × n × d each), taken by hooks during the library's own
forward pass:

* ViT and GPT-2 (pre-LN: Z^{ℓ+1/2} = Z^ℓ + attn(LN1(Z^ℓ)), Z^{ℓ+1} = Z^{ℓ+1/2} + MLP(LN2(Z^{ℓ+1/2}))): LN1(Z^ℓ) is
  the output of the block's first LayerNorm (``layernorm_before``, ``ln_1``), Z^{ℓ+1/2} the input of its second
  (``layernorm_after``, ``ln_2``: the attention's residual sum), Z^{ℓ+1} the block's output;
* BERT (post-LN: Z^{ℓ+1/2} = LN(Z^ℓ + attn(Z^ℓ)), Z^{ℓ+1} = LN(Z^{ℓ+1/2} + MLP(Z^{ℓ+1/2}))): no LayerNorm precedes
  the attention, so what stands for LN1(Z^ℓ) is Z^ℓ itself, the block's input — the tokens its attention reads,
  already layer-normalised by the previous block's closing LayerNorm (the embeddings' for layer 1); Z^{ℓ+1/2} is the
  attention sub-layer's output after its residual sum and LayerNorm (``attention.output``), Z^{ℓ+1} the block's
  output.

**The subspaces** [U_1 … U_K]* (K·p, d) are the value projection's rows, p = d/K per head — what Fig. 26 measures a
ViT against, as `crate_nn.analysis.diagnostics.subspace_weight` does for the project's ViT: the value map is what
carries the tokens into each head's output (its bias left out). ViT: ``v_proj`` (``attention.value`` before
transformers 5), BERT: ``attention.self.value``, GPT-2: the last third of ``attn.c_attn`` (a ``Conv1D``, stored
(d, 3d), transposed here).

**Inputs**: a ViT takes the audit's images (`crate_nn.data.inputs`: resized, centre-cropped to its ``image_size``,
normalised by the folder's ``preprocessor_config.json`` mean and std when it has them, else as for any file that
records none); BERT and GPT-2 take windows of ``--text`` of at most their ``max_position_embeddings`` or
``n_positions`` tokens, tokenised by the folder's ``tokenizer.json`` or ``--tokenizer``. transformers is imported only
here, when such a subject is asked for (``pip install transformers`` when it is missing).
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from crate_nn.extras import install_hint
from crate_nn.preprocessing import Preprocessing
from verify.checkpoint import RANDOM, LayerTokens, Network

PREFIX = "transformers:"
"""How the command line names a folder of a transformers model: ``transformers:FOLDER``."""
WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
"""The weight files a folder may hold (transformers' own names)."""


@dataclass(frozen=True)
class Family:
    """How one architecture of the library is read: its ``model`` class, the candidate paths of its blocks
    (``layers``; the first present: transformers 5 renamed some), where LN1(Z^ℓ) and Z^{ℓ+1/2} are taken — (a block's
    sub-module, ``"input"`` or ``"output"``; ``""`` is the block) —, the candidate paths of its value projection,
    whether that is a ``Conv1D`` ((d, 3d), [Q K V] along
    its columns), the keyword its inputs go in as, the config's maximum positions (text) and the model's keyword
    arguments (no pooler: the audit reads the blocks)."""

    model: str
    layers: tuple[str, ...]
    normed: tuple[str, str]
    half: tuple[str, str]
    value: tuple[str, ...]
    inputs: str
    conv1d: bool = False
    positions: str | None = None
    kwargs: dict = field(default_factory=dict)


FAMILIES = {
    "vit": Family("ViTModel", ("layers", "encoder.layer"), ("layernorm_before", "output"), ("layernorm_after", "input"),
                  ("attention.v_proj", "attention.attention.value"), "pixel_values",
                  kwargs={"add_pooling_layer": False}),
    "bert": Family("BertModel", ("layers", "encoder.layer"), ("", "input"), ("attention.output", "output"),
                   ("attention.self.value",), "input_ids", positions="max_position_embeddings",
                   kwargs={"add_pooling_layer": False}),
    "gpt2": Family("GPT2Model", ("h",), ("ln_1", "output"), ("ln_2", "input"), ("attn.c_attn",), "input_ids",
                   conv1d=True, positions="n_positions"),
}
"""``config.json``'s ``model_type`` → how that architecture is read."""


@dataclass(frozen=True)
class Shape:
    """What the audit's inputs read of a model's config (`crate_nn.data.inputs`): an image model's ``image_size``,
    ``patch_size`` and ``in_channels``, a language model's ``block_size`` (its maximum positions) and ``vocab_size``;
    None where it does not apply."""

    image_size: int | None = None
    patch_size: int | None = None
    in_channels: int | None = None
    block_size: int | None = None
    vocab_size: int | None = None


@dataclass(frozen=True)
class Takes:
    """A transformers model as `crate_nn.data.inputs` reads a model: its ``config`` (`Shape`) and ``preprocessing``."""

    config: Shape
    preprocessing: Preprocessing | None


def _transformers():
    """The transformers package, or ValueError naming ``model`` and how to install it."""
    try:
        import transformers
    except ImportError:
        raise ValueError(f"model: a transformers: subject needs the transformers package: "
                         f"{install_hint('transformers')}") from None
    return transformers


@contextlib.contextmanager
def quiet():
    """transformers' progress bars and warnings off for the block, as they were after it: the command's console has
    its own progress bar, and a refusal is one line (a folder's missing tensors are refused, not warned of)."""
    log = _transformers().utils.logging
    verbosity, bars = log.get_verbosity(), log.is_progress_bar_enabled()
    log.set_verbosity_error()
    log.disable_progress_bar()
    try:
        yield
    finally:
        log.set_verbosity(verbosity)
        if bars:
            log.enable_progress_bar()


@dataclass
class HookedNetwork(Network):
    """A transformers model as a subject (module docstring): ``model`` is the library's ``ViTModel``, ``BertModel``
    or ``GPT2Model`` itself; ``preprocessing`` what its folder records (a ViT's mean and std, a tokenizer)."""

    preprocessing: Preprocessing | None = None

    @property
    def family(self) -> Family:
        return FAMILIES[self.model.config.model_type]

    @property
    def blocks(self) -> nn.ModuleList:
        return _first(self.model, self.family.layers)

    @property
    def crate(self) -> bool:
        return False

    @property
    def depth(self) -> int:
        return len(self.blocks)

    @property
    def heads(self) -> int:
        return self.model.config.num_attention_heads

    @property
    def takes(self) -> Takes:
        c, family = self.model.config, self.family
        if family.positions is None:
            size = Shape(image_size=c.image_size, patch_size=c.patch_size, in_channels=c.num_channels)
        else:
            size = Shape(block_size=getattr(c, family.positions), vocab_size=c.vocab_size)
        return Takes(size, self.preprocessing)

    def described(self) -> dict:
        return self.model.config.to_dict()

    def subspaces(self, block: nn.Module) -> torch.Tensor:
        """The value projection's rows [U_1 … U_K]* (K·p, d) of ``block`` (module docstring)."""
        weight = _first(block, self.family.value).weight
        return weight.chunk(3, dim=1)[2].T if self.family.conv1d else weight

    def tokens(self, batch: torch.Tensor) -> list[LayerTokens]:
        """Every block's LN1(Z^ℓ), Z^{ℓ+1/2} and Z^{ℓ+1} of ``batch`` (module docstring), taken by forward hooks
        during one forward pass of the library's model."""
        family, seen = self.family, [{} for _ in range(self.depth)]
        hooks = []
        for i, block in enumerate(self.blocks):
            for station, (path, side) in (("normed", family.normed), ("half", family.half), ("output", ("", "output"))):
                hooks.append(_hook(block.get_submodule(path), side, seen[i], station))
        try:
            self.model(**{family.inputs: batch})
        finally:
            for hook in hooks:
                hook.remove()
        return [LayerTokens(s["normed"], s["half"], s["output"], self.subspaces(block), self.heads)
                for s, block in zip(seen, self.blocks)]

    def random(self, seed: int) -> HookedNetwork:
        """The same class built from the same config with ``seed`` (the global generators restored)."""
        cls = getattr(_transformers(), self.family.model)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = cls(self.model.config, **self.family.kwargs).float().eval()
        return HookedNetwork(f"{RANDOM} {seed}", model, f"seed {seed}", "random initialisation", seed,
                             self.preprocessing)


def _first(module: nn.Module, paths: tuple[str, ...]) -> nn.Module:
    """The sub-module of ``module`` at the first of ``paths`` it has."""
    for path in paths:
        try:
            return module.get_submodule(path)
        except AttributeError:
            continue
    raise AttributeError(f"{type(module).__name__} has none of {', '.join(paths)}: a transformers version this audit "
                         "does not know")


def _hook(module: nn.Module, side: str, into: dict, station: str):
    """A hook keeping ``module``'s first input (``side`` ``"input"``) or its output (a tuple's first) as
    ``into[station]``."""
    if side == "input":
        def before(_, args, kwargs):
            into[station] = args[0] if args else kwargs["hidden_states"]
        return module.register_forward_pre_hook(before, with_kwargs=True)

    def after(_, __, output):
        into[station] = output[0] if isinstance(output, tuple) else output
    return module.register_forward_hook(after)


def load(spec: str, label: str, *, what: str = "model") -> HookedNetwork:
    """The transformers model of ``spec`` (``transformers:FOLDER``, module docstring) in eval mode, float32, on the
    CPU; ValueError in one line naming ``what`` for a folder that does not give one."""
    folder = Path(spec.removeprefix(PREFIX))
    if not folder.is_dir():
        raise ValueError(f"{what}: {spec!r}: {str(folder)!r} is not a folder (transformers:FOLDER names a folder holding "
                         "config.json and model.safetensors or pytorch_model.bin)")
    if not (folder / "config.json").is_file():
        raise ValueError(f"{what}: {spec!r} has no config.json (a transformers folder holds config.json and its weights)")
    if not any((folder / name).is_file() for name in WEIGHTS):
        raise ValueError(f"{what}: {spec!r} has no weights (expected {' or '.join(WEIGHTS[:2])} beside config.json)")
    transformers = _transformers()
    with quiet():
        return _load(transformers, folder, spec, label, what)


def _load(transformers, folder: Path, spec: str, label: str, what: str) -> HookedNetwork:
    """`load`'s reading of ``folder``, its files found."""
    try:
        config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    except Exception as err:  # noqa: BLE001 - a broken config.json, an unknown model_type: one line
        raise ValueError(f"{what}: {spec!r}: transformers cannot read its config.json ({_first_line(err)})") from None
    if config.model_type not in FAMILIES:
        raise ValueError(f"{what}: {spec!r} is a {config.model_type!r} model; expected one of {', '.join(FAMILIES)}")
    family = FAMILIES[config.model_type]
    try:
        model, info = getattr(transformers, family.model).from_pretrained(
            folder, config=config, local_files_only=True, output_loading_info=True, **family.kwargs)
    except Exception as err:  # noqa: BLE001 - a truncated or foreign weights file: one line
        raise ValueError(f"{what}: {spec!r}: transformers cannot read its weights ({_first_line(err)})") from None
    unset = [*info.get("missing_keys", ()), *(k[0] if isinstance(k, tuple) else k
                                              for k in info.get("mismatched_keys", ()))]
    if unset:
        raise ValueError(f"{what}: {spec!r} leaves {len(unset)} of {family.model}'s tensors unset or of another shape "
                         f"({', '.join(sorted(unset)[:3])}…); they would be random")
    return HookedNetwork(label, model.float().eval(), spec, f"transformers {family.model}",
                         preprocessing=_preprocessing(folder, family))


def _preprocessing(folder: Path, family: Family) -> Preprocessing | None:
    """What the folder records of its inputs: a ViT's mean and std (``preprocessor_config.json``), a language model's
    ``tokenizer.json``; None when it records nothing."""
    if family.positions is not None:
        found = folder / "tokenizer.json"
        return Preprocessing(tokenizer=f"hf:{found}") if found.is_file() else None
    found = folder / "preprocessor_config.json"
    if not found.is_file():
        return None
    try:
        recorded = json.loads(found.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"model: {str(found)!r} is not JSON ({err})") from None
    if recorded.get("image_mean") is None or recorded.get("image_std") is None:
        return None
    return Preprocessing(recorded["image_mean"], recorded["image_std"])


def _first_line(err: Exception) -> str:
    return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
