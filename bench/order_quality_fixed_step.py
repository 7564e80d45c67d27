"""Does the locality-aware order learn as well as the full shuffle? Objective and
test error after 5 epochs, each shuffle mode, averaged over seeds.

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/order_quality_fixed_step.py [--seeds 5] [--scale 1.0]

Data: a9a and w8a from ../shared/data (w8a's file is sorted by label: 740
negatives, 1,479 positives, then 47,530 negatives) and the RCV1-like synthetic
set (``mpisgd.data.synthetic.rcv1_like``, ``--scale`` of its 781,265 rows).
Settings: hinge with λ = 1e-4 and log with λ = 1e-5, Bottou's SGD and ASGD.
γ0 is calibrated once per (data, loss, algorithm) on the full shuffle with
seed 0 and then fixed for every mode and seed, so that the comparison is of
the orders alone (the calibration's own pick varies by seed, by up to 30×).
The seeds seed each run's order (``random_state``). Prints a markdown table:
means over the seeds, and the relative difference of "block" and "none" to
"full" beside the seed-to-seed standard deviation of "full".
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETTINGS = (("hinge", 1e-4, "sgd"), ("hinge", 1e-4, "asgd"), ("log", 1e-5, "sgd"),
            ("log", 1e-5, "asgd"))
MODES = ("full", "block", "none")


def datasets(scale):
    from mpisgd.data.libsvm import load_svmlight
    from mpisgd.data.synthetic import rcv1_like

    for name, n in (("a9a", 123), ("w8a", 300)):
        train = DATA / name / f"{name}.bz2"
        if train.exists():
            X, y = load_svmlight(train, n_features=n)
            Xt, yt = load_svmlight(DATA / name / f"{name}.t.bz2", n_features=n)
            yield name, (X, y, Xt, yt)
    n_train = max(1000, int(781_265 * scale))
    yield f"rcv1-like ({n_train} rows)", rcv1_like(n_train, 23_149, 47_152, 0)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the RCV1-like rows")
    args = parser.parse_args(argv)
    from mpisgd import SGDClassifier

    print("| data | loss, λ | algorithm | objective full (sd over seeds) | block | none | "
          "test error full | block | none |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (X, y, Xt, yt) in datasets(args.scale):
        for loss, lam, algorithm in SETTINGS:
            params = dict(loss=loss, alpha=lam, algorithm=algorithm, max_iter=args.epochs, tol=None)
            eta0 = SGDClassifier(shuffle="full", random_state=0, **dict(params, max_iter=1)) \
                .fit(X, y).eta0_
            obj, err = {}, {}
            for mode in MODES:
                runs = [SGDClassifier(shuffle=mode, random_state=seed, eta0=eta0, **params)
                        .fit(X, y) for seed in range(args.seeds)]
                obj[mode] = np.array([c.objective(X, y)[2] for c in runs])
                err[mode] = np.array([c.objective(Xt, yt)[1] for c in runs])
            ref, ref_err = obj["full"].mean(), err["full"].mean()

            def rel(mode):
                return f"{obj[mode].mean():.5f} ({100 * (obj[mode].mean() / ref - 1):+.2f} %)"

            def pts(mode):
                return f"{100 * err[mode].mean():.2f} ({100 * (err[mode].mean() - ref_err):+.2f})"

            print(f"| {name} | {loss}, {lam:g} | {algorithm} (γ0={eta0:g}) | {ref:.5f} "
                  f"(sd {100 * obj['full'].std() / ref:.2f} %) | {rel('block')} | {rel('none')} | "
                  f"{100 * ref_err:.2f} % | {pts('block')} | {pts('none')} |", flush=True)


if __name__ == "__main__":
    main()
