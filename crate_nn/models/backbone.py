"""Stacks of layers: the CRATE encoder f = f^L ∘ … ∘ f^1 (eq. 20) and the white-box decoder g (eq. 64 stacked).

Both are a `LayerStack`: one loop over ``layers`` for the forward pass and one for ``forward_intermediates``,
which returns every layer's `LayerTrace` (input, half-step, output, attention maps) in the spirit of timm's
``forward_intermediates``. The diagnostics, the k-NN and linear-probe evaluations and the segmentation all read
intermediate tokens and attention maps through it; no forward changes its return type.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from .blocks import CRATEDecoderLayer, CRATELayer, LayerTrace
from .config import BlockConfig, check_positive_int


class LayerStack(nn.Module):
    """``depth`` layers applied in order: (batch, n, d) → (batch, n, d)."""

    layer_class: type[nn.Module] = CRATELayer

    def __init__(self, config: BlockConfig, depth: int | None = None) -> None:
        super().__init__()
        depth = getattr(config, "depth", None) if depth is None else depth
        check_positive_int("depth", depth)
        self.layers = nn.ModuleList(self.layer_class(config) for _ in range(depth))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``attention_mask`` (batch, n), True for real tokens, keeps attention off padding (None: no padding)."""
        for layer in self.layers:
            x = layer(x, attention_mask)
        return x

    def forward_intermediates(
        self, x: torch.Tensor, indices: Sequence[int] | None = None, return_attention: bool = False,
        attention_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[LayerTrace]]:
        """The stack's output and the `LayerTrace` of the layers in ``indices`` (0-based; default: all).

        Layers after the last requested index still run, so the output is always the stack's output.
        """
        wanted = set(range(len(self.layers)) if indices is None else indices)
        bad = sorted(i for i in wanted if not 0 <= i < len(self.layers))
        if bad:
            raise ValueError(f"indices {bad} are out of range for a stack of {len(self.layers)} layers")
        traces = []
        for i, layer in enumerate(self.layers):
            if i in wanted:
                t = layer.forward_intermediates(x, return_attention=return_attention, attention_mask=attention_mask)
                traces.append(t)
                x = t.output
            else:
                x = layer(x, attention_mask)
        return x, traces


class CRATEEncoder(LayerStack):
    """L encoder layers, f = f^L ∘ … ∘ f^1 (eq. 20): (batch, n, d) → (batch, n, d)."""

    layer_class = CRATELayer


class CRATEDecoder(LayerStack):
    """L decoder layers, g = g^{L−1} ∘ … ∘ g^0 (eq. 64 stacked): (batch, n, d) → (batch, n, d)."""

    layer_class = CRATEDecoderLayer
