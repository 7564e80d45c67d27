"""``mpisgd eval``: score a saved model on a LIBSVM/svmlight file."""

HELP = "score a saved model (HDF5) on a LIBSVM/svmlight file: loss, objective, error"


def add_arguments(parser):
    parser.add_argument("model", help="model file written by `mpisgd fit` or `mpisgd train`")
    parser.add_argument("data", help="LIBSVM/svmlight file (.gz/.bz2 ok)")
    parser.add_argument("--zero-based", choices=("auto", "true", "false"), default="auto",
                        help="feature index base of the file")


def run(args):
    from mpisgd.commands.fit import binary_labels, load, zero_based_arg
    from mpisgd.model import LinearModel

    model = LinearModel.load(args.model)
    X, y = load(args.data, model.n_features, zero_based_arg(args.zero_based),
                model.meta.get("normalize") == "l2")
    if model.is_classifier:
        y, mapping = binary_labels(y, args.data, classes=model.meta.get("classes"))
    loss, error = model.loss_and_error(X, y)
    lam = model.meta.get("lambda")
    print(f"# model {args.model}: loss={model.loss} algorithm={model.meta.get('algorithm')} "
          f"lambda={lam} n_features={model.n_features}")
    print(f"# data  {args.data}: {X.shape[0]} rows")
    line = f"loss={loss:.6g}"
    if lam is not None:
        reg = model.coef @ model.coef
        if model.meta.get("regularize_bias"):
            reg += model.intercept**2
        line += f" cost={loss + 0.5 * lam * reg:.6g}"
    if model.is_classifier:
        line += f" error={100 * error:.2f}%"
    print(line)
    return 0
