"""The order in which the epochs visit the rows (the kernels' ``order`` argument).

``"full"``   a fresh uniform permutation of the m rows every epoch. Every row
             is a jump to a random address: a cache and TLB miss per row, and
             the hardware prefetcher never gets going (4–6× a file-order epoch
             on RCV1-scale data).
``"block"``  locality-aware, copy-free. Every epoch cuts the rows into chunks
             of c consecutive rows at a random phase, permutes the chunks and
             visits them one after the other, each front to back, so the
             hardware prefetcher keeps up (c rows ≈ ``CHUNK_BYTES``, at most
             m / ``MIN_CHUNKS``): 1.05–1.25× file order's epoch. Interleaving
             the rows of 16 chunks round robin, measured, cost 1.4–1.8× (a jump
             per row instead of per chunk) and mixed no better in the median
             over seeds (the objective after 5 epochs on label-sorted data
             follows c, not the interleaving).
             Data of at most ``UNIFORM_BYTES`` get c = 1, i.e. the same uniform
             permutation as "full": they stay in cache, so the order costs
             little there, while chunks of neighbouring rows cost a file whose
             neighbours are alike (w8a) 7–15 % in objective
             (bench/order_quality.py).
``"none"``   file order.

All are deterministic given the random generator (a numpy RandomState).
"""

import numpy as np
from numba import njit

SHUFFLES = ("block", "full", "none")
CHUNK_BYTES = 1 << 15  # 32 KiB of CSR rows per chunk: 8 pages streamed per jump
MIN_CHUNKS = 4096  # a larger data set still gets at least this many chunks (its mixing)
UNIFORM_BYTES = 16 << 20  # c = 1 up to here: a permutation of cached rows is ≤ 3× file order


def chunk_rows(indptr, value_bytes=8):
    """Rows per chunk c for a CSR matrix: 1 if the rows take at most
    UNIFORM_BYTES, else about CHUNK_BYTES of indices, values, indptr and label,
    and no more than m / MIN_CHUNKS."""
    m = len(indptr) - 1
    nnz = int(indptr[-1] - indptr[0])
    total = nnz * (4 + value_bytes) + 16 * m  # 4-byte index + value per non-zero; indptr + label per row
    if total <= UNIFORM_BYTES:
        return 1
    return max(1, min(int(CHUNK_BYTES * m / total), m // MIN_CHUNKS))


@njit(cache=True, nogil=True)
def _chunks(m, chunk, phase, perm, out):
    """Fill ``out`` (m int64) with the rows of the chunks ``perm`` in turn, each
    front to back (chunk k covers rows [k·c − phase, (k + 1)·c − phase) ∩ [0, m))."""
    n = 0
    for k in range(perm.shape[0]):
        for j in range(chunk):
            r = perm[k] * chunk - phase + j
            if 0 <= r < m:  # the first and the last chunk are cut by [0, m)
                out[n] = r
                n += 1
    return n


def epoch_order(shuffle, m, rng, chunk=1):
    """Row indices (int64) of one epoch over m rows; ``chunk`` is c of "block"."""
    if shuffle == "none":
        return np.arange(m, dtype=np.int64)
    if shuffle == "full":
        return rng.permutation(m).astype(np.int64)
    phase = int(rng.randint(chunk))  # chunk boundaries move from epoch to epoch
    n_chunks = (m + phase + chunk - 1) // chunk
    perm = rng.permutation(n_chunks).astype(np.int64)
    out = np.empty(m, np.int64)
    _chunks(m, chunk, phase, perm, out)
    return out
