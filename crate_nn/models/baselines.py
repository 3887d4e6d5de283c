"""The standard transformer blocks the papers compare CRATE against (Table 17; Tables 8 and 10's baselines).

* `MHSA` — multi-head self-attention with separate query, key and value maps (one Linear(d, 3·K·p) with bias)
  and an output Linear(K·p, d) with bias: ``softmax(scale · q_k k_kᵀ) v_k`` per head. It replaces MSSA in ViT and
  CRATE-MHSA; its [CLS] attention is eq. (438) of the long paper.
* `MLP` — Linear(d, h) → GELU → Linear(h, d), h = ``mlp_ratio``·d, used with a residual connection. It replaces
  the ISTA block in ViT and CRATE-MLP.

Both use PyTorch's default initialisation, like the CRATE modules they replace, so a comparison differs in the
block and nothing else (`crate_nn.models.blocks.CRATELayer` picks them with ``attention="mhsa"`` /
``feedforward="mlp"``).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .mssa import HeadAttention


class MHSA(HeadAttention):
    """Multi-head self-attention: (batch, n, d) → (batch, n, d).

    Args:
        dim: d.  heads: K.  dim_head: p.
        scale: factor on the attention logits; ``None`` means p^(-1/2).
        causal: causal mask (token j attends to i ≤ j).  attn_dropout: dropout on the attention maps.
    """

    def __init__(self, dim: int, heads: int, dim_head: int, *, scale: float | None = None, causal: bool = False,
                 attn_dropout: float = 0.0) -> None:
        super().__init__(heads, dim_head, scale=scale, causal=causal, attn_dropout=attn_dropout)
        self.qkv = nn.Linear(dim, 3 * heads * dim_head)  # rows: [Q_1 … Q_K; K_1 … K_K; V_1 … V_K]*
        self.out = nn.Linear(heads * dim_head, dim)

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, n, _ = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.heads, self.dim_head).permute(2, 0, 3, 1, 4)
        return qkv[0], qkv[1], qkv[2]

    def merge(self, heads: torch.Tensor, n: int) -> torch.Tensor:
        return self.out(heads)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, dim_head={self.dim_head}, scale={self.scale:.4g}, causal={self.causal}"


class MLP(nn.Module):
    """The transformer MLP: (batch, n, d) → (batch, n, d), ``fc2(GELU(fc1(x)))`` with hidden width ``hidden``."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))
