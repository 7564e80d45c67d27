"""SGD-QN for sparse data (Bordes, Bottou and Gallinari 2009, JMLR 10:1737–1754,
in the corrected form of their 2010 erratum, JMLR 11:2229–2240).

SGD with a diagonal rescaling matrix B instead of a scalar gain:

    w ← w − g B x                        every step, O(non-zeros of x)
    w ← w − skip λ B w                   every ``skip`` steps (dense, O(n))
    B_ii ← B_ii / (1 + skip B_ii r_i)    on the step after a regularization
                                          step (dense, O(n))

with g = ∂ℓ/∂p and r_i the secant estimate of the diagonal Hessian on that
step's example, r_i = [∇_t(w') − ∇_t(w)]_i / [w' − w]_i (∇_t the gradient of
λ/2‖w‖² + ℓ(w·x_t + b, y_t), w' the weights after the loss step), clipped to
[λ, 100λ]; r_i = λ where w'_i = w_i (x_i = 0, or g = 0). Starting from
B = γ0 I (t0 = 1/(λγ0)), r ≡ λ gives 1/B_ii = 1/γ0 + λt: Bottou's SGD
schedule γ0/(1 + λγ0 t). The dense work costs O(n/skip) per step amortized.

The bias b keeps that scalar schedule (no curvature estimate): its step is
bias_gain·β·g with 1/β = 1/γ0 + λt updated with B, and with
``regularize_bias`` it shrinks by (1 − skip λ bias_gain β) with w.

The scalar state lives in the float64 array ``st`` indexed by the constants
below, so that ``partial_fit`` resumes exactly.
"""

import math

import numpy as np
from numba import njit, uint32

from mpisgd.kernels.losses import dloss, loss_and_dloss

# Indices into the scalar state array ``st``.
T = 0  # examples seen so far
BIAS = 1  # b
BIAS_GAIN = 2  # β, the bias's diagonal entry of B
COUNT = 3  # steps left before the next regularization step
UPDATE_B = 4  # 1 when this step re-estimates B
N_STATE = 5

R_MAX = 100.0  # r_i ≤ 100 λ


def new_state(n_features, gamma0, skip):
    """(w, B, st) of a fresh model: w = 0, b = 0, B = γ0 I."""
    st = np.zeros(N_STATE)
    st[BIAS_GAIN] = gamma0
    st[COUNT] = skip
    return np.zeros(n_features), np.full(n_features, float(gamma0)), st


def default_skip(n_features, nnz, n_rows):
    """The paper's rule: the two dense O(n) passes every ``skip`` steps should cost
    about what the sparse steps cost, skip ≈ n / (non-zeros per row); at least 16
    (their choice for dense data)."""
    per_row = max(nnz / max(n_rows, 1), 1.0)
    return max(16, int(round(n_features / per_row)))


def start(B, st, gamma0, lam, skip):
    """Set B = γ0 I before the first step (γ0 may be calibrated after allocation)
    and return ``skip`` lowered so that the regularization factor 1 − skip λ B_ii
    stays ≥ 1/2 (B_ii ≤ γ0 forever)."""
    from mpisgd.errors import MpisgdError

    if not lam * gamma0 < 0.5:
        raise MpisgdError(
            f"sgdqn: λ·γ0 = {lam:g}·{gamma0:g} must be < 0.5 (the regularization step "
            f"w ← (1 − skip λ B) w with B = γ0 would flip w): use a smaller eta0"
        )
    skip = max(1, min(int(skip), int(0.5 / (lam * gamma0))))
    B[:] = gamma0
    st[BIAS_GAIN] = gamma0
    st[COUNT] = skip
    return skip


@njit(cache=True, nogil=True)
def sgdqn_epoch(indptr, indices, data, y, sw, order, loss_code, loss_param, lam, skip, bias_gain,
                fit_intercept, regularize_bias, w, B, st):
    """One pass over the rows ``order`` of a CSR matrix (λ > 0, skip ≥ 1).

    g is the weighted gradient s_i ℓ'(p, y), s_i = ``sw[i]`` the example's weight
    (it cancels from the secant ratio). Returns (sum of the weighted losses s_i ℓ
    at the predictions made before each update, number of those predictions with
    y·p ≤ 0, status), status 0 when every prediction was finite and −1 when the
    run diverged (it then stops).
    """
    t = st[T]
    b = st[BIAS]
    beta = st[BIAS_GAIN]
    count = st[COUNT]
    update_b = st[UPDATE_B]
    n = w.shape[0]
    loss_sum = 0.0
    n_err = 0
    status = 0
    for r in range(order.shape[0]):
        i = order[r]
        lo = indptr[i]
        hi = indptr[i + 1]
        t += 1.0
        p = b  # p = w·x + b
        for k in range(lo, hi):
            p += w[uint32(indices[k])] * data[k]
        if not math.isfinite(p):
            status = -1
            break
        yi = y[i]
        lv, g = loss_and_dloss(loss_code, p, yi, loss_param)
        si = sw[i]
        loss_sum += si * lv
        g *= si  # the weighted example's gradient s_i ℓ'
        if yi * p <= 0.0:
            n_err += 1
        # loss step: w ← w − g B x, b ← b − bias_gain β g
        if g != 0.0:
            for k in range(lo, hi):
                j = uint32(indices[k])
                w[j] -= g * B[j] * data[k]
            if fit_intercept:
                b -= bias_gain * beta * g
        if update_b != 0.0:
            # secant on this example: with w' − w = −g B x, the gradients differ by
            # λ(w' − w) + (g' − g) x, so r_i = λ − (g' − g) / (g B_ii) where x_i ≠ 0
            ratio = 0.0  # (g' − g) / g
            if g != 0.0:
                p1 = b
                for k in range(lo, hi):
                    p1 += w[uint32(indices[k])] * data[k]
                ratio = (si * dloss(loss_code, p1, yi, loss_param) - g) / g
            nb = np.empty(hi - lo)  # B_ii on the coordinates of x, from the old B_ii
            for k in range(lo, hi):
                j = uint32(indices[k])
                ri = lam
                if g != 0.0 and data[k] != 0.0:
                    ri = min(R_MAX * lam, max(lam, lam - ratio / B[j]))
                nb[k - lo] = B[j] / (1.0 + skip * B[j] * ri)
            for j in range(n):  # r_i = λ elsewhere
                B[j] /= 1.0 + skip * B[j] * lam
            for k in range(lo, hi):
                B[uint32(indices[k])] = nb[k - lo]
            beta /= 1.0 + skip * beta * lam
            update_b = 0.0
        count -= 1.0
        if count <= 0.0:
            # regularization step: w ← w − skip λ B w
            count = skip
            update_b = 1.0
            for j in range(n):
                w[j] *= 1.0 - skip * lam * B[j]
            if fit_intercept and regularize_bias:
                b *= 1.0 - skip * lam * bias_gain * beta
    st[T] = t
    st[BIAS] = b
    st[BIAS_GAIN] = beta
    st[COUNT] = count
    st[UPDATE_B] = update_b
    return loss_sum, n_err, status
