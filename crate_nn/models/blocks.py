"""The CRATE encoder layer (45) and the white-box decoder layer (64), row convention, with the baselines' blocks.

Encoder layer ℓ (Fig. 10; LayerNorm before each block):

    Z^{ℓ+1/2} = S + MSSA(LN1(Z^ℓ) | U^ℓ)         S = Z^ℓ (skip="input", the authors' code)
                                                 S = LN1(Z^ℓ) (skip="normed", Appendix D Alg. 4)
    Z^{ℓ+1}   = ISTA(LN2(Z^{ℓ+1/2}) | D^ℓ)        (+ Z^{ℓ+1/2}, resp. LN2(Z^{ℓ+1/2}), if ista_skip)

``attention="mhsa"`` puts the standard multi-head attention in place of MSSA (``"tssa"``: ToST's token statistics
self-attention, `crate_nn.models.tssa`) and ``feedforward="mlp"`` the standard MLP with its residual,
``Z^{ℓ+1} = S' + MLP(LN2(Z^{ℓ+1/2}))``, in place of ISTA (ViT, CRATE-MLP, CRATE-MHSA; Table 17; ToST = TSSA + MLP).
The sub-modules are named after what they are (``mssa``, ``mhsa`` or ``tssa``, ``ista`` or ``mlp``); ``attn`` and
``ffn`` reach whichever is present.

Decoder layer ℓ, eq. (64) ``Z̃^{ℓ+1} = E^ℓ Z̃^ℓ − MSSA(E^ℓ Z̃^ℓ | V^ℓ)`` with LayerNorms:

    H = E^ℓ LN1(Z̃^ℓ)                              (E a bias-free d×d Linear)
    Z̃^{ℓ+1} = H − MSSA(LN2(H))                    (skip="input", the authors' code)
    Z̃^{ℓ+1} = LN2(H) − MSSA(LN2(H))               (skip="normed", Appendix D Alg. 5)

Every layer maps (batch, n, d) → (batch, n, d) and offers ``forward_intermediates`` returning a `LayerTrace`
of its input, its half-step (after the first block) and its output, and optionally the attention maps. Both take
an optional ``attention_mask`` (batch, n), True for real tokens, that keeps attention off padding.

The encoder layer's LayerNorms are `LayerNorm`: PyTorch's, which can keep bfloat16 activations in bfloat16 under
autocast when asked (`crate_nn.models.classifier.CRATEClassifier.keep_activations`); by default they are
``nn.LayerNorm`` exactly.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .baselines import MHSA, MLP
from .config import BlockConfig
from .ista import ISTA
from .mssa import MSSA, HeadAttention
from .tssa import TSSA


@dataclass
class LayerTrace:
    """The tokens around one layer, each (batch, n, d); ``attention`` is (batch, K, n, n) or None.

    Encoder: ``input`` Z^ℓ, ``half`` Z^{ℓ+1/2} (after the attention block), ``output`` Z^{ℓ+1} (after ISTA/MLP).
    Decoder: ``input`` Z̃^ℓ, ``half`` H = E^ℓ LN1(Z̃^ℓ), ``output`` Z̃^{ℓ+1}.
    """

    input: torch.Tensor
    half: torch.Tensor
    output: torch.Tensor
    attention: torch.Tensor | None = None


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` that can keep low-precision activations in their dtype: with ``keep_dtype`` set, a bfloat16
    or float16 input gives an output of its dtype (the kernel still accumulates the statistics in float32, and the
    weight, bias and their gradients stay float32), where autocast would widen it to float32 for the next matrix
    product to round it back. Without ``keep_dtype`` (the default), and for float32 inputs, ``nn.LayerNorm``."""

    keep_dtype: bool = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.keep_dtype and x.dtype in (torch.bfloat16, torch.float16):
            with torch.autocast(x.device.type, enabled=False):
                return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return super().forward(x)


def build_attention(config: BlockConfig) -> HeadAttention:
    """The attention block ``config.attention`` names: MSSA (eqs. 35–37), the baselines' MHSA or ToST's TSSA."""
    common = dict(scale=config.attn_scale, causal=config.causal, attn_dropout=config.attn_dropout)
    if config.attention == "mhsa":
        return MHSA(config.dim, config.heads, config.head_dim, **common)
    if config.attention == "tssa":
        return TSSA(config.dim, config.heads, config.head_dim, membership=config.tssa_membership,
                    temperature=config.tssa_temperature, step=config.tssa_step, output=config.mssa_output,
                    out_bias=config.out_bias, **common)
    return MSSA(config.dim, config.heads, config.head_dim, output=config.mssa_output, out_bias=config.out_bias,
                eps=config.eps, **common)


def build_feedforward(config: BlockConfig) -> nn.Module:
    """The second block ``config.feedforward`` names: ISTA (eq. 44 and variants) or the baselines' MLP."""
    if config.feedforward == "mlp":
        return MLP(config.dim, round(config.mlp_ratio * config.dim))
    return ISTA(config.dim, config.eta, config.lam, kind=config.ista, eps=config.eps, dict_width=config.dict_width,
                tied=config.ista_output == "tied")


class CRATELayer(nn.Module):
    """One encoder layer f^ℓ: Z^ℓ → Z^{ℓ+1/2} (compression) → Z^{ℓ+1} (sparsification); (batch, n, d) in and out."""

    def __init__(self, config: BlockConfig) -> None:
        super().__init__()
        self.skip, self.feedforward = config.skip, config.feedforward
        self.residual_ffn = config.feedforward == "mlp" or config.ista_skip
        self.attention_name = config.attention
        self.norm1 = LayerNorm(config.dim, eps=config.norm_eps)
        setattr(self, config.attention, build_attention(config))
        if config.feedforward != "none":  # "none": Z^{ℓ+1} = Z^{ℓ+1/2} (Tables 15–16, without ISTA)
            self.norm2 = LayerNorm(config.dim, eps=config.norm_eps)
            setattr(self, config.feedforward, build_feedforward(config))

    @property
    def attn(self) -> HeadAttention:
        """The attention block (``self.mssa``, ``self.mhsa`` or ``self.tssa``)."""
        return getattr(self, self.attention_name)

    @property
    def ffn(self) -> nn.Module | None:
        """The second block (``self.ista`` or ``self.mlp``; None without one)."""
        return getattr(self, self.feedforward, None)

    def _compress(self, x: torch.Tensor, return_attention: bool, attention_mask: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor | None]:
        y = self.norm1(x)
        if return_attention:
            update, attn = self.attn.forward_with_attention(y, attention_mask)
        else:
            update, attn = self.attn(y, attention_mask), None
        return (x if self.skip == "input" else y) + update, attn

    def compress(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Z^{ℓ+1/2} from Z^ℓ."""
        return self._compress(x, False, attention_mask)[0]

    def sparsify(self, half: torch.Tensor) -> torch.Tensor:
        """Z^{ℓ+1} from Z^{ℓ+1/2}."""
        if self.ffn is None:
            return half
        y = self.norm2(half)
        out = self.ffn(y)
        if self.residual_ffn:
            out = (half if self.skip == "input" else y) + out
        return out

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.sparsify(self.compress(x, attention_mask))

    def forward_intermediates(self, x: torch.Tensor, return_attention: bool = False,
                              attention_mask: torch.Tensor | None = None) -> LayerTrace:
        """Z^ℓ, Z^{ℓ+1/2}, Z^{ℓ+1} (and the attention maps (batch, K, n, n) if asked)."""
        half, attn = self._compress(x, return_attention, attention_mask)
        return LayerTrace(x, half, self.sparsify(half), attn)


class CRATEDecoderLayer(nn.Module):
    """One decoder layer g^ℓ of eq. (64): (batch, n, d) → (batch, n, d)."""

    def __init__(self, config: BlockConfig) -> None:
        super().__init__()
        self.skip = config.skip
        self.norm1 = nn.LayerNorm(config.dim, eps=config.norm_eps)
        self.linear = nn.Linear(config.dim, config.dim, bias=False)  # E^ℓ, the inverse of the sparse coding
        self.norm2 = nn.LayerNorm(config.dim, eps=config.norm_eps)
        # always MSSA (eq. 64); its qkv weight is [V_1 … V_K]*
        self.mssa = build_attention(dataclasses.replace(config.block_config(), attention="mssa"))

    @property
    def attn(self) -> MSSA:
        return self.mssa

    def _step(self, h: torch.Tensor, return_attention: bool, attention_mask: torch.Tensor | None = None
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
        y = self.norm2(h)
        update, attn = (self.mssa.forward_with_attention(y, attention_mask) if return_attention
                        else (self.mssa(y, attention_mask), None))
        return (h if self.skip == "input" else y) - update, attn

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self._step(self.linear(self.norm1(x)), False, attention_mask)[0]

    def forward_intermediates(self, x: torch.Tensor, return_attention: bool = False,
                              attention_mask: torch.Tensor | None = None) -> LayerTrace:
        """Z̃^ℓ, H = E^ℓ LN1(Z̃^ℓ), Z̃^{ℓ+1} (and the attention maps if asked)."""
        h = self.linear(self.norm1(x))
        out, attn = self._step(h, return_attention, attention_mask)
        return LayerTrace(x, h, out, attn)
