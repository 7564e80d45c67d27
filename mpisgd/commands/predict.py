"""``mpisgd predict MODEL DATA -o FILE``: a saved model's predictions, one
line per row of DATA (shards, a shard folder, or a LIBSVM/svmlight or VW
text file), the rows read and preprocessed as ``mpisgd eval`` reads them
(``mpisgd.evaluation``)."""

HELP = "write a saved model's predicted labels and scores for every row of a data set (CSV)"

EPILOG = """\
output (CSV, one header line, then one line per row of DATA in its order;
shards in the order given, a folder's in name order):
  binary classifier        label,score        label: the predicted class as the
                                              training file wrote it; score: w.x + b
                                              (> 0: the second class)
  one-versus-rest (K)      label,score_<c>... the class of the largest score, then
                                              w_c.x + b_c for each class c
  regressor                score              w.x + b, the prediction
The rows are preprocessed as the model's training rows were (L2 normalization,
index base, VW hashing, all recorded in the model)."""


def add_arguments(parser):
    import argparse

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("model", help="model file written by `mpisgd fit` or `mpisgd train`")
    parser.add_argument("data", nargs="+",
                        help="HDF5 shards (mpisgd prep), a folder of shards, or one "
                        "LIBSVM/svmlight or VW (.vw) text file (.gz/.bz2/.xz ok)")
    parser.add_argument("-o", "--output", metavar="FILE", required=True,
                        help="where to write the predictions (CSV; - for standard output)")
    parser.add_argument("--zero-based", choices=("model", "auto", "true", "false"), default="model",
                        help="feature index base of a LIBSVM file (default model: the training "
                        "input's, as the model recorded it; auto-detected when unknown)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")


def _number(v):
    """A label or score as text: integers without a decimal point, floats round-tripping."""
    v = float(v)
    return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)


def write_predictions(model, X, fh):
    """Write the CSV of the module's epilog for rows X (preprocessed) to ``fh``."""
    import numpy as np

    p = model.decision_function(X, preprocessed=True)
    if not model.is_classifier:
        fh.write("score\n")
        fh.writelines(f"{_number(v)}\n" for v in p)
        return
    labels = model.labels_of(p)
    if model.one_vs_rest:
        fh.write("label," + ",".join(f"score_{_number(c)}" for c in model.meta["classes"]) + "\n")
        for label, row in zip(labels, np.asarray(p)):
            fh.write(_number(label) + "," + ",".join(map(_number, row)) + "\n")
        return
    fh.write("label,score\n")
    fh.writelines(f"{_number(label)},{_number(v)}\n" for label, v in zip(labels, p))


def run(args):
    import sys

    from mpisgd.atomic import atomic_path
    from mpisgd.evaluation import read_test_set
    from mpisgd.model import LinearModel
    from mpisgd.rundir import refuse_to_replace

    if args.output != "-":
        refuse_to_replace(args.output, args.overwrite, files=None)
    model = LinearModel.load(args.model)
    zb = {"model": "model", "auto": "auto", "true": True, "false": False}[args.zero_based]
    X, _, where = read_test_set(args.data, model, zb, option="DATA")
    if args.output == "-":
        write_predictions(model, X, sys.stdout)
        return 0
    with atomic_path(args.output) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        write_predictions(model, X, fh)
    print(f"mpisgd predict: {X.shape[0]} rows of {where} -> {args.output}", file=sys.stderr)
    return 0
