"""Layer-wise measurements saved during training (Fig. 15: random init vs epochs), one JSON file per epoch and a
figure per protocol that grows with every measured epoch."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from .diagnostics import PROTOCOLS, LayerMeasurements, Stat, measure_layers


def record_layers(model: nn.Module, inputs: torch.Tensor, directory: Path, epoch: int) -> dict:
    """Layer-wise R^c and sparsity (`measure_layers`, both protocols) of ``model`` after ``epoch`` epochs:
    ``directory/epoch_XXXX.json`` (per-input values, mean, std) and ``directory/layers_<protocol>.png`` with one
    curve per measured epoch so far (epoch 0 is labelled "random init")."""
    from .plots import plot_layer_curves

    directory.mkdir(parents=True, exist_ok=True)
    record: dict = {"epoch": epoch}
    results = {protocol: measure_layers(model, inputs, protocol=protocol) for protocol in PROTOCOLS}
    for protocol, result in results.items():
        record[protocol] = {"eps": result.eps, **{
            kind: [{"mean": s.mean, "std": s.std, "ddof": s.ddof, "values": s.values.tolist()}
                   for s in getattr(result, kind)]
            for kind in ("compression", "sparsity")}}
    (directory / f"epoch_{epoch:04d}.json").write_text(json.dumps(record) + "\n")
    saved = [json.loads(p.read_text()) for p in sorted(directory.glob("epoch_*.json"))]
    for protocol in PROTOCOLS:
        curves = {
            f"epoch {r['epoch']}" if r["epoch"] else "random init": LayerMeasurements(
                protocol, r[protocol]["eps"],
                *([Stat(torch.tensor(s["values"], dtype=torch.float64), s.get("ddof", 0)) for s in r[protocol][kind]]
                  for kind in ("compression", "sparsity")),
                thresholded={},
            )
            for r in saved
        }
        plot_layer_curves(curves).savefig(directory / f"layers_{protocol}.png", dpi=120)
    return record
