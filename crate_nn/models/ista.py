"""The sparsification block: one ISTA step on the non-negative LASSO, eqs. (41)–(44), in the row convention.

Eq. (44) for tokens as columns, ``ReLU(Z − ηD*(DZ − Z) − ηλ1)``, becomes for the rows y = Zᵀ (n, d)

    t = y Dᵀ                                   (= (DZ)ᵀ, first product)
    ISTA(y) = ReLU(y + η (y − t) D − ηλ)       (second product)

two d×d products per token (the authors' code spends three). Before the ReLU the step is linear in y,

    y + η (y − y Dᵀ) D = y + y N,    N = η (D − DᵀD)   (d×d, 2d³ FLOPs to form)

so when a batch holds more tokens T than d (always in training: 16·197 > 768) one token product ``y N`` replaces
the two, and the backward pass needs two token products instead of four: 2Td² + 2d³ FLOPs forward instead of
4Td², the same function up to rounding (`benchmarks/fast_paths.py` measured it; the float64 tests compare both
forms with crate_theory). Variants (``kind``):

* ``"relu"``  eq. (44) (default);
* ``"soft"``  Table 13: the same gradient step followed by the soft threshold S_{ηλ}(v) = sgn(v)(|v| − ηλ)_+;
* ``"mm"``    eq. (123): ``ReLU((1 + 4/(9(1+α))) D*Z − 4λ/(9α))``, α = d/(nε²), rows: y D;
* ``"overcomplete"`` the CRATE-α block: D is (d, m); two ISTA steps on the codes started from 0,
  ``z₁ = ReLU(ηD*y − ηλ)``, ``z₂ = ReLU(z₁ − ηD*(Dz₁ − y) − ηλ)``, decoded by a separate output dictionary
  D₁ (d, m): output ``D₁z₂`` (rows: ``z₂ D₁ᵀ``). CRATE-α puts a residual around it (``ista_skip``). With
  ``tied=True`` the codes are decoded by D itself, ``Dz₂`` (the trained CRATE-GPT of crate-lm).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ISTA(nn.Module):
    """ISTA block: (batch, n, d) → (batch, n, d).

    Args:
        dim: d.  eta: η.  lam: λ.
        kind: ``"relu"`` | ``"soft"`` | ``"mm"`` | ``"overcomplete"`` (see the module docstring).
        eps: ε in α = d/(nε²) (``kind="mm"`` only).
        dict_width: m, atoms of the overcomplete dictionary (``kind="overcomplete"`` only; default 4·d).
        tied: decode the overcomplete codes with D instead of a separate D₁ (``kind="overcomplete"`` only).

    Parameters: ``weight`` = D, (d, d) or (d, m); ``out_weight`` = D₁ (d, m) for the untied overcomplete kind.
    Both are initialised with ``kaiming_uniform_`` (a = 0), as in the authors' code; a tied D with fan-in d (it is
    stored as Dᵀ (m, d) by crate-lm, whose initialisation this reproduces).
    """

    def __init__(
        self,
        dim: int,
        eta: float = 0.1,
        lam: float = 0.1,
        *,
        kind: str = "relu",
        eps: float = 1.0,
        dict_width: int | None = None,
        tied: bool = False,
    ) -> None:
        super().__init__()
        if kind not in ("relu", "soft", "mm", "overcomplete"):
            raise ValueError(f"kind must be 'relu', 'soft', 'mm' or 'overcomplete', got {kind!r}")
        if tied and kind != "overcomplete":
            raise ValueError(f"tied=True decodes overcomplete codes; it needs kind='overcomplete', got {kind!r}")
        self.eta, self.lam, self.kind, self.eps, self.tied = float(eta), float(lam), kind, float(eps), tied
        atoms = (dict_width or 4 * dim) if kind == "overcomplete" else dim
        self.weight = nn.Parameter(torch.empty(dim, atoms))
        self.out_weight = nn.Parameter(torch.empty(dim, atoms)) if kind == "overcomplete" and not tied else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_uniform_(self.weight.T if self.tied else self.weight)
        if self.out_weight is not None:
            nn.init.kaiming_uniform_(self.out_weight)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        D, eta, lam = self.weight, self.eta, self.lam
        if self.kind in ("relu", "soft"):
            v = self.gradient_step(y)
            return F.relu(v - eta * lam) if self.kind == "relu" else F.softshrink(v, eta * lam)
        if self.kind == "mm":
            alpha = y.shape[-1] / (y.shape[-2] * self.eps**2)
            return F.relu((1 + 4 / (9 * (1 + alpha))) * (y @ D) - 4 * lam / (9 * alpha))
        z1 = F.relu(eta * (y @ D) - eta * lam)  # ReLU(ηD*y − ηλ), rows (n, m)
        z2 = F.relu(z1 - eta * ((F.linear(z1, D) - y) @ D) - eta * lam)  # ReLU(z₁ − ηD*(Dz₁ − y) − ηλ)
        return F.linear(z2, D if self.out_weight is None else self.out_weight)  # (D₁ z₂)ᵀ, or (D z₂)ᵀ if tied

    def gradient_step(self, y: torch.Tensor) -> torch.Tensor:
        """y + η(y − yDᵀ)D, the gradient step of eq. (44): (..., d) → (..., d).

        Folded into ``y + y N`` with N = η(D − DᵀD) when the tokens outnumber d (see the module docstring), else
        the two products.
        """
        D, eta = self.weight, self.eta
        if y.numel() // y.shape[-1] > D.shape[0]:  # more tokens than d
            # the identity term is added at y's precision: under bf16 autocast only the product y N is rounded
            return y + y @ (eta * (D - D.t() @ D))
        return y + eta * ((y - F.linear(y, D)) @ D)

    def extra_repr(self) -> str:
        return f"kind={self.kind}, eta={self.eta}, lam={self.lam}, atoms={self.weight.shape[1]}"
