"""``mpisgd demo``: the main job on built-in data.

Kamp et al.'s drifting random disjunction on 4 ranks (one learner each),
trained four times on the same streams: no synchronization, static
synchronization every 8 rounds, and the dynamic protocol, checking its local
conditions every 6 rounds, in its default (async) mode and in its
deterministic sync mode. A quiet check costs nothing, so the dynamic protocol
can check more often than static b=8 syncs: at b = 6 its median error over
runs stays within 3 % of static b=8's (single runs vary), at b = 8 it does not
(docs/ALGORITHMS.md §4.5, docs/RESULTS.md). With the default hedge
(``--hedge auto``) 4 learners use the authors' later hedge: each violation
is then one full sync (nonblocking collectives), with no model sent to rank
0, instead of balance requests through it (docs/ALGORITHMS.md §4.5). Each run is
``mpiexec -n 4 python -m mpi4py -m mpisgd train --synthetic disjunction ...``
(the mpiexec next to this Python); the table compares their online error,
messages, bytes and wall time, from each run's report.json, and ``mpisgd
compare`` draws the figures into --out when matplotlib is installed (the
``plot`` extra; without it the demo says how to get them and still succeeds).
"""

HELP = "the main job: none vs static vs dynamic synchronization on a drifting disjunction, 4 ranks"

RUNS = (
    ("none", ["--protocol", "none"]),
    ("static b=8", ["--protocol", "static", "--period", "8"]),
    ("dynamic", []),  # + Δ and b from the options
    ("dynamic sync", ["--mode", "sync"]),
)


def add_arguments(parser):
    parser.add_argument("--ranks", "-n", type=int, default=4, help="MPI ranks (learners)")
    parser.add_argument("--rounds", type=int, default=6000, help="rounds T (examples per learner)")
    parser.add_argument("--features", type=int, default=100, help="n of the disjunction")
    parser.add_argument("--drift-prob", type=float, default=0.001, help="target redraw probability per round")
    from mpisgd.commands.options import delta_value
    from mpisgd.protocol import AUTO, HEDGES

    parser.add_argument("--delta", type=delta_value, default="auto",
                        help="Δ of the dynamic protocol: the squared distance from the last synced model "
                        "a learner may drift before it reports a violation (default: auto, Δ scaled "
                        "from the step size and the first rounds' gradients)")
    parser.add_argument("--hedge", choices=HEDGES, default=AUTO,
                        help="how the dynamic protocol answers violations: counter (Kamp et al.: a full "
                        "sync after k violations), half (balance within a growing random set), or auto "
                        "(half for a few learners, where each violation is one full sync; else counter)")
    parser.add_argument("--period", type=int, default=6, help="check period b of the dynamic protocol (default 6)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the streams")
    parser.add_argument("--out", metavar="DIR", default="runs/demo", help="where each run writes its outputs")
    parser.add_argument("--mpiexec", default=None,
                        help="launcher (default: the mpiexec beside this Python, else mpiexec on PATH)")
    parser.add_argument("--quiet", "-q", action="store_true", help="print only the table")


def mpiexec_path(explicit=None):
    """The venv's mpiexec (beside sys.executable), else the one on PATH."""
    import os
    import shutil
    import sys

    from mpisgd.errors import MpisgdError

    if explicit:
        return explicit
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(beside):
        return beside
    found = shutil.which("mpiexec")
    if not found:
        raise MpisgdError("demo: no mpiexec beside this Python nor on PATH (pip install mpich, or --mpiexec)")
    return found


def table(rows):
    """The comparison table: one line per run."""
    head = f"{'protocol':<13} {'online error':>12} {'errors':>8} {'messages':>9} {'model msgs':>10} " \
           f"{'bytes':>11} {'full syncs':>10} {'wall s':>7}"
    lines = [head, "-" * len(head)]
    for name, r in rows:
        on, c, p = r["online"], r["communication"], r["protocol"]
        lines.append(
            f"{name:<13} {on['error_rate']:>12.4f} {on['errors']:>8d} {c['total_messages']:>9d} "
            f"{c['model_messages_paper']['total']:>10d} {c['total_bytes']:>11d} "
            f"{p['full_syncs']['total']:>10d} {r['time']['wall']:>7.2f}"
        )
    return lines


def run(args):
    import os
    import shutil
    import subprocess
    import sys
    import time

    from mpisgd.defaults import PAPER
    from mpisgd.errors import MpisgdError
    from mpisgd.metrics import read_report

    launcher = mpiexec_path(args.mpiexec)
    learner = ["--loss", PAPER["loss"], "--eta0", str(PAPER["eta0"]), "--lam", str(PAPER["lam"]),
               "--schedule", PAPER["schedule"], "--average" if PAPER["average"] else "--no-average"]
    common = ["--synthetic", "disjunction", "--rounds", str(args.rounds), "--features", str(args.features),
              "--drift-prob", str(args.drift_prob), "--seed", str(args.seed), *learner, "--timeline-every", "100"]
    dynamic = ["--protocol", "dynamic", "--delta", str(args.delta), "--period", str(args.period),
               "--hedge", args.hedge]
    runs = [(name, dynamic + opts if name.startswith("dynamic") else opts) for name, opts in RUNS]
    env = dict(os.environ)
    for var in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")  # one thread per rank
    if not args.quiet:
        print(f"mpisgd demo: drifting disjunction, n={args.features}, {args.ranks} ranks x {args.rounds} rounds, "
              f"drift probability {args.drift_prob}, logistic loss, eta=1, lambda=0; dynamic: "
              f"--delta {args.delta} --hedge {args.hedge} --period {args.period}", flush=True)
    # Compile (or load) numba's cache once, so that the ranks do not race to write it.
    warm = [sys.executable, "-m", "mpisgd", "train", "--synthetic", "disjunction", "--rounds", "64", *learner,
            "--protocol", "dynamic", "--quiet", "--overwrite", "--out", os.path.join(args.out, "warm-up")]
    if subprocess.run(warm, env=env).returncode != 0:
        raise MpisgdError(f"demo: the warm-up run failed: {' '.join(warm)}")
    shutil.rmtree(os.path.join(args.out, "warm-up"), ignore_errors=True)
    results, outs = [], []
    for name, opts in runs:
        out = os.path.join(args.out, name.replace(" b=", "").replace(" ", "-"))
        cmd = [launcher, "-n", str(args.ranks), sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train",
               *common, *opts, "--out", out, "--quiet", "--overwrite"]
        if not args.quiet:
            print(f"mpisgd demo: running {name}: {' '.join(cmd)}", flush=True)
        start = time.perf_counter()
        done = subprocess.run(cmd, env=env)
        if done.returncode != 0:
            raise MpisgdError(f"demo: the {name} run failed (exit {done.returncode}): {' '.join(cmd)}")
        if not args.quiet:
            print(f"mpisgd demo: {name} done in {time.perf_counter() - start:.1f}s, outputs in {out}", flush=True)
        results.append((name, read_report(os.path.join(out, "report.json"))))
        outs.append(out)
    print()
    for line in table(results):
        print(line)
    base, static = (r["online"]["errors"] for _n, r in results[:2])
    static_c, static_wall = results[1][1]["communication"], results[1][1]["time"]["wall"]
    if base != static:
        for name, r in results[2:]:
            kept = (base - r["online"]["errors"]) / (base - static)
            c = r["communication"]
            print(f"{name}: keeps {100 * kept:.1f} % of static b=8's error reduction over none, with "
                  f"{100 * c['total_bytes'] / max(1, static_c['total_bytes']):.1f} % of its bytes, "
                  f"{100 * c['total_messages'] / max(1, static_c['total_messages']):.1f} % of its messages and "
                  f"{100 * r['time']['wall'] / static_wall:.0f} % of its wall time")
    try:
        import matplotlib  # noqa: F401  (the plot extra)
    except ImportError:
        print("figures skipped: matplotlib is not installed (pip install 'mpisgd[plot]' to draw them)")
        return 0
    from mpisgd.commands.compare import compare

    _text, paths = compare(outs, args.out)
    print(f"figures (error against bytes, against wall time, over rounds): {', '.join(paths)}")
    return 0
