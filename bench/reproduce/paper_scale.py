"""Paper scale, in the simulator: what the dynamic protocol costs in each mode
against static averaging every 8 rounds, on Kamp et al.'s drifting disjunction
(n = 100, k = 512, T = 25,000, drift 0.0002, log loss, η = 1).

    python bench/reproduce/paper_scale.py --seeds 10 --jobs 2        # the table of bench/README.md

Every configuration of one seed learns from the same rows (``run_many``).
For each configuration: the median over seeds of its online errors, MPI
messages (every message, control included) and bytes, each divided by static
b=8's on the same seed, and the 10th–90th percentile range. Messages are those
``mpisgd train`` sends in that mode: ``sync`` pays one 8-byte nonblocking
Allreduce per rank at every check point; the default ``async`` mode only for
violations and their resolutions. The default mode's resolutions take effect
``--async-delay`` rounds after their check (0, the paper's instant resolution,
unless given; ``mpisgd simulate`` models ``train``'s with 4, docs/RUNNING.md).

    python bench/reproduce/paper_scale.py --seeds 3 --async-delay 4     # as train resolves
"""

import argparse
import json
import sys
import time
from multiprocessing import get_context

import numpy as np

DELTAS = (1.0, 2.0, 3.0, 5.0, 8.0)
PERIODS = (1, 8)
LEARNER = {"loss": "log", "eta0": 1.0, "lam": 0.0}


def configurations():
    yield "none", {"name": "none"}, "async"
    yield "static b=8", {"name": "static", "period": 8}, "async"
    for mode in ("async", "sync"):
        for b in PERIODS:
            for delta in DELTAS:
                yield f"dynamic Δ={delta:g} b={b} {mode}", {"name": "dynamic", "period": b, "delta": delta}, mode


def one_seed(task):
    seed, k, rounds, delay = task
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import Simulation, make_stream, run_many

    stream = make_stream("disjunction", 100, k, seed, 0.0002)
    names, sims = [], []
    for name, protocol, mode in configurations():
        names.append(name)
        config = ProtocolConfig(**protocol, mode=mode)
        sims.append(Simulation(k, 100, rounds, config, LEARNER, async_delay=delay if config.asynchronous(k) else 0))
    start = time.perf_counter()
    results = run_many(stream, rounds, sims)
    out = {name: {"errors": r["errors"], "messages": sum(r["messages_sent"].values()),
                  "bytes": sum(r["bytes_sent"].values())} for name, r in zip(names, results)}
    print(f"seed {seed}: {len(names)} configurations in {time.perf_counter() - start:.0f} s", file=sys.stderr,
          flush=True)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--k", type=int, default=512)
    p.add_argument("--rounds", type=int, default=25000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--async-delay", type=int, default=0,
                   help="rounds from a check to its resolution in the default mode (0: the paper's instant one)")
    p.add_argument("--json", default=None, help="also write the per-seed results here")
    args = p.parse_args()
    tasks = [(s, args.k, args.rounds, args.async_delay) for s in range(args.seeds)]
    with get_context("spawn").Pool(args.jobs) as pool:
        per_seed = pool.map(one_seed, tasks)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(per_seed, f, indent=1)
    print(f"disjunction n=100, k={args.k}, T={args.rounds}, {args.seeds} seeds, async delay {args.async_delay}; "
          "ratios to static b=8 on the same seed: median [10th, 90th percentile]\n")
    print("| configuration | errors | MPI messages | bytes |\n|---|---|---|---|")
    for name, _p, _m in configurations():
        cells = []
        for key in ("errors", "messages", "bytes"):
            ratios = np.array([s[name][key] / s["static b=8"][key] for s in per_seed])
            lo, mid, hi = np.percentile(ratios, [10, 50, 90])
            cells.append(f"{mid:.3f} [{lo:.3f}, {hi:.3f}]")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
