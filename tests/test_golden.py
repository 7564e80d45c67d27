"""The regression oracle of the protocol engine: small runs whose message and
byte counts, online errors and final model are recorded in
tests/golden/engine.json, so that moving code between modules is seen to change
nothing.

- ``simulate`` runs (serial): every deterministic, compared exactly (floats
  bit for bit, the model by a SHA-256 of its float64 coefficients).
- ``train`` runs in-process under mpiexec (``-m mpi``, at 2 and 3 ranks, each
  recorded under its rank count; skipped at others): exact where the run is deterministic (sync
  mode; protocols that never use the default mode's machinery); for the
  dynamic protocol in the async mode only what is deterministic there (the
  examples learned, the one final sync).

Every option that reaches the learner or the protocol is given explicitly, so
that a change of ``train``'s or ``simulate``'s defaults does not change a run;
each record also holds the learner configuration that the run reports, so a
default that still slips through fails by name.

Regenerate (after a behaviour change made on purpose, and say so in its commit):

    MPISGD_GOLDEN_WRITE=1 NUMBA_NUM_THREADS=1 python -m pytest -q tests/test_golden.py
    for n in 2 3; do MPISGD_GOLDEN_WRITE=1 NUMBA_NUM_THREADS=1 mpiexec -n $n python -m pytest -q --with-mpi \\
        --only-mpi -m mpi -p no:cacheprovider tests/test_golden.py; done
"""

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).parent / "golden" / "engine.json"
WRITE = os.environ.get("MPISGD_GOLDEN_WRITE") == "1"

# every learner option, given: a change of a default must not change a golden run
LEARNER = ["--loss", "log", "--schedule", "constant", "--eta0", "0.5", "--lam", "0.01", "--t0", "0", "--power", "0.5",
           "--rule", "sgd", "--aggressiveness", "1", "--gamma", "1", "--l1", "0", "--no-average"]
DYNAMIC = ["--protocol", "dynamic", "--delta", "0.3", "--period", "1", "--augmentation", "random-one",
           "--counter-counts", "violators", "--counter-reset", "any-full-sync", "--counter-limit", "1",
           "--burst-fraction", "0", "--protocol-seed", "0", "--pilot-rounds", "8"]


def _with(base, **changes):
    """``base`` with the values of some options replaced (--name_with_underscores)."""
    out = list(base)
    for name, value in changes.items():
        flag = "--" + name.replace("_", "-")
        out[out.index(flag) + 1] = str(value)
    return out


# simulate: name -> (k, arguments); the learner's, the stream's and the output's options are added
SIM_CASES = {
    "none-k2": (2, ["--protocol", "none", "--compress", "none"]),
    "central-k3": (3, ["--protocol", "central", "--compress", "none"]),
    "static-b3-k3": (3, ["--protocol", "static", "--period", "3", "--compress", "none"]),
    "static-b2-q8-k2": (2, ["--protocol", "static", "--period", "2", "--compress", "q8"]),
    "dynamic-counter-k3": (3, [*DYNAMIC, "--hedge", "counter", "--compress", "none"]),
    "dynamic-half-k3": (3, [*DYNAMIC, "--hedge", "half", "--compress", "none"]),
    "dynamic-auto-hedge-k2": (2, [*DYNAMIC, "--hedge", "auto", "--compress", "none"]),
    "dynamic-counter-farthest-b2-k3": (3, [*_with(DYNAMIC, augmentation="farthest", period=2, delta=0.2),
                                          "--hedge", "counter", "--compress", "none"]),
    "dynamic-counter-double-contacted-k3": (3, [*_with(DYNAMIC, augmentation="random-double",
                                                       counter_counts="contacted", delta=0.5),
                                               "--hedge", "counter", "--compress", "none"]),
    "dynamic-q8-b2-k3": (3, [*_with(DYNAMIC, period=2, delta=0.2), "--hedge", "counter", "--compress", "q8"]),
    "dynamic-budget-k3": (3, [*DYNAMIC, "--hedge", "counter", "--budget", "0.5", "--compress", "none"]),
    "dynamic-auto-delta-b2-k3": (3, [*_with(DYNAMIC, delta="auto", period=2, pilot_rounds=20), "--delta-scale", "0.5",
                                    "--hedge", "counter", "--compress", "none"]),
    "fda-b2-k3": (3, ["--protocol", "fda", "--theta", "0.5", "--period", "2", "--fda-directions", "1",
                      "--fda-estimate", "linear", "--fda-lag", "1", "--compress", "none"]),
    "fda-lag0-j2-k2": (2, ["--protocol", "fda", "--theta", "0.2", "--period", "3", "--fda-directions", "2",
                           "--fda-estimate", "linear", "--fda-lag", "0", "--compress", "none"]),
    "hier-dynamic-m2-k4": (4, [*DYNAMIC, "--hedge", "counter", "--node-size", "2", "--node-period", "1",
                               "--compress", "none"]),
    "hier-static-m2-b4-k4": (4, ["--protocol", "static", "--period", "4", "--node-size", "2", "--node-period", "2",
                                 "--compress", "none"]),
}
# each simulate case in both modes: sync is train's --mode sync exactly; async the simulator's model of the default
# (hierarchical dynamic synchronization runs in sync mode only)
SIM_RUNS = [(name, mode) for name in SIM_CASES for mode in ("sync", "async")
            if not (name.startswith("hier-dynamic") and mode == "async")]
SIM_ROUNDS = 200

# train under mpiexec: name -> (arguments, deterministic); k is the number of ranks
MPI_CASES = {
    "none-sync": (["--protocol", "none", "--compress", "none", "--mode", "sync"], True),
    "central-sync": (["--protocol", "central", "--compress", "none", "--mode", "sync"], True),
    "static-b3-async": (["--protocol", "static", "--period", "3", "--compress", "none", "--mode", "async"], True),
    "static-b2-q8-sync": (["--protocol", "static", "--period", "2", "--compress", "q8", "--mode", "sync"], True),
    "dynamic-counter-sync": ([*DYNAMIC, "--hedge", "counter", "--compress", "none", "--mode", "sync"], True),
    "dynamic-half-sync": ([*DYNAMIC, "--hedge", "half", "--compress", "none", "--mode", "sync"], True),
    "dynamic-counter-q8-b2-sync": ([*_with(DYNAMIC, period=2, delta=0.2), "--hedge", "counter", "--compress", "q8",
                                    "--mode", "sync"], True),
    "dynamic-budget-sync": ([*DYNAMIC, "--hedge", "counter", "--budget", "0.5", "--compress", "none",
                             "--mode", "sync"], True),
    "fda-b2-sync": (["--protocol", "fda", "--theta", "0.5", "--period", "2", "--fda-directions", "1",
                     "--fda-estimate", "linear", "--fda-lag", "1", "--compress", "none", "--mode", "sync"], True),
    "hier-dynamic-m1-sync": ([*DYNAMIC, "--hedge", "counter", "--node-size", "1", "--compress", "none",
                              "--mode", "sync"], True),
    "dynamic-counter-async": ([*DYNAMIC, "--hedge", "counter", "--compress", "none", "--mode", "async",
                               "--pace", "256", "--poll-rows", "16", "--staleness", "0"], False),
}
MPI_ROUNDS = 200
MPI_RANKS = (2, 3)  # the rank counts recorded (make test's); at others the test is skipped


def checksum(values):
    """SHA-256 (first 16 hex digits) of float64 values, bit for bit."""
    return hashlib.sha256(np.ascontiguousarray(values, dtype="<f8").tobytes()).hexdigest()[:16]


def _load():
    if GOLDEN.exists():
        with open(GOLDEN) as f:
            return json.load(f)
    return {}


def _store(key, record):
    """Write one record (MPISGD_GOLDEN_WRITE=1)."""
    golden = _load()
    golden[key] = record
    GOLDEN.parent.mkdir(exist_ok=True)
    with open(GOLDEN, "w") as f:
        json.dump(golden, f, indent=1, sort_keys=True)
        f.write("\n")


def _compare(key, record):
    if WRITE:
        _store(key, record)
        return
    golden = _load()
    assert key in golden, f"no golden record {key!r} in {GOLDEN}; regenerate it (see this file's docstring)"
    expected = golden[key]
    assert record["learner"] == expected["learner"], f"{key}: the learner's configuration changed"
    for field in expected:
        assert record[field] == expected[field], f"{key}: {field} changed"
    assert record.keys() == expected.keys()


# -- simulate ----------------------------------------------------------------


def simulate_record(report):
    """What a simulate run must reproduce exactly (in the golden file's own layout)."""
    from mpisgd.wire import CATEGORIES

    comm, protocol = report["communication"], report["protocol"]
    by = {(side, key): {c: comm[side][c][key] for c in CATEGORIES}
          for side in ("sent", "received") for key in ("messages", "bytes")}
    per_rank = {name: [[rank["communication"][side][c][key] for c in CATEGORIES] for rank in report["per_rank"]]
                for name, side, key in (("sent_bytes", "sent", "bytes"), ("recv_bytes", "received", "bytes"),
                                        ("sent_msgs", "sent", "messages"), ("recv_msgs", "received", "messages"))}
    stats = {key: protocol[key] for key in ("hedge", "checks", "violations", "balancings", "augmented")}
    stats["full_syncs"] = {key: v for key, v in protocol["full_syncs"].items() if key != "total"}
    stats["model_messages"] = {key: v for key, v in comm["model_messages_paper"].items() if key != "total"}
    return {"learner": report["configuration"]["learner"], "examples": report["online"]["examples"],
            "errors": report["online"]["errors"], "loss": report["online"]["loss"],
            "messages_sent": by["sent", "messages"], "bytes_sent": by["sent", "bytes"],
            "messages_received": by["received", "messages"], "bytes_received": by["received", "bytes"],
            "per_rank": per_rank, "stats": stats, "model_messages": comm["model_messages_paper"]["total"],
            "model": checksum(np.append(report["model"]["coef"], report["model"]["intercept"]))}


@pytest.mark.parametrize("name, mode", SIM_RUNS)
def test_simulate_golden(name, mode, tmp_path):
    from mpisgd.cli import main

    k, args = SIM_CASES[name]
    argv = ["simulate", "--synthetic", "disjunction", "--learners", str(k), "--rounds", str(SIM_ROUNDS),
            "--features", "30", "--seed", "3", "--drift-prob", "0.01", "--order", "learn-check", "--max-period", "0",
            *LEARNER, *args, "--mode", mode, "--out", str(tmp_path / "out"), "--quiet", "--timeline-every", "50"]
    assert main(argv) == 0
    with open(tmp_path / "out" / "report.json") as f:
        _compare(f"simulate/{name}/{mode}", simulate_record(json.load(f)))


# -- train under mpiexec -------------------------------------------------------


def train_record(report, model, deterministic):
    """What a train run must reproduce: everything if it is deterministic, else
    the examples learned and the one final sync."""
    record = {"learner": report["configuration"]["learner"], "examples": report["online"]["examples"],
              "final_syncs": report["protocol"]["full_syncs"]["final"]}
    if deterministic:
        record.update({
            "errors": report["online"]["errors"], "loss": report["online"]["loss"],
            "sent": report["communication"]["sent"], "received": report["communication"]["received"],
            "model_messages_paper": report["communication"]["model_messages_paper"],
            "per_rank": [{"errors": r["errors"], "loss": r["loss"], "communication": r["communication"]}
                         for r in report["per_rank"]],
            "protocol": {key: value for key, value in report["protocol"].items()},
            "model": checksum(np.append(model.coef, model.intercept))})
    return record


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", list(MPI_CASES))
def test_train_golden(name, tmp_path):
    from mpi4py import MPI

    from helpers.mpi import on_every_rank
    from mpisgd.cli import main
    from mpisgd.model import LinearModel

    comm = MPI.COMM_WORLD
    k = comm.Get_size()
    if k not in MPI_RANKS and not WRITE:
        pytest.skip(f"the golden file records train at {MPI_RANKS} ranks, not {k}")
    out = comm.bcast(str(tmp_path / "out") if comm.Get_rank() == 0 else None, root=0)
    args, deterministic = MPI_CASES[name]
    argv = ["train", "--synthetic", "disjunction", "--rounds", str(MPI_ROUNDS), "--features", "30", "--seed", "3",
            "--drift-prob", "0.01", "--block-rows", "64", *LEARNER, *args, "--out", out, "--quiet",
            "--timeline-every", "50"]
    with on_every_rank(comm):
        assert main(argv) == 0
    comm.Barrier()
    with on_every_rank(comm):
        if comm.Get_rank() == 0:
            with open(Path(out) / "report.json") as f:
                report = json.load(f)
            model = LinearModel.load(str(Path(out) / "model.h5"))
            _compare(f"train/{name}/k{k}", train_record(report, model, deterministic))
