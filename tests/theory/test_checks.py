"""Bad input raises ValueError/TypeError naming the argument and what was expected (crate_theory._checks and
every public function of part 1)."""
import numpy as np
import pytest

import crate_theory as ct
from crate_theory import _checks, synthetic

rng = np.random.default_rng(0)
Z = rng.standard_normal((6, 4))
U = synthetic.orthonormal_bases(2, 6, 3, seed=0)
D = rng.standard_normal((6, 6))
with_nan = Z.copy()
with_nan[1, 2] = np.nan
with_inf = Z.copy()
with_inf[0, 0] = -np.inf

CASES = [
    # (call, exception, pattern the message must contain)
    (lambda: ct.coding_rate(np.ones(5), 1.0), ValueError, r"Z must have at least 2 dimension"),
    (lambda: ct.coding_rate(Z, 0.0), ValueError, r"eps must be > 0"),
    (lambda: ct.coding_rate(Z, -1.0), ValueError, r"eps must be > 0"),
    (lambda: ct.coding_rate(Z, np.nan), ValueError, r"eps must be finite"),
    (lambda: ct.coding_rate(Z, "1"), TypeError, r"eps must be a real number"),
    (lambda: ct.coding_rate(Z, True), TypeError, r"eps must be a real number"),
    (lambda: ct.coding_rate(with_nan, 1.0), ValueError, r"Z must contain only finite values; found 1 NaN or Inf"),
    (lambda: ct.coding_rate_grad(with_inf, 1.0), ValueError, r"Z must contain only finite values"),
    (lambda: ct.coding_rate(Z.astype(complex), 1.0), TypeError, r"Z must be a real numeric array.*complex"),
    (lambda: ct.coding_rate(np.array([["a", "b"]]), 1.0), TypeError, r"Z must be a real numeric array"),
    (lambda: ct.coding_rate(Z > 0, 1.0), TypeError, r"Z must be a real numeric array.*bool"),
    (lambda: ct.coding_rate("Z", 1.0), TypeError, r"Z must be a real numeric array, got a str"),
    (lambda: ct.coding_rate([[1, 2], [3]], 1.0), TypeError, r"Z must be a real numeric array"),
    (lambda: ct.compression_rate(Z, U[:, :5], 1.0), ValueError, r"U has 5 rows \(d\) per basis.*expected 6"),
    (lambda: ct.compression_rate(Z, U[0], 1.0), ValueError, r"U must have 3 dimension\(s\) \(K, d, p\)"),
    (lambda: ct.compression_rate_grad(Z, U, -0.1), ValueError, r"eps must be > 0"),
    (lambda: ct.sparse_rate_reduction(Z, U, 1.0, 0.1, norm="l2"), ValueError, r"norm must be one of 'l1', 'l0'"),
    (lambda: ct.sparse_rate_reduction(Z, U, 1.0, -0.1), ValueError, r"lam must be >= 0"),
    (lambda: ct.label_compression_rate(Z, [0, 1, 2], 1.0), ValueError, r"labels has 3 entries.*expected 4"),
    (lambda: ct.label_compression_rate(Z, [0, 1, -1, 0], 1.0), ValueError, r"labels must be >= 0"),
    (lambda: ct.label_compression_rate(Z, [0.5, 1, 1, 0], 1.0), TypeError, r"labels must be an integer array"),
    (lambda: ct.label_compression_rate(Z, [0, 1, 1, 0], 1.0, weighting="x"), ValueError, r"weighting must be one of"),
    (lambda: ct.coding_rate_hvp(Z, Z[:, :3], 1.0), ValueError, r"V must have the shape of Z"),
    (lambda: ct.ssa(Z, U[0][:4], 1.0), ValueError, r"Uk has 4 rows \(d\)"),
    (lambda: ct.mssa(Z, U, 1.0, temperature=0), ValueError, r"temperature must be > 0"),
    (lambda: ct.mssa_free(Z, U, np.ones((6, 5))), ValueError, r"W must have shape \(d, K\*p\) = \(6, 6\)"),
    (lambda: ct.mssa_free(Z, U, np.ones((6, 6)), b=np.ones(4)), ValueError, r"b has 4 entries"),
    (lambda: ct.compression_step(Z, U, 1.0, 0.1, method="adam"), ValueError, r"method must be one of"),
    (lambda: ct.compression_step(Z, U, 1.0, 0.0), ValueError, r"kappa must be > 0"),
    (lambda: ct.ista(Z, rng.standard_normal((6, 5))), ValueError, r"D must be square"),
    (lambda: ct.ista(Z, rng.standard_normal((5, 5))), ValueError, r"D has 5 rows"),
    (lambda: ct.ista(Z, D, eta=-1), ValueError, r"eta must be > 0"),
    (lambda: ct.ista(Z, D, lam=-1), ValueError, r"lam must be >= 0"),
    (lambda: ct.lasso_objective(Z, D, Z[:5], 0.1), ValueError, r"Z has 5 rows \(must equal D's number of atoms"),
    (lambda: ct.lasso_objective(Z, D, Z[:, :3], 0.1), ValueError, r"Z has 3 columns"),
    (lambda: ct.ista_solve(Z, D, 0.1, max_iter=0), ValueError, r"max_iter must be >= 1"),
    (lambda: ct.ista_solve(Z, D, 0.1, max_iter=2.5), TypeError, r"max_iter must be an integer"),
    (lambda: ct.nonneg_lasso_reference(np.stack([Z, Z]), D, 0.1), ValueError, r"X must have 2 dimension"),
    (lambda: ct.mm_step(Z, None, 1.0, 0.1, form="open"), ValueError, r"form must be one of"),
    (lambda: ct.mm_majorizer(Z, Z[:, :2], 1.0), ValueError, r"Z0 must have the shape of Z"),
    (lambda: ct.mm_majorizer(Z, Z, 1.0, L=0), ValueError, r"L must be > 0"),
    (lambda: ct.layer_norm(Z, eps=0), ValueError, r"eps must be > 0"),
    (lambda: synthetic.orthonormal_bases(2, 6, 0), ValueError, r"p must be >= 1"),
    (lambda: synthetic.sample_tokens(U, 5, sigma=-1), ValueError, r"sigma must be >= 0"),
    (lambda: synthetic.sample_tokens(U, 5, noise="pink"), ValueError, r"noise must be one of"),
    (lambda: synthetic.sample_tokens(2 * U, 5), ValueError, r"U must have orthonormal columns"),
    (lambda: synthetic.memberships(5, 2, probs=[0.5, 0.6]), ValueError, r"probs must be 2 non-negative numbers"),
    (lambda: synthetic.gaussian_codes(3, -1), ValueError, r"n must be >= 0"),
]


@pytest.mark.parametrize("call, exc, pattern", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_bad_input_raises_named_error(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


def test_checks_helpers_convert_and_accept_good_input():
    """The shared helpers return float64 arrays / Python floats and accept integer input and NumPy scalars."""
    arr = _checks.as_float_array([[1, 2], [3, 4]], "A", ndim=2)
    assert arr.dtype == np.float64 and arr.shape == (2, 2)
    assert _checks.check_positive(np.float32(0.5), "eps") == 0.5
    assert _checks.check_positive(np.array(2), "eps") == 2.0
    assert _checks.check_nonnegative(0, "lam") == 0.0
    assert _checks.check_int(np.int64(3), "n") == 3
    assert _checks.check_bases(U, 6, orthonormal=True).shape == (2, 6, 3)
    assert _checks.check_labels(np.array([0.0, 2.0]), 2).dtype == np.int64
    assert _checks.check_choice("a", "x", ("a", "b")) == "a"
    with pytest.raises(ValueError, match="A must have 1 or 3 dimension"):
        _checks.as_float_array(arr, "A", ndim=(1, 3))
    np.testing.assert_array_equal(_checks.as_float_array([np.inf], "A", finite=False), [np.inf])


def test_integer_input_is_accepted_as_float():
    """Integer token matrices are valid numeric input (converted to float64), not an error."""
    Zi = np.arange(12).reshape(3, 4)
    assert ct.coding_rate(Zi, 1) == pytest.approx(ct.coding_rate(Zi.astype(float), 1.0), rel=1e-15)
