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
