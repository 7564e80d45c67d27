"""SGD-QN, the Lasso, online k-means and the PA and RDA rules against their references, in one process.

    python bench/bench_algorithms.py fig2   --out runs/algorithms   # SGD, SGD-QN, ASGD (Bottou's Fig. 2)
    python bench/bench_algorithms.py lasso  --out runs/algorithms   # L1 vs scikit-learn's SGDRegressor
    python bench/bench_algorithms.py lasso-parts --out runs/algorithms  # where a partial_fit epoch goes
    python bench/bench_algorithms.py kmeans --out runs/algorithms   # OnlineKMeans vs MiniBatchKMeans
    python bench/bench_algorithms.py pa     --out runs/algorithms   # PA and RDA rules under the protocols
    python bench/bench_algorithms.py rda-check --out runs/algorithms  # RDA's O(1) check against the dense one

fig2: Bottou (2010) Fig. 2 on our data: squared hinge, test error and test
objective ("expected risk") after each epoch for SGD (γ0/(1 + λγ0 t)), SGD-QN
and ASGD (γ0(1 + λγ0 t)^-0.75, averaging from the second epoch), γ0 calibrated
(the same γ0 for the three: Bottou's procedure picks it from SGD's objective).
Data: ``mpisgd.data.synthetic.rcv1_like`` (``--rcv1-train`` documents, its
23,149 test documents, 47,152 features), λ = 1e-5; a9a from ../shared/data,
λ = 1e-4. Writes the figure (``--figure``), a JSON and a Markdown table.

lasso: ``SGDRegressor(penalty="l1")`` of mpisgd (SGD on w = u − v) and of
scikit-learn on the same rows, squared loss on the ±1 labels, the same
schedule (invscaling, γ0 = 0.01, power 0.25, the scikit-learn default), the
same epochs, several λ: objective mean ½(p − y)² + λ‖w‖₁, non-zeros of w, CPU
seconds per epoch (median over the epochs, each one ``partial_fit`` call; and
one ``fit`` of all the epochs divided by their number, fresh estimators).

kmeans: ``mpisgd.OnlineKMeans`` (MacQueen) and scikit-learn's
``MiniBatchKMeans`` from the same k-means++ seeds: inertia on the data and CPU
seconds of the whole fit.

pa: the passive-aggressive rules beside SGD in the simulator on the drifting
disjunction (Kamp et al.'s first experiment at a smaller scale: ``--learners``
k, ``--rounds`` T, seed 0): cumulative online errors and bytes of none,
static b = 8 and dynamic (Δ = ``--delta``, b = 8) for SGD (log loss, η = 1,
λ = 0, the paper's learner) and PA, PA-I, PA-II (hinge, C = ``--pa-c``),
and regularized dual averaging (log loss, γ = ``--rda-gamma``, λ = 0 and
λ = ``--rda-l1``; its dynamic protocol at Δ = ``--rda-delta``, on the scale
of its dual state u = −G/(γ√t), and at Δ = auto); "non-zeros of w" counts the
final model's (the mean of the k learners' models).

rda-check: RDA with λ = ``--rda-l1`` and 10× that on the same stream (k, T as
for pa): every 8 rounds each learner's check ‖u_l − r‖² and its models' distance
‖soft(u_l, θ) − soft(r, θ)‖² (dense), a full sync whenever a check fails; counts
how often the check fails while the models are within Δ, and the CPU time of
both computations.

Times are CPU seconds of the calling thread (``time.thread_time``; single
threaded, BLAS/OpenMP pools at 1): the machine is shared, so compare ratios
within one run.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
FIG2_ALGORITHMS = ("sgd", "sgdqn", "asgd")


def load(name, rcv1_train):
    """(X, y, X_test, y_test) as CSR with int32 indices (scikit-learn's sparse SGD
    wants them), or None when the file is absent."""
    if name == "rcv1-like":
        from mpisgd.data.synthetic import rcv1_like

        X, y, Xt, yt = rcv1_like(rcv1_train, 23149, seed=0)
    else:
        from sklearn.datasets import load_svmlight_file

        tr, te = DATA / name / f"{name}.bz2", DATA / name / f"{name}.t.bz2"
        if not tr.exists():
            return None
        n = {"a9a": 123, "w8a": 300}[name]
        X, y = load_svmlight_file(str(tr), n_features=n)
        Xt, yt = load_svmlight_file(str(te), n_features=n)
    out = []
    for M in (X, Xt):
        M = M.tocsr()
        M.indptr = M.indptr.astype(np.int32)
        M.indices = M.indices.astype(np.int32)
        out.append(M)
    return out[0], np.asarray(y, float), out[1], np.asarray(yt, float)


def cpu(fn):
    start = time.thread_time()
    fn()
    return time.thread_time() - start


# ---------------------------------------------------------------- fig2

FIG2_LAMBDA = {"rcv1-like": 1e-5, "a9a": 1e-4}


def fig2(args):
    from mpisgd.estimator import SGDClassifier

    rows = []
    for name, lam in FIG2_LAMBDA.items():
        data = load(name, args.rcv1_train)
        if data is None:
            print(f"fig2: {name} not found under {DATA}, skipped")
            continue
        X, y, Xt, yt = data
        classes = np.array([-1.0, 1.0])
        for algo in FIG2_ALGORITHMS:
            clf = SGDClassifier(loss="squared_hinge", alpha=lam, algorithm=algo, random_state=0)
            for epoch in range(1, args.epochs + 1):
                seconds = cpu(lambda: clf.partial_fit(X, y, classes=classes))
                _, test_error, test_cost = clf.objective(Xt, yt)
                _, _, train_cost = clf.objective(X, y)
                rows.append(dict(data=name, lam=lam, algorithm=algo, epoch=epoch,
                                 seconds=seconds, test_error=float(test_error),
                                 test_objective=float(test_cost),
                                 train_objective=float(train_cost), eta0=clf.eta0_,
                                 skip=getattr(clf, "skip_", None)))
                print(json.dumps(rows[-1]), flush=True)
    return rows


def fig2_table(rows):
    lines = ["| data, λ | algorithm | CPU s/epoch (median) | × SGD | test error after 1 / 2 / 3 / last "
             "epoch | epochs to ASGD's last test error | test objective, last epoch |",
             "|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["data"] for r in rows):
        pick = [r for r in rows if r["data"] == name]
        med = {a: float(np.median([r["seconds"] for r in pick if r["algorithm"] == a]))
               for a in FIG2_ALGORITHMS}
        target = [r for r in pick if r["algorithm"] == "asgd"][-1]["test_error"]
        for algo in FIG2_ALGORITHMS:
            rr = [r for r in pick if r["algorithm"] == algo]
            reach = next((r["epoch"] for r in rr if r["test_error"] <= target), None)
            errs = " / ".join(f"{100 * r['test_error']:.2f}" for r in rr[:3] + rr[-1:])
            extra = f" (skip {rr[0]['skip']})" if algo == "sgdqn" else ""
            lines.append(
                f"| {name}, {rr[0]['lam']:g} | {algo}{extra} | {med[algo]:.3f} | "
                f"{med[algo] / med['sgd']:.2f} | {errs} % | "
                f"{reach if reach is not None else f'> {len(rr)}'} | "
                f"{rr[-1]['test_objective']:.5f} |")
    return lines


def fig2_plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["data"] for r in rows))
    fig, axes = plt.subplots(len(names), 2, figsize=(8, 2.8 * len(names)), squeeze=False)
    for row, name in enumerate(names):
        a1, a2 = axes[row]
        for i, algo in enumerate(FIG2_ALGORITHMS):
            rr = [r for r in rows if r["data"] == name and r["algorithm"] == algo]
            ep = [r["epoch"] for r in rr]
            label = {"sgd": "SGD", "sgdqn": "SGD-QN", "asgd": "ASGD"}[algo]
            a1.plot(ep, [r["test_objective"] for r in rr], "o-", ms=3, color=f"C{i}", label=label)
            a2.plot(ep, [100 * r["test_error"] for r in rr], "o-", ms=3, color=f"C{i}",
                    label=label)
        lam = FIG2_LAMBDA[name]
        a1.set_title(f"{name}, squared hinge, λ={lam:g}", fontsize=9)
        a1.set_ylabel("test objective")
        a2.set_ylabel("test error (%)")
        for a in (a1, a2):
            a.set_xlabel("epochs")
            a.grid(alpha=0.3)
        a2.legend(fontsize=8)
    fig.suptitle("Bottou's Fig. 2 on our data: SGD, SGD-QN and ASGD, one partial_fit an epoch (mpisgd.SGDClassifier)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- lasso

LASSO_LAMBDAS = (1e-4, 1e-3, 1e-2)


def lasso(args):
    from sklearn.linear_model import SGDRegressor as SkRegressor

    from mpisgd.estimator import SGDRegressor

    rows = []
    for name in ("a9a", "rcv1-like"):
        data = load(name, args.rcv1_train)
        if data is None:
            print(f"lasso: {name} not found under {DATA}, skipped")
            continue
        X, y = data[0], data[1]
        sched = dict(eta0=0.01, power_t=0.25)
        for warm_up in (SGDRegressor(penalty="l1", algorithm="sgd", learning_rate="invscaling", **sched),
                        SkRegressor(penalty="l1", learning_rate="invscaling", tol=None, **sched)):
            warm_up.fit(X[:100], y[:100])  # numba's first calls (compiling or loading the cache) untimed
        for lam in LASSO_LAMBDAS:
            def models(**kw):
                return {
                    "mpisgd": SGDRegressor(penalty="l1", alpha=lam, algorithm="sgd",
                                           learning_rate="invscaling", tol=None, random_state=0,
                                           **sched, **kw),
                    "sklearn": SkRegressor(penalty="l1", alpha=lam, learning_rate="invscaling",
                                           tol=None, random_state=0, **sched, **kw),
                }
            # one fit of all the epochs each and a partial_fit per epoch (before the
            # copy-free order, each partial_fit call paid a shuffled copy of the rows), interleaved
            fit_seconds = {who: cpu(lambda: est.fit(X, y)) / args.lasso_epochs
                           for who, est in models(max_iter=args.lasso_epochs).items()}
            for who, est in models().items():
                times = [cpu(lambda: est.partial_fit(X, y)) for _ in range(args.lasso_epochs)]
                w = np.ravel(est.coef_)
                b = float(np.ravel(est.intercept_)[0])
                p = X @ w + b
                obj = float(np.mean(0.5 * (p - y) ** 2) + lam * np.abs(w).sum())
                rows.append(dict(data=name, lam=lam, who=who, epochs=args.lasso_epochs,
                                 objective=obj, nonzeros=int(np.count_nonzero(w)),
                                 n_features=int(w.size), seconds=float(np.median(times)),
                                 fit_seconds=fit_seconds[who]))
                print(json.dumps(rows[-1]), flush=True)
    return rows


def lasso_parts(args):
    """Where a ``partial_fit`` epoch of the L1 estimator goes on RCV1-like: drawing the
    "block" order (mpisgd.kernels.order: copy-free since the chunked order; it
    replaced a shuffled copy of the rows per call), the kernel's epoch in that order,
    over the rows in a fresh permutation ("full") and in file order, and
    scikit-learn's whole ``partial_fit``; ``--rounds-lasso`` rounds, interleaved."""
    from sklearn.linear_model import SGDRegressor as SkRegressor

    from mpisgd.kernels import lasso as kernel
    from mpisgd.kernels.losses import LOSSES
    from mpisgd.kernels.order import chunk_rows, epoch_order
    from mpisgd.kernels.schedules import SCHEDULES

    X, y = load("rcv1-like", args.rcv1_train)[:2]
    m, lam = X.shape[0], 1e-3
    arrays = (X.indptr.astype(np.int64), X.indices, X.data)
    rng = np.random.RandomState(0)

    def epoch(arr, yy, order):
        r, st = kernel.new_state(X.shape[1])
        kernel.lasso_epoch(*arr, yy, np.ones(len(yy)), order, LOSSES["squared"], 0.0, SCHEDULES["invscaling"], 0.01, lam, 1.0,
                           0.0, 0.25, 0.01, True, r, st)

    sk = SkRegressor(penalty="l1", alpha=lam, learning_rate="invscaling", tol=None, random_state=0,
                     eta0=0.01, power_t=0.25)
    epoch(arrays, y, np.arange(100, dtype=np.int64))  # numba's first calls, untimed
    sk.partial_fit(X, y)
    rows = []
    for rnd in range(args.rounds_lasso):
        row = {"round": rnd}
        start = time.thread_time()
        order = epoch_order("block", m, rng, chunk_rows(arrays[0]))
        row["block order"] = time.thread_time() - start
        row["block epoch"] = cpu(lambda: epoch(arrays, y, order))
        row["full epoch"] = cpu(lambda: epoch(arrays, y, epoch_order("full", m, rng)))
        row["file-order epoch"] = cpu(lambda: epoch(arrays, y, np.arange(m, dtype=np.int64)))
        row["sklearn partial_fit"] = cpu(lambda: sk.partial_fit(X, y))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def lasso_parts_table(rows):
    keys = [k for k in rows[0] if k != "round"]
    lines = ["| CPU s (RCV1-like, λ = 1e-3) | median | min | max |", "|---|---|---|---|"]
    for k in keys:
        v = [r[k] for r in rows]
        lines.append(f"| {k} | {np.median(v):.3f} | {min(v):.3f} | {max(v):.3f} |")
    return lines


def lasso_table(rows):
    lines = ["| data | λ | objective mpisgd / sklearn | ratio − 1 | non-zeros mpisgd / sklearn "
             "| CPU s/epoch mpisgd / sklearn (partial_fit) | ratio | CPU s/epoch mpisgd / sklearn (fit) | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["data"] for r in rows):
        for lam in LASSO_LAMBDAS:
            m, s = ([r for r in rows if (r["data"], r["lam"], r["who"]) == (name, lam, who)][0]
                    for who in ("mpisgd", "sklearn"))
            lines.append(
                f"| {name} | {lam:g} | {m['objective']:.5f} / {s['objective']:.5f} | "
                f"{100 * (m['objective'] / s['objective'] - 1):+.2f} % | "
                f"{m['nonzeros']} / {s['nonzeros']} (of {m['n_features']}) | "
                f"{m['seconds']:.4f} / {s['seconds']:.4f} | {m['seconds'] / s['seconds']:.2f} | "
                f"{m['fit_seconds']:.4f} / {s['fit_seconds']:.4f} | {m['fit_seconds'] / s['fit_seconds']:.2f} |")
    return lines


# ---------------------------------------------------------------- kmeans

KMEANS_K = 10


def kmeans(args):
    from sklearn.cluster import MiniBatchKMeans, kmeans_plusplus

    from mpisgd.kmeans import OnlineKMeans

    rows = []
    for name in ("a9a", "rcv1-like"):
        data = load(name, args.rcv1_train)
        if data is None:
            print(f"kmeans: {name} not found under {DATA}, skipped")
            continue
        X = data[0]
        seeds, _ = kmeans_plusplus(X, KMEANS_K, random_state=0)
        seeds = np.asarray(seeds)
        OnlineKMeans(n_clusters=KMEANS_K, init=seeds).fit(X[:100])  # compile
        for epochs in (1, 3):
            runs = {
                "mpisgd OnlineKMeans": OnlineKMeans(n_clusters=KMEANS_K, init=seeds,
                                                    max_iter=epochs, random_state=0),
                "sklearn MiniBatchKMeans": MiniBatchKMeans(
                    n_clusters=KMEANS_K, init=seeds, n_init=1, max_iter=epochs, tol=0.0,
                    max_no_improvement=None, random_state=0),
            }
            for who, est in runs.items():
                seconds = cpu(lambda: est.fit(X))
                inertia = (est.inertia(X) if hasattr(est, "online_inertia_")
                           else float(-est.score(X)))
                rows.append(dict(data=name, k=KMEANS_K, epochs=epochs, who=who,
                                 inertia=float(inertia), seconds=seconds, rows=X.shape[0]))
                print(json.dumps(rows[-1]), flush=True)
    return rows


def kmeans_table(rows):
    lines = ["| data (rows), k | epochs | estimator | inertia / rows | CPU s |",
             "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['data']} ({r['rows']}), {r['k']} | {r['epochs']} | {r['who']} | "
                     f"{r['inertia'] / r['rows']:.5f} | {r['seconds']:.2f} |")
    return lines


# ---------------------------------------------------------------- pa

def pa(args):
    import tempfile

    from mpisgd.cli import main as cli

    rda = ["--loss", "log", "--rule", "rda", "--gamma", str(args.rda_gamma)]
    paper = ["--loss", "log", "--lam", "0", "--schedule", "constant", "--eta0", "1", "--no-average"]
    rules = [("sgd", paper, args.delta), ("pa", ["--loss", "hinge", "--rule", "pa"], args.delta),
             ("pa-i", ["--loss", "hinge", "--rule", "pa-i", "-C", str(args.pa_c)], args.delta),
             ("pa-ii", ["--loss", "hinge", "--rule", "pa-ii", "-C", str(args.pa_c)], args.delta),
             (f"rda γ={args.rda_gamma:g}", rda, args.rda_delta),  # Δ on the scale of u = −G/(γ√t)
             (f"rda γ={args.rda_gamma:g} λ={args.rda_l1:g}", [*rda, "--l1", str(args.rda_l1)], args.rda_delta)]
    rows = []
    for rule, rule_args, delta in rules:
        protocols = [("none", ["--protocol", "none"]),
                     ("static b=8", ["--protocol", "static", "--period", "8"]),
                     (f"dynamic Δ={delta:g} b=8", ["--protocol", "dynamic", "--delta", str(delta), "--period", "8"])]
        if rule.startswith("rda"):
            protocols.append(("dynamic Δ=auto b=8", ["--protocol", "dynamic", "--delta", "auto", "--period", "8"]))
        for proto, proto_args in protocols:
            with tempfile.TemporaryDirectory() as out:
                seconds = cpu(lambda: cli(["simulate", "--synthetic", "disjunction", "--learners",
                                           str(args.learners), "--rounds", str(args.rounds),
                                           "--seed", "0", "--out", out, "--quiet",
                                           *rule_args, *proto_args]))
                with open(os.path.join(out, "report.json")) as f:
                    rep = json.load(f)
            online, comm = rep["online"], rep["communication"]
            rows.append(dict(rule=rule, protocol=proto, errors=int(online["errors"]),
                             examples=int(online["examples"]),
                             model_messages=int(comm["model_messages_paper"]["total"]),
                             bytes=int(comm["total_bytes"]), seconds=seconds,
                             drifts=len(rep["simulation"]["drifts"]),
                             nonzeros=int(np.count_nonzero(rep["model"]["coef"]))))
            print(json.dumps(rows[-1]), flush=True)
    return rows


def pa_table(rows):
    lines = ["| rule | protocol | errors | error rate | model msgs | bytes | error reduction kept "
             "| bytes / static b=8 | non-zeros of w | CPU s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for rule in dict.fromkeys(r["rule"] for r in rows):
        rr = {r["protocol"]: r for r in rows if r["rule"] == rule}
        none, static = rr["none"]["errors"], rr["static b=8"]
        for proto, r in rr.items():
            kept = ((none - r["errors"]) / (none - static["errors"])
                    if none != static["errors"] else float("nan"))
            lines.append(f"| {rule} | {proto} | {r['errors']} | {r['errors'] / r['examples']:.4f} | "
                         f"{r['model_messages']} | {r['bytes']} | {100 * kept:.1f} % | "
                         f"{r['bytes'] / static['bytes']:.3f} | {r['nonzeros']} | {r['seconds']:.1f} |")
    return lines


def rda_check(args):
    """How conservative RDA's O(1) check on the dual state is for λ > 0: k learners on
    the drifting disjunction; every b = 8 rounds each learner's ‖u_l − r‖² (the check)
    and its models' distance ‖soft(u_l, θ) − soft(r, θ)‖² (dense, O(n)); a full sync
    whenever some learner's check fails (a simplified dynamic protocol)."""
    from mpisgd.data.synthetic import DisjunctionStream
    from mpisgd.learners import OnlineLearners

    k, n, b = args.learners, 100, 8
    rows = []
    for l1 in (args.rda_l1, 10 * args.rda_l1):
        stream = DisjunctionStream(n, k, seed=0)
        L = OnlineLearners(k, n, loss="log", rule="rda", gamma=args.rda_gamma, l1=l1)
        checks = dual = primal = false_alarms = syncs = above = 0
        ratios, t_dual, t_primal = [], 0.0, 0.0
        for t0 in range(0, args.rounds, b):
            indptr, indices, data, y = stream.rows(t0, min(args.rounds, t0 + b))
            L.learn(indptr, indices, data, y, np.arange(len(y)) % k)
            start = time.thread_time()
            d = L.distances()
            t_dual += time.thread_time() - start
            start = time.thread_time()
            theta = l1 * np.sqrt(L.steps[0]) / args.rda_gamma
            soft_r = np.sign(L.r) * np.maximum(np.abs(L.r) - theta, 0.0)
            p = np.array([((L.weights(j)[0] - soft_r) ** 2).sum() for j in range(k)])
            p += (L.bias - L.r_bias) ** 2
            t_primal += time.thread_time() - start
            checks += k
            dual += int((d > args.rda_delta).sum())
            primal += int((p > args.rda_delta).sum())
            false_alarms += int(((d > args.rda_delta) & (p <= args.rda_delta)).sum())
            above += int((p > d * (1 + 1e-12) + 1e-12).sum())  # the bound ‖w − soft(r)‖² ≤ ‖u − r‖² broken
            ratios.append(float(np.median(p / np.maximum(d, 1e-300))))
            if (d > args.rda_delta).any():
                L.set_reference(L.mean_model())
                syncs += 1
        rows.append(dict(l1=l1, gamma=args.rda_gamma, delta=args.rda_delta, learner_checks=checks,
                         dual_violations=dual, primal_violations=primal, false_alarms=false_alarms,
                         median_primal_over_dual=float(np.median(ratios)), full_syncs=syncs, bound_broken=above,
                         seconds_dual=t_dual, seconds_primal=t_primal))
        print(json.dumps(rows[-1]), flush=True)
    return rows


def rda_check_table(rows):
    lines = ["| λ | learner checks | ‖u − r‖² > Δ (the check) | models' distance > Δ | check fails, models "
             "within Δ | models' distance > check's | median models' / check's distance | full syncs "
             "| CPU s of the checks: O(1) / dense |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['l1']:g} | {r['learner_checks']} | {r['dual_violations']} | {r['primal_violations']} | "
                     f"{r['false_alarms']} | {r['bound_broken']} | {r['median_primal_over_dual']:.3f} | {r['full_syncs']} | "
                     f"{r['seconds_dual']:.3f} / {r['seconds_primal']:.3f} |")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=("fig2", "lasso", "lasso-parts", "kmeans", "pa", "rda-check"))
    p.add_argument("--out", default="runs/algorithms")
    p.add_argument("--epochs", type=int, default=10, help="fig2: epochs")
    p.add_argument("--lasso-epochs", type=int, default=5, help="lasso: epochs")
    p.add_argument("--rounds-lasso", type=int, default=7, help="lasso-parts: rounds")
    p.add_argument("--rcv1-train", type=int, default=200000,
                   help="training documents of the RCV1-like set")
    p.add_argument("--learners", type=int, default=128, help="pa: k")
    p.add_argument("--rounds", type=int, default=10000, help="pa: T")
    p.add_argument("--delta", type=float, default=3.0, help="pa: Δ of the dynamic protocol")
    p.add_argument("--pa-c", type=float, default=0.1, help="pa: C of PA-I and PA-II")
    p.add_argument("--rda-gamma", type=float, default=0.005, help="pa: γ of rda")
    p.add_argument("--rda-l1", type=float, default=1e-4, help="pa: λ of the second rda rule")
    p.add_argument("--rda-delta", type=float, default=300.0, help="pa: Δ of the dynamic protocol for rda")
    p.add_argument("--figure", default="docs/figures/sgdqn_fig2.png", help="fig2: the PNG")
    args = p.parse_args(argv)
    from threadpoolctl import threadpool_limits

    os.makedirs(args.out, exist_ok=True)
    with threadpool_limits(1):
        rows = {"fig2": fig2, "lasso": lasso, "lasso-parts": lasso_parts, "kmeans": kmeans, "pa": pa,
                "rda-check": rda_check}[args.what](args)
    table = {"fig2": fig2_table, "lasso": lasso_table, "lasso-parts": lasso_parts_table, "kmeans": kmeans_table,
             "pa": pa_table, "rda-check": rda_check_table}[args.what](rows)
    with open(os.path.join(args.out, f"{args.what}.json"), "w") as f:
        json.dump(rows, f, indent=1)
    text = "\n".join(table) + "\n"
    with open(os.path.join(args.out, f"{args.what}.md"), "w") as f:
        f.write(text)
    print(text)
    if args.what == "fig2":
        os.makedirs(os.path.dirname(args.figure) or ".", exist_ok=True)
        fig2_plot(rows, args.figure)
        print(f"fig2: wrote {args.figure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
