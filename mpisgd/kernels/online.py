"""Online SGD for k learners whose models are kept relative to a shared
reference r (docs/ALGORITHMS.md §5), so that the distance ‖w_l − r‖² a
synchronization protocol checks costs O(1).

Learner l holds w_l = α_l·r + s_l·v_l and a bias b_l. One step
w ← (1 − γλ)·w − γ·g·x becomes α ← (1 − γλ)α, s ← (1 − γλ)s,
v ← v − (γ·g/s)·x: scalars plus a sparse update of v. With R = ‖r‖²,
P = r·v and Q = ‖v‖² (P and Q updated on the touched coordinates):

    ‖w − r‖² = (α − 1)²R + 2(α − 1)·s·P + s²·Q + (b − r_b)²

Averaging (ASGD) keeps Σ_i w_i without dense work per step. Since
r changes only at a flush, Σ_i w_i = A + (Σα_i)·r + Σ_i s_i·v_i, and with
S_i = Σ_{j≤i} s_j and δ_i the change of v at step i,

    Σ_{i≤T} s_i·v_i = S_T·v_T − U_T,    U_T = Σ_{i≤T} S_{i−1}·δ_i

so U takes the same sparse update as v. A flush (at every change of r or
of v from outside, and when s is rescaled) folds these into the dense A.

Projections for variance monitoring (docs/ALGORITHMS.md §8): with J unit
vectors ξ_q = [ξ_q,w, ξ_q,b] (rows of Ξ, shape (J, n + 1)), PX_lq = ξ_q,w·v_l
takes the same sparse update as P, so that with RX_q = ξ_q,w·r

    ⟨w_l − r, ξ_q⟩ = (α − 1)·RX_q + s·PX_lq + (b − r_b)·ξ_q,b

costs O(J) per learner (``summaries``). J = 0 costs nothing.

Touched coordinates: learner l lists in T[l, :listed_l] (int32, repeats
allowed) every coordinate a step has moved v_l on since it last restarted at
r, so that v_l is 0 off the list; a full sync gathers v_l's non-zeros from
the list instead of all n coordinates (``mpisgd.kernels.sync.gather``).
A list that would outgrow T's width is dropped (listed_l = −1): the gather
then scans all n, which costs no more by then.

Update rules (``rule``): SGD as above, or the passive-aggressive rules of
Crammer, Dekel, Keshet, Shalev-Shwartz and Singer (2006) for the hinge loss
ℓ = max(0, 1 − y·p): w ← w + τ·y·x, b ← b + τ·y, with ‖x‖² counting the bias
feature, and τ = ℓ/‖x‖² (PA), min(C, ℓ/‖x‖²) (PA-I), ℓ/(‖x‖² + 1/(2C))
(PA-II). They leave α and s alone and move v on the coordinates of x only, so
the O(1) distance holds for them as for SGD.

Regularized dual averaging (Xiao 2010, ``rda``, docs/ALGORITHMS.md §7) with
β_t = γ√t and Ψ = λ₁‖w‖₁: the learner keeps u_t = −G_t/(γ√t), G_t = Σ_{i≤t} g_i·x_i
(the bias likewise, unthresholded), predicts with w_{t+1} = soft(u_t, λ₁√t/γ) and
steps u_t = √((t − 1)/t)·u_{t−1} − g_t·x_t/(γ√t): an SGD step with decay
√((t − 1)/t) and step 1/(γ√t), so u lives in the α, s, v coordinates and its
distance to r costs O(1). The protocols average u (the dual state).
"""

import math

import numpy as np
from numba import njit

from mpisgd.kernels.losses import loss_and_dloss
from mpisgd.kernels.schedules import eta

# update rules
SGD_RULE, PA, PA_I, PA_II, RDA = 0, 1, 2, 3, 4
RULES = {"sgd": SGD_RULE, "pa": PA, "pa-i": PA_I, "pa-ii": PA_II, "rda": RDA}

# learn_rows' status codes (the row concerned comes with them)
OK, BAD_LABEL, BAD_FEATURE, BAD_OWNER, DIVERGED, BAD_INDEX = 0, 1, 2, 3, 4, 5

# Fold s back into v (a dense O(n) step) when it falls below this; as in
# Bottou's svmsgd, whose bound keeps v, and so U, within 1e5 of w.
S_MIN = 1e-5

# learn_rows takes the learners' per-learner scalars packed, so that a call passes a handful of
# arrays (numba's dispatch costs about 35 ns an argument): one row of F (float64, (len(FLOATS), k))
# and of I (int64, (len(COUNTS), k)) each, and the options as two vectors, in these orders.
FLOATS = ("alpha", "s", "bias", "P", "Q", "alpha_sum", "s_sum", "bias_sum", "loss_sum")
COUNTS = ("steps", "n_avg", "errors", "examples", "listed")
CODES = ("loss", "schedule", "rule", "fit_intercept", "regularize_bias", "average", "classification",
         "ties_are_errors")  # int64: a code or a flag (0/1)
VALUES = ("loss_param", "eta0", "lam", "t0", "power", "aggressiveness", "gamma", "l1")  # float64


@njit(cache=True)
def flush_average(l, alpha_sum, s_sum, V, U, A, r):
    """A_l += (Σα)·r + S·v_l − U_l; the running sums restart at 0."""
    a, ss = alpha_sum[l], s_sum[l]
    for j in range(V.shape[1]):
        A[l, j] += a * r[j] + ss * V[l, j] - U[l, j]
        U[l, j] = 0.0
    alpha_sum[l] = 0.0
    s_sum[l] = 0.0


@njit(cache=True)
def exact_pq(l, V, r, P, Q):
    """Recompute P_l = r·v_l and Q_l = ‖v_l‖² densely."""
    p = 0.0
    q = 0.0
    for j in range(V.shape[1]):
        p += r[j] * V[l, j]
        q += V[l, j] * V[l, j]
    P[l] = p
    Q[l] = q


@njit(cache=True)
def exact_px(l, V, Xi, PX):
    """Recompute PX_lq = ξ_q,w·v_l densely."""
    n = V.shape[1]
    for q in range(Xi.shape[0]):
        p = 0.0
        for j in range(n):
            p += Xi[q, j] * V[l, j]
        PX[l, q] = p


@njit(cache=True)
def touched_from(l, V, T, listed):
    """Learner l's list of touched coordinates made from v_l: its non-zeros, or dropped (−1) if
    they outnumber T's width."""
    c = 0
    for j in range(V.shape[1]):
        if V[l, j] != 0.0:
            if c == T.shape[1]:
                listed[l] = -1
                return
            T[l, c] = j
            c += 1
    listed[l] = c


@njit(cache=True)
def set_models(ids, z, alpha, s, V, T, listed, bias, P, Q, A, U, alpha_sum, s_sum, r, average, Xi, PX):
    """Learners ids take the model z = [u, b, α] (w = α·r + u), s = 1."""
    n = V.shape[1]
    for l in ids:
        if average:
            flush_average(l, alpha_sum, s_sum, V, U, A, r)
        for j in range(n):
            V[l, j] = z[j]
        touched_from(l, V, T, listed)
        s[l] = 1.0
        bias[l] = z[n]
        alpha[l] = z[n + 1]
        exact_pq(l, V, r, P, Q)
        exact_px(l, V, Xi, PX)


@njit(cache=True)
def partial_restart(support, total, k_run, r_bias, alpha, s, V, T, listed, bias, P, Q, r):
    """Partial averaging's new reference (docs/ALGORITHMS.md §4.7) for S = support
    (increasing) and total = Σ d_S over the run's k_run learners: every learner
    here keeps u = d = w − r = (α − 1)·r + s·v off S and 0 on S, with α = s = 1,
    b = r_b; r_S ← r_S + total/k_run. A learner with α = s = 1 has u = v
    already: only v_S ← 0, and P = r·u and Q = ‖u‖² lose S's terms (r moves on
    S only, where u is 0), in O(|S|); its list of touched coordinates still
    holds v's non-zeros. Otherwise one pass writes u (vectorized), and one
    without branches its list (u's non-zeros), and P and Q in j's order, as
    ``exact_pq``. PX (fda) is left to the caller, whose directions change
    with r."""
    k, n = V.shape
    width = T.shape[1]
    for l in range(k):
        a, sl = alpha[l] - 1.0, s[l]
        v = V[l]
        if a == 0.0 and sl == 1.0:
            p, q = P[l], Q[l]
            for j in support:  # on S: w_l takes the mean, u = 0
                u = v[j]
                p -= r[j] * u
                q -= u * u
                v[j] = 0.0
        else:
            for j in range(n):
                v[j] = a * r[j] + sl * v[j]
            for j in support:
                v[j] = 0.0
            p, q, c = 0.0, 0.0, 0
            for j in range(n):
                u = v[j]
                p += r[j] * u
                q += u * u
                if c < width:  # the list outgrows T: dropped (``touched_from``), then only counted
                    T[l, c] = j
                c += u != 0.0
            listed[l] = c if c <= width else -1
        alpha[l] = 1.0
        s[l] = 1.0
        bias[l] = r_bias
        P[l] = p
        Q[l] = q
    for i in range(support.shape[0]):
        r[support[i]] += total[i] / k_run  # the mean of d_j over the run's learners


@njit(cache=True, fastmath={"reassoc"})  # the sum in any order, so that it vectorizes; NaN and inf kept
def divergence(z, r, r_bias):
    """‖w(z) − r‖² for a model z = [u, b, α] (w = α·r + u): ‖(α − 1)·r + u‖² + (b − r_b)²,
    in one pass."""
    n = r.shape[0]
    a = z[n + 1] - 1.0
    total = 0.0
    for j in range(n):
        d = a * r[j] + z[j]
        total += d * d
    db = z[n] - r_bias
    return total + db * db


@njit(cache=True)
def _at_reference(l, r_bias, alpha, s, bias, P, Q, PX):
    """Learner l's scalars at the reference r, once its v is 0: P = Q = 0, PX = 0, α = s = 1, b = r_b."""
    for q in range(PX.shape[1]):
        PX[l, q] = 0.0
    alpha[l] = 1.0
    s[l] = 1.0
    bias[l] = r_bias
    P[l] = 0.0
    Q[l] = 0.0


@njit(cache=True)
def restart(r_bias, alpha, s, V, listed, bias, P, Q, PX):
    """Every learner at the reference r: u = 0 (v = 0, so P = Q = 0 and PX = 0, nothing touched),
    α = s = 1, b = r_b."""
    k, n = V.shape
    for l in range(k):
        for j in range(n):
            V[l, j] = 0.0
        listed[l] = 0
        _at_reference(l, r_bias, alpha, s, bias, P, Q, PX)


@njit(cache=True)
def restart_at(idx, r_bias, alpha, s, V, listed, bias, P, Q, PX):
    """``restart`` of learners whose v is 0 off idx: v ← 0 on idx only."""
    for l in range(V.shape[0]):
        for j in idx:
            V[l, j] = 0.0
        listed[l] = 0
        _at_reference(l, r_bias, alpha, s, bias, P, Q, PX)


@njit(cache=True)
def gather_models(ids, alpha, s, V, bias, out, nnz):
    """out[i] = z of learner ids[i] = [s·v, b, α]; nnz[i] = the non-zeros of its v."""
    n = V.shape[1]
    for i in range(ids.shape[0]):
        l = ids[i]
        c = 0
        for j in range(n):
            out[i, j] = s[l] * V[l, j]
            c += V[l, j] != 0.0
        out[i, n] = bias[l]
        out[i, n + 1] = alpha[l]
        nnz[i] = c


@njit(cache=True)
def support(u, scale):
    """The non-zeros of u (NaN included): their indices (int32) and scale·u
    there, as np.flatnonzero(u) and scale·u[idx], in one pass over u."""
    idx = np.empty(u.shape[0], np.int32)
    m = 0
    for j in range(u.shape[0]):
        if u[j] != 0.0:
            idx[m] = j
            m += 1
    vals = np.empty(m)
    for i in range(m):
        vals[i] = scale * u[idx[i]]
    return idx[:m], vals


@njit(cache=True)
def mean_model(alpha, s, V, bias, out):
    """out = (1/k) Σ_l z_l with z_l = [s_l·v_l, b_l, α_l], summed over l in order."""
    k, n = V.shape
    out[:] = 0.0
    for l in range(k):
        for j in range(n):
            out[j] += s[l] * V[l, j]
        out[n] += bias[l]
        out[n + 1] += alpha[l]
    for j in range(n + 2):
        out[j] /= k


@njit(cache=True, nogil=True)  # lets the reader thread read ahead meanwhile
def learn_rows(indptr, indices, data, y, owner, check_end, threshold, F, I, V, T, A, U, r, Xi, PX, R, r_bias,
               codes, values):
    """Predict, charge, then learn from each row i with learner owner[i];
    after the first check_end[c] rows (ascending), check c: every learner's
    ‖w_l − r‖² ≤ threshold[c] (+inf: no check), stopping right after the
    first check that finds a violator (the dynamic protocol learns through
    its quiet checks this way).

    Returns (status, row, checks, violated): (OK, −1) or the first row that
    is bad input (a label outside ±1 for a classification loss, a non-finite
    feature value, an owner outside [0, k), a feature index outside [0, n)
    or row bounds outside ``indices``) or where the run diverged (a
    prediction or update that is not finite), nothing from that row on
    processed; the checks made, and whether the last of them found a
    violator (if not, every row was learned).

    The learners' scalars are the rows of F and I, the options codes and
    values, in the orders FLOATS, COUNTS, CODES and VALUES; T their lists of
    touched coordinates.
    """
    alpha, s, bias, P, Q, alpha_sum, s_sum, bias_sum, loss_sum = F[0], F[1], F[2], F[3], F[4], F[5], F[6], F[7], F[8]
    steps, n_avg, errors, examples, listed = I[0], I[1], I[2], I[3], I[4]
    loss_code, schedule, rule = codes[0], codes[1], codes[2]
    fit_intercept, regularize_bias, average = codes[3] != 0, codes[4] != 0, codes[5] != 0
    classification, ties_are_errors = codes[6] != 0, codes[7] != 0
    loss_param, eta0, lam, t0, power = values[0], values[1], values[2], values[3], values[4]
    aggressiveness, rda_gamma, rda_l1 = values[5], values[6], values[7]
    k, n = V.shape
    J = Xi.shape[0]
    room = T.shape[1]
    m = y.shape[0]
    made = 0  # the checks made
    n_checks = check_end.shape[0]
    for i in range(m + 1):
        while made < n_checks and check_end[made] == i:  # the checks due after i rows, inline: a call
            made += 1  # here that took arrays cost ~70 ns a row at b = 1, a third of the row's learning
            if threshold[made - 1] < math.inf:
                for l in range(k):
                    if distance(alpha[l], s[l], P[l], Q[l], bias[l], R, r_bias) > threshold[made - 1]:
                        return OK, -1, made, True
        if i == m:
            break
        l = owner[i]
        if l < 0 or l >= k:
            return BAD_OWNER, i, made, False
        yi = y[i]
        if classification and abs(yi) != 1.0:
            return BAD_LABEL, i, made, False
        lo, hi = indptr[i], indptr[i + 1]
        if not 0 <= lo <= hi <= min(indices.shape[0], data.shape[0]):
            return BAD_INDEX, i, made, False
        rx = 0.0
        vx = 0.0
        for jj in range(lo, hi):
            x = data[jj]
            j = indices[jj]
            if not 0 <= j < n:  # every later use of j is in this row: checked once here
                return BAD_INDEX, i, made, False
            rx += r[j] * x
            vx += V[l, j] * x
        p = alpha[l] * rx + s[l] * vx + bias[l]  # p = w·x + b
        if rule == RDA and rda_l1 > 0.0:  # p = soft(u, θ)·x + b with θ = λ₁√(t − 1)/γ, on the coordinates of x
            theta = rda_l1 * math.sqrt(steps[l]) / rda_gamma
            wx = 0.0
            for jj in range(lo, hi):
                j = indices[jj]
                wx += soft(alpha[l] * r[j] + s[l] * V[l, j], theta) * data[jj]
            p = wx + bias[l]
        if not math.isfinite(p):  # a non-finite feature always makes p so (0·inf is NaN)
            for jj in range(lo, hi):
                if not math.isfinite(data[jj]):
                    return BAD_FEATURE, i, made, False
            return DIVERGED, i, made, False
        lv, g = loss_and_dloss(loss_code, p, yi, loss_param)
        loss_sum[l] += lv
        if classification and (p * yi < 0.0 or (p == 0.0 and ties_are_errors)):
            errors[l] += 1
        examples[l] += 1
        steps[l] += 1
        if rule == SGD_RULE:
            gamma = eta(schedule, steps[l], eta0, lam, t0, power)
            decay = 1.0 - gamma * lam
            step = gamma * g  # w ← (1 − γλ)w − step·x
        elif rule == RDA:
            t = float(steps[l])
            decay = math.sqrt((t - 1.0) / t)  # u_t = √((t − 1)/t)·u_{t−1} − g·x/(γ√t)
            step = g / (rda_gamma * math.sqrt(t))
        else:
            decay = 1.0
            xx = 1.0 if fit_intercept else 0.0  # ‖x‖², the bias feature included
            for jj in range(lo, hi):
                xx += data[jj] * data[jj]
            step = -pa_tau(rule, lv, xx, aggressiveness) * yi
        if not (decay >= 0.0 and math.isfinite(step)):
            return DIVERGED, i, made, False
        if decay == 0.0:  # γλ = 1 (1/(λt) at t = 1): w ← −γg·x forgets w entirely
            if average:
                flush_average(l, alpha_sum, s_sum, V, U, A, r)
            V[l, :] = 0.0
            alpha[l] = 0.0
            s[l] = 1.0
            P[l] = 0.0
            Q[l] = 0.0
            PX[l, :] = 0.0
        else:
            alpha[l] *= decay  # α ← (1 − γλ)α
            s[l] *= decay  # s ← (1 − γλ)s
        if fit_intercept:
            if regularize_bias or rule == RDA:
                bias[l] *= decay
            bias[l] -= step  # b ← b − γg (SGD), b + τy (PA), b·√((t − 1)/t) − g/(γ√t) (RDA)
        if step != 0.0:
            c = -step / s[l]  # v ← v − (γg/s)·x, or v + (τy/s)·x
            dp = 0.0  # P and Q change by r·δ and 2v·δ + ‖δ‖², summed locally (in registers)
            dq = 0.0
            for jj in range(lo, hi):
                j = indices[jj]
                dv = c * data[jj]
                vj = V[l, j]
                dp += r[j] * dv
                dq += dv * (2.0 * vj + dv)
                V[l, j] = vj + dv
            P[l] += dp
            Q[l] += dq
            end = listed[l]  # x's coordinates appended to the list, or the list dropped
            if end >= 0:
                if end + (hi - lo) > room:
                    listed[l] = -1
                else:
                    T[l, end : end + (hi - lo)] = indices[lo:hi]
                    listed[l] = end + (hi - lo)
            for q in range(J):  # PX changes by ξ_q,w·δ (a loop of its own: J = 0 leaves the one above as it was)
                dpx = 0.0
                for jj in range(lo, hi):
                    dpx += Xi[q, indices[jj]] * (c * data[jj])
                PX[l, q] += dpx
            if average:
                prev = s_sum[l]  # S_{i−1}
                for jj in range(lo, hi):
                    U[l, indices[jj]] += prev * (c * data[jj])  # U += S_{i−1}·δ_i
        if average:
            alpha_sum[l] += alpha[l]
            s_sum[l] += s[l]
            bias_sum[l] += bias[l]
            n_avg[l] += 1
        if s[l] < S_MIN:  # fold s into v: w unchanged, s back to 1
            if average:
                flush_average(l, alpha_sum, s_sum, V, U, A, r)
            for j in range(V.shape[1]):
                V[l, j] *= s[l]
            s[l] = 1.0
            exact_pq(l, V, r, P, Q)
            exact_px(l, V, Xi, PX)
    return OK, -1, made, False


@njit(cache=True, inline="always")
def soft(u, theta):
    """sign(u)·max(|u| − θ, 0)."""
    if u > theta:
        return u - theta
    if u < -theta:
        return u + theta
    return 0.0


@njit(cache=True, inline="always")
def pa_tau(rule, hinge, xx, C):
    """τ of PA, PA-I, PA-II for the hinge loss ``hinge`` and ‖x‖² = ``xx``."""
    if rule == PA_II:
        return hinge / (xx + 0.5 / C)
    if hinge == 0.0 or xx == 0.0:
        return 0.0
    if rule == PA_I:
        return min(C, hinge / xx)
    return hinge / xx


@njit(cache=True, inline="always")
def distance(alpha, s, P, Q, bias, R, r_bias):
    """‖w − r‖² of one learner from its scalars: (α − 1)²R + 2(α − 1)·s·P + s²·Q + (b − r_b)²."""
    a1 = alpha - 1.0
    db = bias - r_bias
    return a1 * a1 * R + 2.0 * a1 * s * P + s * s * Q + db * db


@njit(cache=True)
def distances(alpha, s, P, Q, bias, R, r_bias, out):
    """out_l = ‖w_l − r‖², in O(1) per learner."""
    for l in range(alpha.shape[0]):
        out[l] = distance(alpha[l], s[l], P[l], Q[l], bias[l], R, r_bias)


@njit(cache=True)
def summaries(alpha, s, P, Q, bias, R, r_bias, PX, RX, Xi, out):
    """out_l = [‖w_l − r‖², ⟨w_l − r, ξ_1⟩, …, ⟨w_l − r, ξ_J⟩], in O(J) per learner."""
    n = Xi.shape[1] - 1
    for l in range(alpha.shape[0]):
        a1 = alpha[l] - 1.0
        db = bias[l] - r_bias
        out[l, 0] = distance(alpha[l], s[l], P[l], Q[l], bias[l], R, r_bias)
        for q in range(Xi.shape[0]):
            out[l, 1 + q] = a1 * RX[q] + s[l] * PX[l, q] + db * Xi[q, n]  # ⟨(α − 1)r + s·v, ξ_w⟩ + (b − r_b)ξ_b
