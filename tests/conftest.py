"""Markers of the job-level tests (test_slurm.py, test_faults.py)."""


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "slurm: submits jobs to a one-node SLURM cluster that the test starts "
        "(tests/slurm_cluster.py); skipped with the reason where SLURM cannot be installed or started")
