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

In the simulator, every configuration of one seed on the same rows; the
protocol's options are ProtocolConfig's defaults (those of `mpisgd simulate`)
but for the name, b and Δ. The learner is Kamp et al.'s (log loss, η = 1, no
regularization, no averaging), or with --hinge that of docs/RESULTS.md's a9a
runs (hinge, λ = 1e-4, Bottou's schedule, γ0 = 1, averaged). For each: the
median over seeds [min, max] of the online error, and of the errors, bytes and
MPI messages divided by static b=8's on the same seed; the Δ --delta auto chose,
the rows' spread its pilot measured and the θ it chose.
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
        results = run_many(stream, args.rounds, [Simulation(args.k, stream.n_features, args.rounds, c, learner)
                                                 for c in configs])
    return {name: (r["errors"], r["examples"], sum(r["bytes_sent"].values()), sum(r["messages_sent"].values()),
                   (r["delta_auto"] or {}).get("delta"), (r["delta_auto"] or {}).get("spread"),
                   (r["delta_auto"] or {}).get("partial")) for name, r in zip(names, results)}


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
    args = p.parse_args()
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
          "| messages / static b=8 | Δ | spread | θ |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in per_seed[0]:
        runs = [(s[name], s["static b=8"]) for s in per_seed]
        deltas = [r[4] for r, _ in runs if r[4] is not None]
        spreads = [r[5] for r, _ in runs if r[5] is not None]
        thetas = sorted({f"{r[6]:g}" for r, _ in runs if r[6] is not None})
        print(f"| {args.stream} | {k} | {name} | {np.median([r[0] / r[1] for r, _ in runs]):.4f} "
              f"| {spread([r[0] / s[0] for r, s in runs], '.4f')} | {spread([r[2] / s[2] for r, s in runs], '.3f')} "
              f"| {spread([r[3] / s[3] for r, s in runs], '.3f')} | {f'{np.median(deltas):.3g}' if deltas else ''} "
              f"| {f'{np.median(spreads):.4g}' if spreads else ''} | {', '.join(thetas)} |")


if __name__ == "__main__":
    main()
