"""`BlockConfig`: the options of one CRATE layer (and of the baselines' layers), shared by every model family.

A model's own configuration (`CRATEConfig` for the image classifier, and the configs of the other systems)
extends this dataclass with its depth and its input/output fields, so the block options are defined once and a
language model or a decoder never carries image fields. The defaults are the authors' code
(github.com/Ma-Lab-Berkeley/CRATE); every variant names the equation or the paper table it implements.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

SKIPS = ("input", "normed")
MSSA_OUTPUTS = ("free", "tied")
ISTA_KINDS = ("relu", "soft", "mm", "overcomplete")
ISTA_OUTPUTS = ("free", "tied")
ATTENTIONS = ("mssa", "mhsa", "tssa")
MEMBERSHIPS = ("normalized", "energy")
FEEDFORWARDS = ("ista", "mlp", "none")


@dataclass
class BlockConfig:
    """Options of one layer: token width, heads, the compression block and the sparsification block.

    Sizes:
        dim, heads: token width d and number of heads / subspaces K.
        dim_head: subspace dimension p; ``None`` means p = d / K (every published configuration).

    Which blocks (Table 17 of the long paper; one flag each, everything else shared):
        attention: ``"mssa"`` — multi-head subspace self-attention, eqs. (35)–(37) (CRATE); ``"mhsa"`` — the
            standard multi-head self-attention with separate query/key/value maps (ViT, CRATE-MHSA); ``"tssa"`` —
            ToST's token statistics self-attention, linear in n (`crate_nn.models.tssa`; with ``causal`` its
            prefix form). ToST = tssa + mlp.
        feedforward: ``"ista"`` — the sparsification block (CRATE); ``"mlp"`` — the standard two-layer GELU
            MLP of width ``mlp_ratio``·d with a residual connection (ViT, CRATE-MLP); ``"none"`` — no second
            block and no LayerNorm before it, Z^{ℓ+1} = Z^{ℓ+1/2} (the "without ISTA" ablations, Tables 15–16).
        CRATE = mssa + ista, ViT = mhsa + mlp, CRATE-MLP = mssa + mlp, CRATE-MHSA = mhsa + ista.
        mlp_ratio: hidden width of the MLP over d (4 in ViT).

    Sparsification (ISTA block):
        eta, lam: step η and sparsity weight λ of eq. (44) (defaults 0.1, 0.1).
        ista: ``"relu"`` — eq. (44), one non-negative proximal step ``ReLU(Z − ηD*(DZ − Z) − ηλ)`` (default);
            ``"soft"`` — Table 13, the same step with the soft threshold S_{ηλ} (plain LASSO, eq. 41);
            ``"mm"`` — eq. (123), ``ReLU((1 + 4/(9(1+α))) D*Z − 4λ/(9α))`` with α = d/(nε²);
            ``"overcomplete"`` — the CRATE-α block: two ISTA steps on codes of an overcomplete dictionary D of
            shape (d, m) started from 0, ``z₁ = ReLU(ηD*y − ηλ)``, ``z₂ = ReLU(z₁ − ηD*(Dz₁ − y) − ηλ)``, decoded
            by a separate output dictionary D₁ (d, m): ``D₁ z₂``. CRATE-α adds a residual: ``ista_skip=True``.
        dict_width: m, the number of atoms of the overcomplete dictionary; ``None`` means 4·d.
        ista_output: how the overcomplete block decodes z₂: ``"free"`` — the separate output dictionary D₁
            (CRATE-α); ``"tied"`` — the dictionary D itself, ``D z₂`` (the trained CRATE-GPT of crate-lm).
        ista_skip: add a skip connection around the sparsification block (absent in CRATE; CRATE-α has one).

    Compression (MSSA block):
        skip: where the skip connections start. ``"input"`` (the authors' code, default):
            ``Z^{ℓ+1/2} = Z^ℓ + MSSA(LN(Z^ℓ))``; ``"normed"`` (Appendix D, Alg. 4):
            ``Z^{ℓ+1/2} = LN(Z^ℓ) + MSSA(LN(Z^ℓ))``. The decoder (Alg. 5 vs the code) follows the same switch.
        attn_scale: the factor multiplying the attention logits; ``None`` means p^(-1/2) (the code's
            temperature). Eq. (35) has none: use ``attn_scale=1.0`` for the paper's SSA. With ``attention="tssa"``
            it is c of f(x) = log(1 + c x), the statistics' weights c/(1 + c s); ``None`` means 1 (ToST's public
            code); the derivation's c is d/ε².
        mssa_output: ``"free"`` (eq. 37, the default): a trainable output map W (d, K·p);
            ``"tied"`` (eq. 36): the output map is β[U_1 … U_K], tied to the projection, with
            β = p/(nε²) computed from the actual token count n of each input. TSSA's tied map is (τ/n)[U_1 … U_K]
            (n: the tokens each token sees), which makes the block the gradient step −τ∇R^c_var.
        out_bias: the free output map W has a bias (the authors' CRATE; CRATE-α has none).
        eps: ε, the quantisation precision in β = p/(nε²) (``mssa_output="tied"``) and α = d/(nε²)
            (``ista="mm"``). Unused otherwise.
        causal: causal mask of eqs. (86)–(87): token j attends to tokens i ≤ j.
        attn_dropout: dropout on the attention maps while training (0 in every published run); TSSA: on the
            statistics' weights c/(1 + c s), as ToST's public code.

    Token statistics self-attention (``attention="tssa"``; ToST, arXiv 2412.17810):
        tssa_membership: how the membership Π is computed from the codes w_k = x U_k, a softmax over the K groups
            of t_k·e_k: ``"normalized"`` (ToST's public code, the default): e_kt = Σ_i w_kti² / Σ_{j visible} w_kji²
            (each coordinate's square over its sum on the tokens t sees); ``"energy"``: e_kt = ‖w_kt‖², token t's
            energy alone.
        tssa_temperature: initial value of the learned per-head inverse temperature t_k of Π (ToST's ``temp``: 1).
        tssa_step: τ, the gradient step of the tied output (``mssa_output="tied"``); a free W absorbs it.

    Normalisation:
        norm_eps: the LayerNorms' ε (1e-5, PyTorch's default, the authors' CRATE and CRATE-MAE layers; 1e-6 in CRATE-α).
    """

    dim: int = 384
    heads: int = 6
    dim_head: int | None = None
    attention: str = "mssa"
    feedforward: str = "ista"
    mlp_ratio: float = 4.0
    eta: float = 0.1
    lam: float = 0.1
    ista: str = "relu"
    dict_width: int | None = None
    ista_output: str = "free"
    ista_skip: bool = False
    skip: str = "input"
    attn_scale: float | None = None
    mssa_output: str = "free"
    out_bias: bool = True
    eps: float = 1.0
    causal: bool = False
    attn_dropout: float = 0.0
    tssa_membership: str = "normalized"
    tssa_temperature: float = 1.0
    tssa_step: float = 1.0
    norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("dim", "heads"):
            check_positive_int(name, getattr(self, name))
        for name in ("dim_head", "dict_width"):
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
        if self.dim_head is None and self.dim % self.heads:
            raise ValueError(f"dim={self.dim} is not divisible by heads={self.heads}; pass dim_head explicitly")
        check_choice("attention", self.attention, ATTENTIONS)
        check_choice("feedforward", self.feedforward, FEEDFORWARDS)
        check_choice("ista", self.ista, ISTA_KINDS)
        check_choice("ista_output", self.ista_output, ISTA_OUTPUTS)
        if self.ista_output == "tied" and self.ista != "overcomplete":
            raise ValueError(f"ista_output='tied' decodes overcomplete codes; it needs ista='overcomplete', got "
                             f"ista={self.ista!r}")
        check_choice("skip", self.skip, SKIPS)
        check_choice("mssa_output", self.mssa_output, MSSA_OUTPUTS)
        check_choice("tssa_membership", self.tssa_membership, MEMBERSHIPS)
        check_number("tssa_temperature", self.tssa_temperature)
        for name in ("eta", "lam", "attn_dropout"):
            check_number(name, getattr(self, name), minimum=0.0)
        if not self.attn_dropout < 1:
            raise ValueError(f"attn_dropout must be < 1, got {self.attn_dropout}")
        for name in ("eps", "norm_eps", "mlp_ratio", "tssa_step"):
            check_number(name, getattr(self, name), minimum=0.0)
            if getattr(self, name) == 0:
                raise ValueError(f"{name} must be a positive number, got 0")
        if self.attn_scale is not None:
            check_number("attn_scale", self.attn_scale)
        for name in ("ista_skip", "out_bias", "causal"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")

    @property
    def head_dim(self) -> int:
        """p, the dimension of each subspace U_k."""
        return self.dim_head if self.dim_head is not None else self.dim // self.heads

    @property
    def atoms(self) -> int:
        """m, the atoms of the ISTA dictionary: ``dict_width`` (None: 4·d) for the overcomplete one, else d."""
        return (self.dict_width or 4 * self.dim) if self.ista == "overcomplete" else self.dim

    def replace(self, **changes):
        """A copy with ``changes`` applied; unknown names raise TypeError naming them."""
        names = [f.name for f in dataclasses.fields(self)]
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise TypeError(f"unknown {type(self).__name__} option(s) {unknown}; known: {names}")
        return dataclasses.replace(self, **changes)

    def block_config(self) -> BlockConfig:
        """The `BlockConfig` part of a model's configuration (the model-specific fields dropped)."""
        return BlockConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(BlockConfig)})


def check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def check_number(name: str, value, minimum: float | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise ValueError(f"{name} must be a number, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be ≥ {minimum}, got {value!r}")


def check_choice(name: str, value, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
