"""Rows that would index outside the model are refused by the online kernel
(``online.learn_rows`` status BAD_INDEX -> MpisgdError), before they touch
any weight: a feature index outside [0, n) or row bounds outside the
entries. The rows before the bad one are learned as usual (as for the
kernel's other input checks)."""

import numpy as np
import pytest

from mpisgd.errors import MpisgdError
from mpisgd.learners import OnlineLearners

N = 5


def learners():
    return OnlineLearners(2, N, loss="hinge", eta0=0.1, lam=1e-3)


GOOD = (np.array([0, 2], np.int64), np.array([0, 4], np.int32), np.array([1.0, 2.0]))


@pytest.mark.parametrize("bad_index", [-1, N, 2**31 - 1, -(2**31)])
def test_feature_index_outside_the_model_is_refused(bad_index):
    L, ref = learners(), learners()
    indptr = np.array([0, 2, 4], np.int64)
    indices = np.array([0, 4, 1, bad_index], np.int32)
    data = np.ones(4)
    with pytest.raises(MpisgdError, match=r"row 1 has a feature index outside \[0, 5\)"):
        L.learn(indptr, indices, data, np.array([1.0, -1.0]), np.array([0, 1]))
    ref.learn(indptr[:2], indices[:2], data[:2], np.array([1.0]), np.array([0]))  # row 0 only
    for l in range(2):
        np.testing.assert_array_equal(L.weights(l)[0], ref.weights(l)[0])
        assert L.weights(l)[1] == ref.weights(l)[1]


@pytest.mark.parametrize("indptr", [[0, 3], [1, 0], [-1, 1], [0, 2, 1]])
def test_row_bounds_outside_the_entries_are_refused(indptr):
    indptr = np.array(indptr, np.int64)
    k = len(indptr) - 1
    with pytest.raises(MpisgdError, match="row bounds outside its indices"):
        learners().learn(indptr, GOOD[1], GOOD[2], np.ones(k), np.zeros(k, np.int64))


def test_learn_until_violation_refuses_them_too():
    L = learners()
    with pytest.raises(MpisgdError, match="feature index outside"):
        L.learn_until_violation(np.array([0, 1], np.int64), np.array([N], np.int32), np.ones(1), np.ones(1),
                                np.zeros(1, np.int64), np.array([1]), np.array([np.inf]))
