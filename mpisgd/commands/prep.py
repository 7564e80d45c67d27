"""``mpisgd prep``: convert LIBSVM / VW text or a scipy .npz into HDF5 shards.

Serial: ``mpisgd prep INPUT --out DIR --shards K``. Parallel:
``mpiexec -n P python -m mpi4py -m mpisgd prep ...``: each rank parses its own
byte range of the input (cut at line starts) and the shards equal the serial
ones. Synthetic streams: ``mpisgd prep --synthetic disjunction --learners K
--rounds T --out DIR`` writes one shard per learner, rows aligned by round.

``--out`` must be empty (or new): with ``--overwrite`` the shards an earlier
``prep`` left there are removed first, and a folder holding anything else
is refused (``data.shardset.claim_out_dir``). Every shard records the id of
its run, so that ``train`` and ``eval`` refuse a set mixed from two runs.
"""

HELP = "convert LIBSVM/VW/.npz data or a synthetic stream into HDF5 shards"


def add_arguments(p):
    p.add_argument("input", nargs="?", help="LIBSVM/svmlight (.gz/.bz2/.xz too), VW text, "
                   "or scipy .npz; omit with --synthetic")
    p.add_argument("--out", required=True, help="output folder (new or empty)")
    p.add_argument("--overwrite", action="store_true", help="remove the shards an earlier prep "
                   "wrote to --out first (a folder holding other files is refused)")
    p.add_argument("--name", help="shard file prefix (default: input file name)")
    p.add_argument("--format", default="auto", choices=("auto", "libsvm", "vw", "npz"),
                   help="input format (auto: .npz, .vw[.gz|.bz2|.xz], else LIBSVM)")
    p.add_argument("--zero-based", default="auto", choices=("auto", "true", "false"),
                   help="feature indices 0-based, 1-based, or auto-detect (0-based iff "
                   "some index is 0) and report the decision")
    p.add_argument("--n-features", type=int, help="declared feature count (default: "
                   "largest index + 1); larger indices are an error")
    p.add_argument("--task", default="binary", choices=("binary", "regression"),
                   help="binary: labels ±1, or {0,1} mapped to ±1, anything else an error (shards "
                   "hold one binary task; `mpisgd fit` trains 3+ classes one-versus-rest)")
    p.add_argument("--vw-hash-bits", type=int, default=0, help="VW: hash feature names into "
                   "2^b features (0: names must be integer indices)")
    p.add_argument("--shards", type=int, default=1, help="number of (train) shards K")
    p.add_argument("--layout", default="round-robin", choices=("round-robin", "contiguous"),
                   help="rows to shards: row j to shard j mod K, or K contiguous blocks")
    p.add_argument("--shuffle-seed", type=int, help="shuffle rows with this seed "
                   "(holds one shard in memory while writing it)")
    p.add_argument("--normalize", action="store_true", help="scale rows to unit L2 norm")
    p.add_argument("--test-fraction", type=float, default=0.0,
                   help="send each row to a test split with this probability (seeded)")
    p.add_argument("--test-shards", type=int, default=1, help="shards of the test split")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the train/test split")
    p.add_argument("--split-name", help="name of the split in the file names (e.g. train, "
                   "test) when there is no --test-fraction")
    p.add_argument("--dtype", default="float64", choices=("float64", "float32"),
                   help="stored value type (readers always return float64)")
    p.add_argument("--compression", default=None, choices=("none", "lzf", "gzip"),
                   help="HDF5 compression (default none: contiguous datasets that train "
                   "memory-maps, checksummed; lzf and gzip save space but read over 10x slower)")
    g = p.add_argument_group("synthetic streams (Kamp et al.'s drifting disjunction and neural "
                             "network, a drifting linear target, an RCV1-like set)")
    g.add_argument("--synthetic", choices=("disjunction", "neuralnet", "linear", "rcv1"),
                   help="write one shard per learner from this stream instead of an input")
    g.add_argument("--learners", type=int, default=4, help="learners (one shard each)")
    g.add_argument("--rounds", type=int, default=1000, help="rounds (rows per shard)")
    g.add_argument("--seed", type=int, default=0, help="stream seed")
    g.add_argument("--features", type=int, help="stream feature count (default per stream)")
    g.add_argument("--drift-prob", type=float, help="drift probability per round "
                   "(default per stream)")


def _claim_out_dir(args):
    """Rank 0 checks (and with --overwrite clears) --out before any rank writes."""
    from mpisgd.data.shardset import claim_out_dir

    comm = _comm()
    if comm is None:
        return claim_out_dir(args.out, args.overwrite)
    if comm.Get_rank() == 0:
        claim_out_dir(args.out, args.overwrite)  # an error here aborts the job
    comm.Barrier()


def _comm():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    return comm if comm.Get_size() > 1 else None


def _command(args):
    import json
    import shlex
    import sys

    opts = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    return json.dumps({"argv": shlex.join(sys.argv), "prep": opts}, sort_keys=True)


def run(args):
    from mpisgd.data import shard as shard_mod
    from mpisgd.errors import MpisgdError

    compression = args.compression or shard_mod.DEFAULT_COMPRESSION
    if args.synthetic:
        return _synthetic(args, compression)
    if not args.input:
        raise MpisgdError("prep: give an INPUT file or --synthetic STREAM")
    from mpisgd.data.convert import convert
    from mpisgd.data.sources import open_source

    comm = _comm()
    zb = {"auto": "auto", "true": True, "false": False}[args.zero_based]
    binary = args.task == "binary"
    source = open_source(args.input, args.format, zb, args.n_features, binary,
                         args.vw_hash_bits)
    _claim_out_dir(args)
    name = args.name or _stem(args.input)
    convert(source, args.out, name, n_shards=args.shards, layout=args.layout,
            shuffle_seed=args.shuffle_seed, normalize=args.normalize,
            test_fraction=args.test_fraction, test_shards=args.test_shards,
            split_seed=args.split_seed, split_name=args.split_name,
            n_features=args.n_features, binary=binary, dtype=args.dtype,
            compression=compression, command=_command(args), comm=comm)
    return 0


def _stem(path):
    import os

    base = os.path.basename(path)
    for ext in (".gz", ".bz2", ".xz", ".npz", ".svm", ".libsvm", ".txt", ".vw"):
        if base.lower().endswith(ext):
            base = base[: -len(ext)]
    return base.replace(".", "_") or "data"


def _synthetic(args, compression):
    from mpisgd.data import synthetic
    from mpisgd.errors import MpisgdError

    if args.input:
        raise MpisgdError("prep: give either an INPUT file or --synthetic, not both")
    comm = _comm()
    if comm is not None and comm.Get_rank() != 0:
        comm.Barrier()  # one writer: the streams are fast, the shards small
        return 0
    cls = synthetic.STREAMS[args.synthetic]
    kw = {"n_learners": args.learners, "seed": args.seed}
    if args.features:
        kw["n_features"] = args.features
    if args.drift_prob is not None:
        if args.synthetic == "rcv1":
            raise MpisgdError("prep: the rcv1 stream is stationary (no --drift-prob)")
        kw["drift_prob"] = args.drift_prob
    stream = cls(**kw)
    from mpisgd.data.shardset import claim_out_dir

    claim_out_dir(args.out, args.overwrite)  # rank 0 alone: the other ranks wait below
    paths = synthetic.write_learner_shards(stream, args.rounds, args.out,
                                           prefix=args.name or args.synthetic,
                                           dtype=args.dtype, compression=compression,
                                           command=_command(args))
    print(f"prep: {args.synthetic} stream (seed {args.seed}), {args.learners} learners × "
          f"{args.rounds} rounds, drifts after rounds {stream.drifts(args.rounds).tolist()}: "
          f"{paths[0]} ...")
    if comm is not None:
        comm.Barrier()
    return 0
