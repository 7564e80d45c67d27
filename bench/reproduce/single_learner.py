"""Single-learner results in the manner of Bottou's Figure 2: SGD, ASGD and
CASGD, test error and training objective after each epoch, and the time per
epoch beside Bottou's published RCV1 figures.

    python bench/reproduce/single_learner.py --out runs/single                 # RCV1-scale synthetic, a9a, w8a
    python bench/reproduce/single_learner.py --datasets a9a,w8a --epochs 5

Data: ``mpisgd.data.synthetic.rcv1_like`` (781,265 train / 23,149 test
documents, 47,152 features, as RCV1 CCAT in Bottou's experiments; its size
is an option) and a9a / w8a from ../shared/data (skipped when absent).
Algorithms (mpisgd.estimator.SGDClassifier): "sgd" (Bottou's SGD, γ0/(1 + λγ0 t),
γ0 calibrated), "asgd" (Bottou's ASGD, averaging from the second epoch),
"dekel-casgd" (Dekel's centered ASGD, step 1/(λt)). Losses: hinge with
λ = 1e-4 and log with λ = 1e-5 (Bottou's two RCV1 settings).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

BOTTOU = {("hinge", 1e-4): ("SGD 1.4 s", "6.02 %"), ("log", 1e-5): ("SGD 2.3 s", "5.66 %")}
ALGORITHMS = ("sgd", "asgd", "dekel-casgd")
NAMES = {"sgd": "SGD, step γ0/(1 + λγ0·t), γ0 calibrated", "asgd": "ASGD, averaged from the 2nd epoch",
         "dekel-casgd": "CASGD (Dekel), step 1/(λt)"}
DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def load(name, n_train):
    if name == "rcv1-synthetic":
        from mpisgd.data.synthetic import rcv1_like

        return rcv1_like(n_train, 23149, seed=0)
    from sklearn.datasets import load_svmlight_file

    n = {"a9a": 123, "w8a": 300}[name]
    tr, te = DATA / name / f"{name}.bz2", DATA / name / f"{name}.t.bz2"
    if not tr.exists():
        return None
    X, y = load_svmlight_file(str(tr), n_features=n)
    Xt, yt = load_svmlight_file(str(te), n_features=n)
    return X.tocsr(), y, Xt.tocsr(), yt


def run(name, data, loss, lam, epochs):
    from mpisgd.estimator import SGDClassifier

    X, y, Xt, yt = data
    rows = []
    for algo in ALGORITHMS:
        clf = SGDClassifier(loss=loss, alpha=lam, algorithm=algo, random_state=0, shuffle=True)
        total = 0.0
        for epoch in range(1, epochs + 1):
            start = time.perf_counter()
            clf.partial_fit(X, y, classes=np.array([-1.0, 1.0]))
            total += time.perf_counter() - start
            _loss, _err, objective = clf.objective(X, y)
            _tl, test_error, _to = clf.objective(Xt, yt)
            rows.append({"data": name, "loss": loss, "lam": lam, "algorithm": algo, "epoch": epoch,
                         "seconds": total, "objective": float(objective), "test_error": float(test_error)})
    return rows


def plot(rows, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for (name, loss, lam) in sorted({(r["data"], r["loss"], r["lam"]) for r in rows}):
        pick = [r for r in rows if (r["data"], r["loss"], r["lam"]) == (name, loss, lam)]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(9, 3.6))
        for i, algo in enumerate(ALGORITHMS):
            rr = [r for r in pick if r["algorithm"] == algo]
            ep = [r["epoch"] for r in rr]
            a1.plot(ep, [r["objective"] for r in rr], "o-", color=f"C{i}", label=NAMES[algo], ms=3)
            a2.plot(ep, [100 * r["test_error"] for r in rr], "o-", color=f"C{i}", label=NAMES[algo], ms=3)
        a1.set_xlabel("epochs")
        a1.set_ylabel("training objective F(w, b) (log)")
        a1.set_yscale("log")
        a2.set_xlabel("epochs")
        a2.set_ylabel("test error (%)")
        a1.set_title("Training objective after each epoch", fontsize=9)
        a2.set_title("Test error after each epoch", fontsize=9)
        a2.legend(fontsize=7)
        for ax in (a1, a2):
            ax.set_xticks(sorted({r["epoch"] for r in pick}))
            ax.grid(True, lw=0.3, alpha=0.5)
        fig.suptitle(f"{name}: {loss} loss, λ={lam:g}, one learner, one partial_fit per epoch in a fresh "
                     "random order", fontsize=10)
        fig.tight_layout(rect=(0, 0, 1, 0.94))
        path = os.path.join(out, f"single-{name}-{loss}.png")
        fig.savefig(path, dpi=120)
        plt.close(fig)
        print(f"single_learner: wrote {path}")


def table(rows):
    lines = ["| data | loss, λ | algorithm | time per epoch | test error after 1 epoch | after the last | "
             "objective after the last | Bottou (RCV1, SGD) |", "|---|---|---|---|---|---|---|---|"]
    for (name, loss, lam) in sorted({(r["data"], r["loss"], r["lam"]) for r in rows}):
        for algo in ALGORITHMS:
            rr = [r for r in rows if (r["data"], r["loss"], r["lam"], r["algorithm"]) == (name, loss, lam, algo)]
            if not rr:
                continue
            last = rr[-1]
            ref = BOTTOU.get((loss, lam)) if name == "rcv1-synthetic" and algo == "sgd" else None
            lines.append(f"| {name} | {loss}, {lam:g} | {algo} | {last['seconds'] / last['epoch']:.2f} s | "
                         f"{100 * rr[0]['test_error']:.2f} % | {100 * last['test_error']:.2f} % ({last['epoch']} ep.) | "
                         f"{last['objective']:.5f} | {', '.join(ref) if ref else '–'} |")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/single")
    p.add_argument("--datasets", default="rcv1-synthetic,a9a,w8a")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--n-train", type=int, default=781265, help="training documents of the RCV1-scale set")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in args.datasets.split(","):
        start = time.perf_counter()
        data = load(name, args.n_train)
        if data is None:
            print(f"single_learner: {name} not found under {DATA}, skipped")
            continue
        print(f"single_learner: {name} loaded in {time.perf_counter() - start:.1f}s", flush=True)
        for loss, lam in ((("hinge", 1e-4), ("log", 1e-5))):
            rows += run(name, data, loss, lam, args.epochs)
    with open(os.path.join(args.out, "single.json"), "w") as f:
        json.dump(rows, f, indent=1)
    text = "\n".join(table(rows)) + "\n"
    with open(os.path.join(args.out, "single.md"), "w") as f:
        f.write(text)
    print(text)
    plot(rows, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
