"""One rank's full sync, in process (COMM_SELF, so the Allreduce itself costs
next to nothing): the dense passes around the exchange before (today's code
on main: models(), an Allreduce, /k, set_reference) and after
(``MPITransport.full_sync``: one pass to gather, one to take the sum), with
the same model, at n = 47,236 (RCV1) and 1,000,000 features; the time per sync
and the ratio after/before, medians of 30 repetitions.

    python bench/bench_full_sync.py
"""

import time

import numpy as np
from mpi4py import MPI

from mpisgd.comm import CountingComm, MPITransport
from mpisgd.learners import OnlineLearners


def before(tr):
    """main's full sync: the mean of every z, then set_reference (several numpy passes)."""
    z = tr._model()
    total = np.empty_like(z)
    tr.comm.Allreduce(z, total, MPI.SUM, "full_sync")
    tr.learners.set_reference(total / tr.k)


def timed(fn, tr, reps=30):
    out = []
    for _ in range(reps):
        tr.learners.set_models([0], tr._z)
        start = time.perf_counter()
        fn(tr)
        out.append(time.perf_counter() - start)
    return float(np.median(out))


def main():
    print("| n | touched | before (ms) | after (ms) | after/before |\n|---|---|---|---|---|")
    for n in (47236, 1_000_000):
        for touched in (1000, n):
            learners = OnlineLearners(1, n, loss="log")
            learners.warm_up()
            tr = MPITransport(CountingComm(MPI.COMM_SELF.Dup()), learners)
            rng = np.random.default_rng(0)
            tr._z = np.zeros(n + 2)
            tr._z[rng.choice(n, touched, replace=False)] = rng.standard_normal(touched)
            tr._z[n], tr._z[n + 1] = 0.5, 0.999
            tr.full_sync()  # compile
            b, a = timed(before, tr), timed(MPITransport.full_sync, tr)
            print(f"| {n} | {touched} | {1e3 * b:.2f} | {1e3 * a:.2f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
