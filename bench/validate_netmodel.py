"""Predicted (mpisgd/netmodel.py, "shm" preset) against measured wall time of small MPI programs.

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/validate_netmodel.py [--ranks 2 3] [--repeats 5] [--rows 200000]

For each rank count K, one ``mpiexec -n K`` of this file runs every pattern ``--repeats`` times
(patterns interleaved, so that the machine's load hits them alike). A pattern is R rows of a fixed
numba kernel on every rank, in rounds of b rows, each round followed by its communication:

    none        nothing (the control: compute alone)
    allreduce   a blocking Allreduce of m bytes on all ranks
    ring        each rank Isends m bytes to rank + 1 and receives m bytes from rank − 1
    star        every rank ≠ 0 sends m bytes to rank 0 and waits for m bytes back
                (rank 0 receives them all, then Isends the replies), like a coordinator
    iallreduce  an Iallreduce of m bytes started after round t's rows and completed after
                round t + 1's (hidden behind b rows of compute)

The same rounds give the event log (``netmodel.EventLog``); every rank also records its own events
in the first repeat, and ``netmodel.merge_rank_logs`` of those must replay like it (column
"recorded = pattern log"). The log is replayed on the "shm" preset with the compute time per row
taken two ways: "in-run", each rank's own timed kernel calls in that run
(checks the communication part of the model); "-n 1", the kernel's time per row in a one-rank run
of the same rows started just before (what a prediction from the simulator has). A last column
replaces the preset by α, β, α_s, β_s measured in the same launch just before each repeat
(ping-pong and Allreduce at 8 B and 400 KB), to tell a stale preset from a wrong model on a
machine whose load changes. Measured wall time: from a Barrier to the last rank's end of the loop.
Prints per pattern and K the medians over the repeats and the relative error of the median
prediction.

``--netns RATE ...`` (root, iproute2, Debian's Open MPI and .venv-mpi, as tests/test_netns.py) runs
every launch across the two network namespaces of tests/netns_cluster.py instead: Open MPI's TCP
over a veth pair, rank 0 on one "node" and rank 1 on the other (more ranks alternate), the link
limited to each tc tbf RATE in turn ("none": the bare link). No preset describes that link, so
the predictions use α, β and α_s, β_s measured in the same launch (the last column above), with
each rank's in-run compute and with the -n 1 compute:

    .venv/bin/python bench/validate_netmodel.py --netns none 100mbit --ranks 2 --repeats 5
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from numba import njit

# name: (rows per round b, bytes per message m)
PATTERNS = {
    "none": (100, 0),
    "allreduce 8 B, b=100": (100, 8),
    "allreduce 400 KB, b=2000": (2000, 400_000),
    "ring 8 B, b=100": (100, 8),
    "star 4 KB, b=200": (200, 4096),
    "iallreduce 8 B, b=100": (100, 8),
}
NNZ, N_FEATURES = 256, 1 << 16
ENV_NAMES = ("NUMBA_NUM_THREADS",)  # passed to the ranks started across the namespaces


@njit(cache=True)
def kernel(w, idx, first, rows):
    """``rows`` steps of a sparse SGD-like update: a dot product over NNZ coordinates, then an
    update of the same coordinates (fixed cost per row)."""
    n = len(idx)
    for i in range(first, first + rows):
        base = (i * NNZ) % (n - NNZ)
        p = 0.0
        for j in range(NNZ):
            p += w[idx[base + j]]
        g = 1e-3 * (1.0 if p < 1.0 else -1.0)
        for j in range(NNZ):
            w[idx[base + j]] += g


def rounds_of(name, rows):
    b, m = PATTERNS[name]
    return rows // b, b, m


def event_log(name, k, rows):
    """The pattern's event log, as the worker below runs it."""
    from mpisgd import netmodel as nm

    log = nm.EventLog()
    n_rounds, b, m = rounds_of(name, rows)
    ids = iter(range(1 << 62))
    for t in range(n_rounds):
        log.compute(nm.ALL, b)
        kind = name.split()[0]
        if kind == "allreduce":
            log.allreduce(m)
        elif kind == "ring":
            sent = [(r, (r + 1) % k, next(ids)) for r in range(k)]
            for src, dst, mid in sent:
                log.send(src, dst, m, mid)
            for src, dst, mid in sent:
                log.wait(dst, mid)
        elif kind == "star":
            up = [(src, next(ids)) for src in range(1, k)]
            for src, mid in up:
                log.send(src, 0, m, mid)
            for src, mid in up:
                log.wait(0, mid)
            down = [(dst, next(ids)) for dst in range(1, k)]
            for dst, mid in down:
                log.send(0, dst, m, mid)
            for dst, mid in down:
                log.wait(dst, mid)
        elif kind == "iallreduce":
            if t > 0:
                log.complete(t - 1)
            log.iallreduce(m, t)
    if name.startswith("iallreduce") and n_rounds:
        log.complete(n_rounds - 1)
    return log


def run_pattern(comm, name, rows, w, idx, rec):
    """Run one pattern on this rank, recording its events in ``rec`` (an EventLog, or None);
    returns (wall seconds, compute seconds)."""
    from mpi4py import MPI

    from mpisgd import netmodel as nm

    rank, k = comm.Get_rank(), comm.Get_size()
    n_rounds, b, m = rounds_of(name, rows)
    kind = name.split()[0]
    send = np.zeros(max(m // 8, 1), dtype=np.float64)[: m // 8] if kind in ("allreduce", "iallreduce") else \
        np.zeros(m, dtype=np.uint8)
    recv = np.zeros_like(send)
    replies = [np.zeros_like(send) for _ in range(k)]
    pending = None
    computing = 0.0
    record = rec is not None
    comm.Barrier()
    start = time.perf_counter()
    for t in range(n_rounds):
        c0 = time.perf_counter()
        kernel(w, idx, t * b, b)
        computing += time.perf_counter() - c0
        if record:
            rec.compute(rank, b)
        if kind == "allreduce":
            comm.Allreduce(send, recv, op=MPI.SUM)
            if record:
                rec.allreduce(m)
        elif kind == "ring":  # message ids: (round, sender)
            request = comm.Isend(send, dest=(rank + 1) % k, tag=1)
            comm.Recv(recv, source=(rank - 1) % k, tag=1)
            request.Wait()
            if record:
                rec.send(rank, (rank + 1) % k, m, t * k + rank)
                rec.wait(rank, t * k + (rank - 1) % k)
        elif kind == "star":  # message ids: (round, learner, up or down)
            if rank == 0:
                for src in range(1, k):
                    comm.Recv(replies[src], source=src, tag=2)
                    if record:
                        rec.wait(0, 2 * (t * k + src))
                MPI.Request.Waitall([comm.Isend(replies[dst], dest=dst, tag=3) for dst in range(1, k)])
                for dst in range(1, k) if record else ():
                    rec.send(0, dst, m, 2 * (t * k + dst) + 1)
            else:
                comm.Send(send, dest=0, tag=2)
                comm.Recv(recv, source=0, tag=3)
                if record:
                    rec.send(rank, 0, m, 2 * (t * k + rank))
                    rec.wait(rank, 2 * (t * k + rank) + 1)
        elif kind == "iallreduce":
            if pending is not None:
                pending.Wait()
                if record:
                    rec.complete(t - 1, rank=rank)
            pending = comm.Iallreduce(send, recv, op=MPI.SUM)
            if record:
                rec.iallreduce(m, t, group=nm.ALL)
    if pending is not None:
        pending.Wait()
        if record:
            rec.complete(n_rounds - 1, rank=rank)
    return time.perf_counter() - start, computing


def same_run_calibration(comm):
    """One-way ping-pong time (ranks 0 and 1) and Allreduce time (all ranks) at 8 B and 400 KB,
    measured now, under the load the patterns meet (medians of 5 batches)."""
    from mpi4py import MPI

    rank, k = comm.Get_rank(), comm.Get_size()
    out = {}
    for m, n in ((8, 200), (400_000, 10)):
        buf = np.zeros(m, dtype=np.uint8)
        vec = np.zeros(m // 8)
        red = np.zeros_like(vec)
        one_way, collective = [], []
        for _ in range(5):
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(n if k > 1 else 0):
                if rank == 0:
                    comm.Send(buf, dest=1, tag=9)
                    comm.Recv(buf, source=1, tag=9)
                elif rank == 1:
                    comm.Recv(buf, source=0, tag=9)
                    comm.Send(buf, dest=0, tag=9)
            one_way.append((time.perf_counter() - start) / (2 * n))
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(n):
                comm.Allreduce(vec, red, op=MPI.SUM)
            collective.append((time.perf_counter() - start) / n)
        out[m] = (statistics.median(one_way), statistics.median(collective))
    return out


def same_run_network(k, calib):
    """A Network through the two sizes of ``same_run_calibration`` (γ and o of the preset)."""
    from mpisgd import netmodel as nm

    (p8, a8), (p4, a4) = calib["8"], calib["400000"]
    beta = max((p4 - p8) / (400_000 - 8), 0.0)
    lg = int(np.log2(k))
    steps = lg + (0 if 1 << lg == k else 2)  # recursive doubling's exchanges
    step_beta = max((a4 - a8) / steps / (400_000 - 8), 0.0)
    shm = nm.network("shm")
    return nm.Network("same-run", max(p8 - 8 * beta, 0.0), beta, gamma=shm.gamma, o=shm.o,
                      step_alpha=max(a8 / steps - 8 * step_beta, 0.0), step_beta=step_beta)


def worker(rows, repeats, out):
    from mpi4py import MPI

    from mpisgd import netmodel as nm

    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(comm.Get_rank())
    idx = rng.integers(0, N_FEATURES, size=1 << 20).astype(np.int64)
    w = np.zeros(N_FEATURES)
    kernel(w, idx, 0, 1000)  # compiled (or loaded from the cache) before any timing
    results = []
    for repeat in range(repeats):
        calib = same_run_calibration(comm)
        if comm.Get_rank() == 0:
            results.append({"calibration": calib, "repeat": repeat})
        for name in PATTERNS:
            rec = nm.EventLog() if repeat == 0 else None
            wall, computing = run_pattern(comm, name, rows, w, idx, rec)
            walls = comm.gather(wall)
            computes = comm.gather(computing)
            logs = comm.gather(rec.events.tolist() if rec is not None else None)
            if comm.Get_rank() == 0:
                results.append({"pattern": name, "repeat": repeat, "wall": max(walls), "compute": computes,
                                "logs": logs})
    if comm.Get_rank() == 0:
        Path(out).write_text(json.dumps(results))


def speed():
    """Replay time of a 10^6-event log at k = 1024, compiled and as plain Python (numba's py_func)."""
    from mpisgd import netmodel as nm

    k, log, mid = 1024, nm.EventLog(), 0
    coordinator = log.group(range(17))
    for t in range(250_000):  # static b=8 with 400 KB models; every 10th round a coordinator exchange
        log.compute(nm.ALL, 8)
        log.allreduce(400_000)
        if t % 10 == 0:
            for src in range(1, 17):
                log.send(src, 0, 4096, mid)
                log.wait(0, mid)
                mid += 1
            log.ibarrier(t, group=coordinator)
            log.complete(t, group=coordinator)
    start = time.perf_counter()
    events = log.events
    built = time.perf_counter() - start
    nm.replay(events[:10], k, "10gbe", 1e-6, log.groups)  # compiled, or loaded from numba's cache
    start = time.perf_counter()
    nm.replay(events, k, "10gbe", 1e-6, log.groups)
    compiled = time.perf_counter() - start
    part = 20_000
    kernel, nm._replay = nm._replay, nm._replay.py_func
    try:
        start = time.perf_counter()
        nm.replay(events[:part], k, "10gbe", 1e-6, log.groups)
        plain = (time.perf_counter() - start) * len(events) / part
    finally:
        nm._replay = kernel
    print(f"{len(events)} events, k = {k}: EventLog.events {built:.2f} s; replay {compiled:.2f} s compiled, "
          f"{plain:.0f} s as plain Python (from the first {part} events)")


def launch(k, rows, repeats, out, cluster=None):
    """Run the worker on k ranks: the venv's MPICH here, or across ``cluster``'s two namespaces."""
    worker = ["-m", "mpi4py", __file__, "--worker", "--rows", str(rows), "--repeats", str(repeats), "--out", str(out)]
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    if cluster is None:
        cmd = [str(Path(sys.executable).parent / "mpiexec"), "-n", str(k), sys.executable, *worker]
    else:
        from helpers.system_mpi import ROOT_ENV  # Open MPI's consent to run as root

        cmd = [str(a) for a in cluster.mpirun(cluster.python, *worker, ranks=k, env_names=ENV_NAMES)]
        env.update(ROOT_ENV)
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, timeout=3600, env=env)
    return json.loads(Path(out).read_text())


def netns_cluster():
    """Two network namespaces joined by a veth pair (tests/netns_cluster.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from netns_cluster import NetnsCluster, NetnsUnavailable

    try:
        return NetnsCluster.start()
    except NetnsUnavailable as exc:
        raise SystemExit(f"--netns: {exc}") from None


def compare(k, args, net, cluster):
    """Table rows for K = k: the patterns' measured wall time against the model's prediction, on the
    preset ``net`` (None: no preset columns) and on the network measured in the same launch."""
    from mpisgd import netmodel as nm

    single = launch(1, args.rows, args.repeats, args.out, cluster)
    spr_one = statistics.median(r["compute"][0] for r in single if r.get("pattern") == "none") / args.rows
    results = launch(k, args.rows, args.repeats, args.out, cluster)
    same_run = [same_run_network(k, r["calibration"]) for r in results if "calibration" in r]
    print(f"-n 1: {spr_one * 1e9:.0f} ns per row; measured in the launch (median of {len(same_run)}): "
          f"α = {statistics.median(n.alpha for n in same_run) * 1e6:.1f} µs, "
          f"β = {statistics.median(n.beta for n in same_run) * 1e9:.2f} ns/B, "
          f"α_s = {statistics.median(n.step_alpha for n in same_run) * 1e6:.1f} µs, "
          f"β_s = {statistics.median(n.step_beta for n in same_run) * 1e9:.2f} ns/B")
    lines = []
    for name in PATTERNS:
        runs = [r for r in results if r.get("pattern") == name]
        log = event_log(name, k, args.rows)
        events, groups = log.events, log.groups
        recorded = nm.merge_rank_logs([np.array([tuple(e) for e in rank_log], dtype=nm.EVENT)
                                       for rank_log in runs[0]["logs"]])
        check = net or same_run[0]
        same_log = nm.replay(recorded, k, check, spr_one).wall == nm.replay(events, k, check, spr_one, groups).wall
        measured = statistics.median(r["wall"] for r in runs)
        predictions = []
        if net is not None:
            predictions.append(statistics.median(
                nm.replay(events, k, net, np.array(r["compute"]) / args.rows, groups).wall for r in runs))
            predictions.append(nm.replay(events, k, net, spr_one, groups).wall)
        predictions.append(statistics.median(
            nm.replay(events, k, n, np.array(r["compute"]) / args.rows, groups).wall
            for r, n in zip(runs, same_run)))
        if net is None:
            predictions.append(statistics.median(nm.replay(events, k, n, spr_one, groups).wall for n in same_run))
        cells = " | ".join(f"{p:.3f} | {p / measured - 1:+.1%}" for p in predictions)
        lines.append(f"| {k} | {name} | {len(events)} | {'yes' if same_log else 'NO'} | {measured:.3f} | {cells} |")
    return lines


def print_table(lines, preset):
    columns = ([f"{preset}, in-run compute (s)", f"{preset}, -n 1 compute (s)", "same-run α, β, in-run compute (s)"]
               if preset else ["same-run α, β, in-run compute (s)", "same-run α, β, -n 1 compute (s)"])
    print("\n| K | pattern | events | recorded = pattern log | measured wall (s) | "
          + " | ".join(f"{c} | error" for c in columns) + " |")
    print("|---:|---|---:|---|---:|" + "---:|---:|" * len(columns))
    print("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--out", default="/tmp/validate_netmodel.json")
    parser.add_argument("--netns", nargs="+", metavar="RATE",
                        help="run across two network namespaces, the link at each tc tbf RATE ('none': no tbf)")
    parser.add_argument("--speed", action="store_true", help="time the replay of 10^6 events instead")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.rows, args.repeats, args.out)
        return
    if args.speed:
        speed()
        return
    from mpisgd import netmodel as nm

    if not args.netns:
        net = nm.network("shm")
        print(f"shm: α = {net.alpha:.3g} s, β = {net.beta:.3g} s/B, γ = {net.gamma:.3g} s/B, o = {net.overhead:.3g} s")
        print_table([line for k in args.ranks for line in compare(k, args, net, None)], "shm")
        return
    cluster = netns_cluster()
    try:
        for rate in args.netns:
            cluster.set_rate(None if rate == "none" else rate)
            print(f"\n## Across the veth pair, {'no tbf' if rate == 'none' else 'tbf ' + rate}\n", flush=True)
            print_table([line for k in args.ranks for line in compare(k, args, None, cluster)], None)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
