"""The order in which the epochs visit the rows (the kernels' ``order`` argument).

``"full"``   a fresh uniform permutation of the m rows every epoch. Every row
             is a jump to a random address: a cache and TLB miss per row, and
             the hardware prefetcher never gets going (4–6× a file-order epoch
             on RCV1-scale data).
``"block"``  locality-aware. Once per fit, the rows are copied in a uniformly
             random order (``shuffled_copy``); every epoch then cuts the copy
             into blocks of B consecutive rows at a random phase and visits the
             blocks in a fresh random order, each front to back, so memory is
             streamed as in file order (B rows ≈ ``BLOCK_BYTES``). Each epoch's
             order is, by itself, a uniform permutation of the original rows
             (a fixed block permutation of a uniformly shuffled copy); what the
             epochs share is that rows adjacent in the copy stay mostly adjacent.
``"none"``   file order.

All are deterministic given the random generator (a numpy RandomState).
"""

import numpy as np
from numba import njit

SHUFFLES = ("block", "full", "none")
BLOCK_BYTES = 1 << 17  # 128 KiB of CSR rows per block: the sequential reads dominate the jumps
MIN_BLOCKS = 1024  # a small data set still gets this many blocks


def block_rows(indptr, value_bytes=8):
    """Rows per block B for a CSR matrix: about BLOCK_BYTES of indices, values,
    indptr and label, and no more than m / MIN_BLOCKS."""
    m = len(indptr) - 1
    nnz = int(indptr[-1] - indptr[0])
    row_bytes = nnz * (4 + value_bytes) / max(m, 1) + 16
    return max(1, min(int(BLOCK_BYTES / row_bytes), m // MIN_BLOCKS))


def epoch_order(shuffle, m, rng, block=1):
    """Row indices (int64) of one epoch over m rows; ``block`` is B of "block"
    (whose rows are those of the shuffled copy)."""
    if shuffle == "none":
        return np.arange(m, dtype=np.int64)
    if shuffle == "full":
        return rng.permutation(m).astype(np.int64)
    # block k of the visit covers rows [starts[k], starts[k] + B) ∩ [0, m)
    phase = int(rng.randint(block))
    n_blocks = (m + phase + block - 1) // block
    starts = rng.permutation(n_blocks).astype(np.int64) * block - phase
    rows = (starts[:, None] + np.arange(block, dtype=np.int64)).ravel()
    return rows[(rows >= 0) & (rows < m)]


@njit(cache=True, nogil=True)
def _scatter(indptr, indices, data, y, dest, out_indptr, out_indices, out_data, out_y):
    """Row i of the input becomes row dest[i] of the output (whose indptr is
    given): the input is read in order, only the writes jump."""
    for i in range(dest.shape[0]):
        r = dest[i]
        o = out_indptr[r]
        for k in range(indptr[i], indptr[i + 1]):
            out_indices[o] = indices[k]
            out_data[o] = data[k]
            o += 1
        out_y[r] = y[i]


def shuffled_copy(indptr, indices, data, y, rng):
    """(indptr, indices, data), y of the rows in a uniformly random order:
    row r of the copy is row perm[r] of the input."""
    m = len(indptr) - 1
    perm = rng.permutation(m)
    dest = np.empty(m, np.int64)
    dest[perm] = np.arange(m)
    out_indptr = np.zeros(m + 1, np.int64)
    np.cumsum(np.diff(indptr)[perm], out=out_indptr[1:])
    nnz = int(out_indptr[-1])
    out = (out_indptr, np.empty(nnz, indices.dtype), np.empty(nnz, data.dtype))
    out_y = np.empty(m, y.dtype)
    _scatter(indptr, indices, data, y, dest, *out, out_y)
    return out, out_y
