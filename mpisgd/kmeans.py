"""Online k-means (MacQueen's update with per-centroid counts; Bottou 2010,
Table 1) as a small scikit-learn style estimator over mpisgd.kernels.kmeans.

    km = OnlineKMeans(n_clusters=10, random_state=0).fit(X)   # X dense or scipy.sparse
    km.predict(X), km.inertia(X), km.partial_fit(X_more)

Initial centroids: k-means++ seeding (scikit-learn's ``kmeans_plusplus``) on
the first batch, or k distinct random rows (``init="random"``), or an array;
each starts with count ``init_count`` (1: the seed counts as its first example,
as in MacQueen's paper; 0: the first example assigned replaces it).
"""

import math

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data

from mpisgd.errors import MpisgdError
from mpisgd.kernels import kmeans


class OnlineKMeans(ClusterMixin, BaseEstimator):
    """MacQueen's online k-means.

    Parameters: ``n_clusters`` k; ``init`` "k-means++", "random" or an array
    (k, n_features); ``init_count`` the count n_k each initial centroid starts
    with (≥ 0); ``max_iter`` epochs of ``fit``; ``shuffle`` and ``random_state``
    the per-epoch permutation and the seeding.

    Fitted: ``cluster_centers_``, ``counts_`` (examples assigned to each
    centroid, seeds included), ``labels_`` and ``inertia_`` (sum of squared
    distances to the closest centroid on the data of the last ``fit``),
    ``online_inertia_`` (the same distances measured before each update during
    the last epoch), ``n_iter_``, ``n_steps_``.
    """

    def __init__(self, n_clusters=8, *, init="k-means++", init_count=1, max_iter=1,
                 shuffle=True, random_state=None):
        self.n_clusters = n_clusters
        self.init = init
        self.init_count = init_count
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _validate(self, X, reset):
        try:
            X = validate_data(self, X, accept_sparse="csr", dtype=np.float64, reset=reset)
        except ValueError as exc:
            raise MpisgdError(f"{type(self).__name__}: {exc}") from None
        X = sp.csr_matrix(X)
        X.sum_duplicates()  # the kernel's ‖c‖² update assumes one entry per column
        return X

    def _check_params(self, m):
        name = type(self).__name__
        k = self.n_clusters
        if not (isinstance(k, (int, np.integer)) and k >= 1):
            raise MpisgdError(f"{name}: n_clusters must be an integer ≥ 1, got {k!r}")
        if k > m:
            raise MpisgdError(
                f"{name}: n_clusters={k} is more than the {m} rows of the first batch"
            )
        if not (isinstance(self.max_iter, (int, np.integer)) and self.max_iter >= 1):
            raise MpisgdError(f"{name}: max_iter must be an integer ≥ 1, got {self.max_iter!r}")
        count = float(self.init_count)
        if not (math.isfinite(count) and count >= 0):
            raise MpisgdError(f"{name}: init_count must be ≥ 0, got {self.init_count!r}")

    def _seed(self, X, rng):
        name = type(self).__name__
        k = self.n_clusters
        if isinstance(self.init, str) and self.init == "k-means++":
            from sklearn.cluster import kmeans_plusplus

            centers, _ = kmeans_plusplus(X, k, random_state=rng.randint(2**31 - 1))
            return np.asarray(centers, dtype=np.float64)
        if isinstance(self.init, str) and self.init == "random":
            rows = rng.choice(X.shape[0], size=k, replace=False)
            return X[rows].toarray()
        if isinstance(self.init, str):
            raise MpisgdError(f"{name}: unknown init {self.init!r}; choose k-means++, random "
                              f"or an array of shape (n_clusters, n_features)")
        centers = np.asarray(self.init, dtype=np.float64)
        if centers.shape != (k, X.shape[1]) or not np.all(np.isfinite(centers)):
            raise MpisgdError(f"{name}: init array must be finite with shape "
                              f"({k}, {X.shape[1]}), got {centers.shape}")
        return centers.copy()

    def _run(self, X, epochs, reset):
        X = self._validate(X, reset)
        m = X.shape[0]
        if m == 0:
            raise MpisgdError(f"{type(self).__name__}: empty data (0 samples)")
        if reset:
            self._check_params(m)
            self._rng = check_random_state(self.random_state)
            centers = self._seed(X, self._rng)
            self._C, self._s, self._q, self._n = kmeans.new_state(
                centers, np.full(self.n_clusters, float(self.init_count)))
            self.n_iter_ = 0
            self.n_steps_ = 0
        indptr = np.ascontiguousarray(X.indptr, dtype=np.int64)
        indices = np.ascontiguousarray(X.indices, dtype=np.int32)
        data = np.ascontiguousarray(X.data, dtype=np.float64)
        for _ in range(epochs):
            order = self._rng.permutation(m) if self.shuffle else np.arange(m)
            self.online_inertia_ = kmeans.kmeans_epoch(
                indptr, indices, data, order.astype(np.int64), self._C, self._s, self._q,
                self._n)
            self.n_iter_ += 1
            self.n_steps_ += m
        self.cluster_centers_ = kmeans.centers(self._C, self._s)
        self.counts_ = self._n.copy()
        return X

    def fit(self, X, y=None):
        """Seed the centroids on X, then ``max_iter`` epochs of MacQueen's update."""
        X = self._run(X, self.max_iter, reset=True)
        self.labels_, d = self._nearest(X)
        self.inertia_ = float(d.sum())
        return self

    def partial_fit(self, X, y=None):
        """One epoch over X, continuing the previous state (the first call seeds)."""
        self._run(X, 1, reset=not hasattr(self, "_C"))
        return self

    def _nearest(self, X):
        """(index of the closest centroid, squared distance to it) for every row."""
        W = self.cluster_centers_
        zz = np.asarray(X.multiply(X).sum(axis=1)).ravel()
        d = zz[:, None] - 2.0 * np.asarray(X @ W.T) + np.einsum("ij,ij->i", W, W)[None, :]
        labels = np.argmin(d, axis=1)
        return labels, np.maximum(d[np.arange(d.shape[0]), labels], 0.0)

    def predict(self, X):
        """Index of the closest centroid for every row of X."""
        check_is_fitted(self, "cluster_centers_")
        return self._nearest(self._validate(X, reset=False))[0]

    def inertia(self, X):
        """Σ over the rows of X of the squared distance to the closest centroid."""
        check_is_fitted(self, "cluster_centers_")
        return float(self._nearest(self._validate(X, reset=False))[1].sum())

    def score(self, X, y=None):
        """−inertia(X), as scikit-learn's KMeans."""
        return -self.inertia(X)
