"""Bottou's sparse SGD/ASGD kernel against the dense NumPy twin (tests/naive.py)."""

import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.kernels import sgd
from mpisgd.kernels.losses import DEFAULT_PARAM, LOSSES
from mpisgd.kernels.schedules import SCHEDULES
from tests.naive import naive_sgd

CLASSIFICATION = ("hinge", "log", "squared_hinge", "modified_huber", "perceptron")


def random_problem(seed, m=40, n=9, density=0.4, regression=False):
    rng = np.random.default_rng(seed)
    X = sp.random(m, n, density=density, format="csr", random_state=rng, dtype=np.float64)
    X.data = rng.normal(size=X.data.size)
    if regression:
        y = X @ rng.normal(size=n) + 0.3 * rng.normal(size=m)
    else:
        y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    return X, y


def run_kernel(X, y, order, loss, schedule, eta0, lam, t0=0.0, power=0.5, bias_gain=1.0,
               fit_intercept=True, regularize_bias=False, average=True, avg_start=20.0,
               epochs_split=2, sw=None):
    """Run the kernel over ``order`` in ``epochs_split`` calls (state must carry over);
    ``sw``: the examples' weights (default 1)."""
    sw = np.ones(X.shape[0]) if sw is None else sw
    v = np.zeros(X.shape[1])
    a = np.zeros(X.shape[1])
    st = sgd.new_state()
    total = 0.0
    errors = 0
    for part in np.array_split(order, epochs_split):
        s, e, status = sgd.sgd_epoch(
            X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data, y, sw,
            part.astype(np.int64), LOSSES[loss], DEFAULT_PARAM.get(loss, 0.0),
            SCHEDULES[schedule], eta0, lam, t0, power, bias_gain, fit_intercept,
            regularize_bias, average, avg_start, v, a, st)
        assert status == 0
        total += s
        errors += e
    if st[sgd.COPYING]:
        wa = v / st[sgd.W_DIVISOR]
    else:
        wa = (a + st[sgd.W_FRACTION] * v) / st[sgd.A_DIVISOR]
    return v / st[sgd.W_DIVISOR], st[sgd.W_BIAS], wa, st[sgd.A_BIAS], total, errors


def assert_close(got, want, rtol=1e-10):
    got = np.atleast_1d(np.asarray(got, dtype=float))
    want = np.atleast_1d(np.asarray(want, dtype=float))
    scale = max(np.max(np.abs(want)), 1e-300)
    assert np.max(np.abs(got - want)) <= rtol * scale + 1e-15, (got, want)


def compare(X, y, order, loss, schedule, eta0, lam, **kw):
    param = DEFAULT_PARAM.get(loss, 0.0)
    got = run_kernel(X, y, order, loss, schedule, eta0, lam, **kw)
    kw.pop("epochs_split", None)
    args = dict(t0=0.0, power=0.5, bias_gain=1.0, fit_intercept=True, regularize_bias=False,
                average=True, avg_start=20.0, sw=None)
    args.update(kw)
    want = naive_sgd(X.toarray(), y, order, loss, param, schedule, eta0, lam, args["t0"],
                     args["power"], args["bias_gain"], args["fit_intercept"],
                     args["regularize_bias"], args["average"], args["avg_start"], args["sw"])
    for g, w in zip(got, want):
        assert_close(g, w)


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_every_loss_every_schedule(loss):
    X, y = random_problem(1, regression=loss not in CLASSIFICATION)
    rng = np.random.default_rng(2)
    order = np.concatenate([rng.permutation(X.shape[0]) for _ in range(3)])
    for schedule in SCHEDULES:
        compare(X, y, order, loss, schedule, 0.3, 0.01, t0=5.0)


@pytest.mark.parametrize("fit_intercept,regularize_bias,bias_gain",
                         [(True, False, 1.0), (True, True, 1.0), (True, True, 0.01),
                          (False, False, 1.0)])
def test_bias_options(fit_intercept, regularize_bias, bias_gain):
    X, y = random_problem(3)
    order = np.tile(np.arange(X.shape[0]), 2)
    for average in (False, True):
        compare(X, y, order, "log", "xu", 0.5, 0.05, fit_intercept=fit_intercept,
                regularize_bias=regularize_bias, bias_gain=bias_gain, average=average)


@pytest.mark.parametrize("loss", ["hinge", "log", "squared"])
def test_sample_weights(loss):
    """Each example's gradient and loss scaled by its weight (0 included), as the twin."""
    X, y = random_problem(6, regression=loss == "squared")
    rng = np.random.default_rng(7)
    sw = rng.choice([0.0, 0.5, 1.0, 3.0], size=X.shape[0])
    order = np.tile(np.arange(X.shape[0]), 2)
    for average in (False, True):
        compare(X, y, order, loss, "bottou", 0.3, 0.01, average=average, sw=sw)
    unweighted = run_kernel(X, y, order, loss, "bottou", 0.3, 0.01)
    assert not np.allclose(run_kernel(X, y, order, loss, "bottou", 0.3, 0.01, sw=sw)[0],
                           unweighted[0])


def test_rescaling_paths():
    """wDivisor leaves [1e-5, 1e5] many times (γλ = 0.95) and γλ ≥ 1 (dense branch)."""
    X, y = random_problem(4)
    order = np.tile(np.arange(X.shape[0]), 3)
    compare(X, y, order, "hinge", "constant", 1.9, 0.5, avg_start=10.0)
    compare(X, y, order, "log", "constant", 3.0, 0.5, avg_start=10.0)
    # 1/(λt) with t0 = 0: γλ = 1 at the first step
    compare(X, y, order, "hinge", "optimal", 0.0, 0.1, t0=0.0, avg_start=50.0)


def test_diverging_run_reports_status():
    X, y = random_problem(5, regression=True)
    v = np.zeros(X.shape[1])
    st = sgd.new_state()
    order = np.tile(np.arange(X.shape[0]), 50).astype(np.int64)
    _, _, status = sgd.sgd_epoch(
        X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data, y, np.ones(len(y)),
        order, LOSSES["squared"], 0.0, SCHEDULES["constant"], 1e6, 0.0, 0.0, 0.5, 1.0, True,
        False, False, 0.0, v, np.zeros(0), st)
    assert status == -1
