"""Regularized dual averaging (Xiao 2010) in the online learners
(mpisgd.kernels.online, mpisgd.learners) against the dense twin
(tests/naive.py), alone and under the simulator's static protocol; the O(1)
distance on the dual state; bad input."""

import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.errors import MpisgdError
from mpisgd.learners import OnlineLearners
from mpisgd.protocol import ProtocolConfig
from mpisgd.simulator import Simulation
from tests.naive import naive_rda


def rows(seed, m=240, n=12):
    rng = np.random.default_rng(seed)
    X = sp.random(m, n, density=0.4, format="csr", random_state=rng)
    X.data = rng.normal(size=X.data.size)
    y = np.where(X @ rng.normal(size=n) + 0.3 * rng.normal(size=m) > 0, 1.0, -1.0)
    return X, y


@pytest.mark.parametrize("loss,gamma,l1", [("log", 1.0, 0.0), ("log", 0.5, 0.05), ("hinge", 2.0, 0.1),
                                           ("squared_hinge", 2.0, 0.2)])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_against_the_twin(loss, gamma, l1, fit_intercept):
    X, y = rows(1)
    k = 3
    L = OnlineLearners(k, X.shape[1], loss=loss, rule="rda", gamma=gamma, l1=l1, fit_intercept=fit_intercept)
    L.learn(X.indptr, X.indices, X.data, y, np.arange(len(y)) % k)
    w, b, loss_sum, errors = naive_rda(X, y, k, loss, gamma, l1, fit_intercept)
    for l in range(k):
        coef, intercept = L.weights(l)
        np.testing.assert_allclose(coef, w[l], rtol=1e-10, atol=1e-12)
        assert intercept == pytest.approx(b[l], rel=1e-10, abs=1e-12)
    np.testing.assert_allclose(L.loss_sum, loss_sum, rtol=1e-10)
    assert L.errors.tolist() == errors.tolist()
    if l1 > 0:  # the threshold makes exact zeros
        assert (w == 0).any() and all((L.weights(l)[0] == 0).sum() == (w[l] == 0).sum() for l in range(k))


@pytest.mark.parametrize("l1", [0.0, 0.05])
def test_under_the_simulator_static(l1):
    """The static protocol averages the dual state: every b rounds each learner
    takes the mean G; the simulator's errors and final model (the mean of the
    learners' models) are the twin's."""
    X, y = rows(2, m=300)
    k, period, gamma = 3, 4, 0.5
    learner = {"loss": "log", "rule": "rda", "gamma": gamma, "l1": l1}
    sim = Simulation(k, X.shape[1], len(y) // k, ProtocolConfig(name="static", period=period), learner, mode="sync")
    sim.feed(X.indptr, X.indices, X.data, y)
    result = sim.finish()
    w, b, loss_sum, errors = naive_rda(X, y, k, "log", gamma, l1, period=period)
    assert result["errors"] == int(errors.sum())
    assert result["loss"] == pytest.approx(loss_sum.sum(), rel=1e-10)
    np.testing.assert_allclose(result["coef"], w.mean(axis=0), rtol=1e-9, atol=1e-12)
    assert result["intercept"] == pytest.approx(b.mean(), rel=1e-9)


def test_distance_is_the_dual_one_in_o1_and_bounds_the_primal():
    """‖u − r‖² from the O(1) formula equals the dense one, and bounds the distance
    of the models ‖soft(u, θ) − soft(r, θ)‖² (soft-thresholding is non-expansive)."""
    X, y = rows(3)
    k, gamma, l1 = 3, 0.5, 0.05
    L = OnlineLearners(k, X.shape[1], loss="log", rule="rda", gamma=gamma, l1=l1)
    owner = np.arange(len(y)) % k
    half = 120
    L.learn(X.indptr[: half + 1], X.indices, X.data, y[:half], owner[:half])
    L.set_reference(L.mean_model())
    a = X.indptr[half]
    L.learn(X.indptr[half:] - a, X.indices[a:], X.data[a:], y[half:], owner[half:])
    u = np.array([L.alpha[l] * L.r + L.s[l] * L.V[l] for l in range(k)])
    d = L.distances()
    np.testing.assert_allclose(d, ((u - L.r) ** 2).sum(axis=1) + (L.bias - L.r_bias) ** 2, rtol=1e-9)
    theta = l1 * np.sqrt(L.steps[0]) / gamma
    soft = lambda v: np.sign(v) * np.maximum(np.abs(v) - theta, 0.0)  # noqa: E731
    primal = ((np.array([L.weights(l)[0] for l in range(k)]) - soft(L.r)) ** 2).sum(axis=1)
    primal += (L.bias - L.r_bias) ** 2
    assert np.all(primal <= d * (1 + 1e-12)) and np.any(primal < d)


@pytest.mark.parametrize("kw,match", [
    (dict(gamma=0.0), "gamma"),
    (dict(gamma=-1.0), "gamma"),
    (dict(gamma=float("inf")), "gamma"),
    (dict(l1=-0.1), "l1"),
    (dict(l1=float("nan")), "l1"),
    (dict(lam=1e-3), "lam"),
    (dict(average=True), "average"),
    (dict(regularize_bias=True), "regularize_bias"),
    (dict(rule="sgd", l1=0.1), "l1"),
    (dict(rule="pa", loss="hinge", l1=0.1), "l1"),
])
def test_bad_input(kw, match):
    args = dict(loss="log", rule="rda")
    args.update(kw)
    with pytest.raises(MpisgdError, match=match):
        OnlineLearners(2, 5, **args)


def test_bad_input_from_the_command_line_before_learning(tmp_path, capsys):
    from mpisgd.cli import main

    for bad, match in ((["--gamma", "0"], "gamma"), (["--l1", "-1"], "l1"), (["--lam", "0.1"], "lam"),
                       (["--average"], "average")):
        assert main(["simulate", "--synthetic", "disjunction", "--learners", "2", "--rounds", "10", "--out",
                     str(tmp_path / "out"), "--quiet", "--rule", "rda", *bad]) != 0
        assert f"error: {match}:" in capsys.readouterr().err
        assert not (tmp_path / "out" / "report.json").exists()


def test_report_records_the_rule(tmp_path):
    import json

    from mpisgd.cli import main

    assert main(["simulate", "--synthetic", "disjunction", "--learners", "2", "--rounds", "50", "--out",
                 str(tmp_path), "--quiet", "--rule", "rda", "--gamma", "0.5", "--l1", "0.01",
                 "--protocol", "dynamic", "--delta", "auto"]) == 0
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["configuration"]["learner"]["rule"] == "rda" and rep["configuration"]["learner"]["gamma"] == 0.5 and rep["configuration"]["learner"]["l1"] == 0.01
    assert rep["delta_auto"]["eta_P"] == pytest.approx(1 / (0.5 * np.sqrt(rep["delta_auto"]["pilot_rounds"])))


def test_warm_up_copies_the_rule():
    L = OnlineLearners(2, 5, loss="log", rule="rda", gamma=0.3, l1=0.01)
    for rebuilt, own in zip(OnlineLearners(2, 5, **L.options).params, L.params, strict=True):
        np.testing.assert_array_equal(rebuilt, own)
    L.warm_up()
