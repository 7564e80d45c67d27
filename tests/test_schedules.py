"""Step-size schedules γ_t against docs/ALGORITHMS.md §3 (tests/naive.py)."""

import pytest

from mpisgd.kernels.schedules import SCHEDULES, eta
from tests.naive import naive_eta


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_schedule_matches_formula(name):
    for t in (1.0, 2.0, 10.0, 12345.0):
        for eta0, lam, t0, power in ((0.5, 1e-4, 0.0, 0.5), (2.0, 0.1, 7.0, 0.25)):
            want = naive_eta(name, t, eta0, lam, t0, power)
            assert eta(SCHEDULES[name], t, eta0, lam, t0, power) == pytest.approx(want, rel=1e-12)


def test_optimal_with_t0_zero_is_pegasos():
    assert eta(SCHEDULES["optimal"], 4.0, 0.0, 0.5, 0.0, 0.0) == pytest.approx(0.5)
