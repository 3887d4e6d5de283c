"""CRATE language models (Sec. 4.1.4, App. C.4): CRATE-GPT (causal LM, eqs. 86–89) and CRATE-BERT (masked LM,
eqs. 83–85), the standard GPT/BERT baselines as block options, and a sequence classifier for fine-tuning.

    tokens   (B, T) integer ids < vocab_size, T ≤ block_size
    Z^1      = wte[tokens] + E_pos[:T]                        f_pre of (83)/(88)                    (B, T, d)
    Z^{L+1}  = encoder(Z^1)                                   CRATE layers (45); GPT: causal mask (86)–(87)
    logits   = W_head LN?(Z^{L+1})                            f_head of (84)/(88), W_head tied to wte (B, T, V)

CRATE-GPT follows the public CRATE-GPT (crate-lm, a nanoGPT fork), established by running it: learned position
embeddings (the paper writes sinusoids), layer ``x += W·SSA(LN1 x) + b`` with the causal mask, then
``x = ISTA(LN2 x)`` with a square D, η = λ = 0.1 and no skip; LayerNorm ε 1e-5; **no final LayerNorm**
(``final_norm``); a bias-free ``lm_head`` tied to ``wte``; GPT-2 initialisation (`init_gpt_weights`). Its trained
variant ``crate_gpt_overcomplete`` uses a tied two-step ISTA on a 4d-atom dictionary (output D z₂, no residual) and
a final LayerNorm.

CRATE-BERT: the same stack without the mask, learned positions and the RoBERTa LM head (dense d×d → GELU →
LayerNorm → decoder tied to ``wte`` with a bias) — the choices that reproduce the paper's parameter counts (60.9M
Base, 33M Medium, 129M Large): sinusoids (``pos_embed="sinusoid"``, as eq. 83 writes) and the linear head of eq. (84)
(``head_transform=False``) give 60.5M / 60.3M for Base. `CRATEBERTClassifier` puts a classification head on the
mean of the real tokens' features (GLUE fine-tuning).

Registered sizes (``create_model(name)``; p = d/K; Table 10; the count is what ``parameters()`` holds, tied
weights once):

| name | blocks | d | K | L | V | block | parameters |
|---|---|---|---|---|---|---|---|
| crate_gpt_small / base / large | MSSA + ISTA | 512 / 768 / 1280 | 8 / 12 / 20 | 12 / 12 / 36 | 50,304 | 1,024 | 35,747,840 / 60,699,648 / 242,877,440 |
| crate_gpt_overcomplete | MSSA + tied 4d ISTA, final LN | 768 | 12 | 12 | 50,304 | 1,024 | 81,934,848 |
| gpt_small / base / large | MHSA + MLP (GPT-2), final LN | 512 / 768 / 1280 | 8 / 12 / 20 | 12 / 12 / 36 | 50,304 | 1,024 | 64,109,568 / 124,475,904 / 774,090,240 |
| crate_bert_medium / base / large | MSSA + ISTA | 512 / 768 / 1024 | 8 / 12 / 16 | 8 / 12 / 24 | 50,265 | 512 | 32,623,705 / 60,918,873 / 128,717,913 |
| bert_medium / base / large | MHSA + MLP, final LN | 512 / 768 / 1024 | 8 / 12 / 16 | 8 / 12 / 24 | 50,265 | 512 | 51,531,865 / 124,695,129 / 355,408,985 |
| tost_gpt_base / medium / large | causal TSSA + MLP (ToST), final LN | 768 / 1024 / 1280 | 12 / 16 / 20 | 12 / 24 / 36 | 50,304 | 1,024 | 110,292,624 / 304,466,304 / 655,987,920 |

The paper gives CRATE-GPT-Base 60M (GPT-2 124M), CRATE-GPT-Large 242M (GPT-2 774M), GPT-2 Small 64M, CRATE-BERT
Medium / Base / Large 33M / 61M (60.9M in the text) / 129M; its BERT baselines (41M / 110M / 335M) are Google's
BERTs with a 30,522-token vocabulary, not these. ToST's language README prints ToST-Base / Medium / Large 110M / 304M /
655M for its nanoGPT models (the sizes of its training configs, as here) without biases (``bias=False``), with
LayerScale and a learned per-position bias in Π, counted as nanoGPT prints (position embedding left out); those
differences applied to ours give 109.60M / 303.66M / 655.14M (tests/models/test_language_models.py).
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .backbone import CRATEEncoder, LayerStack
from .blocks import LayerTrace
from .config import BlockConfig, check_choice, check_positive_int
from .registry import register_family, register_model

POS_EMBEDS = ("learned", "sinusoid")
INIT_STD = 0.02  # GPT-2's initialisation of every Linear and Embedding weight


@dataclass
class LanguageConfig(BlockConfig):
    """Hyper-parameters of a CRATE language model: the block options of `BlockConfig` plus

    Sizes:
        depth: number of layers L.  vocab_size: V.  block_size: the longest sequence (position embeddings).
    Embedding and output:
        pos_embed: ``"learned"`` (crate-lm, nanoGPT, RoBERTa) or ``"sinusoid"`` (Vaswani et al., as eq. 83 writes;
            no parameters).
        final_norm: a LayerNorm on the last layer's output before the head (absent in CRATE-GPT; GPT-2 has one).
    """

    depth: int = 12
    vocab_size: int = 50304
    block_size: int = 1024
    pos_embed: str = "learned"
    final_norm: bool = False

    def __post_init__(self) -> None:
        for name in ("depth", "vocab_size", "block_size"):
            check_positive_int(name, getattr(self, name))
        super().__post_init__()
        check_choice("pos_embed", self.pos_embed, POS_EMBEDS)
        if not isinstance(self.final_norm, bool):
            raise TypeError(f"final_norm must be True or False, got {self.final_norm!r}")
        if self.pos_embed == "sinusoid" and self.dim % 2:
            raise ValueError(f"pos_embed='sinusoid' needs an even dim, got dim={self.dim}")


@dataclass
class GPTConfig(LanguageConfig):
    """CRATE-GPT (and the GPT-2 baseline with ``attention="mhsa", feedforward="mlp", final_norm=True``): causal.
    Defaults: CRATE-GPT-Base (d 768, K 12, L 12, V 50,304, block 1,024)."""

    dim: int = 768
    heads: int = 12
    causal: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.causal:
            raise ValueError("causal=False: a GPT predicts the next token and must not see it; use a BERT family "
                             "for bidirectional layers")


@dataclass
class BidirectionalConfig(LanguageConfig):
    """The encoder of CRATE-BERT without its head. Defaults: CRATE-BERT-Base (d 768, K 12, L 12, V 50,265 of the
    RoBERTa tokenizer, block 512)."""

    dim: int = 768
    heads: int = 12
    vocab_size: int = 50265
    block_size: int = 512

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.causal:
            raise ValueError("causal=True: a BERT encoder attends in both directions; use a GPT family for causal "
                             "layers")


@dataclass
class BERTConfig(BidirectionalConfig):
    """CRATE-BERT with its masked-LM head. head_transform: the RoBERTa head (dense → GELU → LayerNorm → tied
    decoder + bias, default) or False for eq. (84)'s linear head ``W_head Z`` (tied, no bias)."""

    head_transform: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.head_transform, bool):
            raise TypeError(f"head_transform must be True or False, got {self.head_transform!r}")


@dataclass
class BERTClassifierConfig(BidirectionalConfig):
    """A CRATE-BERT encoder with a sequence-classification head of ``num_labels`` classes."""

    num_labels: int = 2

    def __post_init__(self) -> None:
        check_positive_int("num_labels", self.num_labels)
        super().__post_init__()


def sinusoid_table(length: int, dim: int) -> torch.Tensor:
    """The sinusoidal position embedding of Vaswani et al. (2017): row t is [sin(t ω_i), cos(t ω_i)] interleaved,
    ω_i = 10000^(−2i/d): (length, dim) float32."""
    position = torch.arange(length, dtype=torch.float64)[:, None]
    omega = torch.exp(-math.log(10000.0) * torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    table = torch.zeros(length, dim, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(position * omega), torch.cos(position * omega)
    return table.float()


def init_gpt_weights(model: nn.Module, stack: LayerStack) -> None:
    """GPT-2's initialisation (nanoGPT, crate-lm): every Linear and Embedding weight N(0, 0.02²), biases 0, the
    residual output projections (attention ``out``, MLP ``fc2``) N(0, (0.02/√(2L))²); LayerNorms and the ISTA
    dictionaries keep their own initialisation (ones/zeros; kaiming-uniform D)."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
    for layer in stack.layers:
        for projection in (getattr(layer.attn, "out", None), getattr(layer.ffn, "fc2", None)):
            if projection is not None:
                nn.init.normal_(projection.weight, mean=0.0, std=INIT_STD / math.sqrt(2 * len(stack.layers)))


class LanguageBackbone(nn.Module):
    """Token and position embeddings, the layer stack and the optional final LayerNorm: tokens (B, T) → (B, T, d).

    Attributes: ``wte`` Embedding(V, d); ``wpe`` Embedding(block_size, d) (learned) or the buffer ``sinusoid``;
    ``encoder`` (`CRATEEncoder`); ``norm`` (LayerNorm or None); ``config``.
    """

    def __init__(self, config: LanguageConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.dim)
        if config.pos_embed == "learned":
            self.wpe = nn.Embedding(config.block_size, config.dim)
        else:
            self.register_buffer("sinusoid", sinusoid_table(config.block_size, config.dim), persistent=False)
        self.encoder: LayerStack = CRATEEncoder(config)
        self.norm = nn.LayerNorm(config.dim, eps=config.norm_eps) if config.final_norm else None

    def check_tokens(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None) -> None:
        """Raise TypeError/ValueError naming the problem unless ``tokens`` is a (batch, T) integer tensor of ids in
        [0, vocab_size) with 1 ≤ T ≤ block_size (and ``attention_mask`` a (batch, T) mask with a real token in every
        row). The id range is checked outside ``torch.compile`` (it reads the values back from the device)."""
        cfg = self.config
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(f"tokens must be a torch.Tensor of token ids, got {type(tokens).__name__}")
        if tokens.dtype == torch.bool or tokens.is_floating_point() or tokens.is_complex():
            raise TypeError(f"tokens must be an integer tensor of token ids, got dtype {tokens.dtype}")
        if tokens.ndim != 2 or tokens.shape[1] == 0:
            raise ValueError(f"tokens must have shape (batch, length) with length ≥ 1, got {tuple(tokens.shape)}")
        if tokens.shape[1] > cfg.block_size:
            raise ValueError(f"tokens: sequence length {tokens.shape[1]} exceeds block_size={cfg.block_size}")
        if not torch.compiler.is_compiling() and tokens.numel():
            low, high = (int(v) for v in torch.aminmax(tokens))
            if low < 0 or high >= cfg.vocab_size:
                raise ValueError(f"tokens: ids must lie in [0, vocab_size={cfg.vocab_size}), got ids from {low} to "
                                 f"{high}")
        if attention_mask is not None:
            if not isinstance(attention_mask, torch.Tensor) or attention_mask.shape != tokens.shape:
                shape = tuple(attention_mask.shape) if isinstance(attention_mask, torch.Tensor) else attention_mask
                raise ValueError(f"attention_mask must be a tensor of the tokens' shape {tuple(tokens.shape)}, "
                                 f"got {shape}")
            if not torch.compiler.is_compiling() and not bool(attention_mask.bool().any(dim=1).all()):
                raise ValueError("attention_mask: every sequence needs at least one real token")

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Z^1 = wte[tokens] + E_pos[:T], eqs. (83)/(88): (B, T) → (B, T, d)."""
        n = tokens.shape[1]
        positions = self.wpe.weight[:n] if self.config.pos_embed == "learned" else self.sinusoid[:n]
        return self.wte(tokens) + positions

    def forward_features(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The last layer's output tokens (after the final LayerNorm if any): (B, T) → (B, T, d)."""
        self.check_tokens(tokens, attention_mask)
        z = self.encoder(self.embed(tokens), attention_mask)
        return z if self.norm is None else self.norm(z)

    def forward_intermediates(self, tokens: torch.Tensor, indices=None, return_attention: bool = False,
                              attention_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, list[LayerTrace]]:
        """Z^{L+1} (B, T, d) and the `LayerTrace` of the layers in ``indices`` (default all): what
        `crate_nn.trace` and `crate_nn.measure_layers` read on token sequences."""
        self.check_tokens(tokens, attention_mask)
        return self.encoder.forward_intermediates(self.embed(tokens), indices, return_attention, attention_mask)


@register_family("gpt", GPTConfig)
class CRATEGPT(LanguageBackbone):
    """CRATE-GPT: tokens (B, T) → next-token logits (B, T, V); position t sees tokens ≤ t only (eq. 87).

    ``lm_head`` is a bias-free Linear(d, V) whose weight *is* ``wte.weight`` (one tensor)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__(config)
        self.lm_head = nn.Linear(config.dim, config.vocab_size, bias=False, device="meta")  # weight replaced: tied
        self.lm_head.weight = self.wte.weight
        init_gpt_weights(self, self.encoder)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.forward_features(tokens))


class MLMHead(nn.Module):
    """The masked-LM head: features (…, d) → logits (…, V) with the decoder tied to the token embedding.

    ``transform=True``: RoBERTa's head, ``decoder(LN(GELU(dense(z)))) + bias``; False: eq. (84), ``W_head z``."""

    def __init__(self, embedding: nn.Embedding, transform: bool, norm_eps: float) -> None:
        super().__init__()
        dim, vocab = embedding.embedding_dim, embedding.num_embeddings
        self.dense = nn.Linear(dim, dim) if transform else None
        self.norm = nn.LayerNorm(dim, eps=norm_eps) if transform else None
        self.decoder = nn.Linear(dim, vocab, bias=transform, device=embedding.weight.device)
        self.decoder.weight = embedding.weight

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        if self.dense is not None:
            z = self.norm(F.gelu(self.dense(z)))
        return self.decoder(z)


@register_family("bert", BERTConfig)
class CRATEBERT(LanguageBackbone):
    """CRATE-BERT: tokens (B, T) → masked-LM logits (B, T, V), or (N, V) at the N positions ``selected`` picks.

    ``head``: `MLMHead` (decoder weight = ``wte.weight``)."""

    def __init__(self, config: BERTConfig) -> None:
        super().__init__(config)
        self.head = MLMHead(self.wte, config.head_transform, config.norm_eps)
        init_gpt_weights(self, self.encoder)

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None,
                selected: torch.Tensor | None = None) -> torch.Tensor:
        """``selected``: a (B, T) boolean mask of the positions to predict (the masked ones); the head then runs on
        those N positions only (row-major order) and returns (N, V)."""
        z = self.forward_features(tokens, attention_mask)
        return self.head(z if selected is None else z[selected])


@register_family("bert_classifier", BERTClassifierConfig)
class CRATEBERTClassifier(LanguageBackbone):
    """A CRATE-BERT encoder with a classification head: tokens (B, T) → logits (B, num_labels).

    ``classifier``: dense d×d → tanh → Linear(d, C) (RoBERTa's head) on the mean of the real tokens' features
    (a mean, like eq. 72, because a byte-level or BPE sequence has no class token of its own)."""

    def __init__(self, config: BERTClassifierConfig) -> None:
        super().__init__(config)
        self.classifier = nn.Sequential(OrderedDict(
            dense=nn.Linear(config.dim, config.dim), act=nn.Tanh(), out=nn.Linear(config.dim, config.num_labels)))
        init_gpt_weights(self, self.encoder)

    def forward(self, tokens: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        z = self.forward_features(tokens, attention_mask)
        if attention_mask is None:
            pooled = z.mean(dim=1)
        else:
            weights = attention_mask.to(z.dtype)[..., None]
            pooled = (z * weights).sum(dim=1) / weights.sum(dim=1)
        return self.classifier(pooled)


_STANDARD = dict(attention="mhsa", feedforward="mlp", final_norm=True)
_TOST = dict(attention="tssa", feedforward="mlp", final_norm=True)
for _name, _family, _values in [
    ("crate_gpt_small", "gpt", dict(dim=512, heads=8, depth=12)),
    ("crate_gpt_base", "gpt", dict(dim=768, heads=12, depth=12)),
    ("crate_gpt_large", "gpt", dict(dim=1280, heads=20, depth=36)),
    ("crate_gpt_overcomplete", "gpt", dict(dim=768, heads=12, depth=12, ista="overcomplete", ista_output="tied",
                                           final_norm=True)),
    ("gpt_small", "gpt", dict(dim=512, heads=8, depth=12, **_STANDARD)),
    ("gpt_base", "gpt", dict(dim=768, heads=12, depth=12, **_STANDARD)),
    ("gpt_large", "gpt", dict(dim=1280, heads=20, depth=36, **_STANDARD)),
    ("crate_bert_medium", "bert", dict(dim=512, heads=8, depth=8)),
    ("crate_bert_base", "bert", dict(dim=768, heads=12, depth=12)),
    ("crate_bert_large", "bert", dict(dim=1024, heads=16, depth=24)),
    ("bert_medium", "bert", dict(dim=512, heads=8, depth=8, **_STANDARD)),
    ("bert_base", "bert", dict(dim=768, heads=12, depth=12, **_STANDARD)),
    ("bert_large", "bert", dict(dim=1024, heads=16, depth=24, **_STANDARD)),
    ("tost_gpt_base", "gpt", dict(dim=768, heads=12, depth=12, **_TOST)),
    ("tost_gpt_medium", "gpt", dict(dim=1024, heads=16, depth=24, **_TOST)),
    ("tost_gpt_large", "gpt", dict(dim=1280, heads=20, depth=36, **_TOST)),
]:
    register_model(_name, _family, **_values)
