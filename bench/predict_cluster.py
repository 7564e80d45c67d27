"""Cluster-scale prediction: static b=8 against another protocol on k learners,
each run's exact message log replayed on a network model (``mpisgd simulate
--network``, docs/NETWORK.md). The compared run takes ``mpisgd train``'s
protocol options and defaults (dynamic, --delta auto, b = 1), plus
--compress for its model messages, and is labelled by the options given
another value than their default; static b=8, the reference, is always
uncompressed. The tables of docs/REPRODUCTION.md:

    python bench/predict_cluster.py --k 64 256 1024 --streams disjunction --row-seconds 175e-9 --delta 3 --period 8
    python bench/predict_cluster.py --k 256 --streams rcv1 --networks 10gbe --row-seconds 2e-6 --period 8
    python bench/predict_cluster.py --k 256 --streams rcv1 --networks 10gbe --row-seconds 2e-6 --protocol static --period 16

For each stream and k, both protocols are simulated once and their logs
replayed on each network: the predicted wall time of each, and the predicted
time at which each reaches static b=8's final online error (the cumulative
error rate of the timeline; inf if never). Compute per row is measured in the
same process (the simulator's kernel time per learner row) unless
--row-seconds is given, so both protocols are charged the same compute. The
last two pairs of columns replay the compared run's log once more on the
same network with one cost taken away: the senders' overhead (o = 0), and the
bandwidth (β = β_s = 0), which show where its time goes.
"""

import argparse
import dataclasses
import math

import numpy as np

STREAMS = {  # stream -> (constructor arguments, rounds, learner)
    "disjunction": ({"n_features": 100, "drift_prob": 0.0002}, 25000, {"loss": "log", "eta0": 1.0}),
    "rcv1": ({}, 2000, {"loss": "log", "eta0": 1.0}),
}


BENCH_OPTIONS = ("k", "streams", "networks", "row_seconds", "rounds", "max_rcv1_k")  # not the compared run's


def label(args, defaults):
    """The compared run's row label: its protocol and b, and each option given another value than its default."""
    changed = [f"{dest}={value}" for dest, value in vars(args).items()
               if dest not in (*BENCH_OPTIONS, "protocol", "period") and value != defaults[dest]]
    return " ".join([f"{args.protocol} b={args.period}", *changed])


def run(stream_name, k, networks, seconds_per_row, compared, seed=0, mode="async", compress="none", rounds=None):
    """{network: (static b=8's figures, the compared run's)} and the compute per row charged;
    ``compared``: the ProtocolConfig set against static b=8, in ``mode``, its model messages
    compressed by ``compress``; ``rounds``: T (default: the stream's)."""
    from mpisgd import netmodel
    from mpisgd.data.synthetic import STREAMS as GENERATORS
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import Simulation, run_many

    kwargs, default_rounds, learner = STREAMS[stream_name]
    rounds = rounds or default_rounds
    stream = GENERATORS[stream_name](n_learners=k, seed=seed, **kwargs)
    every = max(1, rounds // 100)
    sims = [Simulation(k, stream.n_features, rounds, ProtocolConfig(name="static", period=8), learner,
                       timeline_every=every, network=networks[0]),
            Simulation(k, stream.n_features, rounds, compared, {**learner, "compress": compress},
                       timeline_every=every, mode=mode, network=networks[0])]
    results = run_many(stream, rounds, sims)
    measured = sum(s._learn_seconds for s in sims) / sum(s._rows_learned for s in sims)
    per_row = seconds_per_row or measured
    out = {}
    for net_name in networks:
        net = netmodel.network(net_name)
        variants = {"": net, "o=0": dataclasses.replace(net, o=0.0),
                    "β=0": dataclasses.replace(net, beta=0.0, step_beta=0.0)}
        rows = []
        for sim, r, tags in zip(sims, results, ([""], variants)):  # the reference is replayed as it is
            tl = np.array([row[:2] for row in r["timeline"]], dtype=np.float64)
            row = {"errors": r["errors"] / (k * rounds), "rounds": tl[:, 0], "cum_errors": tl[:, 1],
                   "messages": sum(r["messages_sent"].values()), "bytes": sum(r["bytes_sent"].values())}
            for tag in tags:
                p = netmodel.replay(sim.log.events, k, variants[tag], per_row, sim.log.groups)
                row["wall" + tag] = p.wall
                row["marks" + tag] = np.asarray(p.marks)
            rows.append(row)
        target = rows[0]["errors"]
        for row in rows:
            for tag in ("", "o=0", "β=0"):
                if "marks" + tag in row:
                    row["to_target" + tag] = netmodel.time_to_error(row["marks" + tag], row["rounds"],
                                                                    row["cum_errors"], k, target)
        out[net_name] = rows
    return out, per_row


def _speed(static, dynamic):
    return f"{static / dynamic:.1f}×" if math.isfinite(dynamic) else "–"


def main():
    from mpisgd.commands.options import add_protocol_arguments, protocol_config
    from mpisgd.errors import MpisgdError
    from mpisgd.wire import COMPRESSIONS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--k", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--streams", nargs="+", default=list(STREAMS), choices=list(STREAMS))
    p.add_argument("--networks", nargs="+", default=["10gbe", "ib100"])
    p.add_argument("--row-seconds", type=float, default=None, help="compute per learner row (default: measured)")
    p.add_argument("--rounds", type=int, default=None, help="T (default: 25,000 on the disjunction, 2,000 on rcv1)")
    p.add_argument("--max-rcv1-k", type=int, default=256, help="largest k of the RCV1-like stream (memory)")
    add_protocol_arguments(p.add_argument_group("the compared run (mpisgd train's protocol options)"))
    p.add_argument("--compress", choices=COMPRESSIONS, default="none",
                   help="the compared run's model messages (static b=8, the reference, stays uncompressed)")
    args = p.parse_args()
    try:
        compared = protocol_config(args)
    except MpisgdError as exc:
        p.error(str(exc))
    name = label(args, vars(p.parse_args([])))
    print("| stream | k | network | s/row | compared | static b=8 wall | its wall | static: time to its error | "
          "its time to static's error | speed-up | its errors / static | its bytes / static | "
          "its msgs / static | o = 0: its wall, time, speed-up | β = 0: its wall, time, speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for stream in args.streams:
        for k in args.k:
            if stream == "rcv1" and k > args.max_rcv1_k:
                continue
            out, per_row = run(stream, k, args.networks, args.row_seconds, compared, mode=args.mode,
                               compress=args.compress, rounds=args.rounds)
            for net, (s, d) in out.items():
                bounds = " | ".join(f"{d['wall' + t]:.3f} s, {d['to_target' + t]:.3f} s, "
                                    f"{_speed(s['to_target'], d['to_target' + t])}" for t in ("o=0", "β=0"))
                print(f"| {stream} | {k} | {net} | {per_row * 1e9:.0f} ns | {name} | "
                      f"{s['wall']:.3f} s | {d['wall']:.3f} s | {s['to_target']:.3f} s | {d['to_target']:.3f} s | "
                      f"{_speed(s['to_target'], d['to_target'])} | {d['errors'] / s['errors']:.3f} | "
                      f"{d['bytes'] / s['bytes']:.3f} | "
                      f"{d['messages'] / s['messages']:.3f} | {bounds} |", flush=True)


if __name__ == "__main__":
    main()
