"""tests/helpers/paced.py's pacing for a job the test does not launch itself
(a SLURM batch script): with this directory on PYTHONPATH and
$MPISGD_TEST_PACE = SECONDS, every Python of the job paces mpisgd's
checkpoint polls. Test-side only: nothing of it is in mpisgd or jobs/."""

import os

if os.environ.get("MPISGD_TEST_PACE"):
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from paced import pace

    pace(float(os.environ["MPISGD_TEST_PACE"]))
