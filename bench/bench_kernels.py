"""Seconds per epoch of the single-process kernels on RCV1-scale synthetic data,
side by side with scikit-learn's SGDClassifier and a dot-product floor.

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_kernels.py [--scale 1.0] [--repeats 5]

Every row: the median over ``--repeats`` epochs after one warm-up epoch (JIT
compiled before any timing), the test error after those epochs, and the ratio
to the floor measured in the same process. The floor is a numba loop that
only computes each row's dot product with a dense w, in shuffled order.

Times are CPU seconds of the calling thread (``time.thread_time``; every
kernel here is single-threaded and the OpenMP/BLAS pools are set to one
thread), so that time spent descheduled on a shared machine does not count.
Each includes the epoch's shuffle (and, for scikit-learn, its input
validation). The epochs run round robin (one epoch of every row per round),
so that load changes hit all rows alike; the last column is each row's
spread (max/min).
Prints a markdown table (for bench/README.md, section "Kernels") and the cold
(empty numba cache) and warm start-up times of a small `fit` in a fresh process.
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
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


class Floor:
    """One 'epoch' of the floor: the dot products of a shuffled pass, no update."""

    def __init__(self, X, seed=1):
        self.X = X
        self.rng = np.random.default_rng(seed)
        self.w = self.rng.normal(size=X.shape[1])

    def epoch(self):
        start = time.thread_time()
        order = self.rng.permutation(self.X.shape[0]).astype(np.int64)
        dot_floor(self.X.indptr, self.X.indices, self.X.data, order, self.w)
        return time.thread_time() - start

    def error(self):
        return None


class Ours:
    """mpisgd.SGDClassifier, one epoch per call."""

    def __init__(self, X, y, Xt, yt, epochs, **params):
        from mpisgd import SGDClassifier

        self.clf = SGDClassifier(random_state=0, **params)
        self.steps = self.clf._epochs(X, y, epochs, reset=True)
        self.Xt, self.yt = Xt, yt

    def epoch(self):
        start = time.thread_time()
        next(self.steps)
        return time.thread_time() - start

    def error(self):
        return float(np.mean(self.clf.predict(self.Xt) != self.yt))


class Sklearn:
    """scikit-learn's SGDClassifier, one partial_fit (one epoch) per call."""

    def __init__(self, X, y, Xt, yt, **params):
        import scipy.sparse as sp
        from sklearn.linear_model import SGDClassifier

        # scikit-learn's SGD accepts only int32 indptr (the same arrays otherwise)
        self.X = sp.csr_matrix((X.data, X.indices, X.indptr.astype(np.int32)), shape=X.shape)
        self.y, self.Xt, self.yt = y, Xt, yt
        self.clf = SGDClassifier(random_state=0, tol=None, **params)

    def epoch(self):
        start = time.thread_time()
        self.clf.partial_fit(self.X, self.y, classes=np.array([-1.0, 1.0]))
        return time.thread_time() - start

    def error(self):
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of the RCV1 sizes (781,265 train / 23,149 test rows)")
    parser.add_argument("--repeats", type=int, default=5, help="timed epochs per row (median)")
    parser.add_argument("--seed", type=int, default=0, help="data seed")
    args = parser.parse_args(argv)

    from mpisgd.data.synthetic import rcv1_like

    n_train = max(1000, int(N_TRAIN * args.scale))
    n_test = max(200, int(N_TEST * args.scale))
    start = time.perf_counter()
    X, y, Xt, yt = rcv1_like(n_train, n_test, N_FEATURES, args.seed)
    print(f"# data: rcv1_like({n_train}, {n_test}, {N_FEATURES}, seed={args.seed}): "
          f"{X.nnz / X.shape[0]:.1f} nnz/row, {time.perf_counter() - start:.1f} s to generate")
    # compile everything once, outside the timings
    small = slice(0, 2000)
    for algorithm in ("sgd", "asgd", "dekel-sgd", "dekel-asgd", "dekel-casgd"):
        Ours(X[small], y[small], Xt[:10], yt[:10], 1, algorithm=algorithm).epoch()
    epochs = args.repeats + 1
    runners = {"dot-product floor": (Floor(X), None)}
    for name, params in [
        ("mpisgd SGD hinge λ=1e-4", dict(loss="hinge", alpha=1e-4, algorithm="sgd")),
        ("mpisgd ASGD hinge λ=1e-4", dict(loss="hinge", alpha=1e-4, algorithm="asgd")),
        ("mpisgd SGD log λ=1e-5", dict(loss="log", alpha=1e-5, algorithm="sgd")),
        ("mpisgd ASGD log λ=1e-5", dict(loss="log", alpha=1e-5, algorithm="asgd")),
        ("mpisgd Dekel SGD hinge λ=1e-4", dict(loss="hinge", alpha=1e-4, algorithm="dekel-sgd")),
        ("mpisgd Dekel ASGD hinge λ=1e-4",
         dict(loss="hinge", alpha=1e-4, algorithm="dekel-asgd")),
        ("mpisgd CASGD hinge λ=1e-4", dict(loss="hinge", alpha=1e-4, algorithm="dekel-casgd")),
    ]:
        runners[name] = (Ours(X, y, Xt, yt, epochs, **params), params)
    for name, params in [
        ("sklearn SGDClassifier hinge λ=1e-4", dict(loss="hinge", alpha=1e-4)),
        ("sklearn SGDClassifier hinge λ=1e-4 average",
         dict(loss="hinge", alpha=1e-4, average=True)),
        ("sklearn SGDClassifier log λ=1e-5", dict(loss="log_loss", alpha=1e-5)),
        ("sklearn SGDClassifier log λ=1e-5 average",
         dict(loss="log_loss", alpha=1e-5, average=True)),
    ]:
        runners[name] = (Sklearn(X, y, Xt, yt, **params), params)
    # round robin: every round runs one epoch of every runner, so that a change
    # of the machine's load hits all of them alike; round 0 is the warm-up
    times = {name: [] for name in runners}
    for _ in range(epochs):
        for name, (runner, _) in runners.items():
            times[name].append(runner.epoch())
    floor = statistics.median(times["dot-product floor"][1:])
    rows = []
    for name, (runner, params) in runners.items():
        step = ""
        if isinstance(runner, Ours):
            eta0 = runner.clf.eta0_
            step = f"γ0={eta0:g}" if eta0 else "1/(λt)"
        elif isinstance(runner, Sklearn):
            step = "optimal"
        rows.append((name, statistics.median(times[name][1:]), runner.error(), step,
                     max(times[name][1:]) / min(times[name][1:])))

    print(f"\n| kernel | s/epoch (median of {args.repeats}) | × floor | test error after "
          f"{epochs} epochs | step | max/min of the {args.repeats} |")
    print("|---|---|---|---|---|---|")
    for name, seconds, error, step, spread in rows:
        err = "" if error is None else f"{100 * error:.2f} %"
        print(f"| {name} | {seconds:.4f} | {seconds / floor:.2f} | {err} | {step} | "
              f"{spread:.2f} |")
    (cold_wall, cold_inner), (warm_wall, warm_inner) = startup_times()
    print(f"\nstart-up of a small fit in a fresh process (2,000 × 500, 2 epochs): "
          f"cold cache {cold_wall:.1f} s (import+fit {cold_inner:.1f} s), "
          f"warm cache {warm_wall:.1f} s (import+fit {warm_inner:.1f} s)")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
