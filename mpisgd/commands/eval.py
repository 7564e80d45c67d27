"""``mpisgd eval``: score a saved model on a test set: HDF5 shards, a
folder of shards, or a LIBSVM/svmlight or VW text file. The rows are
preprocessed the way the model's training rows were (its ``preprocessing``
record: L2 normalization, the index base of the training input, VW hashing);
the labels are mapped to the model's classes (``mpisgd.evaluation``)."""

HELP = "score a saved model (HDF5) on a test set (shards, a shard folder, LIBSVM or VW text): loss, cost, error"


def add_arguments(parser):
    parser.add_argument("model", help="model file written by `mpisgd fit` or `mpisgd train`")
    parser.add_argument("data", nargs="+",
                        help="HDF5 shards (mpisgd prep), a folder of shards, or one "
                        "LIBSVM/svmlight or VW (.vw) text file (.gz/.bz2/.xz ok)")
    parser.add_argument("--zero-based", choices=("model", "auto", "true", "false"), default="model",
                        help="feature index base of a LIBSVM file (default model: the training "
                        "input's, as the model recorded it; auto-detected when unknown)")


def run(args):
    from mpisgd.evaluation import score
    from mpisgd.model import LinearModel

    model = LinearModel.load(args.model)
    zb = {"model": "model", "auto": "auto", "true": True, "false": False}[args.zero_based]
    result = score(model, args.data, zb)
    lam = model.meta.get("lambda", model.meta.get("lam"))
    kind = f" one-versus-rest over {model.coef.shape[0]} classes" if model.one_vs_rest else ""
    print(f"# model {args.model}: loss={model.loss}{kind} algorithm={model.meta.get('algorithm')} "
          f"lambda={lam} n_features={model.n_features} "
          f"normalize={model.preprocessing['normalize']}")
    print(f"# data  {result['data']}: {result['examples']} rows")
    line = f"loss={result['loss']:.6g}"
    if "cost" in result:
        line += f" cost={result['cost']:.6g}"
    if "error" in result:
        line += f" error={100 * result['error']:.2f}%"
    print(line)
    return 0
