"""What goes over the wire, and how many bytes it is.

Models travel in coordinates relative to the reference r that every learner
holds (docs/ALGORITHMS.md §5): a model is z = [u_0 … u_{n−1}, b, α] with
w = α·r + u and bias b. Between syncs u is non-zero only on the coordinates
touched since then, so a model message is

    sparse: float64 [α, b, u_j for j in idx] followed by int32 [idx]
            16 + 12·nnz bytes
    dense:  float64 [α, b, u_0 … u_{n−1}]
            16 + 8·n bytes

whichever is smaller (sparse when 12·nnz < 8·n), with idx strictly
increasing (as ``np.flatnonzero`` gives them). The receiver tells the two
apart by length alone, and refuses a message of any other length or with
indices outside [0, n) or out of order: a message never writes outside u. Control and request messages are one int64 (8
bytes). Both the MPI transport and the simulator take every size from here,
so their byte counts agree by construction; the MPI counters record the
buffers actually passed to MPI.

Categories of the byte and message counters.
"""

import numpy as np

from mpisgd.errors import MpisgdError

CATEGORIES = ("violation", "balance_request", "balance_reply", "balance_result", "full_sync", "control")
CONTROL_BYTES = 8  # one int64
PILOT_BYTES = 16  # --delta auto: one learner's pilot statistics (Σ, rows), two float64, in an Allgather


def model_nbytes(nnz, n):
    """Bytes of a model message with nnz non-zeros of u, n features."""
    return 16 + min(12 * nnz, 8 * n)


def dense_nbytes(n):
    """Bytes of a dense model vector z (Allreduce payload)."""
    return 8 * (n + 2)


def summary_nbytes(directions):
    """Bytes of an fda check's summary [‖w − r‖², ⟨w − r, ξ_1⟩ … ⟨w − r, ξ_J⟩] (float64, Allreduce)."""
    return 8 * (1 + directions)


def encode(alpha, bias, idx, vals, n):
    """Model message (uint8 buffer) for w = α·r + u, u given sparsely."""
    nnz = len(idx)
    if 12 * nnz < 8 * n:
        buf = np.empty(16 + 12 * nnz, dtype=np.uint8)
        head = buf[: 16 + 8 * nnz].view(np.float64)
        head[0], head[1] = alpha, bias
        head[2:] = vals
        buf[16 + 8 * nnz :].view(np.int32)[:] = idx
        return buf
    buf = np.zeros(16 + 8 * n, dtype=np.uint8)
    body = buf.view(np.float64)
    body[0], body[1] = alpha, bias
    body[2 + np.asarray(idx, dtype=np.int64)] = vals
    return buf


def decode(buf, n):
    """Model message (1-D uint8) -> dense z = [u, b, α] (length n + 2)."""
    if not (isinstance(buf, np.ndarray) and buf.dtype == np.uint8 and buf.ndim == 1):
        raise MpisgdError(f"wire: a model message is a 1-D uint8 buffer, not {type(buf).__name__} "
                          f"{getattr(buf, 'dtype', '')}{getattr(buf, 'shape', '')}")
    size = len(buf)
    z = np.zeros(n + 2, dtype=np.float64)
    if size == 16 + 8 * n:
        body = buf.view(np.float64)
        z[:n] = body[2:]
    elif size >= 16 and (size - 16) % 12 == 0 and size < 16 + 8 * n:
        nnz = (size - 16) // 12
        head = buf[: 16 + 8 * nnz].view(np.float64)
        idx = buf[16 + 8 * nnz :].view(np.int32)
        if nnz and (idx[0] < 0 or idx[-1] >= n or (nnz > 1 and np.any(idx[1:] <= idx[:-1]))):
            raise MpisgdError(f"wire: a sparse model message of {nnz} entries has indices outside "
                              f"[0, {n}) or not strictly increasing")
        z[idx] = head[2:]
        body = head
    else:
        raise MpisgdError(f"wire: a model message of {size} bytes does not fit n_features={n}")
    z[n], z[n + 1] = body[1], body[0]
    return z
