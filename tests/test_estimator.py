"""mpisgd.SGDClassifier / SGDRegressor: scikit-learn compatibility and bad input."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.utils.estimator_checks import parametrize_with_checks

from mpisgd import SGDClassifier, SGDRegressor
from mpisgd.errors import MpisgdError


@parametrize_with_checks(
    [
        SGDClassifier(random_state=0),
        SGDClassifier(loss="log", algorithm="dekel-casgd", alpha=1e-3, random_state=0),
        SGDClassifier(loss="modified_huber", algorithm="sgd", random_state=0),
        SGDRegressor(random_state=0),
        SGDRegressor(loss="huber", algorithm="dekel-sgd", alpha=1e-2, max_iter=20, random_state=0),
    ]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def blobs(m=300, n=5, seed=0):
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(m) < 0.5, 0, 1)
    X = rng.normal(size=(m, n)) + 2.0 * (y[:, None] - 0.5)
    return X, y


@pytest.mark.parametrize("algorithm", ["sgd", "asgd", "dekel-sgd", "dekel-asgd", "dekel-casgd"])
def test_algorithms_learn_dense_and_sparse_alike(algorithm):
    X, y = blobs()
    dense = SGDClassifier(algorithm=algorithm, alpha=1e-3, max_iter=20, bias_gain=0.1,
                          random_state=1).fit(X, y)
    sparse = SGDClassifier(algorithm=algorithm, alpha=1e-3, max_iter=20, bias_gain=0.1,
                           random_state=1).fit(
        sp.csr_matrix(X), y)
    np.testing.assert_allclose(dense.coef_, sparse.coef_, rtol=1e-12)
    assert dense.score(X, y) > 0.9


def test_label_mapping_is_explicit_and_stored():
    X, y = blobs()
    clf = SGDClassifier(random_state=0).fit(X, y)
    assert clf.label_map_ == {0: -1, 1: 1}
    meta = clf.to_model().meta
    assert meta["classes"] == [0, 1] and meta["label_map"] == {"-1": 0, "+1": 1}
    strings = np.where(y == 1, "spam", "ham")
    clf2 = SGDClassifier(random_state=0).fit(X, strings)
    np.testing.assert_array_equal(clf2.predict(X), np.where(clf.predict(X) == 1, "spam", "ham"))


def test_predict_proba_only_for_log_and_modified_huber():
    X, y = blobs()
    for loss in ("log", "modified_huber"):
        proba = SGDClassifier(loss=loss, random_state=0).fit(X, y).predict_proba(X)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert not hasattr(SGDClassifier(loss="hinge").fit(X, y), "predict_proba")


def test_partial_fit_continues_fit_exactly():
    X, y = blobs()
    full = SGDClassifier(max_iter=3, random_state=5).fit(X, y)
    part = SGDClassifier(random_state=5)
    for _ in range(3):
        part.partial_fit(X, y, classes=[0, 1])
    np.testing.assert_allclose(part.coef_, full.coef_, rtol=1e-12)
    assert part.intercept_ == pytest.approx(full.intercept_, rel=1e-12)


def test_calibration_picks_a_local_minimum():
    X, y = blobs()
    clf = SGDClassifier(algorithm="sgd", random_state=0).fit(X, y)
    costs = dict(clf.calibration_)
    best = costs[clf.eta0_]
    assert all(best <= c for c in costs.values())
    assert clf.eta0_ * 2 in costs and clf.eta0_ / 2 in costs


@pytest.mark.parametrize(
    "params,match",
    [
        (dict(loss="nope"), "unknown loss 'nope'"),
        (dict(schedule="nope"), "unknown schedule 'nope'"),
        (dict(algorithm="nope"), "unknown algorithm 'nope'"),
        (dict(algorithm="dekel-sgd", alpha=0.0), r"alpha \(λ\) must be > 0"),
        (dict(schedule="optimal", alpha=-1.0), r"alpha \(λ\) must be a finite number ≥ 0"),
        (dict(schedule="optimal", alpha=0.0), r"alpha \(λ\) must be > 0"),
        (dict(loss="squared"), "unknown loss 'squared'"),
    ],
)
def test_bad_parameters(params, match):
    X, y = blobs()
    with pytest.raises(MpisgdError, match=match):
        SGDClassifier(**params).fit(X, y)


def test_bad_data():
    X, y = blobs()
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(MpisgdError, match="NaN"):
        SGDClassifier().fit(bad, y)
    bad[3, 2] = np.inf
    with pytest.raises(MpisgdError, match="infinity"):
        SGDClassifier().fit(sp.csr_matrix(bad), y)
    with pytest.raises(MpisgdError, match="NaN"):
        SGDRegressor().fit(X, np.where(y == 1, np.nan, 1.0))
    with pytest.raises(MpisgdError, match="Only binary classification.*3 classes"):
        SGDClassifier().fit(X, np.arange(len(y)) % 3)
    with pytest.raises(MpisgdError, match="0 sample"):
        SGDClassifier().fit(X[:0], y[:0])
    clf = SGDClassifier(random_state=0).fit(X, y)
    with pytest.raises(MpisgdError, match="X has 4 features, but SGDClassifier is expecting 5"):
        clf.predict(X[:, :4])
    with pytest.raises(MpisgdError, match=r"labels \[7\] are not among the classes"):
        clf.partial_fit(X, np.where(y == 1, 7, 0))


def test_diverging_run_raises():
    X, y = blobs()
    with pytest.raises(MpisgdError, match="diverged"):
        SGDRegressor(schedule="constant", eta0=1e6, max_iter=50).fit(X, 100.0 * y)


def test_non_finite_class_labels():
    X, y = blobs()
    with pytest.raises(MpisgdError, match="NaN"):
        SGDClassifier().fit(X, np.where(y == 1, np.nan, 0.0))
