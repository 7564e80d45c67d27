"""Does the copy-free "block" order learn as well as the full shuffle? The
quality check: objective and test error after 5 epochs, "block"
against "full", over seeds, with the estimator's defaults (γ0 calibrated by
every fit, as a user gets it).

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/order_quality.py [--seeds 5] [--scale 1.0]

Data: a9a and w8a from ../shared/data (train and ``.t`` test files; w8a's file
is sorted by label: 740 negatives, 1,479 positives, then 47,530 negatives),
the RCV1-like synthetic set (``mpisgd.data.synthetic.rcv1_like``, ``--scale``
of its 781,265 rows) and, as a stress case, its first ``--sorted-rows`` rows
sorted by label (two label runs, more than UNIFORM_BYTES, so chunked). Both a9a and w8a take at most
``mpisgd.kernels.order.UNIFORM_BYTES``, where "block" is the full shuffle
itself (one-row chunks); the rows "chunks forced" show what the chunked order
would do there (the cache rule switched off: c = m / MIN_CHUNKS rows). Settings: hinge (λ = 1e-4) and log (λ = 1e-5), ASGD
(the default) and SGD. Seed s is the ``random_state`` of both runs it pairs.
Prints a markdown table: per (data, loss, algorithm) the median over the
seeds of the objective ratio block/full − 1 and of the test-error difference
block − full (points), and the worst case (largest in absolute value) of each.
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETTINGS = (("hinge", 1e-4), ("log", 1e-5))


def datasets(scale, sorted_rows):
    """(name, (X, y, Xt, yt), overrides of mpisgd.kernels.order's constants)"""
    from mpisgd.data.libsvm import load_svmlight
    from mpisgd.data.synthetic import rcv1_like

    for name, n in (("a9a", 123), ("w8a", 300)):
        train = DATA / name / f"{name}.bz2"
        if train.exists():
            X, y = load_svmlight(train, n_features=n)
            Xt, yt = load_svmlight(DATA / name / f"{name}.t.bz2", n_features=n)
            yield name, (X, y, Xt, yt), {}
            yield f"{name}, chunks forced", (X, y, Xt, yt), {"UNIFORM_BYTES": 0}
    n_train = max(1000, int(781_265 * scale))
    X, y, Xt, yt = rcv1_like(n_train, 23_149, 47_152, 0)
    yield f"rcv1-like ({n_train} rows)", (X, y, Xt, yt), {}
    k = min(sorted_rows, n_train)
    by_label = np.argsort(y[:k], kind="stable")  # two runs: all −1, then all +1
    data = (X[by_label], y[by_label], Xt, yt)
    yield f"rcv1-like, first {k} rows sorted by label", data, {}


def worst(v):
    return v[np.argmax(np.abs(v))]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the RCV1-like rows")
    parser.add_argument("--sorted-rows", type=int, default=200_000,
                        help="RCV1-like rows of the label-sorted stress case")
    parser.add_argument("--algorithms", nargs="+", default=["asgd", "sgd"])
    args = parser.parse_args(argv)
    import mpisgd.kernels.order as order
    from mpisgd import SGDClassifier
    from mpisgd.estimator import _csr

    print(f"| data | c (rows per chunk) | loss, λ | algorithm | objective full (median) | "
          f"block/full − 1, median of {args.seeds} | worst | test error full (median) | "
          f"block − full, median (points) | worst |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    defaults = {"UNIFORM_BYTES": order.UNIFORM_BYTES}
    for name, (X, y, Xt, yt), overrides in datasets(args.scale, args.sorted_rows):
        for key, value in dict(defaults, **overrides).items():
            setattr(order, key, value)
        chunk = order.chunk_rows(_csr(X)[0])
        for loss, lam in SETTINGS:
            for algorithm in args.algorithms:
                obj, err = {}, {}
                for mode in ("full", "block"):
                    runs = [SGDClassifier(loss=loss, alpha=lam, algorithm=algorithm, shuffle=mode,
                                          max_iter=args.epochs, tol=None,
                                          random_state=seed).fit(X, y)
                            for seed in range(args.seeds)]
                    obj[mode] = np.array([c.objective(X, y)[2] for c in runs])
                    err[mode] = np.array([c.objective(Xt, yt)[1] for c in runs])
                ratio = obj["block"] / obj["full"] - 1
                diff = 100 * (err["block"] - err["full"])
                print(f"| {name} | {chunk} | {loss}, {lam:g} | {algorithm} | "
                      f"{np.median(obj['full']):.5f} | {100 * np.median(ratio):+.3f} % | "
                      f"{100 * worst(ratio):+.3f} % | {100 * np.median(err['full']):.2f} % | "
                      f"{np.median(diff):+.3f} | {worst(diff):+.3f} |", flush=True)
    for key, value in defaults.items():
        setattr(order, key, value)


if __name__ == "__main__":
    main()
