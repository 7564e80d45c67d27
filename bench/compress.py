"""Compressed model messages and full syncs (``--compress``), in the simulator,
on Kamp et al.'s drifting disjunction (n = 100, k = 512, T = 25,000, drift
0.0002, log loss, η = 1), against uncompressed static averaging every 8 rounds.

    python bench/compress.py --seeds 3 --jobs 1        # the table of docs/REPRODUCTION.md
    python bench/compress.py --seed-list 2 --json s2.json    # one seed; then
    python bench/compress.py --combine s0.json s1.json s2.json   # the table of several

Every configuration of one seed learns from the same rows (``run_many``); the
default mode (instant resolutions). For each configuration: the median over
seeds of its online errors, MPI messages (every message, control included),
bytes and the paper's model messages, each divided by uncompressed static
b=8's on the same seed, with the minimum and maximum.
"""

import argparse
import json
import sys
import time
from multiprocessing import get_context

import numpy as np

COMPRESS = ("none", "fp16", "q8")
LEARNER = {"loss": "log", "eta0": 1.0, "lam": 0.0}
REFERENCE = "static b=8 none"


def configurations(deltas):
    for c in COMPRESS:
        yield f"static b=8 {c}", {"name": "static", "period": 8}, c
    for delta in deltas:
        for b in (8, 1):
            for c in COMPRESS:
                yield f"dynamic Δ={delta:g} b={b} {c}", {"name": "dynamic", "period": b, "delta": delta}, c


def one_seed(task):
    seed, k, rounds, deltas = task
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import Simulation, make_stream, run_many

    stream = make_stream("disjunction", 100, k, seed, 0.0002)
    names, sims = [], []
    for name, protocol, compress in configurations(deltas):
        names.append(name)
        sims.append(Simulation(k, 100, rounds, ProtocolConfig(**protocol), dict(LEARNER, compress=compress)))
    start = time.perf_counter()
    results = run_many(stream, rounds, sims)
    out = {name: {"errors": r["errors"], "messages": sum(r["messages_sent"].values()),
                  "bytes": sum(r["bytes_sent"].values()), "model_messages": r["model_messages"],
                  "bytes_by_category": r["bytes_sent"]} for name, r in zip(names, results)}
    print(f"seed {seed}: {len(names)} configurations in {time.perf_counter() - start:.0f} s", file=sys.stderr,
          flush=True)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--k", type=int, default=512)
    p.add_argument("--rounds", type=int, default=25000)
    p.add_argument("--deltas", type=float, nargs="+", default=[3.0])
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--seed-list", type=int, nargs="+", default=None, help="these seeds (default: 0 … seeds − 1)")
    p.add_argument("--json", default=None, help="also write the per-seed results here")
    p.add_argument("--combine", nargs="+", default=None, metavar="JSON", help="only print the table of these results")
    args = p.parse_args()
    if args.combine:
        per_seed = [s for path in args.combine for s in json.load(open(path))]
    else:
        seeds = args.seed_list if args.seed_list is not None else range(args.seeds)
        tasks = [(s, args.k, args.rounds, args.deltas) for s in seeds]
        with get_context("spawn").Pool(args.jobs) as pool:
            per_seed = pool.map(one_seed, tasks)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(per_seed, f, indent=1)
    print(f"disjunction n=100, k={args.k}, T={args.rounds}, {len(per_seed)} seeds; "
          f"ratios to {REFERENCE} on the same seed: median [min, max]\n")
    print("| configuration | errors | MPI messages | bytes | model messages |\n|---|---|---|---|---|")
    for name, _p, _c in configurations(args.deltas):
        cells = []
        for key in ("errors", "messages", "bytes", "model_messages"):
            ratios = np.array([s[name][key] / s[REFERENCE][key] for s in per_seed])
            cells.append(f"{np.median(ratios):.3f} [{ratios.min():.3f}, {ratios.max():.3f}]")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
