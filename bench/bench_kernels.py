"""Seconds per epoch of the single-process fits on RCV1-scale synthetic data,
side by side in one process: scikit-learn's SGDClassifier (shuffled, its
default, and in file order), mpisgd's SGDClassifier in each row order
(``shuffle`` "block", the default, "full" and "none") and the dot-product
floor in file order and in random order.

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_kernels.py [--scale 1.0] [--rounds 3]
        [--no-dekel] [--no-startup]

A row's time is one whole ``fit`` of ``--epochs`` epochs divided by the
epochs, so that everything a fit does counts (input validation, mpisgd's γ0
calibration and, for "block", drawing its chunked order every epoch; the
copy-free order "block" copies nothing); the median over
``--rounds`` fits. The floor is a numba loop that only computes each row's
dot product with a dense w (in random order: a fresh permutation per epoch,
its drawing included); the "dot product + update" floor also adds g·x_i to w
(and g to the bias) after every row, the traffic of an SGD step that updates
on every row (the log loss; hinge updates on the margin violators only),
without the loss, the schedule or the averaging. Test error after the epochs of the last fit.

Times are CPU seconds of the calling thread (``time.thread_time``; every
kernel here is single-threaded and the OpenMP/BLAS pools are set to one
thread), so that time spent descheduled on a shared machine does not count.
The fits run round robin (one fit of every row per round, after a warm-up
that compiles everything), so that load changes hit all rows alike; the last
column is each row's spread (max/min); "of which system" is the kernel's share
of the thread's time (page faults of fresh memory).
Prints a markdown table (docs/RESULTS.md, "Against scikit-learn") and the cold
(empty numba cache) and warm start-up times of a small `fit` in a fresh process.
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from numba import njit, uint32  # noqa: E402

N_TRAIN, N_TEST, N_FEATURES = 781_265, 23_149, 47_152


@njit(cache=True)
def dot_floor(indptr, indices, data, order, w):
    """Σ_i w·x_i over the rows ``order``: the memory traffic of one SGD epoch without the update."""
    total = 0.0
    for r in range(order.shape[0]):
        i = order[r]
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += w[uint32(indices[k])] * data[k]
        total += s
    return total


@njit(cache=True)
def update_floor(indptr, indices, data, order, w, step):
    """The memory traffic of an SGD epoch that updates on every row: w·x_i + b,
    then w += g x_i and b += g (g = step·(1 − margin), no loss, no schedule)."""
    b = 0.0
    for r in range(order.shape[0]):
        i = order[r]
        s = b
        for k in range(indptr[i], indptr[i + 1]):
            s += w[uint32(indices[k])] * data[k]
        g = step * (1.0 - s)
        for k in range(indptr[i], indptr[i + 1]):
            w[uint32(indices[k])] += g * data[k]
        b += g
    return b


class Floor:
    """The dot products of one pass (``update``: and an update of w and b on
    every row); ``random``: a fresh permutation per epoch."""

    def __init__(self, X, random, epochs, seed=1, update=False):
        self.X, self.random, self.epochs, self.update = X, random, epochs, update
        self.rng = np.random.default_rng(seed)
        self.w = self.rng.normal(size=X.shape[1])

    def fit(self):
        m = self.X.shape[0]
        for _ in range(self.epochs):
            order = (self.rng.permutation(m) if self.random else np.arange(m)).astype(np.int64)
            if self.update:
                self.w[:] = 0.0
                update_floor(self.X.indptr, self.X.indices, self.X.data, order, self.w, 1e-6)
            else:
                dot_floor(self.X.indptr, self.X.indices, self.X.data, order, self.w)
        return None


class Ours:
    """mpisgd.SGDClassifier: one whole fit."""

    def __init__(self, X, y, Xt, yt, epochs, **params):
        from mpisgd import SGDClassifier

        self.X, self.y, self.Xt, self.yt = X, y, Xt, yt
        self.clf = SGDClassifier(random_state=0, max_iter=epochs, tol=None, **params)

    def fit(self):
        self.clf.fit(self.X, self.y)
        return float(np.mean(self.clf.predict(self.Xt) != self.yt))


class Sklearn:
    """scikit-learn's SGDClassifier: one whole fit (``tol=None``: all the epochs)."""

    def __init__(self, X, y, Xt, yt, epochs, **params):
        import scipy.sparse as sp
        from sklearn.linear_model import SGDClassifier

        # scikit-learn's SGD accepts only int32 indptr (the same arrays otherwise)
        self.X = sp.csr_matrix((X.data, X.indices, X.indptr.astype(np.int32)), shape=X.shape)
        self.y, self.Xt, self.yt = y, Xt, yt
        self.clf = SGDClassifier(random_state=0, tol=None, max_iter=epochs, **params)

    def fit(self):
        self.clf.fit(self.X, self.y)
        return float(np.mean(self.clf.predict(self.Xt) != self.yt))


STARTUP = """
import time; t = time.perf_counter()
import numpy as np, scipy.sparse as sp
from mpisgd import SGDClassifier
rng = np.random.default_rng(0)
X = sp.random(2000, 500, density=0.02, format="csr", random_state=0)
y = np.where(rng.random(2000) < 0.5, -1.0, 1.0)
SGDClassifier(max_iter=2).fit(X, y)
print(time.perf_counter() - t)
"""


def startup_times():
    """Wall time of a small fit in a fresh process: empty numba cache, then warm."""
    out = []
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, NUMBA_NUM_THREADS="1")
        for _ in ("cold", "warm"):
            start = time.perf_counter()
            inner = subprocess.run([sys.executable, "-c", STARTUP], env=env, check=True,
                                   capture_output=True, text=True).stdout
            out.append((time.perf_counter() - start, float(inner)))
    return out


SETTINGS = (("hinge", 1e-4, False), ("hinge", 1e-4, True), ("log", 1e-5, False),
            ("log", 1e-5, True))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of the RCV1 sizes (781,265 train / 23,149 test rows)")
    parser.add_argument("--epochs", type=int, default=5, help="epochs per fit")
    parser.add_argument("--rounds", type=int, default=3, help="timed fits per row (median)")
    parser.add_argument("--seed", type=int, default=0, help="data seed")
    parser.add_argument("--no-dekel", action="store_true", help="leave out Dekel's kernels")
    parser.add_argument("--no-startup", action="store_true",
                        help="leave out the start-up times of a fresh process")
    parser.add_argument("--trace", action="store_true", help="print every fit's time as it ends")
    args = parser.parse_args(argv)

    from mpisgd.data.synthetic import rcv1_like

    n_train = max(1000, int(N_TRAIN * args.scale))
    n_test = max(200, int(N_TEST * args.scale))
    start = time.perf_counter()
    X, y, Xt, yt = rcv1_like(n_train, n_test, N_FEATURES, args.seed)
    print(f"# data: rcv1_like({n_train}, {n_test}, {N_FEATURES}, seed={args.seed}): "
          f"{X.nnz / X.shape[0]:.1f} nnz/row, {time.perf_counter() - start:.1f} s to generate")
    E = args.epochs
    runners = {"dot-product floor, file order": Floor(X, False, E),
               "dot-product floor, random order": Floor(X, True, E),
               "dot product + update floor, file order": Floor(X, False, E, update=True)}
    for loss, lam, avg in SETTINGS:
        algorithm = "asgd" if avg else "sgd"
        for shuffle in ("block", "full", "none"):
            runners[f"mpisgd {algorithm.upper()} {loss} λ={lam:g} shuffle={shuffle}"] = Ours(
                X, y, Xt, yt, E, loss=loss, alpha=lam, algorithm=algorithm, shuffle=shuffle)
        for shuffle in (True, False):
            runners[f"sklearn {loss}{' average' if avg else ''} λ={lam:g} shuffle={shuffle}"] = \
                Sklearn(X, y, Xt, yt, E, loss="log_loss" if loss == "log" else loss, alpha=lam,
                        average=avg, shuffle=shuffle)
    for algorithm in () if args.no_dekel else ("dekel-sgd", "dekel-asgd", "dekel-casgd"):
        runners[f"mpisgd {algorithm} hinge λ=1e-4 shuffle=block"] = Ours(
            X, y, Xt, yt, E, loss="hinge", alpha=1e-4, algorithm=algorithm)
    # compile everything once, outside the timings
    small = slice(0, 2000)
    for algorithm in ("sgd", "asgd", "dekel-sgd", "dekel-asgd", "dekel-casgd"):
        Ours(X[small], y[small], Xt[:10], yt[:10], 1, algorithm=algorithm).fit()
    Floor(X[small], True, 1).fit()
    Floor(X[small], True, 1, update=True).fit()
    # round robin: every round runs one fit of every runner, so that a change
    # of the machine's load hits all of them alike
    times = {name: [] for name in runners}
    system = {name: [] for name in runners}  # of which kernel time (page faults)
    errors = {}
    for _ in range(args.rounds):
        for name, runner in runners.items():
            t = time.thread_time()
            s = resource.getrusage(resource.RUSAGE_THREAD).ru_stime
            errors[name] = runner.fit()
            system[name].append((resource.getrusage(resource.RUSAGE_THREAD).ru_stime - s) / E)
            times[name].append((time.thread_time() - t) / E)
            if args.trace:
                print(f"# {name}: {times[name][-1]:.4f} s/epoch, system {system[name][-1]:.4f}",
                      flush=True)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    file_floor = med["dot-product floor, file order"]

    def reference(name):  # scikit-learn's default (shuffled) for the same loss and averaging
        for loss, lam, avg in SETTINGS:
            algorithm = "ASGD" if avg else "SGD"
            if name.startswith(f"mpisgd {algorithm} {loss} ") or \
                    name.startswith(f"sklearn {loss}{' average' if avg else ''} λ"):
                return med[f"sklearn {loss}{' average' if avg else ''} λ={lam:g} shuffle=True"]
        return None

    print(f"\n| fit ({E} epochs) | s/epoch (median of {args.rounds}) | sklearn default ÷ this | "
          f"× floor in file order | of which system s | test error | max/min |")
    print("|---|---|---|---|---|---|---|")
    for name, seconds in med.items():
        ref = reference(name)
        speedup = "" if ref is None else f"{ref / seconds:.2f}"
        err = "" if errors[name] is None else f"{100 * errors[name]:.2f} %"
        print(f"| {name} | {seconds:.4f} | {speedup} | {seconds / file_floor:.2f} | "
              f"{statistics.median(system[name]):.4f} | {err} | "
              f"{max(times[name]) / min(times[name]):.2f} |")
    if not args.no_startup:
        (cold_wall, cold_inner), (warm_wall, warm_inner) = startup_times()
        print(f"\nstart-up of a small fit in a fresh process (2,000 × 500, 2 epochs): "
              f"cold cache {cold_wall:.1f} s (import+fit {cold_inner:.1f} s), "
              f"warm cache {warm_wall:.1f} s (import+fit {warm_inner:.1f} s)")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
