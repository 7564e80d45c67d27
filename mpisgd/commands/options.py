"""Options that ``train`` and ``simulate`` share, declared once, so that the
two speak the same language: the data, the protocol, the learner and the
outputs. ``tuning`` options are left out of ``--help`` (``--help-all`` lists
them); every option can also come from ``--config FILE`` (mpisgd.cli)."""

import argparse


def tuning(action):
    """Leave the option ``action`` out of --help; ``--help-all`` shows it (mpisgd.cli)."""
    action.full_help = action.help
    action.help = argparse.SUPPRESS
    return action


def positive_int(text):
    """A count that must be at least 1 (rounds, epochs, learners, ...)."""
    return _count(text, 1)


def nonnegative_int(text):
    """A count where 0 means none or off."""
    return _count(text, 0)


def _count(text, least):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be >= {least}, got {value}")
    return value


def delta_value(text):
    """--delta: a number or 'auto'."""
    from mpisgd.protocol import AUTO

    if text == AUTO:
        return AUTO
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or {AUTO!r}, got {text!r}") from None


def node_size_value(text):
    """--node-size: an integer or 'shared'."""
    from mpisgd.protocol import SHARED

    if text == SHARED:
        return SHARED
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or {SHARED!r}, got {text!r}") from None


def add_data_arguments(g):
    """The built-in streams (mpisgd.data.synthetic), instead of shards."""
    from mpisgd.data.synthetic import STREAMS

    g.add_argument("--synthetic", choices=tuple(STREAMS), default=None,
                   help="a seeded stream generated in memory, learner l's rows its own: Kamp et al.'s drifting "
                   "disjunction, a drifting neural network's labels, a sparse linear teacher, or text like RCV1's")
    g.add_argument("--seed", type=int, default=0, help="seed of the synthetic stream")
    tuning(g.add_argument("--features", type=positive_int, default=None,
                          help="n_features (default: the stream's)"))
    tuning(g.add_argument("--drift-prob", type=float, default=0.0002,
                          help="probability of a target drift after each round (disjunction, neuralnet)"))


def synthetic_stream(args, k):
    """The stream ``--synthetic`` names, for k learners."""
    from mpisgd.data.synthetic import STREAMS

    kwargs = {"n_learners": k, "seed": args.seed}
    if args.features is not None:
        kwargs["n_features"] = args.features
    if args.synthetic in ("disjunction", "neuralnet"):  # linear and rcv1: stationary
        kwargs["drift_prob"] = args.drift_prob
    return STREAMS[args.synthetic](**kwargs)


def add_protocol_arguments(g):
    from mpisgd.protocol import (AUGMENTATIONS, AUTO, COUNTER_COUNTS, COUNTER_RESETS, DELTA_SCALE, FDA_ESTIMATES,
                                 HALF_HEDGE_LEARNERS, HEDGES, MODES, PACE, PILOT_ROUNDS, PROTOCOLS, RDA_DELTA_SCALE)

    g.add_argument("--protocol", choices=PROTOCOLS, default="dynamic", help="synchronization protocol")
    g.add_argument("--period", "-b", type=int, default=1,
                   help="b: rounds between full syncs (static) or checks (dynamic)")
    g.add_argument("--delta", type=delta_value, default=None,
                   help="divergence threshold Δ (Δ0 with --delta-decay), or auto (dynamic's default): "
                   "Δ = c·η·√(η·G) (rda: c·η²·G), G the mean squared first step ℓ'(0,y)²(‖x‖²+1) over the "
                   "first --pilot-rounds rounds of every learner, which are not checked")
    tuning(g.add_argument("--delta-scale", type=float, default=None,
                          help=f"c of --delta auto: Δ is c times the geometric mean of η and η²·G (default "
                          f"{DELTA_SCALE}); with --rule rda, c times η²·G (default {RDA_DELTA_SCALE})"))
    tuning(g.add_argument("--pilot-rounds", type=int, default=PILOT_ROUNDS, help="P: the pilot of --delta auto"))
    g.add_argument("--budget", type=float, default=None,
                   help="F in (0, 1]: Δ steered at every full sync toward F times the bytes static b=8 would send")
    tuning(g.add_argument("--partial", type=float, default=None, metavar="THETA",
                          help="θ in (0, 1], dynamic: a full sync averages only the coordinates of largest "
                          "divergence, enough to leave every learner's ‖w − r‖² ≤ θΔ; the rest stay local "
                          "(default: off)"))
    tuning(g.add_argument("--hedge", choices=HEDGES, default=AUTO,
                          help="counter (Kamp et al.): a full sync once k violations have been counted since the "
                          "last one; half (the authors' DynamicHedgeSync): no counter, the balancing set doubles "
                          "at random and becomes a full sync when it would hold half the learners; auto: half "
                          f"with at most {HALF_HEDGE_LEARNERS} learners (every violation a full sync), else "
                          "counter"))
    tuning(g.add_argument("--delta-decay", action="store_true", help="Δ_t = Δ0/√t"))
    tuning(g.add_argument("--augmentation", choices=AUGMENTATIONS, default="random-one",
                          help="how the coordinator grows a balancing set"))
    tuning(g.add_argument("--counter-counts", choices=COUNTER_COUNTS, default="violators",
                          help="what adds to the violation counter"))
    tuning(g.add_argument("--counter-reset", choices=COUNTER_RESETS, default="any-full-sync",
                          help="which full syncs reset the violation counter"))
    tuning(g.add_argument("--counter-limit", type=float, default=1.0,
                          help="variant: the counter forces a full sync after counter_limit·k violations "
                          "(paper: 1)"))
    tuning(g.add_argument("--burst-fraction", type=float, default=0.0,
                          help="variant: a full sync when at least this share of learners violate at once "
                          "(0: off)"))
    tuning(g.add_argument("--protocol-seed", type=int, default=0, help="seed of the random augmentation"))
    g.add_argument("--mode", choices=MODES, default="async",
                   help="dynamic protocol: async (default) = only violations and their resolutions "
                   "communicate, nobody waits at a quiet check; sync = deterministic, each check "
                   "agreed on by a nonblocking Allreduce and settled one period later")
    tuning(g.add_argument("--pace", type=int, default=PACE, metavar="R",
                          help=f"async dynamic: every R rounds a nonblocking barrier, so that no learner runs "
                          f"more than 2R rounds ahead of another (default {PACE}; 0: off)"))
    g.add_argument("--theta", type=float, default=None,
                   help="fda: variance threshold Θ, a full sync when the estimated variance of the models "
                   "exceeds it")
    tuning(g.add_argument("--fda-directions", type=int, default=None,
                          help="fda: J, the last J reference changes each learner projects w − r on (default 1)"))
    tuning(g.add_argument("--fda-estimate", choices=FDA_ESTIMATES, default=None,
                          help="fda: linear = the upper bound from the projections (default); exact = the exact "
                          "variance, an oracle of the simulator only"))
    tuning(g.add_argument("--fda-lag", type=int, choices=(0, 1), default=None,
                          help="fda: 1 = each check is settled at the next check point, learning goes on "
                          "meanwhile (default); 0 = at once, learners wait for the small Allreduce"))
    g.add_argument("--node-size", type=node_size_value, default=None, metavar="{M,shared}",
                   help="hierarchical synchronization (static, or dynamic in --mode sync): the learners average "
                   "within nodes of M consecutive learners (ranks) every --node-period rounds and the node "
                   "leaders run the protocol between nodes; shared (train only) = the nodes of "
                   "MPI_Comm_split_type(SHARED). Default: flat")
    tuning(g.add_argument("--node-period", type=int, default=None,
                          help="b_node: rounds between node averages, dividing --period (default: the period b)"))


LEARNER = ("defaults (those of `mpisgd fit` and the estimators, mpisgd.defaults): Bottou's ASGD on the hinge "
           "loss, λ = 1e-4, schedule xu, its first step γ0 calibrated on the first 1,000 rows of learner 0 "
           "(rank 0). Kamp et al.'s online setting: --loss log --lam 0 --schedule constant --eta0 1 "
           "--no-average (as `mpisgd demo` runs)")


def add_learner_arguments(g):
    from mpisgd import defaults
    from mpisgd.kernels.losses import LOSSES
    from mpisgd.kernels.schedules import SCHEDULES

    g.add_argument("--loss", choices=sorted(LOSSES), default=defaults.CLASSIFIER_LOSS, help="loss ℓ(p, y)")
    g.add_argument("--lam", "--lambda", dest="lam", type=float, default=None,
                   help=f"L2 strength λ (default {defaults.ALPHA:g} with --rule sgd, else 0)")
    g.add_argument("--schedule", choices=sorted(SCHEDULES), default=defaults.SCHEDULE[defaults.L2_ALGORITHM],
                   help="step-size schedule")
    g.add_argument("--eta0", type=float, default=defaults.ETA0,
                   help="first step γ0 of the schedule (default: calibrated)")
    g.add_argument("--average", action="store_true", default=None,
                   help="ASGD: the final model averages each learner's steps (default with --rule sgd)")
    g.add_argument("--no-average", dest="average", action="store_false", help="the final model is the last step's")
    g.add_argument("--rule", choices=("sgd", "pa", "pa-i", "pa-ii", "rda"), default="sgd",
                   help="update rule: SGD, passive-aggressive (Crammer et al. 2006; loss hinge, lam 0) or "
                   "regularized dual averaging (Xiao 2010; lam 0, any loss)")
    tuning(g.add_argument("--loss-param", type=float, default=None, help="δ of huber / ε of epsilon_insensitive"))
    tuning(g.add_argument("--t0", type=float, default=0.0, help="t0 of the 'optimal' schedule"))
    tuning(g.add_argument("--power", type=float, default=0.5, help="power of 'invscaling'"))
    tuning(g.add_argument("--no-bias", dest="fit_intercept", action="store_false", help="no bias term"))
    tuning(g.add_argument("--regularize-bias", action="store_true", help="include b² in the regularizer"))
    tuning(g.add_argument("--aggressiveness", "-C", type=float, default=1.0, help="C of pa-i and pa-ii"))
    tuning(g.add_argument("--gamma", type=float, default=1.0, help="γ of rda (β_t = γ√t: the step is 1/(γ√t))"))
    tuning(g.add_argument("--l1", type=float, default=0.0, help="λ of rda: the L1 strength (w = soft(u, λ√t/γ))"))
    tuning(g.add_argument("--ties-are-not-errors", dest="ties_are_errors", action="store_false",
                          help="do not count a prediction p = 0 as an error"))
    g.add_argument("--compress", default="none", metavar="{none,fp16,q8}",
                   help="model messages and full syncs: exact (none), or u quantized with unbiased "
                   "stochastic rounding to float16 or 8-bit levels")


def add_output_arguments(g, out, files):
    g.add_argument("--out", metavar="DIR", default=out, help=f"directory for {files}")
    g.add_argument("--overwrite", action="store_true", help="replace the run already in --out")
    g.add_argument("--quiet", "-q", action="store_true", help="no configuration line, progress or summary")
    g.add_argument("--config", metavar="FILE", default=None,
                   help="a TOML file of options (key = an option's long name: poll-rows = 512); the command "
                   "line wins over it")
    tuning(g.add_argument("--timeline-every", type=nonnegative_int, default=100, metavar="N",
                          help="rounds between timeline rows (0: only the last)"))


def protocol_config(args):
    from mpisgd.protocol import ProtocolConfig

    return ProtocolConfig(
        name=args.protocol, mode=args.mode, period=args.period, delta=args.delta, delta_decay=args.delta_decay,
        delta_scale=args.delta_scale, pilot_rounds=args.pilot_rounds, budget=args.budget, partial=args.partial,
        hedge=args.hedge,
        augmentation=args.augmentation, counter_counts=args.counter_counts,
        counter_reset=args.counter_reset, counter_limit=args.counter_limit, burst_fraction=args.burst_fraction,
        seed=args.protocol_seed, theta=args.theta, fda_directions=args.fda_directions,
        fda_estimate=args.fda_estimate, fda_lag=args.fda_lag, node_size=args.node_size,
        node_period=args.node_period, pace=args.pace,
    )


def delta_auto_line(auto):
    """The summary line of --delta auto (report.json's delta_auto)."""
    spread = "" if auto.get("spread") is None else f", spread n·rows/non-zeros {auto['spread']:.4g}"
    partial = "" if auto.get("partial") is None else f"; partial syncs θ = {auto['partial']:g}"
    return (f"delta auto: Δ = {auto['formula']} = {auto['delta']:.6g} "
            f"(G over the first {auto['pilot_rounds']} rounds, {auto['pilot_rows']} rows{spread}){partial}")


def budget_line(budget):
    """The summary line of --budget (report.json's budget: the last steering step)."""
    return (f"budget F = {budget['F']:g}: Δ steered at {budget['steps']} full syncs, now {budget['delta']:.6g} "
            f"({budget['spent']} bytes sent by its last)")


def learner_args(args):
    """Keyword arguments of ``mpisgd.learners.OnlineLearners``, the defaults
    resolved (mpisgd.defaults: λ and averaging for --rule sgd). ``eta0`` is
    None where it is to be calibrated (``calibrate_eta0``); a rule or schedule
    that does not step by γ0 gets 1.0, unused."""
    from mpisgd import defaults
    from mpisgd.errors import MpisgdError
    from mpisgd.learners import OnlineLearners
    from mpisgd.protocol import SILENT
    from mpisgd.wire import check_compress

    check_compress(args.compress)
    if args.compress != "none" and args.protocol in SILENT:
        raise MpisgdError(f"compress: protocol {args.protocol!r} sends no models; use --compress none")
    sgd = args.rule == "sgd"
    steps_by_eta0 = sgd and args.schedule != "optimal"  # optimal: 1/(λ(t0 + t))
    learner = {"loss": args.loss, "loss_param": args.loss_param, "schedule": args.schedule,
            "eta0": args.eta0 if args.eta0 is not None or steps_by_eta0 else 1.0,
            "lam": args.lam if args.lam is not None else defaults.ALPHA if sgd else 0.0,
            "t0": args.t0, "power": args.power,
            "fit_intercept": args.fit_intercept, "regularize_bias": args.regularize_bias,
            "average": args.average if args.average is not None else sgd and defaults.L2_ALGORITHM == "asgd",
            "ties_are_errors": args.ties_are_errors,
            "rule": args.rule, "aggressiveness": args.aggressiveness, "gamma": args.gamma, "l1": args.l1,
            "compress": args.compress}
    OnlineLearners(1, 1, **{**learner, "eta0": learner["eta0"] or 1.0})  # their own checks, before any work
    return learner


def calibrate_eta0(learner, source):
    """``learner`` with γ0 calibrated, if it is None, on the first rows of the
    RowSource ``source`` (learner 0's: rank 0's under ``train``), which is
    closed after. Returns (learner, the calibration's record for report.json
    or None)."""
    if learner["eta0"] is not None:
        return learner, None
    from mpisgd.calibrate import calibrate_online

    try:
        eta0, record = calibrate_online(source, learner)
    finally:
        source.close()
    return {**learner, "eta0": eta0}, record


def eta0_line(record):
    """The console line of a calibrated γ0 (report.json's eta0_calibration)."""
    return (f"eta0 {record['eta0']:g}, calibrated on the first {record['rows']} rows of learner 0 "
            f"({len(record['tried'])} steps tried)")


def recorded(args):
    """Every option's value, given or default, for report.json."""
    return {key: value for key, value in sorted(vars(args).items()) if not key.startswith("_") and key != "command"}
