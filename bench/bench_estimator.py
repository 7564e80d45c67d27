"""Fit times of mpisgd's SGDClassifier against scikit-learn's, in one process:
sklearn's digits (1,797 dense rows, 64 features, 10 classes: one-versus-rest)
and a9a (32,561 sparse rows, 123 features, binary; from ../shared/data,
skipped when absent).

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_estimator.py [--repeats 7]

Each row is one ``fit`` with the same parameters on both sides: the defaults
(hinge, λ = 1e-4, tol = 1e-3 with n_iter_no_change = 5, max_iter = 1000;
ours ASGD with a calibrated γ0, theirs "optimal"), or 5 fixed epochs
(``tol=None, max_iter=5``). CPU seconds of the process (``time.process_time``,
every thread's: ``n_jobs=2`` trains in two threads), so that time spent
descheduled on a shared machine does not count, and wall-clock seconds; the
medians over ``--repeats`` fits run round robin after a warm-up fit of each
(numba compiles or loads its cache there), so that load changes hit every
row alike; ``spread`` is max/min of the CPU times; ``ratio`` is the CPU median
over scikit-learn's of the same case; ``epochs`` is ``n_iter_`` and
``accuracy`` the test accuracy (digits: a stratified 30 % split; a9a: a9a.t)
of the last fit.
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def datasets():
    """[(name, X, y, X_test, y_test)]: digits always, a9a where it is found."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    sets = [("digits (10 classes)", Xtr, ytr, Xte, yte)]
    if (DATA / "a9a" / "a9a.bz2").exists():
        from mpisgd.data.libsvm import load_svmlight

        X, y = load_svmlight(DATA / "a9a" / "a9a.bz2", n_features=123)
        Xt, yt = load_svmlight(DATA / "a9a" / "a9a.t.bz2", n_features=123)
        # int32 indices: scikit-learn takes no others, and ours converts them anyway
        for M in (X, Xt):
            M.indices, M.indptr = M.indices.astype(np.int32), M.indptr.astype(np.int32)
        sets.append(("a9a (binary)", X, y, Xt, yt))
    else:
        print(f"a9a not found under {DATA}: skipped")
    return sets


def models(multiclass):
    """{(setting, who): a factory of unfitted estimators}."""
    from sklearn.linear_model import SGDClassifier as SkClassifier

    from mpisgd import SGDClassifier

    settings = {"defaults (tol=1e-3)": {}, "5 epochs (tol=None)": dict(tol=None, max_iter=5)}
    rows = {}
    for setting, kw in settings.items():
        rows[(setting, "scikit-learn")] = lambda kw=kw: SkClassifier(random_state=0, **kw)
        rows[(setting, "mpisgd")] = lambda kw=kw: SGDClassifier(random_state=0, **kw)
        if multiclass:
            rows[(setting, "mpisgd n_jobs=2")] = lambda kw=kw: SGDClassifier(
                random_state=0, n_jobs=2, **kw)
    return rows


def main():
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    warnings.simplefilter("ignore", ConvergenceWarning)  # 5 fixed epochs on purpose
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="fits per row (median)")
    args = parser.parse_args()
    print("| data | setting | who | CPU s | wall s | spread | ratio | epochs | accuracy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, X, y, Xt, yt in datasets():
        rows = models(len(np.unique(y)) > 2)
        times = {key: [] for key in rows}
        walls = {key: [] for key in rows}
        last = {}
        for key, make in rows.items():  # warm-up: numba's compile or cache load
            make().fit(X, y)
        for _ in range(args.repeats):
            for key, make in rows.items():
                est = make()
                start, wall = time.process_time(), time.perf_counter()
                est.fit(X, y)
                times[key].append(time.process_time() - start)
                walls[key].append(time.perf_counter() - wall)
                last[key] = est
        for key in rows:
            setting, who = key
            median = statistics.median(times[key])
            base = statistics.median(times[(setting, "scikit-learn")])
            spread = max(times[key]) / min(times[key])
            est = last[key]
            print(f"| {name} | {setting} | {who} | {median:.4f} | "
                  f"{statistics.median(walls[key]):.4f} | {spread:.2f} | "
                  f"{median / base:.2f} | {int(np.max(est.n_iter_))} | "
                  f"{est.score(Xt, yt):.4f} |", flush=True)


if __name__ == "__main__":
    main()
