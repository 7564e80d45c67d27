"""``mpisgd eval``: score a saved model on a test set: HDF5 shards, a
directory of shards, or a LIBSVM/svmlight file. The rows are preprocessed the
way the model's training rows were (its ``preprocessing`` record: L2
normalization, the index base of the training input); the labels are mapped
to the model's classes. ``read_test_set`` and ``score`` are also what
``mpisgd train --test`` uses."""

HELP = "score a saved model (HDF5) on a test set (shards, a shard directory or LIBSVM): loss, cost, error"

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"


def add_arguments(parser):
    parser.add_argument("model", help="model file written by `mpisgd fit` or `mpisgd train`")
    parser.add_argument("data", nargs="+",
                        help="HDF5 shards (mpisgd prep), a directory of shards, or one "
                        "LIBSVM/svmlight file (.gz/.bz2 ok)")
    parser.add_argument("--zero-based", choices=("model", "auto", "true", "false"), default="model",
                        help="feature index base of a LIBSVM file (default model: the training "
                        "input's, as the model recorded it; auto-detected when unknown)")


def check_test_paths(paths, option="--test"):
    """Fail before any learning when a test path does not exist."""
    import os

    from mpisgd.errors import MpisgdError

    for path in paths:
        if not os.path.exists(path):
            raise MpisgdError(f"{option} {path}: no such file or directory")


def shard_paths(paths):
    """The shard files of ``paths`` (a directory stands for its *.h5 files, which
    must all belong to one split), or None when ``paths`` is one text file."""
    import os

    from mpisgd.data.shard import open_shard
    from mpisgd.errors import MpisgdError

    files = []
    for path in paths:
        if os.path.isdir(path):
            found = sorted(os.path.join(path, n) for n in os.listdir(path)
                           if n.endswith(".h5") and not n.startswith("."))
            if not found:
                raise MpisgdError(f"{path}: a directory without shards (*.h5)")
            splits = {}
            for f in found:
                with open_shard(f) as shard:
                    splits.setdefault(str(shard.attrs.get("split", "")), f)
            if len(splits) > 1:
                raise MpisgdError(
                    f"{path}: holds shards of several splits ({', '.join(sorted(splits))}): "
                    "name the shards of one split"
                )
            files += found
        else:
            with open(path, "rb") as fh:
                is_hdf5 = fh.read(len(HDF5_MAGIC)) == HDF5_MAGIC
            if not is_hdf5:
                if len(paths) > 1:
                    raise MpisgdError(f"{path}: not an HDF5 shard; give one LIBSVM file or shards")
                return None
            files.append(path)
    return files


def _read_shards(files, model):
    """Rows and labels (as in the input file) of shards, preprocessed like the model's."""
    import numpy as np
    import scipy.sparse as sp

    from mpisgd.data.shard import open_shard
    from mpisgd.errors import MpisgdError
    from mpisgd.model import normalize_rows

    blocks, labels = [], []
    for path in files:
        with open_shard(path) as shard:
            record = shard.preprocessing
            if shard.n_features != model.n_features:
                raise MpisgdError(f"{path}: shard has {shard.n_features} features, but the "
                                  f"model expects {model.n_features}")
            indptr, indices, data, y = shard.read(0, shard.n_rows)
            X = sp.csr_matrix((np.array(data), np.array(indices), indptr),
                              shape=(shard.n_rows, shard.n_features))
        want = model.preprocessing["normalize"]
        if record["normalize"] != want:
            if want != "l2":
                raise MpisgdError(f"{path}: the shard's rows are L2-normalized, but the model "
                                  "was trained on rows as given: use shards prepared without "
                                  "--normalize")
            X = normalize_rows(X)
        if record["label_mapping"]:  # stored ±1 back to the input file's labels
            back = {int(v): float(k) for k, v in record["label_mapping"].items()}
            y = np.where(np.asarray(y) > 0, back[1], back[-1])
        blocks.append(X)
        labels.append(np.asarray(y, np.float64))
    return sp.vstack(blocks, format="csr"), np.concatenate(labels)


def read_test_set(paths, model, zero_based="model"):
    """(X, labels, description) of a test set, X preprocessed like the model's
    training rows (``model.preprocess``), labels as in the input file.
    ``zero_based``: "model" (the training input's base when recorded, else
    auto), "auto", True or False."""
    from mpisgd.data.libsvm import load_svmlight
    from mpisgd.errors import MpisgdError

    paths = [paths] if isinstance(paths, str) else list(paths)
    check_test_paths(paths, option="test set")
    files = shard_paths(paths)
    if files is not None:
        X, y = _read_shards(files, model)
        where = files[0] if len(files) == 1 else f"{len(files)} shards ({files[0]} ...)"
    else:
        where = paths[0]
        if zero_based == "model":
            recorded = model.preprocessing.get("zero_based_input")
            zero_based = "auto" if recorded is None else recorded
        X, y = load_svmlight(where, n_features=model.n_features, zero_based=zero_based)
        X = model.preprocess(X, where)
    if X.shape[0] == 0:
        raise MpisgdError(f"{where}: no examples")
    return X, y, where


def score(model, paths, zero_based="model"):
    """``model.evaluate`` on a test set read by ``read_test_set``, plus "data"."""
    X, y, where = read_test_set(paths, model, zero_based)
    return {**model.evaluate(X, y, where), "data": where}


def run(args):
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
