"""The simulator against the MPI runner: the same shards, seed and parameters
through ``mpisgd simulate`` and ``mpiexec -n k … mpisgd train --mode sync``
give the same messages and bytes per category (sent and received) and
protocol statistics, the same online errors, and the same final model (1e-9
relative). k = 2 and 3, and for hierarchical synchronization (--node-size) 2, 3
and 4 ranks, intra-node traffic too; skipped when mpiexec is missing."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mpisgd.data.synthetic import DisjunctionStream, LinearTeacherStream, write_learner_shards
from mpisgd.model import LinearModel
from mpisgd.wire import CATEGORIES, dense_nbytes

MPIEXEC = Path(sys.executable).parent / "mpiexec"
PAPER_LEARNER = ["--loss", "log", "--lam", "0", "--schedule", "constant", "--eta0", "1", "--no-average"]

CASES = [
    ["--protocol", "dynamic", "--delta", "0.3", "--period", "1"],
    ["--protocol", "dynamic", "--delta", "0.2", "--period", "2", "--augmentation", "farthest"],
    ["--protocol", "dynamic", "--delta", "0.5", "--augmentation", "random-double", "--counter-counts", "contacted"],
    ["--protocol", "dynamic", "--delta", "0.3", "--counter-limit", "2", "--counter-reset", "forced-only"],
    ["--protocol", "dynamic", "--delta", "auto", "--pilot-rounds", "40", "--delta-scale", "0.5", "--period", "2"],
    ["--protocol", "dynamic", "--delta", "0.3", "--hedge", "half"],
    # --budget: Δ steered at every full sync from one more Allreduce (docs/ALGORITHMS.md §4.6)
    ["--protocol", "dynamic", "--delta", "0.3", "--budget", "0.5"],
    ["--protocol", "dynamic", "--delta", "auto", "--pilot-rounds", "20", "--delta-scale", "0.2", "--budget", "0.2",
     "--period", "2", "--hedge", "half"],
    ["--protocol", "static", "--period", "3"],
    ["--protocol", "central"],
    ["--protocol", "fda", "--theta", "0.5", "--period", "2"],
    ["--protocol", "fda", "--theta", "0.2", "--period", "3", "--fda-directions", "2"],
    ["--protocol", "fda", "--theta", "0.5", "--period", "2", "--fda-lag", "0"],
    # compressed model messages and full syncs (docs/WIRE.md): the same draws on both sides
    ["--protocol", "dynamic", "--delta", "0.2", "--period", "2", "--compress", "q8"],
    ["--protocol", "dynamic", "--delta", "0.3", "--augmentation", "random-double", "--compress", "fp16"],
    ["--protocol", "static", "--period", "3", "--compress", "q8"],
    # regularized dual averaging (docs/ALGORITHMS.md §7): the protocols average its dual state
    ["--protocol", "dynamic", "--delta", "0.05", "--period", "2", "--rule", "rda", "--gamma", "0.5", "--l1", "0.02"],
    ["--protocol", "dynamic", "--delta", "auto", "--pilot-rounds", "20", "--rule", "rda", "--gamma", "2"],
    ["--protocol", "static", "--period", "3", "--rule", "rda", "--l1", "0.01", "--loss", "hinge"],
    # partial averaging (docs/ALGORITHMS.md §4.7): index blocks, then the sum over their union
    ["--protocol", "dynamic", "--delta", "0.3", "--partial", "0.5", *PAPER_LEARNER],
    ["--protocol", "dynamic", "--delta", "0.2", "--period", "2", "--partial", "0.2", "--budget", "0.5",
     "--compress", "q8"],
]
# sparse full syncs: on 1,100 features a dense sum is over wire.SYNC_PROBE_MIN_BYTES, and the
# pairs of k ≤ 3 learners touched for b rounds are the smaller (docs/WIRE.md, "Full syncs")
WIDE_CASES = [
    ["--protocol", "static", "--period", "1"],
    ["--protocol", "dynamic", "--delta", "0.3", "--period", "2"],
    ["--protocol", "dynamic", "--delta", "0.3", "--period", "2", "--partial", "0.3"],
]

# --partial where violations carry models (the counter hedge, k > 2): partial model messages for the
# violations, the balance replies and the balancing (docs/ALGORITHMS.md §4.7, docs/WIRE.md)
PARTIAL_MESSAGE_CASES = [
    ["--protocol", "dynamic", "--delta", "1", "--period", "2", "--partial", "0.5", "--hedge", "counter",
     "--counter-limit", "100"],
    ["--protocol", "dynamic", "--delta", "1", "--period", "2", "--partial", "0.3", "--hedge", "counter",
     "--counter-limit", "100", "--augmentation", "farthest", "--compress", "q8"],
]


# hierarchical synchronization (--node-size): (ranks, arguments); node size 1 is the flat protocol
HIER_CASES = [
    (2, ["--protocol", "dynamic", "--delta", "0.3", "--node-size", "1"]),
    (2, ["--protocol", "dynamic", "--delta", "0.3", "--period", "2", "--node-size", "2"]),
    (3, ["--protocol", "dynamic", "--delta", "0.3", "--node-size", "3"]),
    (4, ["--protocol", "dynamic", "--delta", "0.3", "--node-size", "2"]),
    (4, ["--protocol", "dynamic", "--delta", "0.2", "--period", "4", "--node-size", "2", "--node-period", "2",
         "--augmentation", "farthest"]),
    (4, ["--protocol", "dynamic", "--delta", "auto", "--pilot-rounds", "40", "--period", "2", "--node-size", "2"]),
    (4, ["--protocol", "static", "--period", "3", "--node-size", "2"]),
]


def _env():
    env = dict(os.environ, NUMBA_NUM_THREADS="1", PYTHONHASHSEED="0")
    return env


def _shards(tmp_path_factory, n_features):
    out = {}
    for k in (2, 3, 4):
        d = tmp_path_factory.mktemp(f"shards{k}-{n_features}")
        stream = DisjunctionStream(n_features, k, seed=11, drift_prob=0.01)
        out[k] = write_learner_shards(stream, 400, str(d))
    return out


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return _shards(tmp_path_factory, 30)


@pytest.fixture(scope="module")
def wide_shards(tmp_path_factory):
    return _shards(tmp_path_factory, 1100)


@pytest.fixture(scope="module")
def spread_shards(tmp_path_factory):
    """The linear teacher on 8,000 features, 20 non-zeros a row: rows that
    spread (n·rows/non-zeros = 400), where --delta auto turns partial syncs on."""
    out = {}
    for k in (2, 3):
        stream = LinearTeacherStream(8000, k, seed=11, nnz_per_row=20)
        out[k] = write_learner_shards(stream, 400, str(tmp_path_factory.mktemp(f"spread{k}")))
    return out


def _train(k, paths, args, out):
    cmd = [str(MPIEXEC), "-n", str(k), sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train", *paths,
           "--mode", "sync", "--out", str(out), "--quiet", "--timeline-every", "50", *args]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out / "report.json") as f:
        return json.load(f), LinearModel.load(str(out / "model.h5"))


def _simulate(paths, args, out):
    from mpisgd.cli import main

    assert main(["simulate", *paths, "--mode", "sync", "--out", str(out), "--quiet", "--timeline-every", "50",
                 *args]) == 0
    with open(out / "report.json") as f:
        return json.load(f)


@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_simulate_equals_train_sync(k, case, shards, tmp_path):
    _assert_equal(shards[k], CASES[case], k, tmp_path)


@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("case", range(len(WIDE_CASES)))
def test_simulate_equals_train_sync_sparse_full_syncs(k, case, wide_shards, tmp_path):
    _assert_equal(wide_shards[k], WIDE_CASES[case], k, tmp_path)
    report = json.loads((tmp_path / "train" / "report.json").read_text())
    fs = report["communication"]["sent"]["full_sync"]
    syncs = report["protocol"]["full_syncs"]["total"] - report["protocol"]["full_syncs"]["augmented"] - 1
    assert syncs > 0 and fs["bytes"] < k * dense_nbytes(1100) * (1 + syncs) / 2  # the pairs were used


@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
@pytest.mark.parametrize("k", [2, 3])
def test_simulate_equals_train_sync_under_the_defaults_partial_syncs(k, spread_shards, tmp_path):
    """The defaults on rows that spread: the pilot's end turns partial syncs on
    in both, which then agree bit for bit (docs/ALGORITHMS.md §4.4)."""
    _assert_equal(spread_shards[k], ["--protocol", "dynamic", *PAPER_LEARNER], k, tmp_path)
    report = json.loads((tmp_path / "train" / "report.json").read_text())
    syncs = report["protocol"]["full_syncs"]["total"] - report["protocol"]["full_syncs"]["final"]
    messages = report["communication"]["sent"]["full_sync"]["messages"]
    assert report["delta_auto"]["partial"] is not None and report["delta_auto"]["spread"] == pytest.approx(400.0)
    assert syncs > 0 and messages == k * (3 * syncs + 1)  # partial: probe, index blocks, sum; the final Allreduce


@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
@pytest.mark.parametrize("k", [3, 4])
@pytest.mark.parametrize("case", range(len(PARTIAL_MESSAGE_CASES)))
def test_simulate_equals_train_sync_with_partial_model_messages(k, case, wide_shards, tmp_path):
    _assert_equal(wide_shards[k], PARTIAL_MESSAGE_CASES[case], k, tmp_path)
    report = json.loads((tmp_path / "train" / "report.json").read_text())
    sent = report["communication"]["sent"]
    assert report["protocol"]["balancings"] > 0 and report["protocol"]["augmented"] > 0  # replies and results
    assert 0 < sent["violation"]["bytes"] < sent["violation"]["messages"] * dense_nbytes(1100) / 2  # partial


@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
@pytest.mark.parametrize("case", range(len(HIER_CASES)))
def test_simulate_equals_train_sync_hierarchical(case, shards, tmp_path):
    """Inter-node traffic as ``communication``/``per_rank``, intra-node traffic
    as ``hierarchy``, both per category, sent and received, and per rank."""
    k, args = HIER_CASES[case]
    _assert_equal(shards[k], args, k, tmp_path)
    report = json.loads((tmp_path / "train" / "report.json").read_text())
    sim = json.loads((tmp_path / "sim" / "report.json").read_text())
    want = report["hierarchy"]["intra_node"]
    assert sim["hierarchy"]["intra_node"] == want
    for mine, rank in zip(sim["per_rank"], report["per_rank"], strict=True):
        assert mine["intra_node"] == rank["intra_node"]
    m = int(args[args.index("--node-size") + 1])
    assert report["hierarchy"]["node_size"] == sim["hierarchy"]["node_size"] == m
    assert (sum(want["sent"][c]["bytes"] for c in CATEGORIES) > 0) == (m > 1)  # a node of one moves nothing
    assert report["configuration"]["protocol"]["node_size"] == m


@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
def test_train_refuses_nodes_that_do_not_split_the_ranks(shards, tmp_path):
    cmd = [str(MPIEXEC), "-n", "3", sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train", *shards[3],
           "--mode", "sync", "--out", str(tmp_path / "train"), "--quiet", "--node-size", "2"]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "--node-size 2 does not divide the 3 learners into nodes" in done.stderr


def _assert_equal(paths, args, k, tmp_path):
    report, model = _train(k, paths, args, tmp_path / "train")
    sim = _simulate(paths, args, tmp_path / "sim")
    # one schema (mpisgd.report): the same sections, equal
    assert sim["communication"] == report["communication"]
    for mine, rank in zip(sim["per_rank"], report["per_rank"], strict=True):  # per rank, too
        assert mine["communication"] == rank["communication"]
    assert sim["protocol"] == report["protocol"]
    assert {key: v for key, v in sim["online"].items() if key not in ("loss", "mean_loss")} == \
        {key: v for key, v in report["online"].items() if key not in ("loss", "mean_loss")}
    assert sim["delta_auto"] == report["delta_auto"]  # --delta auto: the same Δ, bit for bit
    assert sim["budget"] == report["budget"]  # --budget: the same steering, bit for bit
    if "--budget" in args:
        assert report["budget"]["steps"] > 0  # Δ was steered
    np.testing.assert_allclose(sim["online"]["loss"], report["online"]["loss"], rtol=1e-9)
    np.testing.assert_allclose(sim["model"]["coef"], model.coef, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(sim["model"]["intercept"], model.intercept, rtol=1e-9, atol=1e-12)
    with open(tmp_path / "train" / "timeline.csv") as a, open(tmp_path / "sim" / "timeline.csv") as b:
        rows_a, rows_b = [r.split(",") for r in a.read().split()], [r.split(",") for r in b.read().split()]
    assert [r[:2] + r[3:-1] for r in rows_a] == [r[:2] + r[3:-1] for r in rows_b]  # all but loss and clock


@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
@pytest.mark.parametrize("k", [2, 3])
def test_delta_auto_is_the_same_in_the_default_mode(k, shards, tmp_path):
    """--delta auto in the async default mode: the pilot ends at the same round on
    every rank, whatever the timing, and gives the simulator's Δ bit for bit."""
    args = ["--protocol", "dynamic", "--delta", "auto", "--pilot-rounds", "50", "--period", "2"]
    cmd = [str(MPIEXEC), "-n", str(k), sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train", *shards[k],
           "--out", str(tmp_path / "train"), "--quiet", *args]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "train" / "report.json").read_text())
    sim = _simulate(shards[k], args, tmp_path / "sim")
    assert report["delta_auto"] == sim["delta_auto"] and report["delta_auto"]["pilot_rows"] == 50 * k
    assert report["protocol"]["violations"] > 0  # the protocol ran with that Δ after the pilot


@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
@pytest.mark.parametrize("hedge", ["half", "counter"])
@pytest.mark.parametrize("k", [2, 3])
def test_budget_runs_in_the_default_mode(k, hedge, shards, tmp_path):
    """--budget in the async default mode: the full syncs, each with its budget
    Allreduce, complete on every rank whatever the timing, and Δ was steered at
    every one of them; no balancing set holds every learner (it would be a full
    sync), so at k = 2 nothing is balanced through rank 0."""
    args = ["--protocol", "dynamic", "--delta", "0.3", "--budget", "0.3", "--hedge", hedge,
            *PAPER_LEARNER]  # Δ = 0.3 makes violations, and augmented balancings, with the paper's learner
    cmd = [str(MPIEXEC), "-n", str(k), sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train", *shards[k],
           "--out", str(tmp_path / "train"), "--quiet", *args]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "train" / "report.json").read_text())
    budget = report["budget"]
    syncs = report["protocol"]["full_syncs"]
    assert budget["steps"] == syncs["total"] - syncs["final"] > 0  # one steering step per full sync
    assert syncs["hedge" if hedge == "half" else "augmented"] > 0
    if k == 2:
        assert report["protocol"]["balancings"] == 0
    assert budget["F"] == 0.3 and budget["horizon"] == k * 400 and budget["delta"] != 0.3


@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
@pytest.mark.parametrize("k", [2, 3])
def test_partial_averaging_runs_in_the_default_mode(k, wide_shards, tmp_path):
    """--partial in the async default mode: every partial sync (its probe, index
    blocks and sum as nonblocking collectives) completes on every rank whatever
    the timing, each with its three collectives."""
    args = ["--protocol", "dynamic", "--delta", "0.3", "--period", "2", "--partial", "0.3", *PAPER_LEARNER]
    cmd = [str(MPIEXEC), "-n", str(k), sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train", *wide_shards[k],
           "--out", str(tmp_path), "--quiet", *args]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    syncs = report["protocol"]["full_syncs"]["total"] - report["protocol"]["full_syncs"]["final"]
    messages = report["communication"]["sent"]["full_sync"]["messages"]
    assert syncs > 0 and messages == k * (3 * syncs + 1)  # probe, index blocks, sum; the final Allreduce



@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
@pytest.mark.parametrize("case", range(len(PARTIAL_MESSAGE_CASES)))
def test_partial_model_messages_run_in_the_default_mode(case, wide_shards, tmp_path):
    """--partial where violations carry models, in the async default mode: the
    partial violations, the requests asking for S_B, the replies (or a crossing
    violation taken as one) and the results complete whatever the timing."""
    k = 3
    cmd = [str(MPIEXEC), "-n", str(k), sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train", *wide_shards[k],
           "--out", str(tmp_path), "--quiet", *PARTIAL_MESSAGE_CASES[case]]
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    sent = report["communication"]["sent"]
    assert report["protocol"]["violations"] > 0 and report["protocol"]["augmented"] > 0
    assert 0 < sent["violation"]["bytes"] < sent["violation"]["messages"] * dense_nbytes(1100) / 2  # partial

DEMO = ["--synthetic", "disjunction", "--rounds", "6000", "--features", "100", "--drift-prob", "0.001", "--seed", "0",
        *PAPER_LEARNER, "--protocol", "dynamic", "--delta", "auto", "--period", "6"]


@pytest.mark.skipif(not MPIEXEC.exists() and shutil.which("mpiexec") is None, reason="no mpiexec")
@pytest.mark.parametrize("k", [2, 3])
def test_simulate_and_train_agree_in_their_default_mode(k, tmp_path):
    """Neither gives a mode: simulate's model of the default mode (resolutions
    ``--async-delay`` rounds late) and train's default mode, on the demo's
    stream, learn the same examples, and their online errors and bytes agree.

    train runs with its ranks' round skew bounded to 2b (``--pace 6 --poll-rows
    6``, b = 6): with the default R = 256 the ranks drift up to 2R rounds
    apart on a loaded machine, and a full sync then averages models of
    different rounds, which costs errors that depend on the machine's load and
    that no deterministic model holds (docs/RUNNING.md, "The simulator's
    default mode"; measured on the 2-core machine, loaded: at k = 3, 7 runs
    gave 1,673–1,910 errors, another 3 a median of 2,063). Bounded, 4 runs
    each gave 1,249 errors and 587,176 bytes at k = 2 (every run the same),
    1,605–1,621 errors and 852,632–864,952 bytes at k = 3; the simulator gives
    1,282 and 493,696 (k = 2), 1,606 and 694,936 (k = 3): a 4-round delay
    absorbs a few violations into the resolution under way, which polling
    every 6 rows does not. So: the median of 3 train runs, errors within 5 %,
    bytes within 25 %. (Sync mode is exact: the tests above.)"""
    runs = []
    for i in range(3):
        out = tmp_path / f"train{i}"
        cmd = [str(MPIEXEC), "-n", str(k), sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train", *DEMO,
               "--pace", "6", "--poll-rows", "6", "--out", str(out), "--quiet"]
        done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append(json.loads((out / "report.json").read_text()))
    from mpisgd.cli import main

    assert main(["simulate", *DEMO, "--learners", str(k), "--out", str(tmp_path / "sim"), "--quiet"]) == 0
    sim = json.loads((tmp_path / "sim" / "report.json").read_text())
    assert sim["configuration"]["mode"] == runs[0]["configuration"]["mode"] == "async"
    assert all(r["online"]["examples"] == sim["online"]["examples"] == k * 6000 for r in runs)
    errors = np.median([r["online"]["errors"] for r in runs])
    assert abs(sim["online"]["errors"] - errors) <= 0.05 * errors, (sim["online"]["errors"], errors)
    nbytes = np.median([r["communication"]["total_bytes"] for r in runs])
    assert abs(sim["communication"]["total_bytes"] - nbytes) <= 0.25 * nbytes, (sim["communication"]["total_bytes"],
                                                                               nbytes)
