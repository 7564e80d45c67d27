"""Measure this machine's α and β for the "shm" preset of mpisgd/netmodel.py (docs/NETWORK.md).

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/calibrate_network.py [--repeats 7] [--out mpisgd/shm_network.json]

Starts ``mpiexec -n 2`` of itself (the venv's MPICH, shared memory, through mpi4py as mpisgd
uses it). Rank 0 and 1 time a ping-pong (Send/Recv of m bytes there and back; half the round
trip is one message) and a two-rank Allreduce of m bytes, at m = 8 B … 4 MiB; each point is the
median over ``--repeats`` batches of the mean of a batch. α and β are the least-squares fit of
t = α + m·β to the ping-pong points with relative residuals (so that the small messages fix α and
the large ones β); the two-rank Allreduce, one exchange step, gives a collective step's α_s and
β_s the same way (shared memory is not full duplex: both directions are copied by the same
CPUs); γ is the time per byte of np.add on float64 vectors of ≥ 32 KiB (the
reduction's arithmetic), o the time of one small Isend call (the sender's overhead). The sizes are
interleaved within each batch so that the machine's load hits them alike. Prints the fitted
numbers and a Markdown table with the two-rank Allreduce against the model's prediction; with
``--out FILE`` also writes them as JSON with their provenance (command, machine, MPI library,
date, load average): mpisgd/shm_network.json, the file mpisgd/netmodel.py reads, is one.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SIZES = [8, 64, 512, 4096, 32768, 262144, 1048576, 4194304]


def batch_count(m):
    return max(20, min(2000, int(4e7 // max(m, 1) // 8)))


def worker(repeats, out):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    peer = 1 - rank
    pingpong = {m: [] for m in SIZES}
    allreduce = {m: [] for m in SIZES}
    reduce_op = {m: [] for m in SIZES}
    isend = []
    small = np.zeros(8, dtype=np.uint8)
    for repeat in range(repeats + 1):  # sizes interleaved, so that the load hits them alike; batch 0 warms up
        for m in SIZES:
            buf = np.zeros(m, dtype=np.uint8)
            vec = np.ones(m // 8, dtype=np.float64)
            red = np.zeros_like(vec)
            n = batch_count(m)
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(n):
                if rank == 0:
                    comm.Send(buf, dest=peer, tag=1)
                    comm.Recv(buf, source=peer, tag=1)
                else:
                    comm.Recv(buf, source=peer, tag=1)
                    comm.Send(buf, dest=peer, tag=1)
            one_way = (time.perf_counter() - start) / (2 * n)
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(n):
                comm.Allreduce(vec, red, op=MPI.SUM)
            collective = (time.perf_counter() - start) / n
            start = time.perf_counter()
            for _ in range(n):  # the reduction's arithmetic alone (γ)
                np.add(vec, red, out=red)
            local = (time.perf_counter() - start) / n
            if repeat:
                pingpong[m].append(one_way)
                allreduce[m].append(collective)
                reduce_op[m].append(local)
        comm.Barrier()
        spent = 0.0
        for _ in range(500):  # the sender's overhead o: one small Isend call, its Wait untimed
            if rank == 0:
                start = time.perf_counter()
                request = comm.Isend(small, dest=1, tag=2)
                spent += time.perf_counter() - start
                request.Wait()
            else:
                comm.Recv(small, source=0, tag=2)
        if repeat:
            isend.append(spent / 500)
    if rank == 0:
        med = statistics.median
        report([(m, med(pingpong[m]), med(allreduce[m]), med(reduce_op[m])) for m in SIZES], med(isend), out)


def fit(sizes, times):
    """α, β of t = α + m·β by least squares on t's relative error."""
    sizes, times = np.asarray(sizes, dtype=float), np.asarray(times, dtype=float)
    design = np.stack([np.ones_like(sizes), sizes], axis=1) / times[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, np.ones_like(times), rcond=None)
    return alpha, beta


def report(rows, isend, out):
    from mpisgd.netmodel import Network

    sizes = np.array([r[0] for r in rows], dtype=float)
    alpha, beta = fit(sizes, [r[1] for r in rows])
    gamma = statistics.median(r[3] / r[0] for r in rows if r[0] >= 32768)
    # a two-rank Allreduce is one exchange step of recursive doubling: α_s + m·β_s + m·γ
    step_alpha, step_beta = fit(sizes, np.array([r[2] for r in rows]) - sizes * gamma)
    net = Network("shm", alpha, beta, gamma=gamma, o=isend, step_alpha=step_alpha, step_beta=step_beta)
    print(f"\nNetwork(\"shm\", {alpha:.3g}, {beta:.3g}, gamma={gamma:.3g}, o={isend:.3g}, "
          f"step_alpha={step_alpha:.3g}, step_beta={step_beta:.3g})")
    print(f"(β: {1 / beta / 1e9:.2f} GB/s; β_s: {1 / step_beta / 1e9:.2f} GB/s; "
          f"γ: np.add of float64 at ≥ 32 KiB)\n")
    print("| bytes | ping-pong one way (µs) | α + m·β (µs) | Allreduce k=2 (µs) | model k=2 (µs) "
          "| np.add (µs) |")
    print("|---:|---:|---:|---:|---:|---:|")
    for m, pp, ar, add in rows:
        print(f"| {m} | {pp * 1e6:.2f} | {net.p2p(m) * 1e6:.2f} | {ar * 1e6:.2f} | {net.allreduce(2, m) * 1e6:.2f} "
              f"| {add * 1e6:.2f} |")
    if out:
        write_preset(out, net)


def write_preset(path, net):
    """The preset as mpisgd/netmodel.py reads it, with where, how and when it was measured."""
    from mpi4py import MPI

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    preset = {"name": net.name, "alpha": net.alpha, "beta": net.beta, "step_alpha": net.step_alpha,
              "step_beta": net.step_beta, "o": net.o, "gamma": net.gamma,
              "provenance": {
                  "command": "NUMBA_NUM_THREADS=1 .venv/bin/python " + " ".join(
                      ["bench/calibrate_network.py"] + [a for a in sys.argv[1:] if a != "--worker"]),
                  "machine": f"{os.cpu_count()}-core {cpu}, {platform.system()} {platform.release()}; "
                             f"{MPI.Get_library_version().splitlines()[0]}, mpiexec -n 2",
                  "measured": f"{datetime.date.today().isoformat()}, load average "
                              f"{os.getloadavg()[0]:.1f} at the end of the run",
                  "how": "one run of the command: each parameter the fit of its medians over the batches"}}
    Path(path).write_text(json.dumps(preset, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=None, help="also write the preset and its provenance to this JSON file")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.repeats, args.out)
        return
    mpiexec = str(Path(sys.executable).parent / "mpiexec")
    cmd = [mpiexec, "-n", "2", sys.executable, "-m", "mpi4py", __file__, "--worker", "--repeats", str(args.repeats)]
    if args.out:
        cmd += ["--out", str(Path(args.out).resolve())]
    print("$", " ".join(cmd))
    sys.exit(subprocess.run(cmd).returncode)


if __name__ == "__main__":
    main()
