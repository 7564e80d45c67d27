"""L1 and elastic-net SGD on w = u − v with u, v ≥ 0 (Bottou 2010, Table 1, the
Lasso) with the cumulative penalty of Tsuruoka, Tsujii and Ananiadou (2009),
for any loss and step-size schedule, O(non-zeros) per step.

Penalty λ1‖w‖₁ + λ2/2‖w‖² (λ1 = λρ, λ2 = λ(1 − ρ), ρ = ``l1_ratio``). Step t with
gain γ, g = ∂ℓ/∂p, a = 1 − γλ2 and c = γλ1, on every coordinate i:

    u_i ← a u_i,  o_i ← a o_i + c          (L2 shrink; o_i: what u_i owes)
    z = u_i − γ g x_i                       (Table 1's step)
    u_i ← [z]₊,  o_i ← o_i + [−z]₊          (the part below 0 is owed too)
    u_i ← u_i − min(u_i, o_i), o_i ← o_i − that amount

and the same for v with +γ g x_i. Table 1 (ρ = 1, squared loss) clips u_i and
v_i at 0 and forgets both the penalty a side could not take there and the
part of a step that went below 0. Keeping them owed (the cumulative penalty
of Tsuruoka et al., extended to the clipped steps) lets the two sides net the
noise pushes of either sign, as scikit-learn's SGD with penalty="l1" does on w:
without the clipped steps the models had 2–8 times more non-zeros than
scikit-learn's at the same objective (a9a, RCV1-like).

Lazily: the kernel stores scaled ũ = u / A, ṽ = v / A with A = Π a (as Bottou's
wDivisor), in which the L2 shrink is a scalar and this step's penalty is c/A
for every coordinate; D = Σ c/A is the cumulative penalty and q_u what ũ_i has
paid minus its clipped steps, so it owes D − q_u (likewise q_v for ṽ). The four
numbers of a coordinate are one row of the (n, 4) array ``S`` = [ũ, ṽ, q_u, q_v]
(one cache line per touched coordinate). A coordinate pays what it owes when x
next touches it; ``flush`` (a dense pass) settles every coordinate and folds A
into ũ, ṽ: at the end of each call and when A < 1e-5. A step with γλ2 ≥ 1 is
refused (status −2).

The bias is not penalized: b ← b − γ·bias_gain·g.
The scalar state lives in the float64 array ``st`` indexed by the constants
below, so that ``partial_fit`` resumes exactly.
"""

import math

import numpy as np
from numba import njit, uint32

from mpisgd.kernels.losses import loss_and_dloss
from mpisgd.kernels.schedules import eta

# Indices into the scalar state array ``st``.
T = 0  # examples seen so far
SCALE = 1  # A: u = A ũ, v = A ṽ
PENALTY = 2  # D, the cumulative penalty Σ c/A in scaled units
BIAS = 3  # b
N_STATE = 4

SCALE_MIN = 1e-5


U, V, QU, QV = 0, 1, 2, 3  # the columns of S


def new_state(n_features):
    """(S, st) of a fresh model: w = 0, b = 0, nothing owed."""
    st = np.zeros(N_STATE)
    st[SCALE] = 1.0
    return np.zeros((n_features, 4)), st


def weights(S):
    """w = u − v (after ``flush``)."""
    return S[:, U] - S[:, V]


@njit(cache=True, inline="always")
def pay(S, j, side, pen):
    """Side ``side`` (U or V) of coordinate j pays what it owes, D − q, as far as
    it stays ≥ 0."""
    paid = min(S[j, side], pen - S[j, side + 2])
    if paid > 0.0:
        S[j, side] -= paid
        S[j, side + 2] += paid


@njit(cache=True)
def flush(S, st):
    """Settle every coordinate and fold A in: afterwards A = 1, D = 0 and
    q = −(what the side still owes, in the new units)."""
    scale = st[SCALE]
    pen = st[PENALTY]
    for j in range(S.shape[0]):
        pay(S, j, U, pen)
        pay(S, j, V, pen)
        S[j, U] *= scale
        S[j, V] *= scale
        S[j, QU] = -(pen - S[j, QU]) * scale
        S[j, QV] = -(pen - S[j, QV]) * scale
    st[SCALE] = 1.0
    st[PENALTY] = 0.0


@njit(cache=True, nogil=True)
def lasso_epoch(indptr, indices, data, y, order, loss_code, loss_param, sched_code, eta0, lam,
                l1_ratio, t0, power, bias_gain, fit_intercept, S, st):
    """One pass over the rows ``order`` of a CSR matrix; ends with ``flush`` so
    that w = u − v afterwards.

    Returns (sum of the losses at the predictions made before each update,
    number of those predictions with y·p ≤ 0, status), status 0 when every
    prediction was finite, −1 when the run diverged and −2 when a step had
    γλ2 ≥ 1 (both stop the pass).
    """
    lam1 = lam * l1_ratio
    lam2 = lam - lam1
    t = st[T]
    b = st[BIAS]
    scale = st[SCALE]
    pen = st[PENALTY]
    loss_sum = 0.0
    n_err = 0
    status = 0
    for r in range(order.shape[0]):
        i = order[r]
        lo = indptr[i]
        hi = indptr[i + 1]
        gamma = eta(sched_code, t + 1.0, eta0, lam, t0, power)
        a = 1.0 - gamma * lam2  # L2 shrink of this step
        if a <= 0.0:
            status = -2
            break
        # the coordinates of x pay what they owe up to step t − 1; p = A (ũ − ṽ)·x + b
        p = 0.0
        for k in range(lo, hi):
            j = uint32(indices[k])
            pay(S, j, U, pen)
            pay(S, j, V, pen)
            p += (S[j, U] - S[j, V]) * data[k]
        p = p * scale + b
        if not math.isfinite(p):
            status = -1
            break
        t += 1.0
        yi = y[i]
        lv, g = loss_and_dloss(loss_code, p, yi, loss_param)
        loss_sum += lv
        if yi * p <= 0.0:
            n_err += 1
        scale *= a
        pen += gamma * lam1 / scale  # every coordinate now owes c/A more
        for k in range(lo, hi):
            j = uint32(indices[k])
            step = gamma * g * data[k] / scale
            nu = S[j, U] - step  # Table 1's step; the part below 0 is owed
            if nu < 0.0:
                S[j, QU] += nu
                nu = 0.0
            S[j, U] = nu
            nv = S[j, V] + step
            if nv < 0.0:
                S[j, QV] += nv
                nv = 0.0
            S[j, V] = nv
            pay(S, j, U, pen)
            pay(S, j, V, pen)
        if scale < SCALE_MIN:
            st[SCALE] = scale
            st[PENALTY] = pen
            flush(S, st)
            scale = 1.0
            pen = 0.0
        if fit_intercept:
            b -= gamma * bias_gain * g
    st[T] = t
    st[BIAS] = b
    st[SCALE] = scale
    st[PENALTY] = pen
    flush(S, st)
    return loss_sum, n_err, status
