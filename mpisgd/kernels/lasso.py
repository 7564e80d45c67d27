"""L1 and elastic-net SGD on w = u − v with u, v ≥ 0 (Bottou 2010, Table 1, the
Lasso) with a cumulative penalty (Tsuruoka, Tsujii and Ananiadou 2009), for any
loss and step-size schedule, O(non-zeros) per step and one dense array.

Penalty λ1‖w‖₁ + λ2/2‖w‖² (λ1 = λρ, λ2 = λ(1 − ρ), ρ = ``l1_ratio``). Step t with
gain γ, g = ∂ℓ/∂p, a = 1 − γλ2 and c = γλ1, on every coordinate i:

    u_i ← a u_i,  o_i ← a o_i + c          (L2 shrink; o_i: what u_i owes)
    z = u_i − γ g x_i                       (Table 1's step)
    u_i ← [z]₊,  o_i ← o_i + [−z]₊          (the part below 0 is owed too)
    u_i ← u_i − min(u_i, o_i), o_i ← o_i − that amount

and the same for v with +γ g x_i. Table 1 (ρ = 1, squared loss) clips u_i and
v_i at 0 and forgets both the penalty a side could not take there and the part
of a step that went below 0. Keeping them owed (the cumulative penalty of
Tsuruoka et al., extended to the clipped steps) lets the two sides net the
noise pushes of either sign, as scikit-learn's SGD with penalty="l1" does on w;
without the clipped steps the models had 2–8 times more non-zeros than
scikit-learn's at the same objective (a9a, RCV1-like).

Closed form. In units scaled by A = Π a (Bottou's wDivisor), the shrink is the
scalar A, each step adds c/A to every o_i, and r_u = ũ_i − õ_i + D (D = Σ c/A,
the cumulative penalty) is unchanged by the clip and by paying: only the step
moves it, r_u ← r_u − γ g x_i / A. Paying leaves ũ_i = [r_u − D]₊, and r_v = −r_u
(v takes the opposite steps). So the kernel keeps one array r (r = r_u) and

    w = u − v = A (ũ − ṽ) = A · soft(r, D),   soft(r, D) = sign(r) [|r| − D]₊,

touching only the coordinates of x (tests/naive.py runs the four-variable
form above densely). A is folded into r and D when A < 1e-5. A step with
γλ2 ≥ 1 is refused (status −2).

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
SCALE = 1  # A: w = A soft(r, D)
PENALTY = 2  # D = Σ c/A, the cumulative penalty in scaled units
BIAS = 3  # b
N_STATE = 4

SCALE_MIN = 1e-5


def new_state(n_features):
    """(r, st) of a fresh model: w = 0, b = 0, nothing owed."""
    st = np.zeros(N_STATE)
    st[SCALE] = 1.0
    return np.zeros(n_features), st


def weights(r, st):
    """w = A soft(r, D) = u − v (one dense pass)."""
    pen = st[PENALTY]
    return st[SCALE] * (np.maximum(r - pen, 0.0) + np.minimum(r + pen, 0.0))


@njit(cache=True, nogil=True)
def lasso_epoch(indptr, indices, data, y, sw, order, loss_code, loss_param, sched_code, eta0, lam,
                l1_ratio, t0, power, bias_gain, fit_intercept, r, st):
    """One pass over the rows ``order`` of a CSR matrix.

    g is the weighted gradient s_i ℓ'(p, y), s_i = ``sw[i]`` the example's weight.
    Returns (sum of the weighted losses s_i ℓ at the predictions made before each
    update, number of those predictions with y·p ≤ 0, status), status 0 when every
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
    for row in range(order.shape[0]):
        i = order[row]
        lo = indptr[i]
        hi = indptr[i + 1]
        gamma = eta(sched_code, t + 1.0, eta0, lam, t0, power)
        a = 1.0 - gamma * lam2  # L2 shrink of this step
        if a <= 0.0:
            status = -2
            break
        # p = A soft(r, D)·x + b  (soft(r, D) = [r − D]₊ − [−r − D]₊ = ũ − ṽ)
        p = 0.0
        for k in range(lo, hi):
            rj = r[uint32(indices[k])]
            p += (max(rj - pen, 0.0) + min(rj + pen, 0.0)) * data[k]
        p = p * scale + b
        if not math.isfinite(p):
            status = -1
            break
        t += 1.0
        yi = y[i]
        lv, g = loss_and_dloss(loss_code, p, yi, loss_param)
        si = sw[i]
        loss_sum += si * lv
        g *= si  # the weighted example's gradient s_i ℓ'
        if yi * p <= 0.0:
            n_err += 1
        scale *= a  # u, v, o ← a u, a v, a o
        pen += gamma * lam1 / scale  # every o_i grows by c
        gs = gamma * g / scale
        for k in range(lo, hi):
            r[uint32(indices[k])] -= gs * data[k]  # Table 1's step, γ g x / A
        if scale < SCALE_MIN:
            for j in range(r.shape[0]):
                r[j] *= scale
            pen *= scale
            scale = 1.0
        if fit_intercept:
            b -= gamma * bias_gain * g
    st[T] = t
    st[BIAS] = b
    st[SCALE] = scale
    st[PENALTY] = pen
    return loss_sum, n_err, status
