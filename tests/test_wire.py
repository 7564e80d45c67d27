"""Model messages: encode/decode round trips, the sparse/dense choice, and
sizes that match model_nbytes."""

import numpy as np
import pytest

from mpisgd import wire
from mpisgd.errors import MpisgdError


@pytest.mark.parametrize("n, nnz", [(10, 0), (10, 3), (10, 6), (10, 7), (10, 10), (1000, 17), (3, 3)])
def test_round_trip_and_size(n, nnz):
    rng = np.random.default_rng(n * 100 + nnz)
    idx = np.sort(rng.choice(n, size=nnz, replace=False)).astype(np.int32)
    vals = rng.normal(size=nnz)
    buf = wire.encode(0.75, -1.5, idx, vals, n)
    assert buf.dtype == np.uint8
    assert len(buf) == wire.model_nbytes(nnz, n)
    assert len(buf) == (16 + 12 * nnz if 12 * nnz < 8 * n else 16 + 8 * n)
    z = wire.decode(buf, n)
    expected = np.zeros(n + 2)
    expected[idx] = vals
    expected[n], expected[n + 1] = -1.5, 0.75
    np.testing.assert_array_equal(z, expected)


def test_wrong_length_is_refused():
    with pytest.raises(MpisgdError, match="n_features=10"):
        wire.decode(np.zeros(21, dtype=np.uint8), 10)


@pytest.mark.parametrize("idx", [[-1], [-2], [10], [11], [2**31 - 1], [3, 3], [5, 2]])
def test_sparse_indices_outside_u_or_out_of_order_are_refused(idx):
    """A negative index would land in the bias or scale slot of z, an index
    >= n in them or beyond: refused, as are repeats and disorder."""
    buf = wire.encode(1.0, 0.0, np.arange(len(idx), dtype=np.int32), np.ones(len(idx)), 10)
    buf[16 + 8 * len(idx):].view(np.int32)[:] = idx
    with pytest.raises(MpisgdError, match=r"indices outside \[0, 10\) or not strictly increasing"):
        wire.decode(buf, 10)
