"""Row orders of the epochs (mpisgd.kernels.order) and their use by the estimator."""

import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd import SGDClassifier
from mpisgd.errors import MpisgdError
from mpisgd.kernels.order import BLOCK_BYTES, MIN_BLOCKS, block_rows, epoch_order, shuffled_copy


@pytest.mark.parametrize("mode", ["block", "full", "none"])
@pytest.mark.parametrize("m,block", [(1, 1), (7, 3), (100, 1), (100, 7), (100, 100), (5, 64)])
def test_every_order_is_a_permutation(mode, m, block):
    order = epoch_order(mode, m, np.random.RandomState(0), block)
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


def _block_phase(order, block):
    """The phase p such that ``order`` visits the blocks (row + p) // block one
    after another, each front to back; None if there is none."""
    for p in range(block):
        ids = (order + p) // block
        changes = np.flatnonzero(np.diff(ids)) + 1
        same_block = np.setdiff1d(np.arange(1, len(order)), changes)
        if len(changes) == len(np.unique(ids)) - 1 and \
                np.all(order[same_block] == order[same_block - 1] + 1):
            return p
    return None


def test_block_order_streams_blocks_of_consecutive_rows():
    m, block = 1000, 16
    rng = np.random.RandomState(1)
    phases = [_block_phase(epoch_order("block", m, rng, block), block) for _ in range(20)]
    assert None not in phases
    assert len(set(phases)) > 1  # the block boundaries move between epochs
    assert _block_phase(np.random.RandomState(0).permutation(m), block) is None


def test_block_rows_follows_the_bytes_and_the_minimum_block_count():
    m = 100 * MIN_BLOCKS
    dense_rows = np.arange(m + 1, dtype=np.int64) * 1000  # 12 kB per row
    assert block_rows(dense_rows) == int(BLOCK_BYTES / (1000 * 12 + 16))
    sparse_rows = np.arange(m + 1, dtype=np.int64)  # 28 bytes per row: capped by MIN_BLOCKS
    assert block_rows(sparse_rows) == m // MIN_BLOCKS
    assert block_rows(np.arange(5, dtype=np.int64)) == 1


def test_shuffled_copy_matches_scipy_row_indexing():
    X = sp.random(300, 40, density=0.1, format="csr", random_state=0)
    X.indptr = X.indptr.astype(np.int64)
    y = np.arange(300, dtype=np.float64)
    (indptr, indices, data), y2 = shuffled_copy(X.indptr, X.indices, X.data, y,
                                                np.random.RandomState(5))
    perm = np.random.RandomState(5).permutation(300)  # the twin: plain row indexing
    want = X[perm]
    assert np.array_equal(indptr, want.indptr)
    assert np.array_equal(indices, want.indices)
    assert np.array_equal(data, want.data)
    assert np.array_equal(y2, y[perm])


def _data():
    rng = np.random.default_rng(0)
    X = sp.random(2000, 50, density=0.2, format="csr", random_state=1)
    y = np.where(X @ rng.normal(size=50) > 0, 1, 0)
    return X, y


def test_estimator_shuffle_modes_and_aliases():
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


def test_estimator_block_learns_like_full():
    X, y = _data()
    errors = {mode: np.mean([1 - SGDClassifier(shuffle=mode, random_state=s).fit(X, y)
                             .score(X, y) for s in range(3)]) for mode in ("block", "full")}
    assert abs(errors["block"] - errors["full"]) < 0.02


@pytest.mark.parametrize("bad", ["blocks", "", None, 2.5])
def test_estimator_rejects_an_unknown_shuffle(bad):
    X, y = _data()
    with pytest.raises(MpisgdError, match="shuffle must be one of block, full, none"):
        SGDClassifier(shuffle=bad).fit(X, y)
