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
indices outside [0, n) or out of order: a message never writes outside u.
Control and request messages are one int64 (8 bytes), but for DIST (two,
``DIST_BYTES``) and the default mode's relayed FULLSYNC (below, "Relays"); a
default-mode result carries its relay's trailer after the model message.
Both the MPI transport and the simulator take every size from here, so their
byte counts agree by construction; the MPI counters record the buffers
actually passed to MPI.

Categories of the byte and message counters.
"""

import functools
from typing import NamedTuple

import numpy as np

from mpisgd.errors import MpisgdError
from mpisgd.kernels import message, sync

CATEGORIES = ("violation", "balance_request", "balance_reply", "balance_result", "full_sync", "control")
CONTROL_BYTES = 8  # one int64
DIST_BYTES = 16  # COMMAND DIST: the code and the results rank 0 has sent the rank (it answers once it has them all)
PILOT_BYTES = 24  # --delta auto: one learner's pilot statistics (Σ, rows, non-zeros), three float64, in an Allgather
BUDGET_BYTES = 24  # --budget: one rank's (bytes sent, rounds done, non-zeros learned), three float64, in an Allreduce
# An uncompressed full sync probes for a sparse exchange only when its dense sum is larger than this: below
# it the sum is latency-bound (α/β ≈ 12 KB on the 10gbe and ib100 presets, docs/NETWORK.md), so the
# probe's extra collective would cost more than any bytes the pairs could save.
SYNC_PROBE_MIN_BYTES = 8192


def model_nbytes(nnz, n, compress="none"):
    """Bytes of a model message with nnz non-zeros of u, n features (vectorized over nnz)."""
    if compress != "none":
        return compressed_nbytes(nnz, n, compress)
    return 16 + np.minimum(12 * np.asarray(nnz), 8 * n)


def dense_nbytes(n):
    """Bytes of a dense model vector z (Allreduce payload)."""
    return 8 * (n + 2)


def summary_nbytes(directions):
    """Bytes of an fda check's summary [‖w − r‖², ⟨w − r, ξ_1⟩ … ⟨w − r, ξ_J⟩] (float64, Allreduce)."""
    return 8 * (1 + directions)


def encode(alpha, bias, u, scale, n):
    """Model message (uint8 buffer) for w = α·r + scale·u (u dense, length n):
    its non-zeros sparsely, or u densely, whichever is smaller."""
    return message.pack(float(alpha), float(bias), np.ascontiguousarray(u, dtype=np.float64), float(scale), int(n))


def decode(buf, n):
    """Model message (1-D uint8) -> dense z = [u, b, α] (length n + 2)."""
    _check_buffer(buf)
    z = np.empty(n + 2, dtype=np.float64)
    status = message.unpack(np.ascontiguousarray(buf), int(n), z)
    if status == message.BAD_SIZE:
        raise MpisgdError(f"wire: a model message of {len(buf)} bytes does not fit n_features={n}")
    if status == message.BAD_INDEX:
        raise MpisgdError(f"wire: a sparse model message of {(len(buf) - 16) // 12} entries has indices "
                          f"outside [0, {n}) or not strictly increasing")
    return z


# -- compressed model messages (--compress) ---------------------------------------------
#
# A compressed model message quantizes u and keeps α and b exact:
#
#     header: float64 α, float64 b, float32 c, int32 m              24 bytes
#     m ≥ 0:  int32 idx[m] (strictly increasing) then m values       24 + (4 + w)·m
#     m = −1: n values (dense)                                       24 + w·n
#     m = −2: a bitmask of ⌈n/8⌉ bytes (bit i of byte j: u_{8j+i}), 24 + ⌈n/8⌉ + w·nnz
#             then one value per set bit, in order
#
# whichever is smallest (ties: list, mask, dense). Values are u_i/c with
# c = max|u_i| (rounded up to float32), as float16 (w = 2, "fp16") or as an
# int8 level q_i ∈ [−127, 127] of u_i = c·q_i/127 (w = 1, "q8"); both by
# unbiased stochastic rounding between the two neighbours x⁻ ≤ x ≤ x⁺ of
# x = u_i/c: x⁺ with probability (x − x⁻)/(x⁺ − x⁻), so E[Q(u)] = u
# (docs/ALGORITHMS.md §6). The uniform draws come from ``uniforms``: a
# counter-based hash of (sender, that sender's message number), so a rank
# and the simulator draw the same numbers for the same message.

COMPRESSIONS = ("none", "fp16", "q8")
_WIDTH = {"fp16": 2, "q8": 1}  # bytes per value
_Q8 = 127  # int8 levels of a q8 message value
HEAD = 24


def check_compress(compress):
    if compress not in COMPRESSIONS:
        raise MpisgdError(f"compress: unknown {compress!r}; choose one of {', '.join(COMPRESSIONS)}")
    return compress


def _layout(nnz, n, compress):
    """(m, body bytes) of the smallest layout for nnz non-zeros: m ≥ 0 list, −2 mask, −1 dense."""
    w = _WIDTH[compress]
    sizes = ((nnz, (4 + w) * nnz), (-2, (n + 7) // 8 + w * nnz), (-1, w * n))
    return min(sizes, key=lambda s: s[1])  # min keeps the first of equals


def compressed_nbytes(nnz, n, compress):
    """Bytes of a compressed model message (vectorized over nnz)."""
    w = _WIDTH[compress]
    nnz = np.asarray(nnz)
    return HEAD + np.minimum(np.minimum((4 + w) * nnz, (n + 7) // 8 + w * nnz), w * n)


_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x):
    """splitmix64's finalizer (uint64 arrays, wrapping arithmetic)."""
    x = (x + np.uint64(0x9E3779B97F4A7C15)) & _M64
    x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M64
    x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M64
    return x ^ (x >> np.uint64(31))


def uniforms(senders, counters, size):
    """U[0, 1) draws of shape (len(senders), size): row i for message
    counters[i] of learner senders[i], draw j = splitmix64(key_i + j)."""
    senders = np.atleast_1d(np.asarray(senders, dtype=np.int64)).astype(np.uint64)
    counters = np.atleast_1d(np.asarray(counters, dtype=np.int64)).astype(np.uint64)
    with np.errstate(over="ignore"):
        key = _mix(_mix(senders) ^ counters)
        draws = _mix(key[:, None] + np.arange(size, dtype=np.uint64)[None, :])
    return (draws >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _scale(u):
    """c = max|u| rounded up to float32 (so that |u_i|/c ≤ 1)."""
    c = float(np.max(np.abs(u))) if len(u) else 0.0
    c32 = np.float32(c)
    if not np.isfinite(c32):
        raise MpisgdError(f"wire: cannot compress a model with |u_i| = {c!r} (beyond float32)")
    if float(c32) < c:
        c32 = np.nextafter(c32, np.float32(np.inf))
    return c32


def quantize(x, uniform, compress):
    """Stochastic rounding of x ∈ [−1, 1] (an array) to the values of a
    message: float16 or q8 levels (int8), E[decoded] = x."""
    if compress == "q8":
        y = x * _Q8
        lo = np.floor(y)
        return (lo + (uniform < y - lo)).astype(np.int8)
    near = x.astype(np.float16)
    other = np.nextafter(near, np.where(near > x, -np.inf, np.inf).astype(np.float16))
    lo, hi = np.minimum(near, other).astype(np.float64), np.maximum(near, other).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        up = uniform < (x - lo) / (hi - lo)
    return np.where(near == x, near, np.where(up, hi, lo).astype(np.float16))


def _values(raw, compress):
    """Decoded x = u/c of message values (raw bytes)."""
    if compress == "q8":
        return raw.view(np.int8).astype(np.float64) / _Q8
    return raw.view(np.float16).astype(np.float64)


def encode_compressed(alpha, bias, idx, vals, n, compress, uniform):
    """Compressed model message (uint8) for w = α·r + u, u given sparsely;
    ``uniform``: at least len(idx) U[0, 1) draws (``uniforms``)."""
    idx = np.asarray(idx, dtype=np.int32)
    vals = np.asarray(vals, dtype=np.float64)
    nnz = len(idx)
    c = _scale(vals)
    q = quantize(vals / c if c > 0 else vals, np.asarray(uniform[:nnz]), compress)
    m, body = _layout(nnz, n, compress)
    buf = np.zeros(HEAD + body, dtype=np.uint8)
    buf[:16].view(np.float64)[:] = alpha, bias
    buf[16:20].view(np.float32)[0] = c
    buf[20:24].view(np.int32)[0] = m
    raw = q.view(np.uint8)
    if m >= 0:
        buf[HEAD : HEAD + 4 * nnz].view(np.int32)[:] = idx
        buf[HEAD + 4 * nnz :] = raw
    elif m == -2:
        mask = np.zeros(8 * ((n + 7) // 8), dtype=np.uint8)
        mask[idx] = 1
        buf[HEAD : HEAD + (n + 7) // 8] = np.packbits(mask, bitorder="little")
        buf[HEAD + (n + 7) // 8 :] = raw
    else:
        dense = np.zeros(n, dtype=q.dtype)
        dense[idx] = q
        buf[HEAD:] = dense.view(np.uint8)
    return buf


def decode_compressed(buf, n, compress):
    """Compressed model message (1-D uint8) -> dense z = [u, b, α]."""
    _check_buffer(buf)
    w, size = _WIDTH[compress], len(buf)
    if size < HEAD:
        raise MpisgdError(f"wire: a {compress} model message of {size} bytes is shorter than its header")
    alpha, bias = buf[:16].view(np.float64)
    c = float(buf[16:20].view(np.float32)[0])
    m = int(buf[20:24].view(np.int32)[0])
    if not (np.isfinite(c) and c >= 0):
        raise MpisgdError(f"wire: a {compress} model message has scale {c!r}, not finite and >= 0")
    z = np.zeros(n + 2, dtype=np.float64)
    body = buf[HEAD:]
    mask_bytes = (n + 7) // 8
    if m >= 0 and size == HEAD + (4 + w) * m:
        idx = body[: 4 * m].view(np.int32)
        if m and (idx[0] < 0 or idx[-1] >= n or (m > 1 and np.any(idx[1:] <= idx[:-1]))):
            raise MpisgdError(f"wire: a sparse model message of {m} entries has indices outside "
                              f"[0, {n}) or not strictly increasing")
        z[idx] = c * _values(body[4 * m :], compress)
    elif m == -2 and size >= HEAD + mask_bytes and (size - HEAD - mask_bytes) % w == 0:
        bits = np.unpackbits(body[:mask_bytes], bitorder="little")
        if bits[n:].any() or int(bits.sum()) * w != size - HEAD - mask_bytes:
            raise MpisgdError(f"wire: a bitmask model message's mask does not fit n_features={n} "
                              f"and its {size - HEAD - mask_bytes} bytes of values")
        z[np.flatnonzero(bits)] = c * _values(body[mask_bytes:], compress)
    elif m == -1 and size == HEAD + w * n:
        z[:n] = c * _values(body, compress)
    else:
        raise MpisgdError(f"wire: a {compress} model message of {size} bytes with layout {m} does not "
                          f"fit n_features={n}")
    z[n], z[n + 1] = bias, alpha
    return z


# -- full syncs ----------------------------------------------------------------------------
#
# A full sync sums every learner's z = [u, b, α] (relative to r) in one of two ways, decided
# identically on every rank from n, k, the setting and, when it is needed, a *probe*: an
# Allreduce(MAX) of float64 [nnz_l] (uncompressed) or [nnz_l, c_u, c_b, c_α] (compressed;
# the shared scales of u, b − r_b and α − 1):
#
# - pairs: an Allgather of one block per rank, float64 [α, b, nnz_l], float64 u_j[m],
#   int32 j[m] (padded to m = max_l nnz_l), 24 + 12·m bytes sent and k times that
#   received; every rank sums the blocks in rank order: exact;
# - dense: an Allreduce(SUM) of the dense z, float64 (8·(n + 2) bytes, exact), or, with
#   compression, of integer levels q = SR(L·x/c) ∈ [−L, L] of x ∈ [u, b − r_b, α − 1] (each
#   x by its own shared scale c), summed without overflow (k·L within the type): q8 in int16
#   with L = min(127, ⌊32767/k⌋) (int32 and L = 127 when that falls below 8, k > 4095), fp16
#   in int32 with L = min(32767, ⌊(2³¹ − 1)/k⌋). Unbiased: E[c·Σq/L] = Σx.
#
# The probe is made only when it can pay: with compression (the scales are needed), or when
# pairs of empty models, k·24 bytes, are smaller than the dense sum. Pairs are chosen when
# k·(24 + 12·m) < the dense sum's bytes.

def sync_format(k, compress):
    """(integer type, levels L) of a compressed dense sum of k learners."""
    if compress == "q8":
        levels = min(_Q8, 32767 // k)
        return (np.int16, levels) if levels >= 8 else (np.int32, _Q8)
    return np.int32, min(32767, (2**31 - 1) // k)


def sync_dtype(k, compress):
    return sync_format(k, compress)[0]


def sync_dense_nbytes(n, k, compress):
    """Bytes of the dense sum (each rank sends and receives them)."""
    return dense_nbytes(n) if compress == "none" else (n + 2) * np.dtype(sync_dtype(k, compress)).itemsize


def sync_probe_size(n, k, compress):
    """float64 entries of the probe, 0 when there is none."""
    if compress != "none":
        return 4
    return 1 if 24 * k < dense_nbytes(n) and dense_nbytes(n) > SYNC_PROBE_MIN_BYTES else 0


def sync_block_nbytes(m):
    """Bytes of one rank's pairs block for m = max nnz."""
    return 24 + 12 * m


def sync_pairs(n, k, compress, m):
    """Whether the pairs exchange (m = max nnz, from the probe) is the smaller."""
    return k * sync_block_nbytes(m) < sync_dense_nbytes(n, k, compress)


def sync_nbytes(n, k, m):
    """Bytes one rank sends in an uncompressed full sync of k ranks whose
    largest z holds m non-zeros: the probe, then its pairs block or the dense sum."""
    probe = sync_probe_size(n, k, "none")
    if probe and sync_pairs(n, k, "none", m):
        return 8 * probe + sync_block_nbytes(m)
    return 8 * probe + dense_nbytes(n)


def encode_block(alpha, bias, u, m):
    """One rank's pairs block (uint8, ``sync_block_nbytes(m)``) of the
    non-zeros of u (at most m of them), gathered in one pass."""
    buf = np.zeros(sync_block_nbytes(m), dtype=np.uint8)
    head = buf[: 24 + 8 * m].view(np.float64)
    nnz = sync.pairs_of(np.asarray(u, dtype=np.float64), head[3:], buf[24 + 8 * m :].view(np.int32))
    if nnz < 0:
        raise MpisgdError(f"wire: a pairs block holds at most m = {m} non-zeros; u has more")
    head[0], head[1], head[2] = alpha, bias, nnz
    return buf


def fill_block(buf, alpha, bias, vals, idx, m):
    """``encode_block`` of pairs already gathered (vals, idx: at most m of
    them) into buf, uint8 of ``sync_block_nbytes(m)`` bytes from the start of
    a buffer kept from sync to sync (8-aligned, as numpy allocates); the
    padding is zeroed."""
    c = len(vals)
    if c > m:
        raise MpisgdError(f"wire: a pairs block holds at most m = {m} non-zeros; u has {c}")
    sync.fill_block(buf, alpha, bias, vals, idx, m)
    return buf


def sum_blocks(blocks, n, m, total=None):
    """Σ z of the k pairs blocks (uint8, k·``sync_block_nbytes(m)``), in order,
    into ``total`` (n + 2 zeros; a new array if None); refuses counts beyond m
    and indices outside [0, n) or out of order."""
    if total is None:
        total = np.zeros(n + 2, dtype=np.float64)
    add_blocks(blocks, n, m, total, np.empty(len(blocks) // sync_block_nbytes(m), np.int64))
    return total


def add_blocks(blocks, n, m, total, counts):
    """``sum_blocks`` into ``total``, in one pass; returns the blocks' indices,
    index (k, m) int32, a view: block b's are index[b, :counts[b]] (counts (k,)
    int64, a buffer kept from sync to sync)."""
    size = sync_block_nbytes(m)
    if blocks.ndim != 1 or len(blocks) % size:
        raise MpisgdError(f"wire: {len(blocks)} bytes are not whole pairs blocks of {size} bytes")
    k = len(blocks) // size
    heads = np.ndarray((k, 3 + m), np.float64, blocks, 0, (size, 8))  # unaligned in every other block if m is odd
    index = np.ndarray((k, m), np.int32, blocks, 24 + 8 * m, (size, 4))
    if not sync.add_blocks(heads, index, n, total, counts):
        raise MpisgdError(f"wire: a pairs block of a full sync has a count outside [0, {m}] or "
                          f"indices outside [0, {n}) or not strictly increasing")
    return index


# Partial averaging (--partial θ, docs/ALGORITHMS.md §4.7, docs/WIRE.md "Partial syncs"): after
# the probe of m = max |S_l|, each rank's S_l as one index block int32 [|S_l|, j …] padded to m
# entries (Allgather), then the sum of [(w_l − r)_S, b_l] over the union S (Allreduce). When the
# index blocks alone would outweigh the dense sum the sync is a full one (dense Allreduce).

def index_block_nbytes(m):
    """Bytes of one rank's index block for m = max |S_l|."""
    return 4 * (m + 1)


def partial_pays(n, k, m):
    """Whether the partial exchange (m = max |S_l|, from the probe) is made, not a dense full sync."""
    return k * index_block_nbytes(m) < dense_nbytes(n)


def fill_index_block(buf, idx, m):
    """One rank's index block (int32, m + 1 entries: a view of a kept buffer)
    of S_l = idx (at most m indices, increasing); the padding is zeroed."""
    c = len(idx)
    if c > m:
        raise MpisgdError(f"wire: an index block holds at most m = {m} indices; S_l has {c}")
    buf[0] = c
    buf[1 : 1 + c] = idx
    buf[1 + c :] = 0
    return buf


def union_of_blocks(blocks, n, m):
    """S = ∪ S_l of the k index blocks (int32, k·(m + 1)), increasing; refuses
    a count outside [0, m] and indices outside [0, n) or not strictly increasing."""
    size = m + 1
    if blocks.ndim != 1 or blocks.dtype != np.int32 or len(blocks) % size:
        raise MpisgdError(f"wire: {blocks.nbytes} bytes are not whole index blocks of {4 * size} bytes")
    out = np.empty(min(n, len(blocks)), dtype=np.int64)
    c = sync.union_of_index_blocks(blocks, m, n, np.zeros((n + 63) // 64, dtype=np.uint64), out)
    if c < 0:
        raise MpisgdError(f"wire: an index block of a partial sync has a count outside [0, {m}] or "
                          f"indices outside [0, {n}) or not strictly increasing")
    return out[:c]


# Partial model messages (--partial θ, docs/ALGORITHMS.md §4.7, docs/WIRE.md "Partial model
# messages"): a violation or balance reply carries d_l = w_l − r on S_l only, the coordinates its
# sender chose (and, in a reply, those rank 0 asked for), zeros included: the model message (plain
# or compressed) of [d_l on S_l, b_l, α = 1] whose index list (or mask) is exactly S_l, then
# float64 ρ_l = Σ_{j∉S_l} d_lj², the divergence its sender keeps off S_l. A balance request
# asking for S_B is int64 [results sent] then int32 S_B.

PARTIAL_TRAILER = 8  # float64 ρ


class Part(NamedTuple):
    """A partial model: z = [u, b, 1] (u = d_l on S_l, 0 elsewhere), ρ_l, and S_l (a mask of n)."""

    z: np.ndarray
    rho: float
    support: np.ndarray


def stored(model):
    """A model as a checkpoint stores it: z, or a ``Part`` as float64 [z, ρ, S_l as 0/1] (2n + 3)."""
    if isinstance(model, Part):
        return np.concatenate([model.z, [model.rho], model.support.astype(np.float64)])
    return np.asarray(model, dtype=np.float64)


def restored(array, n):
    """``stored``'s inverse for n features: a ``Part`` from 2n + 3 entries, else z."""
    if len(array) == 2 * n + 3:
        return Part(np.array(array[: n + 2]), float(array[n + 2]), np.asarray(array[n + 3 :]) != 0)
    return np.array(array)


def partial_nbytes(count, n, compress="none"):
    """Bytes of a partial model message of |S_l| = count (vectorized over count)."""
    return model_nbytes(count, n, compress) + PARTIAL_TRAILER


def encode_partial(bias, idx, vals, rho, n, compress, uniform=None):
    """The partial model message of d_S = vals on S = idx (increasing, zeros
    kept), bias b and ρ; ``uniform``: draws for a compressed one (``uniforms``)."""
    idx = np.asarray(idx, dtype=np.int32)
    vals = np.asarray(vals, dtype=np.float64)
    if compress != "none":
        model = encode_compressed(1.0, bias, idx, vals, n, compress, uniform)
    elif 12 * len(idx) < 8 * n:  # sparse: float64 [1, b, vals] then int32 idx
        model = np.concatenate([np.concatenate([[1.0, bias], vals]).view(np.uint8), idx.view(np.uint8)])
    else:  # dense: float64 [1, b, u]
        u = np.zeros(n + 2)
        u[0], u[1] = 1.0, bias
        u[2 + idx] = vals
        model = u.view(np.uint8)
    return np.concatenate([model, np.array([rho], dtype=np.float64).view(np.uint8)])


def decode_partial(buf, n, compress="none"):
    """Partial model message (1-D uint8) -> ``Part``; refuses a message too
    short for ρ, a ρ that is not finite and ≥ 0, an α other than 1, and
    whatever the model message's decoder refuses."""
    _check_buffer(buf)
    if len(buf) < PARTIAL_TRAILER:
        raise MpisgdError(f"wire: a partial model message of {len(buf)} bytes is shorter than its ρ")
    rho = float(np.frombuffer(buf[-PARTIAL_TRAILER:].tobytes(), dtype=np.float64)[0])
    if not (np.isfinite(rho) and rho >= 0):
        raise MpisgdError(f"wire: a partial model message has ρ = {rho!r}, not finite and >= 0")
    model = np.ascontiguousarray(buf[:-PARTIAL_TRAILER])
    z = decode(model, n) if compress == "none" else decode_compressed(model, n, compress)
    if z[n + 1] != 1.0:
        raise MpisgdError(f"wire: a partial model message has α = {z[n + 1]!r}, not 1")
    support = np.zeros(n, dtype=np.bool_)  # S_l: the layout's index list, mask, or every j (dense)
    if compress == "none":
        count = (len(model) - 16) // 12
        dense = len(model) == 16 + 8 * n
        listed = None if dense else np.frombuffer(model[16 + 8 * count :].tobytes(), dtype=np.int32)
    else:
        m = int(model[20:24].view(np.int32)[0])
        dense = m == -1
        if m == -2:
            listed = np.flatnonzero(np.unpackbits(model[HEAD : HEAD + (n + 7) // 8], bitorder="little")[:n])
        else:
            listed = None if dense else np.frombuffer(model[HEAD : HEAD + 4 * m].tobytes(), dtype=np.int32)
    support[slice(None) if dense else listed] = True
    return Part(z, rho, support)


# A partial balance result (docs/WIRE.md "Partial model messages") goes to one member, which takes
# it on its own S_l only and knows S_l (the part it sent), so it carries no indices: the balanced
# values on S_l in increasing j, and the mean bias b̄,
#
#     plain:      float64 [b̄, m_j for j ∈ S_l]                             8 + 8·|S_l|
#     compressed: float64 b̄, float32 c, then one value a coordinate       12 + w·|S_l|
#
# the values quantized as in a compressed model message (c = max |m_j| over S_l).

RESULT_HEAD = 12  # compressed: float64 b̄, float32 c


def result_nbytes(count, compress="none"):
    """Bytes of a partial balance result to a member of |S_l| = count (vectorized over count)."""
    count = np.asarray(count)
    return 8 + 8 * count if compress == "none" else RESULT_HEAD + _WIDTH[compress] * count


def encode_result(bias, vals, compress, uniform=None):
    """The partial balance result of b̄ = bias and the balanced values ``vals``
    on its receiver's S_l; ``uniform``: draws for a compressed one (``uniforms``)."""
    vals = np.asarray(vals, dtype=np.float64)
    if compress == "none":
        return np.concatenate([[float(bias)], vals]).view(np.uint8)
    c = _scale(vals)
    q = quantize(vals / c if c > 0 else vals, np.asarray(uniform[: len(vals)]), compress)
    buf = np.empty(RESULT_HEAD + q.nbytes, dtype=np.uint8)
    buf[:8].view(np.float64)[0] = bias
    buf[8:12].view(np.float32)[0] = c
    buf[RESULT_HEAD:] = q.view(np.uint8)
    return buf


def decode_result(buf, support, n, compress="none"):
    """A partial balance result (1-D uint8) for the member whose S_l is
    ``support`` (a mask of n) -> z = [m on S_l, 0 elsewhere, b̄, 1]; refuses a
    length other than ``result_nbytes(|S_l|)`` and a scale not finite and ≥ 0."""
    _check_buffer(buf)
    idx = np.flatnonzero(support)
    if len(buf) != result_nbytes(len(idx), compress):
        raise MpisgdError(f"wire: a partial balance result of {len(buf)} bytes does not fit its receiver's "
                          f"{len(idx)} coordinates ({compress}: {int(result_nbytes(len(idx), compress))} bytes)")
    z = np.zeros(n + 2)
    z[n], z[n + 1] = buf[:8].view(np.float64)[0], 1.0
    if compress == "none":
        z[idx] = buf[8:].view(np.float64)
        return z
    c = float(buf[8:12].view(np.float32)[0])
    if not (np.isfinite(c) and c >= 0):
        raise MpisgdError(f"wire: a {compress} partial balance result has scale {c!r}, not finite and >= 0")
    z[idx] = c * _values(buf[RESULT_HEAD:], compress)
    return z


def request_nbytes(count):
    """Bytes of a balance request asking for |S_B| = count coordinates (none: 8)."""
    return CONTROL_BYTES + 4 * count


def encode_request(results, support=None):
    """A balance request: int64 [the results sent to its receiver], then, with
    --partial, int32 S_B (increasing): the coordinates its reply must carry."""
    head = np.array([results], dtype=np.int64).view(np.uint8)
    if support is None:
        return head
    return np.concatenate([head, np.asarray(support, dtype=np.int32).view(np.uint8)])


def decode_request(buf, n):
    """A balance request -> (results sent, S_B as int32, empty when none);
    refuses a length that is not 8 + 4·count and indices outside [0, n) or
    not strictly increasing."""
    _check_buffer(buf)
    if len(buf) < CONTROL_BYTES or (len(buf) - CONTROL_BYTES) % 4:
        raise MpisgdError(f"wire: a balance request of {len(buf)} bytes is not int64 then int32 indices")
    results = int(np.frombuffer(buf[:CONTROL_BYTES].tobytes(), dtype=np.int64)[0])
    support = np.frombuffer(buf[CONTROL_BYTES:].tobytes(), dtype=np.int32)
    steps = np.diff(support.astype(np.int64))  # in int32 a step past 2³¹ would wrap to a positive one
    if len(support) and (support[0] < 0 or support[-1] >= n or np.any(steps <= 0)):
        raise MpisgdError(f"wire: a balance request asks for indices outside [0, {n}) or not strictly increasing")
    return results, support


def sync_levels_of(x, c, k, uniform, compress):
    """Integer levels q = SR(L·x/c) of one learner's x (an (…, n + 2) array of
    [u, b − r_b, α − 1]) with shared scales c = [c_u, c_b, c_α], as int64."""
    L = sync_format(k, compress)[1]
    n = x.shape[-1] - 2
    scale = np.empty(x.shape[-1])
    scale[:n], scale[n], scale[n + 1] = c[0], c[1], c[2]
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(scale > 0, x * L / scale, 0.0)
    lo = np.floor(y)
    return (lo + (uniform < y - lo)).astype(np.int64)


def sync_unlevel(total, c, k, r_bias, compress):
    """Σz = [Σu, Σb, Σα] from the summed levels (their inverse)."""
    L = sync_format(k, compress)[1]
    n = len(total) - 2
    out = np.empty(n + 2)
    out[:n] = total[:n] * (c[0] / L)
    out[n] = total[n] * (c[1] / L) + k * r_bias
    out[n + 1] = total[n + 1] * (c[2] / L) + k
    return out


def _check_buffer(buf):
    if not (isinstance(buf, np.ndarray) and buf.dtype == np.uint8 and buf.ndim == 1):
        raise MpisgdError(f"wire: a model message is a 1-D uint8 buffer, not {type(buf).__name__} "
                          f"{getattr(buf, 'dtype', '')}{getattr(buf, 'shape', '')}")


# Relays (the default mode, docs/WIRE.md "Relays"). Rank 0 sends a result to a
# set of more than RELAY_ABOVE members, or a full sync's command to more than
# RELAY_ABOVE followers, to the first only; every member hands it on to at most
# two more, in heap order over the set's ranks m_0 < m_1 < … (m_p to m_{2p+1}
# and m_{2p+2}), so that rank 0 sends one message and the last of m members has
# it after ⌈log2(m + 1)⌉ hops. A message carries what its receiver's subtree
# needs: a result the subtree's ranks, int32 [ranks…, count] after the model
# message (int32 [-1] when the set is every rank but 0: its heap is implicit,
# rank j to 2j and 2j + 1); FULLSYNC one bit per rank of the subtree, the parity
# of the results rank 0 has sent it. A smaller set gets its result from rank 0
# directly, each member's carrying [itself, 1], and a command to at most
# RELAY_ABOVE followers is the plain int64.
EVERYONE = -1
# Sets of at most this many members are sent to directly: on the 10gbe and ib100 presets
# (o = α) m direct sends reach the last member after (m + 1)·α, a relay after about
# 3·α·log2(m + 1), so direct is as fast up to m = 8; and each hop also waits for the
# relaying rank's next poll, which the network model does not hold (docs/WIRE.md, "Relays").
RELAY_ABOVE = 8


def relayed(m):
    """Whether a message to m members (of a set, or every follower) is relayed."""
    return m > RELAY_ABOVE


@functools.lru_cache(maxsize=64)
def _subtree_sizes(m):
    size = np.ones(m, np.int64)
    for p in range(m - 1, 0, -1):
        size[(p - 1) // 2] += size[p]
    size.flags.writeable = False
    return size


def relay_subtree(m, p):
    """Positions of position p's subtree in a heap of m positions: p's
    descendants level by level, which is increasing and is itself in heap order."""
    levels, lo, width = [], p, 1
    while lo < m:
        levels.append(np.arange(lo, min(lo + width, m)))
        lo, width = 2 * lo + 1, 2 * width
    return np.concatenate(levels)


def relay_parents(m):
    """The position each of m positions gets the message from (-1: rank 0)."""
    return (np.arange(m) - 1) // 2


def _relay_children(m, p):
    """The positions position p hands the message on to, in a heap of m."""
    return [c for c in (2 * p + 1, 2 * p + 2) if c < m]


def _everyone_children(rank, k):
    """The ranks ``rank`` hands on to when the set is every rank but 0 (rank j at position j − 1)."""
    return [c + 1 for c in _relay_children(k - 1, rank - 1)]


def relay_trailer(ranks, k):
    """The trailer of a result to ranks[0], whose subtree is ``ranks`` (increasing)."""
    if len(ranks) == k - 1 and relayed(len(ranks)):
        return np.array([EVERYONE], dtype=np.int32).view(np.uint8)
    return np.concatenate([np.asarray(ranks, np.int32), np.array([len(ranks)], np.int32)]).view(np.uint8)


def relay_result_nbytes(message_nbytes, m, k):
    """Bytes of each of the m messages that bring a result of ``message_nbytes``
    to m of k ranks (in heap order when relayed)."""
    if not relayed(m):
        return np.full(m, message_nbytes + 8, np.int64)
    if m == k - 1:
        return np.full(m, message_nbytes + 4, np.int64)
    return message_nbytes + 4 * (_subtree_sizes(m) + 1)


def relay_result(buf, rank, k):
    """A relayed result as ``rank`` receives it: (model message, [(child,
    message to it), …]). Refuses a trailer that does not fit the buffer or is
    not an increasing list of ranks in [1, k) starting with ``rank``."""
    _check_buffer(buf)
    if len(buf) < 4:
        raise MpisgdError(f"relayed result: {len(buf)} bytes, too short for its set")
    m = int(buf[-4:].view(np.int32)[0])
    if m == EVERYONE:
        return buf[:-4], [(c, buf) for c in _everyone_children(rank, k)]
    if not 1 <= m < k or len(buf) < 4 * (m + 1):
        raise MpisgdError(f"relayed result: a set of {m} members does not fit {len(buf)} bytes at {k} ranks")
    ranks = buf[-4 * (m + 1):-4].view(np.int32)
    # increasing from rank (so its last is its largest); one rank alone, the common set, is increasing
    if ranks[0] != rank or ranks[-1] >= k or (m > 1 and np.any(ranks[1:] <= ranks[:-1])):
        raise MpisgdError(f"relayed result at rank {rank}: its set {ranks.tolist()} is not increasing ranks "
                          f"in [1, {k}) from {rank}")
    message = buf[:-4 * (m + 1)]
    return message, [(int(ranks[c]), np.concatenate([message, relay_trailer(ranks[relay_subtree(m, c)], k)]))
                     for c in _relay_children(m, 0)]  # the receiver is its subtree's position 0


def fullsync_command(head, parity):
    """The default mode's FULLSYNC to rank 1: int64 ``head`` and the parity of
    the results sent to each rank 1 … k−1 (``parity``, 0/1 by rank, rank 0's ignored)."""
    return np.concatenate([np.array([head], np.int64).view(np.uint8),
                           np.packbits(np.asarray(parity[1:], np.uint8), bitorder="little")])


def fullsync_nbytes(k):
    """Bytes of each FULLSYNC message to ranks 1 … k−1 (relayed: rank j's carries its subtree's bits)."""
    if not relayed(k - 1):
        return np.full(k - 1, CONTROL_BYTES, np.int64)
    return 8 + (_subtree_sizes(k - 1) + 7) // 8


def fullsync_forward(buf, rank, k):
    """FULLSYNC as ``rank`` receives it: (its own parity bit, [(child, message
    to it), …]), the bits of each child's subtree cut out of its own."""
    mine = 1 + relay_subtree(k - 1, rank - 1)  # the ranks of this subtree, increasing
    if len(buf) != 8 + (len(mine) + 7) // 8:
        raise MpisgdError(f"FULLSYNC at rank {rank}: {len(buf)} bytes, not those of its {len(mine)} ranks' bits")
    bits = np.unpackbits(buf[8:], count=len(mine), bitorder="little")
    out = []
    for child in _everyone_children(rank, k):
        theirs = np.searchsorted(mine, 1 + relay_subtree(k - 1, child - 1))
        out.append((child, np.concatenate([buf[:8], np.packbits(bits[theirs], bitorder="little")])))
    return int(bits[0]), out


# -- tags, commands and a check point's messages, as data ------------------------------------
#
# The MPI transport sends what these define and the simulator counts it from the same
# definitions (docs/WIRE.md): the tags of the messages, the command codes, and for each mode
# the messages a step of a check point makes (``SEQUENCE``).

# Tags of docs/WIRE.md.
VIOLATION, REQUEST, REPLY, BALANCED, NEWREF, COMMAND = 1, 2, 3, 4, 5, 6
# Async mode: a violation carries the number of sync results its sender had
# received, as tag VIOLATION_ASYNC + epoch mod EPOCHS, so that rank 0 can
# drop a violation overtaken by a resolution that already included the sender
# (and take a current one as the reply to a fetch that crossed it).
VIOLATION_ASYNC, EPOCHS = 1000, 16384
# Commands (one int64, tag COMMAND). Async checkpoints: CUT (rank 0 → all: agree
# on the round of a consistent cut), STOP (a follower → rank 0: it was signalled).
DIST, FULLSYNC, END, DONE, FINISH, CUT, STOP = 1, 2, 3, 4, 5, 6, 7
DISTANCE = 7  # tag of a DIST reply (float64)

ROUTES = ("up", "down", "everyone", "relay", "allreduce")


def _payload(payload, m, k):
    return payload


def _control(payload, m, k):
    return CONTROL_BYTES


def _relayed_result(payload, m, k):
    return relay_result_nbytes(payload, m, k)


def _named_alone(payload, m, k):
    return np.asarray(payload) + 8  # its relay trailer names its receiver alone: int32 [rank, 1]


def _relayed_command(payload, m, k):
    return fullsync_nbytes(k)


class Message:
    """One message of a check point: its category (of the counters), its
    route (up: learners → rank 0; down: rank 0 → some learners; everyone:
    rank 0 → every other rank; relay: rank 0 → learners, in heap order above
    RELAY_ABOVE of them; allreduce: every rank), its tag, its command code
    (COMMAND messages) and ``nbytes(payload, m, k)``: the bytes of each of
    the messages to m of k ranks carrying ``payload`` bytes."""

    def __init__(self, category, route, tag, code=None, nbytes=_payload):
        assert category in CATEGORIES and route in ROUTES
        self.category, self.route, self.tag, self.code, self.nbytes = category, route, tag, code, nbytes


# What each step of a check point sends, by mode (None: nothing):
#   count             the agreement on the number of violators at a check
#   empty_violation   a violation where violations carry no model (every resolution a full sync)
#   end               the end of a resolution that the followers served
#   balance_result    a balancing set's model to its members
#   partial_result    --partial: a balancing set's result to one member, its own (never relayed)
#   fullsync_command  a resolution's full sync announced to the followers
SEQUENCE = {
    "sync": {  # every check agreed on by a nonblocking Allreduce; the followers serve a resolution until END
        "count": Message("control", "allreduce", None, nbytes=_control),
        "empty_violation": None,  # the count tells every rank
        "end": Message("control", "everyone", COMMAND, END, _control),
        "balance_result": Message("balance_result", "down", BALANCED),
        "partial_result": Message("balance_result", "down", BALANCED),
        "fullsync_command": Message("control", "everyone", COMMAND, FULLSYNC, _control),
    },
    "async": {  # only violations and their resolutions communicate; results and commands relayed
        "count": None,  # a quiet check sends nothing
        "empty_violation": Message("violation", "up", VIOLATION_ASYNC),
        "end": None,  # followers answer whenever they poll
        "balance_result": Message("balance_result", "relay", BALANCED, nbytes=_relayed_result),
        "partial_result": Message("balance_result", "down", BALANCED, nbytes=_named_alone),
        "fullsync_command": Message("control", "relay", COMMAND, FULLSYNC, _relayed_command),
    },
}
