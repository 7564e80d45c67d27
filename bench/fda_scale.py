"""Variance monitoring (fda, docs/ALGORITHMS.md §8) at paper scale, in the
simulator, against static averaging every 8 rounds and Kamp's dynamic
protocol, on the drifting disjunction (n = 100, k = 512, T = 25,000, drift
0.0002, log loss, η = 1) or on the network target with unit-norm inputs
(``--stream neuralnet-unit``: n = 150, k = 1,024, T = 2,500; raw ±1 rows with
η = 1/150, and Θ and Δ given in unit-norm units, times 1/150, as in
bench/bench_auto.py).

    python bench/fda_scale.py --seeds 5 --jobs 2          # the table of docs/REPRODUCTION.md
    python bench/fda_scale.py --stream neuralnet-unit --seeds 3 --thetas 0.5 1 2 4 --periods 8 4 --lags 0
    python bench/fda_scale.py --kernel                     # the cost of J projections per step
    ... --compress none q8        # static b=8 and every fda run also with compressed messages (--compress)

Every configuration of one seed learns from the same rows (``run_many``). For
each configuration: the median over seeds of its online errors, MPI messages
(every message, control included) and bytes, each divided by static b=8's on
the same seed (uncompressed), with the range over seeds. fda is always deterministic and
lagged (each check begun at t is settled at t + b); dynamic runs in sync mode,
which is the deterministic equivalent. ``exact`` decides on the exact variance
(the simulator's oracle) and counts the bytes of the linear variant; lag=0
settles each check at once (a blocking Allreduce of J + 1 numbers).
"""

import argparse
import json
import sys
import time
from multiprocessing import get_context

import numpy as np

LEARNER = {"loss": "log", "lam": 0.0}
# stream: (make_stream's kind, n, k, T, η, the unit of Θ and Δ, Kamp's Δ in that unit)
STREAMS = {"disjunction": ("disjunction", 100, 512, 25000, 1.0, 1.0, 3.0),
           "neuralnet-unit": ("neuralnet", 150, 1024, 2500, 1 / 150, 1 / 150, 2.0)}


def configurations(thetas, periods, lags, directions, exact, extra_b1, dynamic=True, unit=1.0, delta=3.0,
                   compress=("none",)):
    """(name, protocol, mode, compress) of every run: static b=8 and fda with each compression."""
    for name, protocol, mode in _configurations(thetas, periods, lags, directions, exact, extra_b1, dynamic, unit,
                                                delta):
        for c in compress if protocol["name"] in ("static", "fda") else ("none",):
            yield name + ("" if c == "none" else f" {c}"), protocol, mode, c


def _configurations(thetas, periods, lags, directions, exact, extra_b1, dynamic, unit, delta):
    yield "none", {"name": "none"}, "async"
    yield "static b=8", {"name": "static", "period": 8}, "async"
    if dynamic:
        for b in (8, 1):
            yield f"dynamic Δ={delta:g} b={b} sync", {"name": "dynamic", "period": b, "delta": delta * unit}, "sync"
    for b in periods:
        for lag in lags:
            for theta in thetas:
                for J in directions:
                    yield (f"fda Θ={theta:g} b={b} lag={lag} J={J}",
                           {"name": "fda", "period": b, "theta": theta * unit, "fda_directions": J, "fda_lag": lag},
                           "sync")
                if exact and b == periods[0] and lag == lags[0]:
                    yield (f"fda Θ={theta:g} b={b} lag={lag} exact",
                           {"name": "fda", "period": b, "theta": theta * unit, "fda_estimate": "exact",
                            "fda_lag": lag}, "sync")
    for theta in extra_b1:
        yield f"fda Θ={theta:g} b=1 lag=1 J=1", {"name": "fda", "period": 1, "theta": theta * unit}, "sync"


def one_seed(task):
    seed, k, rounds, confs, stream_name = task
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import Simulation, make_stream, run_many

    kind, n, _k, _T, eta0, _unit, _delta = STREAMS[stream_name]
    stream = make_stream(kind, n, k, seed, 0.0002)
    names, sims = [], []
    for name, protocol, mode, compress in confs:
        names.append(name)
        sims.append(Simulation(k, n, rounds, ProtocolConfig(**protocol), dict(LEARNER, eta0=eta0, compress=compress),
                               mode=mode))
    start = time.perf_counter()
    results = run_many(stream, rounds, sims)
    out = {name: {"errors": r["errors"], "messages": sum(r["messages_sent"].values()),
                  "bytes": sum(r["bytes_sent"].values()), "full_syncs": r["stats"]["full_syncs"],
                  "fda": r.get("fda")} for name, r in zip(names, results)}
    print(f"seed {seed}: {len(names)} configurations in {time.perf_counter() - start:.0f} s", file=sys.stderr,
          flush=True)
    return out


def kernel_cost(rounds=1000, k=512, repeats=7):
    """Seconds per row of ``OnlineLearners.learn`` with J = 0, 1, 2, 4 projections,
    as ratios to J = 0, in this process: the best of ``repeats``, the J interleaved
    within each repeat so that a busy machine slows them alike."""
    from mpisgd.learners import OnlineLearners
    from mpisgd.simulator import make_stream

    indptr, indices, data, y = make_stream("disjunction", 100, k, 0, 0.0002).rows(0, rounds)
    owner = np.tile(np.arange(k), rounds)
    Js = (0, 1, 2, 4)
    best = dict.fromkeys(Js, np.inf)
    for _ in range(repeats):
        for J in Js:
            L = OnlineLearners(k, 100, directions=J, eta0=1.0, **LEARNER)
            L.Xi[:] = np.eye(J, 101)  # any unit vectors: the cost does not depend on them
            L.learn(indptr[:2], indices, data, y[:1], owner[:1])  # compiled
            start = time.perf_counter()
            L.learn(indptr, indices, data, y, owner)
            best[J] = min(best[J], time.perf_counter() - start)
    print("| J | ns per row | ratio to J = 0 |\n|---|---|---|")
    for J in Js:
        print(f"| {J} | {1e9 * best[J] / len(y):.0f} | {best[J] / best[0]:.2f} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stream", choices=tuple(STREAMS), default="disjunction")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--k", type=int, default=None, help="learners (default: the stream's)")
    p.add_argument("--rounds", type=int, default=None, help="T (default: the stream's)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--thetas", type=float, nargs="+", default=[0.5, 2.0])
    p.add_argument("--periods", type=int, nargs="+", default=[8, 4])
    p.add_argument("--lags", type=int, nargs="+", default=[1, 0])
    p.add_argument("--directions", type=int, nargs="+", default=[1])
    p.add_argument("--b1", type=float, nargs="*", default=[0.5], help="thresholds of extra fda runs at b = 1")
    p.add_argument("--no-exact", dest="exact", action="store_false", help="leave out the oracle runs")
    p.add_argument("--no-dynamic", dest="dynamic", action="store_false", help="leave out Kamp's protocol")
    p.add_argument("--json", default=None, help="also write the per-seed results here")
    p.add_argument("--kernel", action="store_true", help="only the kernel's cost of the projections")
    p.add_argument("--compress", nargs="+", default=["none"], choices=("none", "fp16", "q8"),
                   help="static b=8 and fda also with these message compressions")
    args = p.parse_args()
    if args.kernel:
        return kernel_cost()
    _kind, n, k, rounds, eta0, unit, delta = STREAMS[args.stream]
    args.k, args.rounds = args.k or k, args.rounds or rounds
    confs = list(configurations(args.thetas, args.periods, args.lags, args.directions, args.exact, args.b1,
                                args.dynamic, unit, delta, args.compress))
    tasks = [(s, args.k, args.rounds, confs, args.stream) for s in range(args.seeds)]
    with get_context("spawn").Pool(args.jobs) as pool:
        per_seed = pool.map(one_seed, tasks)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(per_seed, f, indent=1)
    print(f"{args.stream} n={n}, k={args.k}, T={args.rounds}, η={eta0:.4g}, Θ and Δ in units of {unit:.4g}, "
          f"{args.seeds} seeds; ratios to static b=8 on the same seed: median [min, max]\n")
    print("| configuration | errors | MPI messages | bytes | full syncs |\n|---|---|---|---|---|")
    for name, *_ in confs:
        cells = []
        for key in ("errors", "messages", "bytes"):
            ratios = np.array([s[name][key] / s["static b=8"][key] for s in per_seed])
            cells.append(f"{np.median(ratios):.3f} [{ratios.min():.3f}, {ratios.max():.3f}]")
        syncs = np.median([sum(s[name]["full_syncs"].values()) - s[name]["full_syncs"]["final"] for s in per_seed])
        print(f"| {name} | " + " | ".join(cells) + f" | {syncs:g} |")


if __name__ == "__main__":
    main()
