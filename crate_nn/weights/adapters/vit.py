"""Vision Transformers of timm, DINO and SimDINO, read into our ViT (``vit_*``: ``attention="mhsa",
feedforward="mlp"``) as a classifier: two adapters, `TIMM` and `DINO`.

One layer layout serves all three (timm's ``timm/models/vision_transformer.py``; DINO's and SimDINO's
``vision_transformer.py`` are copies of it). Their key, its shape, and ours (layer i):

    cls_token (1, 1, d), pos_embed (1, N+1, d)            cls_token, pos_embed (the class token's entry first)
    patch_embed.proj.{weight (d, C, P, P), bias}          patch_embed.proj (``patch_embed="conv"``)
    blocks.{i}.norm1.{weight,bias}                        encoder.layers.{i}.norm1
    blocks.{i}.attn.qkv.{weight (3d, d), bias}            encoder.layers.{i}.mhsa.qkv   rows [Q; K; V], heads inside
    blocks.{i}.attn.proj.{weight (d, d), bias}            encoder.layers.{i}.mhsa.out
    blocks.{i}.norm2.{weight,bias}                        encoder.layers.{i}.norm2
    blocks.{i}.mlp.fc1.{weight (h, d), bias}              encoder.layers.{i}.mlp.fc1    h = mlp_ratio·d, GELU (erf)
    blocks.{i}.mlp.fc2.{weight (d, h), bias}              encoder.layers.{i}.mlp.fc2
    norm.{weight,bias}                                    head.norm   (a LayerNorm per token: normalising all
                                                                       tokens, then taking the class token's, is
                                                                       taking it, then normalising it)
    head.{weight (C, d), bias}                            head.fc     (timm's classifier)

Their attention splits the qkv output as (3, K, p), scales by p^(-1/2), and merges the heads in order: our MHSA. Every
LayerNorm has ε 1e-6 (timm's ``LayerNorm`` default; DINO's ``partial(nn.LayerNorm, eps=1e-6)``), so the config is our
ViT with ``patch_embed="conv", norm_eps=1e-6``; the MLP's width gives ``mlp_ratio``. The tensors do not fix the number
of heads K: ``heads=`` or a registered ``name=`` (``vit_small`` …) gives it, or a DINO file's ``args.arch``. A file
without ``attn.qkv.bias`` (``qkv_bias=False``) loads with zero biases. What our ViT does not have is refused naming
the keys: timm's register tokens, LayerScale (``ls1``/``ls2``), ``fc_norm`` (average pooling), ``norm_pre``, a
distillation token; DINOv2's (and SimDINOv2's) layout, which has LayerScale, register tokens and a ``mask_token``.

`TIMM`: a timm ViT classifier's state dict (``cls_token`` pooling, ``head.weight``); ``crate-export --format timm``.

`DINO`: DINO's and SimDINO's checkpoints (facebookresearch/dino and RobinWu218/SimDINO, ``main_dino.py``): their
training files ``{"student", "teacher", "optimizer", "epoch", "args", "dino_loss", ["fp16_scaler"]}``, each network's
keys ``backbone.…`` and ``head.…`` (the student's behind DistributedDataParallel's ``module.``, and SimDINO's both
behind ``torch.compile``'s ``_orig_mod.``), and the backbone alone, as DINO publishes it (``dino_vitbase16_pretrain
.pth``: the layout above without ``head``). The **teacher** is read by default — the network DINO and SimDINO
evaluate (their ``--checkpoint_key teacher``); ``checkpoint_key="student"`` reads the student. The projection head
(DINO's MLP and weight-normalised prototypes, SimDINO's MLP) is **dropped**: the backbone is loaded, as their
evaluation does (``load_state_dict(strict=False)``). A backbone has no classifier: ``head.fc`` is the identity
(``num_classes = d``), so the model's output is the backbone's, the normalised class token that DINO's k-NN and linear
evaluations read. ``crate-export --format dino`` writes the backbone alone (a model whose ``head.fc`` is that
identity).
"""
from __future__ import annotations

import argparse
import math
import re
from collections.abc import Mapping

import torch
from torch import nn

from ...models.classifier import _VIT, CRATEClassifier, CRATEConfig
from ...models.registry import list_models, model_config
from ..adapter import Adapter, heads_needed
from ..build import check_matches, expected_state
from ..keys import KeyMap, layer_count, state_dict_of
from ..ours import preprocessing_entry

NORM_EPS = 1e-6
"""timm's and DINO's LayerNorm ε."""
FORMAT = dict(_VIT, patch_embed="conv", norm_eps=NORM_EPS, head_norm_eps=None, pool="cls")
"""The options of our ViT that hold their model (the rest are sizes, from the tensors)."""
CHECKPOINT_KEYS = ("teacher", "student")
BACKBONE = "backbone."
_BLOCK, _LAYER = "blocks.{i}.", "encoder.layers.{i}."
KEYS = KeyMap([
    ("cls_token", "cls_token"),
    ("pos_embed", "pos_embed"),
    ("patch_embed.proj.weight", "patch_embed.proj.weight"),
    ("patch_embed.proj.bias", "patch_embed.proj.bias"),
    *[(f"{_BLOCK}{theirs}.{p}", f"{_LAYER}{ours}.{p}")
      for theirs, ours in [("norm1", "norm1"), ("attn.qkv", "mhsa.qkv"), ("attn.proj", "mhsa.out"),
                           ("norm2", "norm2"), ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")]
      for p in ("weight", "bias")],
    ("norm.weight", "head.norm.weight"),
    ("norm.bias", "head.norm.bias"),
    ("head.weight", "head.fc.weight"),
    ("head.bias", "head.fc.bias"),
])
DINOV2 = ("mask_token", "register_tokens", ".ls1.gamma")
"""Keys of DINOv2's layout (SimDINOv2's too) that our ViT has no counterpart for."""


def is_vit(state: Mapping) -> bool:
    """Whether a state dict has their layer layout (a patch embedding, attention and MLP blocks; no decoder)."""
    return ("patch_embed.proj.weight" in state and "decoder_pred.weight" not in state
            and any(re.fullmatch(r"blocks\.\d+\.attn\.qkv\.weight", k) for k in state)
            and any(re.fullmatch(r"blocks\.\d+\.mlp\.fc1\.weight", k) for k in state))


def _refuse_what_our_vit_lacks(state: Mapping[str, torch.Tensor], source: str) -> None:
    """ValueError naming the keys our ViT has no counterpart for — asked before anything else of the file (its
    heads, its final ``norm``), so that a file of another layout is refused for its layout: DINOv2's marks first
    (the file-level tokens before the per-layer LayerScale), then every other key (``fc_norm``, ``norm_pre`` …)."""
    dinov2 = sorted((k for k in state if any(mark in k for mark in DINOV2)), key=lambda k: (k.startswith("blocks."), k))
    if dinov2:
        raise ValueError(f"{dinov2[:3]}: LayerScale, register tokens or a mask token (DINOv2's layout; timm's "
                         "init_values, reg_tokens), which our ViT does not have")
    KEYS.to_ours(state, source)  # ValueError naming the keys without a counterpart


def _config(state: Mapping[str, torch.Tensor], name: str | None, overrides: dict, source: str,
            classifier: bool) -> CRATEConfig:
    """Our ViT's config for their tensors: the sizes from the shapes (C classes from ``head.weight`` for a
    ``classifier``, else d), K from ``heads`` or ``name``."""
    _refuse_what_our_vit_lacks(state, source)
    needed = ["patch_embed.proj.weight", "pos_embed", "norm.weight", "blocks.0.attn.qkv.weight",
              "blocks.0.mlp.fc1.weight", *(["head.weight"] if classifier else [])]
    missing = [k for k in needed if k not in state]
    if missing:
        raise ValueError(f"missing keys in the {source} checkpoint: {missing}")
    dim, channels, patch, patch_w = state["patch_embed.proj.weight"].shape
    num_classes = state["head.weight"].shape[0] if classifier else dim
    positions = state["pos_embed"].shape[1] - 1
    side = math.isqrt(max(positions, 0))
    if patch != patch_w or side * side != positions:
        raise ValueError(f"patch_embed.proj.weight {tuple(state['patch_embed.proj.weight'].shape)} and pos_embed "
                         f"{tuple(state['pos_embed'].shape)}: not square patches on a square grid with a class token")
    inferred = dict(dim=dim, in_channels=channels, patch_size=patch, image_size=side * patch, num_classes=num_classes,
                    depth=layer_count(state, r"blocks\.(\d+)\."),
                    mlp_ratio=state["blocks.0.mlp.fc1.weight"].shape[0] / dim)
    given = {k: v for k, v in overrides.items() if k in inferred and v != inferred[k]}
    if given:
        raise ValueError(f"the checkpoint's tensors contradict {given} (given): they give "
                         f"{ {k: inferred[k] for k in given} }")
    if name is None and "heads" not in overrides:
        raise heads_needed(", ".join(f"{n}: {model_config(n).heads}" for n in list_models("vit_*")[:4]))
    base = model_config(name) if name is not None else CRATEConfig(**FORMAT)
    clash = {k: (getattr(base, k), inferred[k]) for k in ("dim", "depth")
             if name is not None and getattr(base, k) != inferred[k]}
    if clash:
        raise ValueError(f"the checkpoint contradicts {name}: {clash} (registered, checkpoint)")
    config = base.replace(**{**inferred, **FORMAT, **overrides})
    if dim % config.heads:
        raise ValueError(f"heads={config.heads} does not divide the width d={dim}")
    return config


def _ours(state: dict[str, torch.Tensor], config: CRATEConfig, source: str,
          head: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Their tensors (zero qkv biases added where they have none, ``head`` the classifier's tensors when theirs has
    none) checked key by key against the model and renamed to ours."""
    first = state["blocks.0.attn.qkv.weight"]
    if not any(k.endswith(".attn.qkv.bias") for k in state):  # qkv_bias=False
        state = {**state, **{f"blocks.{i}.attn.qkv.bias": first.new_zeros(first.shape[0]) for i in range(config.depth)}}
    expected = KEYS.to_theirs(expected_state(CRATEClassifier, config, len(state) + len(head)), source)
    if head:  # given, not theirs
        expected = {k: v for k, v in expected.items() if not k.startswith("head.")}
    check_matches(state, expected, source)
    return {**KEYS.to_ours(state, source), **head}


def timm_to_ours(payload: Mapping, name: str | None = None, **overrides) -> tuple[CRATEConfig, dict[str, torch.Tensor]]:
    """(config, state under our names) of a timm ViT classifier's state dict."""
    state = state_dict_of(payload)
    config = _config(state, name, overrides, "timm ViT", classifier=True)
    return config, _ours(state, config, "timm ViT", {})


def _network(payload: Mapping, checkpoint_key: str) -> dict[str, torch.Tensor]:
    """The backbone's tensors of a DINO or SimDINO file (the network ``checkpoint_key``; a backbone file's own)."""
    if checkpoint_key not in CHECKPOINT_KEYS:
        raise ValueError(f"checkpoint_key: expected one of {list(CHECKPOINT_KEYS)}, got {checkpoint_key!r}")
    if all(isinstance(payload.get(key), Mapping) for key in CHECKPOINT_KEYS):
        state = state_dict_of(payload[checkpoint_key])
    elif checkpoint_key == "student":
        raise ValueError("checkpoint_key='student': the file holds one network, not DINO's teacher and student")
    else:
        state = state_dict_of(payload)
    if any(k.startswith(BACKBONE) for k in state):  # the projection head beside it is dropped
        state = {k.removeprefix(BACKBONE): v for k, v in state.items() if k.startswith(BACKBONE)}
    return state


def _name_from_args(payload: Mapping) -> str | None:
    """DINO's ``args.arch`` (``vit_small``; ``deit_small`` in its older files) when it is one of our ViT sizes."""
    args = payload.get("args")
    arch = getattr(args, "arch", None)
    name = arch.replace("deit", "vit") if isinstance(arch, str) else None
    return name if name in ("vit_tiny", "vit_small", "vit_base") else None


def dino_to_ours(payload: Mapping, name: str | None = None, checkpoint_key: str = "teacher",
                 **overrides) -> tuple[CRATEConfig, dict[str, torch.Tensor]]:
    """(config, state under our names) of a DINO or SimDINO file: the ``checkpoint_key`` network's backbone (the
    teacher by default), its projection head dropped, ``head.fc`` the identity; K from ``heads``, ``name`` or the
    file's ``args.arch``."""
    state = _network(payload, checkpoint_key)
    name = name or (None if "heads" in overrides else _name_from_args(payload))
    config = _config(state, name, overrides, "DINO / SimDINO", classifier=False)
    like = state["norm.weight"]
    identity = {"head.fc.weight": torch.eye(config.dim, dtype=like.dtype, device=like.device),
                "head.fc.bias": like.new_zeros(config.dim)}
    return config, _ours(state, config, "DINO / SimDINO", identity)


def to_timm(model: nn.Module) -> dict[str, torch.Tensor]:
    """Our ViT's state dict under timm's names (what ``timm.create_model(…).load_state_dict`` takes)."""
    return KEYS.to_theirs(model.state_dict(), "timm ViT")


def timm_file(model: nn.Module) -> dict:
    """What ``crate-export --format timm`` writes: `to_timm`'s state dict; with the model's preprocessing, timm's
    training checkpoint layout, ``{"state_dict": …, "preprocessing": …}`` (which ``timm.models.load_checkpoint``
    reads)."""
    state, entry = to_timm(model), preprocessing_entry(model)
    return {"state_dict": state, **entry} if entry else state


def to_dino(model: nn.Module) -> dict[str, torch.Tensor]:
    """Our ViT's backbone under DINO's names, as DINO publishes a backbone (no ``head``); ValueError unless
    ``head.fc`` is the identity (a backbone has no classifier)."""
    fc = model.head.fc
    if fc.weight.shape[0] != fc.weight.shape[1] or not torch.equal(fc.weight, torch.eye(len(fc.weight)).to(fc.weight)) \
            or not torch.equal(fc.bias, torch.zeros_like(fc.bias)):
        raise ValueError("a DINO backbone holds no classifier; this model's head.fc is not the identity (the model "
                         "of a DINO file has it); --format timm keeps the classifier")
    return {k: v for k, v in to_timm(model).items() if k not in ("head.weight", "head.bias")}


TIMM = Adapter(
    name="timm ViT", family="classifier", export="timm",
    claims=lambda s: is_vit(s) and "head.weight" in s,
    to_ours=timm_to_ours, to_theirs=timm_file,
)
DINO = Adapter(
    name="DINO / SimDINO ViT", family="classifier", export="dino",
    claims=lambda s: (is_vit(s) and "head.weight" not in s)
    or is_vit({k.removeprefix(BACKBONE): v for k, v in s.items() if k.startswith(BACKBONE)}),
    to_ours=dino_to_ours, to_theirs=to_dino, allowed=(argparse.Namespace,),
)
