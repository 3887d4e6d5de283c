"""Layer-wise measurements saved during training (Fig. 15: random init vs epochs), one JSON file per epoch (or
optimizer step) and a figure per protocol that grows with every measurement."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from .diagnostics import PROTOCOLS, LayerMeasurements, Stat, measure_layers


def record_layers(model: nn.Module, inputs: torch.Tensor, directory: Path, epoch: int, unit: str = "epoch") -> dict:
    """Layer-wise R^c and sparsity (`measure_layers`, both protocols) of ``model`` after ``epoch`` epochs (or
    optimizer steps, ``unit="step"``): ``directory/<unit>_XXXX.json`` (per-input values, mean, std) and
    ``directory/layers_<protocol>.png`` with one curve per measurement so far (0 is labelled "random init")."""
    from .plots import plot_layer_curves

    directory.mkdir(parents=True, exist_ok=True)
    record: dict = {unit: epoch}
    results = {protocol: measure_layers(model, inputs, protocol=protocol) for protocol in PROTOCOLS}
    for protocol, result in results.items():
        record[protocol] = {"eps": result.eps, **{
            kind: [{"mean": s.mean, "std": s.std, "ddof": s.ddof, "values": s.values.tolist()}
                   for s in getattr(result, kind)]
            for kind in ("compression", "sparsity")}}
    (directory / f"{unit}_{epoch:04d}.json").write_text(json.dumps(record) + "\n")
    saved = sorted((json.loads(p.read_text()) for p in directory.glob(f"{unit}_*.json")), key=lambda r: r[unit])
    for protocol in PROTOCOLS:
        curves = {
            f"{unit} {r[unit]}" if r[unit] else "random init": LayerMeasurements(
                protocol, r[protocol]["eps"],
                *([Stat(torch.tensor(s["values"], dtype=torch.float64), s.get("ddof", 0)) for s in r[protocol][kind]]
                  for kind in ("compression", "sparsity")),
                thresholded={},
            )
            for r in saved
        }
        plot_layer_curves(curves).savefig(directory / f"layers_{protocol}.png", dpi=120)
    return record
