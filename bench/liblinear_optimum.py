"""The exact optimum of the objective that `mpisgd train`/`fit` minimise on a9a,
λ/2‖w‖² + (1/n) Σ max(0, 1 − y(w·x + b)), found by liblinear (scikit-learn's
LinearSVC, dual coordinate descent, C = 1/(λn)) on the rows as `mpisgd prep
--normalize` gives them (unit L2 norm), and its held-out error: the floor that
an SGD run's held-out error is compared with (docs/RESULTS.md, "a9a").

    python bench/liblinear_optimum.py [--lam 1e-4] [--data ../shared/data/a9a]

liblinear also penalizes the bias; a large intercept_scaling makes that penalty
negligible (b = intercept_scaling · w_b, its share of ‖w‖² scaled down by its square).
"""

import argparse
import os
import time

import numpy as np
from sklearn.datasets import load_svmlight_file
from sklearn.preprocessing import normalize
from sklearn.svm import LinearSVC


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lam", type=float, default=1e-4, help="λ of the objective")
    p.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "a9a"),
                   help="folder with a9a.bz2 and a9a.t.bz2")
    p.add_argument("--intercept-scaling", type=float, default=10.0,
                   help="liblinear's bias feature (larger: a smaller bias penalty, a slower convergence)")
    args = p.parse_args()
    X, y = load_svmlight_file(os.path.join(args.data, "a9a.bz2"), n_features=123)
    Xt, yt = load_svmlight_file(os.path.join(args.data, "a9a.t.bz2"), n_features=123)
    X, Xt = normalize(X), normalize(Xt)  # prep --normalize: every row of unit L2 norm
    start = time.process_time()
    svm = LinearSVC(C=1.0 / (args.lam * X.shape[0]), loss="hinge", dual=True, tol=1e-6, max_iter=1_000_000,
                    intercept_scaling=args.intercept_scaling).fit(X, y)
    seconds = time.process_time() - start
    w, b = svm.coef_.ravel(), float(svm.intercept_[0])
    objective = args.lam / 2 * w @ w + np.mean(np.maximum(0.0, 1.0 - y * (X @ w + b)))
    error = np.mean(np.where(Xt @ w + b > 0, 1.0, -1.0) != yt)
    print(f"a9a, hinge, λ={args.lam:g}: liblinear's optimum: objective {objective:.6f}, "
          f"held-out error {100 * error:.2f} % ({seconds:.1f} s CPU, {svm.n_iter_} iterations)")


if __name__ == "__main__":
    main()
