"""Dekel's sparse SGD, ASGD and CASGD with step 1/(λt) (docs/ALGORITHMS.md §2).

No weight vector is kept: the kernel accumulates the gradient sum v, the
harmonic gradient sum u (ASGD, CASGD) and scalars, and the model is read off
at the end by one dense combination (``weights``). Requires λ > 0.

Bias modes: NO_BIAS; REGULARIZED (b is trained as the weight of a constant
feature 1, Lemma 1 gives b_t = −a_t/(λt)); UNREGULARIZED (b_t = b_{t−1} −
g_t/(λt), kept as a scalar with its running sum for the average).

The scalar state lives in the float64 array ``st`` indexed by the constants
below, so that ``partial_fit`` resumes exactly.
"""

from numba import njit, uint32

from mpisgd.kernels.losses import loss_and_dloss
# CSR column indices are ≥ 0: the kernels index with ``uint32(indices[k])``
# so that numba emits no negative-index wraparound test (about 10 % per epoch).

SGD = 0
ASGD = 1
CASGD = 2
VARIANTS = {"dekel-sgd": SGD, "dekel-asgd": ASGD, "dekel-casgd": CASGD}

NO_BIAS = 0
REGULARIZED = 1
UNREGULARIZED = 2

# Indices into the scalar state array ``st``.
T = 0  # examples seen so far
A_SUM = 1  # a_t = Σ g_i
C_SUM = 2  # c_t = Σ a_i / i
H = 3  # h_t = Σ_{j≤t} 1/j
Z_SUM = 4  # z_t = v_t·x̄ (CASGD projection sum)
S_SUM = 5  # s_t = Σ z_i / i
B = 6  # unregularized bias b_t
B_SUM = 7  # Σ_{i≤t} b_i (unregularized bias)
N_STATE = 8


@njit(cache=True, nogil=True)  # lets the reader thread run during an epoch
def dekel_epoch(
    indptr, indices, data, y, sw, order, loss_code, loss_param, lam, variant, bias_mode,
    xbar_dot, xbar_sq, v, u, st,
):
    """One pass over the rows ``order``; ``u`` may be empty for SGD.

    CASGD: ``xbar_dot[i]`` = x̄·x_i for every row (constant over the epochs, so
    computed once by the caller: no dense x̄ is touched inside the loop) and
    ``xbar_sq`` = ‖x̄‖²; SGD and ASGD ignore both (``xbar_dot`` may be empty).

    g_t is the weighted gradient s_i ℓ'(p, y), s_i = ``sw[i]`` the example's weight.
    Returns (sum of the weighted losses s_i ℓ at the predictions made before each
    update, number of those predictions with y·p ≤ 0).
    """
    # The scalars live in locals inside the loop (LLVM cannot keep array
    # elements of ``st`` in registers across the stores into v and u).
    t = st[T]
    a = st[A_SUM]
    c = st[C_SUM]
    h = st[H]
    z = st[Z_SUM]
    s_sum = st[S_SUM]
    b = st[B]
    b_sum = st[B_SUM]
    loss_sum = 0.0
    n_err = 0
    centered = variant == CASGD
    averaged = variant != SGD
    for r in range(order.shape[0]):
        i = order[r]
        lo = indptr[i]
        hi = indptr[i + 1]
        vx = 0.0  # v_{t−1}·x_t
        for k in range(lo, hi):
            vx += v[uint32(indices[k])] * data[k]
        xx = xbar_dot[i] if centered else 0.0  # x̄·x_t
        p = 0.0  # w_0 = 0, b_0 = 0
        if t > 0.0:
            lt = lam * t  # t still counts the examples before this one: t − 1 below
            # w_{t−1}·x_t = −(v_{t−1}·x_t − a_{t−1} x̄·x_t) / (λ(t−1))   (x̄ = 0 unless CASGD)
            p = -(vx - a * xx) / lt
            if bias_mode == REGULARIZED:
                p -= a / lt  # b_{t−1} = −a_{t−1} / (λ(t−1))
            elif bias_mode == UNREGULARIZED:
                p += b
            if centered:
                # implicit centering: b' = b − w·x̄ = b + (z − a‖x̄‖²) / (λ(t−1))
                p += (z - a * xbar_sq) / lt
        t += 1.0
        yi = y[i]
        lv, g = loss_and_dloss(loss_code, p, yi, loss_param)
        si = sw[i]
        loss_sum += si * lv
        g *= si  # the weighted example's gradient s_i ℓ'
        if yi * p <= 0.0:
            n_err += 1
        if g != 0.0:
            if averaged:
                hg = h * g
                for k in range(lo, hi):
                    j = uint32(indices[k])
                    v[j] += g * data[k]  # v_t = v_{t−1} + g x_t
                    u[j] += hg * data[k]  # u_t = u_{t−1} + h_{t−1} g x_t
            else:
                for k in range(lo, hi):
                    v[uint32(indices[k])] += g * data[k]  # v_t = v_{t−1} + g x_t
        a += g  # a_t = a_{t−1} + g_t
        h += 1.0 / t  # h_t = h_{t−1} + 1/t
        c += a / t  # c_t = c_{t−1} + a_t/t
        if centered:
            z += g * xx  # z_t = z_{t−1} + g_t (x_t·x̄)
            s_sum += z / t  # s_t = s_{t−1} + z_t/t
        if bias_mode == UNREGULARIZED:
            b -= g / (lam * t)  # b_t = b_{t−1} − g_t/(λt)
            b_sum += b
    st[T] = t
    st[A_SUM] = a
    st[C_SUM] = c
    st[H] = h
    st[Z_SUM] = z
    st[S_SUM] = s_sum
    st[B] = b
    st[B_SUM] = b_sum
    return loss_sum, n_err


def weights(variant, bias_mode, lam, xbar, xbar_sq, v, u, st):
    """The returned predictor (w, b) for raw x: the last iterate for SGD,
    the average w̄_t, b̄_t for ASGD and CASGD (one dense combination)."""
    t = st[T]
    if t == 0:
        return 0.0 * v, 0.0
    lt = lam * t
    if variant == SGD:
        w = -v / lt  # w_t = −v_t/(λt)
        b = {NO_BIAS: 0.0, REGULARIZED: -st[A_SUM] / lt, UNREGULARIZED: st[B]}[bias_mode]
        return w, b
    # w̄_t = −(h_t v_t − u_t) / (λt)
    w = -(st[H] * v - u) / lt
    c = st[C_SUM]
    b = {NO_BIAS: 0.0, REGULARIZED: -c / lt, UNREGULARIZED: st[B_SUM] / t}[bias_mode]
    if variant == CASGD:
        w += (c / lt) * xbar  # w̄_t = −[(h_t v_t − u_t) − c_t x̄] / (λt)
        b += (st[S_SUM] - c * xbar_sq) / lt  # b̄' = b̄ + (s_t − c_t ‖x̄‖²) / (λt)
    return w, float(b)
