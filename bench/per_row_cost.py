"""CPU time per row of the default mode when nobody violates, against --protocol none (bench/README.md).

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/mpiexec -n 2 .venv/bin/python bench/per_row_cost.py \\
        [--rounds 20000] [--repeats 7]

Every rank learns its rows of the RCV1-like stream (``--synthetic rcv1``, 47,152 features; log loss,
λ = 0, constant η = 1, no averaging: Kamp et al.'s online setting) through ``mpisgd.runner.Run``, as
``mpisgd train`` does, under ``--protocol none`` and under the default mode (dynamic, async, b = 1)
with Δ = 1e12, which no learner reaches: the default mode then checks every round and sends nothing
but its pacing barriers. Two more rows take the default mode's blocks apart: with pacing barriers
every 1,024 rounds (``--pace 1024``) and without them (``--pace 0``). A block of rows (one
learning call, one poll, one yield) ends at a multiple of ``--poll-rows`` at least
``BLOCK_SECONDS`` of learning away, and never more than 2R rounds past the last pace round
every rank has reached: where rows are cheap R, not the poll, sets the blocks.
The rows come from one of two sources:

- generated: made in the loop as ``train --synthetic rcv1`` makes them (``StreamSource``);
- in memory: made before the run (``ArraySource``), so that only learning and the protocol are timed.

CPU time is ``time.process_time`` of each rank around its training loop (``Run._rounds``: no
start-up, no final sync), of which "waiting" is the part inside ``Run.wait`` and
``AsyncRounds.quiesce`` (a rank spinning, yielding its core, until the others reach a pacing barrier
or the run's end). Each figure is the median over ``--repeats`` runs in this launch (the protocols
alternate), then the largest over ranks; rows a block is the rounds over the median number of
blocks (polls), on the rank with fewest. A second table times the learning calls alone on rank 0,
before the runs: one call for all its rows without checks (as ``none`` learns), a call per 256
rows with a check after every row at Δ = 1e12 (as the default mode learns), and calls of 64 rows
without and with the learner's list of touched coordinates started again after each call, so that
it is kept, never dropped (as between the syncs of a protocol that syncs every 64 rows or more
often; with no sync the list is dropped once it outgrows n/4 entries and costs nothing more).
"""

import argparse
import time

import numpy as np
from mpi4py import MPI

from mpisgd.data.rows import ArraySource, StreamSource
from mpisgd.data.synthetic import RCV1Stream
from mpisgd.learners import OnlineLearners
from mpisgd.protocol import AsyncRounds, ProtocolConfig
from mpisgd.runner import Run, RunConfig, _one_blas_thread

LEARNER = {"loss": "log", "lam": 0.0, "schedule": "constant", "eta0": 1.0, "average": False}
QUIET = {"name": "dynamic", "delta": 1e12}  # the default mode (async, b = 1) with a Δ nobody reaches
# name: (ProtocolConfig, RunConfig) arguments; the last two split the default mode's cost (bench/README.md)
PROTOCOLS = {
    "none": ({"name": "none"}, {}),
    "default, Δ=1e12": (QUIET, {}),
    "default, Δ=1e12, --pace 1024": ({**QUIET, "pace": 1024}, {}),
    "default, Δ=1e12, --pace 0": ({**QUIET, "pace": 0}, {}),
}


class Clock:
    """The CPU seconds of each rank inside Run's loop and inside its waits, and its blocks of rows
    (the default mode's steps, a poll each), by wrapping them."""

    def __init__(self):
        self.loop = self.waiting = 0.0
        self.blocks = 0
        for owner, name, counter in ((Run, "_rounds", "loop"), (Run, "wait", "waiting"),
                                     (AsyncRounds, "quiesce", "waiting")):
            setattr(owner, name, self._timed(getattr(owner, name), counter))
        step = AsyncRounds.step

        def counted(rounds, t):
            self.blocks += 1
            return step(rounds, t)

        AsyncRounds.step = counted

    def _timed(self, method, counter):
        def timed(obj, *args):
            start = time.process_time()
            try:
                return method(obj, *args)
            finally:
                setattr(self, counter, getattr(self, counter) + time.process_time() - start)

        return timed

    def run(self, run):
        self.loop = self.waiting = 0.0
        self.blocks = 0
        run.run()
        return self.loop, self.waiting, self.blocks


def learning_calls(rows, n_features, repeats, block=256, short=64):
    """CPU µs per row of the learning calls alone, as ``none`` makes them (one call, no checks), as
    the default mode does (a call per ``block`` rows, a check after every row), and in calls of
    ``short`` rows with and without the list of touched coordinates started again after each
    call, as at a sync: medians over repeats."""
    indptr, indices, data, y = rows
    m = len(y)
    owner = np.zeros(m, dtype=np.int64)

    def pieces(size):
        return [(indptr[lo : hi + 1] - indptr[lo], indices[indptr[lo] : indptr[hi]], data[indptr[lo] : indptr[hi]],
                 y[lo:hi], owner[: hi - lo], np.arange(1, hi - lo + 1))
                for lo, hi in ((lo, min(m, lo + size)) for lo in range(0, m, size))]

    cases = {f"a call per {block} rows, a check every row": (pieces(block), False),
             f"a call per {short} rows, a check every row": (pieces(short), False),
             f"a call per {short} rows, a check every row, the touched coordinates kept": (pieces(short), True)}
    times = {"one call, no checks": [], **{name: [] for name in cases}}
    for _ in range(repeats):
        learners = OnlineLearners(1, n_features, **LEARNER)
        learners.warm_up()
        start = time.process_time()
        learners.learn(indptr, indices, data, y, owner)
        times["one call, no checks"].append(time.process_time() - start)
        for name, (calls, kept) in cases.items():
            learners = OnlineLearners(1, n_features, **LEARNER)
            start = time.process_time()
            for ip, ix, d, yy, o, checks in calls:
                learners.learn_until_violation(ip, ix, d, yy, o, checks, 1e12)
                if kept:
                    learners.listed[:] = 0  # the list started again, as at a sync (v is not gathered here)
            times[name].append(time.process_time() - start)
    return {name: 1e6 * np.median(t) / m for name, t in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20000, help="rounds (rows per rank) of each run")
    parser.add_argument("--repeats", type=int, default=7, help="runs of each protocol and source")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    stream = RCV1Stream(n_learners=comm.size, seed=0)
    rows = stream.rows(0, args.rounds, [comm.rank])
    sources = {"generated": lambda: StreamSource(stream, comm.rank, args.rounds),
               "in memory": lambda: ArraySource(*rows, stream.n_features)}
    calls = learning_calls(rows, stream.n_features, args.repeats) if comm.rank == 0 else None
    clock = Clock()
    times = {(s, p): [] for s in sources for p in PROTOCOLS}
    with _one_blas_thread():  # as in an MPI rank
        for _ in range(args.repeats):
            for (source, protocol), measured in times.items():
                protocol_args, run_args = PROTOCOLS[protocol]
                config = RunConfig(protocol=ProtocolConfig(**protocol_args), learner=LEARNER, **run_args)
                run = Run(comm, sources[source](), config)
                comm.Barrier()
                measured.append(clock.run(run))
    mine = {key: np.median(np.array(v), axis=0) for key, v in times.items()}
    every = comm.gather(mine, root=0)
    if comm.rank == 0:
        print(f"-n {comm.size}, RCV1-like stream (47,152 features), {args.rounds:,} rows a rank, CPU seconds of the "
              f"training loop per rank (median of {args.repeats} runs, largest over ranks)\n")
        print("| rows | protocol | CPU s per rank | of which waiting | µs per row | ratio to none | "
              "ratio, waiting left out | rows a block |")
        print("|---|---|---|---|---|---|---|---|")
        for source in sources:
            none = None
            for protocol in PROTOCOLS:
                cpu = max(e[(source, protocol)][0] for e in every)
                waiting = max(e[(source, protocol)][1] for e in every)
                working = max(e[(source, protocol)][0] - e[(source, protocol)][1] for e in every)
                none = none or (cpu, working)
                blocks = min(e[(source, protocol)][2] for e in every)  # none: no blocks
                rows_a_block = f"{args.rounds / blocks:,.0f}" if blocks else "–"
                print(f"| {source} | {protocol} | {cpu:.4f} | {waiting:.4f} | {1e6 * cpu / args.rounds:.3f} | "
                      f"{cpu / none[0]:.2f} | {working / none[1]:.2f} | {rows_a_block} |")
        print(f"\nThe learning calls alone (OnlineLearners, rank 0's rows in memory, before the runs), CPU µs per row "
              f"(median of {args.repeats})\n")
        print("| calls | µs per row | ratio |")
        print("|---|---|---|")
        first = next(iter(calls.values()))
        for name, us in calls.items():
            print(f"| {name} | {us:.3f} | {us / first:.2f} |")


if __name__ == "__main__":
    main()
