"""MaskCut and the normalised cut: block affinities are cut exactly, objects living in their own subspace are found,
the cut does not depend on the eigenvector's sign, bad input is refused (the boxes of masks:
tests/data/test_objects_data.py)."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crate_nn.analysis import maskcut as maskcut_module
from crate_nn.analysis.maskcut import EPS, bipartition, maskcut, ncut, patch_affinity


def block_affinity(sizes, eps=EPS):
    labels = np.repeat(np.arange(len(sizes)), sizes)
    return np.where(labels[:, None] == labels[None, :], 1.0, eps), labels


@given(st.integers(2, 12), st.integers(2, 12), st.integers(0, 2**31 - 1))
def test_ncut_of_two_blocks_separates_them_exactly(n1, n2, seed):
    rng = np.random.default_rng(seed)
    w, labels = block_affinity([n1, n2])
    perm = rng.permutation(n1 + n2)
    w, labels = w[np.ix_(perm, perm)], labels[perm]
    x = ncut(w)
    side = x > x.mean()
    assert np.array_equal(side, labels == 0) or np.array_equal(side, labels == 1)
    # x is a generalised eigenvector of (D − W) x = λ D x, D-normalised, orthogonal to the constant vector in D
    d = w.sum(axis=1)
    lam = x @ (np.diag(d) - w) @ x
    np.testing.assert_allclose((np.diag(d) - w) @ x, lam * d * x, atol=1e-9)  # float64 eigensolver residual
    assert abs(x @ (d * x) - 1) < 1e-9 and abs(x @ d) < 1e-9


def test_ncut_matches_the_normalised_laplacian_reference():
    """The generalised problem equals the symmetric one D^{-1/2}(D − W)D^{-1/2} y = λ y with x = D^{-1/2} y."""
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 1, (15, 15))
    w = a + a.T
    d = w.sum(axis=1)
    values, vectors = np.linalg.eigh(np.diag(d**-0.5) @ (np.diag(d) - w) @ np.diag(d**-0.5))
    reference = vectors[:, 1] / np.sqrt(d)
    x = ncut(w)
    assert values[1] < values[2] - 1e-6  # a simple eigenvalue, so the vector is unique up to sign
    np.testing.assert_allclose(np.abs(x @ (d * reference)), 1.0, atol=1e-9)


def in_subspace(basis, count, rng):
    """``count`` points of the subspace spanned by ``basis`` (d, 4) with coefficients in [0.5, 1.5] (one orthant,
    so that points of one subspace have cosine similarity ≥ 0.5 with each other, above MaskCut's threshold)."""
    return rng.uniform(0.5, 1.5, (count, basis.shape[1])) @ basis.T


def subspace_features(object_mask, rng, d=24, noise=0.05):
    """Patch features: object patches in one random subspace, background patches in an orthogonal one."""
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    flat = object_mask.ravel()
    features = np.where(flat[:, None], in_subspace(q[:, :4], flat.size, rng), in_subspace(q[:, 4:8], flat.size, rng))
    return features + noise * rng.normal(size=features.shape)


@given(st.integers(0, 2**31 - 1), st.integers(2, 5), st.integers(2, 5))
def test_maskcut_finds_an_object_living_in_its_own_subspace(seed, height, width):
    rng = np.random.default_rng(seed)
    grid = (10, 12)
    top, left = rng.integers(0, grid[0] - height + 1), rng.integers(0, grid[1] - width + 1)
    obj = np.zeros(grid, dtype=bool)
    obj[top:top + height, left:left + width] = True
    result = maskcut(subspace_features(obj, rng), grid, num_objects=1)
    assert result.masks.shape == (1, *grid) and result.eigenvectors.shape == (1, *grid)
    assert np.array_equal(result.masks[0], obj)


def test_maskcut_masks_out_found_objects_and_finds_the_next():
    """Two objects in two more subspaces: the second cut, with the first object's features zeroed (the original
    MaskCut; the printed Algorithm 1 would keep the first object and cut inside it), finds the other object."""
    rng = np.random.default_rng(3)
    grid, d = (12, 12), 24
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    region = np.zeros(grid, dtype=int)
    region[1:5, 1:6] = 1
    region[7:11, 6:11] = 2
    features = np.concatenate([in_subspace(q[:, 4 * r:4 * r + 4], 1, rng) for r in region.ravel()])
    result = maskcut(features + 0.05 * rng.normal(size=features.shape), grid, num_objects=2)
    found = {tuple(m.ravel()) for m in result.masks}
    assert found == {tuple((region == 1).ravel()), tuple((region == 2).ravel())}
    assert not (result.masks[0] & result.masks[1]).any()


def scripted_cuts(monkeypatch, cuts):
    """Make maskcut's cuts the given (h, w) masks, in order, whatever the features (the drop rule in isolation)."""
    remaining = iter(cuts)
    monkeypatch.setattr(maskcut_module, "bipartition", lambda x, grid: next(remaining).copy())


def grid_mask(cells, grid=(4, 8)):
    mask = np.zeros(grid, dtype=bool)
    for r, c in cells:
        mask[r, c] = True
    return mask


# A 4×8 grid. The first cut a: rows 0–1, columns 0–3 (8 patches). The second cut b: 4 patches of a (row 1,
# columns 0–3) and 4 new ones (row 2, columns 0–3): IoU(b, a) = 4/12 ≤ 0.5, kept; its mask is b without a (row 2).
A = grid_mask([(r, c) for r in (0, 1) for c in range(4)])
B = grid_mask([(r, c) for r in (1, 2) for c in range(4)])
NEW = grid_mask([(3, 0), (3, 1)])


@pytest.mark.parametrize("third, kept", [
    # b plus 2 new patches: IoU with the cut b is 8/10 > 0.5, so MaskCut drops it; against b without a (4 patches)
    # it would be 4/10 and kept
    (B | NEW, False),
    # b's new row plus 2 new patches: IoU with the cut b is 4/10 ≤ 0.5, so MaskCut keeps it; against b without a
    # it would be 4/6 > 0.5 and dropped
    ((B & ~A) | NEW, True),
])
def test_a_cut_is_dropped_by_its_overlap_with_the_previous_cut_as_found(monkeypatch, third, kept):
    """MaskCut (CutLER's ``maskcut_forward``) compares a cut with the previous cut before the earlier objects were
    removed from it (``current_mask``), not with the previous returned mask."""
    scripted_cuts(monkeypatch, [A, B, third])
    masks = maskcut(np.random.default_rng(0).normal(size=(32, 5)), (4, 8), num_objects=3).masks
    assert np.array_equal(masks[0], A) and np.array_equal(masks[1], B & ~A)
    assert np.array_equal(masks[2], NEW if kept else np.zeros_like(A))


def test_after_a_dropped_cut_the_previous_cut_is_empty(monkeypatch):
    """As in MaskCut, a dropped cut becomes the empty ``current_mask``: the next cut, even one equal to the cut
    before the dropped one, has IoU 0 with it and is kept (less the patches already found)."""
    scripted_cuts(monkeypatch, [A, A, A | NEW])
    masks = maskcut(np.random.default_rng(0).normal(size=(32, 5)), (4, 8), num_objects=3).masks
    assert np.array_equal(masks[0], A) and not masks[1].any() and np.array_equal(masks[2], NEW)


@given(st.integers(0, 2**31 - 1))
def test_bipartition_does_not_depend_on_the_eigenvector_sign(seed):
    x = np.random.default_rng(seed).normal(size=30)
    assert np.array_equal(bipartition(x, (5, 6)), bipartition(-x, (5, 6)))


def test_bipartition_rules():
    # the seed (largest |x|) is on the upper side, which is one connected block away from the corners
    x = np.zeros((4, 5))
    x[1:3, 1:3] = 1.0
    x[1, 1] = 2.0
    assert np.array_equal(bipartition(x.ravel(), (4, 5)), x > 0)
    # a side holding three corners is background even when it holds the seed
    y = np.ones((4, 5))
    y[3, 4] = -2.5
    y[0, 0] = 3.0  # the seed, on the side x > mean(x) = 0.925 that holds three corners
    assert np.array_equal(bipartition(y.ravel(), (4, 5)), y < 0)
    # only the seed's 4-connected component is kept
    z = np.zeros((4, 5))
    z[0, 1], z[2, 3], z[3, 3] = 1.0, 2.0, 1.5
    expected = np.zeros((4, 5), dtype=bool)
    expected[2:, 3] = True
    assert np.array_equal(bipartition(z.ravel(), (4, 5)), expected)


def test_patch_affinity_is_maskcuts_binary_cosine_graph():
    f = np.array([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.0, 0.0]])
    w = patch_affinity(f, tau=0.2)
    expected = np.array([[1, 1, EPS, EPS], [1, 1, EPS, EPS], [EPS, EPS, 1, EPS], [EPS, EPS, EPS, EPS]])
    np.testing.assert_array_equal(w, expected)  # a zero feature has cosine 0 with everything, itself included


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="features"):
        maskcut(np.ones((10, 3)), (3, 4))
    with pytest.raises(ValueError, match="num_objects"):
        maskcut(np.ones((12, 3)), (3, 4), num_objects=0)
    with pytest.raises(ValueError, match="features: expected finite"):
        patch_affinity(np.full((4, 2), np.nan))
    with pytest.raises(ValueError, match="symmetric"):
        ncut(np.array([[1.0, 0.5], [0.2, 1.0]]))
    with pytest.raises(ValueError, match="positive degree"):
        ncut(np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]]))
