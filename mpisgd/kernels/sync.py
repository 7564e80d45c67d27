"""The passes of a full sync (docs/WIRE.md, "Full syncs"), one before its
exchange and one after: a learner's contribution z = [s·v, b, α] with the
count and scale that decide the exchange, and the new reference from the sum
of every learner's z; in between, for the pairs exchange, the non-zeros of u
in one pass and the sum of the blocks in one pass each, and the new
reference from that sum where it changes. A partial sync's (docs/ALGORITHMS.md
§4.7): the non-zeros of d = w − r, the selection of S_l among them, the union
of the index blocks, and d on that union."""

import math

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros


@njit(cache=True)
def contributions(ids, alpha, s, V, bias, r_bias, out, nnz, scales):
    """out[i] = z of learner ids[i] = [s·v, b, α]; nnz[i] = the non-zeros of its v;
    scales[i] = [max_j |u_j|, |b − r_b|, |α − 1|] (the shared scales of a quantized sum)."""
    n = V.shape[1]
    for i in range(ids.shape[0]):
        l = ids[i]
        c = 0
        top = 0.0
        for j in range(n):
            u = s[l] * V[l, j]
            out[i, j] = u
            c += V[l, j] != 0.0
            top = max(top, abs(u))
        out[i, n] = bias[l]
        out[i, n + 1] = alpha[l]
        nnz[i] = c
        scales[i, 0] = top
        scales[i, 1] = abs(bias[l] - r_bias)
        scales[i, 2] = abs(alpha[l] - 1.0)


@njit(cache=True)
def reference_from_sum(total, k, r):
    """r ← ᾱ·r + ū with z̄ = total/k = [ū, b̄, ᾱ] (a loop the compiler
    vectorizes; R = ‖r‖² is left to one BLAS dot)."""
    n = r.shape[0]
    a = total[n + 1] / k
    for j in range(n):
        r[j] = a * r[j] + total[j] / k


@njit(cache=True)
def reference_from_pairs(total, k, r, index, counts):
    """``reference_from_sum`` of a pairs exchange's sum: total is 0 off the
    blocks' indices index[b, :counts[b]] (their union U) and is cleared there
    for the next sum. With ᾱ = 1 only r_U changes (elsewhere r_j + 0/k = r_j,
    but for a −0 that stays −0; a j met again adds its cleared 0); otherwise
    one dense pass."""
    n = r.shape[0]
    a = total[n + 1] / k
    dense = a != 1.0
    if dense:
        for j in range(n):
            r[j] = a * r[j] + total[j] / k
    for b in range(index.shape[0]):
        for i in range(counts[b]):
            j = index[b, i]
            if not dense:
                r[j] = r[j] + total[j] / k  # r_j ← 1·r_j + ū_j
            total[j] = 0.0
    total[n] = 0.0
    total[n + 1] = 0.0


@njit(cache=True)
def pairs_of(u, vals, idx):
    """One pass over u: its non-zeros in increasing j, values into vals and
    indices j into idx (int32); returns their count, or −1 if there are more
    than vals and idx hold."""
    room = min(vals.shape[0], idx.shape[0])
    c = 0
    for j in range(u.shape[0]):
        if u[j] != 0.0:
            if c == room:
                return -1
            vals[c] = u[j]
            idx[c] = j
            c += 1
    return c


_BLOCK = 8  # coordinates gather_pairs counts at once


@njit(cache=True)
def gather_pairs(v, scale, vals, idx):
    """One pass over a learner's v: the non-zeros of u = scale·v in increasing
    j, values into vals and indices j into idx (int32; both of length ≥ len(v));
    returns (the non-zeros of v, the count of pairs written). A block of v is
    skipped once a vectorized count finds it all zero."""
    n = v.shape[0]
    nb = n // _BLOCK
    blocks = v[: nb * _BLOCK].reshape((nb, _BLOCK))
    finite = scale - scale == 0.0  # with an infinite or NaN scale, scale·0 is not 0: test every j
    nnz = 0
    c = 0
    for b in range(nb + 1):
        lo = b * _BLOCK
        hi = min(lo + _BLOCK, n)
        if b < nb and finite:
            row = blocks[b]
            touched = 0
            for j in range(_BLOCK):
                touched += row[j] != 0.0
            if touched == 0:
                continue
        for j in range(lo, hi):
            nnz += v[j] != 0.0
            u = scale * v[j]
            if u != 0.0:
                vals[c] = u
                idx[c] = j
                c += 1
    return nnz, c


@njit(cache=True)
def gather(l, s, V, T, listed, bits, vals, idx):
    """A full sync's pairs of learner l (u = s_l·v_l): ``gather_listed`` on its
    list of touched coordinates (``mpisgd.kernels.online``), or, with the
    list dropped or a scale that is not finite, ``gather_pairs`` over all n.
    Returns (the non-zeros of v_l, the pairs written)."""
    if listed[l] >= 0 and math.isfinite(s[l]):
        return gather_listed(V[l], T[l, : listed[l]], bits, s[l], vals, idx)
    return gather_pairs(V[l], s[l], vals, idx)


@njit(cache=True)
def gather_listed(v, listed, bits, scale, vals, idx):
    """``gather_pairs`` of a v that is 0 off the coordinates ``listed``
    (``mpisgd.kernels.online``, "Touched coordinates"; repeats allowed): their
    bits set in ``bits`` (uint64, ⌈n/64⌉ words, 0 before and after), then the
    words walked in increasing j, each set bit visited once. The scale must be
    finite (else scale·0 is not 0 and every j counts)."""
    for j in listed:
        bits[j >> 6] |= np.uint64(1) << np.uint64(j & 63)
    nnz = 0
    c = 0
    for w in range(bits.shape[0]):
        word = bits[w]
        if word == 0:
            continue
        bits[w] = 0
        while word:
            j = 64 * w + trailing_zeros(word)
            word &= word - np.uint64(1)  # the lowest bit cleared
            nnz += v[j] != 0.0
            u = scale * v[j]
            if u != 0.0:
                vals[c] = u
                idx[c] = j
                c += 1
    return nnz, c


@njit(cache=True)
def model_of_pairs(vals, idx, bias, alpha, z):
    """z = [u, b, α] with u = vals at idx and 0 elsewhere (a model from its pairs)."""
    n = z.shape[0] - 2
    z[:n] = 0.0
    for i in range(idx.shape[0]):
        z[idx[i]] = vals[i]
    z[n] = bias
    z[n + 1] = alpha


@njit(cache=True)
def add_pairs(total, vals, idx, n):
    """total[idx[i]] += vals[i] in one pass; False (total left partly added)
    unless every index lies in [0, n) and they strictly increase."""
    last = -1
    for i in range(idx.shape[0]):
        j = idx[i]
        if j <= last or j >= n:
            return False
        last = j
        total[j] += vals[i]
    return True


@njit(cache=True)
def fill_block(buf, alpha, bias, vals, idx, m):
    """One rank's pairs block (uint8, 24 + 12m bytes, 8-aligned: float64 [α, b,
    count, values, 0 …] (3 + m), then int32 [idx, 0 …] (m)) from its pairs
    (vals, idx: at most m of them)."""
    head = buf[: 24 + 8 * m].view(np.float64)
    index = buf[24 + 8 * m : 24 + 12 * m].view(np.int32)
    c = vals.shape[0]
    head[0] = alpha
    head[1] = bias
    head[2] = c
    head[3 : 3 + c] = vals
    head[3 + c :] = 0.0
    index[:c] = idx
    index[c:] = 0


@njit(cache=True)
def add_blocks(heads, index, n, total, counts):
    """total += Σ z of k pairs blocks (block b: heads[b] = float64 [α, b, count,
    values …] (3 + m), index[b] its int32 indices (m), views of the received
    bytes, unaligned where they lie so), in order, each as ``add_pairs`` and
    then its b and α; counts[b] = its count. False (total left partly added)
    unless every count is a whole number in [0, m] and every block's indices
    lie in [0, n) and strictly increase."""
    m = index.shape[1]
    for b in range(heads.shape[0]):
        count = heads[b, 2]
        if not 0.0 <= count <= m or count != int(count):  # NaN fails the first
            return False
        c = int(count)
        counts[b] = c
        if not add_pairs(total, heads[b, 3 : 3 + c], index[b, :c], n):
            return False
        total[n] += heads[b, 1]
        total[n + 1] += heads[b, 0]
    return True


# -- partial averaging (docs/ALGORITHMS.md §4.7) ----------------------------------


@njit(cache=True)
def union_of_index_blocks(blocks, m, n, bits, out):
    """S = ∪ S_l of index blocks (int32, each [count, indices …, 0 …] of m + 1)
    into out (increasing, room for every index): their bits set in ``bits``
    (uint64, ⌈n/64⌉ words, 0 before and after), then the words walked in
    increasing j. Returns |S|, or −1 (bits cleared) unless every count lies
    in [0, m] and every block's indices lie in [0, n) and strictly increase."""
    size = m + 1
    for b in range(blocks.shape[0] // size):
        c = blocks[b * size]
        ok = 0 <= c <= m
        last = -1
        for i in range(b * size + 1, b * size + 1 + c if ok else 0):
            j = blocks[i]
            if j <= last or j >= n:
                ok = False
                break
            last = j
            bits[j >> 6] |= np.uint64(1) << np.uint64(j & 63)
        if not ok:
            bits[:] = 0
            return -1
    c = 0
    for w in range(bits.shape[0]):
        word = bits[w]
        if word == 0:
            continue
        bits[w] = 0
        while word:
            out[c] = 64 * w + trailing_zeros(word)
            word &= word - np.uint64(1)  # the lowest bit cleared
            c += 1
    return c


@njit(cache=True)
def deviation(alpha, s, v, r, d):
    """d = w − r = (α − 1)·r + s·v of one learner, in one pass into d."""
    a = alpha - 1.0
    for j in range(r.shape[0]):
        d[j] = a * r[j] + s * v[j]


@njit(cache=True)
def deviation_pairs(l, alpha, s, V, T, listed, r, bits, vals, idx):
    """The non-zeros of learner l's d = w − r = (α − 1)·r + s·v, values into
    vals and indices j into idx (int32; both of length ≥ n), in increasing j;
    returns their count. With α = 1, d = s·v is 0 off the learner's list of
    touched coordinates (``mpisgd.kernels.online``): ``gather_listed`` visits
    the list only (r finite: 0·r_j adds nothing); else one pass over n,
    without branches (d's non-zeros lie anywhere: a branch on each would
    mispredict)."""
    sl, v = s[l], V[l]
    if alpha[l] == 1.0 and listed[l] >= 0 and math.isfinite(sl):
        return gather_listed(v, T[l, : listed[l]], bits, sl, vals, idx)[1]
    a = alpha[l] - 1.0
    c = 0
    for j in range(r.shape[0]):
        d = a * r[j] + sl * v[j]
        vals[c] = d  # kept where d ≠ 0: overwritten otherwise (c ≤ j)
        idx[c] = j
        c += d != 0.0
    return c


@njit(cache=True)
def partial_support(l, alpha, s, V, T, listed, r, bits, budget, vals, idx, pos):
    """Learner l's S_l (``select_support`` of its d = w − r for θΔ = budget)
    into idx, increasing; returns |S_l|. The selection runs on d's non-zeros
    (``deviation_pairs``, into vals and idx), whose order by j is their
    order by position: same S_l, in passes over |nnz(d)|, not n. pos (int64,
    length ≥ n) takes the positions selected."""
    c = deviation_pairs(l, alpha, s, V, T, listed, r, bits, vals, idx)
    m = select_support(vals[:c], budget, pos)
    for i in range(m):  # positions increase, pos[i] ≥ i: in place
        idx[i] = idx[pos[i]]
    return m


@njit(cache=True)
def deviation_at(alpha, s, v, r, support, out):
    """out[i] = d_j = (α − 1)·r_j + s·v_j of one learner at j = support[i]."""
    a = alpha - 1.0
    for i in range(support.shape[0]):
        j = support[i]
        out[i] = a * r[j] + s * v[j]


@njit(cache=True)
def _precedes(v, j, pv, pj):
    """(v, j) before (pv, pj) in select_support's order: by d_j², ties by j."""
    return v < pv or (v == pv and j < pj)


@njit(cache=True, fastmath={"reassoc"})  # sums in any order, so that the passes vectorize
def _below(d, tau):
    """(Σ d_j² over d_j² < τ, the count of d_j² ≥ τ) in one pass."""
    total = 0.0
    count = 0
    for j in range(d.shape[0]):
        q = d[j] * d[j]
        small = q < tau
        total += q if small else 0.0
        count += not small
    return total, count


@njit(cache=True)
def select_support(d, budget, idx):
    """S_l of partial averaging: the fewest coordinates, those of largest
    |d_j| (ties: the larger j), that leave Σ_{j∉S_l} d_j² ≤ budget (= θΔ);
    written into idx in increasing j; returns |S_l| (0 when ‖d‖² ≤ budget
    already). In the order (d_j², j) the kept coordinates are a prefix. A
    threshold τ falls from ‖d‖² by factors of 16 (a vectorized pass each)
    until the d_j² < τ fit the budget (they stay local, those ≥ 16τ are
    sent), bisections narrow [τ, 16τ) until at most 64 d_j² lie in it (or 12
    passes), a quickselect on those finds the first sent among them, and one
    pass writes every j sent: O(n), no sort, no n-sized buffer."""
    n = d.shape[0]
    kept_sum, above = _below(d, np.inf)
    if kept_sum <= budget and above == 0:  # (an infinite d_j² is never below: it is sent)
        return 0
    tau, top, top_above = kept_sum, np.inf, 0  # Σ_{d_j² < top} d_j² > budget; top_above: the d_j² ≥ top
    kept_sum, above = _below(d, tau)
    while kept_sum > budget and tau > 0.0:
        top, top_above = tau, above
        tau *= 1.0 / 16.0
        kept_sum, above = _below(d, tau)
    for _ in range(12):  # [τ, top) narrowed by its geometric midpoint until few d_j² lie in it
        if above - top_above <= 64 or not tau > 0.0 or top == np.inf:
            break
        mid = math.sqrt(tau) * math.sqrt(top)
        mid_sum, mid_above = _below(d, mid)
        if mid_sum <= budget:
            tau, kept_sum, above = mid, mid_sum, mid_above
        else:
            top, top_above = mid, mid_above
    c = above - top_above  # the candidates: d_j ≠ 0 with τ ≤ d_j² < top
    sq = np.empty(c)
    nz = np.empty(c, dtype=np.int64)
    i = 0
    for j in range(n):
        q = d[j] * d[j]
        if tau <= q < top and d[j] != 0.0:
            sq[i] = q
            nz[i] = j
            i += 1
    c = i
    # quickselect on them: [0, lo) stay local and precede all of [lo, hi) in the order, their
    # Σ d_j² (with the d_j² < τ) is kept_sum; [hi, c) are sent
    lo, hi = 0, c
    while lo < hi:
        p = (lo + hi) // 2  # median of three positions as the pivot
        a, e = lo, hi - 1
        if _precedes(sq[p], nz[p], sq[a], nz[a]):
            a, p = p, a
        if _precedes(sq[e], nz[e], sq[p], nz[p]):
            p = e
            if _precedes(sq[p], nz[p], sq[a], nz[a]):
                p = a
        pv, pj = sq[p], nz[p]
        below, above, i = lo, hi, lo  # [lo, below) precede the pivot, [above, hi) follow it
        part = 0.0  # Σ over [lo, below)
        while i < above:
            v, j = sq[i], nz[i]
            if _precedes(v, j, pv, pj):
                sq[i], nz[i] = sq[below], nz[below]
                sq[below], nz[below] = v, j
                part += v
                below += 1
                i += 1
            elif j == pj:
                i += 1
            else:
                above -= 1
                sq[i], nz[i] = sq[above], nz[above]
                sq[above], nz[above] = v, j
        # [below, above) is the pivot alone
        if kept_sum + part + pv <= budget:  # the pivot and all before it stay local
            kept_sum += part + pv
            lo = below + 1
        elif kept_sum + part <= budget:  # the boundary is at the pivot: it is sent
            lo = below
            break
        else:
            hi = below
    # the first sent in the order: the least of [lo, c), or (top, −1) if the budget's rounding kept them all
    first_v, first_j = top, -1
    for i in range(lo, c):
        if _precedes(sq[i], nz[i], first_v, first_j):
            first_v, first_j = sq[i], nz[i]
    m = 0
    for j in range(n):
        q = d[j] * d[j]
        if q >= first_v:  # rarely: the branch costs little
            if (q > first_v or j >= first_j) and d[j] != 0.0:
                idx[m] = j
                m += 1
    return m
