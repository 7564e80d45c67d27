"""MPI over a real network between two "nodes" on this machine.

Two network namespaces joined by a veth pair (tests/netns_cluster.py), Open
MPI's TCP BTL restricted to the link, rank 0 in one namespace and rank 1 in
the other. Prints, with the command line of each measurement:

1. median Allreduce and ping-pong (Send then Recv back) time by message size
   (bench/net_latency.py), over the bare link and at tbf rates; beside them,
   in the same run, the same two ranks in ONE namespace (TCP over loopback)
   and the bundled MPICH over shared memory, as references;
   "busy-poll" rows keep Open MPI's default of a waiting rank spinning on its
   core; the others yield it (mpi_yield_when_idle, as tests/netns_cluster.py
   does, since both "nodes" share this machine's cores); the "bound" row also
   keeps Open MPI's default binding, under which each namespace's daemon binds
   its rank to core 0, both ranks to one core (tests/netns_cluster.py passes
   --bind-to none);
2. wall time and bytes of a short `mpisgd train` run across the link, static
   b=8 against dynamic Δ=10 b=8, the dynamic defaults, the full-sync rule and two partial
   configurations (RCV1-like stream, log loss; medians of --repeats runs, the
   protocols alternating, each wall also as a multiple of static b=8's).

Needs root, iproute2, Debian's Open MPI and .venv-mpi (`make venv-mpi`); run
with the test environment's python: `make bench-network`.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers.env import job_env  # noqa: E402
from helpers.system_mpi import ROOT_ENV  # noqa: E402
from netns_cluster import NetnsCluster  # noqa: E402

SIZES = [8, 1024, 32 * 1024, 47152 * 8]  # one double ... a dense RCV1 model (377 KB)
ENV_NAMES = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "PYTHONUNBUFFERED")
LATENCY = str(ROOT / "bench" / "net_latency.py")


def run(argv, timeout=600):
    proc = subprocess.run([str(a) for a in argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=job_env(**ROOT_ENV))
    if proc.returncode != 0:
        raise SystemExit(f"failed: {shlex.join(map(str, argv))}\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def show(argv):
    return shlex.join(str(a) for a in argv)


def latency_table(cluster, rates, sizes):
    # (name, tbf rate of the link or "any" where the link is not used, argv)
    setups = [("MPICH, shared memory (reference)", "any",
               [ROOT / ".venv/bin/mpiexec", "-n", "2", ROOT / ".venv/bin/python", LATENCY, *sizes]),
              ("Open MPI TCP, one namespace (loopback)", "any",
               [cluster.ip, "netns", "exec", cluster.namespaces[0], cluster.mpirun_path, "-n", "2",
                "--oversubscribe", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo",
                cluster.python, LATENCY, *sizes])]
    # Open MPI's default, a waiting rank spinning on its core, shows the scheduler-tick floor.
    setups.append(("across the veth, no tbf, busy-poll", None,
                   cluster.mpirun(cluster.python, LATENCY, *sizes, env_names=ENV_NAMES,
                                  busy_poll=True)))
    # Open MPI's default binding: each namespace's daemon binds its rank to core 0, the same core.
    setups.append(("across the veth, no tbf, busy-poll, bound", None,
                   cluster.mpirun(cluster.python, LATENCY, *sizes, env_names=ENV_NAMES,
                                  busy_poll=True, bind_to="core")))
    setups += [(f"across the veth, {rate or 'no tbf'}", rate,
                cluster.mpirun(cluster.python, LATENCY, *sizes, env_names=ENV_NAMES))
               for rate in rates]
    print("## Latency: median of 30, ms\n")
    print(f"{'setup':44s} {'bytes':>8s} {'Allreduce':>10s} {'ping-pong':>10s}")
    for name, rate, argv in setups:
        if rate != "any":
            cluster.set_rate(rate)
        result = json.loads(run(argv).strip().splitlines()[-1])
        for row in result["rows"]:
            print(f"{name:44s} {row['bytes']:8d} {row['allreduce_ms']:10.3f} "
                  f"{row['pingpong_ms']:10.3f}", flush=True)
    print("\ncommands (tc rate set before each 'across' line: "
          "tc qdisc replace dev veth0 root tbf rate RATE burst 64kb latency 50ms, both ends):")
    for name, _, argv in setups:
        print(f"  {name}:\n    {show(argv)}")


TRAINING = (("none", ["--protocol", "none"]),
            ("static b=8", ["--protocol", "static", "--period", "8"]),
            ("dynamic Δ=10 b=8", ["--protocol", "dynamic", "--period", "8", "--delta", "10"]),
            ("defaults", ["--protocol", "dynamic"]),
            ("full syncs (c = 3.6)", ["--protocol", "dynamic", "--delta-scale", "3.6"]),
            ("partial θ=0.9 F=12", ["--protocol", "dynamic", "--partial", "0.9", "--delta-scale", "43.2"]),
            ("partial θ=0.75 F=16", ["--protocol", "dynamic", "--partial", "0.75", "--delta-scale", "57.6"]))


def train_table(cluster, rate, rounds, repeats):
    """Each protocol's run ``repeats`` times, the protocols alternating; medians of each column."""
    cluster.set_rate(rate)
    print(f"\n## Training across the link at {rate}: RCV1-like stream, 2 ranks, {rounds} rounds, "
          f"log loss; medians of {repeats} alternating runs\n")
    argvs, rows = {}, {name: [] for name, _ in TRAINING}
    for _ in range(repeats):
        for name, options in TRAINING:
            with tempfile.TemporaryDirectory() as out:
                argv = cluster.mpirun(cluster.python, "-m", "mpi4py", "-m", "mpisgd", "train",
                                      "--synthetic", "rcv1", "--rounds", rounds, "--loss", "log", "--lam", "0",
                                      "--schedule", "constant", "--eta0", "1", "--no-average",
                                      *options, "--quiet", "--out", out, env_names=ENV_NAMES)
                run(argv)
                report = json.loads((Path(out) / "report.json").read_text())
            ranks, c = report["per_rank"], report["communication"]
            rows[name].append((max(r["time"]["wall"] for r in ranks), max(r["time"]["communication"] for r in ranks),
                               c["total_bytes"], c["total_messages"], report["online"]["error_rate"]))
            argvs[name] = argv
    static = statistics.median(row[0] for row in rows["static b=8"])
    print(f"{'protocol':24s} {'wall s':>8s} {'× static':>8s} {'MPI s':>8s} {'bytes':>12s} {'messages':>9s} "
          f"{'error':>7s}")
    for name, _ in TRAINING:
        wall, comm_s, nbytes, messages, error = (statistics.median(column) for column in zip(*rows[name]))
        print(f"{name:24s} {wall:8.3f} {wall / static:8.3f} {comm_s:8.3f} {nbytes:12.0f} {messages:9.0f} "
              f"{error:7.4f}", flush=True)
    print("\ncommands:")
    for name, argv in argvs.items():
        print(f"  {name}:\n    {show(argv)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", nargs="*", default=["none", "1gbit", "100mbit"],
                        help="tbf rates per direction ('none': no tbf)")
    parser.add_argument("--train-rate", default="100mbit")
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each protocol, alternating (medians)")
    parser.add_argument("--no-latency", action="store_true", help="the training table only")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_network.py needs root (network namespaces)")
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    cluster = NetnsCluster.start()
    try:
        if not args.no_latency:
            latency_table(cluster, [None if r == "none" else r for r in args.rates], SIZES)
        train_table(cluster, args.train_rate, args.rounds, args.repeats)
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
