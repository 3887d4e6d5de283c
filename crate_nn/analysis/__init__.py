"""The white-box analysis: layer-wise traces and measurements (R^c, sparsity, coherence; Sec. 4.2), the figures
of Figs. 14–17 (`crate_nn.analysis.plots`, import it explicitly: it loads matplotlib) and the measurements
saved during training (`crate_nn.analysis.snapshots`)."""
from .diagnostics import (
                          PROTOCOLS,
                          LayerMeasurements,
                          Stat,
                          coherence,
                          compression,
                          has_mssa_layers,
                          measure_layers,
                          sparsity,
                          thresholded_sparsity,
                          trace,
)

__all__ = ["PROTOCOLS", "LayerMeasurements", "Stat", "coherence", "compression", "has_mssa_layers", "measure_layers",
           "sparsity", "thresholded_sparsity", "trace"]
