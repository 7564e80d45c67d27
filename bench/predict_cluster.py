"""Cluster-scale prediction: static b=8 against the dynamic protocol (or another:
--protocol, --compress) on k learners, each run's exact message log replayed on a
network model (``mpisgd simulate --network``, docs/NETWORK.md).

    python bench/predict_cluster.py                         # the table of docs/REPRODUCTION.md
    python bench/predict_cluster.py --k 64 256 --streams disjunction --networks 10gbe
    python bench/predict_cluster.py --k 256 --streams rcv1 --protocol static --period 16

For each stream and k, both protocols are simulated once (default mode) and
their logs replayed on each network: the predicted wall time of static b=8 and
of the compared protocol, and the predicted time at which each reaches static
b=8's final online error (the cumulative error rate of the timeline; inf if
never). Compute per row is measured in the same process (the simulator's
kernel time per learner row) unless --row-seconds is given, so both protocols
are charged the same compute. Static b=8, the reference, is always
uncompressed. The last two pairs of columns replay the compared
run's log once more on the same network with one cost taken away: the
senders' overhead (o = 0), and the bandwidth (β = β_s = 0), which show where
its time goes.
"""

import argparse
import dataclasses
import math

import numpy as np

STREAMS = {  # stream -> (constructor arguments, rounds, learner, dynamic Δ, b of the compared protocol)
    "disjunction": ({"n_features": 100, "drift_prob": 0.0002}, 25000, {"loss": "log", "eta0": 1.0}, 3.0, 8),
    "rcv1": ({}, 2000, {"loss": "log", "eta0": 1.0}, 10.0, 8),
}


def compared_config(stream_name, protocol="dynamic", delta=None, period=None, theta=None, hedge="counter"):
    """The compared protocol's ProtocolConfig and its label (the stream's Δ and b unless given)."""
    from mpisgd.protocol import ProtocolConfig

    _kwargs, _rounds, _learner, default_delta, default_b = STREAMS[stream_name]
    b = default_b if period is None else period
    if protocol == "dynamic":
        delta = default_delta if delta is None else delta
        label = delta if isinstance(delta, str) else format(delta, "g")  # a number or auto
        name = f"dynamic Δ={label} b={b}" + ("" if hedge == "counter" else f" {hedge}")
        return ProtocolConfig(name="dynamic", period=b, delta=delta, hedge=hedge), name
    if protocol == "fda":
        theta = 1.0 if theta is None else theta
        return ProtocolConfig(name="fda", period=b, theta=theta), f"fda Θ={theta:g} b={b}"
    return ProtocolConfig(name=protocol, period=b), f"{protocol} b={b}"


def run(stream_name, k, networks, seconds_per_row, seed=0, compared=None, compress="none", rounds=None):
    """{network: {protocol label: figures}} and the compute per row charged; ``compared``:
    (ProtocolConfig, label) of the protocol set against static b=8 (default: the stream's dynamic);
    ``rounds``: T (default: the stream's)."""
    from mpisgd import netmodel
    from mpisgd.data.synthetic import STREAMS as GENERATORS
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import Simulation, run_many

    kwargs, default_rounds, learner, _delta, _b = STREAMS[stream_name]
    rounds = rounds or default_rounds
    config, label = compared or compared_config(stream_name)
    if compress != "none":
        label += f" {compress}"
    stream = GENERATORS[stream_name](n_learners=k, seed=seed, **kwargs)
    every = max(1, rounds // 100)
    configs = {"static b=8": (ProtocolConfig(name="static", period=8), learner),
               label: (config, {**learner, "compress": compress})}
    sims = [Simulation(k, stream.n_features, rounds, p, options, timeline_every=every, network=networks[0])
            for p, options in configs.values()]
    results = run_many(stream, rounds, sims)
    measured = sum(s._learn_seconds for s in sims) / sum(s._rows_learned for s in sims)
    per_row = seconds_per_row or measured
    out = {}
    for net_name in networks:
        net = netmodel.network(net_name)
        variants = {"": net, "o=0": dataclasses.replace(net, o=0.0),
                    "β=0": dataclasses.replace(net, beta=0.0, step_beta=0.0)}
        rows = {}
        for name, sim, r in zip(configs, sims, results):
            tl = np.array([row[:2] for row in r["timeline"]], dtype=np.float64)
            rows[name] = {"errors": r["errors"] / (k * rounds), "rounds": tl[:, 0], "cum_errors": tl[:, 1],
                          "messages": sum(r["messages_sent"].values()), "bytes": sum(r["bytes_sent"].values())}
            for tag, variant in variants.items():
                if tag and name == "static b=8":
                    continue
                p = netmodel.replay(sim.log.events, k, variant, per_row, sim.log.groups)
                rows[name]["wall" + tag] = p.wall
                rows[name]["marks" + tag] = np.asarray(p.marks)
        target = rows["static b=8"]["errors"]
        for row in rows.values():
            for tag in ("", "o=0", "β=0"):
                if "marks" + tag in row:
                    row["to_target" + tag] = netmodel.time_to_error(row["marks" + tag], row["rounds"],
                                                                    row["cum_errors"], k, target)
        out[net_name] = rows
    return out, per_row


def _speed(static, dynamic):
    return f"{static / dynamic:.1f}×" if math.isfinite(dynamic) else "–"


def main():
    from mpisgd.commands.options import delta_value
    from mpisgd.protocol import HEDGES
    from mpisgd.wire import COMPRESSIONS

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--k", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--streams", nargs="+", default=list(STREAMS), choices=list(STREAMS))
    p.add_argument("--networks", nargs="+", default=["10gbe", "ib100"])
    p.add_argument("--row-seconds", type=float, default=None, help="compute per learner row (default: measured)")
    p.add_argument("--rounds", type=int, default=None, help="T (default: 25,000 on the disjunction, 2,000 on rcv1)")
    p.add_argument("--max-rcv1-k", type=int, default=256, help="largest k of the RCV1-like stream (memory)")
    p.add_argument("--protocol", choices=("dynamic", "fda", "static"), default="dynamic",
                   help="the protocol compared with static b=8 (default: dynamic)")
    p.add_argument("--delta", type=delta_value, default=None,
                   help="Δ of the dynamic protocol, a number or auto (default: 3 on the disjunction, 10 on rcv1)")
    p.add_argument("--hedge", choices=HEDGES, default=None, help="the dynamic protocol's hedge (default: counter)")
    p.add_argument("--theta", type=float, default=None, help="Θ of fda (default 1)")
    p.add_argument("--period", type=int, default=None, help="its period b (default 8)")
    p.add_argument("--compress", choices=COMPRESSIONS, default="none",
                   help="the compared protocol's model messages (static b=8, the reference, stays uncompressed)")
    args = p.parse_args()
    if args.delta is not None and args.protocol != "dynamic":
        p.error(f"--delta is the dynamic protocol's, not {args.protocol}'s")
    if args.hedge is not None and args.protocol != "dynamic":
        p.error(f"--hedge is the dynamic protocol's, not {args.protocol}'s")
    if args.theta is not None and args.protocol != "fda":
        p.error(f"--theta is fda's, not {args.protocol}'s")
    if args.protocol == "static" and args.period in (None, 8) and args.compress == "none":
        p.error("--protocol static compares another period (--period) or --compress with static b=8")
    print("| stream | k | network | s/row | compared | static b=8 wall | its wall | static: time to its error | "
          "its time to static's error | speed-up | its errors / static | its bytes / static | "
          "its msgs / static | o = 0: its wall, time, speed-up | β = 0: its wall, time, speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for stream in args.streams:
        for k in args.k:
            if stream == "rcv1" and k > args.max_rcv1_k:
                continue
            compared = compared_config(stream, args.protocol, args.delta, args.period, args.theta,
                                       args.hedge or "counter")
            out, per_row = run(stream, k, args.networks, args.row_seconds, compared=compared, compress=args.compress,
                               rounds=args.rounds)
            for net, rows in out.items():
                (_sname, s), (dname, d) = rows.items()
                bounds = " | ".join(f"{d['wall' + t]:.3f} s, {d['to_target' + t]:.3f} s, "
                                    f"{_speed(s['to_target'], d['to_target' + t])}" for t in ("o=0", "β=0"))
                print(f"| {stream} | {k} | {net} | {per_row * 1e9:.0f} ns | {dname.removeprefix('dynamic ')} | "
                      f"{s['wall']:.3f} s | {d['wall']:.3f} s | {s['to_target']:.3f} s | {d['to_target']:.3f} s | "
                      f"{_speed(s['to_target'], d['to_target'])} | {d['errors'] / s['errors']:.3f} | "
                      f"{d['bytes'] / s['bytes']:.3f} | "
                      f"{d['messages'] / s['messages']:.3f} | {bounds} |", flush=True)


if __name__ == "__main__":
    main()
