"""``mpisgd train``: distributed online learning, one learner per MPI rank.

    mpiexec -n K python -m mpi4py -m mpisgd train SHARDS... --protocol dynamic ...
    mpiexec -n K python -m mpi4py -m mpisgd train --synthetic disjunction --rounds T ...

Rank 0 prints a line about the run, shows progress (a bar on a terminal,
periodic log lines otherwise; nothing with --quiet), and writes model.h5,
report.json (with every option's value) and timeline.csv to --out. With
--checkpoint-every or --checkpoint-seconds every rank checkpoints to
--out/checkpoints; --resume DIR goes on from the newest complete checkpoint
there (docs/RUNNING.md, "Checkpoint and resume"). Where --eta0 is not given,
rank 0 calibrates γ0 on its first rows (mpisgd.calibrate) and every rank
takes it.
"""

from mpisgd.commands.options import (LEARNER, add_data_arguments, add_learner_arguments, add_output_arguments,
                                    add_protocol_arguments, learner_args, nonnegative_int, positive_int,
                                    protocol_config, tuning)

HELP = "distributed online learning over MPI (one learner per rank; rank 0 coordinates)"
USAGE = "%(prog)s [SHARD ...] [--synthetic NAME] [options]  (--help, --help-all)"


def add_arguments(parser):
    parser.add_argument("shards", nargs="*", metavar="SHARD",
                        help="HDF5 shards (mpisgd prep) or their folder; each rank streams a contiguous block of them")
    g = parser.add_argument_group("data")
    g.add_argument("--epochs", type=positive_int, default=1, help="passes over the shards")
    g.add_argument("--test", metavar="PATH", default=None,
                   help="held-out set (shards, a shard directory or LIBSVM) rank 0 scores the final model on")
    add_data_arguments(g)
    g.add_argument("--rounds", type=positive_int, default=10000, help="rounds T of the synthetic stream")
    tuning(g.add_argument("--learners", type=positive_int, default=None,
                          help="central only: number of streams (default: the number of ranks)"))
    tuning(g.add_argument("--block-rows", type=positive_int, default=4096, help="rows read or generated per block"))
    tuning(g.add_argument("--resident-mb", type=nonnegative_int, default=1024, metavar="MB",
                          help="with --epochs > 1: MiB of its shards a rank keeps memory-mapped between epochs, "
                          "so that later epochs read pages already mapped (default 1024; 0: drop the map "
                          "behind every pass, a resident set of a few blocks)"))

    g = parser.add_argument_group("protocol (Kamp et al. 2014)")
    add_protocol_arguments(g)
    tuning(g.add_argument("--poll-rows", type=int, default=256,
                          help="async: rounds between polls for rank 0's messages (where rows are cheap a "
                          "multiple of it, at least ~200 µs of learning)"))
    tuning(g.add_argument("--poll-seconds", type=float, default=0.01,
                          help="async: and at most about this much of a rank's learning between its polls (a "
                          "slow rank's rounds are counted against its measured pace)"))
    tuning(g.add_argument("--staleness", type=int, default=0, metavar="ROUNDS",
                          help="async: rounds a violator (or a member of a resolution) learns on before it waits "
                          "for the result (default 0: it waits at once, as in the paper's protocol)"))

    add_learner_arguments(parser.add_argument_group("learner", LEARNER))

    add_output_arguments(parser.add_argument_group("output"), "runs/train",
                         "model.h5, report.json (every option's value), timeline.csv")

    g = parser.add_argument_group("checkpoint and resume (async mode: at a consistent cut)")
    g.add_argument("--checkpoint-every", type=nonnegative_int, default=0, metavar="ROUNDS",
                   help="checkpoint to OUT/checkpoints every ROUNDS rounds (default 0: off)")
    g.add_argument("--checkpoint-seconds", type=float, default=0.0, metavar="S",
                   help="checkpoint when S seconds have passed since the last one, checked every "
                        "--poll-rows rounds (default 0: off)")
    g.add_argument("--resume", metavar="DIR", default=None,
                   help="go on from the newest intact checkpoint in DIR (a run's --out, its "
                        "checkpoints/ or one round-<t>/ directory); the configuration must be the same, the "
                        "number of ranks may differ (the rows left are dealt again)")
    tuning(g.add_argument("--stop-grace", type=float, default=None, metavar="S",
                          help="with checkpoints, after SIGTERM: end at once, without a checkpoint, if the run "
                          "has not stopped within S seconds (a rank stuck or gone; default 120)"))


def _sources(args, size, rank, central):
    """This rank's RowSource (``central``, ``ProtocolConfig.central``: the
    round-major stream of every learner)."""
    from mpisgd.commands.options import synthetic_stream
    from mpisgd.data.partition import shards_for_rank
    from mpisgd.data.rows import RoundMajorSource, ShardSource, StreamSource

    if args.synthetic:
        k = args.learners if (central and args.learners) else size
        stream = synthetic_stream(args, k)
        if central:
            return RoundMajorSource([StreamSource(stream, l, args.rounds, args.block_rows) for l in range(k)])
        return StreamSource(stream, rank, args.rounds, args.block_rows)
    if central:  # one stream per shard on rank 0: the budget shared among them
        each = args.resident_mb // len(args.shards)
        return RoundMajorSource([ShardSource([p] * args.epochs, args.block_rows, each) for p in args.shards])
    mine = shards_for_rank(len(args.shards), size, rank)
    return ShardSource([args.shards[i] for i in mine] * args.epochs, args.block_rows, args.resident_mb)


def _config(args):
    """The run's configuration from the arguments; any mistake in them is a
    UsageError (every rank finds it: rank 0 alone reports it)."""
    import math

    from mpisgd.errors import MpisgdError, UsageError
    from mpisgd.runner import RunConfig

    try:
        if args.synthetic and args.shards:
            raise MpisgdError("give either SHARD files or --synthetic, not both")
        if not args.synthetic and not args.shards:
            raise MpisgdError("no data: give SHARD files (mpisgd prep makes them) or --synthetic NAME")
        if args.synthetic and args.epochs != 1:
            raise MpisgdError("--epochs counts passes over shards; a synthetic stream runs --rounds rounds")
        if not args.checkpoint_seconds >= 0:
            raise MpisgdError(f"--checkpoint-seconds must be >= 0, got {args.checkpoint_seconds}")
        if args.stop_grace is not None and not (math.isfinite(args.stop_grace) and args.stop_grace > 0):
            raise MpisgdError(f"--stop-grace must be a number of seconds > 0, got {args.stop_grace}")
        return RunConfig(protocol=protocol_config(args), learner=learner_args(args),
                         timeline_every=args.timeline_every, poll_rows=args.poll_rows,
                         poll_seconds=args.poll_seconds, staleness=args.staleness)
    except UsageError:
        raise
    except MpisgdError as exc:
        raise UsageError(str(exc)) from None


class Progress:
    """Rank 0's progress: a bar on a terminal, a log line every 10 % otherwise."""

    def __init__(self, stream):
        import time

        self.stream = stream
        self.tty = stream.isatty()
        self.start = time.perf_counter()
        self.next_log = 0.1
        self.last_draw = 0.0

    def __call__(self, t, T):
        import time

        now = time.perf_counter()
        frac = t / T if T else 1.0
        if self.tty:
            if now - self.last_draw < 0.1 and t < T:
                return
            self.last_draw = now
            width = 30
            bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
            self.stream.write(f"\r[{bar}] {t}/{T} rounds {now - self.start:6.1f}s")
            if t >= T:
                self.stream.write("\n")
            self.stream.flush()
        elif frac >= self.next_log or t >= T:
            self.stream.write(f"mpisgd train: {t}/{T} rounds ({100 * frac:.0f} %), {now - self.start:.1f}s\n")
            self.stream.flush()
            while self.next_log <= frac:
                self.next_log += 0.1


def summary_lines(report):
    """Short human summary of a report."""
    on, c, p = report["online"], report["communication"], report["protocol"]
    return [
        f"online error {on['error_rate']:.4f} ({on['errors']} of {on['examples']}), "
        f"mean loss {on['mean_loss']:.4f}",
        f"messages {c['total_messages']} ({c['model_messages_paper']['total']} model messages as the paper "
        f"counts), bytes {c['total_bytes']}",
        f"full syncs {p['full_syncs']['total']}, violations {p['violations']}, balancings {p['balancings']}",
        *([f"held-out error {report['heldout']['error']:.4f}, mean loss {report['heldout']['loss']:.4f} "
           f"({report['heldout']['examples']} examples of {report['heldout']['data']})"]
          if "error" in report.get("heldout", {}) else []),
        f"time: wall {report['time']['wall']:.2f}s, compute {report['time']['compute']['max']:.2f}s, "
        f"communication {report['time']['communication']['max']:.2f}s, io {report['time']['io']['max']:.2f}s "
        "(max over ranks)",
    ]


def configuration_line(size, data, config):
    """The console's one line about the run (report.json holds all of it)."""
    p, learner = config.protocol, config.learner
    what = (f"--synthetic {data['synthetic']}, {data['rounds']} rounds" if "synthetic" in data
            else f"{len(data['shards'])} shards x {data['epochs']} epochs")
    protocol = p.name + ("" if p.protocol.silent else f" b={p.period}") + \
        (f" delta={p.delta} {config.mode} mode" if p.resolving else "")
    step = (f"rule {learner['rule']}" if learner["rule"] != "sgd" else
            f"{learner['schedule']} eta0={learner['eta0']:g}" + (" averaged" if learner["average"] else ""))
    return f"{size} ranks, {what}; {protocol}; {learner['loss']} loss lambda={learner['lam']:g} {step}"


def run(args):
    from mpi4py import MPI

    from mpisgd import rundir

    if MPI.COMM_WORLD.Get_rank() != 0:
        return _run(args)
    with rundir.RunLock(args.out):  # rank 0 holds --out for the run's life
        return _run(args)


def _run(args):
    import dataclasses
    import sys

    from mpi4py import MPI

    from mpisgd import rundir
    from mpisgd.commands.options import budget_line, calibrate_eta0, delta_auto_line, eta0_line, recorded
    from mpisgd.errors import MpisgdError, UsageError
    from mpisgd.runner import train

    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    config = _config(args)
    central = config.protocol.central
    if args.shards:  # files and folders to one checked shard set, on every rank
        from mpisgd.data.shardset import resolve_shards

        try:
            args.shards = resolve_shards(args.shards, comm=comm)
        except MpisgdError as exc:  # rank 0's error, on every rank: printed once
            raise UsageError(str(exc)) from None
    if rank == 0:
        preprocessing = rundir.start_train_run(args.out, args.overwrite, args.resume, args.shards, args.test)
    source = _sources(args, size, rank, central)
    calibration = None
    if config.learner["eta0"] is None:  # rank 0 calibrates γ0 on its first rows, every rank takes it
        learner = None
        if rank == 0:
            learner, calibration = calibrate_eta0(config.learner, _sources(args, size, 0, central))
        learner, calibration = comm.bcast((learner, calibration), root=0)
        config = dataclasses.replace(config, learner=learner)
    data = ({"synthetic": args.synthetic, "rounds": args.rounds, "features": source.n_features,
             "seed": args.seed, "drift_prob": args.drift_prob} if args.synthetic else
            {"shards": args.shards, "epochs": args.epochs})
    if rank == 0 and not args.quiet:
        print(f"mpisgd train: {configuration_line(size, data, config)}", flush=True)
        if calibration is not None:
            print(f"mpisgd train: {eta0_line(calibration)}", flush=True)
    progress = Progress(sys.stderr) if (rank == 0 and not args.quiet) else None
    checkpointer, fingerprint = None, None
    if args.checkpoint_every or args.checkpoint_seconds or args.resume:
        import os

        from mpisgd import checkpoint

        fingerprint = checkpoint.fingerprint(config, data)
        if args.checkpoint_every or args.checkpoint_seconds:
            grace = checkpoint.STOP_GRACE if args.stop_grace is None else args.stop_grace
            checkpointer = checkpoint.Checkpointer(comm, os.path.join(args.out, checkpoint.SUBDIR),
                                                   args.checkpoint_every, args.checkpoint_seconds,
                                                   args.poll_rows, fingerprint, grace)
    run, report = train(comm, source, config, out_dir=args.out, progress=progress,
                        extra={"data": data, "argv": sys.argv[1:], "options": recorded(args),
                               "eta0_calibration": calibration},
                        checkpointer=checkpointer, resume=args.resume, fingerprint=fingerprint,
                        streams=lambda k, l: _sources(args, k, l, central),
                        complete=lambda model, report: rundir.complete_train_run(model, report, preprocessing,
                                                                                 args.test))
    if rank == 0 and not args.quiet:
        if run.resumed is not None:
            print(f"mpisgd train: resumed from {run.resumed[0]} (round {run.resumed[1]})")
        if report.get("delta_auto"):
            print("mpisgd train: " + delta_auto_line(report["delta_auto"]))
        if report.get("budget"):
            print("mpisgd train: " + budget_line(report["budget"]))
        for line in summary_lines(report):
            print("mpisgd train: " + line)
        print(f"mpisgd train: wrote {args.out}/model.h5, report.json (every option's value), timeline.csv",
              flush=True)
    return 0
