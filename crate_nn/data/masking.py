"""BERT's masking of token blocks for the masked-LM objective (`Masking`), and the label of unpredicted positions
(`IGNORE`)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

IGNORE = -100  # the label of a position that is not predicted (F.cross_entropy's ignore_index)


@dataclass(frozen=True)
class Masking:
    """BERT's masking (Devlin et al. 2019; RoBERTa's dynamic masking draws a new mask every time a sequence is used).

    Every token that is not special (``special_ids`` and ``mask_id``) is selected with probability
    ``mask_probability`` (0.15); a selected token becomes ``<mask>`` with probability ``mask_fraction`` (0.8), a
    random non-special token with probability ``random_fraction`` (0.1), and stays itself otherwise (0.1). The labels
    are the original ids at the selected positions and `IGNORE` elsewhere: the loss of eq. (85) is taken over the
    selected set Ω. The three shares are named as the masked LM's options (its masking section builds this).
    """

    mask_id: int
    vocab_size: int
    special_ids: tuple[int, ...] = ()
    mask_probability: float = 0.15
    mask_fraction: float = 0.8
    random_fraction: float = 0.1

    def __post_init__(self) -> None:
        if not 0 <= self.mask_id < self.vocab_size:
            raise ValueError(f"mask_id: {self.mask_id} is not an id of the {self.vocab_size}-token vocabulary")
        self.check(self.mask_probability, self.mask_fraction, self.random_fraction)

    @staticmethod
    def check(mask_probability: float = 0.15, mask_fraction: float = 0.8, random_fraction: float = 0.1) -> None:
        """ValueError naming the first share `Masking` cannot use (its constructor's check, which the masked LM's
        config runs on its options before any work)."""
        if not 0 < mask_probability <= 1:
            raise ValueError(f"mask_probability: expected a value in (0, 1], got {mask_probability}")
        if min(mask_fraction, random_fraction) < 0 or mask_fraction + random_fraction > 1:
            raise ValueError(f"mask_fraction, random_fraction: expected non-negative values summing to at most 1, got "
                             f"{mask_fraction} and {random_fraction}")

    def __call__(self, tokens: torch.Tensor, generator: torch.Generator | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, labels), each like ``tokens`` (B, T) int64 on the CPU; ``generator`` None draws from torch's
        global generator (which the training engine saves and restores, so a resumed run masks identically)."""
        excluded = sorted({*self.special_ids, self.mask_id})
        special = torch.isin(tokens, torch.tensor(excluded, dtype=tokens.dtype))
        selected = (torch.rand(tokens.shape, generator=generator) < self.mask_probability) & ~special
        action = torch.rand(tokens.shape, generator=generator)
        allowed = torch.ones(self.vocab_size, dtype=torch.bool)
        allowed[excluded] = False
        candidates = allowed.nonzero()[:, 0]
        random_ids = candidates[torch.randint(len(candidates), tokens.shape, generator=generator)]
        masked = selected & (action < self.mask_fraction)
        randomised = selected & (action >= self.mask_fraction) & (action < self.mask_fraction + self.random_fraction)
        inputs = torch.where(masked, self.mask_id, torch.where(randomised, random_ids, tokens))
        return inputs, torch.where(selected, tokens, IGNORE)
