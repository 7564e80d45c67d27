"""Bytes against static averaging at its error, with compressed models, in the simulator.

    python bench/compressed_byte_targets.py --set network --seeds 10 --jobs 2 --json nn.jsonl
    python bench/compressed_byte_targets.py --set disjunction --seeds 10 --jobs 2 --json dj.jsonl
    python bench/compressed_byte_targets.py --set network --report nn.jsonl        # tables only

Every configuration of one seed learns from the same rows (``run_many``), as in
bench/reproduce/reproduce.py. Two sets:

- network: the ``neuralnet-unit`` experiment of bench/reproduce/reproduce.py (the network
  target, n = 150, k = 1,024, T = 2,500, drift 0.0002; unit-norm inputs x/√150 with
  η = 1, run exactly as η = 1/150 and Δ/150 on the raw ±1 rows; Δ below in
  unit-norm units). static b=8 with none / fp16 / q8; the dynamic protocol with
  --delta auto and hand-picked Δ, b = 1 and 8, each with none / fp16 / q8.
- disjunction: the drifting disjunction (n = 100, k = 512, T = 25,000, drift 0.0002),
  log loss, η = 1: the knobs that exist (Δ, --delta-scale, b, the hedge, the counter
  limit) with --compress q8, against static b=8.

For each configuration: the median [min, max] over seeds of its errors, bytes and
all MPI messages, each divided by static b=8's **uncompressed** on the same seed
(the issue's reference), and the errors and bytes divided by static b=8's with the
**same compression** on the same seed; and the share of each message category in
its bytes (median over seeds). --json appends one JSON line per seed (every
category's bytes and messages, the Δ auto chose, the full syncs by cause).
"""

import argparse
import json
import sys
import time
from multiprocessing import get_context

import numpy as np

NN_UNIT = 1 / 150
CATS = ("violation", "balance_request", "balance_reply", "balance_result", "full_sync", "control")


def network_configs():
    out = []
    for comp in ("none", "fp16", "q8"):
        out.append((f"static b=8 {comp}", {"name": "static", "period": 8}, comp))
    for comp in ("none", "fp16", "q8"):
        for b in (1, 8):
            out.append((f"auto b={b} {comp}", {"name": "dynamic", "period": b, "delta": "auto"}, comp))
        for d, b in ((1, 1), (1.5, 1), (2, 1), (5, 1), (10, 1), (1, 8), (2, 8), (5, 8)):
            out.append((f"Δ={d:g} b={b} {comp}", {"name": "dynamic", "period": b, "delta": d * NN_UNIT}, comp))
    for b in (16, 32, 64):
        out.append((f"static b={b} q8", {"name": "static", "period": b}, "q8"))
    return out


def disjunction_configs():
    out = [("static b=8 none", {"name": "static", "period": 8}, "none"),
           ("static b=8 q8", {"name": "static", "period": 8}, "q8")]
    dyn = {"name": "dynamic"}
    out.append(("auto b=1 q8", dict(dyn, period=1, delta="auto"), "q8"))
    for d in (3.0, 4.0, 4.6, 5.0):
        out.append((f"Δ={d:g} b=1 q8", dict(dyn, period=1, delta=d), "q8"))
    for lim in (1.5, 2.0, 3.0):
        out.append((f"auto b=1 limit={lim:g} q8", dict(dyn, period=1, delta="auto", counter_limit=lim), "q8"))
        for d in (3.0, 4.0, 4.6):
            out.append((f"Δ={d:g} b=1 limit={lim:g} q8", dict(dyn, period=1, delta=d, counter_limit=lim), "q8"))
    out.append(("auto b=1 hedge=half q8", dict(dyn, period=1, delta="auto", hedge="half"), "q8"))
    out.append(("Δ=3 b=1 hedge=half q8", dict(dyn, period=1, delta=3.0, hedge="half"), "q8"))
    for b in (2, 4, 8):
        out.append((f"auto b={b} q8", dict(dyn, period=b, delta="auto"), "q8"))
        for d in (1.0, 2.0, 3.0):
            out.append((f"Δ={d:g} b={b} q8", dict(dyn, period=b, delta=d), "q8"))
        out.append((f"Δ=2 b={b} limit=2 q8", dict(dyn, period=b, delta=2.0, counter_limit=2.0), "q8"))
    return out


SETS = {"network": network_configs, "disjunction": disjunction_configs}
BYTE_TARGET = {"network": 0.40, "disjunction": 0.05}  # the target: at static b=8's error, at most this share of its bytes


def one_seed(task):
    set_name, seed, only = task
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import Simulation, make_stream, run_many

    if set_name == "network":
        kind, n, k, T, eta = "neuralnet", 150, 1024, 2500, NN_UNIT
    else:
        kind, n, k, T, eta = "disjunction", 100, 512, 25000, 1.0
    stream = make_stream(kind, n, k, seed, 0.0002)
    configs = [c for c in SETS[set_name]() if not only or c[0] in only]
    start = time.perf_counter()
    sims = [Simulation(k, n, T, ProtocolConfig(**p), {"loss": "log", "eta0": eta, "lam": 0.0, "compress": comp})
            for _name, p, comp in configs]
    results = run_many(stream, T, sims)
    out = {"seed": seed, "drifts": len(stream.drifts(T)), "seconds": time.perf_counter() - start, "rows": {}}
    for (name, _p, _c), r in zip(configs, results):
        out["rows"][name] = {"errors": r["errors"], "bytes": r["bytes_sent"], "messages": r["messages_sent"],
                             "full_syncs": r["stats"]["full_syncs"], "violations": r["stats"]["violations"],
                             "delta": (r["delta_auto"] or {}).get("delta")}
    print(f"seed {seed}: {len(configs)} configurations in {out['seconds']:.0f} s", file=sys.stderr, flush=True)
    return out


def _cell(x, digits=3):
    return f"{np.median(x):.{digits}f} [{np.min(x):.{digits}f}, {np.max(x):.{digits}f}]"


def report(set_name, per_seed):
    if not all("static b=8 none" in s["rows"] for s in per_seed):
        print("no tables: every seed needs the reference 'static b=8 none' (run it, or merge result files "
              "that hold it with --report)")
        return
    names = [c[0] for c in SETS[set_name]() if all(c[0] in s["rows"] for s in per_seed)]
    unit = NN_UNIT if set_name == "network" else 1.0
    target = BYTE_TARGET[set_name]
    print(f"{set_name}: {len(per_seed)} seeds ({', '.join(str(s['seed']) for s in per_seed)}); "
          "ratios to static b=8 on the same seed, median [min, max]\n")
    print("| configuration | Δ | E / E_s8 | bytes / s8 | MPI messages / s8 | E / E_s8 same compr. | "
          f"bytes / s8 same compr. | E ≤ 1 and bytes ≤ {100 * target:.0f} % (seeds) |")
    print("|---|---|---|---|---|---|---|---|")
    tot = lambda d: sum(d.values())  # noqa: E731
    for name in names:
        comp = name.rsplit(" ", 1)[1]
        ref, refc = "static b=8 none", f"static b=8 {comp}"
        rows = [(s["rows"][name], s["rows"][ref], s["rows"].get(refc)) for s in per_seed]
        e = np.array([r["errors"] / s["errors"] for r, s, _ in rows])
        by = np.array([tot(r["bytes"]) / tot(s["bytes"]) for r, s, _ in rows])
        ms = np.array([tot(r["messages"]) / tot(s["messages"]) for r, s, _ in rows])
        if rows[0][2] is not None:
            ec = _cell([r["errors"] / c["errors"] for r, _, c in rows])
            bc = _cell([tot(r["bytes"]) / tot(c["bytes"]) for r, _, c in rows])
        else:
            ec = bc = "—"
        deltas = [r["delta"] for r, _, _ in rows if r["delta"] is not None]
        d = f"{np.median(deltas) / unit:.3g}" if deltas else "—"
        met = int(np.sum((e <= 1.0) & (by <= target)))
        print(f"| {name} | {d} | {_cell(e)} | {_cell(by)} | {_cell(ms)} | {ec} | {bc} | {met} |")
    print("\nShare of each category in the bytes, and bytes per message (median over seeds):\n")
    print("| configuration | " + " | ".join(CATS) + " | full syncs (forced / hedge / final) |")
    print("|---|" + "---|" * (len(CATS) + 1))
    for name in names:
        cells = []
        for c in CATS:
            share = np.median([s["rows"][name]["bytes"][c] / tot(s["rows"][name]["bytes"]) for s in per_seed])
            per = np.median([s["rows"][name]["bytes"][c] / max(1, s["rows"][name]["messages"][c]) for s in per_seed])
            cells.append(f"{100 * share:.1f} % ({per:.0f} B)")
        fs = [s["rows"][name]["full_syncs"] for s in per_seed]
        f3 = " / ".join(f"{np.median([f[key] for f in fs]):.0f}" for key in ("forced", "hedge", "final"))
        print(f"| {name} | " + " | ".join(cells) + f" | {f3} |")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", choices=tuple(SETS), required=True)
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--only", nargs="*", default=None, help="configurations by name (the tables need static b=8 none and the same compression)")
    p.add_argument("--json", default=None, help="append each seed's results here (JSON lines)")
    p.add_argument("--report", nargs="*", default=None, help="no runs: the tables of these JSON-lines files")
    args = p.parse_args()
    if args.report is not None:
        per_seed = {}
        for path in args.report:
            with open(path) as f:
                for line in f:
                    s = json.loads(line)
                    per_seed.setdefault(s["seed"], {"seed": s["seed"], "rows": {}})["rows"].update(s["rows"])
        report(args.set, [per_seed[k] for k in sorted(per_seed)])
        return
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    per_seed = []
    with get_context("spawn").Pool(args.jobs) as pool:
        for result in pool.imap_unordered(one_seed, [(args.set, s, args.only) for s in seeds]):
            per_seed.append(result)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(result) + "\n")
    per_seed.sort(key=lambda s: s["seed"])
    report(args.set, per_seed)


if __name__ == "__main__":
    main()
