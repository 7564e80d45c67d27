"""An uncompressed model message (``mpisgd.wire``'s layout, docs/WIRE.md)
packed and unpacked in one pass each: a resolution sends and receives
several, and each NumPy step of them costs more than the pass itself at the
sizes they have."""

import numpy as np
from numba import njit

OK, BAD_SIZE, BAD_INDEX = 0, 1, 2  # unpack's status


@njit(cache=True)
def pack(alpha, bias, u, scale, n):
    """The message of w = α·r + scale·u with bias b: sparse float64 [α, b,
    scale·u_j for j in idx] then int32 [idx] (idx: the non-zeros of u, NaN
    included, increasing) when 12·nnz < 8·n, else dense float64 [α, b, scale·u]."""
    nnz = 0
    for j in range(n):
        if u[j] != 0.0:
            nnz += 1
    if 12 * nnz < 8 * n:
        buf = np.empty(16 + 12 * nnz, np.uint8)
        head = buf[: 16 + 8 * nnz].view(np.float64)
        idx = buf[16 + 8 * nnz :].view(np.int32)
        m = 0
        for j in range(n):
            if u[j] != 0.0:
                head[2 + m] = scale * u[j]
                idx[m] = j
                m += 1
    else:
        buf = np.empty(16 + 8 * n, np.uint8)
        head = buf.view(np.float64)
        for j in range(n):
            # a zero of u (−0.0 too) is sent as +0.0: the sparse form leaves it out
            head[2 + j] = scale * u[j] if u[j] != 0.0 else 0.0
    head[0] = alpha
    head[1] = bias
    return buf


@njit(cache=True)
def unpack(buf, n, z):
    """z ← the model [u, b, α] of message buf (z: length n + 2). Returns OK,
    BAD_SIZE (a length neither dense nor sparse for n), or BAD_INDEX (sparse
    indices outside [0, n) or not strictly increasing; z is then partial)."""
    size = buf.shape[0]
    if size == 16 + 8 * n:
        body = buf.view(np.float64)
        for j in range(n):
            z[j] = body[2 + j]
    elif size >= 16 and (size - 16) % 12 == 0 and size < 16 + 8 * n:
        nnz = (size - 16) // 12
        body = buf[: 16 + 8 * nnz].view(np.float64)
        idx = buf[16 + 8 * nnz :].view(np.int32)
        z[:n] = 0.0
        last = -1
        for m in range(nnz):
            j = idx[m]
            if j <= last or j >= n:
                return BAD_INDEX
            z[j] = body[2 + m]
            last = j
    else:
        return BAD_SIZE
    z[n] = body[1]
    z[n + 1] = body[0]
    return OK
