"""Parameter counts of every registered CRATE size vs the papers' Tables 1 and 8 (paper-notes §2.23, §3.1)."""
from __future__ import annotations

import torch

import crate_nn
from verify import verdicts
from verify.registry import Result, claim

TABLE_8_MILLIONS = {"crate_tiny": 6.09, "crate_small": 13.12, "crate_base": 22.80, "crate_large": 77.64}
"""The printed parameter counts (millions, two decimals) of Tables 1 and 8."""


def _count(name: str) -> int:
    """Parameters of the registered model, built on the meta device (shapes only, nothing allocated)."""
    with torch.device("meta"):
        model = crate_nn.create_model(name)
    return sum(p.numel() for p in model.parameters())


def _register(name: str, printed: float) -> None:
    @claim(
        id=f"2.23-params-{name.removeprefix('crate_')}",
        tags=("params", "nn"),
        reference="004 Table 1, Table 8",
        statement=f"{name} (224² images, patch 16, 1000 classes) has {printed:.2f}M parameters",
        measures=f"parameter count of crate_nn.create_model('{name}')",
        expected=f"{printed:.2f}M within the table's rounding (|Δ| ≤ 0.005M)",
        expected_verdict="holds",
    )
    def measure(ctx) -> Result:
        count = _count(name)
        gap = abs(count / 1e6 - printed)
        return Result(
            measured=f"{count:,} ({count / 1e6:.3f}M)",
            verdict=verdicts.at_most(gap, 0.005),  # the table prints two decimals
            data={"count": count, "printed_millions": printed, "gap_millions": gap},
        )


for _name, _printed in TABLE_8_MILLIONS.items():
    _register(_name, _printed)
