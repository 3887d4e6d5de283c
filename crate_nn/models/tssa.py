"""Token statistics self-attention (ToST, Wu et al., ICLR 2025, arXiv 2412.17810), row convention: x is (batch, n, d).

One bias-free projection ``qkv`` whose weight (K·p, d) is [U_1 … U_K]* gives per-head codes w_k = x U_k (n, p). Per
head k and token t, over the tokens j that t *sees* (all of them; j ≤ t when causal; real ones only under an
``attention_mask``):

    π_t      = softmax_k(t_k e_kt)                               the membership Π: t_k a learned inverse temperature,
                                                                 e_kt = Σ_i w_kti² / Σ_{j seen} w_kji² ("normalized",
                                                                 ToST's public code) or ‖w_kt‖² ("energy")
    s_kt     = Σ_{j seen} π_kj w_kj^{⊙2} / Σ_{j seen} π_kj       the token statistics (one per coordinate)
    head_kt  = −π_kt · c / (1 + c s_kt) ⊙ w_kt                   c / (1 + c s) = f'(s), f(x) = log(1 + c x)

The heads are concatenated and mapped back to d dimensions by a free Linear W (ToST's code: the step absorbed) or by
the tied map (τ/n_t)[U_1 … U_K], n_t the number of tokens t sees: then the block is exactly one gradient step
−τ∇_Z R^c_var of the variational compression term with Π held fixed, and its causal form the step of each prefix's
rate in its last token (`crate_theory.tssa`, which derives both). With ``membership="normalized"``, c = 1 and a free
output, the bidirectional block computes what ToST's vision ``AttentionTSSA`` computes and the causal one what its
language ``CausalSelfAttention_TSSA`` computes with its learned per-position bias in Π left out (no derivation
gives it). The authors' projections also carry a bias; ours is U alone.

Two paths compute the sums over the tokens each token sees: the linear one (``fused_attn=True``, the default) by
sums, or running sums when causal — O(K n p) time and memory, no n × n array; the explicit one (``False``) by the
(batch, K, n, n) weights A_tj = π_kj / Σ_{j' seen} π_kj' (0 for unseen j), s = A w^{⊙2}: these are the block's
"attention maps" (`forward_with_attention`), and tests compare the two paths. Under autocast the membership, the
statistics and the weights are computed in float32 from the (bf16) codes, whatever accumulator a kernel's sum uses.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F

from .config import MEMBERSHIPS
from .mssa import SubspaceAttention


class TSSA(SubspaceAttention):
    """TSSA block: (batch, n, d) → (batch, n, d).

    Args:
        dim: d.  heads: K.  dim_head: p.
        scale: c in the statistics' weights c/(1 + c s); ``None`` means 1 (ToST's code). The derivation's is d/ε².
        membership: ``"normalized"`` or ``"energy"`` (module docstring).
        temperature: initial value of the learned inverse temperatures t_k of Π (``self.temperature``, (K,)).
        step: τ of the tied output.
        output: ``"free"`` (``self.out`` = Linear(K·p, d)) or ``"tied"`` ((τ/n_t)[U_1 … U_K]).
        out_bias: the free output map has a bias.
        causal: token t sees tokens j ≤ t only.
        attn_dropout: dropout probability on the weights c/(1 + c s) (training only).
    """

    def __init__(
        self,
        dim: int,
        heads: int,
        dim_head: int,
        *,
        scale: float | None = None,
        membership: str = "normalized",
        temperature: float = 1.0,
        step: float = 1.0,
        output: str = "free",
        out_bias: bool = True,
        causal: bool = False,
        attn_dropout: float = 0.0,
    ) -> None:
        super().__init__(dim, heads, dim_head, scale=1.0 if scale is None else scale, output=output,
                         out_bias=out_bias, causal=causal, attn_dropout=attn_dropout)
        if membership not in MEMBERSHIPS:
            raise ValueError(f"membership must be one of {MEMBERSHIPS}, got {membership!r}")
        self.membership, self.step = membership, float(step)
        self.temperature = torch.nn.Parameter(torch.full((heads,), float(temperature)))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        return self._attend(x, attention_mask, explicit=not self.fused_attn)[0]

    def forward_with_attention(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None
                               ) -> tuple[torch.Tensor, torch.Tensor]:
        """The block's output (batch, n, d) and its maps A (batch, K, n, n), by the explicit path."""
        return self._attend(x, attention_mask, explicit=True)

    def memberships(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Π of tokens x (batch, n, d): (batch, K, n), each token's weights over the K groups (summing to 1)."""
        w = self.project(x)
        sums, _ = self._sums(w.shape[-2], attention_mask, w.device, explicit=False)
        with torch.autocast(x.device.type, enabled=False):
            return self._membership(_accurate(w).square(), sums)

    def _attend(self, x: torch.Tensor, attention_mask: torch.Tensor | None, explicit: bool
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        w = self.project(x)  # (b, K, n, p)
        n = w.shape[-2]
        sums, seen = self._sums(n, attention_mask, w.device, explicit)
        with torch.autocast(x.device.type, enabled=False):
            codes = _accurate(w)
            squares = codes.square()
            pi = self._membership(squares, sums)  # (b, K, n)
            weights = pi if attention_mask is None else pi * attention_mask[:, None, :].to(pi.dtype)
            maps = None
            if explicit:
                maps = seen.to(pi.dtype).expand(*seen.shape[:-2], n, n) * weights[:, :, None, :]
                maps = maps / maps.sum(-1, keepdim=True).clamp_min(_tiny(maps))
                stats = maps @ squares
            else:
                stats = sums(weights[..., None] * squares) / sums(weights[..., None]).clamp_min(_tiny(squares))
            factors = F.dropout(self.scale / (1 + self.scale * stats), self.attn_dropout if self.training else 0.0,
                                training=self.training)
            heads = -pi[..., None] * factors * codes
            if self.out is None:  # tied: the gradient step, τ over the number of tokens each token sees
                heads = heads * (self.step / sums(torch.ones_like(codes[:1, :1, :, :1])).clamp_min(1))
        return self._combine(heads.to(w.dtype)), maps

    def _sums(self, n: int, attention_mask: torch.Tensor | None, device: torch.device, explicit: bool):
        """The map v (b, K, n, m) ↦ Σ of v over the tokens each token sees, (b, K, n or 1, m), and for the explicit
        path the boolean matrix of who sees whom (broadcastable to (b, 1, n, n); None for the linear path)."""
        if explicit:
            keep = self.keep_mask(n, attention_mask, device)
            seen = torch.ones(n, n, dtype=torch.bool, device=device) if keep is None else keep
            return partial(_matrix_sums, seen=seen), seen
        real = None if attention_mask is None else attention_mask[:, None, :, None]
        return partial(_running_sums, causal=self.causal, real=real), None

    def _membership(self, squares: torch.Tensor, sums) -> torch.Tensor:
        """softmax_k(t_k e_kt) from the squared codes (b, K, n, p): (b, K, n)."""
        if self.membership == "normalized":
            squares = squares / sums(squares).clamp_min(_tiny(squares))
        return (self.temperature[:, None].to(squares.dtype) * squares.sum(-1)).softmax(dim=1)

    def merge(self, heads: torch.Tensor, n: int) -> torch.Tensor:
        """[head_1; …; head_K]ᵀ (batch, n, K·p) → W[…] + b, or [U_1 … U_K][…] (tied: τ/n_t applied in `_attend`)."""
        return self.out(heads) if self.out is not None else heads @ self.qkv.weight

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, membership={self.membership}"


def _accurate(w: torch.Tensor) -> torch.Tensor:
    """Codes widened to float32 when stored in a half type (float64 stays float64)."""
    return w.float() if w.dtype in (torch.float16, torch.bfloat16) else w


def _tiny(x: torch.Tensor) -> float:
    """A floor for denominators that are 0 only when every term of their numerator is 0 (the quotient is then 0)."""
    return torch.finfo(x.dtype).tiny


def _running_sums(v: torch.Tensor, causal: bool, real: torch.Tensor | None) -> torch.Tensor:
    if real is not None:
        v = v * real.to(v.dtype)
    return v.cumsum(-2) if causal else v.sum(-2, keepdim=True)


def _matrix_sums(v: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
    return seen.to(v.dtype) @ v
