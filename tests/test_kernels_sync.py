"""The full sync's kernels (mpisgd/kernels/sync.py) against NumPy twins."""

import numpy as np
import pytest

from mpisgd import wire
from mpisgd.kernels import online, sync
from mpisgd.learners import OnlineLearners
from tests.naive import naive_gather, naive_partial_restart, naive_partial_support


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


@pytest.mark.parametrize("alphas", [[1.0, 1.0, 1.0], [0.5, 1.0, 0.9]])
@pytest.mark.parametrize("density", [0.0, 0.02, 1.0])  # U empty, sparse, everything
def test_reference_from_pairs_matches_the_numpy_twin(alphas, density):
    rng = np.random.default_rng(5)
    n, k = 400, len(alphas)
    us = [np.where(rng.random(n) < density, rng.standard_normal(n), 0.0) for _ in range(k)]
    m = max(1, max(np.count_nonzero(u) for u in us))
    blocks = np.concatenate([wire.encode_block(a, 0.5, u, m) for a, u in zip(alphas, us)])
    total = np.zeros(n + 2)
    counts = np.empty(k, np.int64)
    index = wire.add_blocks(blocks, n, m, total, counts)
    np.testing.assert_array_equal(total, wire.sum_blocks(blocks, n, m))
    for b in range(k):
        np.testing.assert_array_equal(index[b, : counts[b]], np.flatnonzero(us[b]))
    r = np.where(rng.random(n) < 0.5, rng.standard_normal(n), 0.0)
    dense = r.copy()
    sync.reference_from_sum(total.copy(), float(k), dense)  # the dense pass it stands for, bit for bit
    want = np.mean(alphas) * r + np.sum(us, axis=0) / k  # r ← ᾱ·r + ū
    sync.reference_from_pairs(total, float(k), r, index, counts)
    np.testing.assert_allclose(r, want, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(r.view(np.uint64), dense.view(np.uint64))
    assert not total.any()  # cleared for the next sum


def test_restart_at_matches_restart_where_v_is_zero_off_idx():
    rng = np.random.default_rng(6)
    n, k, J = 60, 1, 2
    for idx in (np.zeros(0, np.int32), np.sort(rng.choice(n, 9, replace=False)).astype(np.int32),
                np.arange(n, dtype=np.int32)):
        V = np.zeros((k, n))
        V[:, idx] = rng.standard_normal((k, len(idx)))
        state = [rng.standard_normal(k) for _ in range(5)] + [rng.standard_normal((k, J))]  # α, s, b, P, Q, PX
        alpha, s, bias, P, Q, PX = (x.copy() for x in state)
        T = np.full((k, (n + 63) // 64), 5, np.uint64)
        online.restart(0.3, alpha, s, V.copy(), T, bias, P, Q, PX)
        assert not T.any()  # nothing touched since
        got = [x.copy() for x in state]
        W = V.copy()
        T[:] = 5
        online.restart_at(idx, 0.3, got[0], got[1], W, T, got[2], got[3], got[4], got[5])
        assert not W.any() and not T.any()
        for a, b in zip(got, (alpha, s, bias, P, Q, PX)):
            np.testing.assert_array_equal(a, b)


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


def bits_of(coordinates, n):
    """The touched words (uint64, ⌈n/64⌉) whose set bits are ``coordinates``, as NumPy packs them."""
    flags = np.zeros(64 * ((n + 63) // 64), dtype=bool)
    flags[np.asarray(coordinates, dtype=np.int64)] = True
    return np.packbits(flags, bitorder="little").view(np.uint64)


@pytest.mark.parametrize("density", [0.0, 0.01, 0.3, 1.0])
@pytest.mark.parametrize("scale", [0.5, 1e-320])
def test_gather_listed_matches_gather_pairs_where_v_is_zero_off_the_list(density, scale):
    rng = np.random.default_rng(7)
    n = 1003  # the last word partly used
    v = np.where(rng.random(n) < density, rng.standard_normal(n), 0.0)
    v[[0, 9, 17, 500, 63, 64, n - 1]] = [-0.0, np.nan, np.inf, 1e-300, 2.0, 3.0, 4.0]
    # repeats, out of order, and coordinates where v is 0 (a step that cancelled): visited once, nothing sent
    listed = rng.permutation(np.concatenate([np.flatnonzero(v), np.flatnonzero(v), rng.choice(n, 30)]))
    bits = np.zeros((n + 63) // 64, np.uint64)
    nnz, idx, u = naive_gather(v, listed, scale)
    with np.errstate(invalid="ignore", under="ignore", over="ignore"):
        want = [np.full(n, 7.0), np.full(n, -7, np.int32)]
        got = [np.full(n, 7.0), np.full(n, -7, np.int32)]
        assert sync.gather_listed(v, listed.astype(np.int32), bits, scale, *got) == (nnz, len(idx))
        assert sync.gather_pairs(v, scale, *want) == (nnz, len(idx))
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[1][: len(idx)], idx)
    np.testing.assert_array_equal(got[0][: len(idx)], u)
    assert not bits.any()  # left clear for the next gather


@pytest.mark.parametrize("listed, scale", [(3, 0.5), (-1, 0.5), (3, np.inf)])
def test_gather_reads_the_list_where_it_is_kept_and_the_scale_finite(listed, scale):
    """``sync.gather``: the list's coordinates, or all n (a dropped list, or scale·0 not 0)."""
    n = 130
    V = np.zeros((2, n))
    V[1, [5, 64, 129]] = [1.0, -2.0, 3.0]
    T = np.zeros((2, 4), np.int32)
    T[1, :3] = [129, 5, 64]
    counts, s = np.array([0, listed]), np.array([1.0, scale])
    vals, idx = np.full(n, 7.0), np.full(n, -7, np.int32)
    with np.errstate(invalid="ignore"):
        nnz, want, u = naive_gather(V[1], T[1, :listed] if listed >= 0 and np.isfinite(scale) else None, scale)
    assert sync.gather(1, s, V, T, counts, np.zeros(3, np.uint64), vals, idx) == (nnz, len(want))
    np.testing.assert_array_equal(idx[: len(want)], want)
    np.testing.assert_array_equal(vals[: len(want)], u)


def listed_set(L, l):
    return set(L.T[l, : L.listed[l]].tolist()) if L.listed[l] >= 0 else None


def test_learning_lists_the_coordinates_it_steps_on():
    """T after steps: the coordinates of every row learned with a step since the restart, in
    order (a superset of v's non-zeros); set_models and a restored state list v's non-zeros;
    a list that outgrows T is dropped (−1), and a restart starts it again."""
    rng = np.random.default_rng(8)
    n, k, m = 200, 2, 12
    L = OnlineLearners(k, n, loss="log", eta0=0.1)  # every row makes a step
    rows = [np.sort(rng.choice(n, rng.integers(1, 6), replace=False)) for _ in range(m)]
    indptr = np.cumsum([0] + [len(r) for r in rows])
    indices = np.concatenate(rows).astype(np.int32)
    y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    owner = rng.integers(0, k, m)
    for l in range(k):
        L.set_models([l], np.eye(1, n + 2, 3 + l)[0] + np.eye(1, n + 2, n + 1)[0])
        assert L.listed[l] == 1 and L.T[l, 0] == 3 + l
    L.learn(indptr, indices, np.ones(len(indices)), y, owner)
    for l in range(k):
        stepped = [j for i in range(m) if owner[i] == l for j in rows[i]]
        np.testing.assert_array_equal(L.T[l, : L.listed[l]], [3 + l] + stepped)
    restored = OnlineLearners(k, n, loss="log", eta0=0.1)
    restored.load_state_dict(L.state_dict())
    for l in range(k):
        assert listed_set(restored, l) == set(np.flatnonzero(L.V[l]).tolist())
    every = np.arange(n, dtype=np.int32)  # n entries: more than T holds
    L.learn(np.array([0, n]), every, np.ones(n), np.ones(1), np.zeros(1, np.int64))
    assert L.listed[0] == -1 and listed_set(L, 1) is not None
    dense = np.ones(n + 2)
    L.set_models([1], dense)
    assert L.listed[1] == -1
    L.set_reference(L.mean_model())
    assert L.listed.tolist() == [0, 0]


# -- partial averaging (docs/ALGORITHMS.md §4.7) ----------------------------------


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.99, 1.000001, 2.0])  # off the rounding of ‖d‖² itself
def test_select_support_matches_the_numpy_twin(fraction):
    rng = np.random.default_rng(7)
    for trial in range(20):
        n = int(rng.integers(1, 400))
        d = np.where(rng.random(n) < 0.3, rng.standard_normal(n), 0.0)
        d[rng.random(n) < 0.05] = 0.5  # ties
        budget = fraction * float(d @ d)
        idx = np.full(n, -1, np.int32)
        m = sync.select_support(d, budget, idx)
        want = naive_partial_support(d, budget)
        np.testing.assert_array_equal(idx[:m], want)
        rest = np.delete(d, idx[:m])
        assert rest @ rest <= budget * (1 + 1e-12)
        sent = d[idx[:m]] ** 2
        assert m == 0 or (d @ d) - sent.sum() + sent.min() > budget  # the fewest: one less leaves too much


@pytest.mark.parametrize("spread", ["heavy", "one bucket", "ties"])
def test_select_support_matches_the_numpy_twin_on_a_long_d(spread):
    # thousands of non-zeros: many in the bucket where the kept sum crosses the budget
    rng = np.random.default_rng(9)
    n = 6000
    for fraction in (0.2, 0.7, 0.95):
        if spread == "heavy":
            d = rng.standard_t(2, n) * (rng.random(n) < 0.6)
        elif spread == "one bucket":
            d = (1.0 + 0.1 * rng.random(n)) * rng.choice([-1.0, 0.0, 1.0], n)
        else:
            d = rng.choice([-0.25, 0.0, 0.25, 3.0], n)
        budget = fraction * float(d @ d)
        idx = np.full(n, -1, np.int32)
        m = sync.select_support(d, budget, idx)
        np.testing.assert_array_equal(idx[:m], naive_partial_support(d, budget))


def test_select_support_sends_an_infinite_deviation():
    d = np.array([0.0, 0.5, np.inf, -0.25, 0.0])
    idx = np.full(5, -1, np.int32)
    m = sync.select_support(d, 1.0, idx)
    np.testing.assert_array_equal(idx[:m], naive_partial_support(d, 1.0))
    np.testing.assert_array_equal(idx[:m], [2])


def test_deviation_is_w_minus_r():
    rng = np.random.default_rng(8)
    r, v, d = rng.standard_normal(50), rng.standard_normal(50), np.empty(50)
    sync.deviation(0.7, 1.3, v, r, d)
    np.testing.assert_allclose(d, 0.7 * r + 1.3 * v - r, rtol=1e-15, atol=1e-15)


def trained(k, n, average, seed, lam=0.01):
    """k learners that took different steps from a shared non-zero reference (α ≠ 1 where λ > 0)."""
    L = OnlineLearners(k, n, loss="log", lam=lam, schedule="constant", eta0=0.5, average=average)
    rng = np.random.default_rng(seed)
    L.set_reference(np.concatenate([rng.standard_normal(n), [0.3, 1.0]]))
    rows = 40 * k
    nnz = 5
    indptr = np.arange(rows + 1) * nnz
    indices = np.sort(rng.integers(0, n, (rows, nnz)), axis=1).astype(np.int32).ravel()
    for row in indices.reshape(rows, nnz):  # distinct, increasing indices per row
        row[:] = np.sort(rng.choice(n, nnz, replace=False))
    L.learn(indptr, indices, rng.standard_normal(rows * nnz), rng.choice([-1.0, 1.0], rows),
            np.arange(rows, dtype=np.int64) % k)
    return L


def partial_sync(L, budget):
    """Every learner's S_l, their union S and the sum over it, as the simulator makes them."""
    k, n = L.k, L.n_features
    idx = np.empty((k, n), np.int32)
    counts = [L.partial_support(l, budget, idx[l]) for l in range(k)]
    support = np.unique(np.concatenate([idx[l, :c] for l, c in enumerate(counts)])).astype(np.int64)
    d = np.empty((k, len(support)))
    for l in range(k):
        L.deviation_on(l, support, d[l])
    L.set_partial_sum(support, np.append(d.sum(axis=0), L.bias.sum()), k)
    return support


@pytest.mark.parametrize("theta", [0.05, 0.3, 1.0])
@pytest.mark.parametrize("average", [False, True])
@pytest.mark.parametrize("lam", [0.01, 0.0])  # α ≠ 1: d dense; α = 1: d from the lists of touched coordinates
def test_partial_sync_keeps_the_mean_and_meets_the_condition(theta, average, lam):
    k, n = 3, 200
    L = trained(k, n, average, seed=int(theta * 100), lam=lam)
    W = np.array([L.weights(l)[0] for l in range(k)])
    b = L.bias.copy()
    r, r_b = L.reference
    averaged = [L.averaged_weights(l) for l in range(k)] if average else None
    delta = 0.5 * float(np.max(L.distances()))  # the farthest learner violates
    support = partial_sync(L, theta * delta)
    W2 = np.array([L.weights(l)[0] for l in range(k)])
    r2, r_b2 = L.reference
    assert 0 < len(support) < n
    np.testing.assert_allclose(W2.mean(axis=0), W.mean(axis=0), rtol=1e-12, atol=1e-12)  # mean kept everywhere
    off = np.setdiff1d(np.arange(n), support)
    np.testing.assert_allclose(W2[:, off], W[:, off], rtol=1e-12, atol=1e-14)  # off S every model stays
    np.testing.assert_array_equal(r2[off], r[off])  # and r
    np.testing.assert_allclose(W2[:, support], np.broadcast_to(W[:, support].mean(axis=0), (k, len(support))),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r2[support], W[:, support].mean(axis=0), rtol=1e-12, atol=1e-12)  # r_S ← the mean
    assert np.allclose(L.bias, b.mean()) and np.isclose(r_b2, b.mean())
    exact = ((W2 - r2) ** 2).sum(axis=1) + (L.bias - r_b2) ** 2
    assert np.all(exact <= theta * delta * (1 + 1e-9))  # the condition holds after the sync
    np.testing.assert_allclose(L.distances(), exact, rtol=1e-9, atol=1e-12)  # and the O(1) distances know it
    if average:  # ASGD: a sync moves the models, not the averages of the steps made before it
        for l in range(k):
            np.testing.assert_allclose(L.averaged_weights(l)[0], averaged[l][0], rtol=1e-12, atol=1e-12)


def listed_state(rng, k, n, width, alpha_one):
    """k learners' (V, α, s, r, T, listed): v sparse; learner l's list holds v_l's non-zeros, some
    twice, a coordinate where v_l is 0 and shuffled (as learning leaves it), or is dropped (−1)
    where it would outgrow the width; α = 1 for learner 0, and for all with alpha_one."""
    V = np.where(rng.random((k, n)) < 0.4, rng.standard_normal((k, n)), 0.0)
    alpha, s, r = rng.uniform(0.5, 1.5, k), rng.uniform(0.5, 2.0, k), rng.standard_normal(n)
    r[rng.random(n) < 0.3] = 0.0  # where α ≠ 1 and v = 0, u = (α − 1)·r is 0 only where r is
    alpha[0 if not alpha_one else slice(None)] = 1.0
    T, listed = np.full((k, width), -1, np.int32), np.zeros(k, np.int64)
    for l in range(k):
        nz = np.flatnonzero(V[l])
        touched = rng.permutation(np.concatenate([nz, nz[: len(nz) // 3], [int(rng.integers(n))]]))
        if len(touched) > width:
            listed[l] = -1
        else:
            V[l, touched[-1]] = 0.0 if rng.random() < 0.5 else V[l, touched[-1]]  # moved, and back to 0
            T[l, : len(touched)] = touched
            listed[l] = len(touched)
    return V, alpha, s, r, T, listed


@pytest.mark.parametrize("width", [0, 3, 50, 80])  # T's width: the list dropped at once, midway, or kept
@pytest.mark.parametrize("alpha_one", [False, True])  # learner 0 at α = s = 1, or every learner
def test_partial_restart_matches_the_numpy_twin(width, alpha_one):
    rng = np.random.default_rng(width + 100 * alpha_one)
    k, n = 3, 40
    V, alpha, s, r, T, listed = listed_state(rng, k, n, width, alpha_one)
    s[alpha == 1.0] = 1.0
    support = np.sort(rng.choice(n, 7, replace=False)).astype(np.int64)
    total = rng.standard_normal(7)
    U, r2, P2, Q2 = naive_partial_restart(alpha, s, V, r, support, total / 3.0)
    P, Q = V @ r, (V * V).sum(axis=1)  # at α = s = 1 only S's terms leave them
    kept = alpha == 1.0
    before = T.copy(), listed.copy()
    bias = np.zeros(k)
    online.partial_restart(support, total, 3.0, 0.25, alpha, s, V, T, listed, bias, P, Q, r)
    np.testing.assert_allclose(V, U, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(r, r2)
    np.testing.assert_allclose(P, P2, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Q, Q2, rtol=1e-12, atol=1e-12)
    assert np.all(alpha == 1.0) and np.all(s == 1.0) and np.all(bias == 0.25)
    for l in range(k):
        nonzero = np.flatnonzero(U[l])
        if kept[l]:  # its list as it was: still every non-zero of v
            assert listed[l] == before[1][l]
            np.testing.assert_array_equal(T[l], before[0][l])
            assert listed[l] == -1 or set(nonzero) <= set(T[l, : listed[l]])
        elif len(nonzero) > width:
            assert listed[l] == -1
        else:
            np.testing.assert_array_equal(T[l, : listed[l]], nonzero)


@pytest.mark.parametrize("width", [0, 80])  # the lists dropped (d in one pass over n), or kept
@pytest.mark.parametrize("alpha_one", [False, True])
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.9, 2.0])
def test_partial_support_matches_the_numpy_twin(width, alpha_one, fraction):
    rng = np.random.default_rng(width + 10 * alpha_one + int(100 * fraction))
    k, n = 3, 130
    V, alpha, s, r, T, listed = listed_state(rng, k, n, width, alpha_one)
    V[1, (V[1] != 0.0) & (rng.random(n) < 0.3)] = 0.5  # ties, where the list has them
    bits = np.zeros(3, np.uint64)
    vals, idx, pos = np.empty(n), np.full(n, -1, np.int32), np.empty(n, np.int64)
    for l in range(k):
        d = (alpha[l] - 1.0) * r + s[l] * V[l]
        budget = fraction * float(d @ d)
        m = sync.partial_support(l, alpha, s, V, T, listed, r, bits, budget, vals, idx, pos)
        np.testing.assert_array_equal(idx[:m], naive_partial_support(d, budget))
        assert not bits.any()
        support = rng.choice(n, 9, replace=False).astype(np.int64)
        out = np.empty(9)
        sync.deviation_at(alpha[l], s[l], V[l], r, support, out)
        np.testing.assert_array_equal(out, d[support])


def test_partial_sync_with_the_whole_budget_averages_nothing_but_the_bias():
    L = trained(2, 60, False, seed=3)
    W = np.array([L.weights(l)[0] for l in range(2)])
    support = partial_sync(L, float(np.max(L.distances())) + 1.0)
    assert len(support) == 0
    np.testing.assert_allclose(np.array([L.weights(l)[0] for l in range(2)]), W, rtol=1e-12, atol=1e-14)


# -- partial model messages: balancing (docs/ALGORITHMS.md §4.7) ---------------------------------


@pytest.mark.parametrize("compress", ["none", "q8"])
@pytest.mark.parametrize("theta", [0.1, 0.5])
def test_partial_balancing_keeps_the_mean_and_meets_each_members_condition(theta, compress):
    """Violators send their partial models, a fetched member its own on S_B and
    beyond; every member takes its own result, the balanced model on its S_l,
    through the wire (rank 0 its own exactly): the mean of all models is kept
    on every coordinate (q8: up to the results' rounding), off S_l nothing
    moves, and the coordinator's ‖w_l − r‖² of each member (``PartialBalance``)
    is the one it holds (uncompressed), as the NumPy twin makes it."""
    from mpisgd.protocol.coordinator import PartialBalance
    from tests.naive import naive_partial_balance

    k, n = 4, 200
    L = trained(k, n, False, seed=int(theta * 10))
    L.compress = compress
    W = np.array([L.weights(l)[0] for l in range(k)])
    b = L.bias.copy()
    r, r_b = L.reference
    budget = theta * float(np.max(L.distances()))
    violators, fetched = [0, 1], [2, 3]
    sent = [L.partial_message(l, budget)[1] for l in violators]
    balance = PartialBalance(sent)
    asked = balance.support()
    replies = [L.partial_message(l, budget, asked)[1] for l in fetched]
    balance.add(replies)
    parts = [*sent, *replies]
    steps = balance.farthest()  # the coordinator's largest ‖w_l − r‖² after the balancing
    request, held = next(steps), []
    try:
        while True:
            held.append(L.divergence(request[1]))
            request = steps.send(held[-1])
    except StopIteration as stop:
        farthest = stop.value
    method, ids, results = balance.result([*violators, *fetched], False)  # in the order they joined B
    assert method == "send_parts" and list(ids) == [0, 1, 2, 3]  # in increasing id, each its own part
    rounding = 0.0  # q8: the largest step of a result's levels
    for l, result in zip(ids, results, strict=True):
        np.testing.assert_array_equal(result.support, parts[l].support)
        z = result.z
        if l != 0:  # rank 0 takes its own exactly; the others decode their message on the S_l they sent
            buf = L.result_message(0, result)
            assert len(buf) == wire.result_nbytes(np.count_nonzero(result.support), compress)
            z = L.decode_result(buf, parts[l].support)
            rounding = max(rounding, np.max(np.abs(result.z[:n]), initial=0) / 127)
        L.take_part(l, z, parts[l])
    W2 = np.array([L.weights(l)[0] for l in range(k)])
    atol = 1e-12 if compress == "none" else rounding
    np.testing.assert_allclose(W2.mean(axis=0), W.mean(axis=0), rtol=1e-12, atol=atol)  # on every coordinate
    np.testing.assert_allclose(L.bias.mean(), b.mean(), rtol=1e-12)
    for l, part in enumerate(parts):
        np.testing.assert_array_equal(W2[l, ~part.support], W[l, ~part.support])  # off S_l nothing moves
        assert set(np.flatnonzero(parts[l].support)) >= (set(asked) if l in fetched else set())
    rhos = np.array([p.rho for p in parts])
    assert farthest == max(np.array(held) + rhos)
    if compress == "none":  # q8: each member also keeps its own rounding error on S_l (error feedback)
        np.testing.assert_allclose(L.distances(), np.array(held) + rhos, rtol=1e-9)  # exact, without the residuals
        W_twin, b_twin, dist_twin = naive_partial_balance(W, b, r, r_b, [set(), set(), set(asked), set(asked)],
                                                          budget)
        np.testing.assert_allclose(W2, W_twin, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(L.bias, b_twin, rtol=1e-12)
        np.testing.assert_allclose(L.distances(), dist_twin, rtol=1e-9)
        assert np.all(rhos <= budget * (1 + 1e-12))

