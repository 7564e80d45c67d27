"""Row orders of the epochs (mpisgd.kernels.order) and their use by the estimator."""

import numpy as np
import pytest
import scipy.sparse as sp

import mpisgd.kernels.order as order_mod
from mpisgd import SGDClassifier
from mpisgd.errors import MpisgdError
from mpisgd.kernels.order import CHUNK_BYTES, MIN_CHUNKS, UNIFORM_BYTES, _chunks, chunk_rows, epoch_order
from tests.naive import naive_sgd

CASES = [(1, 1), (7, 3), (100, 1), (100, 7), (100, 100), (5, 64), (1000, 13), (1000, 10)]  # (m, c)


@pytest.mark.parametrize("mode", ["block", "full", "none"])
@pytest.mark.parametrize("m,chunk", CASES)
def test_every_order_is_a_permutation(mode, m, chunk):
    rng = np.random.RandomState(0)
    for _ in range(3):  # every epoch's
        order = epoch_order(mode, m, rng, chunk)
        assert order.dtype == np.int64
        assert np.array_equal(np.sort(order), np.arange(m))


@pytest.mark.parametrize("mode", ["block", "full"])
def test_orders_are_deterministic_by_seed_and_vary_by_epoch(mode):
    a, b = np.random.RandomState(3), np.random.RandomState(3)
    first = [epoch_order(mode, 1000, a, 10) for _ in range(3)]
    again = [epoch_order(mode, 1000, b, 10) for _ in range(3)]
    for x, y in zip(first, again):
        assert np.array_equal(x, y)
    assert not np.array_equal(first[0], first[1])
    assert not np.array_equal(first[0], epoch_order(mode, 1000, np.random.RandomState(4), 10))


def twin(m, chunk, phase, perm):
    """The "block" order, obviously: chunk k's rows k·c − phase + j (j < c) as a
    row of a (chunks × c) table, read row by row, the rows outside [0, m) left out."""
    rows = (perm[:, None] * chunk - phase + np.arange(chunk)).ravel()
    return rows[(rows >= 0) & (rows < m)]


@pytest.mark.parametrize("m,chunk", CASES)
def test_block_order_matches_its_numpy_twin(m, chunk):
    rng = np.random.RandomState(5)
    for _ in range(3):
        state = rng.get_state()
        got = epoch_order("block", m, rng, chunk)
        rng.set_state(state)
        phase = int(rng.randint(chunk))  # the draws epoch_order makes, in its order
        perm = rng.permutation((m + phase + chunk - 1) // chunk).astype(np.int64)
        assert np.array_equal(got, twin(m, chunk, phase, perm))


def test_chunks_by_hand():
    # c = 3, phase 1: chunks 3, 0, 2, 1 hold rows 8 9 (10) | (−1) 0 1 | 5 6 7 | 2 3 4
    out = np.empty(10, np.int64)
    assert _chunks(10, 3, 1, np.array([3, 0, 2, 1], np.int64), out) == 10
    assert out.tolist() == [8, 9, 0, 1, 5, 6, 7, 2, 3, 4]


def _phase(order, chunk):
    """The phase p such that every chunk (row + p) // c is visited front to back
    (its rows in increasing order); None if there is none."""
    for p in range(chunk):
        ids = (order + p) // chunk
        last = {}
        if all(last.setdefault(k, r) <= r and not last.update({k: r}) for k, r in zip(ids, order)):
            return p
    return None


def test_each_chunk_is_read_front_to_back_and_chunk_boundaries_move():
    m, chunk = 10_000, 12
    rng = np.random.RandomState(1)
    phases = set()
    for _ in range(10):
        order = epoch_order("block", m, rng, chunk)
        p = _phase(order, chunk)
        assert p is not None
        phases.add(p)
        ids = (order + p) // chunk
        assert (np.diff(ids) != 0).sum() == len(np.unique(ids)) - 1  # each chunk in one run
        same = np.diff(ids) == 0
        assert (np.diff(order)[same] == 1).all()  # front to back
    assert len(phases) > 1  # the chunk boundaries move between epochs
    assert _phase(np.random.RandomState(0).permutation(m), chunk) is None


def test_one_row_chunks_are_the_full_shuffle():
    for seed in range(3):
        a, b = np.random.RandomState(seed), np.random.RandomState(seed)
        for _ in range(2):
            assert np.array_equal(epoch_order("block", 500, a, 1), epoch_order("full", 500, b))


def test_chunk_rows_follows_the_bytes_the_chunk_count_and_the_cache_rule():
    m = 100 * MIN_CHUNKS
    dense_rows = np.arange(m + 1, dtype=np.int64) * 1000  # 12,016 bytes per row, 4.9 GB
    assert chunk_rows(dense_rows) == int(CHUNK_BYTES / (1000 * 12 + 16))
    many = 2 * UNIFORM_BYTES // 28  # 33.5 MB
    sparse_rows = np.arange(many + 1, dtype=np.int64)  # 28 bytes per row: capped by MIN_CHUNKS
    assert chunk_rows(sparse_rows) == many // MIN_CHUNKS
    small = np.arange(UNIFORM_BYTES // 12_016 + 1, dtype=np.int64) * 1000  # ≤ UNIFORM_BYTES
    assert chunk_rows(small) == 1
    assert chunk_rows(np.arange(5, dtype=np.int64)) == 1


def _data(m=2000):
    rng = np.random.default_rng(0)
    X = sp.random(m, 50, density=0.2, format="csr", random_state=1)
    y = np.where(X @ rng.normal(size=50) > 0, 1, 0)
    return X, y


@pytest.fixture
def chunked(monkeypatch):
    """Chunks of more than one row on small data: no cache rule, 100 chunks at least."""
    monkeypatch.setattr(order_mod, "UNIFORM_BYTES", 0)
    monkeypatch.setattr(order_mod, "MIN_CHUNKS", 100)


def test_estimator_shuffle_modes_and_aliases(chunked):
    X, y = _data()
    fits = {mode: SGDClassifier(shuffle=mode, random_state=2).fit(X, y).coef_
            for mode in ("block", "full", "none", True, False)}
    assert np.array_equal(fits[True], fits["block"])
    assert np.array_equal(fits[False], fits["none"])
    assert not np.array_equal(fits["block"], fits["full"])
    again = SGDClassifier(shuffle="block", random_state=2).fit(X, y).coef_
    assert np.array_equal(again, fits["block"])
    other = SGDClassifier(shuffle="block", random_state=3).fit(X, y).coef_
    assert not np.array_equal(other, fits["block"])


def test_estimator_block_on_cached_data_is_the_full_shuffle():
    X, y = _data()
    block = SGDClassifier(shuffle="block", random_state=2).fit(X, y).coef_
    assert np.array_equal(block, SGDClassifier(shuffle="full", random_state=2).fit(X, y).coef_)


def test_estimator_block_fit_equals_the_naive_loop_over_its_orders(chunked):
    X, y = _data(600)
    m, epochs = X.shape[0], 3
    chunk = chunk_rows(X.indptr)
    assert chunk > 1
    clf = SGDClassifier(loss="hinge", alpha=0.01, algorithm="sgd", learning_rate="bottou", eta0=0.1,
                        bias_gain=1.0, max_iter=epochs, random_state=4).fit(X, y)
    rng = np.random.RandomState(4)  # the estimator's only draws: one order per epoch
    order = np.concatenate([epoch_order("block", m, rng, chunk) for _ in range(epochs)])
    w, b, *_ = naive_sgd(X.toarray(), np.where(y == 1, 1.0, -1.0), order, "hinge", 0.0, "bottou",
                         0.1, 0.01, 0.0, 0.5, 1.0, True, False, False, 0.0)
    np.testing.assert_allclose(clf.coef_[0], w, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(clf.intercept_[0], b, rtol=1e-9, atol=1e-12)


def test_estimator_block_learns_like_full(chunked):
    X, y = _data()
    errors = {mode: np.mean([1 - SGDClassifier(shuffle=mode, random_state=s).fit(X, y)
                             .score(X, y) for s in range(3)]) for mode in ("block", "full")}
    assert abs(errors["block"] - errors["full"]) < 0.02


@pytest.mark.parametrize("kind", ["sgd", "lasso"])
def test_partial_fit_makes_no_copy_of_x(chunked, monkeypatch, kind):
    """Every partial_fit call visits the caller's own arrays: the kernels get
    X's indices and values themselves, not a shuffled copy (issue 15 found the
    Lasso's partial_fit paying such a copy on every call)."""
    from mpisgd import SGDRegressor
    from mpisgd.kernels import lasso, sgd

    X, y = _data()
    X.indptr = X.indptr.astype(np.int64)  # the dtypes the kernels take: no conversion either
    module, name = (sgd, "sgd_epoch") if kind == "sgd" else (lasso, "lasso_epoch")
    seen = []
    kernel = getattr(module, name)

    def spy(indptr, indices, data, *rest):
        seen.append((np.shares_memory(indices, X.indices), np.shares_memory(data, X.data)))
        return kernel(indptr, indices, data, *rest)

    monkeypatch.setattr(module, name, spy)
    if kind == "sgd":
        est, kw = SGDClassifier(algorithm="sgd", eta0=0.1, random_state=0), {"classes": [0, 1]}
    else:
        est, kw = SGDRegressor(penalty="l1", algorithm="sgd", eta0=0.01, random_state=0), {}
    for _ in range(3):
        est.partial_fit(X, y.astype(np.float64), **kw)
    assert seen == [(True, True)] * 3


@pytest.mark.parametrize("bad", ["blocks", "", None, 2.5])
def test_estimator_rejects_an_unknown_shuffle(bad):
    X, y = _data()
    with pytest.raises(MpisgdError, match="shuffle must be one of block, full, none"):
        SGDClassifier(shuffle=bad).fit(X, y)
