"""Variance monitoring (fda, docs/ALGORITHMS.md §7) at paper scale, in the
simulator, against static averaging every 8 rounds and Kamp's dynamic
protocol, on the drifting disjunction (n = 100, k = 512, T = 25,000, drift
0.0002, log loss, η = 1).

    python bench/fda_scale.py --seeds 5 --jobs 2          # the table of docs/REPRODUCTION.md

Every configuration of one seed learns from the same rows (``run_many``). For
each configuration: the median over seeds of its online errors, MPI messages
(every message, control included) and bytes, each divided by static b=8's on
the same seed, with the range over seeds. fda is always deterministic and
lagged (each check begun at t is settled at t + b); dynamic runs in sync mode,
which is the deterministic equivalent. ``exact`` decides on the exact variance
(the simulator's oracle) and counts the bytes of the linear variant.
"""

import argparse
import json
import sys
import time
from multiprocessing import get_context

import numpy as np

LEARNER = {"loss": "log", "eta0": 1.0, "lam": 0.0}


def configurations(thetas, periods, directions, exact):
    yield "none", {"name": "none"}, "async"
    yield "static b=8", {"name": "static", "period": 8}, "async"
    yield "static b=128", {"name": "static", "period": 128}, "async"
    for b in periods:
        yield f"dynamic Δ=3 b={b} sync", {"name": "dynamic", "period": b, "delta": 3.0}, "sync"
    for b in periods:
        for theta in thetas:
            for J in directions:
                yield (f"fda Θ={theta:g} b={b} J={J}",
                       {"name": "fda", "period": b, "theta": theta, "fda_directions": J}, "sync")
            if exact:
                yield (f"fda Θ={theta:g} b={b} exact",
                       {"name": "fda", "period": b, "theta": theta, "fda_estimate": "exact"}, "sync")


def one_seed(task):
    seed, k, rounds, confs = task
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import Simulation, make_stream, run_many

    stream = make_stream("disjunction", 100, k, seed, 0.0002)
    names, sims = [], []
    for name, protocol, mode in confs:
        names.append(name)
        sims.append(Simulation(k, 100, rounds, ProtocolConfig(**protocol), LEARNER, mode=mode))
    start = time.perf_counter()
    results = run_many(stream, rounds, sims)
    out = {name: {"errors": r["errors"], "messages": sum(r["messages_sent"].values()),
                  "bytes": sum(r["bytes_sent"].values()), "full_syncs": r["stats"]["full_syncs"],
                  "fda": r.get("fda")} for name, r in zip(names, results)}
    print(f"seed {seed}: {len(names)} configurations in {time.perf_counter() - start:.0f} s", file=sys.stderr,
          flush=True)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--k", type=int, default=512)
    p.add_argument("--rounds", type=int, default=25000)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--thetas", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    p.add_argument("--periods", type=int, nargs="+", default=[8])
    p.add_argument("--directions", type=int, nargs="+", default=[1])
    p.add_argument("--no-exact", dest="exact", action="store_false", help="leave out the oracle runs")
    p.add_argument("--json", default=None, help="also write the per-seed results here")
    args = p.parse_args()
    confs = list(configurations(args.thetas, args.periods, args.directions, args.exact))
    tasks = [(s, args.k, args.rounds, confs) for s in range(args.seeds)]
    with get_context("spawn").Pool(args.jobs) as pool:
        per_seed = pool.map(one_seed, tasks)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(per_seed, f, indent=1)
    print(f"disjunction n=100, k={args.k}, T={args.rounds}, {args.seeds} seeds; "
          "ratios to static b=8 on the same seed: median [min, max]\n")
    print("| configuration | errors | MPI messages | bytes | full syncs |\n|---|---|---|---|---|")
    for name, _p, _m in confs:
        cells = []
        for key in ("errors", "messages", "bytes"):
            ratios = np.array([s[name][key] / s["static b=8"][key] for s in per_seed])
            cells.append(f"{np.median(ratios):.3f} [{ratios.min():.3f}, {ratios.max():.3f}]")
        syncs = np.median([sum(s[name]["full_syncs"].values()) - s[name]["full_syncs"]["final"] for s in per_seed])
        print(f"| {name} | " + " | ".join(cells) + f" | {syncs:g} |")


if __name__ == "__main__":
    main()
