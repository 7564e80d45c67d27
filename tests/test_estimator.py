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


# -- scikit-learn's parameters and meanings --------------------------------------


def three_blobs(m=300, n=5, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, m)
    return rng.normal(size=(m, n)) + 1.5 * np.eye(3, n)[y], y


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("learning_rate", ["optimal", "constant", "invscaling", "adaptive"])
@pytest.mark.parametrize("average", [False, True, 7])
def test_same_steps_and_stopping_epoch_as_scikit_learn(learning_rate, average):
    """In file order on dense data, scikit-learn's SGDClassifier and ours take the
    same steps (γ_t of each learning_rate, the averages of ``average``, adaptive's
    γ0/5 on a plateau) and stop at the same epoch under tol."""
    from sklearn.linear_model import SGDClassifier as SkClassifier

    X, y = three_blobs()
    kw = dict(loss="hinge", alpha=1e-3, learning_rate=learning_rate, eta0=0.05,
              average=average, shuffle=False, max_iter=50, tol=1e-3, random_state=0)
    labels = [y == 1]
    if learning_rate in ("constant", "invscaling"):  # and one-versus-rest
        labels.append(y)
    for target in labels:
        ours = SGDClassifier(**kw).fit(X, target)
        theirs = SkClassifier(**kw).fit(X, target)
        assert ours.n_iter_ == theirs.n_iter_
        np.testing.assert_allclose(ours.coef_, theirs.coef_, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(ours.intercept_, theirs.intercept_, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("learning_rate", ["constant", "invscaling"])
def test_regressor_same_steps_as_scikit_learn(learning_rate):
    from sklearn.linear_model import SGDRegressor as SkRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    y = X @ rng.normal(size=5) + 0.1 * rng.normal(size=300)
    kw = dict(alpha=1e-3, learning_rate=learning_rate, eta0=0.01, average=False,
              shuffle=False, max_iter=50, tol=1e-3, random_state=0)
    ours, theirs = SGDRegressor(**kw).fit(X, y), SkRegressor(**kw).fit(X, y)
    assert ours.n_iter_ == theirs.n_iter_ < 50
    np.testing.assert_allclose(ours.coef_, theirs.coef_, rtol=1e-10, atol=1e-12)


def test_sample_weight_is_like_repeating_rows():
    """Weights 0, 1, 2 (summing to m: the same objective) against the rows
    removed, kept and doubled: the same model up to SGD's noise, far from the
    unweighted one."""
    X, y = blobs(m=400, seed=3)
    sw = np.random.default_rng(1).permutation(np.repeat([0, 1, 2], [100, 200, 100]))
    kw = dict(loss="log", alpha=1e-2, max_iter=30, tol=None, random_state=0)
    weighted = SGDClassifier(**kw).fit(X, y, sample_weight=sw)
    repeated = SGDClassifier(**kw).fit(np.repeat(X, sw, axis=0), np.repeat(y, sw))
    plain = SGDClassifier(**kw).fit(X, y)

    def gap(a, b):
        return np.linalg.norm(np.append(a.coef_, a.intercept_) - np.append(b.coef_, b.intercept_))

    assert gap(weighted, repeated) < 0.1 * gap(plain, repeated)
    ones = SGDClassifier(**kw).fit(X, y, sample_weight=np.ones(len(y)))
    np.testing.assert_array_equal(ones.coef_, plain.coef_)
    with pytest.raises(MpisgdError, match="sample_weight"):
        SGDClassifier().fit(X, y, sample_weight=-sw)


def imbalanced_topics():
    X, y = topics()
    keep = (y == "ccat") | (np.arange(len(y)) % 3 == 0)  # ccat 3 times as frequent
    return X[keep], y[keep]


def test_class_weight_is_the_sample_weights_it_implies():
    from sklearn.utils.class_weight import compute_sample_weight

    X, y = imbalanced_topics()
    kw = dict(max_iter=4, tol=None, random_state=0)
    balanced = SGDClassifier(class_weight="balanced", **kw).fit(X, y)
    implied = compute_sample_weight("balanced", y)
    same = SGDClassifier(**kw).fit(X, y, sample_weight=implied)
    np.testing.assert_array_equal(balanced.coef_, same.coef_)
    assert balanced.eta0_ == same.eta0_
    assert not np.allclose(balanced.coef_, SGDClassifier(**kw).fit(X, y).coef_)
    weights = {"ccat": 0.5, "mcat": 3.0}
    sw = np.random.default_rng(0).random(len(y))
    by_class = SGDClassifier(class_weight=weights, **kw).fit(X, y, sample_weight=sw)
    product = sw * np.array([weights.get(c, 1.0) for c in y])
    np.testing.assert_array_equal(by_class.coef_,
                                  SGDClassifier(**kw).fit(X, y, sample_weight=product).coef_)
    with pytest.raises(MpisgdError, match="'balanced' is not supported by partial_fit"):
        SGDClassifier(class_weight="balanced").partial_fit(X, y, classes=np.unique(y))


def test_warm_start_continues_the_fit():
    X, y = topics()
    kw = dict(tol=None, random_state=0)
    once = SGDClassifier(max_iter=5, **kw).fit(X, y)
    warm = SGDClassifier(max_iter=2, warm_start=True, **kw).fit(X, y)
    warm.set_params(max_iter=3).fit(X, y)
    np.testing.assert_allclose(warm.coef_, once.coef_, rtol=1e-12)
    assert warm.n_iter_ == 3 and warm.t_ == once.t_ == 5 * X.shape[0]
    cold = SGDClassifier(max_iter=2, **kw).fit(X, y)
    cold.set_params(max_iter=3).fit(X, y)  # from scratch
    np.testing.assert_array_equal(cold.coef_, SGDClassifier(max_iter=3, **kw).fit(X, y).coef_)
    with pytest.raises(MpisgdError, match="cannot continue the previous fit .* algorithm"):
        warm.set_params(algorithm="dekel-sgd").fit(X, y)


def test_early_stopping_holds_out_rows_and_stops_on_their_score():
    """The model is the fit on the training rows alone, for the epochs that the
    validation score's rule allows (recomputed here from the held-out rows)."""
    from sklearn.model_selection import StratifiedShuffleSplit

    X, y = blobs(m=600, seed=5)
    X += np.random.default_rng(6).normal(scale=2.0, size=X.shape)  # noisy: the score wobbles
    kw = dict(loss="log", tol=1e-3, n_iter_no_change=3, random_state=0)
    clf = SGDClassifier(early_stopping=True, validation_fraction=0.2, max_iter=100, **kw)
    clf.fit(X, y)
    train, val = next(StratifiedShuffleSplit(test_size=0.2, random_state=0).split(X, y))
    train, val = np.sort(train), np.sort(val)
    assert clf.t_ == clf.n_iter_ * len(train) and clf.n_iter_ < 100
    best, stalled, stop = -np.inf, 0, None
    for epochs in range(1, clf.n_iter_ + 1):
        alone = SGDClassifier(max_iter=epochs, **dict(kw, tol=None)).fit(X[train], y[train])
        score = alone.score(X[val], y[val])
        stalled = stalled + 1 if score < best + 1e-3 else 0
        best = max(best, score)
        if stalled >= 3:
            stop = epochs
            break
    assert stop == clf.n_iter_
    np.testing.assert_array_equal(alone.coef_, clf.coef_)


def test_tol_stops_on_the_training_objective():
    """fit stops at the first epoch where n_iter_no_change epochs in a row missed
    the best objective (mean online loss + the model's penalty) by tol."""
    from sklearn.exceptions import ConvergenceWarning

    X, y = blobs()
    free = SGDClassifier(tol=None, random_state=0)
    best, stalled, stop = np.inf, 0, None
    for epoch, _, mean_loss, _ in free._epochs(X, y, max_iter=100):
        objective = mean_loss + 0.5 * 1e-4 * float(np.sum(free.coef_ ** 2))
        stalled = stalled + 1 if objective > best - 1e-3 else 0
        best = min(best, objective)
        if stalled >= 5:
            stop = epoch
            break
    clf = SGDClassifier(random_state=0).fit(X, y)  # tol=1e-3, n_iter_no_change=5
    assert clf.n_iter_ == stop < 100
    np.testing.assert_array_equal(clf.coef_, free.coef_)
    with pytest.warns(ConvergenceWarning, match="maximum number of iterations"):
        SGDClassifier(max_iter=2, random_state=0).fit(X, y)
    assert SGDClassifier(tol=None, max_iter=7, random_state=0).fit(X, y).n_iter_ == 7


def test_n_jobs_trains_the_classes_in_threads_to_the_same_model(monkeypatch):
    import threading

    from mpisgd import estimator

    X, y = topics()
    one = SGDClassifier(random_state=0).fit(X, y)
    threads = set()
    epoch = estimator._Problem.epoch

    def spy(self, *args):
        threads.add(threading.get_ident())
        return epoch(self, *args)

    monkeypatch.setattr(estimator._Problem, "epoch", spy)
    two = SGDClassifier(random_state=0, n_jobs=2).fit(X, y)
    assert len(threads) == 2
    np.testing.assert_array_equal(one.coef_, two.coef_)
    np.testing.assert_array_equal(one.intercept_, two.intercept_)
    assert one.n_iter_ == two.n_iter_


def test_verbose_prints_scikit_learns_epoch_lines(capsys):
    import re

    X, y = blobs()
    SGDClassifier(verbose=1, max_iter=3, tol=None, random_state=0).fit(X, y)
    out = capsys.readouterr().out
    assert out.startswith("# Using eta0=")
    assert out.count("-- Epoch") == 3 and out.count("Total training time:") == 3
    assert re.search(r"-- Epoch 3\nNorm: \d+\.\d\d, NNZs: 5, Bias: -?\d+\.\d{6}, T: 900, "
                     r"Avg\. loss: \d+\.\d{6}\nTotal training time: \d+\.\d\d seconds\.", out)
    clf = SGDClassifier(verbose=1, random_state=0).fit(X, y)
    assert f"Convergence after {clf.n_iter_} epochs took" in capsys.readouterr().out


def test_auto_picks_asgd_for_l2_and_sgd_otherwise():
    X, y = blobs()
    for kw, algorithm in [({}, "asgd"), (dict(average=False), "sgd"),
                          (dict(penalty="l1"), "sgd"), (dict(penalty="elasticnet"), "sgd")]:
        reg = SGDRegressor(random_state=0, **kw).fit(X, y.astype(float))
        assert reg.to_model().meta["algorithm"] == algorithm
    auto = SGDRegressor(penalty="l1", random_state=0).fit(X, y.astype(float))
    sgd = SGDRegressor(penalty="l1", algorithm="sgd", random_state=0).fit(X, y.astype(float))
    np.testing.assert_array_equal(auto.coef_, sgd.coef_)


def test_eta0_is_calibrated_once_for_all_classes():
    """One γ0: the one that minimizes the sum of the K classes' sample objectives."""
    from mpisgd.calibrate import calibrate_eta0
    from mpisgd.estimator import _csr

    X, y = topics()
    clf = SGDClassifier(max_iter=1, random_state=0).fit(X, y)
    assert np.ndim(clf.eta0_) == 0
    targets = np.where(y[None, :] == clf.classes_[:, None], 1.0, -1.0)
    order = np.random.RandomState(0).permutation(X.shape[0]).astype(np.int64)
    eta0, tried = calibrate_eta0(*_csr(X), targets, X.shape[1], order, 0, 0.0, 1e-4, True,
                                 False, 0.01)
    assert (eta0, tried) == (clf.eta0_, clf.calibration_)
    per_class = {calibrate_eta0(*_csr(X), t, X.shape[1], order, 0, 0.0, 1e-4, True, False,
                                0.01)[0] for t in targets}
    assert len(per_class) > 1  # the classes alone would disagree


def test_digits_accuracy_near_scikit_learns():
    """Defaults of both (hinge, λ = 1e-4, tol = 1e-3); ours ASGD with a calibrated γ0,
    theirs 'optimal': test accuracy within 2 points of scikit-learn's, or better."""
    from sklearn.datasets import load_digits
    from sklearn.linear_model import SGDClassifier as SkClassifier
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    ours = np.mean([SGDClassifier(random_state=s).fit(Xtr, ytr).score(Xte, yte)
                    for s in range(3)])
    theirs = np.mean([SkClassifier(random_state=s).fit(Xtr, ytr).score(Xte, yte)
                      for s in range(3)])
    assert ours >= theirs - 0.02, (ours, theirs)


def test_a9a_accuracy_near_scikit_learns():
    """a9a, the same parameters (hinge, λ = 1e-4, tol = 1e-3, max_iter = 1000): test
    accuracy within 0.5 points of scikit-learn's, or better."""
    from helpers.data import real_data
    from sklearn.linear_model import SGDClassifier as SkClassifier

    from mpisgd.data.libsvm import load_svmlight

    X, y = load_svmlight(real_data("a9a", "a9a.bz2"), n_features=123)
    Xt, yt = load_svmlight(real_data("a9a", "a9a.t.bz2"), n_features=123)
    ours = SGDClassifier(random_state=0).fit(X, y).score(Xt, yt)
    X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int32)  # theirs: int32
    theirs = SkClassifier(random_state=0).fit(X, y).score(Xt, yt)
    assert ours >= theirs - 0.005, (ours, theirs)


def test_regressor_early_stopping_on_the_r2_of_the_held_out_rows():
    from sklearn.metrics import r2_score
    from sklearn.model_selection import ShuffleSplit

    rng = np.random.default_rng(7)
    X = rng.normal(size=(500, 5))
    y = X @ rng.normal(size=5) + rng.normal(scale=2.0, size=500)
    sw = rng.choice([0.5, 1.0, 2.0], size=500)
    kw = dict(tol=1e-4, n_iter_no_change=3, random_state=0)
    reg = SGDRegressor(early_stopping=True, max_iter=100, **kw).fit(X, y, sample_weight=sw)
    train, val = map(np.sort, next(ShuffleSplit(test_size=0.1, random_state=0).split(X)))
    assert reg.t_ == reg.n_iter_ * len(train) and reg.n_iter_ < 100
    best, stalled, stop = -np.inf, 0, None
    for epochs in range(1, reg.n_iter_ + 1):
        alone = SGDRegressor(max_iter=epochs, **dict(kw, tol=None))
        alone.fit(X[train], y[train], sample_weight=sw[train])
        score = r2_score(y[val], alone.predict(X[val]), sample_weight=sw[val])
        stalled = stalled + 1 if score < best + 1e-4 else 0
        best = max(best, score)
        if stalled >= 3:
            stop = epochs
            break
    assert stop == reg.n_iter_
    np.testing.assert_array_equal(alone.coef_, reg.coef_)


def test_partial_fit_takes_sample_weight():
    X, y = blobs()
    sw = np.random.default_rng(2).random(len(y))
    part = SGDClassifier(random_state=0).partial_fit(X, y, classes=[0, 1], sample_weight=sw)
    full = SGDClassifier(max_iter=1, tol=None, random_state=0).fit(X, y, sample_weight=sw)
    np.testing.assert_array_equal(part.coef_, full.coef_)
    assert not np.array_equal(part.coef_, SGDClassifier(random_state=0).partial_fit(
        X, y, classes=[0, 1]).coef_)
    reg = SGDRegressor(random_state=0).partial_fit(X, y.astype(float), sample_weight=sw)
    np.testing.assert_array_equal(reg.coef_, SGDRegressor(max_iter=1, tol=None, random_state=0)
                                  .fit(X, y.astype(float), sample_weight=sw).coef_)
