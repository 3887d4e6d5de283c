"""Boxes of masks: the tight box around each boolean mask, the ground truth of the ``objects`` dataset and the box
MaskCut reports (`crate_nn.analysis.maskcut`)."""
from __future__ import annotations

import torch


def mask_boxes(masks: torch.Tensor) -> torch.Tensor:
    """Tight boxes (x0, y0, x1, y1), exclusive ends, of boolean masks (..., H, W) → (..., 4) int64; an empty mask
    gives (0, 0, 0, 0)."""
    if not isinstance(masks, torch.Tensor) or masks.dtype != torch.bool or masks.ndim < 2:
        raise TypeError(f"masks: expected a bool tensor (..., H, W), got {type(masks).__name__} "
                        f"{getattr(masks, 'dtype', '')} {tuple(getattr(masks, 'shape', ()))}")

    def span(hit: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        size = hit.shape[-1]
        index = torch.arange(size, device=hit.device)
        empty = ~hit.any(dim=-1)
        first = torch.where(hit, index, size).amin(dim=-1).masked_fill(empty, 0)
        last = torch.where(hit, index + 1, 0).amax(dim=-1)
        return first, last

    y0, y1 = span(masks.any(dim=-1))
    x0, x1 = span(masks.any(dim=-2))
    return torch.stack([x0, y0, x1, y1], dim=-1).long()
