"""Measure this machine's α and β for the "shm" preset of mpisgd/netmodel.py (docs/NETWORK.md).

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/calibrate_network.py [--repeats 7]

Starts ``mpiexec -n 2`` of itself (the venv's MPICH, shared memory, through mpi4py as mpisgd
uses it). Rank 0 and 1 time a ping-pong (Send/Recv of m bytes there and back; half the round
trip is one message) and a two-rank Allreduce of m bytes, at m = 8 B … 4 MiB; each point is the
median over ``--repeats`` batches of the mean of a batch. α and β are the least-squares fit of
t = α + m·β to the ping-pong points with relative residuals (so that the small messages fix α and
the large ones β). Also the time of one Isend call (the sender's overhead o) and the Allreduce
against the model's prediction at k = 2 (α + m·β). Prints a Markdown table.
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SIZES = [8, 64, 512, 4096, 32768, 262144, 1048576, 4194304]


def batch_count(m):
    return max(20, min(2000, int(4e7 // max(m, 1) // 8)))


def worker(repeats):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    peer = 1 - rank
    rows = []
    for m in SIZES:
        buf = np.zeros(m, dtype=np.uint8)
        out = np.zeros(m // 8, dtype=np.float64)
        red = np.zeros_like(out)
        n = batch_count(m)
        pingpong, allreduce = [], []
        for repeat in range(repeats + 1):  # the first batch warms up, untimed
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(n):
                if rank == 0:
                    comm.Send(buf, dest=peer, tag=1)
                    comm.Recv(buf, source=peer, tag=1)
                else:
                    comm.Recv(buf, source=peer, tag=1)
                    comm.Send(buf, dest=peer, tag=1)
            if repeat:
                pingpong.append((time.perf_counter() - start) / (2 * n))
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(n):
                comm.Allreduce(out, red, op=MPI.SUM)
            if repeat:
                allreduce.append((time.perf_counter() - start) / n)
        rows.append((m, statistics.median(pingpong), statistics.median(allreduce)))
    # the sender's overhead: one small Isend call, its Wait outside the timing
    small = np.zeros(8, dtype=np.uint8)
    isend = []
    for _ in range(repeats):
        comm.Barrier()
        spent = 0.0
        for _ in range(500):
            if rank == 0:
                start = time.perf_counter()
                request = comm.Isend(small, dest=1, tag=2)
                spent += time.perf_counter() - start
                request.Wait()
            else:
                comm.Recv(small, source=0, tag=2)
        isend.append(spent / 500)
    if rank == 0:
        report(rows, statistics.median(isend))


def fit(sizes, times):
    """α, β of t = α + m·β by least squares on t's relative error."""
    sizes, times = np.asarray(sizes, dtype=float), np.asarray(times, dtype=float)
    design = np.stack([np.ones_like(sizes), sizes], axis=1) / times[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(times), rcond=None)
    return alpha, beta


def report(rows, isend):
    sizes = [r[0] for r in rows]
    alpha, beta = fit(sizes, [r[1] for r in rows])
    print(f"\nshm: α = {alpha:.3e} s, β = {beta:.3e} s/B ({1 / beta / 1e9:.2f} GB/s), "
          f"o (one Isend call) = {isend:.3e} s\n")
    print("| bytes | ping-pong one way (µs) | α + m·β (µs) | Allreduce k=2 (µs) | model k=2 (µs) |")
    print("|---:|---:|---:|---:|---:|")
    for m, pp, ar in rows:
        model = alpha + m * beta
        print(f"| {m} | {pp * 1e6:.2f} | {model * 1e6:.2f} | {ar * 1e6:.2f} | {model * 1e6:.2f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.repeats)
        return
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    cmd = [mpiexec, "-n", "2", sys.executable, "-m", "mpi4py", __file__, "--worker", "--repeats", str(args.repeats)]
    print("$", " ".join(cmd))
    sys.exit(subprocess.run(cmd).returncode)


if __name__ == "__main__":
    main()
