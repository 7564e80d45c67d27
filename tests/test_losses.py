"""Losses and derivatives against the table of docs/ALGORITHMS.md §1 (tests/naive.py)."""

import numpy as np
import pytest

from mpisgd.kernels.losses import DEFAULT_PARAM, LOSSES, dloss, loss, loss_and_dloss
from tests.naive import naive_dloss, naive_loss

P = np.concatenate([np.linspace(-3.0, 3.0, 61), [-1e3, -40.0, 40.0, 1e3]])


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_loss_and_dloss_match_the_table(name):
    code = LOSSES[name]
    param = DEFAULT_PARAM.get(name, 0.0)
    for y in (-1.0, 1.0, 0.3):
        for p in P:
            want = naive_loss(name, p, y, param)
            assert loss(code, p, y, param) == pytest.approx(want, rel=1e-10, abs=1e-300)
            assert dloss(code, p, y, param) == pytest.approx(naive_dloss(name, p, y, param),
                                                             rel=1e-10, abs=1e-300)
            both = loss_and_dloss(code, p, y, param)  # the kernels' fused call
            assert both == pytest.approx((want, naive_dloss(name, p, y, param)), rel=1e-10, abs=1e-300)


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_dloss_is_the_derivative(name):
    code = LOSSES[name]
    param = DEFAULT_PARAM.get(name, 0.0)
    h = 1e-6
    for y in (-1.0, 1.0):
        for p in np.linspace(-2.9, 2.9, 37) + 0.0123:  # avoid the kinks
            numeric = (loss(code, p + h, y, param) - loss(code, p - h, y, param)) / (2 * h)
            assert dloss(code, p, y, param) == pytest.approx(numeric, rel=1e-5, abs=1e-7)


def test_log_loss_is_stable_for_large_margins():
    code = LOSSES["log"]
    assert loss(code, 1e4, -1.0, 0.0) == pytest.approx(1e4)
    assert loss(code, 1e4, 1.0, 0.0) == 0.0
    assert dloss(code, -1e4, 1.0, 0.0) == -1.0
    assert np.isfinite(dloss(code, 1e4, 1.0, 0.0))
