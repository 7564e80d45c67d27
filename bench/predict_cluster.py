"""Cluster-scale prediction: static b=8 against the dynamic protocol on k learners,
each run's exact message log replayed on a network model (``mpisgd simulate
--network``, docs/NETWORK.md).

    python bench/predict_cluster.py                         # the table of docs/REPRODUCTION.md
    python bench/predict_cluster.py --k 64 256 --streams disjunction --networks 10gbe

For each stream, k and network: the predicted wall time of static b=8 and of
the dynamic protocol (default mode), and the predicted time at which each
reaches static b=8's final online error (the cumulative error rate of the
timeline; inf if never). Compute per row is measured in the same process
(the simulator's kernel time per learner row) unless --row-seconds is given,
so both protocols are charged the same compute. The last column replays the
dynamic run's log once more with the sender's overhead o = 0 on every rank: a
bound on what spreading rank 0's sends (a tree fan-out of its results and
commands) could gain, since rank 0 pays o for each message it sends.
"""

import argparse
import dataclasses
import math
import time

import numpy as np

STREAMS = {  # stream -> (constructor arguments, rounds, learner, dynamic Δ, b)
    "disjunction": ({"n_features": 100, "drift_prob": 0.0002}, 25000, {"loss": "log", "eta0": 1.0}, 3.0, 8),
    "rcv1": ({}, 2000, {"loss": "log", "eta0": 1.0}, 10.0, 8),
}


def run(stream_name, k, network, seconds_per_row, seed=0, delta=None):
    from mpisgd import netmodel
    from mpisgd.data.synthetic import STREAMS as GENERATORS
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import Simulation, run_many

    kwargs, rounds, learner, default_delta, b = STREAMS[stream_name]
    delta = default_delta if delta is None else delta
    stream = GENERATORS[stream_name](n_learners=k, seed=seed, **kwargs)
    every = max(1, rounds // 100)
    label = delta if isinstance(delta, str) else format(delta, "g")  # a number or auto
    configs = {"static b=8": ProtocolConfig(name="static", period=8),
               f"dynamic Δ={label} b={b}": ProtocolConfig(name="dynamic", period=b, delta=delta)}
    sims = [Simulation(k, stream.n_features, rounds, p, learner, timeline_every=every, network=network)
            for p in configs.values()]
    start = time.perf_counter()
    results = run_many(stream, rounds, sims)
    measured = sum(s._learn_seconds for s in sims) / sum(s._rows_learned for s in sims)
    per_row = seconds_per_row or measured
    rows = {}
    for name, sim, r in zip(configs, sims, results):
        p = sim.predict(per_row)
        free = netmodel.replay(sim.log.events, k, dataclasses.replace(sim.network, o=0.0), per_row, sim.log.groups)
        tl = np.array([row[:2] for row in r["timeline"]], dtype=np.float64)
        rows[name] = {"errors": r["errors"] / (k * rounds), "wall": p["wall"], "marks": p["timeline_seconds"],
                      "free_marks": free.marks, "rounds": tl[:, 0], "cum_errors": tl[:, 1],
                      "messages": sum(r["messages_sent"].values()), "bytes": sum(r["bytes_sent"].values())}
    target = rows["static b=8"]["errors"]
    for row in rows.values():
        row["to_target"] = netmodel.time_to_error(row["marks"], row["rounds"], row["cum_errors"], k, target)
        row["to_target_free"] = netmodel.time_to_error(np.asarray(row["free_marks"]), row["rounds"],
                                                       row["cum_errors"], k, target)
    return rows, per_row, time.perf_counter() - start


def main():
    from mpisgd.commands.options import delta_value

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--k", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--streams", nargs="+", default=list(STREAMS), choices=list(STREAMS))
    p.add_argument("--networks", nargs="+", default=["10gbe", "ib100"])
    p.add_argument("--row-seconds", type=float, default=None, help="compute per learner row (default: measured)")
    p.add_argument("--max-rcv1-k", type=int, default=256, help="largest k of the RCV1-like stream (memory)")
    p.add_argument("--delta", type=delta_value, default=None,
                   help="Δ of the dynamic protocol, a number or auto (default: 3 on the disjunction, 10 on rcv1)")
    args = p.parse_args()
    print("| stream | k | network | s/row | static b=8 wall | dynamic wall | static: time to its error | "
          "dynamic: time to static's error | speed-up | dynamic bytes / static | dynamic msgs / static | "
          "dynamic, sends free (o = 0): time to static's error | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for stream in args.streams:
        for k in args.k:
            if stream == "rcv1" and k > args.max_rcv1_k:
                continue
            for net in args.networks:
                rows, per_row, took = run(stream, k, net, args.row_seconds, delta=args.delta)
                (sname, s), (dname, d) = rows.items()
                speed = s["to_target"] / d["to_target"] if math.isfinite(d["to_target"]) else 0.0
                free = s["to_target"] / d["to_target_free"] if math.isfinite(d["to_target_free"]) else 0.0
                print(f"| {stream} | {k} | {net} | {per_row * 1e9:.0f} ns | {s['wall']:.3f} s | {d['wall']:.3f} s | "
                      f"{s['to_target']:.3f} s | {d['to_target']:.3f} s ({dname}) | {speed:.1f}× | "
                      f"{d['bytes'] / s['bytes']:.3f} | {d['messages'] / s['messages']:.3f} | "
                      f"{d['to_target_free']:.3f} s | {free:.1f}× |", flush=True)


if __name__ == "__main__":
    main()
