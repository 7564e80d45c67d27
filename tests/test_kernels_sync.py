"""The full sync's kernels (mpisgd/kernels/sync.py) against NumPy twins."""

import numpy as np
import pytest

from mpisgd.kernels import sync


def model(rng, k, n, density):
    """k learners' state: v sparse with NaN, inf and ±0 among its entries, s, b, α."""
    V = np.where(rng.random((k, n)) < density, rng.standard_normal((k, n)), 0.0)
    V[0, :3] = [np.nan, np.inf, -0.0]
    s, alpha, bias = rng.uniform(0.5, 2, k), rng.uniform(0.5, 2, k), rng.standard_normal(k)
    return V, s, alpha, bias


@pytest.mark.parametrize("density", [0.0, 0.05, 1.0])
def test_contributions_match_the_numpy_twin(density):
    rng = np.random.default_rng(1)
    k, n, r_bias = 4, 300, 0.25
    V, s, alpha, bias = model(rng, k, n, density)
    ids = np.array([2, 0], np.int64)
    out, nnz, scales = np.empty((2, n + 2)), np.empty(2, np.int64), np.empty((2, 3))
    with np.errstate(invalid="ignore"):
        sync.contributions(ids, alpha, s, V, bias, r_bias, out, nnz, scales)
        for i, l in enumerate(ids):
            u = s[l] * V[l]
            np.testing.assert_array_equal(out[i], np.concatenate([u, [bias[l], alpha[l]]]))
            assert nnz[i] == np.count_nonzero(V[l])
            top = np.max(np.abs(u[~np.isnan(u)]), initial=0.0)  # max() skips NaN, as the kernel's does
            assert scales[i].tolist() == [top, abs(bias[l] - r_bias), abs(alpha[l] - 1.0)]


def test_reference_from_sum_matches_the_numpy_twin():
    rng = np.random.default_rng(2)
    n, k = 500, 3
    r = rng.standard_normal(n)
    total = rng.standard_normal(n + 2)
    want = total[n + 1] / k * r + total[:n] / k
    sync.reference_from_sum(total, float(k), r)
    np.testing.assert_array_equal(r, want)


@pytest.mark.parametrize("density", [0.0, 0.01, 0.5, 1.0])
def test_pairs_of_matches_the_numpy_twin(density):
    rng = np.random.default_rng(3)
    n = 1000
    u = np.where(rng.random(n) < density, rng.standard_normal(n), 0.0)
    u[:4] = [-0.0, np.nan, np.inf, 0.0]
    want = np.flatnonzero(u)  # NaN and inf are non-zeros, −0 is not
    vals, idx = np.full(n, 7.0), np.full(n, -7, np.int32)
    c = sync.pairs_of(u, vals, idx)
    assert c == len(want)
    np.testing.assert_array_equal(idx[:c], want)
    np.testing.assert_array_equal(vals[:c], u[want])
    if c:  # one slot short: refused, not written past
        short, guard = np.zeros(c), np.zeros(c - 1, np.int32)
        assert sync.pairs_of(u, short, guard) == -1


def test_add_pairs_matches_the_numpy_twin_and_refuses_bad_indices():
    rng = np.random.default_rng(4)
    n = 50
    total = rng.standard_normal(n)
    idx = np.sort(rng.choice(n, 20, replace=False)).astype(np.int32)
    vals = rng.standard_normal(20)
    want = total.copy()
    want[idx] += vals
    assert sync.add_pairs(total, vals, idx, n)
    np.testing.assert_array_equal(total, want)
    for bad in ([3, 3], [4, 2], [-1, 2], [0, n]):
        assert not sync.add_pairs(np.zeros(n), np.ones(2), np.array(bad, np.int32), n)
    assert sync.add_pairs(np.zeros(n), np.zeros(0), np.zeros(0, np.int32), n)


@pytest.mark.parametrize("density", [0.0, 0.01, 0.3, 1.0])
@pytest.mark.parametrize("scale", [0.5, 1e-320, np.inf])
def test_gather_pairs_matches_the_numpy_twin(density, scale):
    rng = np.random.default_rng(5)
    n = 1003  # not a whole number of the kernel's blocks
    v = np.where(rng.random(n) < density, rng.standard_normal(n), 0.0)
    v[[0, 9, 17, 500, n - 1]] = [-0.0, np.nan, np.inf, 1e-300, 2.0]  # 1e-300·1e-320 underflows to 0
    with np.errstate(invalid="ignore", under="ignore", over="ignore"):
        u = scale * v
    want = np.flatnonzero(u)  # the pairs: non-zeros of u = scale·v (NaN is one, ±0 are not)
    vals, idx = np.full(n, 7.0), np.full(n, -7, np.int32)
    nnz, c = sync.gather_pairs(v, scale, vals, idx)
    assert nnz == np.count_nonzero(v)
    assert c == len(want)
    np.testing.assert_array_equal(idx[:c], want)
    np.testing.assert_array_equal(vals[:c], u[want])
