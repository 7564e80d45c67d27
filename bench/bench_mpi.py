"""Benchmarks of the MPI runner (bench/README.md, section "MPI").

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_mpi.py [--section S] [--quick]
        [--reps N] [--epochs E]     # throughput: repeats (default 3) and passes over the shards (default 1)

Sections:

check       the local condition's cost per check, O(1) (``OnlineLearners.distances``),
            against the dense ‖w − r‖² it replaces, for n = 10³ … 10⁶; and the
            size of a model message after the same rows (grows with the
            coordinates touched, not with n); and what learning through quiet
            checks costs per 256-row block of the async loop, against learning
            the rows with no check. In-process.
throughput  per-rank throughput (rows/s of the training loop's wall time) at -n 2 against -n 1, protocols
            none and dynamic, on RCV1-scale shards (medians over alternating repeats); and the job's:
            rows per rank over the slowest rank's loop. The reference for -n 2 / -n 1: two
            one-rank jobs of none at once (no MPI between them), what this machine gives two
            processes.
share       share of wall time spent in MPI calls at -n 2: static b ∈ {1, 8, 128}, dynamic.
rcv1        RCV1-scale synthetic data in 2 shards: static b=8 against dynamic at several Δ;
            test error of the final model on held-out rows, and bytes.
skew        the round skew of async mode (rounds between the fastest and the slowest rank when rank 0
            starts a resolution) on `mpisgd demo`'s job (4 ranks, drifting disjunction), with the
            online error, for the runtime's knobs (--staleness, --pace); sync and
            static b=8 for reference.
straggler   one rank at half speed (bench/straggler.py): how much later the other ranks learn
            their last row, for none, static b=8 and dynamic async and sync, at -n 2 and -n 3
            (oversubscribed on 2 cores); async also with --poll-seconds 1000 (polls every
            --poll-rows rounds whatever they cost: the cadence before --poll-seconds).

Every job is ``mpiexec -n K python -m mpi4py -m mpisgd train ...`` and reads its report.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
ENV = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
LEARNER = ["--loss", "log", "--eta0", "1.0", "--lam", "1e-5", "--schedule", "constant", "--no-average"]


def train(ranks, args, out):
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train", *map(str, args),
           "--out", str(out), "--quiet", "--overwrite", "--timeline-every", "0"]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    return json.loads((Path(out) / "report.json").read_text())


def together(paths, args, out):
    """One one-rank job per shard, all at once: their reports."""
    cmds = [[MPIEXEC, "-n", "1", sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train", str(path), *map(str, args),
             "--out", f"{out}-{i}", "--quiet", "--overwrite", "--timeline-every", "0"] for i, path in enumerate(paths)]
    jobs = [subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for cmd in cmds]
    for cmd, job in zip(cmds, jobs):
        _, err = job.communicate(timeout=1800)
        if job.returncode != 0:
            raise SystemExit(f"failed: {' '.join(cmd)}\n{err[-2000:]}")
    return [json.loads((Path(f"{out}-{i}") / "report.json").read_text()) for i in range(len(paths))]


def section_check(quick):
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):  # as in an MPI rank
        _section_check(quick)


def _section_check(quick):
    from mpisgd.learners import OnlineLearners

    rng = np.random.default_rng(0)
    rows, nnz = 1000, 50
    print("\n## check: cost of one local-condition check vs n (in-process, one learner)\n")
    print("| n | O(1) check (µs) | dense ‖w − r‖² (µs) | message bytes after 1000 rows | dense message bytes |")
    print("|---:|---:|---:|---:|---:|")
    for n in (10**3, 10**4, 10**5, 10**6):
        L = OnlineLearners(1, n, loss="log", eta0=0.5, lam=1e-4)
        z = np.zeros(n + 2)
        z[rng.choice(n, 100, replace=False)] = rng.normal(size=100)
        z[n + 1] = 1.0
        L.set_reference(z)  # a non-zero reference
        indptr = np.arange(0, (rows + 1) * nnz, nnz, dtype=np.int64)
        indices = np.concatenate([np.sort(rng.choice(min(n, 5000), nnz, replace=False)) for _ in range(rows)])
        data = rng.random(rows * nnz)
        y = np.where(rng.random(rows) < 0.5, -1.0, 1.0)
        L.learn(indptr, indices.astype(np.int32), data, y, np.zeros(rows, np.int64))
        r, r_b = L.reference

        def dense():
            w, b = L.weights(0)
            d = w - r
            return float(d @ d + (b - r_b) ** 2)

        assert abs(dense() - L.distances()[0]) <= 1e-9 * max(1.0, dense())
        reps = 2000 if n <= 10**4 else 100
        times = {}
        for name, f in (("o1", L.distances), ("dense", dense)):
            samples = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(reps):
                    f()
                samples.append((time.perf_counter() - t) / reps * 1e6)
            times[name] = statistics.median(samples)
        print(f"| {n:,} | {times['o1']:.2f} | {times['dense']:.1f} | {len(L.message(0)):,} | {16 + 8 * n:,} |")
    section_quiet(quick)


def section_quiet(quick):
    """What learning through quiet checks costs: the async loop's block of 256 rows
    learned with a check every b rows that never finds a violator (the runner's
    own ``Run.learn_until_violation`` step: the checks' rounds, then one kernel
    call), against the same rows learned with no check (``OnlineLearners.learn``)."""
    from mpisgd.data.synthetic import RCV1Stream
    from mpisgd.learners import OnlineLearners

    stream = RCV1Stream(n_learners=1, seed=1)
    rows = 25_600 if quick else 102_400
    indptr, indices, data, y = stream.rows(0, rows)
    block = 256
    blocks = [(indptr[a : a + block + 1] - indptr[a], indices[indptr[a] : indptr[a + block]],
               data[indptr[a] : indptr[a + block]], y[a : a + block]) for a in range(0, rows, block)]
    owner = np.zeros(block, np.int64)

    def run(b):
        L = OnlineLearners(1, stream.n_features, loss="log", eta0=1.0, lam=1e-5)
        start, t = time.perf_counter(), 0
        for ip, ix, d, yy in blocks:
            if b is None:
                L.learn(ip, ix, d, yy, owner)
            else:  # as Run.learn_until_violation: the check points in (t, t + m], a finite Δ never reached
                checks = np.arange((t // b + 1) * b, t + block + 1, b)
                assert L.learn_until_violation(ip, ix, d, yy, owner, checks - t, 1e300) == (len(checks), False)
            t += block
        return (time.perf_counter() - start) / len(blocks) * 1e6

    periods = (None, 1, 8, 32)
    for b in periods:
        run(b)  # numba's first call
    times = {b: [] for b in periods}
    for _ in range(3 if quick else 9):  # alternate, so that load from others hits all alike
        for b in periods:
            times[b].append(run(b))
    plain = statistics.median(times[None])
    print(f"\n## quiet checks: one async block of {block} RCV1-scale rows, in-process, one learner "
          f"(medians of {len(times[None])} passes over {rows:,} rows)\n")
    print("| checks | µs per block | vs no check |")
    print("|---|---:|---:|")
    for b in periods:
        med = statistics.median(times[b])
        print(f"| {'none (learn)' if b is None else f'every {b} rows'} | {med:.1f} | {med / plain:.2f} |")


def make_shards(tmp, rounds):
    from mpisgd.data.synthetic import RCV1Stream, write_learner_shards

    return write_learner_shards(RCV1Stream(n_learners=2, seed=1), rounds, tmp, batch_rounds=5000)


def section_throughput(quick, tmp, reps=None, epochs=1):
    rounds = 20000 if quick else 100000
    paths = make_shards(tmp, rounds)
    reps = reps or (2 if quick else 3)
    print(f"\n## throughput: per-rank rows/s over the training loop (wall time from the first round to the "
          f"last, i.e. without start-up and the final sync), RCV1-scale shards ({rounds:,} rows each, "
          f"{epochs} epoch(s)), medians of {reps} alternating repeats [min, max]\n")
    # per rank: the median over ranks of each rank's own rows/s; job: rows per rank over the slowest
    # rank's loop, what the job takes (a rank that needs no other, as with none, is not held by the slowest)
    print(f"(load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)\n")
    print("| protocol | -n 1 rows/s | -n 2 rows/s per rank [min, max] | -n 2 / -n 1 | -n 1 vs none | -n 2 vs none | "
          "-n 2 job rows/s | -n 2 job vs none | -n 2 time in MPI calls | -n 2 bytes | -n 2 online error |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    # the issue's point: dynamic at ≤ 10 % of static b=8's bytes (Δ = 3,000 here), beside the defaults
    protocols = {"none": ["--protocol", "none"], "static b=8": ["--protocol", "static", "--period", "8"],
                 "dynamic (defaults)": ["--protocol", "dynamic"],
                 "dynamic Δ=3000 b=8": ["--protocol", "dynamic", "--delta", "3000", "--period", "8"],
                 "dynamic Δ=3000 b=8 sync": ["--protocol", "dynamic", "--delta", "3000", "--period", "8",
                                             "--mode", "sync"]}
    passes = ["--epochs", epochs]
    rows = {}
    # the machine's own ceiling for -n 2 / -n 1: two one-rank jobs of none at once, no MPI between them
    alone, pair = [], []
    for _ in range(reps):
        for path in paths:
            alone.append(train(1, [path, *LEARNER, *passes, "--protocol", "none"], Path(tmp) / "alone")["per_rank"][0])
        pair.extend(rank for rep in together(paths, [*LEARNER, *passes, "--protocol", "none"], Path(tmp) / "pair")
                    for rank in rep["per_rank"])
    one, two = (statistics.median(s["rows"] / s["time"]["loop"] for s in runs) for runs in (alone, pair))
    spread = [s["rows"] / s["time"]["loop"] for s in pair]
    print(f"| two one-rank jobs of none at once | {one:,.0f} | {two:,.0f} [{min(spread):,.0f}, {max(spread):,.0f}] "
          f"| {two / one:.2f} | – | – | – | – | – | – "
          f"| – |")
    for name, proto in protocols.items():
        per, job, share, nbytes, error = {1: [], 2: []}, [], [], [], []
        for _ in range(reps):  # alternate, so that load from others hits both alike
            for ranks, shards in ((1, paths[:1]), (2, paths)):
                rep = train(ranks, [*shards, *LEARNER, *passes, *proto], Path(tmp) / "tp")
                per[ranks].append(statistics.median(s["rows"] / s["time"]["loop"] for s in rep["per_rank"]))
                if ranks == 2:
                    slowest = max(s["time"]["loop"] for s in rep["per_rank"])
                    job.append(sum(s["rows"] for s in rep["per_rank"]) / ranks / slowest)
                    share.append(rep["time"]["communication"]["max"] / rep["time"]["wall"])
                    nbytes.append(rep["communication"]["total_bytes"])
                    error.append(rep["online"]["error_rate"])
        rows[name] = (statistics.median(per[1]), statistics.median(per[2]), (min(per[2]), max(per[2])),
                      statistics.median(job), statistics.median(share), statistics.median(nbytes),
                      statistics.median(error))
    for name, (one, two, (low, high), job, share, nbytes, error) in rows.items():
        print(f"| {name} | {one:,.0f} | {two:,.0f} [{low:,.0f}, {high:,.0f}] | {two / one:.2f} | {one / rows['none'][0]:.2f} | "
              f"{two / rows['none'][1]:.2f} | {job:,.0f} | {job / rows['none'][3]:.2f} | {100 * share:.0f} % | "
              f"{nbytes:,.0f} | {error:.4f} |")


def section_share(quick, tmp):
    rounds = 20000 if quick else 30000
    paths = make_shards(tmp, rounds)
    print(f"\n## share: time in MPI calls at -n 2, RCV1-scale shards ({rounds:,} rounds)\n")
    print("| protocol | wall s | MPI s (max over ranks) | share | bytes | full syncs |")
    print("|---|---:|---:|---:|---:|---:|")
    for proto in (["static", "--period", "1"], ["static", "--period", "8"], ["static", "--period", "128"],
                  ["dynamic", "--period", "8", "--delta", "10"]):
        rep = train(2, [*paths, *LEARNER, "--protocol", *proto], Path(tmp) / "sh")
        wall = rep["time"]["wall"]
        comm = rep["time"]["communication"]["max"]
        print(f"| {' '.join(proto)} | {wall:.2f} | {comm:.2f} | {100 * comm / wall:.1f} % | "
              f"{rep['communication']['total_bytes']:,} | {rep['protocol']['full_syncs']['total']} |")


def section_rcv1(quick, tmp):
    from mpisgd.data.synthetic import rcv1_like
    from mpisgd.model import LinearModel

    rounds = 20000 if quick else 100000
    paths = make_shards(tmp, rounds)
    _Xtr, _ytr, X_test, y_test = rcv1_like(0, 20000, seed=1)
    print(f"\n## rcv1: 2 shards × {rounds:,} rows, n = 47,152; test error on 20,000 held-out rows\n")
    print("| protocol | test error | online error | bytes | bytes / static b=8 | full syncs | balancings |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    runs = [["static", "--period", "8"]] + [["dynamic", "--period", "8", "--delta", str(d)]
                                           for d in (1, 3, 10, 30, 100)]
    results = []
    for proto in runs:
        out = Path(tmp) / "rc"
        rep = train(2, [*paths, *LEARNER, "--protocol", *proto], out)
        err = LinearModel.load(out / "model.h5").evaluate(X_test, y_test)["error"]
        results.append((proto, rep, err))
    base_bytes, base_err = results[0][1]["communication"]["total_bytes"], results[0][2]
    for proto, rep, err in results:
        nbytes = rep["communication"]["total_bytes"]
        print(f"| {' '.join(proto)} | {err:.4f} | {rep['online']['error_rate']:.4f} | {nbytes:,} | "
              f"{100 * nbytes / base_bytes:.1f} % | {rep['protocol']['full_syncs']['total']} | "
              f"{rep['protocol']['balancings']} |")
    ok = [(p, r, e) for p, r, e in results[1:] if e <= base_err]
    if ok:
        p, r, e = min(ok, key=lambda x: x[1]["communication"]["total_bytes"])
        print(f"\ncheapest dynamic run at or below static b=8's test error: {' '.join(p)}, "
              f"{100 * r['communication']['total_bytes'] / base_bytes:.1f} % of its bytes")
    else:
        print("\nno dynamic run reached static b=8's test error")


STRAGGLER = Path(__file__).resolve().parent / "straggler.py"


def train_slowed(ranks, slow_rank, args, out, row_seconds=0.0):
    """``train`` through bench/straggler.py, every row costing ``row_seconds`` more and rank
    ``slow_rank``'s twice that (-1: none); (report, {rank: seconds from the loop's start to
    its last row learned})."""
    out = Path(out)
    cmd = [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "mpi4py", str(STRAGGLER), str(slow_rank), "2",
           str(row_seconds), str(out) + ".last", "train", *map(str, args), "--out", str(out), "--quiet", "--overwrite",
           "--timeline-every", "0"]
    env = dict(ENV, PYTHONPATH=os.pathsep.join([str(STRAGGLER.parents[1]), ENV.get("PYTHONPATH", "")]))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{done.stderr[-2000:]}")
    last = {r: json.loads(Path(f"{out}.last.{r}").read_text())["last_row"] for r in range(ranks)}
    return json.loads((out / "report.json").read_text()), last


def section_straggler(quick, tmp):
    from mpisgd.data.synthetic import RCV1Stream, write_learner_shards

    # rows costly enough (2.5 ms: a much heavier model) that learning, not MPI latency on a loaded
    # machine, sets the pace
    rounds, reps, row_seconds = (1000, 1, 2.5e-3) if quick else (2000, 3, 2.5e-3)
    protocols = {"none": ["--protocol", "none"], "static b=8": ["--protocol", "static", "--period", "8"],
                 "dynamic Δ=10 b=8 async": ["--protocol", "dynamic", "--delta", "10", "--period", "8"],
                 "dynamic Δ=10 b=8 async --poll-seconds 1000": ["--protocol", "dynamic", "--delta", "10",
                                                               "--period", "8", "--poll-seconds", "1000"],
                 "dynamic Δ=10 b=8 sync": ["--protocol", "dynamic", "--delta", "10", "--period", "8",
                                           "--mode", "sync"]}
    print(f"\n## straggler: every row costs {row_seconds * 1e6:.0f} µs more (a sleep), the last rank's twice that "
          f"(half speed); the others' time to their last row, against the same run without a straggler "
          f"(RCV1-scale shards, {rounds:,} rows per rank, medians of {reps}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)\n")
    print("| ranks | protocol | others' last row s, no straggler | with one at half speed | slowdown of the "
          "others | straggler's own | checks (async: resolutions) | full syncs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for ranks in (2, 3):
        label = f"-n {ranks}" + (" (oversubscribed)" if ranks > (os.cpu_count() or 1) else "")
        paths = write_learner_shards(RCV1Stream(n_learners=ranks, seed=1), rounds, Path(tmp) / f"k{ranks}",
                                     batch_rounds=5000)
        for name, proto in protocols.items():
            times = {-1: [], ranks - 1: []}
            straggler, checks, syncs = [], [], []
            for _ in range(reps):  # alternate, so that load from others hits both alike
                for slow_rank in (-1, ranks - 1):
                    rep, last = train_slowed(ranks, slow_rank, [*paths, *LEARNER, *proto], Path(tmp) / "st",
                                             row_seconds)
                    times[slow_rank].append(max(last[r] for r in range(ranks - 1)))
                    if slow_rank >= 0:
                        straggler.append(last[slow_rank])
                        checks.append(rep["protocol"]["checks"] if name.startswith("dynamic") else 0)
                        syncs.append(rep["protocol"]["full_syncs"]["total"])
            base, slowed = statistics.median(times[-1]), statistics.median(times[ranks - 1])
            print(f"| {label} | {name} | {base:.2f} | {slowed:.2f} | {slowed / base:.2f} | "
                  f"{statistics.median(straggler):.2f} | {statistics.median(checks):.0f} | "
                  f"{statistics.median(syncs):.0f} |", flush=True)


DEMO = ["--synthetic", "disjunction", "--rounds", 6000, "--features", 100, "--drift-prob", 0.001, "--seed", 0,
        "--loss", "log", "--eta0", "1.0", "--lam", "0.0", "--schedule", "constant", "--no-average"]  # mpisgd demo's job
DEMO_DYNAMIC = ["--protocol", "dynamic", "--delta", 6, "--period", 8]


def skews(ranks, out):
    """Rounds between the fastest and the slowest rank at each resolution's
    start (rank 0's clock; a rank's round is the last one it had reached)."""
    traces = [json.loads(Path(f"{out}.last.{r}").read_text()) for r in range(ranks)]
    clocks = [np.array([c for c, _t in tr["rounds"]]) for tr in traces]
    rounds = [np.array([t for _c, t in tr["rounds"]]) for tr in traces]
    starts = np.array(traces[0]["resolutions"])
    at = np.array([r[np.maximum(np.searchsorted(c, starts, side="right") - 1, 0)] for c, r in zip(clocks, rounds)])
    return at.max(axis=0) - at.min(axis=0) if len(starts) else np.zeros(0)


def section_skew(quick, tmp):
    ranks, reps = 4, (1 if quick else 3)
    variants = {"static b=8": ["--protocol", "static", "--period", 8],
                "dynamic sync": [*DEMO_DYNAMIC, "--mode", "sync"],
                "dynamic async (defaults: --staleness 0, --pace 256, --poll-rows 256)": DEMO_DYNAMIC,
                "async --pace 0 (no pacing)": [*DEMO_DYNAMIC, "--pace", 0],
                "async --staleness 8": [*DEMO_DYNAMIC, "--staleness", 8],
                "async --staleness 8 --pace 0 (the defaults before pacing)": [*DEMO_DYNAMIC, "--staleness", 8,
                                                                               "--pace", 0]}
    print(f"\n## skew: round skew at each async resolution, `mpisgd demo`'s job ({ranks} ranks on "
          f"{os.cpu_count()} cores, medians of {reps} runs)\n")
    print("| run | online error | resolutions | skew median | skew p90 | skew max | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, proto in variants.items():
        errors, counts, med, p90, top, wall = [], [], [], [], [], []
        for _ in range(reps):
            out = Path(tmp) / "sk"
            rep, _last = train_slowed(ranks, -1, [*DEMO, *proto], out)
            errors.append(rep["online"]["error_rate"])
            wall.append(rep["time"]["wall"])
            if "async" in name:
                s = skews(ranks, out)
                counts.append(len(s))
                med.append(float(np.median(s)) if len(s) else 0.0)
                p90.append(float(np.percentile(s, 90)) if len(s) else 0.0)
                top.append(float(s.max()) if len(s) else 0.0)
        m = statistics.median
        cells = (f"{m(counts):.0f} | {m(med):.0f} | {m(p90):.0f} | {m(top):.0f}" if counts else "– | – | – | –")
        print(f"| {name} | {m(errors):.4f} | {cells} | {m(wall):.2f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=("all", "check", "throughput", "share", "rcv1", "skew", "straggler"), default="all")
    parser.add_argument("--quick", action="store_true", help="smaller data (a smoke run)")
    parser.add_argument("--reps", type=int, help="throughput: alternating repeats of each job (default 3, 2 with --quick)")
    parser.add_argument("--epochs", type=int, default=1, help="throughput: passes over the shards (default 1)")
    args = parser.parse_args()
    sections = ("check", "throughput", "share", "rcv1", "skew", "straggler") if args.section == "all" else (args.section,)
    with tempfile.TemporaryDirectory(prefix="bench-mpi-") as tmp:
        for name in sections:
            sub = Path(tmp) / name
            sub.mkdir()
            start = time.perf_counter()
            if name == "check":
                section_check(args.quick)
            else:
                extra = {"reps": args.reps, "epochs": args.epochs} if name == "throughput" else {}
                globals()[f"section_{name}"](args.quick, str(sub), **extra)
            print(f"\n({name}: {time.perf_counter() - start:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
