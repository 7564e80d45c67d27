"""Online k-means (mpisgd.kernels.kmeans, mpisgd.kmeans) against the dense twin."""

import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.errors import MpisgdError
from mpisgd.kernels import kmeans
from mpisgd.kmeans import OnlineKMeans
from tests.naive import naive_kmeans


def blobs(seed, m=300, n=15, k=4, density=0.5):
    rng = np.random.default_rng(seed)
    means = rng.normal(scale=3.0, size=(k, n))
    labels = rng.integers(k, size=m)
    X = means[labels] + rng.normal(size=(m, n))
    X *= rng.random((m, n)) < density  # sparse rows
    return sp.csr_matrix(X), labels


@pytest.mark.parametrize("init_count", [0.0, 1.0, 5.0])
def test_kernel_against_the_twin(init_count):
    X, _ = blobs(1)
    rng = np.random.default_rng(2)
    order = np.concatenate([rng.permutation(X.shape[0]) for _ in range(3)])
    start = X[:4].toarray() + 0.1
    C, s, q, n = kmeans.new_state(start, np.full(4, init_count))
    total = 0.0
    for part in np.array_split(order, 3):  # the state must carry over between calls
        total += kmeans.kmeans_epoch(X.indptr.astype(np.int64), X.indices.astype(np.int32),
                                     X.data, part.astype(np.int64), C, s, q, n)
    W, counts, want_total = naive_kmeans(X.toarray(), order, start, np.full(4, init_count))
    assert np.allclose(kmeans.centers(C, s), W, rtol=1e-9, atol=1e-10)
    assert np.array_equal(n, counts)
    assert np.isclose(total, want_total, rtol=1e-9)
    assert np.allclose(q * s**2, (W**2).sum(axis=1), rtol=1e-8)  # ‖w_k‖² kept up to date


def test_scale_folding():
    """A centroid that takes > 1e5 examples folds its scale; the result stays the twin's."""
    rng = np.random.default_rng(3)
    X = sp.random(50, 6, density=0.6, format="csr", random_state=rng)
    order = np.tile(np.arange(50), 2500)  # 125,000 steps, one centroid
    C, s, q, n = kmeans.new_state(np.zeros((1, 6)), np.zeros(1))
    kmeans.kmeans_epoch(X.indptr.astype(np.int64), X.indices.astype(np.int32), X.data,
                        order.astype(np.int64), C, s, q, n)
    assert s[0] > 1e-5 and n[0] == len(order)
    # MacQueen with one centroid is the running mean
    assert np.allclose(kmeans.centers(C, s)[0], X.toarray().mean(axis=0), rtol=1e-8)


def test_estimator_fit_predict_inertia():
    X, labels = blobs(4, m=600)
    km = OnlineKMeans(n_clusters=4, max_iter=3, random_state=0).fit(X)
    assert km.cluster_centers_.shape == (4, 15) and km.n_iter_ == 3
    pred = km.predict(X)
    assert np.array_equal(pred, km.labels_)
    D = ((X.toarray()[:, None, :] - km.cluster_centers_[None]) ** 2).sum(axis=2)
    assert np.array_equal(pred, D.argmin(axis=1))
    assert np.isclose(km.inertia(X), D.min(axis=1).sum(), rtol=1e-9)
    assert np.isclose(km.inertia_, km.inertia(X)) and km.score(X) == -km.inertia(X)
    # close to batch k-means (Lloyd, 10 restarts) on the same data
    from sklearn.cluster import KMeans

    batch = KMeans(4, n_init=10, random_state=0).fit(X).inertia_
    assert km.inertia_ < 1.1 * batch
    # dense input gives the same model
    dense = OnlineKMeans(n_clusters=4, max_iter=3, random_state=0).fit(X.toarray())
    assert np.allclose(dense.cluster_centers_, km.cluster_centers_)


def test_partial_fit_continues():
    X, _ = blobs(5)
    start = X[:3].toarray()
    a = OnlineKMeans(n_clusters=3, init=start, max_iter=2, shuffle=False).fit(X)
    b = OnlineKMeans(n_clusters=3, init=start, shuffle=False)
    b.partial_fit(X)
    b.partial_fit(X)
    assert np.array_equal(a.cluster_centers_, b.cluster_centers_)
    W, counts, _ = naive_kmeans(X.toarray(), np.tile(np.arange(X.shape[0]), 2), start,
                                np.ones(3))
    assert np.allclose(a.cluster_centers_, W, rtol=1e-9, atol=1e-10)
    assert np.array_equal(a.counts_, counts)


@pytest.mark.parametrize("bad,match", [
    (dict(n_clusters=11), "more than the 10 rows"),
    (dict(n_clusters=0), "n_clusters"),
    (dict(n_clusters=2, init="kmeans"), "init"),
    (dict(n_clusters=2, init=np.zeros((3, 15))), "shape"),
    (dict(n_clusters=2, init_count=-1), "init_count"),
    (dict(n_clusters=2, max_iter=0), "max_iter"),
])
def test_bad_input(bad, match):
    X, _ = blobs(6, m=10)
    with pytest.raises(MpisgdError, match=match):
        OnlineKMeans(**bad).fit(X)
    with pytest.raises(MpisgdError, match=match):
        OnlineKMeans(**bad).partial_fit(X)


def test_predict_checks_the_width():
    X, _ = blobs(7)
    km = OnlineKMeans(n_clusters=2, random_state=0).fit(X)
    with pytest.raises(MpisgdError):
        km.predict(X[:, :5])
