"""Session-wide test settings.

- Markers of the job-level tests (test_slurm.py, test_faults.py).
- Under mpiexec (pytest-mpi's --with-mpi/--only-mpi, more than one rank):
  after every setup, call and teardown the ranks agree whether it failed
  anywhere (tests/helpers/mpi.py), so a failure on one rank fails the test
  on every rank instead of leaving the others waiting in a collective.
- Hypothesis profiles: "ci" (CI=true) runs many examples, "dev" fewer.
"""

import os

import pytest

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the property tests skip themselves
    pass
else:
    common = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
    settings.register_profile("ci", max_examples=10_000, **common)
    settings.register_profile("dev", max_examples=1_000, **common)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") == "true" else "dev"))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slurm: submits jobs to a one-node SLURM cluster that the test starts "
        "(tests/slurm_cluster.py); skipped with the reason where SLURM cannot be installed or started")
    if _under_mpi(config):
        from mpi4py import MPI

        if MPI.COMM_WORLD.Get_size() > 1:
            config.pluginmanager.register(_AgreeOnFailures(MPI.COMM_WORLD.Dup()), "mpisgd-agree")


def _under_mpi(config):
    try:
        return bool(config.getoption("--with-mpi") or config.getoption("--only-mpi"))
    except ValueError:  # pytest-mpi not installed
        return False


class _AgreeOnFailures:
    """Every phase of every test ends with the ranks' agreement on failure."""

    def __init__(self, comm):
        self.comm = comm

    def _phase(self, item, phase):
        from helpers.mpi import FAILURES, agree_on_phase

        try:
            result = yield
        except FAILURES as exc:
            agree_on_phase(self.comm, item, phase, exc)
            raise
        agree_on_phase(self.comm, item, phase, None)
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item):
        return (yield from self._phase(item, "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item):
        return (yield from self._phase(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item):
        return (yield from self._phase(item, "teardown"))
