"""Normalised cuts and MaskCut on patch features: object masks and boxes without any training (App. C.10).

MaskCut (Wang et al. 2023, "Cut and Learn"; Algorithm 1 of the long paper) runs on the patch tokens of one image:

1. `patch_affinity`: the affinity of patches i, j is their features' cosine similarity, binarised as MaskCut does:
   ``W_ij = 1`` if ``cos(f_i, f_j) > tau`` else ``eps`` (1e-5), so the graph is connected and its degrees positive.
   With f_i = [U_1* z_i; …; U_K* z_i] (an MSSA layer's codes) the cosine is the paper's affinity
   ``M_ij = Σ_k ⟨U_k* z_i, U_k* z_j⟩`` divided by √(M_ii M_jj); for MHSA layers the keys K* z_i are used (MaskCut's
   default features). `crate_nn.analysis.segmentation.patch_codes` extracts both.
2. `ncut`: the normalised cut of Shi and Malik (2000) relaxed to the second-smallest generalised eigenvector x of
   ``(D − W) x = λ D x``, D = diag(W 1) (``scipy.linalg.eigh``, dense: N ≤ a few thousand patches).
3. `bipartition`: patches with ``x_i > mean(x)`` form one side; the foreground is the side holding the entry of
   largest |x|, except that a side holding 3 or 4 of the grid's corners is background (MaskCut's object-centric
   prior); only the foreground's 4-connected component containing its most extreme entry (the seed) is kept.
4. `maskcut`: repeat for ``num_objects`` objects. Before each further cut the features of every patch found so
   far are set to zero (they then connect to everything with weight eps only), so the next cut looks for another
   object. This is the original MaskCut. Algorithm 1 *as printed* writes ``M ← M ⊙ mask``, which would keep the
   found object and cut inside it again (Algorithm 1 as printed multiplies by the mask, keeping the object). As in MaskCut (CutLER's ``maskcut_forward``), a
   further cut that overlaps the previous cut with IoU > 0.5 or covers ≤ 1% of the grid is dropped (left empty).
   The overlap is measured between the two cuts as the cuts found them: the previous one *before* the patches of
   earlier objects were removed from it (MaskCut's ``current_mask``; an empty mask when that cut was dropped).
   Only then does each returned mask exclude the patches of earlier masks.

Differences from the published MaskCut pipeline: no dense-CRF refinement (masks stay at patch resolution and are
upsampled by `crate_nn.analysis.segmentation.upsample`), and boxes are the tight boxes of the masks
(`crate_nn.data.boxes.mask_boxes`, imported here for the callers of this module).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg
import torch
from scipy import ndimage

from ..data.boxes import mask_boxes  # noqa: F401 - the boxes of the masks found here

TAU = 0.2  # the MaskCut script's default threshold of the binary graph (its paper uses 0.15)
EPS = 1e-5


def patch_affinity(features: np.ndarray, tau: float = TAU, eps: float = EPS) -> np.ndarray:
    """MaskCut's binary affinity (N, N) of patch features (N, D): 1 where the cosine similarity exceeds ``tau``,
    ``eps`` elsewhere. A zero feature vector has cosine 0 with everything."""
    features = np.asarray(features, dtype=np.float64)
    if features.ndim != 2 or features.shape[0] < 2:
        raise ValueError(f"features: expected (N, D) with N ≥ 2 patches, got shape {features.shape}")
    if not np.isfinite(features).all():
        raise ValueError("features: expected finite values")
    if not eps > 0:
        raise ValueError(f"eps: expected a positive weight, got {eps}")
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    unit = np.divide(features, norms, out=np.zeros_like(features), where=norms > 0)
    return np.where(unit @ unit.T > tau, 1.0, eps)


def ncut(affinity: np.ndarray) -> np.ndarray:
    """The second-smallest generalised eigenvector x (N,) of (D − W) x = λ D x for a symmetric non-negative
    affinity W (N, N) with positive degrees, scaled so that xᵀ D x = 1 (sign arbitrary)."""
    w = np.asarray(affinity, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != w.shape[1] or w.shape[0] < 2:
        raise ValueError(f"affinity: expected a square (N, N) matrix with N ≥ 2, got shape {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any() or not np.allclose(w, w.T, rtol=0, atol=1e-12 * np.abs(w).max()):
        raise ValueError("affinity: expected a finite, symmetric, non-negative matrix")
    degree = w.sum(axis=1)
    if (degree <= 0).any():
        raise ValueError("affinity: every patch needs a positive degree (a row of zeros has none)")
    _, vectors = scipy.linalg.eigh(np.diag(degree) - w, np.diag(degree), subset_by_index=[1, 1])
    return vectors[:, 0]


def bipartition(vector: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """The foreground (h, w) bool of a cut vector x (h·w,) (row-major patches), module docstring step 3.

    The side of ``x > mean(x)`` or ``x ≤ mean(x)`` holding the seed argmax |x|, or the other side when that one
    holds ≥ 3 grid corners, restricted to the 4-connected component of its most extreme entry (largest
    |x − mean(x)|). The result does not depend on the sign of x (MaskCut checks the corners of the ``x > mean``
    side only, which depends on the eigensolver's sign).
    """
    h, w = grid
    x = np.asarray(vector, dtype=np.float64)
    if x.shape != (h * w,):
        raise ValueError(f"vector: expected {h * w} entries for a {h}×{w} grid, got shape {x.shape}")
    upper = (x > x.mean()).reshape(h, w)
    side = upper if upper.ravel()[np.argmax(np.abs(x))] else ~upper
    if int(side[0, 0]) + int(side[0, -1]) + int(side[-1, 0]) + int(side[-1, -1]) >= 3:
        side = ~side
    seed = np.unravel_index(np.argmax(np.where(side.ravel(), np.abs(x - x.mean()), -np.inf)), (h, w))
    components, _ = ndimage.label(side)
    return components == components[seed]


@dataclass
class MaskCutResult:
    """``masks`` (S, h, w) bool on the patch grid (a dropped object is an empty mask) and the cut vectors
    ``eigenvectors`` (S, h, w) of each step."""

    masks: np.ndarray
    eigenvectors: np.ndarray


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    union = np.logical_or(a, b).sum()
    return float(np.logical_and(a, b).sum() / union) if union else 1.0


def maskcut(features: np.ndarray | torch.Tensor, grid: tuple[int, int], num_objects: int = 3, tau: float = TAU,
            eps: float = EPS) -> MaskCutResult:
    """MaskCut on the patch features (N, D) of one image, N = h·w patches in row-major order (module docstring).

    Returns the masks (num_objects, h, w) of up to ``num_objects`` objects on the (h, w) patch grid, in the order
    they were cut; a dropped cut is an empty mask, and no patch is in two masks.
    """
    if isinstance(features, torch.Tensor):
        features = features.detach().to("cpu", torch.float64).numpy()
    features = np.array(features, dtype=np.float64)
    h, w = grid
    if features.ndim != 2 or features.shape[0] != h * w:
        raise ValueError(f"features: expected ({h * w}, D) features for a {h}×{w} grid, got shape {features.shape}")
    if isinstance(num_objects, bool) or not isinstance(num_objects, int) or num_objects < 1:
        raise ValueError(f"num_objects: expected a positive integer, got {num_objects!r}")
    found = np.zeros((h, w), dtype=bool)
    previous = found  # the previous cut as found (h, w), before earlier objects were removed from it
    masks, vectors = [], []
    for step in range(num_objects):
        features[found.ravel()] = 0.0
        x = ncut(patch_affinity(features, tau, eps))
        cut = bipartition(x, grid)
        if step and (_iou(cut, previous) > 0.5 or cut.mean() <= 0.01):
            cut = np.zeros_like(cut)
        previous = cut
        mask = cut & ~found
        found |= mask
        masks.append(mask)
        vectors.append(x.reshape(h, w))
    return MaskCutResult(np.stack(masks), np.stack(vectors))
