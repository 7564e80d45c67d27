"""Seeded synthetic data: the streams of docs/ALGORITHMS.md §4 and the RCV1-scale set.

Every random number is a counter-based hash (splitmix64 of a key built from
the seed, a tag and counters), so any piece can be produced on its own, in
any process, in any order, with the same result:

- the example of learner ``l`` at round ``t`` depends only on (seed, t, l);
- the drift after round ``t`` (probability ``drift_prob``) only on (seed, t);
- the target of epoch ``e`` (the rounds between two drifts) only on (seed, e).

Streams (``rows(t_start, t_stop, learners)`` gives round-major CSR rows):

``DisjunctionStream``  Kamp et al.'s drifting random disjunction. x, z ∈ {0,1}^n,
    every coordinate 1 with probability p = √(1 − 2^(−1/n)); y = +1 iff
    ⟨x, z⟩ ≥ 1. P(y = −1) = (1 − p²)^n = 1/2: balanced classes.
``NeuralNetStream``  a drifting two-layer network. x ∈ {−1, +1}^n (dense,
    uniform), s(x) = Σ_h v_h tanh(gain · W_h·x / √n) with H = ``hidden`` units,
    W, v ~ N(0, 1) redrawn at each drift; y = sign(s) (+1 at 0), then flipped
    with probability ``noise``. s is odd in x, so the classes are balanced;
    with gain 1 the tanh units work mostly in their near-linear range, so a
    linear model fits well; the flips make the Bayes error per epoch equal
    ``noise`` (default 0.05), not zero.
``LinearTeacherStream``  a sparse linear teacher w* (each coordinate nonzero
    with probability ``teacher_density``, N(0, 1)); x has ``nnz_per_row``
    N(0, 1) values at distinct positions (one in each of ``nnz_per_row``
    equal buckets of the features); y = sign(w*·x) (+1 at 0), flipped with
    probability ``noise``. Stationary by default (``drift_prob=0``).
``RCV1Stream``  rows of the RCV1-scale generator (``rcv1_like``), one row per
    (t, l); stationary.
"""

import math

import numpy as np
from numba import njit

from mpisgd.errors import MpisgdError

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S32, _S11 = (np.uint64(k) for k in (30, 27, 31, 32, 11))
_LOW32 = np.uint64(0xFFFFFFFF)
_INV53 = 1.0 / 9007199254740992.0  # 2^-53
_INV32 = 1.0 / 4294967296.0  # 2^-32

# Tags separate the random streams of one seed.
TAG_DRIFT, TAG_TARGET, TAG_X, TAG_NOISE, TAG_ROW, TAG_LEN, TAG_PILOT = 1, 2, 3, 4, 5, 6, 7


@njit(cache=True, inline="always")
def _mix(z):
    """splitmix64 finalizer: a bijection of uint64 with full avalanche."""
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True, inline="always")
def _key(seed, tag, a, b):
    """Key of (seed, tag, a, b); counters a, b ≥ 0."""
    h = _mix(np.uint64(seed) * _GOLDEN + np.uint64(tag))
    h = _mix(h + np.uint64(a) * _GOLDEN)
    return _mix(h + np.uint64(b) * _GOLDEN)


@njit(cache=True, inline="always")
def _draw(key, j):
    """The j-th 64-bit draw of a key (splitmix64 sequence)."""
    return _mix(key + np.uint64(j + 1) * _GOLDEN)


@njit(cache=True, inline="always")
def _unit(h):
    """Uniform in [0, 1) from the top 53 bits."""
    return float(h >> _S11) * _INV53


@njit(cache=True, inline="always")
def _normal(h):
    """Standard normal from one draw (Box–Muller on its two 32-bit halves)."""
    u1 = (float(h >> _S32) + 1.0) * _INV32  # (0, 1]
    u2 = float(h & _LOW32) * _INV32
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


@njit(cache=True)
def _drift_rounds(seed, t_stop, prob):
    """Rounds t < t_stop after which the target is redrawn (probability ``prob``)."""
    out = np.empty(16, np.int64)
    k = 0
    if prob <= 0.0:
        return out[:0]
    for t in range(t_stop):
        if _unit(_key(seed, TAG_DRIFT, t, 0)) < prob:
            if k == len(out):
                bigger = np.empty(2 * k, np.int64)
                bigger[:k] = out
                out = bigger
            out[k] = t
            k += 1
    return out[:k]


@njit(cache=True)
def _grow(a, need):
    if need <= len(a):
        return a
    b = np.empty(max(need, 2 * len(a)), a.dtype)
    b[: len(a)] = a
    return b


# ---------------------------------------------------------------- disjunction


_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_POS = np.zeros(64, np.int64)
for _i in range(64):
    _DEBRUIJN_POS[((1 << _i) * 0x03F79D71B4CB0A89 % 2**64) >> 58] = _i


@njit(cache=True, inline="always")
def _bernoulli_word(key, w, th, valid):
    """64 coordinates 64w..64w+63 as bits: bit i is 1 iff its 32-bit uniform < th.

    Coordinate 64w + 2i uses the high half of draw 32w + i, 64w + 2i + 1 the low half."""
    mask = np.uint64(0)
    for i in range(32):
        h = _draw(key, 32 * w + i)
        mask |= np.uint64((h >> _S32) < th) << np.uint64(2 * i)
        mask |= np.uint64((h & _LOW32) < th) << np.uint64(2 * i + 1)
    return mask & valid


@njit(cache=True)
def _disjunction_rows(seed, n, thresh, t_start, epochs, learners, expect, debruijn_pos):
    """Rows of rounds t_start.. (one epoch id per round) for the given learners.

    Coordinate j is 1 iff its 32-bit uniform is < thresh = p·2^32."""
    T = len(epochs)
    k = len(learners)
    rows = T * k
    W = (n + 63) // 64
    valid = np.empty(W, np.uint64)  # coordinates < n of each word
    for w in range(W):
        left = n - 64 * w
        valid[w] = ~np.uint64(0) if left >= 64 else (np.uint64(1) << np.uint64(left)) - np.uint64(1)
    indptr = np.empty(rows + 1, np.int64)
    indices = np.empty(int(expect * rows) + n + 64, np.int32)
    y = np.empty(rows, np.float64)
    z = np.zeros(W, np.uint64)
    th = np.uint64(thresh)
    one = np.uint64(1)
    cur = -1
    nnz = 0
    r = 0
    indptr[0] = 0
    for i in range(T):
        if epochs[i] != cur:
            cur = epochs[i]
            key = _key(seed, TAG_TARGET, cur, 0)
            for w in range(W):
                z[w] = _bernoulli_word(key, w, th, valid[w])
        t = t_start + i
        for q in range(k):
            if nnz + n > len(indices):
                indices = _grow(indices, nnz + n)
            key = _key(seed, TAG_X, t, learners[q])
            hit = np.uint64(0)
            for w in range(W):
                x = _bernoulli_word(key, w, th, valid[w])
                hit |= x & z[w]
                while x:  # append the set bits, lowest first (de Bruijn ctz)
                    low = x & (~x + one)
                    indices[nnz] = 64 * w + debruijn_pos[(low * _DEBRUIJN) >> np.uint64(58)]
                    nnz += 1
                    x ^= low
            y[r] = 1.0 if hit else -1.0  # y = +1 iff ⟨x, z⟩ ≥ 1
            r += 1
            indptr[r] = nnz
    return indptr, indices[:nnz].copy(), y


# ---------------------------------------------------------------- neural net


@njit(cache=True)
def _nn_target(seed, epoch, n, hidden, W, v):
    key = _key(seed, TAG_TARGET, epoch, 0)
    for h in range(hidden):
        for j in range(n):
            W[h, j] = _normal(_draw(key, h * n + j))
        v[h] = _normal(_draw(key, hidden * n + h))


@njit(cache=True)
def _nn_rows(seed, n, hidden, gain, noise, t_start, epochs, learners):
    """Dense ±1 rows; y = sign(Σ_h v_h tanh(gain·W_h·x/√n)), flipped w.p. noise."""
    T = len(epochs)
    k = len(learners)
    rows = T * k
    indptr = np.arange(rows + 1).astype(np.int64) * n
    indices = np.empty(rows * n, np.int32)
    data = np.empty(rows * n, np.float64)
    y = np.empty(rows, np.float64)
    W = np.empty((hidden, n))
    v = np.empty(hidden)
    x = np.empty(n)
    scale = gain / math.sqrt(n)
    cur = -1
    r = 0
    for i in range(T):
        if epochs[i] != cur:
            cur = epochs[i]
            _nn_target(seed, cur, n, hidden, W, v)
        t = t_start + i
        for q in range(k):
            key = _key(seed, TAG_X, t, learners[q])
            for j0 in range(0, n, 64):
                h = _draw(key, j0 >> 6)
                for j in range(j0, min(n, j0 + 64)):
                    x[j] = 1.0 if (h >> np.uint64(j - j0)) & np.uint64(1) else -1.0
            s = 0.0
            for hh in range(hidden):
                a = 0.0
                for j in range(n):
                    a += W[hh, j] * x[j]
                s += v[hh] * math.tanh(scale * a)
            lab = 1.0 if s >= 0.0 else -1.0
            if _unit(_key(seed, TAG_NOISE, t, learners[q])) < noise:
                lab = -lab
            y[r] = lab
            base = r * n
            for j in range(n):
                indices[base + j] = j
                data[base + j] = x[j]
            r += 1
    return indptr, indices, data, y


# ---------------------------------------------------------------- linear teacher


@njit(cache=True)
def _teacher(seed, epoch, n, density, w):
    key = _key(seed, TAG_TARGET, epoch, 0)
    for j in range(n):
        h = _draw(key, 2 * j)
        w[j] = _normal(_draw(key, 2 * j + 1)) if _unit(h) < density else 0.0


@njit(cache=True)
def _linear_rows(seed, n, nnz_row, density, noise, t_start, epochs, learners):
    """x: one N(0,1) value in each of nnz_row equal buckets; y = sign(w*·x), flipped w.p. noise."""
    T = len(epochs)
    k = len(learners)
    rows = T * k
    indptr = np.arange(rows + 1).astype(np.int64) * nnz_row
    indices = np.empty(rows * nnz_row, np.int32)
    data = np.empty(rows * nnz_row, np.float64)
    y = np.empty(rows, np.float64)
    w = np.empty(n)
    cur = -1
    r = 0
    for i in range(T):
        if epochs[i] != cur:
            cur = epochs[i]
            _teacher(seed, cur, n, density, w)
        t = t_start + i
        for q in range(k):
            key = _key(seed, TAG_X, t, learners[q])
            s = 0.0
            base = r * nnz_row
            for b in range(nnz_row):
                lo = b * n // nnz_row
                hi = (b + 1) * n // nnz_row
                h = _draw(key, 2 * b)
                j = lo + np.int64((h >> _S32) * np.uint64(hi - lo) >> _S32)
                val = _normal(_draw(key, 2 * b + 1))
                indices[base + b] = j
                data[base + b] = val
                s += w[j] * val
            lab = 1.0 if s >= 0.0 else -1.0
            if _unit(_key(seed, TAG_NOISE, t, learners[q])) < noise:
                lab = -lab
            y[r] = lab
            r += 1
    return indptr, indices, data, y


# ---------------------------------------------------------------- RCV1-scale rows


@njit(cache=True)
def _alias_table(p):
    """Walker/Vose alias table of a distribution: draw i = ⌊u·n⌋, keep i if the
    fraction < prob[i], else take alias[i]."""
    n = len(p)
    prob = p * n
    alias = np.arange(n).astype(np.int64)
    small = np.empty(n, np.int64)
    large = np.empty(n, np.int64)
    ns = nl = 0
    for i in range(n):
        if prob[i] < 1.0:
            small[ns] = i
            ns += 1
        else:
            large[nl] = i
            nl += 1
    while ns > 0 and nl > 0:
        ns -= 1
        s = small[ns]
        g = large[nl - 1]
        alias[s] = g
        prob[g] -= 1.0 - prob[s]
        if prob[g] < 1.0:
            nl -= 1
            small[ns] = g
            ns += 1
    for i in range(n):
        if alias[i] == i:
            prob[i] = 1.0  # leftovers: numerically 1
    return prob, alias


@njit(cache=True)
def _rcv1_one(key, prob, alias, perm, idf, nnz_row, sigma, cap, ids, counts):
    """One document: its m distinct features (sorted) in ids[:m] and their
    L2-normalized TF-IDF values in counts[:m]; returns m."""
    # Length ~ nnz_row · lognormal(σ) (mean nnz_row), at least 1, at most cap.
    L = int(round(nnz_row * math.exp(sigma * _normal(_draw(key, 0)) - 0.5 * sigma * sigma)))
    L = max(1, min(cap, L))
    n = len(prob)
    for a in range(L):
        u = _unit(_draw(key, a + 1)) * n
        r = int(u)
        if u - r >= prob[r]:
            r = alias[r]
        ids[a] = perm[r]  # Zipf-like popularity of rank r
    ids[:L].sort()
    m = 0
    for a in range(L):
        if m > 0 and ids[a] == ids[m - 1]:
            counts[m - 1] += 1.0  # a repeated term raises its term frequency
        else:
            ids[m] = ids[a]
            counts[m] = 1.0
            m += 1
    norm = 0.0
    for a in range(m):
        tf = counts[a]
        counts[a] = (1.0 + math.log(tf) if tf > 1.0 else 1.0) * idf[ids[a]]  # (1 + ln tf)·idf
        norm += counts[a] * counts[a]
    norm = math.sqrt(norm)
    for a in range(m):
        counts[a] /= norm  # rows L2-normalized
    return m


@njit(cache=True)
def _rcv1_margins(seed, tag, rows, prob, alias, perm, idf, nnz_row, sigma, cap, w):
    """Teacher margins w·x of ``rows`` pilot documents."""
    ids = np.empty(cap, np.int64)
    vals = np.empty(cap)
    out = np.empty(rows)
    for i in range(rows):
        m = _rcv1_one(_key(seed, tag, i, 0), prob, alias, perm, idf, nnz_row, sigma, cap, ids, vals)
        s = 0.0
        for a in range(m):
            s += w[ids[a]] * vals[a]
        out[i] = s
    return out


@njit(cache=True)
def _rcv1_rows(seed, keys_a, keys_b, prob, alias, perm, idf, nnz_row, sigma, cap, w, bias, delta, flip):
    """Documents keyed (keys_a[i], keys_b[i]); a document with |w·x + b| < δ is
    rejected and redrawn (next attempt); then its label flips w.p. ``flip``."""
    rows = len(keys_a)
    indptr = np.empty(rows + 1, np.int64)
    indices = np.empty(int(rows * nnz_row * 1.1) + cap, np.int32)
    data = np.empty(len(indices))
    y = np.empty(rows)
    ids = np.empty(cap, np.int64)
    vals = np.empty(cap)
    nnz = 0
    indptr[0] = 0
    for i in range(rows):
        attempt = 0
        while True:
            key = _key(seed, TAG_ROW, keys_a[i], keys_b[i] * 1024 + attempt)
            m = _rcv1_one(key, prob, alias, perm, idf, nnz_row, sigma, cap, ids, vals)
            s = bias
            for a in range(m):
                s += w[ids[a]] * vals[a]
            if abs(s) >= delta or attempt == 1023:
                break
            attempt += 1
        if nnz + m > len(indices):
            indices = _grow(indices, nnz + m)
            data = _grow(data, nnz + m)
        for a in range(m):
            indices[nnz + a] = ids[a]
            data[nnz + a] = vals[a]
        nnz += m
        indptr[i + 1] = nnz
        lab = 1.0 if s >= 0.0 else -1.0
        if _unit(_key(seed, TAG_NOISE, keys_a[i], keys_b[i])) < flip:
            lab = -lab
        y[i] = lab
    return indptr, indices[:nnz].copy(), data[:nnz].copy(), y


class RCV1Model:
    """The fixed parts of the RCV1-scale generator for one seed.

    Feature popularity: Zipf, P(rank r) ∝ 1/(r + 10), ranks mapped to feature
    ids by a seeded permutation; idf_j = ln(1/P(j)); document length
    nnz_per_row · lognormal(σ = 0.5) with that mean; repeated draws raise a
    term's frequency tf, value (1 + ln tf)·idf, rows L2-normalized. Teacher:
    w_j ~ N(0, 1) on a random 30 % of the 2,000 most popular terms, 0
    elsewhere; the bias puts 47 % of documents on the positive side (RCV1
    CCAT) and the 25 % of documents nearest the boundary are rejected and
    redrawn (both quantiles from a 20,000-row pilot); then 5 % of labels
    flip. Measured (seed 0, 20,000 test rows, LinearSVC C=1): 8.5 % test
    error with 100,000 training rows, 6.9 % with 400,000; the Bayes error
    is the 5 % of flips."""

    SIGMA = 0.5
    ZIPF_OFFSET = 10.0
    TEACHER_DENSITY = 0.3
    TEACHER_RANKS = 2000
    POSITIVE = 0.47
    REJECT = 0.25
    FLIP = 0.05
    PILOT = 20000

    def __init__(self, n_features=47152, seed=0, nnz_per_row=76):
        if n_features < 2 or nnz_per_row < 1:
            raise MpisgdError(
                f"rcv1_like: need n_features ≥ 2 and nnz_per_row ≥ 1, got "
                f"{n_features}, {nnz_per_row}"
            )
        self.n_features, self.seed, self.nnz_per_row = n_features, seed, nnz_per_row
        rng = np.random.default_rng([seed, 0x5C1])
        p = 1.0 / (np.arange(n_features) + self.ZIPF_OFFSET)
        p /= p.sum()
        self.prob, self.alias = _alias_table(p)
        self.perm = rng.permutation(n_features).astype(np.int64)
        self.idf = np.empty(n_features)
        self.idf[self.perm] = np.log(1.0 / p)
        # Teacher on a random TEACHER_DENSITY of the TEACHER_RANKS most popular terms.
        w = np.zeros(n_features)
        top = self.perm[: min(self.TEACHER_RANKS, n_features)]
        w[top] = rng.standard_normal(len(top)) * (rng.random(len(top)) < self.TEACHER_DENSITY)
        self.w = w
        self.cap = 8 * nnz_per_row
        margins = _rcv1_margins(seed, TAG_PILOT, self.PILOT, self.prob, self.alias, self.perm, self.idf,
                                nnz_per_row, self.SIGMA, self.cap, w)
        self.bias = -float(np.quantile(margins, 1.0 - self.POSITIVE))
        self.delta = float(np.quantile(np.abs(margins + self.bias), self.REJECT))

    def rows(self, keys_a, keys_b):
        return _rcv1_rows(self.seed, np.asarray(keys_a, np.int64), np.asarray(keys_b, np.int64),
                          self.prob, self.alias, self.perm, self.idf, self.nnz_per_row, self.SIGMA, self.cap,
                          self.w, self.bias, self.delta, self.FLIP)


def _csr(indptr, indices, data, n_rows, n_features):
    import scipy.sparse as sp

    X = sp.csr_matrix((data, indices, indptr), shape=(n_rows, n_features))
    X.indptr, X.indices = indptr, indices  # keep int64 indptr, int32 indices
    return X


def rcv1_like(n_train, n_test, n_features=47152, seed=0, nnz_per_row=76):
    """Seeded synthetic RCV1-scale data (see ``RCV1Model``).

    Returns ``(X_train, y_train, X_test, y_test)``: CSR float64 (int64
    indptr, int32 indices), labels ±1 float64. Row i (train rows first,
    then test) depends only on (seed, i)."""
    model = RCV1Model(n_features, seed, nnz_per_row)
    out = []
    for lo, hi in ((0, n_train), (n_train, n_train + n_test)):
        ip, ix, d, y = model.rows(np.arange(lo, hi), np.zeros(hi - lo, np.int64))
        out += [_csr(ip, ix, d, hi - lo, n_features), y]
    return tuple(out)


# ---------------------------------------------------------------- streams


class Stream:
    """Common interface of the synthetic streams (see the module docstring)."""

    name = "stream"

    def __init__(self, n_features, n_learners, seed, drift_prob):
        if n_features < 1 or n_learners < 1:
            raise MpisgdError(
                f"{self.name}: need n_features ≥ 1 and n_learners ≥ 1, got "
                f"{n_features}, {n_learners}"
            )
        if not 0.0 <= drift_prob <= 1.0:
            raise MpisgdError(f"{self.name}: drift_prob must lie in [0, 1], got {drift_prob}")
        self.n_features = int(n_features)
        self.n_learners = int(n_learners)
        self.seed = int(seed)
        self.drift_prob = float(drift_prob)

    def drifts(self, t_stop):
        """Rounds t < t_stop (0-based) after which the target was redrawn."""
        return _drift_rounds(self.seed, int(t_stop), self.drift_prob)

    def epochs(self, t_start, t_stop):
        """Epoch (number of earlier drifts) of each round in [t_start, t_stop)."""
        d = self.drifts(t_stop)
        return np.searchsorted(d, np.arange(t_start, t_stop), side="left").astype(np.int64)

    def _learners(self, learners):
        if learners is None:
            return np.arange(self.n_learners, dtype=np.int64)
        learners = np.asarray(learners, dtype=np.int64).ravel()
        if len(learners) and (learners.min() < 0 or learners.max() >= self.n_learners):
            raise MpisgdError(f"{self.name}: learners must lie in [0, {self.n_learners})")
        return learners

    def rows(self, t_start, t_stop, learners=None):
        """Examples of rounds [t_start, t_stop) for ``learners`` (default all):
        (indptr int64, indices int32, data float64, y float64), round-major."""
        if not 0 <= t_start <= t_stop:
            raise MpisgdError(f"{self.name}: need 0 ≤ t_start ≤ t_stop, got {t_start}, {t_stop}")
        return self._rows(int(t_start), self.epochs(t_start, t_stop), self._learners(learners))

    def params(self):
        """Parameters that define the stream (stored in shard attributes)."""
        return {"stream": self.name, "n_features": self.n_features,
                "n_learners": self.n_learners, "seed": self.seed,
                "drift_prob": self.drift_prob}


class DisjunctionStream(Stream):
    name = "disjunction"

    def __init__(self, n_features=100, n_learners=1, seed=0, drift_prob=0.0002):
        super().__init__(n_features, n_learners, seed, drift_prob)
        n = self.n_features
        self.p = math.sqrt(1.0 - 2.0 ** (-1.0 / n))  # p = √(1 − 2^(−1/n))
        self.thresh = min(int(round(self.p * 2.0**32)), 2**32)

    def _rows(self, t_start, epochs, learners):
        ip, ix, y = _disjunction_rows(self.seed, self.n_features, self.thresh, t_start, epochs,
                                      learners, 1.1 * self.n_features * self.p, _DEBRUIJN_POS)
        return ip, ix, np.ones(len(ix)), y


class NeuralNetStream(Stream):
    name = "neuralnet"

    def __init__(self, n_features=150, n_learners=1, seed=0, drift_prob=0.0002, hidden=8,
                 gain=1.0, noise=0.05):
        super().__init__(n_features, n_learners, seed, drift_prob)
        if hidden < 1 or gain <= 0 or not 0.0 <= noise < 0.5:
            raise MpisgdError("neuralnet: need hidden ≥ 1, gain > 0, 0 ≤ noise < 0.5")
        self.hidden, self.gain, self.noise = int(hidden), float(gain), float(noise)

    def _rows(self, t_start, epochs, learners):
        return _nn_rows(self.seed, self.n_features, self.hidden, self.gain, self.noise,
                        t_start, epochs, learners)

    def params(self):
        return {**super().params(), "hidden": self.hidden, "gain": self.gain,
                "noise": self.noise}


class LinearTeacherStream(Stream):
    name = "linear"

    def __init__(self, n_features=1000, n_learners=1, seed=0, drift_prob=0.0, nnz_per_row=20,
                 noise=0.05, teacher_density=0.5):
        super().__init__(n_features, n_learners, seed, drift_prob)
        if not 1 <= nnz_per_row <= n_features or not 0.0 <= noise < 0.5:
            raise MpisgdError("linear: need 1 ≤ nnz_per_row ≤ n_features and 0 ≤ noise < 0.5")
        if not 0.0 < teacher_density <= 1.0:
            raise MpisgdError("linear: teacher_density must lie in (0, 1]")
        self.nnz_per_row, self.noise = int(nnz_per_row), float(noise)
        self.teacher_density = float(teacher_density)

    def _rows(self, t_start, epochs, learners):
        return _linear_rows(self.seed, self.n_features, self.nnz_per_row, self.teacher_density,
                            self.noise, t_start, epochs, learners)

    def params(self):
        return {**super().params(), "nnz_per_row": self.nnz_per_row, "noise": self.noise,
                "teacher_density": self.teacher_density}


class RCV1Stream(Stream):
    """The RCV1-scale generator as a stationary stream: row (t, l) is keyed (t, l + 1)
    (``rcv1_like`` uses (i, 0)), so streams and the fixed set never share rows."""

    name = "rcv1"

    def __init__(self, n_features=47152, n_learners=1, seed=0, nnz_per_row=76, drift_prob=0.0):
        if drift_prob:
            raise MpisgdError(f"rcv1: the stream is stationary (drift_prob=0), got {drift_prob}")
        super().__init__(n_features, n_learners, seed, 0.0)
        self.nnz_per_row = int(nnz_per_row)
        self.model = RCV1Model(self.n_features, self.seed, self.nnz_per_row)

    def _rows(self, t_start, epochs, learners):
        T, k = len(epochs), len(learners)
        keys_a = np.repeat(np.arange(t_start, t_start + T, dtype=np.int64), k)
        keys_b = np.tile(learners + 1, T)
        return self.model.rows(keys_a, keys_b)

    def params(self):
        return {**super().params(), "nnz_per_row": self.nnz_per_row}


STREAMS = {
    "disjunction": DisjunctionStream,
    "neuralnet": NeuralNetStream,
    "linear": LinearTeacherStream,
    "rcv1": RCV1Stream,
}


def write_learner_shards(stream, n_rounds, out_dir, prefix=None, batch_rounds=1000,
                         group=64, dtype=np.float64, compression=None, command=""):
    """Write one shard per learner, rows aligned by round (row t = round t).

    Learners are written ``group`` at a time, ``batch_rounds`` rounds per
    generator call, so memory stays bounded. Returns the shard paths."""
    import os

    from mpisgd.data.shard import DEFAULT_COMPRESSION, ShardWriter
    from mpisgd.data.shardset import RUN_ATTR, new_run_id

    prefix = prefix or stream.name
    k = stream.n_learners
    width = max(3, len(str(k - 1)))
    paths = [os.path.join(out_dir, f"{prefix}-{l:0{width}d}.h5") for l in range(k)]
    drifts = stream.drifts(n_rounds).tolist()
    attrs = {"source": f"synthetic:{stream.name}", "stream": stream.params(),
             "drifts": drifts, "n_rounds": n_rounds, "label_mapping": {"-1": -1, "1": 1},
             "command": command, "shard_count": k, RUN_ATTR: new_run_id()}
    for g0 in range(0, k, group):
        members = np.arange(g0, min(k, g0 + group))
        writers = []
        try:
            for l in members:
                writers.append(ShardWriter(paths[l], stream.n_features, dtype,
                                           compression or DEFAULT_COMPRESSION,
                                           shard_index=int(l), **attrs))
            G = len(members)
            for t0 in range(0, n_rounds, batch_rounds):
                t1 = min(n_rounds, t0 + batch_rounds)
                ip, ix, d, y = stream.rows(t0, t1, members)
                for q, w in enumerate(writers):
                    sel = np.arange(q, (t1 - t0) * G, G)  # round-major: row (t, q) at t·G + q
                    lens = ip[sel + 1] - ip[sel]
                    sub_ip = np.zeros(len(sel) + 1, np.int64)
                    np.cumsum(lens, out=sub_ip[1:])
                    # Positions of the selected rows' entries in ix/d.
                    take = np.repeat(ip[sel] - sub_ip[:-1], lens) + np.arange(sub_ip[-1])
                    w.append(sub_ip, ix[take], d[take], y[sel])
            for w in writers:
                w.close()
        except BaseException:
            for w in writers:
                if os.path.exists(w.tmp):
                    w.abort()
            raise
    return paths
