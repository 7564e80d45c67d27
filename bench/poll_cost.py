"""The CPU cost of a follower's poll in the default mode against a bare Iprobe (bench/README.md).

    NUMBA_NUM_THREADS=1 .venv/bin/mpiexec -n 2 .venv/bin/python bench/poll_cost.py [--polls 200000]

A follower polls rank 0 after every block of rows (``AsyncLearner.poll``). Here rank 1 polls
``--polls`` times with nothing sent to it, as between resolutions, and then makes as many bare
mpi4py ``Iprobe`` calls; rank 0 waits. Times are CPU seconds (``time.process_time``) per call, the
best of three passes.
"""

import argparse
import time

from mpi4py import MPI

from mpisgd.comm import CountingComm, MPITransport
from mpisgd.learners import OnlineLearners
from mpisgd.protocol import AsyncLearner


def per_call(call, n):
    """CPU nanoseconds per call of ``call``, the best of three passes of n calls."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for _ in range(n):
            call()
        best = min(best, (time.process_time() - start) / n)
    return best * 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=200_000)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD.Dup()
    transport = MPITransport(CountingComm(comm), OnlineLearners(1, 1000, loss="log"), asynchronous=True)
    learner = AsyncLearner(transport)
    comm.Barrier()
    if comm.rank == 1:
        poll = per_call(learner.poll, args.polls)
        iprobe = per_call(lambda: comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG), args.polls)
        print(f"poll {poll:.0f} ns, Iprobe {iprobe:.0f} ns per call ({poll / iprobe:.2f}x)")
    comm.Barrier()
    transport.close()
    comm.Free()


if __name__ == "__main__":
    main()
