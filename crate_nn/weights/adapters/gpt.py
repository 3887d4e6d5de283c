"""Checkpoints of the public CRATE-GPT (crate-lm, a nanoGPT fork) and of nanoGPT's GPT-2, loaded as `CRATEGPT`: two
adapters, `CRATE_LM` and `NANOGPT`.

Their files are ``torch.save`` dictionaries ``{"model": state_dict, "model_args": {n_layer, n_head, n_embd,
block_size, bias, vocab_size, dropout}, "optimizer", "iter_num", "best_val_loss", "config"}`` (a bare state dict
works too); a run trained with ``torch.compile`` prefixes every key with ``_orig_mod.``. Keys (layer i):

    crate-lm                                    ours
    transformer.wte.weight (V, d)               wte.weight (and lm_head.weight: the same tensor)
    transformer.wpe.weight (block, d)           wpe.weight
    transformer.h.{i}.prenorm_1.{weight,bias}   encoder.layers.{i}.norm1
    transformer.h.{i}.attn.c_attn.weight        encoder.layers.{i}.mssa.qkv.weight  U (d, d), no bias
    transformer.h.{i}.attn.c_proj.{weight,bias} encoder.layers.{i}.mssa.out
    transformer.h.{i}.attn.bias                 — the causal mask tril(1, 1, block, block), a buffer
    transformer.h.{i}.prenorm_2.{weight,bias}   encoder.layers.{i}.norm2
    transformer.h.{i}.ista.weight               encoder.layers.{i}.ista.weight  D (d, d); Dᵀ (m, d) when overcomplete
    transformer.ln_f.{weight,bias}              norm (the overcomplete variant only)
    lm_head.weight                              tied to wte

nanoGPT's GPT-2 has ``ln_1``/``ln_2`` for the norms, ``attn.c_attn`` (3d, d) with bias for [Q; K; V], ``mlp.c_fc``
and ``mlp.c_proj`` for the MLP and always ``ln_f``: our ``attention="mhsa", feedforward="mlp", final_norm=True``
layers, whose packing of Q, K, V and heads is the same. A nanoGPT run with ``bias=False`` stores no biases; they
load as zeros. The number of heads is not in the tensors: it comes from ``model_args`` or the ``heads`` argument.
"""
from __future__ import annotations

from collections.abc import Mapping

import torch

from ...models.language import CRATEGPT, GPTConfig
from ...models.registry import model_config
from .. import ours
from ..adapter import Adapter, option
from ..build import build_loaded, build_owning, expected_state
from ..keys import KeyMap, layer_count, state_dict_of

_SHARED = [("transformer.wte.weight", "wte.weight"), ("transformer.wpe.weight", "wpe.weight"),
           ("transformer.ln_f.weight", "norm.weight"), ("transformer.ln_f.bias", "norm.bias")]
CRATE_LM_KEYS = KeyMap(_SHARED + [
    (f"transformer.h.{{i}}.{theirs}.{p}", f"encoder.layers.{{i}}.{ours}.{p}")
    for theirs, ours, params in [("prenorm_1", "norm1", ("weight", "bias")), ("attn.c_attn", "mssa.qkv", ("weight",)),
                                 ("attn.c_proj", "mssa.out", ("weight", "bias")),
                                 ("prenorm_2", "norm2", ("weight", "bias")), ("ista", "ista", ("weight",))]
    for p in params
])
NANOGPT_KEYS = KeyMap(_SHARED + [
    (f"transformer.h.{{i}}.{theirs}.{p}", f"encoder.layers.{{i}}.{ours}.{p}")
    for theirs, ours in [("ln_1", "norm1"), ("attn.c_attn", "mhsa.qkv"), ("attn.c_proj", "mhsa.out"),
                         ("ln_2", "norm2"), ("mlp.c_fc", "mlp.fc1"), ("mlp.c_proj", "mlp.fc2")]
    for p in ("weight", "bias")
])
FORMATS = {"crate-lm": CRATE_LM_KEYS, "nanoGPT": NANOGPT_KEYS}


def _format(state: dict[str, torch.Tensor]) -> str:
    if any(".prenorm_1." in k for k in state):
        return "crate-lm"
    if any(".ln_1." in k for k in state):
        return "nanoGPT"
    raise ValueError(f"not a crate-lm or nanoGPT checkpoint: no transformer.h.*.prenorm_1 or .ln_1 keys among "
                     f"{sorted(state)[:8]}")


def _drop_masks_and_head(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state without the causal-mask buffers (checked to be the lower triangle) and the tied ``lm_head``."""
    state = dict(state)
    for key in [k for k in state if k.endswith(".attn.bias") and state[k].ndim == 4]:
        mask = state.pop(key)
        if not torch.equal(mask[0, 0] != 0, torch.ones_like(mask[0, 0], dtype=torch.bool).tril()):
            raise ValueError(f"{key}: expected the causal mask tril(ones) of eq. (87), got another pattern")
    head = state.pop("lm_head.weight", None)
    if head is not None and "transformer.wte.weight" in state and not torch.equal(head, state["transformer.wte.weight"]):
        raise ValueError("lm_head.weight differs from transformer.wte.weight: CRATEGPT ties them")
    return state


def gpt_config_of(source, heads: int | None = None) -> tuple[GPTConfig, dict[str, torch.Tensor]]:
    """The `GPTConfig` a crate-lm or nanoGPT checkpoint determines and its state dict under our names."""
    payload = source if isinstance(source, Mapping) else ours.read(source)
    state = _drop_masks_and_head(state_dict_of(payload))
    fmt = _format(state)
    args = payload.get("model_args") if isinstance(payload.get("model_args"), dict) else {}
    heads = heads or args.get("n_head")
    if not heads:
        raise ValueError(f"heads: the checkpoint has no model_args['n_head']; pass {option('heads')} (the number of "
                         "heads)")
    for key in ("transformer.wte.weight", "transformer.wpe.weight"):
        if key not in state:
            raise ValueError(f"missing key in the {fmt} checkpoint: {key}")
    vocab, dim = state["transformer.wte.weight"].shape
    values = dict(dim=dim, heads=int(heads), depth=layer_count(state, r"transformer\.h\.(\d+)\."), vocab_size=vocab,
                  block_size=state["transformer.wpe.weight"].shape[0],
                  final_norm="transformer.ln_f.weight" in state)
    renamed = FORMATS[fmt].to_ours(state, fmt)
    if fmt == "nanoGPT":
        values.update(attention="mhsa", feedforward="mlp", mlp_ratio=renamed["encoder.layers.0.mlp.fc1.weight"].shape[0] / dim)
    else:
        atoms = renamed["encoder.layers.0.ista.weight"].shape[0]
        if atoms != dim:  # the overcomplete variant stores Dᵀ (m, d)
            values.update(ista="overcomplete", ista_output="tied", dict_width=atoms)
            renamed = {k: v.T.contiguous() if k.endswith(".ista.weight") else v for k, v in renamed.items()}
    return GPTConfig(**values), renamed


def to_ours(payload: Mapping, name: str | None = None, heads: int | None = None,
            **overrides) -> tuple[GPTConfig, dict[str, torch.Tensor]]:
    """(config, state under our names, ``lm_head`` tied to ``wte``) of a crate-lm or nanoGPT file, every key and
    shape checked; biases a ``bias=False`` nanoGPT run does not store are zeros. ``heads`` (else the registered
    ``name``'s, else the file's ``model_args``) is the one option their files may lack."""
    if overrides:
        raise ValueError(f"{sorted(overrides)}: crate-lm and nanoGPT files fix every option but the heads (heads= or "
                         "a registered name=)")
    config, state = gpt_config_of(payload, heads or (model_config(name).heads if name is not None else None))
    expected = expected_state(CRATEGPT, config, len(state))
    missing = sorted(set(expected) - set(state) - {"lm_head.weight"})
    first = state["wte.weight"]
    if missing and all(k.endswith(".bias") for k in missing):
        state.update({k: torch.zeros(expected[k].shape, dtype=first.dtype) for k in missing})
    elif missing:
        raise ValueError(f"missing keys in the checkpoint (our names): {missing[:8]}")
    state["lm_head.weight"] = first
    wrong = {k: (tuple(v.shape), tuple(expected[k].shape)) for k, v in state.items() if v.shape != expected[k].shape}
    if wrong:
        raise ValueError(f"shape mismatch (checkpoint, model): {wrong}")
    return config, state


def load_gpt_checkpoint(source, heads: int | None = None) -> CRATEGPT:
    """A `CRATEGPT` with the weights of a crate-lm or nanoGPT checkpoint (a path or a loaded dict), every key and
    shape checked; biases a ``bias=False`` nanoGPT run does not store are zeros."""
    if isinstance(source, Mapping):
        return build_owning(CRATEGPT, *to_ours(source, heads=heads))
    return build_loaded(CRATEGPT, *to_ours(ours.read(source), heads=heads))


def to_crate_lm(model: CRATEGPT, masks: bool | None = None) -> dict[str, torch.Tensor]:
    """A CRATE-GPT's state dict in crate-lm's format, e.g. to run it with their code.

    ``masks``: add the ``transformer.h.{i}.attn.bias`` causal-mask buffers. None (default): as the crate-lm model
    that takes the state — ``crate.py`` (the d×d ISTA) holds them, ``crate_overcomplete.py`` (its flash-attention
    over-complete variant) has none and refuses them on strict loading."""
    if masks is None:
        masks = model.config.ista != "overcomplete"
    config: GPTConfig = model.config
    if config.attention != "mssa" or config.feedforward != "ista":
        raise ValueError("to_crate_lm: crate-lm has MSSA + ISTA layers only")
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    theirs = CRATE_LM_KEYS.to_theirs(state, "crate-lm")
    if config.ista == "overcomplete":
        theirs = {k: v.T.contiguous() if k.endswith(".ista.weight") else v for k, v in theirs.items()}
    theirs["lm_head.weight"] = theirs["transformer.wte.weight"]
    if masks:
        tril = torch.ones(config.block_size, config.block_size).tril().view(1, 1, config.block_size, config.block_size)
        theirs.update({f"transformer.h.{i}.attn.bias": tril.clone() for i in range(config.depth)})
    return theirs


def to_nanogpt(model: CRATEGPT) -> dict[str, torch.Tensor]:
    """A GPT baseline's state dict (``attention="mhsa", feedforward="mlp", final_norm=True``, learned positions, an
    MLP 4d wide: nanoGPT's ``GPT``) in nanoGPT's format, ``lm_head.weight`` tied to ``transformer.wte.weight`` as
    its state dict holds it; ValueError naming what nanoGPT's model cannot hold."""
    config: GPTConfig = model.config
    if (config.attention, config.feedforward, config.final_norm, config.pos_embed, config.mlp_ratio) != (
            "mhsa", "mlp", True, "learned", 4.0):
        raise ValueError("to_nanogpt: nanoGPT's GPT has MHSA + MLP layers (MLP 4d wide), learned positions and a "
                         f"final LayerNorm; this model has attention={config.attention!r}, "
                         f"feedforward={config.feedforward!r}, mlp_ratio={config.mlp_ratio}, "
                         f"pos_embed={config.pos_embed!r}, final_norm={config.final_norm}")
    theirs = NANOGPT_KEYS.to_theirs({k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}, "nanoGPT")
    theirs["lm_head.weight"] = theirs["transformer.wte.weight"]
    return theirs


def model_args(config: GPTConfig) -> dict:
    """The ``model_args`` dictionary crate-lm and nanoGPT store beside the weights (their ``GPTConfig`` fields)."""
    return {"n_layer": config.depth, "n_head": config.heads, "n_embd": config.dim, "block_size": config.block_size,
            "bias": True, "vocab_size": config.vocab_size, "dropout": 0.0}


CRATE_LM = Adapter(
    name="crate-lm", family="gpt", export="crate-lm",
    claims=lambda s: "transformer.wte.weight" in s and any(".prenorm_1." in k for k in s),
    to_ours=to_ours, to_theirs=lambda m: {"model": to_crate_lm(m), "model_args": model_args(m.config), **ours.preprocessing_entry(m)},
)
NANOGPT = Adapter(
    name="nanoGPT", family="gpt", export="nanogpt",
    claims=lambda s: "transformer.wte.weight" in s and any(".ln_1." in k for k in s),
    to_ours=to_ours, to_theirs=lambda m: {"model": to_nanogpt(m), "model_args": model_args(m.config), **ours.preprocessing_entry(m)},
)
