"""mpisgd.SGDClassifier / SGDRegressor: scikit-learn compatibility and bad input."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.utils.estimator_checks import parametrize_with_checks

from mpisgd import SGDClassifier, SGDRegressor
from mpisgd.errors import MpisgdError


def sgd_expected_failures(estimator):
    """scikit-learn's own SGD estimators fail these two for the same reason:
    an integer weight is one step of that size, not as many steps (and a zero
    weight still takes the regularization step), so weights do not equal
    repeated or removed rows exactly (test_sample_weight_is_like_repeating_rows
    checks that they do at convergence)."""
    reason = "SGD: a weight scales one step; it does not repeat or remove the row"
    return {"check_sample_weight_equivalence_on_dense_data": reason,
            "check_sample_weight_equivalence_on_sparse_data": reason}


@parametrize_with_checks(
    [
        SGDClassifier(random_state=0),
        SGDClassifier(loss="log", algorithm="dekel-casgd", alpha=1e-3, random_state=0),
        SGDClassifier(loss="modified_huber", algorithm="sgd", random_state=0),
        SGDClassifier(loss="log", algorithm="sgd", average=10, random_state=0),
        SGDRegressor(random_state=0),
        SGDRegressor(loss="huber", algorithm="dekel-sgd", alpha=1e-2, max_iter=20, random_state=0),
        SGDClassifier(learning_rate="adaptive", warm_start=True, n_jobs=2, random_state=0),
        SGDRegressor(penalty="l1", learning_rate="adaptive", random_state=0),
    ],
    expected_failed_checks=sgd_expected_failures,
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
    np.testing.assert_allclose(part.intercept_, full.intercept_, rtol=1e-12)


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
        (dict(learning_rate="nope"), "unknown learning_rate 'nope'"),
        (dict(algorithm="nope"), "unknown algorithm 'nope'"),
        (dict(algorithm="dekel-sgd", alpha=0.0), r"alpha \(λ\) must be > 0"),
        (dict(learning_rate="optimal", alpha=-1.0), r"alpha \(λ\) must be a finite number ≥ 0"),
        (dict(learning_rate="optimal", alpha=0.0), r"alpha \(λ\) must be > 0"),
        (dict(loss="squared"), "unknown loss 'squared'"),
        (dict(penalty="l0"), "unknown penalty 'l0'; choose one of l2, l1, elasticnet"),
        (dict(penalty="elasticnet", algorithm="asgd"), "penalty 'elasticnet' needs algorithm 'sgd'"),
        (dict(learning_rate="adaptive", algorithm="dekel-sgd"), "learning_rate must be None"),
        (dict(tol=float("nan")), "tol must be a finite number or None"),
        (dict(n_iter_no_change=0), "n_iter_no_change must be ≥ 1"),
        (dict(early_stopping=True, validation_fraction=1.0), "validation_fraction must lie in"),
        (dict(class_weight={7: 2.0}), "class_weight"),
        (dict(class_weight="nope"), "class_weight"),
        (dict(penalty="l1", algorithm="sgd", average=True), "penalty 'l1' runs the L1 kernel"),
        (dict(average=True, algorithm="sgdqn"), "'sgdqn' does not average"),
        (dict(average=True, algorithm="dekel-asgd"), "average=True selects Bottou's kernel"),
        (dict(average=5, avg_start=3), "give average or avg_start, not both"),
        (dict(average=-2), "average must be None, a bool or an int ≥ 0"),
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
    with pytest.raises(MpisgdError, match="at least 2 classes"):
        SGDClassifier().fit(X, np.zeros(len(y)))
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
        SGDRegressor(learning_rate="constant", eta0=1e6, max_iter=50).fit(X, 100.0 * y)


def test_non_finite_class_labels():
    X, y = blobs()
    with pytest.raises(MpisgdError, match="NaN"):
        SGDClassifier().fit(X, np.where(y == 1, np.nan, 0.0))


def topics(m=800, n=400, k=4, seed=0):
    """RCV1-style multiclass data: sparse, L2-normalized TF-IDF-like rows; each
    document mixes words of its topic (a block of 40) with common words."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, size=m)
    rows, cols, vals = [], [], []
    for i in range(m):
        own = 100 + 40 * y[i] + rng.choice(40, size=8, replace=False)
        common = rng.choice(100, size=12, replace=False)
        c = np.concatenate([own, common])
        v = rng.exponential(1.0, size=c.size)
        rows += [i] * c.size
        cols += c.tolist()
        vals += (v / np.linalg.norm(v)).tolist()
    X = sp.csr_matrix((vals, (rows, cols)), shape=(m, n))
    return X, np.array(["ccat", "ecat", "gcat", "mcat"])[y]


def test_binary_shapes_follow_scikit_learn():
    X, y = blobs()
    clf = SGDClassifier(random_state=0).fit(X, y)
    assert clf.coef_.shape == (1, X.shape[1]) and clf.intercept_.shape == (1,)
    reg = SGDRegressor(random_state=0).fit(X, y.astype(float))
    assert reg.coef_.shape == (X.shape[1],) and reg.intercept_.shape == (1,)
    np.testing.assert_allclose(clf.decision_function(X), X @ clf.coef_[0] + clf.intercept_[0])


@pytest.mark.parametrize("algorithm,alpha,penalty", [
    ("asgd", 1e-4, "l2"), ("dekel-sgd", 1e-3, "l2"), ("sgdqn", 1e-4, "l2"), ("sgd", 1e-4, "l1"),
    ("sgd", 1e-4, "elasticnet"),
])
def test_one_versus_rest_is_k_binary_problems(algorithm, alpha, penalty):
    X, y = topics()
    kw = dict(algorithm=algorithm, alpha=alpha, penalty=penalty, max_iter=3, random_state=2)
    clf = SGDClassifier(**kw).fit(X, y)
    assert clf.coef_.shape == (4, X.shape[1]) and clf.intercept_.shape == (4,)
    np.testing.assert_array_equal(clf.classes_, ["ccat", "ecat", "gcat", "mcat"])
    for c, label in enumerate(clf.classes_):
        alone = SGDClassifier(**kw, eta0=clf.eta0_)  # γ0 is calibrated once for all classes
        alone.fit(X, np.where(y == label, 1, -1))
        if algorithm == "sgdqn":  # the skip that γ0 allows
            assert clf.skip_ == alone.skip_
        np.testing.assert_allclose(clf.coef_[c], alone.coef_[0], rtol=1e-12, atol=1e-15)
        assert clf.intercept_[c] == pytest.approx(alone.intercept_[0], rel=1e-12, abs=1e-15)
    scores = clf.decision_function(X)
    np.testing.assert_array_equal(clf.predict(X), clf.classes_[np.argmax(scores, axis=1)])
    X_test, y_test = topics(m=400, seed=1)
    assert clf.score(X_test, y_test) > 0.9


def test_one_versus_rest_partial_fit_and_model_file(tmp_path):
    X, y = topics()
    full = SGDClassifier(loss="log", max_iter=2, random_state=3).fit(X, y)
    part = SGDClassifier(loss="log", random_state=3)
    for _ in range(2):
        part.partial_fit(X, y, classes=np.unique(y))
    np.testing.assert_allclose(part.coef_, full.coef_, rtol=1e-12)
    proba = full.predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(full.classes_[np.argmax(proba, axis=1)], full.predict(X))
    from mpisgd.model import LinearModel

    full.to_model().save(tmp_path / "m.h5")
    model = LinearModel.load(tmp_path / "m.h5")
    np.testing.assert_array_equal(model.predict(X), full.predict(X))
    loss, error, _ = full.objective(X, y)
    scored = model.evaluate(X, y)
    assert scored["error"] == pytest.approx(error) and scored["loss"] == pytest.approx(loss)


@pytest.mark.parametrize("average,avg_start", [(True, 1.0), (1, 1.0), (25, 25.0)])
def test_average_is_asgd_from_that_example(average, avg_start):
    X, y = blobs()
    ours = SGDClassifier(algorithm="sgd", average=average, max_iter=2, random_state=4).fit(X, y)
    asgd = SGDClassifier(algorithm="asgd", learning_rate="bottou", avg_start=avg_start, max_iter=2,
                         random_state=4).fit(X, y)
    np.testing.assert_allclose(ours.coef_, asgd.coef_, rtol=1e-12)
    plain = SGDClassifier(algorithm="asgd", average=False, max_iter=2, random_state=4).fit(X, y)
    sgd = SGDClassifier(algorithm="sgd", learning_rate="xu", max_iter=2, random_state=4).fit(X, y)
    np.testing.assert_allclose(plain.coef_, sgd.coef_, rtol=1e-12)
    assert not np.allclose(plain.coef_, ours.coef_)
