"""``mpisgd simulate``: k learners in one process through the protocol code of
``mpisgd train``, counting the messages and bytes of its ``--mode``: exactly
those of ``--mode sync``; in the default mode a resolution takes effect
``--async-delay`` rounds after its check, as ``train``'s resolutions arrive
late (``mpisgd.protocol.checks.DelayedCheckPoints``; 0: the paper's instant
resolution).

    mpisgd simulate --synthetic disjunction --learners 512 --rounds 25000 \\
        --protocol dynamic --delta 3 --period 1 --out runs/sim
    mpisgd simulate SHARDS... --protocol static --period 8 --out runs/sim

Writes report.json (the simulator's result: online error and loss, the
paper's model messages, bytes and messages by category, protocol statistics,
the breakdown by cause and phase) and timeline.csv to --out.
"""

from mpisgd.commands.options import (LEARNER, add_data_arguments, add_learner_arguments, add_output_arguments,
                                    add_protocol_arguments, budget_line, calibrate_eta0, delta_auto_line, eta0_line,
                                    learner_args, nonnegative_int, positive_int, protocol_config, recorded,
                                    tuning)

HELP = "simulate k learners in one process (same protocol code and message counts as train)"
USAGE = "%(prog)s [SHARD ...] [--synthetic NAME] [options]  (--help, --help-all)"


def add_arguments(parser):
    from mpisgd.simulator import ASYNC_DELAY, ORDERS

    parser.add_argument("shards", nargs="*", metavar="SHARD",
                        help="HDF5 shards, one per learner (row t of shard l = round t of learner l)")
    g = parser.add_argument_group("data")
    add_data_arguments(g)
    g.add_argument("--learners", "-k", type=positive_int, default=512, help="k learners (synthetic)")
    g.add_argument("--rounds", type=positive_int, default=None,
                   help="rounds T (default: 25000 synthetic; the longest shard)")

    g = parser.add_argument_group("protocol (Kamp et al. 2014), as in train")
    add_protocol_arguments(g)
    tuning(g.add_argument("--max-period", type=int, default=0,
                          help="variant (dynamic, simulator only): after a quiet check double the check period, "
                          "up to this many rounds; after violations go back to --period (0: off)"))
    tuning(g.add_argument("--async-delay", type=nonnegative_int, default=None, metavar="ROUNDS",
                          help="default (async) mode: a resolution takes effect this many rounds after the check "
                          f"that began it, the violators learning on meanwhile (default {ASYNC_DELAY}, train's "
                          "default mode on the demo, docs/RUNNING.md; 0: the paper's instant resolution)"))
    g.add_argument("--network", choices=("shm", "10gbe", "ib100"), default=None,
                   help="also predict the run's wall time on this network from its exact message log "
                   "and the compute time per row measured here (every check point is then run one by one)")
    tuning(g.add_argument("--order", choices=ORDERS, default="learn-check",
                          help="within a round: check after learning (check points t = b, 2b, …, T) or "
                          "before it (t = 0, b, …, < T); the drift always acts between rounds"))

    add_learner_arguments(parser.add_argument_group("learner", LEARNER))

    g = parser.add_argument_group("output")
    add_output_arguments(g, "runs/simulate", "report.json (every option's value), timeline.csv")
    tuning(g.add_argument("--drift-window", type=int, default=500,
                          help="rounds after a drift that count as the 'drift' phase of the breakdown"))


def _configure(args):
    """(the protocol, the learner's options) from the arguments; a mistake in
    them is a UsageError."""
    from mpisgd.errors import MpisgdError, UsageError
    from mpisgd.simulator import ASYNC_DELAY

    try:
        if args.synthetic and args.shards:
            raise MpisgdError("give either SHARD files or --synthetic, not both")
        if not args.synthetic and not args.shards:
            raise MpisgdError("no data: give SHARD files (mpisgd prep makes them) or --synthetic NAME")
        protocol = protocol_config(args)
        delayed = protocol.asynchronous(2)  # the default mode's resolutions (not sync mode, not static, fda)
        if args.async_delay is None:
            args.async_delay = ASYNC_DELAY if delayed else 0
        elif not delayed:
            raise MpisgdError(f"--async-delay {args.async_delay}: only the dynamic protocol's default (async) mode "
                              "resolves late")
        return protocol, learner_args(args)
    except MpisgdError as exc:
        raise UsageError(str(exc)) from None


def _first_rows(args, source, rounds, central):
    """The rows γ0 is calibrated on, those of train's rank 0: learner 0's
    (``central``: every learner's, round-major), in blocks that hold the sample."""
    from mpisgd.calibrate import SAMPLE_SIZE
    from mpisgd.data import rows

    learners = range(source.n_learners) if central else [0]
    block = -(-SAMPLE_SIZE // len(learners))
    if args.synthetic:
        parts = [rows.StreamSource(source, l, rounds, block) for l in learners]
    else:
        parts = [rows.ShardSource([args.shards[l]], block) for l in learners]
    return parts[0] if len(parts) == 1 else rows.RoundMajorSource(parts, block)


def run(args):
    import math
    import os
    import sys
    import time

    from mpisgd.commands.options import synthetic_stream
    from mpisgd.errors import MpisgdError
    from mpisgd.metrics import Timeline, write_report
    from mpisgd.report import simulate_report
    from mpisgd.rundir import refuse_to_replace
    from mpisgd.simulator import ShardSource, simulate

    protocol, learner = _configure(args)
    refuse_to_replace(args.out, args.overwrite)
    if args.synthetic:
        source = synthetic_stream(args, args.learners)
        rounds = 25000 if args.rounds is None else args.rounds
        data = {"synthetic": args.synthetic, "learners": args.learners, "features": source.n_features,
                "seed": args.seed, "drift_prob": source.drift_prob}
    else:
        source = ShardSource(args.shards)
        rounds = source.n_rounds if args.rounds is None else min(args.rounds, source.n_rounds)
        data = {"shards": args.shards}
        if rounds < 1:
            raise MpisgdError(f"the shards have no rows: {', '.join(args.shards)}")
    learner, calibration = calibrate_eta0(learner, _first_rows(args, source, rounds, protocol.central))
    config = {"data": data, "rounds": rounds, "protocol": protocol.as_dict(), "learner": learner,
              "order": args.order, "max_period": args.max_period, "mode": args.mode, "async_delay": args.async_delay,
              "network": args.network,
              "out": args.out, "options": recorded(args), "eta0_calibration": calibration}
    if not args.quiet:
        what = f"--synthetic {args.synthetic}" if args.synthetic else f"{len(args.shards)} shards"
        print(f"mpisgd simulate: {source.n_learners} learners, {what}, {rounds} rounds; {protocol.name} "
              f"b={protocol.period}; {learner['loss']} loss lambda={learner['lam']:g}", flush=True)
        if calibration is not None:
            print(f"mpisgd simulate: {eta0_line(calibration)}", flush=True)
    start = time.perf_counter()
    try:
        result = simulate(source, rounds, protocol, learner, args.order, args.drift_window,
                          args.timeline_every, max_period=args.max_period, network=args.network,
                          async_delay=args.async_delay)
    finally:
        if isinstance(source, ShardSource):
            source.close()
    wall = time.perf_counter() - start
    os.makedirs(args.out, exist_ok=True)
    timeline = Timeline()
    clock = result["network"]["timeline_seconds"] if "network" in result else [math.nan] * len(result["timeline"])
    for row, seconds in zip(result["timeline"], clock):  # the clock: as --network predicts it
        timeline.record(row[0], row[1], row[2], dict(zip(_categories(), row[4:])), seconds)
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
        print(f"mpisgd simulate: wrote {args.out}/report.json (every option's value), timeline.csv", flush=True)
    return 0


def _categories():
    from mpisgd.wire import CATEGORIES

    return CATEGORIES
