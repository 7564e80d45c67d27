"""A saved model on a test set: the set's rows read the way the model's
training rows were (what ``mpisgd eval``, ``mpisgd predict`` and ``mpisgd
train --test`` share).

A test set is shards (files or folders, checked as one set by
``data.shardset.resolve_shards``) or one LIBSVM/svmlight or Vowpal Wabbit
text file (``data.sources.load_text``). Text rows are parsed with the
model's recorded index base and VW hashing, then preprocessed like the
training rows (``LinearModel.preprocess``); shard rows were preprocessed by
``prep``. Labels come back as the input file wrote them.
"""

import os

from mpisgd.errors import MpisgdError

PEEK_BYTES = 1 << 16  # the first lines of a text file that a check parses


def which_test_set(paths, option="test set"):
    """("text", path) when ``paths`` is one file that is not HDF5, else
    ("shards", the checked shard files)."""
    from mpisgd.data.shardset import is_hdf5, resolve_shards

    paths = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    if len(paths) == 1 and os.path.isfile(paths[0]) and not is_hdf5(paths[0]):
        return "text", paths[0]
    return "shards", resolve_shards(paths, option)


def _zero_based(preprocessing, zero_based="model"):
    """The index base to parse a text file with: the training input's (when
    recorded and ``zero_based`` is "model"), else ``zero_based`` or auto."""
    if zero_based != "model":
        return zero_based
    recorded = preprocessing.get("zero_based_input")
    return "auto" if recorded is None else recorded


def check_test_set(path, preprocessing, option="--test"):
    """Before any learning: ``path`` exists and is a test set for a model
    trained on rows of ``preprocessing`` (the training shards' record): test
    shards form one set of the same width; a text file's first lines parse
    (the recorded index base and VW hashing) and hold labels the training
    input held."""
    import numpy as np

    from mpisgd.data.shard import open_shard
    from mpisgd.data.sources import load_text

    kind, found = which_test_set([path], option)
    n_features = preprocessing.get("n_features")
    if kind == "shards":
        for shard_path in found:
            with open_shard(shard_path) as shard:
                if n_features is not None and shard.n_features != n_features:
                    raise MpisgdError(f"{option} {shard_path}: {shard.n_features} features, but the "
                                      f"training shards have {n_features}")
        return
    try:
        _, y = load_text(found, n_features, _zero_based(preprocessing),
                         preprocessing.get("vw_hash_bits", 0), stop=PEEK_BYTES)
    except MpisgdError as exc:  # it names the file (and line): say which option gave it
        raise MpisgdError(f"{option} {exc}") from None
    mapping = preprocessing.get("label_mapping") or {}
    if mapping:
        known = np.array([float(k) for k in mapping])
        bad = ~np.isin(y, known)
        if bad.any():
            raise MpisgdError(f"{option} {found}: label {y[bad][0]:g} in its first lines is not "
                              f"among the training labels {sorted(known.tolist())}")


def _read_shards(files, model):
    """Rows (preprocessed like the model's) and labels (as in the input file) of shards."""
    import numpy as np
    import scipy.sparse as sp

    from mpisgd.data.shard import open_shard
    from mpisgd.model import normalize_rows

    blocks, labels = [], []
    bits = model.preprocessing.get("vw_hash_bits", 0)
    for path in files:
        with open_shard(path) as shard:
            record = shard.preprocessing
            if shard.n_features != model.n_features:
                raise MpisgdError(f"{path}: shard has {shard.n_features} features, but the "
                                  f"model expects {model.n_features}")
            if record["vw_hash_bits"] != bits:
                raise MpisgdError(f"{path}: VW features hashed into 2^{record['vw_hash_bits']}, "
                                  f"but the model's into 2^{bits} (0: not hashed)")
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


def read_test_set(paths, model, zero_based="model", option="test set"):
    """(X, labels, description) of a test set: X preprocessed like the
    model's training rows, labels as in the input file. ``zero_based``:
    "model" (the training input's base when recorded, else auto), "auto",
    True or False."""
    from mpisgd.data.sources import load_text

    kind, found = which_test_set(paths, option)
    if kind == "shards":
        X, y = _read_shards(found, model)
        where = found[0] if len(found) == 1 else f"{len(found)} shards ({found[0]} ...)"
    else:
        where = found
        X, y = load_text(where, model.n_features, _zero_based(model.preprocessing, zero_based),
                         model.preprocessing.get("vw_hash_bits", 0))
        X = model.preprocess(X, where)
    if X.shape[0] == 0:
        raise MpisgdError(f"{where}: no examples")
    return X, y, where


def score(model, paths, zero_based="model", option="test set"):
    """``model.evaluate`` on a test set read by ``read_test_set``, plus "data"."""
    X, y, where = read_test_set(paths, model, zero_based, option)
    return {**model.evaluate(X, y, where, preprocessed=True), "data": where}
