"""--delta auto and the hedge against hand-picked Δ, in the simulator.

    python bench/bench_auto.py --stream disjunction --k 512 --rounds 25000 --seeds 3
    python bench/bench_auto.py --stream neuralnet-unit --k 1024 --rounds 2500 --seeds 3
    python bench/bench_auto.py --stream shards --shards a.h5 b.h5 ... --loss hinge --lam 1e-4

Every configuration of one seed learns from the same rows (``run_many``;
shards: one ``simulate`` each). For each: the median over seeds of its online
errors, MPI messages and bytes, each divided by static b=8's on the same
seed, and the Δ that --delta auto chose. Configurations: static b=8; dynamic
with --delta auto at each --scales c and each --budgets F (b from --periods), and hand-picked
--deltas; each dynamic one with --hedges.
"""

import argparse
import json
import sys
import time
from multiprocessing import get_context

import numpy as np


def configurations(args):
    yield "static b=8", {"name": "static", "period": 8}
    for b in args.periods:
        for hedge in args.hedges:
            for c in args.scales:
                yield f"auto c={c:g} b={b} {hedge}", {"name": "dynamic", "period": b, "delta": "auto",
                                                      "delta_scale": c, "hedge": hedge}
            for F in args.budgets:
                yield f"auto budget={F:g} b={b} {hedge}", {"name": "dynamic", "period": b, "delta": "auto",
                                                          "budget": F, "hedge": hedge}
            for d in (args.deltas if hedge == args.hedges[0] or not args.auto_only_hedge else ()):
                yield f"Δ={d:g} b={b} {hedge}", {"name": "dynamic", "period": b, "delta": d * args.delta_unit,
                                                 "hedge": hedge}


def learner(args):
    return {"loss": args.loss, "eta0": args.eta0, "lam": args.lam}


def one_seed(task):
    args, seed = task
    from mpisgd.protocol import ProtocolConfig
    from mpisgd.simulator import ShardSource, Simulation, make_stream, run_many, simulate

    names, results = [], []
    start = time.perf_counter()
    if args.stream == "shards":
        for name, protocol in configurations(args):
            source = ShardSource(args.shards)
            rounds = min(args.rounds or source.n_rounds, source.n_rounds)
            names.append(name)
            results.append(simulate(source, rounds, ProtocolConfig(**protocol), learner(args)))
            source.close()
            r = results[-1]
            print(f"  {name}: errors {r['errors']}, messages {sum(r['messages_sent'].values())}, bytes "
                  f"{sum(r['bytes_sent'].values())}, Δ {(r['delta_auto'] or {}).get('delta')}, "
                  f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    else:
        kind, n = {"disjunction": ("disjunction", 100), "neuralnet-unit": ("neuralnet", 150)}[args.stream]
        stream = make_stream(kind, n, args.k, seed, 0.0002)
        sims = []
        for name, protocol in configurations(args):
            names.append(name)
            sims.append(Simulation(args.k, n, args.rounds, ProtocolConfig(**protocol), learner(args)))
        results = run_many(stream, args.rounds, sims)
    print(f"seed {seed}: {len(names)} configurations in {time.perf_counter() - start:.0f} s", file=sys.stderr,
          flush=True)
    return {name: {"errors": r["errors"], "messages": sum(r["messages_sent"].values()),
                   "bytes": sum(r["bytes_sent"].values()),
                   "full_syncs": r["stats"]["full_syncs"],
                   "delta": (r["delta_auto"] or {}).get("delta"),
                   "budget": r.get("budget")} for name, r in zip(names, results)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--stream", choices=("disjunction", "neuralnet-unit", "shards"), default="disjunction")
    p.add_argument("--shards", nargs="*", default=())
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--k", type=int, default=512)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--periods", type=int, nargs="+", default=[1])
    p.add_argument("--scales", type=float, nargs="*", default=[2.0], help="c of --delta auto")
    p.add_argument("--deltas", type=float, nargs="*", default=[], help="hand-picked Δ (in --delta-unit)")
    p.add_argument("--budgets", type=float, nargs="*", default=[], help="--budget F of --delta auto")
    p.add_argument("--delta-unit", type=float, default=None, help="Δ unit (neuralnet-unit: 1/150)")
    p.add_argument("--hedges", nargs="+", default=["counter"])
    p.add_argument("--auto-only-hedge", action="store_true",
                   help="hedges after the first: only the --delta auto configurations")
    p.add_argument("--loss", default="log")
    p.add_argument("--eta0", type=float, default=None)
    p.add_argument("--lam", type=float, default=0.0)
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--json", default=None, help="append each seed's results here as it ends (JSON lines)")
    args = p.parse_args()
    unit = args.stream == "neuralnet-unit"
    args.delta_unit = args.delta_unit or (1 / 150 if unit else 1.0)
    args.eta0 = args.eta0 or (1 / 150 if unit else 1.0)
    args.rounds = args.rounds or {"disjunction": 25000, "neuralnet-unit": 2500}.get(args.stream)
    seeds = range(args.first_seed, args.first_seed + (1 if args.stream == "shards" else args.seeds))
    per_seed = []
    with get_context("spawn").Pool(args.jobs) as pool:
        for result in pool.imap(one_seed, [(args, s) for s in seeds]):
            per_seed.append(result)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(result) + "\n")
    print(f"{args.stream}, k={args.k}, T={args.rounds}, {len(seeds)} seeds, {learner(args)}; ratios to static "
          "b=8 on the same seed: median [min, max]\n")
    print("| configuration | Δ (median) | errors | MPI messages | bytes | full syncs (forced / hedge / augmented) |")
    print("|---|---|---|---|---|---|")
    for name, _p in configurations(args):
        cells = []
        for key in ("errors", "messages", "bytes"):
            ratios = np.array([s[name][key] / max(1, s["static b=8"][key]) for s in per_seed])
            cells.append(f"{np.median(ratios):.3f} [{ratios.min():.3f}, {ratios.max():.3f}]")
        deltas = [s[name]["delta"] for s in per_seed if s[name]["delta"] is not None]
        d = f"{np.median(deltas) / args.delta_unit:.3g}" if deltas else "—"
        fs = per_seed[0][name]["full_syncs"]
        print(f"| {name} | {d} | " + " | ".join(cells) + f" | {fs['forced']} / {fs['hedge']} / {fs['augmented']} |")
    for line in target_lines(per_seed, seeds):
        print(line)


def target_lines(per_seed, seeds):
    """The target for --delta auto, seed by seed: errors ≤ 1.01× static b=8's, and bytes ≤ 1.5×
    those of the best hand-picked Δ (the fewest bytes among the Δ within 1 % of static's errors)."""
    lines = []
    for auto in [name for name in per_seed[0] if name.startswith("auto c=")]:
        lines += ["", f"{auto} against the best hand-picked Δ (errors ≤ 1.01× static b=8's, bytes ≤ 1.5× the best's):"]
        met, errors, shares = 0, [], []
        for seed, s in zip(seeds, per_seed):
            static = s["static b=8"]
            ok = {k: v for k, v in s.items() if k.startswith("Δ=") and v["errors"] <= 1.01 * static["errors"]}
            best = min(ok, key=lambda k: ok[k]["bytes"]) if ok else None
            e = s[auto]["errors"] / static["errors"]
            share = s[auto]["bytes"] / ok[best]["bytes"] if best else float("nan")
            good = e <= 1.01 and share <= 1.5
            met, errors, shares = met + good, errors + [e], shares + [share]
            lines.append(f"- seed {seed}: errors {e:.3f}, bytes {s[auto]['bytes'] / static['bytes']:.3f} of static's; "
                         f"best Δ: {best.split()[0] if best else 'none within 1 %'}; auto's bytes / best's "
                         f"{share:.2f}: {'met' if good else 'not met'}")
        lines.append(f"- met on {met} of {len(per_seed)} seeds; medians: errors {np.median(errors):.3f}, "
                     f"bytes / best's {np.nanmedian(shares):.2f}")
    return lines


if __name__ == "__main__":
    main()
