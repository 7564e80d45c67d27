"""``mpisgd`` with a rank that dies right after a checkpoint, for the resume tests.

    mpiexec -n K python -m mpi4py tests/helpers/kill_after_checkpoint.py RANK ROUND train ARGS...

Runs ``mpisgd train ARGS...``; rank RANK sends itself SIGKILL as soon as the
checkpoint of round ROUND is complete (``Checkpointer.save`` returned), as a
lost node or the OOM killer would end it. The hook lives here, not in mpisgd.
"""

import os
import signal
import sys


def main(rank, round_, argv):
    from mpisgd import checkpoint
    from mpisgd.cli import main as mpisgd

    save = checkpoint.Checkpointer.save

    def save_then_die(self, t, *args, **kwargs):
        save(self, t, *args, **kwargs)
        if self.rank == rank and t == round_:
            os.kill(os.getpid(), signal.SIGKILL)

    checkpoint.Checkpointer.save = save_then_die
    return mpisgd(argv)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]))
