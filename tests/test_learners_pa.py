"""Passive-aggressive rules of the online learners (mpisgd.kernels.online,
mpisgd.learners) against the dense twin (tests/naive.py)."""

import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.errors import MpisgdError
from mpisgd.learners import OnlineLearners
from tests.naive import naive_pa


def rows(seed, m=120, n=10, k=3):
    rng = np.random.default_rng(seed)
    X = sp.random(m, n, density=0.4, format="csr", random_state=rng)
    X.data = rng.normal(size=X.data.size)
    y = np.where(X @ rng.normal(size=n) + 0.3 * rng.normal(size=m) > 0, 1.0, -1.0)
    owner = rng.integers(k, size=m)
    return X, y, owner


@pytest.mark.parametrize("rule,C", [("pa", 1.0), ("pa-i", 0.05), ("pa-i", 10.0), ("pa-ii", 0.3)])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_against_the_twin(rule, C, fit_intercept):
    X, y, owner = rows(1)
    L = OnlineLearners(3, X.shape[1], loss="hinge", rule=rule, aggressiveness=C,
                       fit_intercept=fit_intercept)
    L.learn(X.indptr, X.indices, X.data, y, owner)
    w, b = naive_pa(X, y, owner, 3, rule, C, fit_intercept)
    got = np.array([L.s[l] * L.V[l] + L.alpha[l] * L.r for l in range(3)])
    assert np.allclose(got, w, rtol=1e-10, atol=1e-12)
    assert np.allclose(L.bias, b, rtol=1e-10, atol=1e-12)


def test_distance_stays_exact_in_o1():
    """After a reference is set, ‖w − r‖² from the O(1) formula equals the dense one."""
    X, y, owner = rows(2)
    L = OnlineLearners(3, X.shape[1], loss="hinge", rule="pa-i", aggressiveness=0.5)
    half = 60
    L.learn(X.indptr[: half + 1], X.indices, X.data, y[:half], owner[:half])
    z = np.zeros(L.dim)
    z[: X.shape[1]] = np.arange(X.shape[1]) / 10.0
    z[X.shape[1]] = 0.2
    L.set_reference(z)
    ip = X.indptr[half:] - X.indptr[half]
    a = X.indptr[half]
    L.learn(ip, X.indices[a:], X.data[a:], y[half:], owner[half:])
    d = L.distances()
    w = np.array([L.s[l] * L.V[l] + L.alpha[l] * L.r for l in range(3)])
    want = ((w - L.r) ** 2).sum(axis=1) + (L.bias - L.r_bias) ** 2
    assert np.allclose(d, want, rtol=1e-9)


@pytest.mark.parametrize("kw,match", [
    (dict(rule="pa-i", aggressiveness=0.0), "aggressiveness"),
    (dict(rule="pa-ii", aggressiveness=-1.0), "aggressiveness"),
    (dict(rule="pa", loss="log"), "hinge"),
    (dict(rule="pa-i", lam=1e-3), "lam"),
    (dict(rule="adagrad"), "rule"),
])
def test_bad_input(kw, match):
    args = dict(loss="hinge")
    args.update(kw)
    with pytest.raises(MpisgdError, match=match):
        OnlineLearners(2, 5, **args)


def test_simulate_equals_train_sync_with_pa(tmp_path):
    """The PA rule through ``mpiexec -n 2 … train --mode sync`` and ``simulate``: the
    same errors, messages, bytes and final model (as tests/test_equivalence.py for SGD)."""
    from tests.test_equivalence import MPIEXEC, _simulate, _train
    from mpisgd.data.synthetic import DisjunctionStream, write_learner_shards

    if not MPIEXEC.exists():
        pytest.skip("no mpiexec")
    paths = write_learner_shards(DisjunctionStream(30, 2, seed=11, drift_prob=0.01), 400,
                                 str(tmp_path / "shards"))
    args = ["--protocol", "dynamic", "--delta", "0.1", "--period", "2", "--loss", "hinge",
            "--rule", "pa-ii", "-C", "0.1"]
    report, model = _train(2, paths, args, tmp_path / "train")
    sim = _simulate(paths, args, tmp_path / "sim")
    assert report["protocol"]["violations"] > 0
    assert sim["online"]["errors"] == report["online"]["errors"]
    assert sim["communication"] == report["communication"]  # one report schema (mpisgd.report)
    np.testing.assert_allclose(sim["model"]["coef"], model.coef, rtol=1e-9, atol=1e-12)


def test_warm_up_copies_the_rule():
    """``options`` (what warm_up's scratch learner is built from) rebuilds the
    same kernel arguments, the rule and C included."""
    L = OnlineLearners(2, 5, loss="hinge", rule="pa-ii", aggressiveness=0.3)
    for rebuilt, own in zip(OnlineLearners(2, 5, **L.options).params, L.params, strict=True):
        np.testing.assert_array_equal(rebuilt, own)
    L.warm_up()
