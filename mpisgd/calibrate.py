"""Bottou's γ0 ("eta0") calibration (svmsgd.cpp ``determineEta0``, docs/ALGORITHMS.md §3).

Train one pass over a sample with a fixed step γ starting from w = 0, measure
the sample's objective, start at γ = 1 and move by factors of 2 in the
direction that lowers it; keep the best γ.
"""

import math

import numpy as np

from mpisgd.kernels import sgd
from mpisgd.kernels.schedules import CONSTANT
from mpisgd.model import loss_error_sums

SAMPLE_SIZE = 1000
FACTOR = 2.0
# Stop the search after this many doublings or halvings (γ in [2^-40, 2^40]).
MAX_STEPS = 40


def sample_objective(indptr, indices, data, y, n_features, order, loss_code, loss_param,
                     lam, fit_intercept, regularize_bias, bias_gain, gamma):
    """Objective on the sample after one pass with the constant step γ; +∞ if it diverges."""
    v = np.zeros(n_features)
    st = sgd.new_state()
    _, _, status = sgd.sgd_epoch(
        indptr, indices, data, y, order, loss_code, loss_param, CONSTANT, gamma, lam,
        0.0, 0.0, bias_gain, fit_intercept, regularize_bias, False, 0.0, v,
        np.zeros(0), st,
    )
    if status != 0:
        return math.inf
    with np.errstate(all="ignore"):  # a large γ may overflow: that is a cost of +∞
        w = v / st[sgd.W_DIVISOR]
        b = st[sgd.W_BIAS]
        rows = np.sort(order)
        p = np.empty(rows.size)
        for r, i in enumerate(rows):  # the sample is small
            lo, hi = indptr[i], indptr[i + 1]
            p[r] = w[indices[lo:hi]] @ data[lo:hi] + b
        total, _ = loss_error_sums(loss_code, p, y[rows], loss_param)
        reg = w @ w + (b * b if regularize_bias else 0.0)
        cost = total / rows.size + 0.5 * lam * reg
    return cost if math.isfinite(cost) else math.inf


def calibrate_eta0(indptr, indices, data, y, n_features, order, loss_code, loss_param, lam,
                   fit_intercept, regularize_bias, bias_gain):
    """Return (γ0, [(γ, cost), ...]) using the first SAMPLE_SIZE rows of ``order``."""
    sample = np.ascontiguousarray(order[:SAMPLE_SIZE], dtype=np.int64)
    tried = []

    def cost(gamma):
        c = sample_objective(indptr, indices, data, y, n_features, sample, loss_code, loss_param, lam,
                             fit_intercept, regularize_bias, bias_gain, gamma)
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
