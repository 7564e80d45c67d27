"""Round skew between the ranks of an async run: every rank logs (wall clock,
rounds done) at each timeline row (bench-side instrumentation of
``Run._record``), and rank 0 prints how far apart the ranks' rounds are.

    mpiexec -n 4 python -m mpi4py bench/skew_probe.py OUT -- train options…

The clock is CLOCK_MONOTONIC (time.monotonic), shared by the processes of one machine.
"""

import json
import sys
import time

import numpy as np


def main():
    out, argv = sys.argv[1], sys.argv[sys.argv.index("--") + 1 :]
    from mpi4py import MPI

    from mpisgd import runner
    from mpisgd.cli import main as cli

    log = []
    record = runner.Run._record

    def logged(self, t):
        log.append((time.monotonic(), t))
        record(self, t)

    runner.Run._record = logged
    cli(["train", *argv, "--out", out, "--quiet", "--overwrite"])
    logs = MPI.COMM_WORLD.gather(log, root=0)
    if MPI.COMM_WORLD.Get_rank() != 0:
        return
    start = min(l[0][0] for l in logs)
    end = max(l[-1][0] for l in logs)
    grid = np.linspace(start, end, 200)
    rounds = np.array([np.interp(grid, [a for a, _ in l], [t for _, t in l]) for l in logs])
    skew = rounds.max(axis=0) - rounds.min(axis=0)
    report = json.load(open(f"{out}/report.json"))
    print(json.dumps({"error": report["online"]["error_rate"], "messages": report["communication"]["total_messages"],
                      "bytes": report["communication"]["total_bytes"],
                      "full_syncs": report["protocol"]["full_syncs"],
                      "skew_rounds_median": float(np.median(skew)), "skew_rounds_max": float(skew.max()),
                      "per_rank_errors": [p["errors"] for p in report["per_rank"]],
                      "waiting": [round(p["time"]["waiting"], 2) for p in report["per_rank"]],
                      "wall": [round(p["time"]["wall"], 2) for p in report["per_rank"]]}))


if __name__ == "__main__":
    main()
