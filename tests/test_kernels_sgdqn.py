"""SGD-QN kernel (mpisgd.kernels.sgdqn) against the dense twin (tests/naive.py)."""

import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.errors import MpisgdError
from mpisgd.estimator import SGDClassifier, SGDRegressor
from mpisgd.kernels import sgdqn
from mpisgd.kernels.losses import DEFAULT_PARAM, LOSSES
from tests.naive import naive_sgdqn

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


def run_kernel(X, y, order, loss, lam, skip, gamma0, bias_gain, fit_intercept, regularize_bias,
               splits=3, sw=None):
    w, B, st = sgdqn.new_state(X.shape[1], gamma0, skip)
    sw = np.ones(X.shape[0]) if sw is None else sw
    total, errors = 0.0, 0
    for part in np.array_split(order, splits):  # the state must carry over between calls
        s, e, status = sgdqn.sgdqn_epoch(
            X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data, y, sw,
            part.astype(np.int64), LOSSES[loss], DEFAULT_PARAM.get(loss, 0.0), lam, float(skip),
            bias_gain, fit_intercept, regularize_bias, w, B, st)
        assert status == 0
        total += s
        errors += e
    return w, st[sgdqn.BIAS], B, total, errors


def compare(X, y, order, loss, lam, skip, gamma0=0.5, bias_gain=1.0, fit_intercept=True,
            regularize_bias=False, sw=None):
    got = run_kernel(X, y, order, loss, lam, skip, gamma0, bias_gain, fit_intercept,
                     regularize_bias, sw=sw)
    want = naive_sgdqn(X.toarray(), y, order, loss, DEFAULT_PARAM.get(loss, 0.0), lam, skip,
                       gamma0, bias_gain, fit_intercept, regularize_bias, sw=sw)
    for g, w in zip(got, want):
        g, w = np.atleast_1d(g), np.atleast_1d(w)
        assert np.allclose(g, w, rtol=1e-9, atol=1e-12), (g, w)


@pytest.mark.parametrize("loss", sorted(LOSSES))
@pytest.mark.parametrize("skip", [1, 3, 7])
def test_every_loss_against_the_twin(loss, skip):
    X, y = random_problem(1, regression=loss not in CLASSIFICATION)
    rng = np.random.default_rng(2)
    order = np.concatenate([rng.permutation(X.shape[0]) for _ in range(3)])
    compare(X, y, order, loss, 0.05, skip)


@pytest.mark.parametrize("loss", ["squared_hinge", "log", "squared"])
def test_sample_weights(loss):
    """Each example's gradient and loss scaled by its weight (0 included), as the twin."""
    X, y = random_problem(5, regression=loss == "squared")
    sw = np.random.default_rng(6).choice([0.0, 0.5, 1.0, 3.0], size=X.shape[0])
    order = np.tile(np.arange(X.shape[0]), 2)
    compare(X, y, order, loss, 0.05, 3, sw=sw)
    assert not np.allclose(run_kernel(X, y, order, loss, 0.05, 3, 0.5, 1.0, True, False, sw=sw)[0],
                           run_kernel(X, y, order, loss, 0.05, 3, 0.5, 1.0, True, False)[0])


@pytest.mark.parametrize("fit_intercept,regularize_bias,bias_gain",
                         [(True, True, 1.0), (True, False, 0.01), (False, False, 1.0)])
def test_bias_options(fit_intercept, regularize_bias, bias_gain):
    X, y = random_problem(3)
    order = np.tile(np.arange(X.shape[0]), 2)
    compare(X, y, order, "squared_hinge", 0.02, 4, fit_intercept=fit_intercept,
            regularize_bias=regularize_bias, bias_gain=bias_gain)


def test_curvature_moves_b_off_the_sgd_schedule():
    """The secant estimate must change B beyond the 1/(1/γ0 + λt) of plain SGD
    on the coordinates that carry curvature (squared hinge, many margin errors)."""
    X, y = random_problem(4, m=200, n=6, density=0.8)
    order = np.tile(np.arange(X.shape[0]), 2)
    lam, gamma0, skip = 0.01, 0.5, 2
    _, _, B, _, _ = run_kernel(X, y, order, "squared_hinge", lam, skip, gamma0, 1.0, True, False)
    sgd_gain = 1.0 / (1.0 / gamma0 + lam * skip * ((len(order) - 1) // skip))
    assert np.all(B <= sgd_gain * (1 + 1e-12))
    assert np.min(B) < 0.5 * sgd_gain


def test_estimator_runs_the_kernel():
    """SGDClassifier(algorithm="sgdqn") in file order equals the twin, and
    partial_fit resumes exactly."""
    X, y = random_problem(5, m=300, n=20, density=0.3)
    kw = dict(loss="squared_hinge", alpha=0.01, algorithm="sgdqn", eta0=0.25, shuffle=False,
              bias_gain=1.0)
    clf = SGDClassifier(max_iter=2, **kw).fit(X, y)
    assert clf.skip_ == 16  # n / (non-zeros per row) < 16
    order = np.tile(np.arange(X.shape[0]), 2)
    w, b, _, _, _ = naive_sgdqn(X.toarray(), y, order, "squared_hinge", 0.0, 0.01, 16, 0.25,
                                1.0, True, False)
    assert clf.coef_.shape == (1, 20) and clf.intercept_.shape == (1,)  # scikit-learn's shapes
    assert np.allclose(clf.coef_[0], w, rtol=1e-9, atol=1e-12)
    assert np.isclose(clf.intercept_[0], b, rtol=1e-9, atol=1e-12)
    inc = SGDClassifier(**kw)
    inc.partial_fit(X, y)
    inc.partial_fit(X, y)
    assert np.array_equal(inc.coef_, clf.coef_)


def test_eta0_too_large_for_lambda():
    X, y = random_problem(8)
    with pytest.raises(MpisgdError, match="eta0"):
        SGDClassifier(loss="squared_hinge", algorithm="sgdqn", alpha=1.0, eta0=1.0).fit(X, y)


@pytest.mark.parametrize("alpha", [0.0, -1e-4])
def test_lambda_must_be_positive(alpha):
    X, y = random_problem(6)
    with pytest.raises(MpisgdError, match="alpha"):
        SGDClassifier(loss="squared_hinge", algorithm="sgdqn", alpha=alpha).fit(X, y)
    with pytest.raises(MpisgdError, match="alpha"):
        SGDRegressor(algorithm="sgdqn", alpha=alpha).fit(X, X @ np.ones(X.shape[1]))


def test_learning_rate_is_refused():
    X, y = random_problem(7)
    with pytest.raises(MpisgdError, match="learning_rate must be None"):
        SGDClassifier(algorithm="sgdqn", learning_rate="constant").fit(X, y)


def test_fit_command_sgdqn(tmp_path, capsys):
    from sklearn.datasets import dump_svmlight_file

    from mpisgd.cli import main

    X, y = random_problem(9, m=200, n=12)
    train = tmp_path / "train.svm"
    dump_svmlight_file(X, y, str(train), zero_based=False)
    out = tmp_path / "m.h5"
    assert main(["fit", str(train), "--loss", "squared_hinge", "--algorithm", "sgdqn",
                 "--lambda", "1e-3", "--epochs", "2", "-o", str(out)]) == 0
    assert "diagonal B from eta0 (SGD-QN)" in capsys.readouterr().out
    assert out.exists()
    assert main(["fit", str(train), "--algorithm", "sgdqn", "--lambda", "0", "-o",
                 str(tmp_path / "n.h5")]) == 2
    assert "alpha (λ) must be > 0" in capsys.readouterr().err
