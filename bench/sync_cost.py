"""The CPU cost of a full sync against a bare MPI call of the same bytes (bench/README.md).

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/mpiexec -n 2 .venv/bin/python bench/sync_cost.py \\
        [--syncs 400] [--period 8] [--dynamic-rounds 48] [--partial-rounds 60] [--kept 0.75] [--steps] \\
        [--partial-steps] [--quantile 0.5]

Every rank learns its rows of the RCV1-like stream (``--synthetic rcv1``, 47,152 features, log
loss, η = 1) and, at each of ``--syncs`` sync points, takes part in a full sync through
``MPITransport`` as ``mpisgd train`` does, then in a bare mpi4py ``Allreduce`` of a float64 buffer
of the bytes this rank sent in that sync, both after a barrier. Two cases:

- static: a blocking full sync every ``--period`` rounds (static b=8);
- dynamic: the default mode's nonblocking full sync (every rank joined, waited on) after
  ``--dynamic-rounds`` rounds, the union of supports a dynamic full sync carries;
- partial: a blocking partial sync (``--partial``, docs/ALGORITHMS.md §4.7) after
  ``--partial-rounds`` rounds whose budget θΔ is ``--kept`` of each rank's ‖w − r‖², so that
  each learner sends the fewest coordinates carrying the rest; the divergence it keeps grows
  from sync to sync, as in ``train --partial`` (where w − r has 14,000–29,000 non-zeros).

With ``--steps``, instead: the static case taken apart, each step of ``MPITransport._pairs_steps``
timed on its own in the same loop (the gather of the touched coordinates, the probe, the block, the
Allgather, adding the blocks into the sum, the new reference made from it with the learner's
restart: ``OnlineLearners.set_reference_pairs``), beside the bare Allreduce of the block's bytes.
With ``--partial-steps``, the partial case taken apart likewise (``MPITransport._partial_steps``: S_l,
the probe, the index block, the Allgather, the union, d on it, the values' Allreduce; then the new
reference: ``OnlineLearners.set_partial_sum``), beside a bare Allreduce of the values' bytes.

Times are CPU seconds of each rank (``time.process_time``: another rank's scheduling on this
2-core machine does not move them, though spinning in MPI does), medians over the syncs (or, with
``--quantile q``, that quantile: on a loaded machine a rank spins in nearly every collective while
the other waits for a core, and a low quantile keeps the syncs where both ran), then the largest
over ranks. The ratio is the sync's over the bare Allreduce's, in the same run.
"""

import argparse
import time

import numpy as np
from mpi4py import MPI
from threadpoolctl import threadpool_limits

from mpisgd.comm import CountingComm, MPITransport, _wait
from mpisgd.data.synthetic import RCV1Stream
from mpisgd.learners import OnlineLearners


def measure(comm, transport, stream, learners, rounds, syncs, dynamic, q):
    """(sync µs, bare Allreduce µs, bytes sent per sync, wall µs outside MPI calls): quantile q of this rank."""
    rank = comm.rank
    owner = np.zeros(rounds, dtype=np.int64)
    t = 0
    sync_cpu, bare_cpu, sent, python = [], [], [], []
    for i in range(syncs + 20):  # the first 20 warm up
        indptr, indices, data, y = stream.rows(t, t + rounds, [rank])
        learners.learn(indptr, indices, data, y, owner)
        t += rounds
        before = int(comm.sent_bytes.sum())
        comm.comm.Barrier()
        start, wall, inside = time.process_time(), time.perf_counter(), comm.seconds
        if dynamic:
            _wait(transport._join_full_sync())
        else:
            transport.full_sync()
        cpu = time.process_time() - start
        outside = time.perf_counter() - wall - (comm.seconds - inside)
        nbytes = int(comm.sent_bytes.sum()) - before
        send = np.zeros((nbytes + 7) // 8)
        recv = np.empty_like(send)
        comm.comm.Barrier()
        start = time.process_time()
        comm.comm.Allreduce(send, recv, op=MPI.SUM)
        bare = time.process_time() - start
        if i >= 20:
            sync_cpu.append(cpu)
            bare_cpu.append(bare)
            sent.append(nbytes)
            python.append(outside)
    return (1e6 * np.quantile(sync_cpu, q), 1e6 * np.quantile(bare_cpu, q), float(np.median(sent)),
            1e6 * np.quantile(python, q))


def step_timer():
    """(times, timed): timed(name, f, *args) calls f(*args) and appends its CPU seconds to times[name]."""
    times = {}

    def timed(name, f, *args):
        start = time.process_time()
        out = f(*args)
        times.setdefault(name, []).append(time.process_time() - start)
        return out

    return times, timed


def steps(comm, stream, syncs, period, q):
    """CPU µs of each step of a static full sync (pairs exchange) on this rank: quantile q over the syncs."""
    from mpisgd import wire

    learners = OnlineLearners(1, stream.n_features, loss="log", eta0=1.0)
    learners.warm_up()
    L, n, k, rank = learners, learners.n_features, comm.size, comm.rank
    vals, idx = np.empty(n), np.empty(n, dtype=np.int32)
    mine, top, total = np.empty(1), np.empty(1), np.zeros(n + 2)
    counts = np.empty(k, np.int64)
    kept = np.empty(k * wire.sync_block_nbytes(n), dtype=np.uint8)  # every rank's block
    own_block = np.empty(wire.sync_block_nbytes(n), dtype=np.uint8)
    owner = np.zeros(period, dtype=np.int64)
    times, timed = step_timer()

    for t in range(0, (syncs + 20) * period, period):  # the first 20 warm up
        learners.learn(*stream.rows(t, t + period, [rank]), owner)
        comm.comm.Barrier()
        nnz, c, bias, alpha = timed("gather the touched coordinates (sync_pairs)", L.sync_pairs, 0, vals, idx)
        mine[0] = nnz
        timed("probe Allreduce (8 B)", comm.comm.Allreduce, mine, top, MPI.MAX)
        m = int(top[0])
        size = wire.sync_block_nbytes(m)
        block = timed("fill_block", wire.fill_block, own_block[:size], alpha, bias, vals[:c], idx[:c], m)
        blocks = kept[: k * size]
        timed("pairs Allgather", comm.comm.Allgather, block, blocks)
        index = timed("add the blocks (add_blocks)", wire.add_blocks, blocks, n, m, total, counts)
        own = idx[:c] if c == nnz else None
        timed("the new reference and restart (set_reference_pairs)", L.set_reference_pairs, total, k, index, counts,
              own)
        send = np.zeros((size + 7) // 8)
        recv = np.empty_like(send)
        comm.comm.Barrier()
        timed("bare Allreduce (the block's bytes)", comm.comm.Allreduce, send, recv, MPI.SUM)
    return {name: 1e6 * float(np.quantile(v[20:], q)) for name, v in times.items()}


def partial_steps(comm, stream, syncs, rounds, kept, q):
    """CPU µs of each step of a blocking partial sync (``MPITransport._partial_steps``, then
    ``OnlineLearners.set_partial_sum``) on this rank: quantile q over the syncs."""
    from mpisgd import wire

    learners = OnlineLearners(1, stream.n_features, loss="log", eta0=1.0)
    learners.warm_up()
    L, n, k, rank = learners, learners.n_features, comm.size, comm.rank
    idx, mine, top = np.empty(n, dtype=np.int32), np.empty(1), np.empty(1)
    values, total = np.empty(n + 1), np.empty(n + 1)
    owner = np.zeros(rounds, dtype=np.int64)
    times, timed = step_timer()

    for t in range(0, (syncs + 20) * rounds, rounds):  # the first 20 warm up
        learners.learn(*stream.rows(t, t + rounds, [rank]), owner)
        budget = kept * float(learners.distances()[0])
        comm.comm.Barrier()
        c = timed("S_l: d's non-zeros and the selection (partial_support)", L.partial_support, 0, budget, idx)
        mine[0] = c
        timed("probe Allreduce (8 B)", comm.comm.Allreduce, mine, top, MPI.MAX)
        m = int(top[0])
        block = timed("fill_index_block", wire.fill_index_block, np.empty(m + 1, dtype=np.int32), idx[:c], m)
        blocks = np.empty(k * (m + 1), dtype=np.int32)
        timed("index Allgather", comm.comm.Allgather, block, blocks)
        support = timed("the union S (union_of_blocks)", wire.union_of_blocks, blocks, n, m)
        s = len(support)
        timed("d on S (deviation_on)", L.deviation_on, 0, support, values)
        values[s] = L.bias[0]
        timed("values Allreduce", comm.comm.Allreduce, values[: s + 1], total[: s + 1], MPI.SUM)
        timed("the new reference and the models (set_partial_sum)", L.set_partial_sum, support, total[: s + 1], k)
        comm.comm.Barrier()
        timed("bare Allreduce (the values' bytes)", comm.comm.Allreduce, values[: s + 1], total[: s + 1], MPI.SUM)
    return {name: 1e6 * float(np.quantile(v[20:], q)) for name, v in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--syncs", type=int, default=400, help="timed syncs per case")
    parser.add_argument("--period", type=int, default=8, help="rounds between static syncs")
    parser.add_argument("--dynamic-rounds", type=int, default=48, help="rounds before each dynamic full sync")
    parser.add_argument("--partial-rounds", type=int, default=60, help="rounds before each partial sync")
    parser.add_argument("--kept", type=float, default=0.75,
                        help="the share of ‖w − r‖² a partial sync leaves local (its budget θΔ)")
    parser.add_argument("--steps", action="store_true", help="time each step of a static sync instead")
    parser.add_argument("--partial-steps", action="store_true", help="time each step of a partial sync instead")
    parser.add_argument("--quantile", type=float, default=0.5, help="of each time over the syncs (0.5: median)")
    args = parser.parse_args()
    q = args.quantile
    stat = "median" if q == 0.5 else f"quantile {q:g}"
    comm = CountingComm(MPI.COMM_WORLD)
    stream = RCV1Stream(n_learners=comm.size, seed=0)
    if args.steps or args.partial_steps:
        with threadpool_limits(limits=1, user_api="blas"):
            if args.steps:
                mine = steps(comm, stream, args.syncs, args.period, q)
                case = f"static b={args.period}"
            else:
                mine = partial_steps(comm, stream, args.syncs, args.partial_rounds, args.kept, q)
                case = f"partial sync ({args.partial_rounds} rounds, {args.kept:g} kept)"
            every = comm.comm.gather(mine, root=0)
        if comm.rank == 0:
            print(f"-n {comm.size}, {case}, {args.syncs} syncs: CPU µs of each step per rank ({stat} over syncs)\n")
            print("| step | " + " | ".join(f"rank {r}" for r in range(comm.size)) + " |")
            print("|---|" + "---|" * comm.size)
            for name in every[0]:
                print(f"| {name} | " + " | ".join(f"{e[name]:.1f}" for e in every) + " |")
        return
    rows = []
    with threadpool_limits(limits=1, user_api="blas"):  # as in an MPI rank
        for name, rounds, dynamic, kept in (
            ("static b=%d" % args.period, args.period, False, None),
            ("dynamic full sync (%d rounds)" % args.dynamic_rounds, args.dynamic_rounds, True, None),
            ("partial sync (%d rounds, %g kept)" % (args.partial_rounds, args.kept), args.partial_rounds, False,
             args.kept),
        ):
            learners = OnlineLearners(1, stream.n_features, loss="log", eta0=1.0)
            learners.warm_up()
            transport = MPITransport(comm, learners, asynchronous=dynamic)
            if kept is not None:  # --partial's sync with θΔ = kept·‖w − r‖² of this rank's learner
                transport.partial = lambda learners=learners, kept=kept: kept * float(learners.distances()[0])
            mine = measure(comm, transport, stream, learners, rounds, args.syncs, dynamic, q)
            every = comm.comm.gather(mine, root=0)
            transport.close()
            if comm.rank == 0:
                sync_us = max(e[0] for e in every)
                bare_us = max(e[1] for e in every)
                rows.append((name, every[0][2], sync_us, bare_us, max(e[3] for e in every)))
    if comm.rank == 0:
        print(f"-n {comm.size}, RCV1-like stream (47,152 features), {args.syncs} syncs, CPU µs per rank "
              f"({stat} over syncs, largest over ranks)\n")
        print("| sync | bytes sent a rank | sync µs | of which outside MPI (wall) | bare Allreduce µs | ratio |")
        print("|---|---|---|---|---|---|")
        for name, nbytes, sync_us, bare_us, outside in rows:
            print(f"| {name} | {nbytes:,.0f} | {sync_us:.1f} | {outside:.1f} | {bare_us:.1f} | "
                  f"{sync_us / bare_us:.2f} |")


if __name__ == "__main__":
    main()
