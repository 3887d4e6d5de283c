"""crate_theory: a float64 NumPy/SciPy reference of the mathematics of CRATE (column convention, Z is d×n).

Imports no torch. Every public function cites its equation in the long paper
(``../shared/seeds/004_eed128db2d338623.txt``, arXiv 2311.13110).

Modules: :mod:`.coding_rate` (R, R^c, ΔR, gradients, Hessian — eqs. 7–17, 31, 109, 127), :mod:`.mssa`
(Neumann gradient, SSA/MSSA, compression step — eqs. 26–37), :mod:`.ista` (LASSO, ISTA, MM step — eqs. 41–44,
108–123), :mod:`.layer` (LayerNorm, the encoder layer, unrolled CRATE — eq. 45), :mod:`.synthetic` (samplers of the
signal model 10–11), :mod:`._checks` (input validation).
"""
from . import synthetic
from .coding_rate import (
    coding_rate,
    coding_rate_grad,
    coding_rate_hessian,
    coding_rate_hessian_eigenvalues,
    coding_rate_hessian_norm,
    coding_rate_hvp,
    compression_rate,
    compression_rate_grad,
    label_compression_rate,
    project_onto_bases,
    rate_reduction,
    sparse_rate_reduction,
)
from .ista import (
    IstaResult,
    ista,
    ista_solve,
    lasso_objective,
    mm_majorizer,
    mm_objective,
    mm_step,
    nonneg_lasso_reference,
    nonneg_soft_threshold,
    soft_threshold,
)
from .layer import CrateLayerParams, CrateTrace, crate_forward, crate_layer, layer_norm, tied_output_map
from .mssa import (
    causal_mask,
    column_softmax,
    compression_step,
    mssa,
    mssa_free,
    neumann_compression_grad,
    ssa,
    ssa_attention,
)

__all__ = [
    "coding_rate",
    "compression_rate",
    "rate_reduction",
    "sparse_rate_reduction",
    "label_compression_rate",
    "coding_rate_grad",
    "compression_rate_grad",
    "coding_rate_hvp",
    "coding_rate_hessian",
    "coding_rate_hessian_eigenvalues",
    "coding_rate_hessian_norm",
    "project_onto_bases",
    "neumann_compression_grad",
    "column_softmax",
    "causal_mask",
    "ssa",
    "ssa_attention",
    "mssa",
    "mssa_free",
    "compression_step",
    "lasso_objective",
    "soft_threshold",
    "nonneg_soft_threshold",
    "ista",
    "ista_solve",
    "IstaResult",
    "nonneg_lasso_reference",
    "mm_objective",
    "mm_majorizer",
    "mm_step",
    "layer_norm",
    "tied_output_map",
    "CrateLayerParams",
    "CrateTrace",
    "crate_layer",
    "crate_forward",
    "synthetic",
]
