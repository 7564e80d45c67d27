"""The virtual environment built against the system's Open MPI (README, "Using a
cluster's MPI"; .ci/system_mpi.sh makes it), and the skip-or-fail rule of the
tests that need it."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.env import ROOT

# Where .ci/system_mpi.sh (and `make venv-mpi`) put it.
VENV = Path(os.environ.get("MPISGD_SYSTEM_MPI_VENV", ROOT / ".venv-mpi"))
# Open MPI refuses root unless told twice; harmless for anyone else.
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


class SystemMpiUnavailable(RuntimeError):
    """No Open MPI, or no virtual environment built against it; the message says why."""


def unavailable(reason):
    """Skip with the reason; under CI (CI=true), where .ci/run installs all of it, fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"under CI this must be available: {reason}", pytrace=False)
    pytest.skip(reason)


def system_mpi_python():
    """The venv's python, after checking that mpirun and mpi4py are both Open MPI's."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise SystemMpiUnavailable("no mpirun on PATH (Debian: apt-get install openmpi-bin "
                                   "libopenmpi-dev)")
    version = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    if "Open MPI" not in version.stdout + version.stderr:
        raise SystemMpiUnavailable(f"{mpirun} is not Open MPI's: {version.stdout.strip()[:80]!r}")
    python = VENV / "bin" / "python"
    if not python.exists():
        raise SystemMpiUnavailable(f"no {python}: build it with `make venv-mpi` "
                                   "(= bash .ci/system_mpi.sh)")
    probe = subprocess.run(
        [str(python), "-c", "from mpi4py import MPI; print(MPI.Get_library_version())"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, **ROOT_ENV))
    if probe.returncode != 0 or "Open MPI" not in probe.stdout:
        raise SystemMpiUnavailable(f"{python}: mpi4py does not load Open MPI: "
                                   + (probe.stdout + probe.stderr).strip()[-300:])
    return python
