"""Dekel's SGD/ASGD/CASGD kernels against the dense NumPy twin (tests/naive.py)."""

import numpy as np
import pytest

from mpisgd.kernels import dekel
from mpisgd.kernels.losses import DEFAULT_PARAM, LOSSES
from tests.naive import naive_dekel
from tests.test_kernels_sgd import CLASSIFICATION, assert_close, random_problem


def run_dekel(X, y, order, loss, lam, variant, bias_mode, splits=2, sw=None):
    n = X.shape[1]
    sw = np.ones(X.shape[0]) if sw is None else sw
    code = dekel.VARIANTS["dekel-" + variant]
    xbar = np.asarray(X.mean(axis=0)).ravel() if code == dekel.CASGD else np.zeros(0)
    xbar_sq = float(xbar @ xbar)
    xbar_dot = X @ xbar if code == dekel.CASGD else np.zeros(0)
    v = np.zeros(n)
    u = np.zeros(n) if code != dekel.SGD else np.zeros(0)
    st = np.zeros(dekel.N_STATE)
    total, errors = 0.0, 0
    for part in np.array_split(order, splits):
        s, e = dekel.dekel_epoch(
            X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data, y, sw,
            part.astype(np.int64), LOSSES[loss], DEFAULT_PARAM.get(loss, 0.0), lam, code,
            bias_mode, xbar_dot, xbar_sq, v, u, st)
        total += s
        errors += e
    w, b = dekel.weights(code, bias_mode, lam, xbar, xbar_sq, v, u, st)
    return w, b, total, errors


@pytest.mark.parametrize("variant", ["sgd", "asgd", "casgd"])
@pytest.mark.parametrize("bias_mode", [dekel.NO_BIAS, dekel.REGULARIZED, dekel.UNREGULARIZED])
def test_dekel_matches_dense(variant, bias_mode):
    X, y = random_problem(11)
    rng = np.random.default_rng(12)
    order = np.concatenate([rng.permutation(X.shape[0]) for _ in range(3)])
    for loss in ("hinge", "log"):
        got = run_dekel(X, y, order, loss, 0.05, variant, bias_mode)
        want = naive_dekel(X.toarray(), y, order, loss, DEFAULT_PARAM.get(loss, 0.0), 0.05,
                           variant, bias_mode)
        for g, w in zip(got, want):
            assert_close(g, w)


@pytest.mark.parametrize("loss", sorted(LOSSES))
def test_dekel_every_loss(loss):
    X, y = random_problem(13, regression=loss not in CLASSIFICATION)
    order = np.tile(np.arange(X.shape[0]), 2)
    for variant in ("sgd", "asgd", "casgd"):
        got = run_dekel(X, y, order, loss, 0.5, variant, dekel.REGULARIZED, splits=3)
        want = naive_dekel(X.toarray(), y, order, loss, DEFAULT_PARAM.get(loss, 0.0), 0.5,
                           variant, dekel.REGULARIZED)
        for g, w in zip(got, want):
            assert_close(g, w)


@pytest.mark.parametrize("variant", ["sgd", "asgd", "casgd"])
def test_dekel_sample_weights(variant):
    """Each example's gradient and loss scaled by its weight (0 included), as the twin."""
    X, y = random_problem(14)
    sw = np.random.default_rng(15).choice([0.0, 0.5, 1.0, 3.0], size=X.shape[0])
    order = np.tile(np.arange(X.shape[0]), 2)
    got = run_dekel(X, y, order, "log", 0.1, variant, dekel.UNREGULARIZED, sw=sw)
    want = naive_dekel(X.toarray(), y, order, "log", 0.0, 0.1, variant, dekel.UNREGULARIZED,
                       sw=sw)
    for g, w in zip(got, want):
        assert_close(g, w)
    assert not np.allclose(got[0], run_dekel(X, y, order, "log", 0.1, variant,
                                             dekel.UNREGULARIZED)[0])
