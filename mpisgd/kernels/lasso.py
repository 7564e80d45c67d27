"""L1 and elastic-net SGD on w = u − v with u, v ≥ 0 (Bottou 2010, Table 1, the
Lasso), for any loss and step-size schedule, O(non-zeros) per step.

Penalty λ1‖w‖₁ + λ2/2‖w‖² (λ1 = λρ, λ2 = λ(1 − ρ), ρ = ``l1_ratio``). Step t with
gain γ and g = ∂ℓ/∂p, on every coordinate i:

    u_i ← [(1 − γλ2) u_i − γ(λ1 + g x_i)]₊
    v_i ← [(1 − γλ2) v_i − γ(λ1 − g x_i)]₊

(Table 1 with λ2 = 0 and the squared loss, g = p − y). Where x_i = 0 this is
u ← [a u − c]₊ with a = 1 − γλ2, c = γλ1, and such maps compose into one of
the same form, so they are applied lazily (the cumulative penalty): the kernel
stores scaled ũ = u / A, ṽ = v / A with A = Π a (as Bottou's wDivisor), in
which the maps become ũ ← [ũ − c/A]₊; D = Σ c/A is the cumulative penalty and
``last[i]`` the value of D when coordinate i was last brought up to date, so a
coordinate catches up with ũ_i ← [ũ_i − (D − last_i)]₊ when x next touches it.
A dense pass (``flush``) brings every coordinate up to date and folds A into
ũ, ṽ: at the end of each call and when A < 1e-5. A step with γλ2 ≥ 1 maps
every untouched u_i, v_i to 0 and is done densely.

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


def new_state(n_features):
    """(ũ, ṽ, last, st) of a fresh model: w = 0, b = 0."""
    st = np.zeros(N_STATE)
    st[SCALE] = 1.0
    return np.zeros(n_features), np.zeros(n_features), np.zeros(n_features), st


@njit(cache=True)
def flush(u, v, last, st):
    """Bring every coordinate up to date and fold A in: afterwards A = 1, D = 0."""
    scale = st[SCALE]
    pen = st[PENALTY]
    for j in range(u.shape[0]):
        due = pen - last[j]
        u[j] = max(0.0, u[j] - due) * scale
        v[j] = max(0.0, v[j] - due) * scale
        last[j] = 0.0
    st[SCALE] = 1.0
    st[PENALTY] = 0.0


@njit(cache=True, nogil=True)
def lasso_epoch(indptr, indices, data, y, order, loss_code, loss_param, sched_code, eta0, lam,
                l1_ratio, t0, power, bias_gain, fit_intercept, u, v, last, st):
    """One pass over the rows ``order`` of a CSR matrix; ends with ``flush`` so
    that w = u − v afterwards.

    Returns (sum of the losses at the predictions made before each update,
    number of those predictions with y·p ≤ 0, status), status 0 when every
    prediction was finite and −1 when the run diverged (it then stops).
    """
    lam1 = lam * l1_ratio
    lam2 = lam - lam1
    t = st[T]
    b = st[BIAS]
    loss_sum = 0.0
    n_err = 0
    status = 0
    for r in range(order.shape[0]):
        i = order[r]
        lo = indptr[i]
        hi = indptr[i + 1]
        t += 1.0
        gamma = eta(sched_code, t, eta0, lam, t0, power)
        scale = st[SCALE]
        pen = st[PENALTY]
        # catch the coordinates of x up to step t − 1, then p = (u − v)·x + b
        p = 0.0
        for k in range(lo, hi):
            j = uint32(indices[k])
            due = pen - last[j]
            if due > 0.0:
                u[j] = max(0.0, u[j] - due)
                v[j] = max(0.0, v[j] - due)
                last[j] = pen
            p += (u[j] - v[j]) * data[k]
        p = p * scale + b
        if not math.isfinite(p):
            status = -1
            break
        yi = y[i]
        lv, g = loss_and_dloss(loss_code, p, yi, loss_param)
        loss_sum += lv
        if yi * p <= 0.0:
            n_err += 1
        a = 1.0 - gamma * lam2  # L2 shrink of this step
        c = gamma * lam1  # L1 penalty of this step
        if a > 0.0:
            scale *= a
            pen += c / scale  # the untouched coordinates: ũ ← [ũ − c/A]₊
            for k in range(lo, hi):
                j = uint32(indices[k])
                gx = gamma * g * data[k]
                u[j] = max(0.0, u[j] - (c + gx) / scale)  # [a u − γ(λ1 + g x)]₊ / A
                v[j] = max(0.0, v[j] - (c - gx) / scale)  # [a v − γ(λ1 − g x)]₊ / A
                last[j] = pen
            st[SCALE] = scale
            st[PENALTY] = pen
            if scale < SCALE_MIN:
                flush(u, v, last, st)
        else:
            # a ≤ 0: [a u − c]₊ = 0 for every untouched coordinate
            for k in range(lo, hi):
                j = uint32(indices[k])
                gx = gamma * g * data[k]
                u[j] = max(0.0, a * scale * u[j] - (c + gx))  # real units from here
                v[j] = max(0.0, a * scale * v[j] - (c - gx))
                last[j] = -1.0  # mark the touched coordinates (D ≥ 0)
            for j in range(u.shape[0]):
                if last[j] != -1.0:
                    u[j] = 0.0
                    v[j] = 0.0
                last[j] = 0.0
            st[SCALE] = 1.0
            st[PENALTY] = 0.0
        if fit_intercept:
            b -= gamma * bias_gain * g
    st[T] = t
    st[BIAS] = b
    flush(u, v, last, st)
    return loss_sum, n_err, status
