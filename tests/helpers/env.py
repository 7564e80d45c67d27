"""The environment for a job that a test launches."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)
MPIEXEC = VENV / "bin" / "mpiexec"

# Set by a launcher or scheduler around this test process; a job started from
# here must get its own, not inherit them (mpiexec would join the wrong job).
_INHERITED = ("PMI_", "PMIX_", "HYDRA_", "MPIR_", "MPI_LOCAL", "SLURM_", "SBATCH_", "SRUN_", "SALLOC_")


def job_env(**extra):
    """os.environ without launcher or scheduler variables, one numba thread, this checkout first on
    PYTHONPATH, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED)}
    env.update(NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    # this checkout's mpisgd, also for a helper script (whose own directory comes first on sys.path)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env.update({k: str(v) for k, v in extra.items()})
    return env
