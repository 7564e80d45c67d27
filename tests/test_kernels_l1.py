"""L1 / elastic-net kernel on w = u − v (mpisgd.kernels.lasso) against the dense
twin (tests/naive.py), and the estimators' penalty option."""

import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.errors import MpisgdError
from mpisgd.estimator import SGDClassifier, SGDRegressor
from mpisgd.kernels import lasso
from mpisgd.kernels.losses import DEFAULT_PARAM, LOSSES
from mpisgd.kernels.schedules import SCHEDULES
from tests.naive import naive_lasso

CLASSIFICATION = ("hinge", "log", "squared_hinge", "modified_huber", "perceptron")


def random_problem(seed, m=40, n=12, density=0.4, regression=False):
    rng = np.random.default_rng(seed)
    X = sp.random(m, n, density=density, format="csr", random_state=rng, dtype=np.float64)
    X.data = rng.normal(size=X.data.size)
    if regression:
        w = rng.normal(size=n) * (rng.random(n) < 0.5)
        y = X @ w + 0.3 * rng.normal(size=m)
    else:
        y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    return X, y


def run_kernel(X, y, order, loss, schedule, eta0, lam, l1_ratio, t0=3.0, power=0.5,
               bias_gain=1.0, fit_intercept=True, splits=3, sw=None):
    r, st = lasso.new_state(X.shape[1])
    sw = np.ones(X.shape[0]) if sw is None else sw
    total, errors = 0.0, 0
    for part in np.array_split(order, splits):  # the state must carry over between calls
        s, e, status = lasso.lasso_epoch(
            X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data, y, sw,
            part.astype(np.int64), LOSSES[loss], DEFAULT_PARAM.get(loss, 0.0),
            SCHEDULES[schedule], eta0, lam, l1_ratio, t0, power, bias_gain, fit_intercept,
            r, st)
        assert status == 0
        total += s
        errors += e
    return lasso.weights(r, st), st[lasso.BIAS], total, errors


def compare(X, y, order, loss, schedule, eta0, lam, l1_ratio, **kw):
    got = run_kernel(X, y, order, loss, schedule, eta0, lam, l1_ratio, **kw)
    kw.pop("splits", None)
    args = dict(t0=3.0, power=0.5, bias_gain=1.0, fit_intercept=True, sw=None)
    args.update(kw)
    want = naive_lasso(X.toarray(), y, order, loss, DEFAULT_PARAM.get(loss, 0.0), schedule,
                       eta0, lam, l1_ratio, args["t0"], args["power"], args["bias_gain"],
                       args["fit_intercept"], args["sw"])
    for g, w in zip(got, want):
        g, w = np.atleast_1d(g), np.atleast_1d(w)
        assert np.allclose(g, w, rtol=1e-9, atol=1e-12), (g, w)
    return got


@pytest.mark.parametrize("loss", sorted(LOSSES))
@pytest.mark.parametrize("l1_ratio", [1.0, 0.5])
def test_every_loss_against_the_twin(loss, l1_ratio):
    X, y = random_problem(1, regression=loss not in CLASSIFICATION)
    rng = np.random.default_rng(2)
    order = np.concatenate([rng.permutation(X.shape[0]) for _ in range(3)])
    for schedule in SCHEDULES:
        compare(X, y, order, loss, schedule, 0.2, 0.05, l1_ratio)


@pytest.mark.parametrize("l1_ratio", [1.0, 0.5])
def test_sample_weights(l1_ratio):
    """Each example's gradient and loss scaled by its weight (0 included), as the twin."""
    X, y = random_problem(9, regression=True)
    sw = np.random.default_rng(10).choice([0.0, 0.5, 1.0, 3.0], size=X.shape[0])
    order = np.tile(np.arange(X.shape[0]), 2)
    got = compare(X, y, order, "squared", "bottou", 0.2, 0.05, l1_ratio, sw=sw)
    assert not np.allclose(got[0], run_kernel(X, y, order, "squared", "bottou", 0.2, 0.05,
                                              l1_ratio)[0])


def test_the_lasso_is_sparse():
    """λ1 zeroes coordinates exactly (as the dense twin does), more as λ1 grows."""
    X, y = random_problem(3, m=200, n=30, regression=True)
    order = np.tile(np.arange(X.shape[0]), 3)
    nnz = [np.count_nonzero(compare(X, y, order, "squared", "constant", 0.05, lam, 1.0)[0])
           for lam in (0.001, 0.5)]
    assert 0 < nnz[1] < nnz[0] <= 30


def test_scale_folding():
    """A falls below 1e-5 many times (γλ2 = 0.5 and 0.7): the owed penalty must survive."""
    X, y = random_problem(4, regression=True)
    order = np.tile(np.arange(X.shape[0]), 3)
    r, st = lasso.new_state(X.shape[1])
    lasso.lasso_epoch(X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data, y,
                      np.ones(len(y)), order.astype(np.int64), LOSSES["squared"], 0.0, SCHEDULES["constant"], 1.0,
                      0.9, 0.45, 0.0, 0.5, 1.0, True, r, st)
    assert 1e-5 <= st[lasso.SCALE] < 1.0  # folded: A = 0.505^120 ≈ 1e-36 without it
    compare(X, y, order, "squared", "constant", 1.0, 0.9, 0.45)
    compare(X, y, order, "huber", "constant", 1.0, 1.0, 0.3)
    compare(X, y, order, "squared", "optimal", 0.0, 0.1, 0.5, t0=0.0)


def test_too_large_a_step_is_refused():
    X, y = random_problem(4, regression=True)
    r, st = lasso.new_state(X.shape[1])
    _, _, status = lasso.lasso_epoch(
        X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data, y, np.ones(len(y)),
        np.arange(X.shape[0], dtype=np.int64), LOSSES["squared"], 0.0, SCHEDULES["constant"],
        2.0, 1.0, 0.5, 0.0, 0.5, 1.0, True, r, st)
    assert status == -2
    with pytest.raises(MpisgdError, match="eta0"):
        SGDRegressor(algorithm="sgd", penalty="elasticnet", l1_ratio=0.5, alpha=1.0,
                     learning_rate="constant", eta0=2.0).fit(X, y)


@pytest.mark.parametrize("penalty", ["l1", "elasticnet"])
def test_estimators_run_the_kernel(penalty):
    X, y = random_problem(5, m=300, n=20, regression=True)
    kw = dict(alpha=0.01, algorithm="sgd", penalty=penalty, l1_ratio=0.5,
              learning_rate="constant", eta0=0.05, shuffle=False, bias_gain=1.0)
    reg = SGDRegressor(max_iter=2, **kw).fit(X, y)
    rho = 1.0 if penalty == "l1" else 0.5
    order = np.tile(np.arange(X.shape[0]), 2)
    w, b, _, _ = naive_lasso(X.toarray(), y, order, "squared", 0.0, "constant", 0.05, 0.01, rho,
                             0.0, 0.5, 1.0, True)
    assert np.allclose(reg.coef_, w, rtol=1e-9, atol=1e-12)
    assert np.isclose(reg.intercept_, b, rtol=1e-9, atol=1e-12)
    # objective: mean loss + λ(ρ|w|₁ + (1 − ρ)/2 ‖w‖²)
    p = X @ w + b
    want = np.mean(0.5 * (p - y) ** 2) + 0.01 * (rho * np.abs(w).sum() + (1 - rho) / 2 * w @ w)
    assert np.isclose(reg.objective(X, y)[2], want, rtol=1e-12)
    inc = SGDRegressor(**kw)
    inc.partial_fit(X, y)
    inc.partial_fit(X, y)
    assert np.array_equal(inc.coef_, reg.coef_)
    yc = np.where(y > np.median(y), 1, 0)
    clf = SGDClassifier(loss="log", max_iter=2, **kw).fit(X, yc)
    assert clf.coef_.shape == (1, X.shape[1]) and clf.intercept_.shape == (1,)
    assert clf.score(X, yc) > 0.6


@pytest.mark.parametrize("alpha", [0.0, -1.0])
def test_lambda_must_be_positive(alpha):
    X, y = random_problem(6, regression=True)
    with pytest.raises(MpisgdError, match="alpha"):
        SGDRegressor(algorithm="sgd", penalty="l1", alpha=alpha).fit(X, y)


@pytest.mark.parametrize("bad,match", [
    (dict(penalty="l0"), "penalty"),
    (dict(penalty="elasticnet", l1_ratio=1.5), "l1_ratio"),
    (dict(penalty="l1", algorithm="asgd"), "algorithm"),
    (dict(penalty="l1", regularize_bias=True), "regularize_bias"),
])
def test_bad_options(bad, match):
    X, y = random_problem(7, regression=True)
    kw = dict(algorithm="sgd")
    kw.update(bad)
    with pytest.raises(MpisgdError, match=match):
        SGDRegressor(**kw).fit(X, y)


def test_fit_command_l1_reports_nonzeros(tmp_path, capsys):
    from mpisgd.cli import main
    from mpisgd.model import LinearModel

    X, y = random_problem(8, m=200, n=12, regression=True)
    train = tmp_path / "train.svm"
    from sklearn.datasets import dump_svmlight_file

    dump_svmlight_file(X, y, str(train), zero_based=False)
    out = tmp_path / "m.h5"
    assert main(["fit", str(train), "--loss", "squared", "--penalty", "l1",  # algorithm auto: sgd
                 "--lambda", "0.05", "--epochs", "2", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "l1 (l1_ratio 1, w = u - v)" in text
    nonzeros = [line.split("wNonzeros=")[1] for line in text.splitlines() if "wNonzeros=" in line]
    model = LinearModel.load(out)
    assert nonzeros[-1] == f"{np.count_nonzero(model.coef)}/12"
    bad = tmp_path / "n.h5"
    assert main(["fit", str(train), "--loss", "squared", "--penalty", "l1", "--algorithm", "asgd",
                 "-o", str(bad)]) == 2
    assert "needs algorithm 'sgd'" in capsys.readouterr().err
    assert not bad.exists()
