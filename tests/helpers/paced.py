"""``mpisgd`` at a set pace, for the tests of graceful stops (SIGTERM).

    mpiexec -n K python -m mpi4py tests/helpers/paced.py SECONDS train ARGS...

Runs ``mpisgd train ARGS...`` (with a checkpointer); every rank sleeps
SECONDS at each of the checkpointer's polls (sync mode) or of its own
polls (async mode: after learning to a multiple of --poll-rows), and rank 0
prints ``paced: round T`` there, so that a test can signal the job mid-run
whatever the machine's speed. The slowdown lives here, not in mpisgd
(paced_site/ applies it to the jobs of a batch script).
"""

import sys
import time


def pace(seconds):
    """Make every Checkpointer poll (sync mode) or rank's poll (async mode)
    take ``seconds`` longer, and rank 0 print it."""
    from mpisgd import checkpoint, runner

    due = checkpoint.Checkpointer.due

    def paced_due(self, t):
        if t % self.poll == 0:
            if self.rank == 0:
                print(f"paced: round {t}", flush=True)
            time.sleep(seconds)
        return due(self, t)

    checkpoint.Checkpointer.due = paced_due
    learn, learn_until_violation = runner.Run.learn, runner.Run.learn_until_violation

    def paced_at(run, t):  # async mode: the rounds at which the loop polls, every --poll-rows
        if run.checkpointer is not None and t % run.config.poll_rows == 0:
            if run.rank == 0:
                print(f"paced: round {t}", flush=True)
            time.sleep(seconds)

    def paced_learn(self, stop):
        learn(self, stop)
        if self.asynchronous:
            paced_at(self, stop)

    def paced_learn_until_violation(self, t, stop):
        reached, violated = learn_until_violation(self, t, stop)
        paced_at(self, reached)
        return reached, violated

    runner.Run.learn, runner.Run.learn_until_violation = paced_learn, paced_learn_until_violation


def main(seconds, argv):
    from mpisgd.cli import main as mpisgd

    pace(seconds)
    return mpisgd(argv)


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]), sys.argv[2:]))
