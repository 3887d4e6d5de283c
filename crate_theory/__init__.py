"""crate_theory: a float64 NumPy/SciPy reference of the mathematics of CRATE (column convention, Z is d×n).

Imports no torch. Every public function cites its equation in the long paper (*White-Box Transformers via Sparse
Rate Reduction: Compression Is All There Is?*, arXiv 2311.13110; docs/papers.md).

Modules: :mod:`.coding_rate` (R, R^c, ΔR, gradients, Hessian — eqs. 7–17, 31, 109, 127), :mod:`.mssa`
(Neumann gradient, SSA/MSSA, compression step — eqs. 26–37), :mod:`.ista` (LASSO, ISTA, MM step — eqs. 41–44,
108–123), :mod:`.layer` (LayerNorm, the encoder layer, unrolled CRATE — eq. 45), :mod:`.synthetic` (samplers of the
signal model 10–11), :mod:`._checks` (input validation); :mod:`.tssa` (ToST, a successor paper: the variational
compression term, the membership Π, TSSA and its causal form; see its docstring for its sources).
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

# Sec. 3 of the long version: Gaussian-mixture denoising, diffusion, Theorem 16, the white-box decoder; and ToST (arXiv
# 2412.17810): the variational compression term, the membership Π and TSSA.
from . import decoder, denoising, diffusion, theorem16, tssa
from .decoder import DecoderLayerParams, crate_decode, decoder_layer, decoder_presets
from .denoising import (
    LowRankGaussianMixture,
    approx12_denoiser,
    denoising_projection,
    log_density,
    posterior_mean,
    score,
    score_normalised,
    tweedie_denoiser,
)
from .diffusion import (
    geometric_time_grid,
    probability_flow_ode,
    structured_denoising_ode,
    structured_diffusion_ode,
    ve_sde,
)
from .theorem16 import sample_theorem16, theorem16_residuals

__all__ += [
    "denoising", "diffusion", "theorem16", "decoder",
    "LowRankGaussianMixture", "log_density", "score", "score_normalised", "posterior_mean", "tweedie_denoiser",
    "approx12_denoiser", "denoising_projection",
    "ve_sde", "probability_flow_ode", "structured_denoising_ode", "structured_diffusion_ode", "geometric_time_grid",
    "sample_theorem16", "theorem16_residuals",
    "DecoderLayerParams", "decoder_layer", "crate_decode", "decoder_presets", "tssa",
]
