"""Bottou's sparse SGD and ASGD for any step-size schedule (docs/ALGORITHMS.md §3;
the shape of svmsgd.cpp / svmasgd.cpp).

Scaled weights: w = v / wDivisor. Averaged weights: ā = (A + wFraction·v) / aDivisor.
Each step touches only the k coordinates of x; the dense vectors are rescaled
(``renorm``) only when a divisor leaves [1e-5, 1e5].

The scalar state lives in a float64 array ``st`` indexed by the constants
below, so that ``partial_fit`` resumes exactly where the last call stopped.
"""

import math

from numba import njit, uint32

from mpisgd.kernels.losses import loss_and_dloss
from mpisgd.kernels.schedules import eta
# CSR column indices are ≥ 0: the kernels index with ``uint32(indices[k])``
# so that numba emits no negative-index wraparound test (about 10 % per epoch).

# Indices into the scalar state array ``st``.
T = 0  # examples seen so far
W_DIVISOR = 1  # w = v / wDivisor
W_BIAS = 2  # current bias b
A_DIVISOR = 3  # ā = (A + wFraction v) / aDivisor
W_FRACTION = 4
A_BIAS = 5  # averaged bias
COPYING = 6  # 1 while μ_t = 1 (ā is a copy of w and A is still zero)
N_STATE = 7

DIVISOR_MIN = 1e-5
DIVISOR_MAX = 1e5


def new_state():
    """Scalar state of a fresh model (w = ā = 0)."""
    import numpy as np

    st = np.zeros(N_STATE)
    st[W_DIVISOR] = 1.0
    st[A_DIVISOR] = 1.0
    st[W_FRACTION] = 1.0
    st[COPYING] = 1.0
    return st


@njit(cache=True)
def renorm(v, a, st):
    """Fold the divisors into the dense vectors: afterwards wDivisor = aDivisor = 1."""
    wdiv = st[W_DIVISOR]
    if st[COPYING] != 0.0:
        # ā = w and A = 0: only v needs rescaling; wFraction stays 1.
        for j in range(v.shape[0]):
            v[j] /= wdiv
        st[W_FRACTION] = 1.0
    else:
        adiv = st[A_DIVISOR]
        frac = st[W_FRACTION]
        for j in range(v.shape[0]):
            a[j] = (a[j] + frac * v[j]) / adiv  # A ← A/D + (f/D) v
            v[j] /= wdiv  # v ← v / wDivisor
        st[W_FRACTION] = 0.0
    st[W_DIVISOR] = 1.0
    st[A_DIVISOR] = 1.0


@njit(cache=True, nogil=True)  # lets the reader thread run during an epoch
def sgd_epoch(
    indptr,
    indices,
    data,
    y,
    sw,
    order,
    loss_code,
    loss_param,
    sched_code,
    eta0,
    lam,
    t0,
    power,
    bias_gain,
    fit_intercept,
    regularize_bias,
    average,
    avg_start,
    v,
    a,
    st,
):
    """One pass over the rows ``order`` of a CSR matrix.

    Step t: p = v·x / wDivisor + b; g = s_i ℓ'(p, y) with s_i = ``sw[i]`` the
    example's weight; w ← (1 − γ_t λ) w − γ_t g x;
    b ← (1 − γ_b λ) b − γ_b g with γ_b = bias_gain·γ_t (the factor only when
    ``regularize_bias``). With ``average``, ā ← (1 − μ_t) ā + μ_t w with
    μ_t = 1 for t ≤ avg_start, else 1 / (1 + t − avg_start).

    Returns (sum of the weighted losses s_i ℓ at the predictions made before
    each update, number of those predictions with y·p ≤ 0, status), status 0
    when every prediction was finite and −1 when the run diverged (it then stops).
    """
    # The scalars live in locals inside the loop (LLVM cannot keep array
    # elements of ``st`` in registers across the stores into v and A).
    t = st[T]
    wdiv = st[W_DIVISOR]
    wbias = st[W_BIAS]
    adiv = st[A_DIVISOR]
    wfrac = st[W_FRACTION]
    abias = st[A_BIAS]
    copying = st[COPYING]
    loss_sum = 0.0
    n_err = 0
    status = 0
    for r in range(order.shape[0]):
        i = order[r]
        if wdiv > DIVISOR_MAX or wdiv < DIVISOR_MIN or adiv > DIVISOR_MAX:
            st[W_DIVISOR], st[A_DIVISOR], st[W_FRACTION], st[COPYING] = wdiv, adiv, wfrac, copying
            renorm(v, a, st)
            wdiv, adiv, wfrac = st[W_DIVISOR], st[A_DIVISOR], st[W_FRACTION]
        t += 1.0
        gamma = eta(sched_code, t, eta0, lam, t0, power)
        lo = indptr[i]
        hi = indptr[i + 1]
        # p = w·x + b = v·x / wDivisor + b
        s = 0.0
        for k in range(lo, hi):
            s += v[uint32(indices[k])] * data[k]
        p = s / wdiv + wbias
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
        # regularization: w ← (1 − γλ) w, i.e. wDivisor ← wDivisor / (1 − γλ)
        shrink = 1.0 - gamma * lam
        if shrink > 0.0:
            wdiv /= shrink
        else:
            # γλ ≥ 1 (e.g. the first steps of 1/(λt)): scale v densely
            st[W_DIVISOR], st[A_DIVISOR], st[W_FRACTION], st[COPYING] = wdiv, adiv, wfrac, copying
            renorm(v, a, st)
            wdiv, adiv, wfrac = st[W_DIVISOR], st[A_DIVISOR], st[W_FRACTION]
            if average and copying != 0.0:
                # ā = w before the step must survive the dense scaling of v
                for j in range(v.shape[0]):
                    a[j] = v[j]
                copying = 0.0
                wfrac = 0.0
            for j in range(v.shape[0]):
                v[j] *= shrink
        # loss: w ← w − γ g x, i.e. v ← v − γ g wDivisor x
        delta = -gamma * g * wdiv
        if delta != 0.0:
            for k in range(lo, hi):
                v[uint32(indices[k])] += delta * data[k]
        mu = 1.0
        if average:
            if t > avg_start:
                mu = 1.0 / (1.0 + (t - avg_start))
            if mu >= 1.0:
                # ā = w: A = 0, aDivisor = wDivisor, wFraction = 1
                if copying == 0.0:  # only after the dense branch above
                    for j in range(a.shape[0]):
                        a[j] = 0.0
                    copying = 1.0
                adiv = wdiv
                wfrac = 1.0
            else:
                copying = 0.0
                # keep A + f v unchanged by the sparse step of v
                if delta != 0.0:
                    fd = -wfrac * delta
                    for k in range(lo, hi):
                        a[uint32(indices[k])] += fd * data[k]
                # ā ← (1 − μ) ā + μ w
                adiv /= 1.0 - mu
                wfrac += mu * adiv / wdiv
        if fit_intercept:
            gb = gamma * bias_gain
            if regularize_bias:
                wbias *= 1.0 - gb * lam
            wbias -= gb * g
            abias += mu * (wbias - abias)
    st[T] = t
    st[W_DIVISOR] = wdiv
    st[W_BIAS] = wbias
    st[A_DIVISOR] = adiv
    st[W_FRACTION] = wfrac
    st[A_BIAS] = abias
    st[COPYING] = copying
    return loss_sum, n_err, status
