"""Synthetic streams: counter-based reproducibility, drifts, the semantics of
each target, the RCV1-scale set, and per-learner shards aligned by round."""

import json
import math

import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.data import synthetic as S
from mpisgd.data.shard import open_shard
from mpisgd.errors import MpisgdError

STREAMS = [
    lambda: S.DisjunctionStream(37, 6, seed=3, drift_prob=0.05),
    lambda: S.NeuralNetStream(70, 6, seed=3, drift_prob=0.05),
    lambda: S.LinearTeacherStream(90, 6, seed=3, drift_prob=0.05, nnz_per_row=7),
    lambda: S.RCV1Stream(500, 6, seed=3, nnz_per_row=12),
]


def _csr(parts, n):
    indptr, indices, data, y = parts
    return sp.csr_matrix((data, indices, indptr), shape=(len(y), n)), y


@pytest.mark.parametrize("make", STREAMS)
def test_rows_depend_only_on_seed_round_learner(make):
    s = make()
    X, y = _csr(s.rows(0, 40), s.n_features)
    assert X.shape[0] == 40 * 6
    parts = s.rows(0, 40)
    assert parts[0].dtype == np.int64 and parts[1].dtype == np.int32
    assert parts[2].dtype == np.float64 and parts[3].dtype == np.float64
    # Another batching and a subset of learners in another order: the same examples.
    learners = np.array([4, 1])
    X2, y2 = _csr(s.rows(13, 29, learners), s.n_features)
    want = np.array([t * 6 + l for t in range(13, 29) for l in learners])
    assert (X2 != X[want]).nnz == 0 and np.array_equal(y2, y[want])
    # A fresh object with the same seed agrees; another seed does not.
    assert np.array_equal(make().rows(0, 40)[3], y)
    other = type(s)(**{**_kw(s), "seed": 4})
    X3, _ = _csr(other.rows(0, 40), s.n_features)
    assert (X3 != X).nnz > 0
    assert set(np.unique(y)) <= {-1.0, 1.0}
    for r in range(X.shape[0]):  # indices sorted and distinct within a row
        row = X.indices[X.indptr[r] : X.indptr[r + 1]]
        assert np.all(np.diff(row) > 0)


def _kw(s):
    p = s.params()
    p.pop("stream")
    return p


def test_drifts():
    s = S.DisjunctionStream(20, 3, seed=1, drift_prob=0.01)
    d = s.drifts(5000)
    assert 20 <= len(d) <= 90 and np.all(np.diff(d) > 0)
    assert np.array_equal(s.drifts(2000), d[d < 2000])
    assert len(S.DisjunctionStream(20, 3, seed=1, drift_prob=0.0).drifts(5000)) == 0
    e = s.epochs(0, 5000)
    assert e[0] == 0 and e[-1] == len(d) and np.all(np.diff(e) >= 0)
    assert np.array_equal(np.flatnonzero(np.diff(e)), d[d < 4999])  # new epoch after drift rounds
    with pytest.raises(MpisgdError, match="drift_prob"):
        S.DisjunctionStream(20, 3, drift_prob=1.5)


def test_disjunction_semantics_and_balance():
    n = 100
    s = S.DisjunctionStream(n, 50, seed=2, drift_prob=0.0)
    X, y = _csr(s.rows(0, 200), n)
    assert abs(X.nnz / X.shape[0] - n * s.p) < 0.3
    assert s.p == pytest.approx(math.sqrt(1 - 2 ** (-1 / n)))
    # One target z: no negative example touches it, every positive one does.
    neg_union = np.asarray(X[y < 0].sum(axis=0)).ravel() > 0
    allowed = ~neg_union
    assert np.all(np.asarray(X[y > 0][:, allowed].sum(axis=1)).ravel() > 0)
    # Averaged over many targets (a redraw every round) the classes are balanced.
    s = S.DisjunctionStream(n, 64, seed=5, drift_prob=1.0)
    y = s.rows(0, 1500)[3]
    assert abs((y > 0).mean() - 0.5) < 0.015


def test_neural_net_target():
    s = S.NeuralNetStream(150, 100, seed=1, drift_prob=0.0, noise=0.05)
    indptr, indices, data, y = s.rows(0, 100)
    assert np.all(np.abs(data) == 1.0) and np.all(np.diff(indptr) == 150)
    assert abs((y > 0).mean() - 0.5) < 0.03
    X = data.reshape(-1, 150)
    W = np.empty((s.hidden, 150))
    v = np.empty(s.hidden)
    S._nn_target(s.seed, 0, 150, s.hidden, W, v)
    clean = np.where(np.tanh(s.gain * X @ W.T / math.sqrt(150)) @ v >= 0, 1.0, -1.0)
    assert abs((clean != y).mean() - 0.05) < 0.015  # the Bayes error is the noise
    from sklearn.linear_model import LogisticRegression

    half = len(y) // 2
    lin = LogisticRegression(C=1.0, max_iter=500).fit(X[:half], clean[:half])
    assert (lin.predict(X[half:]) != clean[half:]).mean() < 0.15  # a linear model fits well


def test_linear_teacher_noise():
    s = S.LinearTeacherStream(300, 50, seed=4, nnz_per_row=10, noise=0.1)
    X, y = _csr(s.rows(0, 100), 300)
    w = np.empty(300)
    S._teacher(s.seed, 0, 300, s.teacher_density, w)
    clean = np.where(X @ w >= 0, 1.0, -1.0)
    assert abs((clean != y).mean() - 0.1) < 0.02
    assert np.all(np.diff(X.indptr) == 10)


def test_rcv1_like():
    Xtr, ytr, Xte, yte = S.rcv1_like(3000, 500, n_features=5000, seed=1, nnz_per_row=40)
    assert Xtr.shape == (3000, 5000) and Xte.shape == (500, 5000)
    assert Xtr.indptr.dtype == np.int64 and Xtr.indices.dtype == np.int32
    assert 30 < Xtr.nnz / 3000 < 45
    np.testing.assert_allclose(np.sqrt(Xtr.multiply(Xtr).sum(axis=1)).A1, 1.0, rtol=1e-12)
    assert np.all(Xtr.data > 0) and Xtr.has_sorted_indices
    assert set(np.unique(ytr)) == {-1.0, 1.0} and 0.40 < (ytr > 0).mean() < 0.54
    Xtr2, ytr2, _, _ = S.rcv1_like(3000, 0, n_features=5000, seed=1, nnz_per_row=40)
    assert (Xtr2 != Xtr).nnz == 0 and np.array_equal(ytr, ytr2)
    # Popularity is Zipf-like: the most common feature is in many rows, most are rare.
    df = np.bincount(Xtr.indices, minlength=5000)
    assert df.max() > 0.3 * 3000 and np.median(df) < 0.01 * 3000


def test_learner_shards_are_aligned_by_round(tmp_path):
    s = S.DisjunctionStream(25, 5, seed=9, drift_prob=0.02)
    paths = S.write_learner_shards(s, 300, tmp_path, batch_rounds=70, group=2)
    assert len(paths) == 5
    X, y = _csr(s.rows(0, 300), 25)
    for l, p in enumerate(paths):
        with open_shard(p) as sh:
            assert sh.n_rows == 300 and sh.attrs["shard_index"] == l
            assert json.loads(sh.attrs["drifts"]) == s.drifts(300).tolist()
            Xl, yl = _csr(sh.read(0, 300), 25)
            rows = np.arange(300) * 5 + l
            assert (Xl != X[rows]).nnz == 0 and np.array_equal(yl, y[rows])
