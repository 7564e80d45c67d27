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

import mmap

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

SHUFFLES = ("block", "full", "none")
BLOCK_BYTES = 1 << 17  # 128 KiB of CSR rows per block: the sequential reads dominate the jumps
MIN_BLOCKS = 1024  # a small data set still gets this many blocks
AHEAD = 16  # rows whose destinations the copy prefetches before writing them


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


@intrinsic
def _prefetch_write(typingctx, arr, idx):
    """A hint that arr[idx] will be written soon (LLVM's prefetch: write, keep
    in all cache levels); no effect on the results."""

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]],
                                       wraparound=False)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


@njit(cache=True, nogil=True)
def _scatter(indptr, indices, data, y, dest, out_indptr, out_indices, out_data, out_y):
    """Row i of the input becomes row dest[i] of the output (whose indptr is
    given): the input is read in order, only the writes jump. The cache lines
    of row i + AHEAD's destination are requested while row i is copied, so that
    the misses of many rows overlap instead of one row's at a time (1.8× on
    RCV1-scale data, bench/README.md)."""
    m = dest.shape[0]
    for i in range(m):
        if i + AHEAD < m:
            q = dest[i + AHEAD]
            for k in range(out_indptr[q], out_indptr[q + 1], 16):  # 64-byte lines
                _prefetch_write(out_indices, k)
            for k in range(out_indptr[q], out_indptr[q + 1], 8):
                _prefetch_write(out_data, k)
        r = dest[i]
        o = out_indptr[r]
        for k in range(indptr[i], indptr[i + 1]):
            out_indices[o] = indices[k]
            out_data[o] = data[k]
            o += 1
        out_y[r] = y[i]


def _populated(n, dtype):
    """An array of n elements in fresh memory whose pages are all faulted in at
    once (MAP_POPULATE) and stay 4 KiB pages: numpy's own allocation of the
    copy is advised for transparent huge pages, whose first touch cost 2.0–2.3 s
    of system time (compaction) per 686 MB on this VM against 0.36–0.51 s
    (bench/README.md, "Side by side")."""
    dtype = np.dtype(dtype)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    return np.frombuffer(mmap.mmap(-1, max(1, n * dtype.itemsize), flags=flags), dtype, n)


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
    out = (out_indptr, _populated(nnz, indices.dtype), _populated(nnz, data.dtype))
    out_y = np.empty(m, y.dtype)
    _scatter(indptr, indices, data, y, dest, *out, out_y)
    return out, out_y
