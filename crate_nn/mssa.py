"""Multi-head subspace self-attention, eqs. (35)–(37), in the row convention (x is (batch, n, d)).

One bias-free projection ``qkv`` whose weight (K·p, d) is [U_1 … U_K]* serves as query, key and value. Per head
k, with w_k = x U_k (n, p):

    SSA_k(x) = softmax(scale · w_k w_kᵀ) w_k                      (35), softmax over the last axis

which is eq. (35) transposed (the Gram matrix is symmetric, so the row softmax of PyTorch equals the column
softmax of the paper). The heads are concatenated in head order and mapped back to d dimensions either by a free
Linear W with bias (eq. 37, the authors' code) or by the tied map β[U_1 … U_K] with β = p/(nε²) (eq. 36).
The causal mask of eqs. (86)–(87) keeps tokens i ≤ j for query j, i.e. ``torch.tril`` in the row convention.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MSSA(nn.Module):
    """MSSA block: (batch, n, d) → (batch, n, d).

    Args:
        dim: d.  heads: K.  dim_head: p.
        scale: factor on the attention logits; ``None`` means p^(-1/2).
        output: ``"free"`` (eq. 37, ``self.out`` = Linear(K·p, d) with bias) or ``"tied"`` (eq. 36, β[U_1 … U_K]).
        eps: ε in β = p/(nε²) for the tied output.
        causal: apply the mask of eq. (87).
        attn_dropout: dropout probability on the attention maps (training only).
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        dim_head: int,
        *,
        scale: float | None = None,
        output: str = "free",
        eps: float = 1.0,
        causal: bool = False,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if output not in ("free", "tied"):
            raise ValueError(f"output must be 'free' or 'tied', got {output!r}")
        self.heads, self.dim_head = heads, dim_head
        self.scale = dim_head**-0.5 if scale is None else float(scale)
        self.output, self.eps, self.causal, self.attn_dropout = output, float(eps), causal, attn_dropout
        self.fused_attn = True  # scaled_dot_product_attention; False forces the explicit path
        self.qkv = nn.Linear(dim, heads * dim_head, bias=False)  # weight = [U_1 … U_K]*, shape (K·p, d)
        self.out = nn.Linear(heads * dim_head, dim) if output == "free" else None

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """Per-head codes w_k = x U_k: (batch, n, d) → (batch, K, n, p) (the qkv output, split by head)."""
        b, n, _ = x.shape
        return self.qkv(x).view(b, n, self.heads, self.dim_head).transpose(1, 2)

    def attention(self, w: torch.Tensor) -> torch.Tensor:
        """Attention maps softmax(scale · w wᵀ) (masked if causal): (batch, K, n, p) → (batch, K, n, n)."""
        logits = (w @ w.transpose(-2, -1)) * self.scale
        if self.causal:
            n = w.shape[-2]
            keep = torch.ones(n, n, dtype=torch.bool, device=w.device).tril()
            logits = logits.masked_fill(~keep, float("-inf"))
        return logits.softmax(dim=-1)

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        """MSSA(x): (batch, n, d) → (batch, n, d); with ``return_attention`` also the maps (batch, K, n, n)."""
        w = self.project(x)
        dropout = self.attn_dropout if self.training else 0.0
        attn = None
        if self.fused_attn and not return_attention:
            heads = F.scaled_dot_product_attention(w, w, w, dropout_p=dropout, is_causal=self.causal, scale=self.scale)
        else:
            attn = self.attention(w)
            heads = F.dropout(attn, dropout, training=self.training) @ w
        b, _, n, _ = w.shape
        heads = heads.transpose(1, 2).reshape(b, n, self.heads * self.dim_head)  # [SSA_1; …; SSA_K]ᵀ
        if self.out is not None:
            y = self.out(heads)
        else:
            beta = self.dim_head / (n * self.eps**2)
            y = beta * (heads @ self.qkv.weight)  # (β [U_1 … U_K] [SSA_k]_k)ᵀ
        return (y, attn) if return_attention else y

    def extra_repr(self) -> str:
        return f"heads={self.heads}, dim_head={self.dim_head}, scale={self.scale:.4g}, output={self.output}, causal={self.causal}"
