"""``mpisgd train`` and ``mpisgd demo`` end to end, through subprocess mpiexec
(serial tests: each launches a small job and checks its outputs, or that a
bad input ends the whole job quickly with that rank's message)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

MPIEXEC = str(Path(sys.executable).parent / "mpiexec")
TIMEOUT = 120

pytestmark = pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="no mpiexec beside this Python")


def mpisgd(n, *args, timeout=TIMEOUT):
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    cmd = [MPIEXEC, "-n", str(n), sys.executable, "-m", "mpi4py", "-m", "mpisgd", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def write_shards(tmp_path, rows, n_features=12, seed=0, labels=None):
    from mpisgd.data.shard import write_shard

    rng = np.random.default_rng(seed)
    paths = []
    for i, m in enumerate(rows):
        X = sp.random(m, n_features, density=0.3, random_state=rng, format="csr")
        y = np.where(rng.random(m) < 0.5, -1.0, 1.0) if labels is None else np.full(m, labels)
        path = tmp_path / f"shard-{i}.h5"
        write_shard(path, X, y)
        paths.append(str(path))
    return paths


def test_synthetic_run_writes_model_report_and_timeline(tmp_path):
    out = tmp_path / "run"
    done = mpisgd(2, "train", "--synthetic", "disjunction", "--rounds", 400, "--features", 20,
                  "--protocol", "dynamic", "--delta", 0.5, "--period", 2, "--timeline-every", 100, "--out", out)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()[:2]  # a line about the run, then the calibrated γ0
    assert first.startswith("mpisgd train: 2 ranks, --synthetic disjunction, 400 rounds; dynamic b=2 "
                            "delta=0.5 async mode; hinge loss lambda=0.0001 xu eta0=") and len(first) < 160, first
    assert second.startswith("mpisgd train: eta0 ") and "calibrated on the first 400 rows of learner 0" in second
    assert "mpisgd train: 400/400 rounds (100 %)" in done.stderr  # batch log lines when not on a terminal
    assert "online error" in done.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["configuration"]["ranks"] == 2
    assert report["configuration"]["protocol"]["name"] == "dynamic"
    assert report["online"]["examples"] == 800
    assert len(report["per_rank"]) == 2
    for key in ("violation", "balance_request", "balance_reply", "balance_result", "full_sync", "control"):
        assert key in report["communication"]["sent"]
    assert set(report["time"]) >= {"compute", "communication", "io", "wall"}
    assert "model_messages_paper" in report["communication"]
    lines = (out / "timeline.csv").read_text().splitlines()
    assert lines[0].startswith("round,errors,loss,bytes_total,bytes_violation")
    assert [int(line.split(",")[0]) for line in lines[1:]] == [100, 200, 300, 400]
    seconds = [float(line.split(",")[-1]) for line in lines[1:]]  # the clock: wall seconds since the loop began
    assert lines[0].endswith(",seconds") and 0 < seconds[0] <= seconds[-1] <= report["time"]["wall"]
    from mpisgd.model import LinearModel

    model = LinearModel.load(out / "model.h5")
    assert model.n_features == 20 and model.loss == "hinge"  # mpisgd.defaults
    configuration = report["configuration"]
    assert configuration["learner"]["eta0"] == configuration["eta0_calibration"]["eta0"]
    from mpisgd.cli import build_parser

    sub = next(a for a in build_parser("train")._actions if a.dest == "command").choices["train"]
    dests = {a.dest for a in sub._actions if a.default != "==SUPPRESS=="}
    assert set(configuration["options"]) == dests  # every option's value, given or not
    assert configuration["options"]["poll_rows"] == 256 and configuration["options"]["delta"] == 0.5


def test_one_rank_learns_as_none_under_every_protocol(tmp_path):
    """-n 1: the mean of one model is that model, so static, dynamic and fda
    never stop the learner (ProtocolConfig.checking): the same model as none,
    no check, no sync but the final one, the same bytes."""
    from mpisgd.model import LinearModel

    runs = {"none": ["--protocol", "none"], "static": ["--protocol", "static", "--period", 1],
            "dynamic": ["--protocol", "dynamic", "--delta", 1e-6, "--mode", "sync"],
            "fda": ["--protocol", "fda", "--theta", 1e-6]}
    reports, coefs = {}, {}
    for name, args in runs.items():
        done = mpisgd(1, "train", "--synthetic", "disjunction", "--rounds", 300, "--features", 20, *args,
                      "--out", tmp_path / name, "--quiet")
        assert done.returncode == 0, done.stderr
        reports[name] = json.loads((tmp_path / name / "report.json").read_text())
        coefs[name] = LinearModel.load(tmp_path / name / "model.h5").coef
    for name in ("static", "dynamic", "fda"):
        np.testing.assert_array_equal(coefs[name], coefs["none"])
        assert reports[name]["communication"]["total_bytes"] == reports["none"]["communication"]["total_bytes"]
        assert reports[name]["protocol"]["checks"] == 0, name
        assert reports[name]["protocol"]["full_syncs"]["total"] == 1, name  # the final one


def test_shards_uneven_with_an_empty_one(tmp_path):
    paths = write_shards(tmp_path, [50, 0, 31])
    out = tmp_path / "run"
    done = mpisgd(3, "train", *paths, "--protocol", "static", "--period", 4, "--out", out, "--quiet")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    report = json.loads((out / "report.json").read_text())
    assert [r["examples"] for r in report["per_rank"]] == [50, 0, 31]
    assert report["configuration"]["rounds"] == 50


def test_more_shards_than_ranks_and_central(tmp_path):
    paths = write_shards(tmp_path, [20, 30, 25])
    out = tmp_path / "run"
    done = mpisgd(2, "train", *paths, "--protocol", "none", "--out", out, "--quiet")
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert [r["examples"] for r in report["per_rank"]] == [20, 55]  # rank 1 streams shards 1 and 2
    done = mpisgd(2, "train", *paths, "--protocol", "central", "--out", out, "--quiet", "--overwrite")
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["online"]["examples"] == 75 and report["configuration"]["rounds"] == 30


@pytest.mark.parametrize(
    "args, words",
    [
        (["--protocol", "dynamic", "--delta", "0"], ["delta", "> 0"]),
        (["--protocol", "dynamic", "--delta", "-1"], ["delta"]),
        (["--protocol", "static", "--period", "0"], ["period", ">= 1"]),
    ],
)
def test_bad_protocol_parameters(tmp_path, args, words):
    done = mpisgd(2, "train", "--synthetic", "disjunction", "--rounds", 10, *args, "--out", tmp_path / "r")
    assert done.returncode == 2
    assert done.stderr.count("mpisgd train: error:") == 1, done.stderr  # a usage error: rank 0's alone
    for word in words:
        assert word in done.stderr


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize(
    "args, message",
    [
        (["--delta", "abc"], "argument --delta: expected a number or 'auto', got 'abc'"),
        (["--rounds", "0"], "argument --rounds: must be >= 1, got 0"),
        (["--epochs", "2"], "--epochs counts passes over shards"),
        (["--rounds", "10", "--synthetic", "linear"], "give either SHARD files or --synthetic, not both"),
        (["--rule", "pa", "--lam", "0.1"], "rule: 'pa' has no L2 shrink; use lam 0, got 0.1"),  # the learners'
    ],
)
def test_a_usage_error_is_printed_once_per_job_with_exit_2(tmp_path, n, args, message):
    extra = [write_shards(tmp_path, [5])[0]] if "linear" in args else []
    done = mpisgd(n, "train", *extra, "--synthetic", "disjunction", *args, "--out", tmp_path / "r", timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count(message) == 1 and done.stderr.count("usage: mpisgd train") == 1, done.stderr
    ours = [line for line in done.stderr.splitlines() if "application called MPI_Abort" not in line]  # MPICH's
    assert len(ours) == 2 and done.stdout == "", done.stderr  # the usage and the error
    assert not (tmp_path / "r").exists()


def test_help_is_printed_once_per_job():
    done = mpisgd(2, "train", "--help")
    assert done.returncode == 0 and done.stdout.count("usage: mpisgd train") == 1, done.stdout


def test_config_file_under_mpiexec_is_applied_and_recorded(tmp_path):
    config = tmp_path / "tuning.toml"
    config.write_text('poll-rows = 64\npace = 32\nprotocol-seed = 5\neta0 = 0.5\nmode = "sync"\n')
    out = tmp_path / "run"
    done = mpisgd(2, "train", "--synthetic", "disjunction", "--rounds", 200, "--config", config, "--mode", "async",
                  "--out", out, "--quiet")
    assert done.returncode == 0, done.stderr
    configuration = json.loads((out / "report.json").read_text())["configuration"]
    assert (configuration["poll_rows"], configuration["protocol"]["pace"], configuration["protocol"]["seed"],
            configuration["mode"], configuration["learner"]["eta0"]) == (64, 32, 5, "async", 0.5)
    assert configuration["options"]["config"] == str(config) and configuration["eta0_calibration"] is None
    config.write_text("pace = 32\nstaleness = 'none'\n")
    done = mpisgd(2, "train", "--synthetic", "disjunction", "--config", config, "--out", tmp_path / "bad")
    assert done.returncode == 2
    assert done.stderr.count(f"--config {config}: key 'staleness': invalid int value: 'none'") == 1, done.stderr


@pytest.mark.parametrize("protocol", [["--protocol", "static", "--period", "4"],
                                      ["--protocol", "dynamic", "--mode", "sync", "--period", "2"]])
def test_simulate_runs_what_train_runs_in_sync_mode_on_the_rcv1_like_stream(tmp_path, protocol):
    """The same defaults (γ0 calibrated on learner 0's first rows) and the same
    stream: the simulator's errors, γ0, Δ and bytes are train's at -n 2."""
    common = ["--synthetic", "rcv1", "--features", 3000, "--rounds", 300, *protocol, "--quiet"]
    done = mpisgd(2, "train", *common, "--out", tmp_path / "train")
    assert done.returncode == 0, done.stderr
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    sim = subprocess.run([sys.executable, "-m", "mpisgd", "simulate", "--learners", "2", *map(str, common),
                          "--out", str(tmp_path / "sim")], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert sim.returncode == 0, sim.stderr
    t = json.loads((tmp_path / "train" / "report.json").read_text())
    s = json.loads((tmp_path / "sim" / "report.json").read_text())
    assert t["configuration"]["eta0_calibration"] == s["configuration"]["eta0_calibration"] is not None
    assert t["online"] == s["online"]  # one report schema
    assert t["communication"]["total_bytes"] == s["communication"]["total_bytes"]
    assert t["delta_auto"] == s["delta_auto"]


def test_fewer_shards_than_ranks(tmp_path):
    paths = write_shards(tmp_path, [10, 10])
    done = mpisgd(3, "train", *paths, "--out", tmp_path / "r")
    assert done.returncode != 0
    assert "3 ranks but only 2 shards" in done.stderr


def test_n_features_differ_across_shards(tmp_path):
    paths = write_shards(tmp_path, [10, 10], n_features=12)
    other = write_shards(tmp_path / "..", [10], n_features=7, seed=1)  # another directory
    done = mpisgd(3, "train", *paths, *other, "--out", tmp_path / "r")
    assert done.returncode != 0
    assert "n_features differs across shards" in done.stderr
    assert "7" in done.stderr and "12" in done.stderr


def test_a_corrupt_shard_that_rank_2_would_stream_is_refused_once_before_learning(tmp_path):
    """Rank 0 checks the whole shard set (mpisgd.data.shardset) and every rank
    raises its error: one message, exit 2, no hang, no --out."""
    paths = write_shards(tmp_path, [40, 40])
    bad = tmp_path / "broken.h5"
    bad.write_bytes(b"not an HDF5 file at all")
    done = mpisgd(3, "train", *paths, str(bad), "--out", tmp_path / "r", timeout=60)
    assert done.returncode == 2
    assert done.stderr.count(f"SHARD {bad}: not a shard") == 1, done.stderr
    assert not (tmp_path / "r").exists()


def test_error_mid_run_on_one_rank_ends_the_job(tmp_path):
    """Rank 1's shard has labels the loss refuses: it fails while the others are in a collective."""
    good = write_shards(tmp_path, [200])
    sub = tmp_path / "bad"
    sub.mkdir()
    bad = write_shards(sub, [200], labels=3.0)
    done = mpisgd(2, "train", *good, *bad, "--protocol", "static", "--out", tmp_path / "r", timeout=60)
    assert done.returncode != 0
    assert "rank 1" in done.stderr and "shard-0.h5" in done.stderr and "labels" in done.stderr
    out = tmp_path / "r"  # rank 0 was ended by the abort: at most its run lock is left (rundir.RunLock)
    assert not out.exists() or os.listdir(out) == [".lock"], os.listdir(out)


def test_demo_prints_the_comparison_table(tmp_path):
    env = dict(os.environ, NUMBA_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "mpisgd", "demo", "--ranks", "2", "--rounds", "300",
                           "--out", str(tmp_path), "--quiet"], capture_output=True, text=True, timeout=TIMEOUT,
                          env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("protocol"))
    assert [line.split()[0] for line in lines[header + 2 : header + 5]] == ["none", "static", "dynamic"]
    for name in ("none", "static8", "dynamic"):
        assert (tmp_path / name / "report.json").exists()
    for name in ("dynamic", "dynamic-sync"):  # both dynamic runs with the defaults: half on these 2 learners
        report = json.loads((tmp_path / name / "report.json").read_text())
        protocol = report["configuration"]["protocol"]
        chosen = (protocol["name"], protocol["hedge"], report["protocol"]["hedge"], protocol["delta"],
                  protocol["period"])
        assert chosen == ("dynamic", "auto", "half", "auto", 6), chosen
    assert any(line.startswith("dynamic: keeps") and line.endswith("% of its wall time") for line in lines), lines


def test_resident_mb_changes_no_result_and_must_be_non_negative(tmp_path):
    """--resident-mb only decides whether a rank's shards stay mapped between
    epochs: the same run either way."""
    paths = write_shards(tmp_path, [40, 30])
    reports = []
    for mb in (0, 1024):
        out = tmp_path / f"run-{mb}"
        done = mpisgd(2, "train", *paths, "--epochs", 3, "--protocol", "static", "--period", 4,
                      "--resident-mb", mb, "--block-rows", 16, "--out", out, "--quiet")
        assert done.returncode == 0, done.stderr
        reports.append(json.loads((out / "report.json").read_text()))
    assert reports[0]["online"] == reports[1]["online"]
    assert reports[0]["online"]["examples"] == 210
    done = mpisgd(2, "train", *paths, "--resident-mb", -1, "--out", tmp_path / "bad")
    assert done.returncode == 2
    assert "argument --resident-mb: must be >= 0, got -1" in done.stderr
