"""Data pipeline benchmarks: LIBSVM parsing, parallel parsing, shard
compression, shard reading against the SGD kernel, peak memory.

    NUMBA_NUM_THREADS=1 .venv/bin/python bench/bench_data.py [--workdir DIR] [--repeats 3]
        [--sections parse,parallel,prep,compression,read,share,rss]

The input is the RCV1-scale training set of ``rcv1_like`` (781,265 rows,
47,152 features, seed 0) written as LIBSVM text (about 1 GB) into
``--workdir`` once and reused. Every figure is the median of ``--repeats``
runs, with the spread (max/min) beside it; the references (scikit-learn's
``load_svmlight_file``, the SGD kernel) are measured in the same run.
Prints markdown tables for bench/README.md, section "Data".
"""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

N_TRAIN, N_FEATURES = 781265, 47152
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable


def _median(xs):
    return statistics.median(xs), max(xs) / min(xs)


def _timed(fn, repeats, cpu=None):
    """Wall times of ``repeats`` calls (and their thread CPU times into ``cpu``)."""
    out, times = None, []
    for _ in range(repeats):
        c = time.thread_time()
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
        if cpu is not None:
            cpu.append(time.thread_time() - c)
    return out, times


def make_input(workdir):
    """The 1 GB text (and a 100 MB slice of its first lines), made once."""
    from mpisgd.data.libsvm import write_svmlight
    from mpisgd.data.synthetic import rcv1_like

    path = os.path.join(workdir, "rcv1_like_train.svm")
    if not os.path.exists(path):
        t = time.perf_counter()
        X, y, _, _ = rcv1_like(N_TRAIN, 0, N_FEATURES, seed=0)
        write_svmlight(path, X, y)
        print(f"# wrote {path} ({os.path.getsize(path) / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t:.1f} s")
    small = os.path.join(workdir, "rcv1_like_100MB.svm")
    if not os.path.exists(small):
        with open(path, "rb") as f:
            head = f.read(100_000_000)
        with open(small, "wb") as f:
            f.write(head[: head.rfind(b"\n") + 1])
    return path, small


def bench_parse(path, small, repeats):
    from sklearn.datasets import load_svmlight_file

    from mpisgd.data.libsvm import load_svmlight

    load_svmlight(small, n_features=N_FEATURES)  # compile
    rows = []
    jobs = [("mpisgd load_svmlight, 1 GB", path, load_svmlight),
            ("mpisgd load_svmlight, 100 MB slice", small, load_svmlight),
            ("sklearn load_svmlight_file, 100 MB slice", small, load_svmlight_file)]
    for name, p, fn in jobs:
        mb = os.path.getsize(p) / 1e6
        cpu = []
        _, ts = _timed(lambda p=p, fn=fn: fn(str(p), n_features=N_FEATURES), repeats, cpu)
        med, spread = _median(ts)
        rows.append((name, mb, med, mb / med, mb / statistics.median(cpu), spread))
    print("\n| parser (one core) | input MB | median wall s | MB/s (wall) | MB/s (CPU) | spread |"
          "\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]:.0f} | {r[2]:.2f} | {r[3]:.0f} | {r[4]:.0f} | {r[5]:.2f} |")
    print(f"\nratio mpisgd / sklearn on the same 100 MB slice: {rows[1][3] / rows[2][3]:.1f}× "
          f"(wall), {rows[1][4] / rows[2][4]:.1f}× (CPU)")


def _parallel_worker(path):
    """Under mpiexec: each rank parses its byte range; rank 0 prints the times."""
    from mpi4py import MPI

    from mpisgd.data import libsvm, textio
    from mpisgd.data.partition import block_range

    comm = MPI.COMM_WORLD
    size = textio.text_size(path)
    lo, hi = block_range(size, comm.size, comm.rank)
    list(libsvm.iter_parsed(path, n_features=N_FEATURES, start=0, stop=1 << 20))  # compile
    comm.Barrier()
    t = time.perf_counter()
    rows = sum(st.rows for *_, st in libsvm.iter_parsed(path, n_features=N_FEATURES,
                                                        start=lo, stop=hi))
    dt = time.perf_counter() - t
    times = comm.gather(dt)
    rows = comm.reduce(rows)
    if comm.rank == 0:
        print(json.dumps({"ranks": comm.size, "max_s": max(times), "rows": rows,
                          "mb": size / 1e6}))


def bench_parallel(path, repeats):
    mpiexec = os.path.join(os.path.dirname(PY), "mpiexec")
    print("\n| ranks | median s (slowest rank) | MB/s total | speed-up | spread |"
          "\n|---|---|---|---|---|")
    base = None
    for ranks in (1, 2, 3):
        ts = []
        for _ in range(repeats):
            out = subprocess.run([mpiexec, "-n", str(ranks), PY, __file__, "--parallel-worker",
                                  path], capture_output=True, text=True, check=True).stdout
            rec = json.loads(out.strip().splitlines()[-1])
            ts.append(rec["max_s"])
        med, spread = _median(ts)
        base = base or med
        print(f"| {ranks} | {med:.2f} | {rec['mb'] / med:.0f} | {base / med:.2f} | "
              f"{spread:.2f} |")


def bench_prep(path, workdir, repeats):
    """``mpisgd prep`` end to end (text → 4 shards) at 1 and 2 ranks, beside the parser alone."""
    import resource
    import shutil

    from mpisgd.data import libsvm

    mb = os.path.getsize(path) / 1e6
    parse = []
    for _ in range(repeats):
        c = time.thread_time()
        for _chunk in libsvm.iter_parsed(path, n_features=N_FEATURES):
            pass
        parse.append(time.thread_time() - c)
    mpiexec = os.path.join(os.path.dirname(PY), "mpiexec")
    out = os.path.join(workdir, "prep-out")
    print(f"\n| prep {os.path.basename(path)} → 4 shards | median wall s | MB/s (wall) | "
          f"CPU s per rank | MB/s (CPU per rank) | speed-up (CPU) | spread (wall) |"
          f"\n|---|---|---|---|---|---|---|")
    parse_cpu = statistics.median(parse)
    print(f"| parser alone (1 rank, reference) | | | {parse_cpu:.2f} | {mb / parse_cpu:.0f} | | "
          f"{max(parse) / min(parse):.2f} |")
    base = None
    for ranks in (1, 2):
        walls, cpus = [], []
        for _ in range(repeats):
            shutil.rmtree(out, ignore_errors=True)
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            subprocess.run([mpiexec, "-n", str(ranks), PY, "-m", "mpi4py", "-m", "mpisgd", "prep",
                            path, "--shards", "4", "--out", out, "--n-features", str(N_FEATURES)],
                           capture_output=True, text=True, check=True)
            walls.append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append((after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
                        / ranks)
        shutil.rmtree(out, ignore_errors=True)
        wall, spread = _median(walls)
        cpu = statistics.median(cpus)
        base = base or cpu
        print(f"| mpisgd prep, {ranks} rank{'s' if ranks > 1 else ''} | {wall:.2f} | "
              f"{mb / wall:.0f} | {cpu:.2f} | {mb / cpu:.0f} | {base / cpu:.2f} | {spread:.2f} |")


def _shard_from_text(path, rows, out, compression, dtype="float64"):
    from mpisgd.data.libsvm import load_svmlight
    from mpisgd.data.shard import write_shard

    X, y = load_svmlight(path, n_features=N_FEATURES)
    X = X[:rows] if rows else X
    t = time.perf_counter()
    write_shard(out, X, y[: X.shape[0]], dtype=dtype, compression=compression)
    return time.perf_counter() - t, X.nnz


def _read_all(paths, block_rows=8192, readahead=0):
    from mpisgd.data.reader import iter_blocks

    nnz = 0
    for b in iter_blocks(paths, block_rows, readahead=readahead):
        nnz += len(b.data)
    return nnz


def bench_compression(small, workdir, repeats):
    from mpisgd.data import shard as shard_mod

    print("\n| compression | shard MB | write s | read M nnz/s, first pass (median) | spread |"
          "\n|---|---|---|---|---|")

    def cold(out):
        shard_mod._VERIFIED.clear()  # as in a fresh process: checksums verified again
        return _read_all([out])

    for comp in ("none", "lzf", "gzip"):
        out = os.path.join(workdir, f"comp-{comp}.h5")
        wt, nnz = _shard_from_text(small, 0, out, comp)
        cold(out)
        _, ts = _timed(lambda: cold(out), repeats)
        med, spread = _median(ts)
        print(f"| {comp} | {os.path.getsize(out) / 1e6:.0f} | {wt:.2f} | {nnz / med / 1e6:.0f} | "
              f"{spread:.2f} |")
        os.unlink(out)


def bench_read(path, workdir, repeats):
    """Reader throughput against the SGD kernel, and the time a training loop
    waits for blocks (the reader reads ahead on its thread)."""
    import numba

    from mpisgd.data import shard as shard_mod
    from mpisgd.data.reader import iter_blocks
    from mpisgd.data.shard import open_shard
    from mpisgd.kernels import losses, schedules, sgd

    shard = os.path.join(workdir, "rcv1_like_train.h5")
    if not os.path.exists(shard):
        _shard_from_text(path, 0, shard, "none")
    with open_shard(shard) as s:
        n_features, nnz_total = s.n_features, s.nnz
    # The project's kernel holds the GIL while it runs; the same code compiled
    # with nogil=True lets the reading thread run beside it.
    epoch_nogil = numba.njit(nogil=True)(sgd.sgd_epoch.py_func)
    configs = {
        "hinge SGD": (losses.HINGE, False),
        "log ASGD": (losses.LOG, True),
    }

    def kernel(fn, b, v, a, st, loss, average):
        order = np.arange(len(b.y), dtype=np.int64)
        fn(b.indptr, b.indices, b.data, b.y, np.ones(len(b.y)), order, loss, 0.0, schedules.BOTTOU, 1.0, 1e-5,
           0.0, 0.75, 0.01, True, False, average, 0, v, a, st)

    blocks = list(iter_blocks([shard], 8192, readahead=0))[:40]  # in memory, for the kernel
    sub = sum(len(b.data) for b in blocks)
    rates = {}
    for name, (loss, average) in configs.items():
        v, a, st = np.zeros(n_features), np.zeros(n_features), sgd.new_state()
        kernel(sgd.sgd_epoch, blocks[0], v, a, st, loss, average)
        kernel(epoch_nogil, blocks[0], v, a, st, loss, average)

        def run(name=name, loss=loss, average=average):
            for b in blocks:
                kernel(sgd.sgd_epoch, b, v, a, st, loss, average)

        _, kt = _timed(run, repeats)
        rates[name] = (sub / statistics.median(kt), max(kt) / min(kt))
    reads = {}

    def cold_read(B):
        shard_mod._VERIFIED.clear()  # as in a fresh process: checksums verified again
        return _read_all([shard], B)

    for B in (8192, 65536):
        for label, fn in (("first pass", cold_read), ("later pass", lambda B: _read_all([shard], B))):
            cold_read(B)
            _, rt = _timed(lambda B=B, fn=fn: fn(B), repeats)
            reads[(B, label)] = (nnz_total / statistics.median(rt), max(rt) / min(rt))

    def train(fn, loss, average, readahead, B=8192):
        v, a, st = np.zeros(n_features), np.zeros(n_features), sgd.new_state()
        wait = 0.0
        shard_mod._VERIFIED.clear()
        t0 = time.perf_counter()
        it = iter(iter_blocks([shard], B, readahead=readahead))
        while True:
            t = time.perf_counter()
            b = next(it, None)
            wait += time.perf_counter() - t
            if b is None:
                break
            kernel(fn, b, v, a, st, loss, average)
        total = time.perf_counter() - t0
        return wait / total, total

    print("\n| measure | median | spread |\n|---|---|---|")
    for name, (rate, spread) in rates.items():
        print(f"| kernel {name} (sgd_epoch, in memory), M nnz/s | {rate / 1e6:.0f} | "
              f"{spread:.2f} |")
    for (B, label), (rate, spread) in reads.items():
        print(f"| shard reader, {B}-row blocks, {label}, M nnz/s | {rate / 1e6:.0f} | "
              f"{spread:.2f} |")
    for name, (rate, _) in rates.items():
        print(f"| reader (8192 rows, first pass) / kernel {name} | "
              f"{reads[(8192, 'first pass')][0] / rate:.1f}× | |")
    for name, (loss, average) in configs.items():
        for label, fn, ra, B in (("kernel as is (holds the GIL)", sgd.sgd_epoch, 2, 8192),
                                 ("kernel as is, 65536-row blocks", sgd.sgd_epoch, 2, 65536),
                                 ("kernel compiled nogil=True", epoch_nogil, 2, 8192),
                                 ("no read-ahead", sgd.sgd_epoch, 0, 8192)):
            runs = [train(fn, loss, average, ra, B) for _ in range(repeats)]
            fr = [r[0] for r in runs]
            tt = statistics.median(r[1] for r in runs)
            print(f"| training pass, {name}, {label}: time waiting for blocks "
                  f"(of {tt:.2f} s) | {100 * statistics.median(fr):.0f} % | "
                  f"{max(fr) / max(min(fr), 1e-9):.2f} |")


def bench_share(path, workdir, repeats, epochs=5):
    """Reading as a share of training: ``epochs`` passes over the 1 GB shard in
    8192-row blocks with the project's kernel between blocks, the first pass in
    a fresh state (every checksum verified, as in a new process). Without
    read-ahead everything runs on the calling thread, so its CPU time splits
    exactly into reading and kernel; with the runner's read-ahead of 2 blocks,
    the wall time the loop waits for blocks. Two ways of reading the passes:
    one ``iter_blocks([shard] * epochs)`` stream, as ``mpisgd train --epochs``
    reads (``ShardSource``), and a new ``iter_blocks([shard])`` per pass (a
    reader opened afresh for every epoch); the stream also with
    ``resident_mb=1024`` (``mpisgd train``'s default ``--resident-mb``: the
    shard stays mapped between its passes). A pass's reading time is
    the waits for its blocks (the first one's included) and for the end."""
    from mpisgd.data import shard as shard_mod
    from mpisgd.data.reader import iter_blocks
    from mpisgd.data.shard import open_shard
    from mpisgd.kernels import losses, schedules, sgd

    shard = os.path.join(workdir, "rcv1_like_train.h5")
    if not os.path.exists(shard):
        _shard_from_text(path, 0, shard, "none")
    with open_shard(shard) as s:
        n_features = s.n_features

    import inspect

    has_resident = "resident_mb" in inspect.signature(iter_blocks).parameters

    def run(loss, average, readahead, stream, resident=0):
        v, a, st = np.zeros(n_features), np.zeros(n_features), sgd.new_state()
        shard_mod._VERIFIED.clear()
        clock = time.thread_time if readahead == 0 else time.perf_counter
        read, work = [0.0] * epochs, [0.0] * epochs
        kw = {"resident_mb": resident} if resident else {}
        one = iter(iter_blocks([shard] * epochs, 8192, readahead=readahead, **kw)) if stream else None
        for e in range(epochs):
            it = one if stream else iter(iter_blocks([shard], 8192, readahead=readahead))
            while True:
                t = clock()
                b = next(it, None)
                if b is not None and b.shard > e:  # the next pass's first block
                    read[e + 1] += clock() - t
                    break
                read[e] += clock() - t
                if b is None:
                    break
                t = clock()
                sgd.sgd_epoch(b.indptr, b.indices, b.data, b.y, np.ones(len(b.y)),
                              np.arange(len(b.y)), loss, 0.0, schedules.BOTTOU, 1.0, 1e-5, 0.0, 0.75, 0.01, True, False,
                              average, 0, v, a, st)
                work[e] += clock() - t
            if stream and b is not None:  # train on the block that ended the loop
                t = clock()
                sgd.sgd_epoch(b.indptr, b.indices, b.data, b.y, np.ones(len(b.y)),
                              np.arange(len(b.y)), loss, 0.0, schedules.BOTTOU, 1.0, 1e-5, 0.0, 0.75, 0.01, True, False,
                              average, 0, v, a, st)
                work[e + 1] += clock() - t
        return read, work

    print(f"\n| {epochs} passes over the 1 GB shard | reading, first pass s | reading, later "
          f"passes s (sum) | kernel s (sum) | reading / (reading + kernel) | spread |"
          f"\n|---|---|---|---|---|---|")
    for stream, resident, how in ((True, 1024, f"one stream over [shard] × {epochs}, resident_mb=1024"),
                                  (True, 0, f"one stream over [shard] × {epochs}"),
                                  (False, 0, "iter_blocks per pass")):
        if resident and not has_resident:
            continue
        for name, loss, average in (("hinge SGD", losses.HINGE, False),
                                    ("log ASGD", losses.LOG, True)):
            for readahead, label in ((0, "CPU of the thread, no read-ahead"),
                                     (2, "wall, read-ahead 2 (waiting)")):
                run(loss, average, readahead, stream, resident)  # warm: compiled, file in the page cache
                runs = [run(loss, average, readahead, stream, resident) for _ in range(repeats)]
                shares = [sum(r) / (sum(r) + sum(w)) for r, w in runs]
                med = sorted(range(repeats), key=lambda k: shares[k])[repeats // 2]
                r, w = runs[med]
                print(f"| {how}: {name}, {label} | {r[0]:.3f} | {sum(r[1:]):.3f} | "
                      f"{sum(w):.3f} | {100 * shares[med]:.1f} % | "
                      f"{max(shares) / max(min(shares), 1e-9):.2f} |")


# Peak RSS from /proc/self/status (VmHWM): ru_maxrss would include the parent's
# high-water mark, which Linux carries across fork and exec.
HWM = "int([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]) / 1024"
RSS_CONVERT = f"""
import sys, time
from mpisgd.cli import main
t = time.perf_counter()
rc = main(["prep", sys.argv[1], "--out", sys.argv[2], "--shards", "4", "--n-features", "47152"])
print(time.perf_counter() - t, {HWM})
"""
RSS_READ = f"""
import sys, glob
from mpisgd.data.reader import iter_blocks
n = sum(len(b.data) for b in iter_blocks(sorted(glob.glob(sys.argv[1] + "/*.h5")), 8192))
print(n, {HWM})
"""


def bench_rss(path, small, workdir):
    import shutil

    print("\n| input | MB | prep (4 shards) s | prep peak RSS MB | reading the 4 shards: peak RSS MB |"
          "\n|---|---|---|---|---|")
    base = subprocess.run([PY, "-c", "import mpisgd.cli, mpisgd.data.convert, h5py, numba, "
                           f"scipy.sparse; print({HWM})"],
                          capture_output=True, text=True, check=True).stdout.split()[-1]
    for p in (small, path):
        out = os.path.join(workdir, "rss-out")
        shutil.rmtree(out, ignore_errors=True)
        res = subprocess.run([PY, "-c", RSS_CONVERT, p, out], capture_output=True, text=True,
                             check=True).stdout.split()
        rd = subprocess.run([PY, "-c", RSS_READ, out], capture_output=True, text=True,
                            check=True).stdout.split()
        print(f"| {os.path.basename(p)} | {os.path.getsize(p) / 1e6:.0f} | {float(res[-2]):.1f} | "
              f"{float(res[-1]):.0f} | {float(rd[-1]):.0f} |")
        shutil.rmtree(out, ignore_errors=True)
    print(f"\n(peak RSS of a process that only imports mpisgd, h5py, numba, scipy: "
          f"{float(base):.0f} MB)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/mpisgd-bench-data")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sections", default="parse,parallel,prep,compression,read,share,rss")
    ap.add_argument("--parallel-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.parallel_worker:
        return _parallel_worker(args.parallel_worker)
    os.makedirs(args.workdir, exist_ok=True)
    path, small = make_input(args.workdir)
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load average "
          f"{os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    sections = args.sections.split(",")
    if "parse" in sections:
        bench_parse(path, small, args.repeats)
    if "parallel" in sections:
        bench_parallel(path, args.repeats)
    if "prep" in sections:
        bench_prep(path, args.workdir, args.repeats)
    if "compression" in sections:
        bench_compression(small, args.workdir, args.repeats)
    if "read" in sections:
        bench_read(path, args.workdir, args.repeats)
    if "share" in sections:
        bench_share(path, args.workdir, args.repeats)
    if "rss" in sections:
        bench_rss(path, small, args.workdir)
    print(f"\n# load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
