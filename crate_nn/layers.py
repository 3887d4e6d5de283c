"""The CRATE encoder layer (45), the encoder stack, and the white-box decoder (64), row convention.

Encoder layer ℓ (Fig. 10; LayerNorm before each block):

    Z^{ℓ+1/2} = S + MSSA(LN1(Z^ℓ) | U^ℓ)         S = Z^ℓ (skip="input", the authors' code)
                                                 S = LN1(Z^ℓ) (skip="normed", Appendix D Alg. 4)
    Z^{ℓ+1}   = ISTA(LN2(Z^{ℓ+1/2}) | D^ℓ)        (+ Z^{ℓ+1/2}, resp. LN2(Z^{ℓ+1/2}), if ista_skip)

Decoder layer ℓ, eq. (64) ``Z̃^{ℓ+1} = E^ℓ Z̃^ℓ − MSSA(E^ℓ Z̃^ℓ | V^ℓ)`` with LayerNorms:

    H = E^ℓ LN1(Z̃^ℓ)                              (E a bias-free d×d Linear)
    Z̃^{ℓ+1} = H − MSSA(LN2(H))                    (skip="input", the authors' code)
    Z̃^{ℓ+1} = LN2(H) − MSSA(LN2(H))               (skip="normed", Appendix D Alg. 5)
"""
from __future__ import annotations

import torch
from torch import nn

from .config import CRATEConfig
from .ista import ISTA
from .mssa import MSSA


def build_mssa(config: CRATEConfig) -> MSSA:
    return MSSA(
        config.dim,
        config.heads,
        config.head_dim,
        scale=config.attn_scale,
        output=config.mssa_output,
        eps=config.eps,
        causal=config.causal,
        attn_dropout=config.attn_dropout,
    )


class CRATELayer(nn.Module):
    """One encoder layer f^ℓ: Z^ℓ → Z^{ℓ+1/2} (compression) → Z^{ℓ+1} (sparsification); (batch, n, d) in and out."""

    def __init__(self, config: CRATEConfig) -> None:
        super().__init__()
        self.skip, self.ista_skip = config.skip, config.ista_skip
        self.norm1 = nn.LayerNorm(config.dim)
        self.mssa = build_mssa(config)
        self.norm2 = nn.LayerNorm(config.dim)
        self.ista = ISTA(
            config.dim, config.eta, config.lam, kind=config.ista, eps=config.eps, dict_width=config.dict_width
        )

    def compress(self, x: torch.Tensor, return_attention: bool = False):
        """Z^{ℓ+1/2} from Z^ℓ (and the attention maps (batch, K, n, n) if asked)."""
        y = self.norm1(x)
        update = self.mssa(y, return_attention=return_attention)
        update, attn = update if return_attention else (update, None)
        half = (x if self.skip == "input" else y) + update
        return (half, attn) if return_attention else half

    def sparsify(self, half: torch.Tensor) -> torch.Tensor:
        """Z^{ℓ+1} from Z^{ℓ+1/2}."""
        y = self.norm2(half)
        out = self.ista(y)
        if self.ista_skip:
            out = (half if self.skip == "input" else y) + out
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sparsify(self.compress(x))


class CRATEEncoder(nn.Module):
    """L encoder layers, f = f^L ∘ … ∘ f^1 (eq. 20): (batch, n, d) → (batch, n, d)."""

    def __init__(self, config: CRATEConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(CRATELayer(config) for _ in range(config.depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class CRATEDecoderLayer(nn.Module):
    """One decoder layer g^ℓ of eq. (64): (batch, n, d) → (batch, n, d)."""

    def __init__(self, config: CRATEConfig) -> None:
        super().__init__()
        self.skip = config.skip
        self.norm1 = nn.LayerNorm(config.dim)
        self.linear = nn.Linear(config.dim, config.dim, bias=False)  # E^ℓ, the inverse of the sparse coding
        self.norm2 = nn.LayerNorm(config.dim)
        self.mssa = build_mssa(config)  # its qkv weight is [V_1 … V_K]*

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(self.norm1(x))
        y = self.norm2(h)
        return (h if self.skip == "input" else y) - self.mssa(y)


class CRATEDecoder(nn.Module):
    """L decoder layers, g = g^{L−1} ∘ … ∘ g^0 (eq. 64 stacked): (batch, n, d) → (batch, n, d)."""

    def __init__(self, config: CRATEConfig) -> None:
        super().__init__()
        self.layers = nn.ModuleList(CRATEDecoderLayer(config) for _ in range(config.depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
