"""Multi-head subspace self-attention, eqs. (35)–(37), in the row convention (x is (batch, n, d)).

One bias-free projection ``qkv`` whose weight (K·p, d) is [U_1 … U_K]* serves as query, key and value. Per head
k, with w_k = x U_k (n, p):

    SSA_k(x) = softmax(scale · w_k w_kᵀ) w_k                      (35), softmax over the last axis

which is eq. (35) transposed (the Gram matrix is symmetric, so the row softmax of PyTorch equals the column
softmax of the paper). The heads are concatenated in head order and mapped back to d dimensions either by a free
Linear W (eq. 37, the authors' code; with bias unless ``out_bias=False`` as in CRATE-α) or by the tied map
β[U_1 … U_K] with β = p/(nε²) (eq. 36). The causal mask of eqs. (86)–(87) keeps tokens i ≤ j for query j, i.e.
``torch.tril`` in the row convention. An optional ``attention_mask`` (batch, n), True for real tokens, keeps every
query from attending to padding (text batches of unequal lengths).

`HeadAttention` holds what MSSA shares with the standard multi-head attention of the baselines
(`crate_nn.models.baselines.MHSA`): the fused (SDPA, `fused_attention`) and explicit paths, the causal mask, the
head merge. `SubspaceAttention` holds what MSSA shares with ToST's TSSA (`crate_nn.models.tssa`): the projection
[U_1 … U_K]* that serves as query, key and value, and the free or tied output map.
"""
from __future__ import annotations

import abc

import torch
import torch.nn.functional as F
from torch import nn


def fused_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> torch.Tensor:
    """``F.scaled_dot_product_attention``, but in float32 for bfloat16 inputs on a CPU (the output is cast back):
    torch 2.13's CPU flash-attention kernel is no faster in bfloat16 forward and ~1.5× slower backward than in
    float32 (AMD EPYC Zen 4), so a bf16 autocast step of crate_tiny / crate_base runs ≈ 8 % faster this way
    (benchmarks/RESULTS.md, "CPU: bf16 autocast and the GEMM limit"), and the attention is computed more exactly.
    MSSA's q = k = v is widened once (one float32 copy kept for the backward pass, its gradients summed in float32)."""
    if q.device.type == "cpu" and q.dtype == torch.bfloat16:
        q32 = q.float()
        k32 = q32 if k is q else k.float()
        v32 = q32 if v is q else k32 if v is k else v.float()
        with torch.autocast("cpu", enabled=False):
            return F.scaled_dot_product_attention(q32, k32, v32, **kwargs).to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, **kwargs)


class HeadAttention(nn.Module, abc.ABC):
    """Attention over K heads: (batch, n, d) → (batch, n, d); by default scaled-dot-product attention.

    Subclasses define ``qkv_heads(x)`` → (q, k, v), each (batch, K, n, p), and ``merge(heads, n)`` mapping the
    concatenated head outputs (batch, n, K·p) back to (batch, n, d). ``fused_attn`` selects the fast path (default;
    here ``F.scaled_dot_product_attention``) or the explicit path with its (batch, K, n, n) maps, which tests compare.
    `crate_nn.models.tssa.TSSA` replaces both paths by its own (linear in n, and explicit) and keeps the rest: the
    flag, the causal/padding mask, the head merge.
    """

    def __init__(self, heads: int, dim_head: int, *, scale: float | None, causal: bool, attn_dropout: float):
        super().__init__()
        self.heads, self.dim_head = heads, dim_head
        self.scale = dim_head**-0.5 if scale is None else float(scale)
        self.causal, self.attn_dropout = causal, attn_dropout
        self.fused_attn = True  # scaled_dot_product_attention; False forces the explicit path

    @abc.abstractmethod
    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values, each (batch, K, n, p), of tokens x (batch, n, d)."""

    @abc.abstractmethod
    def merge(self, heads: torch.Tensor, n: int) -> torch.Tensor:
        """The concatenated head outputs (batch, n, K·p) mapped back to (batch, n, d)."""

    def keep_mask(self, n: int, attention_mask: torch.Tensor | None, device: torch.device) -> torch.Tensor | None:
        """Which keys each query may attend to, broadcastable to (batch, K, n, n), or None for all: the causal mask
        of eq. (87) (``tril``) and/or the real tokens of ``attention_mask`` (batch, n)."""
        keep = torch.ones(n, n, dtype=torch.bool, device=device).tril() if self.causal else None
        if attention_mask is not None:
            keys = attention_mask.bool()[:, None, None, :]
            keep = keys if keep is None else keep & keys
        return keep

    def attention_weights(self, q: torch.Tensor, k: torch.Tensor,
                          attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """softmax(scale · q kᵀ) over the last axis (masked if causal or padded): (batch, K, n, p)² → (batch, K, n, n)."""
        logits = (q @ k.transpose(-2, -1)) * self.scale
        keep = self.keep_mask(q.shape[-2], attention_mask, q.device)
        if keep is not None:
            logits = logits.masked_fill(~keep, float("-inf"))
        return logits.softmax(dim=-1)

    def _combine(self, heads: torch.Tensor) -> torch.Tensor:
        b, _, n, _ = heads.shape
        return self.merge(heads.transpose(1, 2).reshape(b, n, self.heads * self.dim_head), n)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.qkv_heads(x)
        dropout = self.attn_dropout if self.training else 0.0
        if self.fused_attn:
            keep = None if attention_mask is None else self.keep_mask(x.shape[1], attention_mask, x.device)
            heads = fused_attention(q, k, v, attn_mask=keep, dropout_p=dropout, is_causal=self.causal and keep is None,
                                    scale=self.scale)
        else:
            heads = F.dropout(self.attention_weights(q, k, attention_mask), dropout, training=self.training) @ v
        return self._combine(heads)

    def forward_with_attention(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor]:
        """The block's output (batch, n, d) and its attention maps (batch, K, n, n), by the explicit path."""
        q, k, v = self.qkv_heads(x)
        attn = self.attention_weights(q, k, attention_mask)
        dropout = self.attn_dropout if self.training else 0.0
        return self._combine(F.dropout(attn, dropout, training=self.training) @ v), attn


class SubspaceAttention(HeadAttention):
    """What MSSA and TSSA share: one bias-free projection ``qkv`` whose weight (K·p, d) is [U_1 … U_K]*, serving as
    query, key and value (per-head codes w_k = x U_k), and an output map — a free Linear W (``output="free"``, with
    bias unless ``out_bias=False``) or, for ``"tied"``, [U_1 … U_K] times the subclass's factor (`merge`)."""

    def __init__(self, dim: int, heads: int, dim_head: int, *, scale: float | None, output: str, out_bias: bool,
                 causal: bool, attn_dropout: float) -> None:
        super().__init__(heads, dim_head, scale=scale, causal=causal, attn_dropout=attn_dropout)
        if output not in ("free", "tied"):
            raise ValueError(f"output must be 'free' or 'tied', got {output!r}")
        self.output = output
        self.qkv = nn.Linear(dim, heads * dim_head, bias=False)  # weight = [U_1 … U_K]*, shape (K·p, d)
        self.out = nn.Linear(heads * dim_head, dim, bias=out_bias) if output == "free" else None

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """Per-head codes w_k = x U_k: (batch, n, d) → (batch, K, n, p) (the qkv output, split by head)."""
        b, n, _ = x.shape
        return self.qkv(x).view(b, n, self.heads, self.dim_head).transpose(1, 2)

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        w = self.project(x)
        return w, w, w

    def extra_repr(self) -> str:
        return f"heads={self.heads}, dim_head={self.dim_head}, scale={self.scale:.4g}, output={self.output}, causal={self.causal}"


class MSSA(SubspaceAttention):
    """MSSA block: (batch, n, d) → (batch, n, d).

    Args:
        dim: d.  heads: K.  dim_head: p.
        scale: factor on the attention logits; ``None`` means p^(-1/2).
        output: ``"free"`` (eq. 37, ``self.out`` = Linear(K·p, d)) or ``"tied"`` (eq. 36, β[U_1 … U_K]).
        out_bias: the free output map has a bias (authors' CRATE) or not (CRATE-α).
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
        out_bias: bool = True,
        eps: float = 1.0,
        causal: bool = False,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__(dim, heads, dim_head, scale=scale, output=output, out_bias=out_bias, causal=causal,
                         attn_dropout=attn_dropout)
        self.eps = float(eps)

    def attention(self, w: torch.Tensor) -> torch.Tensor:
        """Attention maps softmax(scale · w wᵀ) (masked if causal): (batch, K, n, p) → (batch, K, n, n)."""
        return self.attention_weights(w, w)

    def merge(self, heads: torch.Tensor, n: int) -> torch.Tensor:
        """[SSA_1; …; SSA_K]ᵀ (batch, n, K·p) → W[…] + b (eq. 37) or β[U_1 … U_K][…] (eq. 36)."""
        if self.out is not None:
            return self.out(heads)
        beta = self.dim_head / (n * self.eps**2)
        return beta * (heads @ self.qkv.weight)
