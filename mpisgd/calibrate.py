"""Bottou's γ0 ("eta0") calibration (svmsgd.cpp ``determineEta0``, docs/ALGORITHMS.md §3).

Train one pass over a sample with a fixed step γ starting from w = 0, measure
the sample's objective, start at γ = 1 and move by factors of 2 in the
direction that lowers it; keep the best γ.
"""

import math

import numpy as np
import scipy.sparse as sp

from mpisgd.kernels import sgd
from mpisgd.kernels.losses import weighted_loss_sum
from mpisgd.kernels.schedules import CONSTANT

SAMPLE_SIZE = 1000
FACTOR = 2.0
# Stop the search after this many doublings or halvings (γ in [2^-40, 2^40]).
MAX_STEPS = 40


def sample_objective(indptr, indices, data, y, sw, n_features, order, rows, loss_code,
                     loss_param, lam, fit_intercept, regularize_bias, bias_gain, gamma):
    """Objective on the sample after one pass with the constant step γ; +∞ if it diverges.
    ``rows``: the sample's rows as a CSR matrix (rows of ``order``, sorted), ``sw``
    the examples' weights."""
    v = np.zeros(n_features)
    st = sgd.new_state()
    _, _, status = sgd.sgd_epoch(
        indptr, indices, data, y, sw, order, loss_code, loss_param, CONSTANT, gamma, lam,
        0.0, 0.0, bias_gain, fit_intercept, regularize_bias, False, 0.0, v,
        np.zeros(0), st,
    )
    if status != 0:
        return math.inf
    with np.errstate(all="ignore"):  # a large γ may overflow: that is a cost of +∞
        w = v / st[sgd.W_DIVISOR]
        b = st[sgd.W_BIAS]
        sample = np.sort(order)
        p = rows @ w + b
        total = weighted_loss_sum(loss_code, p, y[sample], sw[sample], loss_param)
        reg = w @ w + (b * b if regularize_bias else 0.0)
        cost = total / sample.size + 0.5 * lam * reg
    return cost if math.isfinite(cost) else math.inf


def _rows(indptr, indices, data, rows, n_features):
    """The rows ``rows`` of a CSR matrix as a small CSR matrix (touches only them)."""
    lo = indptr[rows]
    counts = indptr[rows + 1] - lo
    starts = np.cumsum(counts) - counts  # where each row begins in the small matrix
    take = np.arange(int(counts.sum())) + np.repeat(lo - starts, counts)
    return sp.csr_matrix((data[take], indices[take], np.append(starts, counts.sum())),
                         shape=(len(rows), n_features))


def calibrate_eta0(indptr, indices, data, y, n_features, order, loss_code, loss_param, lam,
                   fit_intercept, regularize_bias, bias_gain, sample_weight=None):
    """Return (γ0, [(γ, cost), ...]) using the first SAMPLE_SIZE rows of ``order``.

    ``y`` is one row of targets, or K rows (one-versus-rest): the cost of γ is
    then the sum of the K problems' costs, so that one γ0 serves them all.
    ``sample_weight``: the examples' weights (default 1).
    """
    sample = np.ascontiguousarray(order[:SAMPLE_SIZE], dtype=np.int64)
    m = len(indptr) - 1
    sw = np.ones(m) if sample_weight is None else sample_weight
    rows = _rows(indptr, indices, data, np.sort(sample), n_features)
    targets = np.atleast_2d(y)
    tried = []

    def cost(gamma):
        c = sum(sample_objective(indptr, indices, data, y_k, sw, n_features, sample, rows,
                                 loss_code, loss_param, lam, fit_intercept, regularize_bias,
                                 bias_gain, gamma) for y_k in targets)
        tried.append((gamma, c))
        return c

    lo_eta = 1.0
    lo_cost = cost(lo_eta)
    hi_eta = lo_eta * FACTOR
    hi_cost = cost(hi_eta)
    steps = 0
    if lo_cost < hi_cost or (math.isinf(lo_cost) and math.isinf(hi_cost)):
        # smaller steps are better (or both diverge): halve until the cost rises
        while (lo_cost < hi_cost or math.isinf(lo_cost)) and steps < MAX_STEPS:
            hi_eta, hi_cost = lo_eta, lo_cost
            lo_eta = hi_eta / FACTOR
            lo_cost = cost(lo_eta)
            steps += 1
        best = (lo_eta, lo_cost) if lo_cost <= hi_cost else (hi_eta, hi_cost)
    else:
        # larger steps are better: double until the cost rises
        while hi_cost < lo_cost and steps < MAX_STEPS:
            lo_eta, lo_cost = hi_eta, hi_cost
            hi_eta = lo_eta * FACTOR
            hi_cost = cost(hi_eta)
            steps += 1
        best = (lo_eta, lo_cost)
    return best[0], tried


def calibrate_online(source, learner):
    """γ0 of the online learners' options ``learner`` (mpisgd.learners.OnlineLearners,
    rule "sgd") from the first SAMPLE_SIZE rows of the RowSource ``source``:
    the search above with their loss and λ, the bias stepping like the weights
    (gain 1, as in mpisgd.kernels.online). Returns (γ0, the record for
    report.json: γ0, the rows used, every (γ, cost) tried)."""
    from mpisgd.errors import MpisgdError
    from mpisgd.kernels.losses import DEFAULT_PARAM, LOSSES

    pieces, rows = [], 0
    while rows < SAMPLE_SIZE:
        piece = source.take(SAMPLE_SIZE - rows)
        if piece is None:
            break
        pieces.append([np.array(a) for a in piece])  # copies: a block's views are reused
        rows += len(piece[3])
    if rows == 0:
        raise MpisgdError("eta0: learner 0 has no rows to calibrate the first step γ0 on; give --eta0")
    offsets = np.cumsum([0] + [int(p[0][-1]) for p in pieces[:-1]])
    indptr = np.concatenate([pieces[0][0][:1]] + [p[0][1:] + o for p, o in zip(pieces, offsets)])
    indices = np.concatenate([p[1] for p in pieces]).astype(np.int32)
    data = np.concatenate([p[2] for p in pieces]).astype(np.float64)
    y = np.concatenate([p[3] for p in pieces]).astype(np.float64)
    loss = learner["loss"]
    param = learner["loss_param"] if learner["loss_param"] is not None else DEFAULT_PARAM.get(loss, 0.0)
    eta0, tried = calibrate_eta0(indptr.astype(np.int64), indices, data, y, source.n_features,
                                 np.arange(rows, dtype=np.int64), LOSSES[loss], float(param),
                                 float(learner["lam"]), bool(learner["fit_intercept"]),
                                 bool(learner["regularize_bias"]), 1.0)
    return eta0, {"eta0": eta0, "rows": rows, "tried": [[g, c if math.isfinite(c) else None] for g, c in tried]}
