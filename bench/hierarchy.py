"""Hierarchical synchronization (--node-size, docs/ALGORITHMS.md §6) at paper
scale in the simulator: 64 nodes × 8 learners on the drifting disjunction
(n = 100, k = 512, drift 0.0002, log loss, η = 1), against the flat dynamic
protocol and static averaging every 8 rounds.

    PYTHONPATH=. python bench/hierarchy.py --seeds 3 --rounds 25000 --jobs 2 --json hier.json

Every configuration of one seed learns from the same rows (``run_many``).
Per configuration: the median over seeds of its online errors, inter-node
bytes and MPI messages (every byte and message between nodes, control
included: the leaders' protocol and every rank's start, pilot and final
collectives) divided by static b=8's on the same seed, [min, max] over the
seeds, and the intra-node bytes (node averages and shared results) divided
by static b=8's (inter-node) bytes. Dynamic runs in sync mode.
"""

import argparse
import json
import sys
import time
from multiprocessing import get_context

import numpy as np

LEARNER = {"loss": "log", "eta0": 1.0, "lam": 0.0}


def configurations(node_size, deltas):
    yield "static b=8", {"name": "static", "period": 8}
    yield f"static b=8, nodes of {node_size}", {"name": "static", "period": 8, "node_size": node_size}
    for delta in deltas:
        for b in (1, 8):
            yield f"dynamic Δ={delta:g} b={b}", {"name": "dynamic", "period": b, "delta": delta}
            yield (f"dynamic Δ={delta:g} b={b}, nodes of {node_size}",
                   {"name": "dynamic", "period": b, "delta": delta, "node_size": node_size})
    yield (f"dynamic Δ=auto b=8, nodes of {node_size}",
           {"name": "dynamic", "period": 8, "delta": "auto", "node_size": node_size})


def one_seed(job):
    seed, k, rounds, node_size, deltas = job
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import Simulation, make_stream, run_many

    stream = make_stream("disjunction", 100, k, seed, drift_prob=0.0002)
    names, sims = [], []
    for name, kw in configurations(node_size, deltas):
        names.append(name)
        sims.append(Simulation(k, 100, rounds, ProtocolConfig(**kw), LEARNER, drifts=stream.drifts(rounds),
                               mode="sync"))
    start = time.perf_counter()
    results = run_many(stream, rounds, sims)
    out = {}
    for name, r in zip(names, results):
        intra = r.get("hierarchy", {}).get("intra_node", {})
        out[name] = {"errors": r["errors"], "bytes": sum(r["bytes_sent"].values()),
                     "messages": sum(r["messages_sent"].values()),
                     "intra_bytes": sum(intra.get("bytes_sent", {}).values()),
                     "intra_messages": sum(intra.get("messages_sent", {}).values()),
                     "full_syncs": r["stats"]["full_syncs"], "violations": r["stats"]["violations"],
                     "delta_auto": (r["delta_auto"] or {}).get("delta")}
    print(f"seed {seed}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return seed, out


def table(per_seed):
    names = list(next(iter(per_seed.values())))
    rows = ["| configuration | E / E_static8 | inter-node bytes | inter-node messages | intra-node bytes "
            "| intra-node messages | full syncs (median) |", "|---|---|---|---|---|---|---|"]

    def cell(values, digits=3):
        v = np.asarray(values, float)
        return f"{np.median(v):.{digits}f} [{v.min():.{digits}f}, {v.max():.{digits}f}]"

    for name in names:
        ratio = {key: [s[name][key] / s["static b=8"][key.replace("intra_", "")] for s in per_seed.values()]
                 for key in ("errors", "bytes", "messages", "intra_bytes", "intra_messages")}
        syncs = np.median([sum(v for c, v in s[name]["full_syncs"].items() if c != "final")
                           for s in per_seed.values()])
        rows.append(f"| {name} | {cell(ratio['errors'])} | {cell(ratio['bytes'])} | {cell(ratio['messages'])} "
                    f"| {cell(ratio['intra_bytes'])} | {cell(ratio['intra_messages'])} | {syncs:.0f} |")
    return "\n".join(rows)


def from_json(path):
    """The table of a --json file (complete or not)."""
    with open(path) as f:
        return table({int(s): v for s, v in json.load(f)["per_seed"].items()})


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--rounds", type=int, default=25000)
    p.add_argument("--learners", type=int, default=512)
    p.add_argument("--node-size", type=int, default=8)
    p.add_argument("--deltas", type=float, nargs="+", default=[3.0])
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)
    jobs = [(s, a.learners, a.rounds, a.node_size, a.deltas) for s in range(a.seeds)]
    per_seed = {}

    def keep(done):  # each seed as it ends, so that an interrupted run keeps the seeds done
        seed, out = done
        per_seed[seed] = out
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"args": vars(a), "per_seed": dict(sorted(per_seed.items()))}, f, indent=1)

    if a.jobs > 1:
        with get_context("spawn").Pool(a.jobs) as pool:
            for done in pool.imap_unordered(one_seed, jobs):
                keep(done)
    else:
        for job in jobs:
            keep(one_seed(job))
    per_seed = dict(sorted(per_seed.items()))
    print(f"k = {a.learners} in nodes of {a.node_size}, T = {a.rounds}, seeds 0-{a.seeds - 1}; ratios to static "
          "b=8 (flat) on the same seed, median [min, max]; intra-node bytes and messages over static b=8's "
          "inter-node ones")
    print(table(per_seed))


if __name__ == "__main__":
    main()
