"""`CRATEConfig`: every size and variant of the CRATE image classifier in one plain dataclass.

The defaults are the authors' CRATE-Tiny (224² images, 16² patches, 1000 classes, d = 384, L = 12, K = 6) with the
semantics of their code (`../shared/docs/official-implementation.md`). Variant options switch to the paper's
alternatives; each names the equation it implements.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

SKIPS = ("input", "normed")
MSSA_OUTPUTS = ("free", "tied")
ISTA_KINDS = ("relu", "soft", "mm", "overcomplete")
POOLS = ("cls", "mean")


@dataclass
class CRATEConfig:
    """Hyper-parameters of a CRATE classifier (and of the encoder/decoder stacks built from it).

    Sizes:
        image_size, patch_size: square images of ``image_size`` pixels cut into ``patch_size`` patches,
            N = (image_size / patch_size)² patches, n = N + 1 tokens with the class token.
        num_classes, in_channels: head width C and image channels.
        dim, depth, heads: token width d, number of layers L, number of heads / subspaces K.
        dim_head: subspace dimension p; ``None`` means p = d / K (every published configuration).
        pool: ``"cls"`` (eq. 66, the class token's output) or ``"mean"`` (eq. 72, mean over all tokens).

    Sparsification (ISTA block):
        eta, lam: step η and sparsity weight λ of eq. (44) (defaults 0.1, 0.1).
        ista: ``"relu"`` — eq. (44), one non-negative proximal step ``ReLU(Z − ηD*(DZ − Z) − ηλ)`` (default);
            ``"soft"`` — Table 13, the same step with the soft threshold S_{ηλ} (plain LASSO, eq. 41);
            ``"mm"`` — eq. (123), ``ReLU((1 + 4/(9(1+α))) D*Z − 4λ/(9α))`` with α = d/(nε²);
            ``"overcomplete"`` — the CRATE-α block: codes ``A = ReLU(η D*Z − ηλ)`` for D of shape (d, m) (one
            ISTA step from A = 0) decoded by a separate output dictionary, ``D̂ A``. Use with ``ista_skip=True``
            for CRATE-α's residual.
        dict_width: m, the number of atoms of the overcomplete dictionary; ``None`` means 4·d.
        ista_skip: add a skip connection around the sparsification block (absent in CRATE; CRATE-α has one).

    Compression (MSSA block):
        skip: where the skip connections start. ``"input"`` (the authors' code, default):
            ``Z^{ℓ+1/2} = Z^ℓ + MSSA(LN(Z^ℓ))``; ``"normed"`` (Appendix D, Alg. 4):
            ``Z^{ℓ+1/2} = LN(Z^ℓ) + MSSA(LN(Z^ℓ))``. The decoder (Alg. 5 vs the code) follows the same switch.
        attn_scale: the factor multiplying the attention logits; ``None`` means p^(-1/2) (the code's
            temperature). Eq. (35) has none: use ``attn_scale=1.0`` for the paper's SSA.
        mssa_output: ``"free"`` (eq. 37, the default): a trainable output map W (d, K·p) with bias;
            ``"tied"`` (eq. 36): the output map is β[U_1 … U_K], tied to the projection, with
            β = p/(nε²) computed from the actual token count n of each input.
        eps: ε, the quantisation precision in β = p/(nε²) (``mssa_output="tied"``) and α = d/(nε²)
            (``ista="mm"``). Unused otherwise.
        causal: causal mask of eqs. (86)–(87): token j attends to tokens i ≤ j.
        attn_dropout: dropout on the attention maps while training (0 in every published run).

    Input:
        dynamic_img_size: accept any image size divisible by the patch size, resampling the position
            embedding bicubically on the fly (class token kept). When False, other sizes are an error.
    """

    image_size: int = 224
    patch_size: int = 16
    num_classes: int = 1000
    in_channels: int = 3
    dim: int = 384
    depth: int = 12
    heads: int = 6
    dim_head: int | None = None
    pool: str = "cls"
    eta: float = 0.1
    lam: float = 0.1
    ista: str = "relu"
    dict_width: int | None = None
    ista_skip: bool = False
    skip: str = "input"
    attn_scale: float | None = None
    mssa_output: str = "free"
    eps: float = 1.0
    causal: bool = False
    attn_dropout: float = 0.0
    dynamic_img_size: bool = False

    def __post_init__(self) -> None:
        for name in ("image_size", "patch_size", "num_classes", "in_channels", "dim", "depth", "heads"):
            _check_positive_int(name, getattr(self, name))
        for name in ("dim_head", "dict_width"):
            if getattr(self, name) is not None:
                _check_positive_int(name, getattr(self, name))
        if self.dim_head is None and self.dim % self.heads:
            raise ValueError(f"dim={self.dim} is not divisible by heads={self.heads}; pass dim_head explicitly")
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size={self.image_size} is not divisible by patch_size={self.patch_size}")
        _check_choice("pool", self.pool, POOLS)
        _check_choice("ista", self.ista, ISTA_KINDS)
        _check_choice("skip", self.skip, SKIPS)
        _check_choice("mssa_output", self.mssa_output, MSSA_OUTPUTS)
        for name in ("eta", "lam", "attn_dropout"):
            if not isinstance(getattr(self, name), (int, float)) or getattr(self, name) < 0:
                raise ValueError(f"{name} must be a non-negative number, got {getattr(self, name)!r}")
        if not self.attn_dropout < 1:
            raise ValueError(f"attn_dropout must be < 1, got {self.attn_dropout}")
        if not isinstance(self.eps, (int, float)) or self.eps <= 0:
            raise ValueError(f"eps must be a positive number, got {self.eps!r}")
        if self.attn_scale is not None and not isinstance(self.attn_scale, (int, float)):
            raise ValueError(f"attn_scale must be a number or None, got {self.attn_scale!r}")

    @property
    def head_dim(self) -> int:
        """p, the dimension of each subspace U_k."""
        return self.dim_head if self.dim_head is not None else self.dim // self.heads

    @property
    def num_patches(self) -> int:
        """N = (image_size / patch_size)²."""
        return (self.image_size // self.patch_size) ** 2

    @property
    def patch_dim(self) -> int:
        """P²·C, the length of a flattened patch."""
        return self.patch_size**2 * self.in_channels

    def replace(self, **changes) -> CRATEConfig:
        """A copy with ``changes`` applied; unknown names raise TypeError naming them."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"unknown CRATEConfig option(s) {unknown}; known: {[f.name for f in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **changes)


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _check_choice(name: str, value, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
