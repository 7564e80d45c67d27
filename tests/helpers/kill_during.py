"""``mpisgd`` with a rank that dies in the middle of a protocol step, for the fault tests.

    mpiexec -n K python -m mpi4py tests/helpers/kill_during.py RANK STEP ROUND train ARGS...

Runs ``mpisgd train ARGS...`` (sync mode, with --checkpoint-every); once
the checkpoint of round ROUND is complete, rank RANK sends itself SIGKILL
as it enters the next STEP, as a lost node or the OOM killer would end it:

- ``balancing``: rank 0 fetching the members' models, a follower answering
  rank 0's request for its model;
- ``full-sync``: the rank entering a full sync;
- ``checkpoint``: rank 0 about to write the manifest (every rank file
  written), a follower about to write its rank file.

The hooks live here, not in mpisgd.
"""

import os
import signal
import sys


def main(rank, step, round_, argv):
    from mpi4py import MPI

    from mpisgd import checkpoint, comm
    from mpisgd.cli import main as mpisgd

    armed = False
    save = checkpoint.Checkpointer.save

    def save_then_arm(self, t, *args, **kwargs):
        nonlocal armed
        save(self, t, *args, **kwargs)
        armed = armed or t >= round_

    def die_first(function):
        def wrapped(*args, **kwargs):
            if armed:
                os.kill(os.getpid(), signal.SIGKILL)
            return function(*args, **kwargs)
        return wrapped

    checkpoint.Checkpointer.save = save_then_arm
    if MPI.COMM_WORLD.Get_rank() == rank:
        if step == "balancing":
            name = "fetch" if rank == 0 else "reply"
            setattr(comm.MPITransport, name, die_first(getattr(comm.MPITransport, name)))
        elif step == "full-sync":
            comm.MPITransport.full_sync = die_first(comm.MPITransport.full_sync)
        elif rank == 0:
            checkpoint._write_json = die_first(checkpoint._write_json)
        else:
            checkpoint.write_rank = die_first(checkpoint.write_rank)
    return mpisgd(argv)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4:]))
