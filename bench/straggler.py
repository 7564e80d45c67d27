"""``mpisgd train`` with one rank slowed on purpose, for bench_mpi.py's
straggler section (the slow-down lives here, not in mpisgd).

    mpiexec -n K python -m mpi4py bench/straggler.py RANK FACTOR ROW_SECONDS OUT train ARGS...

Every rank's rows cost ROW_SECONDS more each (a sleep after each block of
rows: a heavier model's compute, so that learning, not this machine's MPI
latency, sets the pace), and rank RANK's (none if RANK < 0) FACTOR times as
much; with ROW_SECONDS = 0 rank RANK instead sleeps FACTOR − 1 times what
each of its blocks took. Every rank writes to OUT.<rank> (JSON) the seconds from the start of
its training loop until it had learned its last row, and its trace: the
(clock, round) after every block of rows and, on rank 0, the clock at the
start of every async resolution (for the round skew between ranks).
"""

import json
import sys
import time


def slow(rank, factor, row_seconds, out):
    from mpisgd import protocol, runner

    learn, learn_until_violation = runner.Run.learn, runner.Run.learn_until_violation
    trace = {"rounds": [], "resolutions": []}
    start_resolution = protocol.AsyncCoordinator._start

    def traced_start(self, t):
        started = start_resolution(self, t)
        if started:
            trace["resolutions"].append(time.time())
        return started

    protocol.AsyncCoordinator._start = traced_start

    def after(run, start, rows):
        cost = (factor if run.rank == rank else 1.0) * row_seconds * rows
        if not row_seconds and run.rank == rank:
            cost = (factor - 1) * (time.perf_counter() - start)
        if cost > 0:
            time.sleep(cost)
        trace["rounds"].append((time.time(), run.rows_done))  # one row per round
        if run.rows_done == run.source.n_rows and "last_row" not in trace:
            trace["last_row"] = time.perf_counter() - run._loop_start
            with open(f"{out}.{run.rank}", "w") as f:
                json.dump(trace, f)

    def slow_learn(self, stop):
        start, before = time.perf_counter(), self.rows_done
        learn(self, stop)
        after(self, start, self.rows_done - before)

    def slow_learn_until_violation(self, t, stop):
        start, before = time.perf_counter(), self.rows_done
        result = learn_until_violation(self, t, stop)  # (round reached, violated)
        after(self, start, self.rows_done - before)
        return result

    runner.Run.learn, runner.Run.learn_until_violation = slow_learn, slow_learn_until_violation


def main(rank, factor, row_seconds, out, argv):
    from mpisgd.cli import main as mpisgd

    slow(rank, factor, row_seconds, out)
    return mpisgd(argv)


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5:]))
