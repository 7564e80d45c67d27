"""``mpisgd simulate``: k learners in one process through the protocol code of
``mpisgd train``, counting the messages and bytes of its ``--mode``: exactly
those of ``--mode sync``, and for the default mode those of the paper's
instant resolution (no waiting, so no timing to model).

    mpisgd simulate --synthetic disjunction --learners 512 --rounds 25000 \\
        --protocol dynamic --delta 3 --period 1 --out runs/sim
    mpisgd simulate SHARDS... --protocol static --period 8 --out runs/sim

Writes report.json (the simulator's result: online error and loss, the
paper's model messages, bytes and messages by category, protocol statistics,
the breakdown by cause and phase) and timeline.csv to --out.
"""

from mpisgd.commands.options import (add_learner_arguments, add_protocol_arguments, budget_line, delta_auto_line,
                                    learner_args, protocol_config)

HELP = "simulate k learners in one process (same protocol code and message counts as train)"

SYNTHETIC = ("disjunction", "neuralnet", "linear")


def add_arguments(parser):
    from mpisgd.simulator import ORDERS

    parser.add_argument("shards", nargs="*", metavar="SHARD",
                        help="HDF5 shards, one per learner (row t of shard l = round t of learner l)")
    g = parser.add_argument_group("built-in data (instead of shards)")
    g.add_argument("--synthetic", choices=SYNTHETIC, default=None, help="in-memory seeded stream")
    g.add_argument("--learners", "-k", type=int, default=512, help="k learners (synthetic)")
    g.add_argument("--rounds", type=int, default=None,
                   help="rounds T (default: 25000 synthetic; the longest shard)")
    g.add_argument("--features", type=int, default=None, help="n_features (default: the stream's)")
    g.add_argument("--seed", type=int, default=0, help="seed of the synthetic stream")
    g.add_argument("--drift-prob", type=float, default=0.0002,
                   help="probability of a target drift after each round (disjunction, neuralnet)")

    g = parser.add_argument_group("protocol (Kamp et al. 2014), as in train")
    add_protocol_arguments(g)
    g.add_argument("--max-period", type=int, default=0,
                   help="variant (dynamic, simulator only): after a quiet check double the check period, "
                   "up to this many rounds; after violations go back to --period (0: off)")
    g.add_argument("--network", choices=("shm", "10gbe", "ib100"), default=None,
                   help="also predict the run's wall time on this network from its exact message log "
                   "and the compute time per row measured here (docs/NETWORK.md; every check point is "
                   "then run one by one)")
    g.add_argument("--order", choices=ORDERS, default="learn-check",
                   help="within a round: check after learning (check points t = b, 2b, …, T) or "
                   "before it (t = 0, b, …, < T); the drift always acts between rounds")

    g = parser.add_argument_group("learner")
    add_learner_arguments(g)

    g = parser.add_argument_group("output")
    g.add_argument("--out", metavar="DIR", default="runs/simulate", help="directory for report.json, timeline.csv")
    g.add_argument("--timeline-every", type=int, default=100, metavar="N",
                   help="rounds between timeline rows (0: only the last)")
    g.add_argument("--drift-window", type=int, default=500,
                   help="rounds after a drift that count as the 'drift' phase of the breakdown")
    g.add_argument("--quiet", "-q", action="store_true", help="no configuration or summary")
    g.add_argument("--overwrite", action="store_true", help="replace the run already in --out")


def run(args):
    import json
    import os
    import sys
    import time

    from mpisgd.errors import MpisgdError
    from mpisgd.metrics import Timeline, write_report
    from mpisgd.report import simulate_report
    from mpisgd.rundir import refuse_to_replace
    from mpisgd.simulator import ShardSource, make_stream, simulate

    if args.synthetic and args.shards:
        raise MpisgdError("give either SHARD files or --synthetic, not both")
    if args.timeline_every < 0:
        raise MpisgdError(f"--timeline-every must be >= 0, got {args.timeline_every}")
    protocol = protocol_config(args)
    refuse_to_replace(args.out, args.overwrite)
    if args.synthetic:
        if args.learners < 1:
            raise MpisgdError(f"--learners must be >= 1, got {args.learners}")
        extra = {} if args.features is None else {"n_features": args.features}
        drift = args.drift_prob if args.synthetic != "linear" else None
        n = extra.pop("n_features", {"disjunction": 100, "neuralnet": 150, "linear": 1000}[args.synthetic])
        source = make_stream(args.synthetic, n, args.learners, args.seed, drift)
        rounds = 25000 if args.rounds is None else args.rounds
        data = {"synthetic": args.synthetic, "learners": args.learners, "features": n, "seed": args.seed,
                "drift_prob": drift}
    elif args.shards:
        source = ShardSource(args.shards)
        rounds = source.n_rounds if args.rounds is None else min(args.rounds, source.n_rounds)
        data = {"shards": args.shards}
    else:
        raise MpisgdError("no data: give SHARD files or --synthetic NAME")
    if rounds < 1:
        raise MpisgdError(f"--rounds must be >= 1, got {rounds}")
    config = {"data": data, "rounds": rounds, "protocol": protocol.as_dict(), "learner": learner_args(args),
              "order": args.order, "max_period": args.max_period, "mode": args.mode, "network": args.network,
              "out": args.out}
    if not args.quiet:
        print("mpisgd simulate: configuration " + json.dumps(config, sort_keys=True), flush=True)
    start = time.perf_counter()
    try:
        result = simulate(source, rounds, protocol, learner_args(args), args.order, args.drift_window,
                          args.timeline_every, max_period=args.max_period, network=args.network)
    finally:
        if isinstance(source, ShardSource):
            source.close()
    wall = time.perf_counter() - start
    os.makedirs(args.out, exist_ok=True)
    timeline = Timeline()
    for row in result["timeline"]:
        timeline.record(row[0], row[1], row[2], dict(zip(_categories(), row[4:])))
    timeline.write(os.path.join(args.out, "timeline.csv"))
    write_report(os.path.join(args.out, "report.json"), simulate_report(result, dict(config, argv=sys.argv[1:]), wall))
    if not args.quiet:
        ex = max(1, result["examples"])
        print(f"mpisgd simulate: online error {result['errors'] / ex:.4f} ({result['errors']} of {ex}), "
              f"model messages {result['protocol_messages']} (+{result['model_messages'] - result['protocol_messages']}"
              f" final), bytes {sum(result['bytes_sent'].values())}, {len(result['drifts'])} drifts, {wall:.2f}s")
        if result.get("delta_auto"):
            print("mpisgd simulate: " + delta_auto_line(result["delta_auto"]))
        if result.get("budget"):
            print("mpisgd simulate: " + budget_line(result["budget"]))
        if "network" in result:
            net = result["network"]
            print(f"mpisgd simulate: predicted on {net['network']}: wall {net['wall']:.3f}s, of which in MPI "
                  f"{net['mpi_max']:.3f}s (max over ranks), at {net['seconds_per_row'] * 1e9:.0f} ns per row")
        print(f"mpisgd simulate: wrote {args.out}/report.json, timeline.csv", flush=True)
    return 0


def _categories():
    from mpisgd.wire import CATEGORIES

    return CATEGORIES
