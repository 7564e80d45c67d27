"""Reproduce Kamp et al. (2014), Figure 1, and the comparisons beyond it.

    python bench/reproduce/reproduce.py                      # everything (make reproduce)
    python bench/reproduce/reproduce.py --resume             # continue an interrupted sweep
    python bench/reproduce/reproduce.py --only neuralnet,neuralnet-unit --nn-seeds 2 --out runs/nn
    python bench/reproduce/reproduce.py --only disjunction --seeds 3 --rounds 2000 --out runs/try

Each task is one stream (stream, seed): its rows are generated once per
block of rounds and fed to every configuration of every experiment on that
stream in lock-step (``mpisgd.simulator.run_many``), so configurations are
compared on exactly the same examples, and a configuration two experiments
share runs once. Results (one row per experiment, configuration and seed,
with the stream's drift rounds) go to OUT/results.json and OUT/results.csv;
then ``bench/reproduce/sweep_tables.py`` writes OUT/tables.md and ``mpisgd plot
OUT/results.json`` draws the figures (both run at the end unless --no-report).

Experiments (docs/ALGORITHMS.md §4):

- disjunction: n = 100, k = 512, T = 25,000, drift 0.0002, log loss, λ = 0, η = 1.
  none; central; static b ∈ {1, …, 128}; dynamic Δ ∈ DISJ_DELTAS with b = 1
  and b = 8; the augmentation strategies at Δ = 3, b = 1 and Δ = 0.1, b = 8.
  Seeds 0 … S−1, and seed 0 without drift ("nodrift").
- disjunction-sensitivity: the choices the paper leaves open, each changed
  alone, on none / static 8 / static 128 / dynamic Δ = 3 (b = 1).
- disjunction-variants (``--only variants``): the burst variant at Δ = 3 with
  burst fractions 0.1, 0.3, 0.5 (b = 1) and 0.3 (b = 8); the counter limit
  (a full sync forced after 2k or 4k violations instead of k) at Δ = 3, 5, 7 (b = 1)
  and 1, 2 (b = 8); on the disjunction's seeds.
- disjunction-adaptive (``--only adaptive``): our adaptive check period
  (b = 1 after a check with violators, doubling up to 8 or 32 while quiet).
- disjunction-beyond (``--only beyond``): the paper's protocol (Δ = 3, b = 1 and
  b = 8) beside what we built beyond it on the same streams: ``--delta auto``
  (b = 1 and 8), the authors' later hedge, 8-bit compressed messages and full
  syncs, variance monitoring (fda), ``--budget 0.2`` and 64 nodes of 8
  learners (hierarchical, sync mode: its bytes are the inter-node ones);
  static b ∈ {1, …, 128} as the curve.
- neuralnet: n = 150, k = 1,024, T = 2,500, the NeuralNetStream defaults
  (8 tanh units, gain 1, 5 % label noise); Δ ∈ NN_DELTAS (``--only neuralnet``).
- neuralnet-unit: the same streams seen with unit-norm inputs x/√n and η = 1
  (run exactly as η = 1/n and Δ/n on the raw rows); Δ ∈ NN_UNIT_DELTAS.
- stationary: a stationary sparse linear teacher (n = 1,000, k = 32,
  T = 4,000, log loss, λ = 1e-4, step η0/√t): static b ∈ {1, 4, 8, b_Dekel, 32}
  with b_Dekel = ⌈(kT)^(1/3)/k⌉ rounds (Dekel et al.'s mini-batch of
  O(m^(1/3)) examples), against dynamic with Δ_t = Δ0/√t.
"""

import argparse
import csv
import json
import math
import os
import sys
import time
from multiprocessing import get_context

DISJ_DELTAS = (0.1, 0.3, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0)
NN_DELTAS = (0.005, 0.02, 0.05, 0.1, 0.2, 0.5)
NN_UNIT_DELTAS = (0.05, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0)  # unit-norm inputs: one step moves ‖w − r‖² by up to 1
STATIC_BS = (1, 2, 4, 8, 16, 32, 64, 128)
EXPERIMENTS = ("disjunction", "variants", "adaptive", "beyond", "neuralnet", "neuralnet-unit", "stationary")
BASE_LEARNER = {"loss": "log", "eta0": 1.0, "lam": 0.0}

# The paper's open choices: variant name -> (learner changes, protocol changes, order)
SENSITIVITY = {
    "default": ({}, {}, "learn-check"),
    "ties-not-errors": ({"ties_are_errors": False}, {}, "learn-check"),
    "no-bias": ({"fit_intercept": False}, {}, "learn-check"),
    "check-learn": ({}, {}, "check-learn"),
    "counter-contacted": ({}, {"counter_counts": "contacted"}, "learn-check"),
    "counter-forced-reset": ({}, {"counter_reset": "forced-only"}, "learn-check"),
}


def _cfg(label, name, period=1, delta=None, learner=None, order="learn-check", max_period=0, mode="async", **protocol):
    return {"label": label, "protocol": dict(name=name, period=period, delta=delta, **protocol),
            "learner": dict(BASE_LEARNER, **(learner or {})), "order": order, "max_period": max_period, "mode": mode}


def disjunction_configs(deltas=DISJ_DELTAS):
    out = [_cfg("none", "none"), _cfg("central", "central")]
    out += [_cfg(f"static b={b}", "static", b) for b in STATIC_BS]
    for b in (1, 8):
        out += [_cfg(f"dynamic Δ={d:g} b={b}", "dynamic", b, d) for d in deltas]
    for d, b in ((3.0, 1), (0.1, 8)):  # augmentation is rare at Δ=3, frequent at Δ=0.1 with b=8
        for aug in ("random-double", "farthest"):
            out.append(_cfg(f"dynamic Δ={d:g} b={b} {aug}", "dynamic", b, d, augmentation=aug))
    return out


def variant_configs():
    """Our variants: a burst of violations at one check answered by one immediate full
    sync; and a counter that forces a full sync only after counter_limit·k violations."""
    out = [_cfg("none", "none"), _cfg("static b=8", "static", 8), _cfg("dynamic Δ=3 b=1", "dynamic", 1, 3.0)]
    for frac in (0.1, 0.3, 0.5):
        out.append(_cfg(f"dynamic Δ=3 b=1 burst={frac:g}", "dynamic", 1, 3.0, burst_fraction=frac))
    out.append(_cfg("dynamic Δ=3 b=8", "dynamic", 8, 3.0))
    out.append(_cfg("dynamic Δ=3 b=8 burst=0.3", "dynamic", 8, 3.0, burst_fraction=0.3))
    out += [_cfg("dynamic Δ=5 b=1", "dynamic", 1, 5.0), _cfg("dynamic Δ=7 b=1", "dynamic", 1, 7.0),
            _cfg("dynamic Δ=1 b=8", "dynamic", 8, 1.0), _cfg("dynamic Δ=2 b=8", "dynamic", 8, 2.0)]
    for d, b, limit in ((3.0, 1, 2), (5.0, 1, 2), (5.0, 1, 4), (7.0, 1, 4), (1.0, 8, 2), (2.0, 8, 2)):
        out.append(_cfg(f"dynamic Δ={d:g} b={b} limit={limit}", "dynamic", b, d, counter_limit=float(limit)))
    return out


def adaptive_configs():
    """Our variant: the check period adapts, b = 1 after violations, doubling up to 8 (or 32) when quiet."""
    out = [_cfg("none", "none"), _cfg("static b=8", "static", 8)]
    for d in (1.0, 2.0, 3.0, 5.0):
        out.append(_cfg(f"dynamic Δ={d:g} b=1..8", "dynamic", 1, d, max_period=8))
    out.append(_cfg("dynamic Δ=3 b=1..32", "dynamic", 1, 3.0, max_period=32))
    out.append(_cfg("dynamic Δ=1 b=8", "dynamic", 8, 1.0))
    return out


def beyond_configs():
    """The paper's protocol beside ours (docs/ALGORITHMS.md §4.4, §4.5, §6, §8), one point each."""
    q8 = {"compress": "q8"}
    out = [_cfg("none", "none"), _cfg("central", "central")]
    out += [_cfg(f"static b={b}", "static", b) for b in STATIC_BS]
    out += [_cfg("paper Δ=3 b=1", "dynamic", 1, 3.0), _cfg("paper Δ=3 b=8", "dynamic", 8, 3.0),
            _cfg("auto b=1", "dynamic", 1, "auto"), _cfg("auto b=8", "dynamic", 8, "auto"),
            _cfg("auto b=1 hedge=half", "dynamic", 1, "auto", hedge="half"),
            _cfg("auto b=1 q8", "dynamic", 1, "auto", q8), _cfg("auto b=8 q8", "dynamic", 8, "auto", q8),
            _cfg("Δ=3 b=8 q8", "dynamic", 8, 3.0, q8),
            _cfg("fda Θ=1 b=8", "fda", 8, theta=1.0, fda_lag=0),
            _cfg("fda Θ=1 b=8 q8", "fda", 8, learner=q8, theta=1.0, fda_lag=0),
            _cfg("auto b=1 budget=0.2", "dynamic", 1, "auto", budget=0.2),
            _cfg("auto b=8 nodes of 8 (inter-node bytes)", "dynamic", 8, "auto", mode="sync", node_size=8)]
    return out


def sensitivity_configs():
    out = []
    for variant, (learner, protocol, order) in SENSITIVITY.items():
        if variant == "default":
            continue
        base = [("none", "none", 1, None), ("static b=8", "static", 8, None), ("static b=128", "static", 128, None),
                ("dynamic Δ=3 b=1", "dynamic", 1, 3.0)]
        for label, name, b, d in base:
            if name != "dynamic" and variant.startswith("counter"):
                continue  # the counter only exists in the dynamic protocol
            c = _cfg(f"{label} [{variant}]", name, b, d, learner, order, **protocol)
            c["variant"] = variant
            out.append(c)
    return out


def neuralnet_configs(n=150, unit_norm=False):
    """unit_norm: the learner sees x/√n (unit-norm inputs) with η = 1, run on the raw
    ±1 rows: the weights scale by 1/√n, so the step becomes η/n and ‖w − r‖² =
    (1/n)·‖w' − r'‖², i.e. the threshold Δ/n (exact for the weights; the bias takes
    the reduced step too)."""
    scale = 1.0 / n if unit_norm else 1.0
    learner = {"eta0": scale} if unit_norm else None
    out = [_cfg("none", "none", learner=learner), _cfg("central", "central", learner=learner)]
    out += [_cfg(f"static b={b}", "static", b, learner=learner) for b in STATIC_BS]
    for b in (1, 8):
        deltas = NN_UNIT_DELTAS if unit_norm else NN_DELTAS
        out += [_cfg(f"dynamic Δ={d:g} b={b}", "dynamic", b, d * scale, learner=learner) for d in deltas]
    return out


def stationary_configs(k, T):
    learner = {"loss": "log", "eta0": 0.5, "lam": 1e-4, "schedule": "invscaling", "power": 0.5}
    b_dekel = max(1, math.ceil((k * T) ** (1 / 3) / k))
    out = [_cfg("none", "none", learner=learner), _cfg("central", "central", learner=learner)]
    for b in sorted({1, 4, b_dekel, 8, 32}):
        tag = " (Dekel)" if b == b_dekel else ""
        out.append(_cfg(f"static b={b}{tag}", "static", b, learner=learner))
    for d0 in (0.01, 0.05, 0.2):
        out.append(_cfg(f"dynamic Δ_t={d0:g}/√t b=1", "dynamic", 1, d0, learner=learner, delta_decay=True))
        out.append(_cfg(f"dynamic Δ={d0:g} b=1", "dynamic", 1, d0, learner=learner))
    return out


def tasks(args):
    """(stream name, stream kind, stream kwargs, rounds, [(experiment, config), …]) per stream.

    Experiments on the same stream (the disjunction's seeds carry the main
    sweep, the sensitivity variants, our variants and the adaptive period; the
    network's seeds carry raw and unit-norm inputs) run as one task, so its
    rows are generated once and a configuration shared by two experiments runs
    once."""
    seeds = range(args.seeds)
    T_d, T_n, T_s = (args.rounds or 25000), (args.rounds or 2500) // (10 if args.rounds else 1), (args.rounds or 4000)
    only = set(args.only.split(","))
    unknown = only - set(EXPERIMENTS)
    if unknown:
        raise SystemExit(f"reproduce: --only: unknown {', '.join(sorted(unknown))}; choose from {', '.join(EXPERIMENTS)}")
    out = []
    for s in seeds:
        configs = []
        if "disjunction" in only:
            configs += [("disjunction", c) for c in disjunction_configs()]
            if s < args.sensitivity_seeds:
                configs += [("disjunction", c) for c in sensitivity_configs()]
        if "variants" in only:
            configs += [("disjunction-variants", c) for c in variant_configs()]
        if "adaptive" in only:
            configs += [("disjunction-adaptive", c) for c in adaptive_configs()]
        if "beyond" in only:
            configs += [("disjunction-beyond", c) for c in beyond_configs()]
        if configs:
            out.append(("disjunction", "disjunction", dict(n_features=100, n_learners=args.k, seed=s), T_d, configs))
    if "disjunction" in only:
        out.append(("disjunction-nodrift", "disjunction", dict(n_features=100, n_learners=args.k, seed=0, drift_prob=0.0),
                    T_d, [("disjunction-nodrift", c) for c in disjunction_configs()]))
    for s in range(args.nn_seeds if args.nn_seeds is not None else args.seeds):
        configs = []
        if "neuralnet" in only:
            configs += [("neuralnet", c) for c in neuralnet_configs()]
        if "neuralnet-unit" in only:
            configs += [("neuralnet-unit", c) for c in neuralnet_configs(150, unit_norm=True)]
        if configs:
            out.append(("neuralnet", "neuralnet", dict(n_features=150, n_learners=args.k_nn, seed=s), T_n, configs))
    if "stationary" in only:
        k = 32
        for s in range(args.stationary_seeds if args.stationary_seeds is not None else args.seeds):
            out.append(("stationary", "linear", dict(n_features=1000, n_learners=k, seed=s, drift_prob=0.0,
                                                     nnz_per_row=20), T_s,
                        [("stationary", c) for c in stationary_configs(k, T_s)]))
    return out


def _key(config):
    """What makes two configurations the same run."""
    return json.dumps({k: config.get(k) for k in ("protocol", "learner", "order", "max_period", "mode")}, sort_keys=True)


def run_task(task):
    """One stream, all its configurations (each distinct one run once); returns result rows (no models)."""
    from mpisgd.data.synthetic import STREAMS
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import Simulation, run_many

    _name, kind, kwargs, T, configs = task
    unique = {}
    for _experiment, c in configs:
        unique.setdefault(_key(c), c)
    stream = STREAMS[kind](**kwargs)
    drifts = stream.drifts(T)
    every = max(1, T // 100)
    sims = [Simulation(stream.n_learners, stream.n_features, T, ProtocolConfig(**c["protocol"]), c["learner"],
                       c["order"], drifts, drift_window=max(1, T // 50), timeline_every=every,
                       max_period=c.get("max_period", 0), mode=c.get("mode", "async")) for c in unique.values()]
    start = time.perf_counter()
    results = dict(zip(unique, run_many(stream, T, sims)))
    wall = time.perf_counter() - start
    rows = []
    for experiment, c in configs:
        r = results[_key(c)]
        rows.append({
            "experiment": experiment, "seed": kwargs["seed"], "stream": kind,
            "drift_prob": stream.drift_prob, "drifts": r["drifts"], "n_drifts": len(r["drifts"]),
            "k": r["k"], "n_features": r["n_features"], "rounds": T,
            "label": c["label"], "variant": c.get("variant", "default"), "order": c["order"],
            "max_period": c.get("max_period", 0),
            "protocol": r["protocol"], "learner": c["learner"],
            "errors": r["errors"], "loss": r["loss"], "examples": r["examples"],
            "protocol_messages": r["protocol_messages"], "stats": r["stats"],
            "bytes_sent": r["bytes_sent"], "messages_sent": r["messages_sent"],
            "phase_messages": r["phase_messages"], "phase_errors": r["phase_errors"],
            "phase_rounds": r["phase_rounds"], "drift_window": r["drift_window"],
            "timeline": r["timeline"], "task_seconds": wall, "task_runs": len(unique),
        })
    return rows


def _run_indexed(task):
    return task, run_task(task)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/reproduce")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--sensitivity-seeds", type=int, default=None,
                   help="seeds 0..S-1 also run the sensitivity variants (default: --seeds)")
    p.add_argument("--only", default=",".join(EXPERIMENTS), help=f"experiments, from: {', '.join(EXPERIMENTS)}")
    p.add_argument("--rounds", type=int, default=None, help="override T (quick runs; the network uses T/10)")
    p.add_argument("--k", type=int, default=512, help="learners of the disjunction")
    p.add_argument("--k-nn", type=int, default=1024, help="learners of the network")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--no-report", action="store_true", help="skip tables and figures")
    p.add_argument("--resume", action="store_true", help="keep the streams already done in OUT/parts")
    p.add_argument("--nn-seeds", type=int, default=None, help="seeds of the network (default: --seeds)")
    p.add_argument("--stationary-seeds", type=int, default=None, help="seeds of the stationary stream (default: --seeds)")
    p.add_argument("--report-only", action="store_true",
                   help="no new runs: merge the streams in OUT/parts that match the task list, then report")
    args = p.parse_args(argv)
    if args.sensitivity_seeds is None:
        args.sensitivity_seeds = args.seeds
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    os.makedirs(args.out, exist_ok=True)
    todo = tasks(args)
    parts = os.path.join(args.out, "parts")
    os.makedirs(parts, exist_ok=True)
    part_path = lambda t: os.path.join(parts, f"{t[0]}-{t[2]['seed']}.json")  # noqa: E731
    if not (args.resume or args.report_only):
        for t in todo:
            if os.path.exists(part_path(t)):
                os.unlink(part_path(t))
    stored = {part_path(t): _stored_rows(part_path(t), t) for t in todo}
    if args.report_only:
        todo = [t for t in todo if stored[part_path(t)] is not None]
    pending = [t for t in todo if stored[part_path(t)] is None]
    pending.sort(key=lambda t: -t[2]["n_learners"] * t[3] * len(t[4]))  # longest first: the two workers end together
    start = time.perf_counter()
    from mpisgd.metrics import write_report

    def done(i, part, task):
        write_report(part_path(task), {"rows": part})  # one file per stream: an interrupted sweep resumes
        stored[part_path(task)] = part
        print(f"reproduce: {i + 1}/{len(pending)} streams ({task[0]} seed {task[2]['seed']}, "
              f"{part[0]['task_runs']} runs, {part[0]['task_seconds']:.1f}s), {time.perf_counter() - start:.0f}s",
              flush=True)

    if args.jobs > 1:
        with get_context("spawn").Pool(args.jobs) as pool:
            for i, (task, part) in enumerate(pool.imap_unordered(_run_indexed, pending)):
                done(i, part, task)
    else:
        for i, task in enumerate(pending):
            done(i, run_task(task), task)
    rows = [r for t in todo for r in stored[part_path(t)]]
    rows.sort(key=lambda r: (r["experiment"], r["seed"], r["label"]))
    meta = {"argv": sys.argv[1:], "seconds": time.perf_counter() - start, "jobs": args.jobs,
            "cpu_seconds": sum(stored[part_path(t)][0]["task_seconds"] for t in todo),
            "runs": sum(stored[part_path(t)][0]["task_runs"] for t in todo)}

    write_report(os.path.join(args.out, "results.json"), {"meta": meta, "rows": rows})
    _write_csv(os.path.join(args.out, "results.csv"), rows)
    print(f"reproduce: {meta['runs']} runs ({len(rows)} rows) in {meta['seconds']:.0f}s -> "
          f"{args.out}/results.json, results.csv")
    if not args.no_report:
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, here)
        import sweep_tables

        sweep_tables.main([os.path.join(args.out, "results.json"), "--out", os.path.join(args.out, "tables.md")])
        from mpisgd.cli import main as cli

        cli(["plot", os.path.join(args.out, "results.json"), "--out", os.path.join(args.out, "figures")])
    return 0


def _stored_rows(path, task):
    """The rows of a stream stored by an earlier run of exactly this task, else None."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)["rows"]
    want = sorted((e, c["label"], c.get("variant", "default")) for e, c in task[4])
    have = sorted((r["experiment"], r["label"], r["variant"]) for r in rows)
    return rows if have == want and all(r["rounds"] == task[3] for r in rows) else None


def _write_csv(path, rows):
    from mpisgd.wire import CATEGORIES

    cols = ["experiment", "seed", "n_drifts", "label", "variant", "errors", "loss", "protocol_messages"]
    cols += [f"bytes_{c}" for c in CATEGORIES] + [f"msgs_{c}" for c in CATEGORIES]
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([r[c] for c in cols[:8]] + [r["bytes_sent"][c] for c in CATEGORIES]
                       + [r["messages_sent"][c] for c in CATEGORIES])
    os.replace(tmp, path)


if __name__ == "__main__":
    sys.exit(main())
