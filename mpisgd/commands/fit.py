"""``mpisgd fit``: train a linear model in one process on a LIBSVM file,
printing per epoch the training time and the train/test loss, objective and
error the way Bottou's svmsgd does, then save the model (HDF5)."""

HELP = "train a linear model in one process on a LIBSVM/svmlight file (plain, .gz, .bz2)"

# Classification with K ≥ 3 classes is one-versus-rest (mpisgd.estimator).

ALGORITHMS = ("auto", "sgd", "asgd", "dekel-sgd", "dekel-asgd", "dekel-casgd", "sgdqn")


def add_arguments(parser):
    from mpisgd.kernels.losses import LOSSES
    from mpisgd.kernels.schedules import SCHEDULES

    parser.add_argument("train", help="training file (LIBSVM/svmlight, or VW text named .vw; .gz/.bz2 ok)")
    parser.add_argument("--test", metavar="FILE", default=None, help="test file, scored every epoch")
    parser.add_argument("-o", "--output", metavar="MODEL", default="model.h5",
                        help="where to write the model (HDF5)")
    parser.add_argument("--loss", choices=sorted(LOSSES), default="hinge", help="loss ℓ(p, y)")
    parser.add_argument("--lam", "--lambda", dest="lam", type=float, default=1e-4,
                        help="L2 regularization strength λ")
    parser.add_argument("--algorithm", choices=ALGORITHMS, default="auto",
                        help="Bottou's sgd/asgd (any schedule), Dekel's kernels (step 1/(λt)) "
                        "or SGD-QN (diagonal gains from γ0; λ > 0); auto: asgd for the l2 "
                        "penalty, sgd for l1/elasticnet")
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default=None,
                        help="step-size schedule (default: bottou for sgd, xu for asgd, "
                        "1/(λt) for dekel-*; optimal: 1/(λ(t0 + t)))")
    parser.add_argument("--eta0", type=float, default=None,
                        help="initial step γ0 (default: calibrated on 1,000 examples)")
    parser.add_argument("--t0", type=float, default=None,
                        help="t0 of the 'optimal' schedule (default: scikit-learn's, "
                        "a first step of λ^(-1/4))")
    parser.add_argument("--power-t", type=float, default=0.5, help="power of 'invscaling'")
    parser.add_argument("--penalty", default="l2",  # checked against mpisgd.estimator.PENALTIES
                        help="l2: λ/2‖w‖²; l1: λ‖w‖₁; elasticnet: λ(ρ‖w‖₁ + (1−ρ)/2‖w‖²) "
                        "(l1 and elasticnet run --algorithm sgd)")
    parser.add_argument("--l1-ratio", type=float, default=0.15,
                        help="ρ of the elasticnet penalty")
    parser.add_argument("--epochs", type=int, default=5, help="passes over the training data")
    parser.add_argument("--no-bias", dest="bias", action="store_false", help="no bias term")
    parser.add_argument("--regularize-bias", action="store_true",
                        help="include b² in the regularizer (Dekel's objective)")
    parser.add_argument("--bias-gain", type=float, default=0.01,
                        help="bias step = gain × γ (Bottou's sparse-data gain; "
                        "ignored by dekel-*)")
    parser.add_argument("--avg-start", type=float, default=None,
                        help="asgd: examples before averaging starts (default: one epoch)")
    parser.add_argument("--epsilon", type=float, default=None,
                        help="δ of huber / ε of epsilon_insensitive (default 1.0 / 0.1)")
    parser.add_argument("--normalize", action="store_true",
                        help="scale every row to unit L2 norm (also at eval time)")
    parser.add_argument("--n-features", type=int, default=None,
                        help="number of features (default: largest index in the training file)")
    parser.add_argument("--zero-based", choices=("auto", "true", "false"), default="auto",
                        help="feature index base of the files")
    parser.add_argument("--vw-hash-bits", type=int, default=0, metavar="B",
                        help="VW files: hash feature names into 2^B features, as `mpisgd prep` "
                        "does (0: names must be integer indices)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the per-epoch shuffle")
    parser.add_argument("--shuffle", choices=("block", "full", "none"), default="block",
                        help="row order of every epoch: random chunks of rows, each streamed, "
                        "a full permutation, or file order (mpisgd.kernels.order)")
    parser.add_argument("--no-shuffle", dest="shuffle", action="store_const", const="none",
                        help="visit the examples in file order (same as --shuffle none)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing model file")


def zero_based_arg(value):
    return {"auto": "auto", "true": True, "false": False}[value]


def load(path, n_features, zero_based, normalize, hash_bits=0):
    """Read a LIBSVM or VW file (errors name the file) and optionally L2-normalize its rows."""
    import numpy as np

    from mpisgd.data.sources import load_text
    from mpisgd.errors import MpisgdError
    from mpisgd.model import normalize_rows

    X, y = load_text(path, n_features, zero_based, hash_bits)
    if X.shape[0] == 0:
        raise MpisgdError(f"{path}: no examples")
    if not np.all(np.isfinite(y)):
        raise MpisgdError(f"{path}: non-finite labels")
    return (normalize_rows(X) if normalize else X), y


def run(args):
    import os
    import time

    import numpy as np

    from mpisgd.errors import MpisgdError
    from mpisgd.estimator import SGDClassifier, SGDRegressor, _check_config
    from mpisgd.kernels.losses import CLASSIFICATION_LOSSES
    from mpisgd.rundir import refuse_to_replace

    if args.epochs < 1:
        raise MpisgdError(f"--epochs must be ≥ 1, got {args.epochs}")
    refuse_to_replace(args.output, args.overwrite, files=None)
    zb = zero_based_arg(args.zero_based)
    start = time.perf_counter()
    X, y = load(args.train, args.n_features, zb, args.normalize, args.vw_hash_bits)
    X_test = y_test = None
    if args.test:
        X_test, y_test = load(args.test, X.shape[1], zb, args.normalize, args.vw_hash_bits)
    load_seconds = time.perf_counter() - start
    classify = args.loss in CLASSIFICATION_LOSSES
    classes = None
    if classify:
        classes = np.unique(y)
        if len(classes) < 2:
            raise MpisgdError(f"{args.train}: only one class ({classes[0]:g}) in the training labels")
        if y_test is not None and not np.isin(y_test, classes).all():
            unknown = np.unique(y_test[~np.isin(y_test, classes)]).tolist()[:10]
            raise MpisgdError(f"{args.test}: labels {unknown} are not among the training "
                              f"classes {classes.tolist()}")
    Estimator = SGDClassifier if classify else SGDRegressor
    est = Estimator(
        loss=args.loss, alpha=args.lam, algorithm=args.algorithm, learning_rate=args.schedule,
        eta0=args.eta0, t0=args.t0, power_t=args.power_t, fit_intercept=args.bias,
        regularize_bias=args.regularize_bias, bias_gain=args.bias_gain,
        avg_start=args.avg_start, penalty=args.penalty, l1_ratio=args.l1_ratio,
        epsilon=args.epsilon, max_iter=args.epochs, tol=None,
        shuffle=args.shuffle, random_state=args.seed,
    )

    cfg = _check_config(est, est._losses)
    print("# mpisgd fit: resolved configuration")
    print(f"#   train     {args.train}: {X.shape[0]} rows, {X.shape[1]} features, "
          f"{X.nnz} nonzeros (loaded in {load_seconds:.2f} s)")
    if X_test is not None:
        print(f"#   test      {args.test}: {X_test.shape[0]} rows")
    if classes is not None and len(classes) == 2:
        print(f"#   labels    {classes[0]:g} -> -1, {classes[1]:g} -> +1")
    elif classes is not None:
        print(f"#   classes   one-versus-rest over {len(classes)}: "
              + ", ".join(f"{c:g}" for c in classes))
    resolved = dict(
        loss=cfg["loss"], loss_param=cfg["loss_param"], **{"lambda": cfg["lam"]},
        algorithm=cfg["algorithm"],
        schedule="1/(lambda t)" if cfg["dekel"] else
        "diagonal B from eta0 (SGD-QN)" if cfg["sgdqn"] else cfg["schedule"],
        eta0=args.eta0 if args.eta0 is not None or cfg["dekel"] else "calibrate",
        t0=cfg["t0"], power_t=cfg["power"], bias=cfg["fit_intercept"],
        regularize_bias=cfg["regularize_bias"],
        bias_gain="unused" if cfg["dekel"] else cfg["bias_gain"],
        avg_start=(args.avg_start if args.avg_start is not None else X.shape[0])
        if cfg["algorithm"] == "asgd" else "unused",
        penalty=args.penalty if args.penalty == "l2" else
        f"{args.penalty} (l1_ratio {cfg['l1_ratio']:g}, w = u - v)",
        epochs=args.epochs, shuffle=args.shuffle, seed=args.seed,
        normalize=args.normalize, output=args.output,
    )
    for key, value in resolved.items():
        print(f"#   {key:<16} {value}")

    total_time = 0.0
    for epoch, seconds, _, _ in est._epochs(X, y, max_iter=args.epochs):
        if epoch == 1 and est.eta0_ is not None:
            how = "given" if args.eta0 is not None else "calibrated on 1,000 examples"
            print(f"# Using eta0={est.eta0_:g} ({how})")
        total_time += seconds
        print(f"--------- Epoch {epoch}.")
        print(f"Training on [0, {X.shape[0] - 1}].")
        bias = est.intercept_
        print(f"wNorm={float(np.sum(est.coef_ * est.coef_)):.5g} wBias="
              + (f"{bias[0]:.5g}" if len(bias) == 1 else "[" + " ".join(f"{b:.5g}" for b in bias) + "]")
              + f" wNonzeros={np.count_nonzero(est.coef_)}/{est.coef_.size}")
        print(f"Total training time {total_time:.2f} secs.")
        _report("train", est, X, y, classify)
        if X_test is not None:
            _report("test", est, X_test, y_test, classify)
    model = est.to_model()
    if classes is not None:  # the file's labels as numbers, not numpy floats
        model.meta["classes"] = [int(c) if float(c).is_integer() else float(c) for c in classes]
        if len(classes) == 2:
            model.meta["label_map"] = {"-1": model.meta["classes"][0], "+1": model.meta["classes"][1]}
    model.meta.update(train_file=str(args.train), n_train=int(X.shape[0]), train_seconds=total_time)
    model.preprocessing = {
        "normalize": "l2" if args.normalize else "none",
        "zero_based_input": None if zb == "auto" else zb,  # None: detected again per file
        "n_features": int(X.shape[1]),
        "source": os.path.abspath(args.train),
        "label_mapping": {},
        "vw_hash_bits": args.vw_hash_bits,
    }
    model.save(args.output)
    print(f"# model saved to {args.output}")
    return 0


def _report(name, est, X, y, classify):
    loss, error, cost = est.objective(X, y)
    if classify:
        print(f"{name}Loss={loss:.6g} {name}Cost={cost:.6g} {name}Error={100 * error:.2f}%.")
    else:
        print(f"{name}Loss={loss:.6g} {name}Cost={cost:.6g}")
