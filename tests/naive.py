"""Slow, obviously correct dense NumPy twins of the numba kernels.

Each section belongs to the developer of the kernels it mirrors.
"""

import math

import numpy as np
from scipy.special import expit

# ============================================================================
# Single-process learner: losses, schedules, Bottou SGD/ASGD, Dekel SGD/ASGD/CASGD
# ============================================================================


def naive_loss(name, p, y, param=0.0):
    """ℓ(p, y) straight from the table of docs/ALGORITHMS.md §1."""
    if name == "hinge":
        return max(0.0, 1.0 - y * p)
    if name == "log":
        return math.log(1.0 + math.exp(-y * p)) if abs(p) < 30 else np.logaddexp(0.0, -y * p)
    if name == "squared_hinge":
        return 0.5 * max(0.0, 1.0 - y * p) ** 2
    if name == "modified_huber":
        return max(0.0, 1.0 - y * p) ** 2 if y * p >= -1 else -4.0 * y * p
    if name == "perceptron":
        return max(0.0, -y * p)
    if name == "squared":
        return 0.5 * (p - y) ** 2
    if name == "absolute":
        return abs(p - y)
    if name == "huber":
        r = abs(p - y)
        return 0.5 * r * r if r <= param else param * (r - param / 2)
    if name == "epsilon_insensitive":
        return max(0.0, abs(p - y) - param)
    raise KeyError(name)


def naive_dloss(name, p, y, param=0.0):
    """∂ℓ/∂p from the same table."""
    if name == "hinge":
        return -y if y * p < 1 else 0.0
    if name == "log":
        return -y * float(expit(-y * p))  # −y/(1 + e^{yp})
    if name == "squared_hinge":
        return -y * max(0.0, 1.0 - y * p)
    if name == "modified_huber":
        return -2.0 * y * max(0.0, 1.0 - y * p) if y * p >= -1 else -4.0 * y
    if name == "perceptron":
        return -y if y * p <= 0 else 0.0
    if name == "squared":
        return p - y
    if name == "absolute":
        return float(np.sign(p - y))
    if name == "huber":
        return float(np.clip(p - y, -param, param))
    if name == "epsilon_insensitive":
        return float(np.sign(p - y)) if abs(p - y) > param else 0.0
    raise KeyError(name)


def naive_eta(name, t, eta0, lam, t0, power):
    """γ_t of docs/ALGORITHMS.md §3."""
    return {
        "optimal": lambda: 1.0 / (lam * (t0 + t)),
        "bottou": lambda: eta0 / (1.0 + lam * eta0 * t),
        "xu": lambda: eta0 * (1.0 + lam * eta0 * t) ** -0.75,
        "constant": lambda: eta0,
        "invscaling": lambda: eta0 / t**power,
    }[name]()


def naive_sgd(X, y, order, loss, param, schedule, eta0, lam, t0, power, bias_gain,
              fit_intercept, regularize_bias, average, avg_start, sw=None):
    """Dense SGD/ASGD: w ← (1 − γλ)w − γ g x, ā ← (1 − μ)ā + μ w, g = s_i ℓ'
    (``sw``: the examples' weights s_i, default 1).

    Returns (w, b, ā, b̄, sum of losses before each step, errors)."""
    w = np.zeros(X.shape[1])
    b = 0.0
    wa = np.zeros(X.shape[1])
    ba = 0.0
    total = 0.0
    errors = 0
    for t, i in enumerate(order, start=1):
        x = X[i]
        gamma = naive_eta(schedule, t, eta0, lam, t0, power)
        s = 1.0 if sw is None else sw[i]
        p = w @ x + b
        total += s * naive_loss(loss, p, y[i], param)
        errors += y[i] * p <= 0
        g = s * naive_dloss(loss, p, y[i], param)
        w = (1.0 - gamma * lam) * w - gamma * g * x
        if fit_intercept:
            gb = gamma * bias_gain
            b = (1.0 - gb * lam) * b if regularize_bias else b
            b -= gb * g
        mu = 1.0 if (not average or t <= avg_start) else 1.0 / (1.0 + t - avg_start)
        wa = (1.0 - mu) * wa + mu * w
        ba = (1.0 - mu) * ba + mu * b
    return w, b, wa, ba, total, errors


def naive_dekel(X, y, order, loss, param, lam, variant, bias_mode, sw=None):
    """Dense SGD with η_t = 1/(λt) on [x, 1] (or on [x − x̄, 1] for CASGD),
    returning the last iterate (SGD) or the average (ASGD, CASGD) as a
    predictor for raw x. bias_mode: 0 none, 1 regularized, 2 unregularized.
    The gradient is s_i ℓ' (``sw``: the examples' weights s_i, default 1).

    Returns (w, b, sum of losses before each step, errors)."""
    n = X.shape[1]
    xbar = X.mean(axis=0) if variant == "casgd" else np.zeros(n)
    w = np.zeros(n)
    b = 0.0
    wsum = np.zeros(n)
    bsum = 0.0
    total = 0.0
    errors = 0
    for t, i in enumerate(order, start=1):
        x = X[i] - xbar
        s = 1.0 if sw is None else sw[i]
        p = w @ x + b
        total += s * naive_loss(loss, p, y[i], param)
        errors += y[i] * p <= 0
        g = s * naive_dloss(loss, p, y[i], param)
        eta = 1.0 / (lam * t)
        w = (1.0 - eta * lam) * w - eta * g * x
        if bias_mode == 1:
            b = (1.0 - eta * lam) * b - eta * g
        elif bias_mode == 2:
            b = b - eta * g
        wsum += w
        bsum += b
    if variant != "sgd":
        w = wsum / len(order)
        b = bsum / len(order)
    # predictor for raw x: w·(x − x̄) + b = w·x + (b − w·x̄)
    return w, b - w @ xbar, total, errors


# ============================================================================
# Online learners relative to a reference (mpisgd.learners): dense twin
# ============================================================================


class NaiveOnline:
    """k dense models w (k, n), biases b (k,), reference (r, r_b)."""

    def __init__(self, k, n, loss, param, schedule, eta0, lam, t0, power, fit_intercept, regularize_bias,
                 ties_are_errors):  # fmt: skip
        self.w = np.zeros((k, n))
        self.b = np.zeros(k)
        self.r = np.zeros(n)
        self.r_b = 0.0
        self.t = np.zeros(k, dtype=int)
        self.sum_w = np.zeros((k, n))
        self.sum_b = np.zeros(k)
        self.loss_sum = np.zeros(k)
        self.errors = np.zeros(k, dtype=int)
        self.cfg = (loss, param, schedule, eta0, lam, t0, power, fit_intercept, regularize_bias, ties_are_errors)

    def learn(self, X, y, owner):
        loss, param, schedule, eta0, lam, t0, power, fit_intercept, regularize_bias, ties = self.cfg
        X = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
        for x, yi, l in zip(X, y, owner):
            p = self.w[l] @ x + self.b[l]
            self.loss_sum[l] += naive_loss(loss, p, yi, param)
            classification = loss in ("hinge", "log", "squared_hinge", "modified_huber", "perceptron")
            if classification and (p * yi < 0 or (p == 0 and ties)):
                self.errors[l] += 1
            self.t[l] += 1
            gamma = naive_eta(schedule, self.t[l], eta0, lam, t0, power)
            g = naive_dloss(loss, p, yi, param)
            self.w[l] = (1 - gamma * lam) * self.w[l] - gamma * g * x
            if fit_intercept:
                if regularize_bias:
                    self.b[l] *= 1 - gamma * lam
                self.b[l] -= gamma * g
            self.sum_w[l] += self.w[l]
            self.sum_b[l] += self.b[l]

    def distances(self):
        return ((self.w - self.r) ** 2).sum(axis=1) + (self.b - self.r_b) ** 2

    def dense(self, z):
        n = len(self.r)
        return z[n + 1] * self.r + z[:n], z[n]

    def set_models(self, ids, z):
        w, b = self.dense(z)
        self.w[ids] = w
        self.b[ids] = b

    def set_reference(self, z):
        w, b = self.dense(z)
        self.w[:] = w
        self.b[:] = b
        self.r, self.r_b = w.copy(), b


# ============================================================================
# Data pipeline (mpisgd.data): a slow, line-by-line LIBSVM parser
# ============================================================================


def naive_parse_svmlight(text, zero_based="auto"):
    """Parse LIBSVM text with str.split, one line at a time.

    Returns (rows, labels, zero_based_used): rows a list of sorted
    [(index, value)] with zero-based indices. Blank and comment lines are
    skipped, qid fields ignored, unsorted rows sorted (repeats are an error)."""
    rows, labels = [], []
    for line in text.replace("\r", " ").split("\n"):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        labels.append(float(parts[0]))
        row = []
        for tok in parts[1:]:
            if tok.startswith("qid:"):
                continue
            i, v = tok.split(":")
            row.append((int(i), float(v)))
        row.sort()
        if len({i for i, _ in row}) != len(row):
            raise ValueError("duplicate index")
        rows.append(row)
    if zero_based == "auto":
        zero_based = any(i == 0 for row in rows for i, _ in row)
    shift = 0 if zero_based else 1
    return [[(i - shift, v) for i, v in row] for row in rows], labels, zero_based


def naive_csr(rows, n_features):
    """Dense matrix of naive_parse_svmlight's rows."""
    X = np.zeros((len(rows), n_features))
    for r, row in enumerate(rows):
        for i, v in row:
            X[r, i] = v
    return X


# ============================================================================
# MPI runner: k learners that all step from the mean model (static, b = 1)
# ============================================================================


def naive_static_mean(Xs, ys, loss, eta, lam):
    """Static sync with b = 1, constant step η, bias unregularized: at every
    round t, each learner l predicts x_{t,l} with the mean model (w̄, b̄), is
    charged, steps w_l = (1 − ηλ)w̄ − η g x, b_l = b̄ − η g, and the new mean
    is (1/k)Σ_l. Xs: k dense (T_l, n) arrays (shorter ones stop learning but
    keep their model in the mean). Returns (w̄, b̄, errors, loss_sum)."""
    k, n = len(Xs), Xs[0].shape[1]
    T = max(len(y) for y in ys)
    w, b = np.zeros(n), 0.0
    errors, loss_sum = 0, 0.0
    for t in range(T):
        ws, bs = [], []
        for l in range(k):
            if t >= len(ys[l]):
                ws.append(w.copy())
                bs.append(b)
                continue
            x, yl = Xs[l][t], ys[l][t]
            p = float(w @ x + b)
            loss_sum += naive_loss(loss, p, yl)
            errors += int(p * yl <= 0)
            g = naive_dloss(loss, p, yl)
            ws.append((1 - eta * lam) * w - eta * g * x)
            bs.append(b - eta * g)
        w, b = np.mean(ws, axis=0), float(np.mean(bs))
    return w, b, errors, loss_sum


# ============================================================================
# Issue 15: SGD-QN, the Lasso by u − v, online k-means (helper D)
# ============================================================================


def naive_sgdqn(X, y, order, loss, param, lam, skip, gamma0, bias_gain, fit_intercept,
                regularize_bias, sw=None):
    """Dense SGD-QN of the erratum, line by line: the secant ratio from two full
    gradients ∇_t(w) = λw + s_i ℓ'(w·x + b) x, r_i = λ where w'_i = w_i
    (``sw``: the examples' weights s_i, default 1).

    Returns (w, b, B, sum of losses before each step, errors)."""
    n = X.shape[1]
    w = np.zeros(n)
    b = 0.0
    B = np.full(n, gamma0)
    beta = gamma0
    count = skip
    update_b = False
    total = 0.0
    errors = 0

    def grad(w, b, x, yi, s):
        return lam * w + s * naive_dloss(loss, w @ x + b, yi, param) * x

    for i in order:
        x = X[i]
        s = 1.0 if sw is None else sw[i]
        p = w @ x + b
        total += s * naive_loss(loss, p, y[i], param)
        errors += y[i] * p <= 0
        g = s * naive_dloss(loss, p, y[i], param)
        w_new = w - g * B * x
        b_new = b - bias_gain * beta * g if fit_intercept else b
        if update_b:
            dw = w_new - w
            dg = grad(w_new, b_new, x, y[i], s) - grad(w, b, x, y[i], s)
            r = np.full(n, lam)
            moved = dw != 0
            r[moved] = dg[moved] / dw[moved]
            r = np.clip(r, lam, 100 * lam)
            B = B / (1 + skip * B * r)
            beta = beta / (1 + skip * beta * lam)
            update_b = False
        w, b = w_new, b_new
        count -= 1
        if count <= 0:
            count = skip
            update_b = True
            w = w - skip * lam * B * w
            if fit_intercept and regularize_bias:
                b *= 1 - skip * lam * bias_gain * beta
    return w, b, B, total, errors


def naive_lasso(X, y, order, loss, param, schedule, eta0, lam, l1_ratio, t0, power, bias_gain,
                fit_intercept, sw=None):
    """Dense SGD on w = u − v (Bottou's Table 1 Lasso, with an L2 part for the
    elastic net) with the cumulative penalty: every coordinate of u and v and
    what it owes, o (the penalty it could not take and the part of a step below
    0), every step. The gradient is s_i ℓ' (``sw``: the examples' weights s_i,
    default 1).

    Returns (w, b, sum of losses before each step, errors)."""
    n = X.shape[1]
    u, v = np.zeros(n), np.zeros(n)
    ou, ov = np.zeros(n), np.zeros(n)
    b = 0.0
    total = 0.0
    errors = 0
    lam1, lam2 = lam * l1_ratio, lam * (1 - l1_ratio)
    for t, i in enumerate(order, start=1):
        x = X[i]
        s = 1.0 if sw is None else sw[i]
        p = (u - v) @ x + b
        total += s * naive_loss(loss, p, y[i], param)
        errors += y[i] * p <= 0
        g = s * naive_dloss(loss, p, y[i], param)
        gamma = naive_eta(schedule, t, eta0, lam, t0, power)
        a, c = 1 - gamma * lam2, gamma * lam1
        assert a > 0
        u, v, ou, ov = a * u, a * v, a * ou + c, a * ov + c
        zu, zv = u - gamma * g * x, v + gamma * g * x
        u, ou = np.maximum(0.0, zu), ou + np.maximum(0.0, -zu)
        v, ov = np.maximum(0.0, zv), ov + np.maximum(0.0, -zv)
        paid_u, paid_v = np.minimum(u, ou), np.minimum(v, ov)
        u, ou = u - paid_u, ou - paid_u
        v, ov = v - paid_v, ov - paid_v
        if fit_intercept:
            b -= gamma * bias_gain * g
    return u - v, b, total, errors


def naive_kmeans(X, order, centers, counts):
    """Dense MacQueen: k* = argmin ‖z − w_k‖², n_k* += 1, w_k* += (z − w_k*)/n_k*.

    Returns (centers, counts, sum of ‖z − w_k*‖² before each update)."""
    W = np.array(centers, dtype=float)
    n = np.array(counts, dtype=float)
    total = 0.0
    for i in order:
        z = X[i]
        d = ((W - z) ** 2).sum(axis=1)
        k = int(np.argmin(d))
        total += d[k]
        n[k] += 1
        W[k] += (z - W[k]) / n[k]
    return W, n, total


def naive_pa(X, y, owner, k, rule, C, fit_intercept):
    """Dense passive-aggressive learners (Crammer et al. 2006, hinge loss): learner
    owner[i] predicts p = w·x + b, then w ← w + τ y x, b ← b + τ y with
    τ = ℓ/‖x‖² (pa), min(C, ℓ/‖x‖²) (pa-i), ℓ/(‖x‖² + 1/(2C)) (pa-ii), ‖x‖²
    counting the bias feature. Returns (w (k, n), b (k,))."""
    X = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
    w = np.zeros((k, X.shape[1]))
    b = np.zeros(k)
    for x, yi, l in zip(X, y, owner):
        hinge = max(0.0, 1.0 - yi * (w[l] @ x + b[l]))
        sq = x @ x + (1.0 if fit_intercept else 0.0)
        if rule == "pa-ii":
            tau = hinge / (sq + 1.0 / (2.0 * C))
        elif hinge == 0.0 or sq == 0.0:
            tau = 0.0
        else:
            tau = min(C, hinge / sq) if rule == "pa-i" else hinge / sq
        w[l] += tau * yi * x
        if fit_intercept:
            b[l] += tau * yi
    return w, b


def naive_rda(X, y, k, loss, gamma, l1, fit_intercept=True, period=0, param=0.0, ties_are_errors=True):
    """Dense regularized dual averaging (Xiao 2010, β_t = γ√t, Ψ = λ‖w‖₁) for k
    learners on round-major rows (row i is learner i mod k's): each keeps the
    gradient sum G (and a for the bias) and t, predicts with
    w_t = −(√(t−1)/γ)·soft(G/(t−1), λ), b_t = −a/(γ√(t−1)) (0 at t = 1), then adds
    g·x to G. With period b > 0, after every b rounds every learner takes the mean
    of the G and a (the static protocol on the dual state). Returns
    (w (k, n) after the last step, b (k,), loss sums, errors)."""
    X = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
    n = X.shape[1]
    G, a, t = np.zeros((k, n)), np.zeros(k), 0
    loss_sum, errors = np.zeros(k), np.zeros(k, dtype=int)

    def model(l, t):
        if t == 0:
            return np.zeros(n), 0.0
        gbar = G[l] / t
        return -(np.sqrt(t) / gamma) * np.sign(gbar) * np.maximum(np.abs(gbar) - l1, 0.0), -a[l] / (gamma * np.sqrt(t))

    for i0 in range(0, len(y), k):
        for l in range(k):
            x, yi = X[i0 + l], y[i0 + l]
            w, b = model(l, t)
            p = w @ x + b
            loss_sum[l] += naive_loss(loss, p, yi, param)
            if p * yi < 0 or (p == 0 and ties_are_errors):
                errors[l] += 1
            g = naive_dloss(loss, p, yi, param)
            G[l] += g * x
            if fit_intercept:
                a[l] += g
        t += 1
        if period and t % period == 0:
            G[:] = G.mean(axis=0)
            a[:] = a.mean()
    w, b = zip(*(model(l, t) for l in range(k)))
    return np.array(w), np.array(b), loss_sum, errors


# ============================================================================
# Variance monitoring (fda): projections of w − r, the variance and its bound
# ============================================================================


def naive_fda_summaries(w, b, r, r_b, directions):
    """Rows [‖D_l‖², ⟨D_l, ξ_1⟩, …] with D_l = [w_l − r, b_l − r_b] and ξ_q the
    rows of ``directions`` (J, n + 1), densely."""
    D = np.column_stack([w - r, b - r_b])
    return np.column_stack([(D**2).sum(axis=1), D @ np.asarray(directions).T])


def naive_projector(changes, J):
    """The orthogonal projector onto the span of the newest J reference changes
    (``changes``: newest first, each of length n + 1), from a QR factorisation."""
    kept = [c for c in changes if np.linalg.norm(c) > 0][:J]
    if not kept:
        return np.zeros((len(changes[0]),) * 2) if changes else None
    Q, _R = np.linalg.qr(np.column_stack(kept))
    return Q @ Q.T


def naive_variance(w, b):
    """δ = (1/k) Σ_l ‖[w_l, b_l] − mean‖²."""
    W = np.column_stack([w, b])
    return float(((W - W.mean(axis=0)) ** 2).sum(axis=1).mean())


def naive_partial_support(d, budget):
    """S_l of partial averaging, by brute force over the sort: the fewest
    coordinates of largest |d_j| (ties: the larger j first) whose complement
    has Σ d_j² ≤ budget; increasing."""
    nz = np.flatnonzero(d)
    order = nz[np.argsort(d[nz] ** 2, kind="stable")]  # smallest first
    for m in range(len(order) + 1):
        rest = order[: len(order) - m]
        if np.sum(d[rest] ** 2) <= budget:
            return np.sort(order[len(order) - m :])
    return np.sort(order)


def naive_partial_restart(alpha, s, V, r, support, mean):
    """Partial averaging's new reference for learners (α, s, v) relative to r:
    (u = (α − 1)·r + s·v with 0 on S, r' = r + mean on S, P = r'·u, Q = ‖u‖²)."""
    U = (alpha - 1.0)[:, None] * r + s[:, None] * V
    U[:, support] = 0.0
    r2 = r.copy()
    r2[support] += mean
    return U, r2, U @ r2, (U * U).sum(axis=1)


def naive_partial_balance(W, b, r, r_b, sent, budget):
    """A balancing of partial models, from the learners' dense weights W (rows
    of B's members), biases b and the reference (r, r_b): each member l sends
    d_l on S_l = ``sent[l]`` (a set of coordinates) plus the fewest of its
    other coordinates of largest |d_lj| leaving ≤ budget off S_l. Returns the
    members' weights and biases after the balancing (each j of S_l: the mean
    over the members that sent j; the mean bias) and each one's ‖w_l − r‖²."""
    d = W - r
    chosen = []
    for l in range(len(W)):
        rest = d[l].copy()
        rest[sorted(sent[l])] = 0.0
        chosen.append(set(sent[l]) | set(naive_partial_support(rest, budget).tolist()))
    W2, b2 = W.copy(), np.full(len(b), b.mean())
    for j in set().union(*chosen):
        senders = [l for l in range(len(W)) if j in chosen[l]]
        W2[senders, j] = W[senders, j].mean()
    return W2, b2, ((W2 - r) ** 2).sum(axis=1) + (b2 - r_b) ** 2


def naive_gather(v, listed, scale):
    """A full sync's pairs of a v that is 0 off the coordinates ``listed``
    (repeats allowed; None: every coordinate): (the non-zeros of v, the
    indices j of the non-zeros of u = scale·v in increasing j, u there)."""
    j = np.arange(len(v)) if listed is None else np.unique(listed)
    with np.errstate(invalid="ignore", under="ignore", over="ignore"):
        u = scale * v[j]
    return int(np.count_nonzero(v[j])), j[u != 0], u[u != 0]
