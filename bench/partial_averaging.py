"""Partial averaging (--partial θ) against full syncs and static b=8, in the simulator.

    python bench/partial_averaging.py --stream rcv1 --k 2 --seeds 10 --jobs 2 --json rcv1-k2.jsonl
    python bench/partial_averaging.py --stream linear --k 8 --seeds 10 --jobs 2
    python bench/partial_averaging.py --stream rcv1 --k 2 --report rcv1-k2.jsonl        # tables only

Streams: rcv1 = the RCV1-like stream (``--synthetic rcv1``, n = 47,152, 76 non-zeros a
row, stationary); linear = a sparse linear teacher (n = 20,000, 20 non-zeros a row,
drift probability 0.0002 a round). T = 5,000 rounds, log loss, η = 1, λ = 0, no averaging
(the issue's learner). Every configuration of one seed learns from the same rows
(``run_many``): static b=8, and the dynamic protocol (b = 8, the default mode's counts)
at each Δ of --deltas with full syncs and with --partial θ for each θ of --thetas; each
uncompressed and with --compress q8 (--compress chooses).

For each configuration: the median [min, max] over seeds of its online errors, bytes and
messages (MPI messages of every kind) divided by static b=8's uncompressed on the same seed, its full syncs, and whether it is
at static b=8's error within 1 % (E / E_s8 ≤ 1.01 on the median); then its bytes by message
kind (``wire.CATEGORIES``), each over static b=8's total. The last lines name,
per compression and sync kind, the configuration with the fewest bytes among those within
1 % of static b=8's error.
"""

import argparse
import json
import sys
import time
from multiprocessing import get_context

import numpy as np

T = 5000
LEARNER = {"loss": "log", "eta0": 1.0, "lam": 0.0, "schedule": "constant", "average": False}
STREAMS = {"rcv1": {}, "linear": {"n_features": 20000, "nnz_per_row": 20, "drift_prob": 0.0002}}
DELTAS = {"rcv1": (5.0, 10.0, 20.0, 40.0), "linear": (2.0, 5.0, 10.0, 20.0)}
THETAS = (1.0, 0.5)
TOLERANCE = 1.01  # "at static b=8's error": within 1 %


def configs(deltas, thetas, compressions, full=True):
    out = []
    for comp in compressions:
        out.append((f"static b=8 {comp}", {"name": "static", "period": 8}, comp))
        for d in deltas:
            if full:
                out.append((f"Δ={d:g} full {comp}", {"name": "dynamic", "period": 8, "delta": d}, comp))
            for th in thetas:
                out.append((f"Δ={d:g} θ={th:g} {comp}", {"name": "dynamic", "period": 8, "delta": d, "partial": th},
                            comp))
    return out


def one_seed(task):
    stream_name, k, seed, deltas, thetas, compressions, full = task
    from mpisgd.data.synthetic import STREAMS as KINDS
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import Simulation, run_many

    stream = KINDS[stream_name](n_learners=k, seed=seed, **STREAMS[stream_name])
    chosen = configs(deltas, thetas, compressions, full)
    start = time.perf_counter()
    sims = [Simulation(k, stream.n_features, T, ProtocolConfig(**p), dict(LEARNER, compress=comp))
            for _name, p, comp in chosen]
    results = run_many(stream, T, sims)
    out = {"stream": stream_name, "k": k, "seed": seed, "seconds": time.perf_counter() - start, "rows": {}}
    for (name, _p, _c), r in zip(chosen, results):
        out["rows"][name] = {"errors": r["errors"], "bytes": sum(r["bytes_sent"].values()),
                             "messages": sum(r["messages_sent"].values()),
                             "by_kind": r["bytes_sent"],
                             "full_syncs": sum(v for c, v in r["stats"]["full_syncs"].items() if c != "final")}
    print(f"{stream_name} k={k} seed {seed}: {len(chosen)} configurations in {out['seconds']:.0f} s",
          file=sys.stderr, flush=True)
    return out


def _cell(x):
    return f"{np.median(x):.3f} [{np.min(x):.3f}, {np.max(x):.3f}]"


def report(per_seed):
    first = per_seed[0]
    names = [n for n in first["rows"] if all(n in s["rows"] for s in per_seed)]
    print(f"{first['stream']}, k = {first['k']}, T = {T}: {len(per_seed)} seeds; ratios to static b=8 "
          "(uncompressed) on the same seed, median [min, max]\n")
    print("| configuration | E / E_s8 | bytes / s8 | messages / s8 | full syncs | within 1 % |")
    print("|---|---|---|---|---|---|")
    best = {}
    for name in names:
        rows = [(s["rows"][name], s["rows"]["static b=8 none"]) for s in per_seed]
        e = np.array([r["errors"] / s["errors"] for r, s in rows])
        b = np.array([r["bytes"] / s["bytes"] for r, s in rows])
        m = np.array([r["messages"] / s["messages"] for r, s in rows])
        ok = np.median(e) <= TOLERANCE
        print(f"| {name} | {_cell(e)} | {_cell(b)} | {_cell(m)} | "
              f"{np.median([r['full_syncs'] for r, _ in rows]):.0f} | "
              f"{'yes' if ok else 'no'} |")
        kind = "static" if name.startswith("static") else ("full" if " full " in name else "partial")
        key = (kind, name.rsplit(" ", 1)[1])
        if ok and (key not in best or np.median(b) < best[key][1]):
            best[key] = (name, np.median(b), np.median(e))
    kinds = [c for c in first["rows"][names[0]].get("by_kind", {})]
    if kinds:  # where the bytes go: each message kind's bytes over static b=8's total, median over seeds
        print("\n| configuration | " + " | ".join(kinds) + " |")
        print("|---|" + "---|" * len(kinds))
        for name in names:
            cells = [np.median([s["rows"][name]["by_kind"][c] / s["rows"]["static b=8 none"]["bytes"]
                                for s in per_seed]) for c in kinds]
            print(f"| {name} | " + " | ".join(f"{x:.3f}" for x in cells) + " |")
    print()
    for (kind, comp), (name, b, e) in sorted(best.items()):
        print(f"fewest bytes within 1 %, {kind} {comp}: {name}: {100 * b:.0f} % of static b=8's bytes "
              f"(error {e:.3f}×)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stream", choices=tuple(STREAMS), required=True)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--deltas", type=float, nargs="*", default=None, help="Δ of the dynamic runs (default per stream)")
    p.add_argument("--thetas", type=float, nargs="*", default=THETAS, help="θ of the partial runs")
    p.add_argument("--compress", nargs="+", default=("none", "q8"), choices=("none", "fp16", "q8"),
                   help="the compressions to run each configuration with (none is the reference's)")
    p.add_argument("--partial-only", action="store_true", help="no dynamic runs with full syncs (static b=8 stays)")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--json", default=None, help="append each seed's results here (JSON lines)")
    p.add_argument("--report", nargs="*", default=None, help="no runs: the tables of these JSON-lines files")
    args = p.parse_args()
    if args.report is not None:
        per_seed = {}
        for path in args.report:
            with open(path) as f:
                for line in f:
                    s = json.loads(line)
                    if s["stream"] == args.stream and s["k"] == args.k:
                        per_seed.setdefault(s["seed"], dict(s, rows={}))["rows"].update(s["rows"])
        report([per_seed[seed] for seed in sorted(per_seed)])
        return
    deltas = tuple(args.deltas) if args.deltas else DELTAS[args.stream]
    tasks = [(args.stream, args.k, s, deltas, tuple(args.thetas), tuple(args.compress), not args.partial_only)
             for s in range(args.first_seed, args.first_seed + args.seeds)]
    per_seed = []
    with get_context("spawn").Pool(args.jobs) as pool:
        for result in pool.imap_unordered(one_seed, tasks):
            per_seed.append(result)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(result) + "\n")
    per_seed.sort(key=lambda s: s["seed"])
    report(per_seed)


if __name__ == "__main__":
    main()
