"""The dynamic protocol's defaults (--delta auto, b = 1) against static b=8: online
error, bytes and messages on the RCV1-like stream, the disjunction and shards
(a9a, w8a), with hand-picked Δ beside them: the error/bytes frontier the
defaults sit on; the defaults with full syncs only (c given: --delta auto
switches to partial syncs only where the rows spread and nothing else was
chosen, docs/ALGORITHMS.md §4.4); and candidate partial syncs (--partial θ, Δ
auto with c = F·DELTA_SCALE, that is F times the rule's Δ).

    python bench/defaults_against_static.py --stream rcv1 --k 2 --rounds 5000 --seeds 10 --deltas 5 7 10 20 40
    python bench/defaults_against_static.py --stream disjunction --k 512 --rounds 25000 --seeds 10
    python bench/defaults_against_static.py --stream shards --shards data/a9a/*.h5 --hinge
    python bench/defaults_against_static.py --stream rcv1 --k 2 --seeds 10 --partial 0.9 --partial-scales 12 16
    python bench/defaults_against_static.py --stream rcv1 --k 2 --rounds 20000 --seeds 1 --partial 0.9 \
        --partial-scales 12 16 --link 7.6e-6 7.28e-9      # wall modelled on the 1 Gb/s link

In the simulator, every configuration of one seed on the same rows; the
protocol's options are ProtocolConfig's defaults (those of `mpisgd simulate`)
but for the name, b and Δ. The learner is Kamp et al.'s (log loss, η = 1, no
regularization, no averaging), or with --hinge that of docs/RESULTS.md's a9a
runs (hinge, λ = 1e-4, Bottou's schedule, γ0 = 1, averaged). For each: the
median over seeds [min, max] of the online error, and of the errors, bytes and
MPI messages divided by static b=8's on the same seed; the median number of
syncs (every resolution that moved models but the final sync); the Δ --delta
auto chose, the rows' spread its pilot measured and the θ it chose. With
--link α β, each run's wall on that link as well, as a multiple of static
b=8's: netmodel's replay of its messages (docs/NETWORK.md) with --row-seconds
of compute a round, plus each sync's CPU (--sync-seconds: a partial sync's, a
full sync's), which the replay does not see.
"""

import argparse
import sys
import time

import numpy as np

PAPER = {"loss": "log", "lam": 0.0, "schedule": "constant", "eta0": 1.0, "average": False}
HINGE = {"loss": "hinge", "lam": 1e-4, "schedule": "bottou", "eta0": 1.0, "average": True}
# linear: bench/partial_averaging.py's sparse linear teacher (the stream's own defaults are n = 1,000, no drift)
LINEAR = {"n_features": 20000, "nnz_per_row": 20, "drift_prob": 0.0002}


def configurations(args):
    from mpisgd.protocol import DELTA_SCALE

    b = args.period
    yield "static b=8", {"name": "static", "period": 8}
    yield "none", {"name": "none"}
    yield f"defaults (Δ auto, b={b})", {"period": b}
    yield f"defaults, full syncs (c = {DELTA_SCALE:g} given, b={b})", {"period": b, "delta_scale": DELTA_SCALE}
    for d in args.deltas:
        yield f"dynamic Δ={d:g} b={b}", {"delta": d, "period": b}
    for theta in args.partial:
        for F in args.partial_scales:
            yield f"partial θ={theta:g}, Δ auto ×{F:g}, b={b}", {"partial": theta, "delta_scale": F * DELTA_SCALE,
                                                                  "period": b}


def one_seed(args, seed):
    """{name: (errors, examples, bytes, messages, Δ auto)} of every configuration."""
    from mpisgd.data.synthetic import STREAMS
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import ShardSource, Simulation, run_many, simulate

    learner = HINGE if args.hinge else PAPER
    names, configs = zip(*((name, ProtocolConfig(**c)) for name, c in configurations(args)))
    if args.stream == "shards":
        results = []
        for config in configs:
            source = ShardSource(args.shards)
            results.append(simulate(source, min(args.rounds or source.n_rounds, source.n_rounds), config, learner))
            source.close()
    else:
        options = {"disjunction": {"drift_prob": args.drift_prob}, "neuralnet": {"drift_prob": args.drift_prob},
                   "linear": LINEAR}.get(args.stream, {})
        stream = STREAMS[args.stream](n_learners=args.k, seed=seed, **options)
        network = link(args.link) if args.link else None
        sims = [Simulation(args.k, stream.n_features, args.rounds, c, learner, network=network) for c in configs]
        results = run_many(stream, args.rounds, sims)
        if args.link:
            for sim, r in zip(sims, results):
                r["wall"] = modelled_wall(sim, r, args)
    return {name: (r["errors"], r["examples"], sum(r["bytes_sent"].values()), sum(r["messages_sent"].values()),
                   (r["delta_auto"] or {}).get("delta"), (r["delta_auto"] or {}).get("spread"),
                   (r["delta_auto"] or {}).get("partial"), syncs(r["stats"]), r.get("wall"))
            for name, r in zip(names, results)}


def link(alpha_beta):
    """The TCP link as measured (α s, β s a byte): a netmodel Network, full duplex."""
    from mpisgd import netmodel

    alpha, beta = alpha_beta
    return netmodel.Network("link", alpha, beta, gamma=netmodel.GAMMA, source="--link")


def modelled_wall(sim, result, args):
    """netmodel's replay of the run's messages on the link, its rows at --row-seconds, plus each sync's
    CPU on the critical path (--sync-seconds: a partial sync's, a full sync's)."""
    partial_s, full_s = args.sync_seconds
    partial = result["protocol"].get("partial") is not None or (result["delta_auto"] or {}).get("partial") is not None
    return sim.predict(args.row_seconds)["wall"] + syncs(result["stats"]) * (partial_s if partial else full_s)


def syncs(stats):
    """The resolutions that moved models: full syncs (partial ones included) but the final one, and balancings."""
    return sum(v for cause, v in stats["full_syncs"].items() if cause != "final") + stats["balancings"]


def spread(values, fmt):
    v = np.asarray(values, float)
    return f"{np.median(v):{fmt}} [{v.min():{fmt}}, {v.max():{fmt}}]"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stream", choices=("rcv1", "disjunction", "neuralnet", "linear", "shards"), default="rcv1")
    p.add_argument("--shards", nargs="*", default=[], help="with --stream shards: one per learner")
    p.add_argument("--k", type=int, default=2, help="learners (synthetic streams)")
    p.add_argument("--rounds", type=int, default=5000, help="T (shards: at most their rows)")
    p.add_argument("--seeds", type=int, default=10, help="seeds 0 .. N-1 (shards: one run)")
    p.add_argument("--hinge", action="store_true", help="the a9a runs' learner instead of the paper's")
    p.add_argument("--deltas", type=float, nargs="*", default=[], help="hand-picked Δ beside the defaults")
    p.add_argument("--period", type=int, default=1, help="b of the dynamic runs (the demo's: 6)")
    p.add_argument("--drift-prob", type=float, default=0.0002, help="disjunction, neuralnet (the demo's: 0.001)")
    p.add_argument("--partial", type=float, nargs="*", default=[], help="θ of partial-sync runs beside the defaults")
    p.add_argument("--partial-scales", type=float, nargs="*", default=[16.0],
                   help="F of the partial-sync runs: Δ auto with c = F times DELTA_SCALE")
    p.add_argument("--link", type=float, nargs=2, metavar=("ALPHA", "BETA"),
                   help="model each run's wall on a link of latency ALPHA s and BETA s a byte (netmodel; "
                        "the two-namespace link at 1 Gb/s: 7.6e-6 7.28e-9)")
    p.add_argument("--row-seconds", type=float, default=9.75e-6, help="with --link: compute per round and rank")
    p.add_argument("--sync-seconds", type=float, nargs=2, default=[160e-6, 30e-6], metavar=("PARTIAL", "FULL"),
                   help="with --link: CPU of one partial sync and of one full sync")
    args = p.parse_args()
    if args.link and args.stream == "shards":
        p.error("--link: the synthetic streams only (shards are simulated one configuration at a time)")
    seeds = range(1 if args.stream == "shards" else args.seeds)
    per_seed = []
    start = time.perf_counter()
    for seed in seeds:
        per_seed.append(one_seed(args, seed))
        print(f"seed {seed}: {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    k = len(args.shards) if args.stream == "shards" else args.k
    print(f"{args.stream}, k = {k}, T = {args.rounds}, {len(seeds)} seed(s), learner "
          f"{'hinge' if args.hinge else 'paper'}; medians [min, max] over seeds, ratios within a seed\n")
    print("| stream | k | protocol | online error | errors / static b=8 | bytes / static b=8 "
          "| messages / static b=8 | syncs |" + (" wall / static b=8 (model) |" if args.link else "")
          + " Δ | spread | θ |")
    print("|---|---:|---|---:|---:|---:|---:|---:|" + ("---:|" if args.link else "") + "---:|---:|---:|")
    for name in per_seed[0]:
        runs = [(s[name], s["static b=8"]) for s in per_seed]
        deltas = [r[4] for r, _ in runs if r[4] is not None]
        spreads = [r[5] for r, _ in runs if r[5] is not None]
        thetas = sorted({f"{r[6]:g}" for r, _ in runs if r[6] is not None})
        print(f"| {args.stream} | {k} | {name} | {np.median([r[0] / r[1] for r, _ in runs]):.4f} "
              f"| {spread([r[0] / s[0] for r, s in runs], '.4f')} | {spread([r[2] / s[2] for r, s in runs], '.3f')} "
              f"| {spread([r[3] / s[3] for r, s in runs], '.3f')} | {np.median([r[7] for r, _ in runs]):.0f} "
              + (f"| {spread([r[8] / s[8] for r, s in runs], '.3f')} " if args.link else "") +
              f"| {f'{np.median(deltas):.3g}' if deltas else ''} "
              f"| {f'{np.median(spreads):.4g}' if spreads else ''} | {', '.join(thetas)} |")


if __name__ == "__main__":
    main()
