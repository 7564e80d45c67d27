"""Online k-means (MacQueen 1967; Bottou 2010, Table 1) on sparse rows.

For each example z: k* = argmin_k ‖z − w_k‖², n_k* ← n_k* + 1,
w_k* ← w_k* + (z − w_k*) / n_k*, i.e. w ← (1 − η) w + η z with η = 1/n_k*.

O(k · non-zeros) per example: centroid k is kept scaled, w_k = s_k c_k, so the
shrink (1 − η) is the scalar s_k and only the coordinates of z touch c_k;
q_k = ‖c_k‖² is kept up to date from the touched coordinates, and the
distances come from ‖z − w_k‖² = ‖z‖² − 2 s_k c_k·z + s_k² q_k. A centroid is
rewritten densely when η = 1 (its first example, if it starts empty) and
folded (s_k → 1) when s_k < 1e-5.
"""

import numpy as np
from numba import njit, uint32

SCALE_MIN = 1e-5


def new_state(centers, counts):
    """(C, s, q, n) for dense initial centers (k, n) and their counts."""
    C = np.array(centers, dtype=np.float64, order="C")
    return C, np.ones(C.shape[0]), np.einsum("ij,ij->i", C, C), np.asarray(counts, np.float64).copy()


def centers(C, s):
    """The centroids w_k = s_k c_k (one dense product)."""
    return C * s[:, None]


@njit(cache=True)
def _fold(C, s, q, k):
    """w_k = c_k: s_k = 1, q_k recomputed exactly."""
    total = 0.0
    for j in range(C.shape[1]):
        C[k, j] *= s[k]
        total += C[k, j] * C[k, j]
    s[k] = 1.0
    q[k] = total


@njit(cache=True, nogil=True)
def kmeans_epoch(indptr, indices, data, order, C, s, q, n):
    """One pass of MacQueen's update over the rows ``order`` of a CSR matrix.

    Returns the sum over the examples of ‖z − w_k*‖² before each update (the
    online inertia)."""
    k_count = C.shape[0]
    dots = np.empty(k_count)
    total = 0.0
    for r in range(order.shape[0]):
        i = order[r]
        lo = indptr[i]
        hi = indptr[i + 1]
        zz = 0.0
        for kk in range(lo, hi):
            zz += data[kk] * data[kk]
        best = 0
        best_d = np.inf
        for c in range(k_count):
            d = 0.0
            for kk in range(lo, hi):
                d += C[c, uint32(indices[kk])] * data[kk]
            dots[c] = d
            dist = zz - 2.0 * s[c] * d + s[c] * s[c] * q[c]  # ‖z − w_c‖²
            if dist < best_d:
                best_d = dist
                best = c
        total += max(best_d, 0.0)
        n[best] += 1.0
        eta = 1.0 / n[best]
        if eta >= 1.0:
            # w ← z: rewrite c densely
            for j in range(C.shape[1]):
                C[best, j] = 0.0
            for kk in range(lo, hi):
                C[best, uint32(indices[kk])] += data[kk]
            s[best] = 1.0
            q[best] = zz
            continue
        # w ← (1 − η) w + η z:  s ← (1 − η) s,  c ← c + (η / s) z
        s[best] *= 1.0 - eta
        a = eta / s[best]
        for kk in range(lo, hi):
            j = uint32(indices[kk])
            old = C[best, j]
            new = old + a * data[kk]
            C[best, j] = new
            q[best] += new * new - old * old
        if s[best] < SCALE_MIN:
            _fold(C, s, q, best)
    return total
