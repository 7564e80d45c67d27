"""A stand-in MPI job for the fault tests: one rank fails, the others wait.

    mpiexec -n K python -m mpi4py tests/helpers/fail_on_rank.py MODE RANK

Every rank prints that it started; then rank RANK fails (MODE ``raise``: an
uncaught exception; ``kill``: SIGKILL to itself) while every other rank
blocks in a collective that can only complete if RANK takes part. The job
therefore ends only if the launcher tears the surviving ranks down.
"""

import os
import signal
import sys
import time

from mpi4py import MPI


def main(mode, failing_rank):
    comm = MPI.COMM_WORLD
    print(f"rank {comm.rank} started", flush=True)
    comm.Barrier()
    if comm.rank == failing_rank:
        time.sleep(0.2)  # let the others enter the collective first
        if mode == "raise":
            raise RuntimeError(f"deliberate failure on rank {comm.rank}")
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise SystemExit(f"unknown mode {mode!r}")
    comm.Barrier()  # never completes: the failing rank does not come
    print(f"rank {comm.rank} passed a barrier it should not have", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
