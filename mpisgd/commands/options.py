"""Options that ``train`` and ``simulate`` share, so that the two speak the
same language: the protocol and the learner."""


def delta_value(text):
    """--delta: a number or 'auto'."""
    import argparse

    from mpisgd.protocol import AUTO

    if text == AUTO:
        return AUTO
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or {AUTO!r}, got {text!r}") from None


def node_size_value(text):
    """--node-size: an integer or 'shared'."""
    import argparse

    from mpisgd.protocol import SHARED

    if text == SHARED:
        return SHARED
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or {SHARED!r}, got {text!r}") from None


def add_protocol_arguments(g):
    from mpisgd.protocol import (AUGMENTATIONS, AUTO, COUNTER_COUNTS, COUNTER_RESETS, DELTA_SCALE, FDA_ESTIMATES,
                                 HALF_HEDGE_LEARNERS, HEDGES, MODES, PACE, PILOT_ROUNDS, PROTOCOLS, RDA_DELTA_SCALE)

    g.add_argument("--protocol", choices=PROTOCOLS, default="dynamic", help="synchronization protocol")
    g.add_argument("--period", "-b", type=int, default=1,
                   help="b: rounds between full syncs (static) or checks (dynamic)")
    g.add_argument("--delta", type=delta_value, default="auto",
                   help="divergence threshold Δ (Δ0 with --delta-decay), or auto (default): "
                   "Δ = c·η·√(η·G) (rda: c·η²·G), G the mean squared first step ℓ'(0,y)²(‖x‖²+1) over the "
                   "first --pilot-rounds rounds of every learner, which are not checked (docs/ALGORITHMS.md §4.4)")
    g.add_argument("--delta-scale", type=float, default=None,
                   help=f"c of --delta auto: Δ is c times the geometric mean of η and η²·G (default {DELTA_SCALE}); "
                   f"with --rule rda, c times η²·G (default {RDA_DELTA_SCALE})")
    g.add_argument("--pilot-rounds", type=int, default=PILOT_ROUNDS, help="P: the pilot of --delta auto")
    g.add_argument("--budget", type=float, default=None,
                   help="F in (0, 1]: Δ steered at every full sync toward F times the bytes static b=8 would "
                   "send (docs/ALGORITHMS.md §4.6)")
    g.add_argument("--hedge", choices=HEDGES, default=AUTO,
                   help="counter (Kamp et al.): a full sync once k violations have been counted since the "
                   "last one; half (the authors' DynamicHedgeSync): no counter, the balancing set doubles "
                   "at random and becomes a full sync when it would hold half the learners; auto: half with "
                   f"at most {HALF_HEDGE_LEARNERS} learners (every violation a full sync), else counter "
                   "(docs/ALGORITHMS.md §4.5)")
    g.add_argument("--delta-decay", action="store_true", help="Δ_t = Δ0/√t")
    g.add_argument("--augmentation", choices=AUGMENTATIONS, default="random-one",
                   help="how the coordinator grows a balancing set")
    g.add_argument("--counter-counts", choices=COUNTER_COUNTS, default="violators",
                   help="what adds to the violation counter")
    g.add_argument("--counter-reset", choices=COUNTER_RESETS, default="any-full-sync",
                   help="which full syncs reset the violation counter")
    g.add_argument("--counter-limit", type=float, default=1.0,
                   help="variant: the counter forces a full sync after counter_limit·k violations (paper: 1)")
    g.add_argument("--burst-fraction", type=float, default=0.0,
                   help="variant: a full sync when at least this share of learners violate at once (0: off)")
    g.add_argument("--protocol-seed", type=int, default=0, help="seed of the random augmentation")
    g.add_argument("--mode", choices=MODES, default="async",
                   help="dynamic protocol: async (default) = only violations and their resolutions "
                   "communicate, nobody waits at a quiet check; sync = deterministic, each check "
                   "agreed on by a nonblocking Allreduce and settled one period later (docs/RUNNING.md)")
    g.add_argument("--pace", type=int, default=PACE, metavar="R",
                   help=f"async dynamic: every R rounds a nonblocking barrier, so that no learner runs more than "
                   f"2R rounds ahead of another (default {PACE}; 0: off; docs/RUNNING.md, \"Pacing\")")
    g.add_argument("--theta", type=float, default=None,
                   help="fda: variance threshold Θ, a full sync when the estimated variance of the models "
                   "exceeds it (docs/ALGORITHMS.md §8)")
    g.add_argument("--fda-directions", type=int, default=None,
                   help="fda: J, the last J reference changes each learner projects w − r on (default 1)")
    g.add_argument("--fda-estimate", choices=FDA_ESTIMATES, default=None,
                   help="fda: linear = the upper bound from the projections (default); exact = the exact "
                   "variance, an oracle of the simulator only")
    g.add_argument("--fda-lag", type=int, choices=(0, 1), default=None,
                   help="fda: 1 = each check is settled at the next check point, learning goes on meanwhile "
                   "(default); 0 = at once, learners wait for the small Allreduce")
    g.add_argument("--node-size", type=node_size_value, default=None, metavar="{M,shared}",
                   help="hierarchical synchronization (static, or dynamic in --mode sync): the learners average "
                   "within nodes of M consecutive learners (ranks) every --node-period rounds and the node "
                   "leaders run the protocol between nodes; shared (train only) = the nodes of "
                   "MPI_Comm_split_type(SHARED). Default: flat (docs/ALGORITHMS.md §6)")
    g.add_argument("--node-period", type=int, default=None,
                   help="b_node: rounds between node averages, dividing --period (default: the period b)")


def add_learner_arguments(g):
    from mpisgd.kernels.losses import LOSSES
    from mpisgd.kernels.schedules import SCHEDULES

    g.add_argument("--loss", choices=sorted(LOSSES), default="log", help="loss ℓ(p, y)")
    g.add_argument("--loss-param", type=float, default=None, help="δ of huber / ε of epsilon_insensitive")
    g.add_argument("--schedule", choices=sorted(SCHEDULES), default="constant", help="step-size schedule")
    g.add_argument("--eta0", type=float, default=1.0, help="step size η (γ0 of the schedule)")
    g.add_argument("--lam", "--lambda", dest="lam", type=float, default=0.0, help="L2 strength λ")
    g.add_argument("--t0", type=float, default=0.0, help="t0 of the 'optimal' schedule")
    g.add_argument("--power", type=float, default=0.5, help="power of 'invscaling'")
    g.add_argument("--no-bias", dest="fit_intercept", action="store_false", help="no bias term")
    g.add_argument("--regularize-bias", action="store_true", help="include b² in the regularizer")
    g.add_argument("--average", action="store_true", help="ASGD: the final model averages each learner's steps")
    g.add_argument("--rule", choices=("sgd", "pa", "pa-i", "pa-ii", "rda"), default="sgd",
                   help="update rule: SGD, passive-aggressive (Crammer et al. 2006; loss hinge, lam 0) or "
                   "regularized dual averaging (Xiao 2010; lam 0, any loss)")
    g.add_argument("--aggressiveness", "-C", type=float, default=1.0, help="C of pa-i and pa-ii")
    g.add_argument("--gamma", type=float, default=1.0, help="γ of rda (β_t = γ√t: the step is 1/(γ√t))")
    g.add_argument("--l1", type=float, default=0.0, help="λ of rda: the L1 strength (w = soft(u, λ√t/γ))")
    g.add_argument("--ties-are-not-errors", dest="ties_are_errors", action="store_false",
                   help="do not count a prediction p = 0 as an error")
    g.add_argument("--compress", default="none", metavar="{none,fp16,q8}",
                   help="model messages and full syncs: exact (none), or u quantized with unbiased "
                   "stochastic rounding to float16 or 8-bit levels (docs/WIRE.md)")


def protocol_config(args):
    from mpisgd.protocol import AUTO, REGISTRY, ProtocolConfig

    given = dict(
        name=args.protocol, mode=args.mode, period=args.period, delta=args.delta, delta_decay=args.delta_decay,
        delta_scale=args.delta_scale, pilot_rounds=args.pilot_rounds, budget=args.budget, hedge=args.hedge,
        augmentation=args.augmentation, counter_counts=args.counter_counts,
        counter_reset=args.counter_reset, counter_limit=args.counter_limit, burst_fraction=args.burst_fraction,
        seed=args.protocol_seed, theta=args.theta, fda_directions=args.fda_directions,
        fda_estimate=args.fda_estimate, fda_lag=args.fda_lag, node_size=args.node_size,
        node_period=args.node_period, pace=args.pace,
    )
    if args.delta == AUTO and "delta" not in REGISTRY[args.protocol].parameters:
        del given["delta"]  # --delta's default (auto) is the dynamic protocol's; a protocol without Δ keeps its own
    return ProtocolConfig(**given)


def delta_auto_line(auto):
    """The summary line of --delta auto (report.json's delta_auto)."""
    return (f"delta auto: Δ = {auto['formula']} = {auto['delta']:.6g} "
            f"(G over the first {auto['pilot_rounds']} rounds, {auto['pilot_rows']} rows)")


def budget_line(budget):
    """The summary line of --budget (report.json's budget: the last steering step)."""
    return (f"budget F = {budget['F']:g}: Δ steered at {budget['steps']} full syncs, now {budget['delta']:.6g} "
            f"({budget['spent']} bytes sent by its last)")


def learner_args(args):
    """Keyword arguments of ``mpisgd.learners.OnlineLearners``."""
    from mpisgd.errors import MpisgdError
    from mpisgd.protocol import SILENT
    from mpisgd.wire import check_compress

    check_compress(args.compress)
    if args.compress != "none" and args.protocol in SILENT:
        raise MpisgdError(f"compress: protocol {args.protocol!r} sends no models; use --compress none")
    return {"loss": args.loss, "loss_param": args.loss_param, "schedule": args.schedule,
            "eta0": args.eta0, "lam": args.lam, "t0": args.t0, "power": args.power,
            "fit_intercept": args.fit_intercept, "regularize_bias": args.regularize_bias,
            "average": args.average, "ties_are_errors": args.ties_are_errors,
            "rule": args.rule, "aggressiveness": args.aggressiveness, "gamma": args.gamma, "l1": args.l1,
            "compress": args.compress}
