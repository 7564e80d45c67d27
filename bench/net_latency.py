"""Rank program of bench/bench_network.py: median Allreduce and ping-pong time
by message size between the ranks of COMM_WORLD, one JSON line from rank 0.

    mpirun -n 2 python bench/net_latency.py SIZE_BYTES...
"""

import json
import sys
import time

import numpy as np
from mpi4py import MPI

REPEATS, WARMUP = 30, 5


def median_ms(op, comm):
    times = []
    for i in range(WARMUP + REPEATS):
        comm.Barrier()
        t = time.perf_counter()
        op()
        if i >= WARMUP:
            times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def main():
    comm = MPI.COMM_WORLD
    rows = []
    for size in map(int, sys.argv[1:]):
        x = np.ones(max(size // 8, 1))
        y = np.empty_like(x)

        def pingpong():
            # Rank 0 sends, rank 1 sends it back: one round trip.
            if comm.rank == 0:
                comm.Send(x, 1)
                comm.Recv(y, 1)
            elif comm.rank == 1:
                comm.Recv(y, 0)
                comm.Send(y, 0)

        allreduce = median_ms(lambda: comm.Allreduce(x, y), comm)
        round_trip = median_ms(pingpong, comm)
        rows.append({"bytes": x.nbytes, "allreduce_ms": allreduce, "pingpong_ms": round_trip})
    if comm.rank == 0:
        print(json.dumps({"library": MPI.Get_library_version().split(",")[0], "rows": rows}))


if __name__ == "__main__":
    main()
