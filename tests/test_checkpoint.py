"""Checkpoint and resume of ``mpisgd train``, through real jobs
(``mpiexec -n 3 python -m mpi4py -m mpisgd train ...`` in subprocesses):

- a dynamic-protocol run whose rank 1 is SIGKILLed right after a checkpoint
  (tests/helpers/kill_after_checkpoint.py wraps the command) dies at once;
  resumed, it ends with the same final model, metrics, timeline and
  message/byte counters as the same run uninterrupted (synthetic stream, and
  HDF5 shards with a rank that streams two shards);
- time-based checkpoints change no counter;
- SIGTERM (to the launcher or to one rank) makes every rank checkpoint at the
  next poll and exit with 75; resumed, the run ends as an uninterrupted one;
- a checkpoint of another configuration, of another format version, or with
  a rank file missing is refused with the file and the setting named; an
  incomplete newest checkpoint is passed over for the previous complete one;
- async mode (the default, not deterministic): every checkpoint is a
  consistent cut, and a run SIGKILLed after one, stopped by SIGTERM, or
  checkpointing on time resumes to a consistent end (every row learned once,
  counters on both sides equal), at 2 and 3 ranks.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

from pathlib import Path

import numpy as np
import pytest
from helpers.env import MPIEXEC, ROOT, job_env

from mpisgd.protocol import ProtocolConfig
from mpisgd.wire import RELAY_ABOVE

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason="no mpiexec beside this Python")

RANKS = 3
PROMPT = 30  # seconds: a killed job must be over well within this
HANG = 120
SYNTHETIC = ["--synthetic", "disjunction", "--rounds", 600, "--features", 20, "--seed", 3]
# Dynamic protocol with random augmentation, so that the coordinator's counter,
# statistics and random generator are part of what must be restored.
PROTOCOL = ["--mode", "sync", "--protocol", "dynamic", "--delta", 0.5, "--period", 2,
            "--augmentation", "random-one", "--protocol-seed", 7, "--timeline-every", 50, "--quiet"]


KILLER = Path(__file__).resolve().parent / "helpers" / "kill_after_checkpoint.py"


def job(out, *args, n=RANKS, timeout=HANG, kill_after=None, **env):
    """Run ``mpisgd train ... --out OUT``; (exit code, stdout + stderr, seconds).
    ``kill_after`` (rank, round): that rank SIGKILLs itself after that checkpoint."""
    entry = ["-m", "mpisgd"] if kill_after is None else [str(KILLER), *map(str, kill_after)]
    cmd = [str(MPIEXEC), "-n", str(n), sys.executable, "-m", "mpi4py", *entry, "train",
           *map(str, args), "--out", str(out)]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=job_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"job hung: still running after {timeout} s")
    return proc.returncode, stdout + stderr, time.monotonic() - start


def ok(out, *args, **kw):
    rc, text, _s = job(out, *args, **kw)
    assert rc == 0, text
    return text


def refused(out, *args, **kw):
    rc, text, seconds = job(out, *args, **kw)
    assert rc != 0, text
    assert ("mpisgd: error" in text or "mpisgd train: error" in text) and "Traceback" not in text, text
    assert seconds < PROMPT
    return text


def assert_same_run(a, b):
    """Final model, online metrics, timeline and every counter equal."""
    from mpisgd.model import LinearModel

    ma, mb = LinearModel.load(a / "model.h5"), LinearModel.load(b / "model.h5")
    np.testing.assert_allclose(mb.coef, ma.coef, rtol=0, atol=1e-12)
    assert mb.intercept == pytest.approx(ma.intercept, rel=0, abs=1e-12)
    ra, rb = (json.loads((d / "report.json").read_text()) for d in (a, b))
    for key in ("online", "communication", "protocol"):
        assert ra[key] == rb[key], key
    strip = [[{k: v for k, v in s.items() if k != "time"} for s in r["per_rank"]] for r in (ra, rb)]
    assert strip[0] == strip[1]
    assert [line.rsplit(",", 1)[0] for line in (a / "timeline.csv").read_text().splitlines()] == \
        [line.rsplit(",", 1)[0] for line in (b / "timeline.csv").read_text().splitlines()]  # all but the clock


def rounds_in(out, complete=True):
    d = out / "checkpoints"
    return sorted(int(p.name[6:]) for p in d.glob("round-*") if not complete or (p / "COMPLETE").exists())


def kill_and_resume(tmp_path, reference, args, kill_round, every):
    """Checkpoint every ``every`` rounds, SIGKILL rank 1 after the checkpoint of
    ``kill_round``, resume from the same --out; the result equals ``reference``."""
    out = tmp_path / "killed"
    rc, text, seconds = job(out, *args, "--checkpoint-every", every, kill_after=(1, kill_round))
    assert rc != 0, text
    assert "Killed" in text or "signal 9" in text, text
    assert seconds < PROMPT, f"the killed job took {seconds:.1f} s to end"
    assert not (out / "report.json").exists()
    assert rounds_in(out)[-1] == kill_round
    ok(out, *args, "--checkpoint-every", every, "--resume", out)
    report = json.loads((out / "report.json").read_text())
    assert report["checkpoints"]["resumed_from"]["round"] == kill_round
    assert_same_run(reference, out)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted synthetic run, and one with checkpoints every 100 rounds."""
    base = tmp_path_factory.mktemp("reference")
    ok(base / "plain", *SYNTHETIC, *PROTOCOL)
    ok(base / "checkpointed", *SYNTHETIC, *PROTOCOL, "--checkpoint-every", 100)
    return base


def test_checkpoints_change_nothing_and_keep_the_newest_two(reference):
    assert_same_run(reference / "plain", reference / "checkpointed")
    assert rounds_in(reference / "checkpointed", complete=False) == [400, 500]
    manifest = json.loads((reference / "checkpointed" / "checkpoints" / "round-500" / "COMPLETE").read_text())
    assert manifest["round"] == 500 and manifest["ranks"] == RANKS
    assert manifest["configuration"]["protocol"]["delta"] == 0.5


def test_killed_run_resumes_to_the_same_result_synthetic(tmp_path, reference):
    kill_and_resume(tmp_path, reference / "plain", [*SYNTHETIC, *PROTOCOL], kill_round=300, every=100)


def test_killed_run_resumes_to_the_same_result_shards(tmp_path):
    """4 shards on 3 ranks (rank 2 streams two); the resumed run starts
    mid-block (--block-rows 64) of every rank's first shard."""
    from mpisgd.data.synthetic import DisjunctionStream, write_learner_shards

    (tmp_path / "data").mkdir()
    paths = write_learner_shards(DisjunctionStream(n_features=20, n_learners=4, seed=5), 300, tmp_path / "data")
    data = [*paths, "--block-rows", 64]
    ok(tmp_path / "plain", *data, *PROTOCOL)
    kill_and_resume(tmp_path, tmp_path / "plain", [*data, *PROTOCOL], kill_round=200, every=50)


@pytest.mark.parametrize("protocol", [
    ["--protocol", "static", "--period", 7, "--average"],
    ["--protocol", "central", "--learners", 4],  # rank 0 alone, round-major over 4 streams
])
def test_killed_run_resumes_to_the_same_result_other_protocols(tmp_path, protocol):
    args = ["--synthetic", "linear", "--rounds", 300, "--features", 30, "--loss", "squared",
            "--eta0", 0.05, "--timeline-every", 40, "--quiet", *protocol]
    ok(tmp_path / "plain", *args)
    kill_and_resume(tmp_path, tmp_path / "plain", args, kill_round=120, every=60)


@pytest.mark.parametrize("hedge", ["auto", "counter"])  # counter at 3 ranks: partial violations and replies
def test_killed_run_with_partial_averaging_resumes_to_the_same_result(tmp_path, hedge):
    """--partial: r is the mean only on the coordinates synced so far, and the
    learners keep their own elsewhere; the checkpoint's r and models are that state."""
    args = [*SYNTHETIC, *PROTOCOL, "--partial", 0.5, "--hedge", hedge]
    ok(tmp_path / "plain", *args)
    kill_and_resume(tmp_path, tmp_path / "plain", args, kill_round=300, every=100)


def test_killed_run_with_a_budget_resumes_with_the_steered_delta(tmp_path):
    """--budget steers Δ at every full sync: a resumed run goes on from the Δ it had reached."""
    args = [*SYNTHETIC, *PROTOCOL, "--budget", 0.3]
    ok(tmp_path / "plain", *args)
    budget = json.loads((tmp_path / "plain" / "report.json").read_text())["budget"]
    assert budget["steps"] > 2 and budget["delta"] != 0.5  # steered, before and after the kill
    kill_and_resume(tmp_path, tmp_path / "plain", args, kill_round=300, every=100)
    resumed = json.loads((tmp_path / "killed" / "report.json").read_text())["budget"]
    assert resumed == budget


def test_killed_run_resumes_its_delta_auto_pilot(tmp_path):
    """A checkpoint during --delta auto's pilot holds its rows so far (``Pilot.state_dict``):
    resumed there, the run measures the same Δ and ends as the uninterrupted one."""
    args = [*SYNTHETIC, *PROTOCOL[:4], "--delta", "auto", "--pilot-rounds", 60, *PROTOCOL[6:]]
    ok(tmp_path / "plain", *args)
    kill_and_resume(tmp_path, tmp_path / "plain", args, kill_round=40, every=40)
    plain, resumed = (json.loads((tmp_path / d / "report.json").read_text())["delta_auto"] for d in ("plain", "killed"))
    assert resumed == plain and plain["pilot_rows"] == 60 * RANKS


@pytest.mark.parametrize("kill_round", [40, 120])
def test_killed_run_resumes_the_defaults_partial_syncs(tmp_path, kill_round):
    """Rows that spread (the linear teacher on 8,000 features): --delta auto
    turns partial syncs on at its pilot's end; killed in the pilot or after
    it, the resumed run makes the same choice, or keeps it, and ends as the
    uninterrupted one."""
    args = ["--synthetic", "linear", "--rounds", 300, "--features", 8000, "--seed", 3, *PROTOCOL[:4], "--delta", "auto",
            "--pilot-rounds", 60, *PROTOCOL[6:]]
    ok(tmp_path / "plain", *args)
    kill_and_resume(tmp_path, tmp_path / "plain", args, kill_round=kill_round, every=40)
    plain, resumed = (json.loads((tmp_path / d / "report.json").read_text())["delta_auto"] for d in ("plain", "killed"))
    assert resumed == plain and plain["partial"] is not None


def test_time_based_checkpoints_change_no_counter(tmp_path, reference):
    out = tmp_path / "timed"
    ok(out, *SYNTHETIC, *PROTOCOL, "--checkpoint-seconds", 1e-9, "--poll-rows", 50)
    assert rounds_in(out) == [500, 550]
    assert json.loads((out / "report.json").read_text())["checkpoints"]["written"] == 11
    assert_same_run(reference / "plain", out)
    ok(out, *SYNTHETIC, *PROTOCOL, "--resume", out)  # from round 550
    assert_same_run(reference / "plain", out)


def copy_checkpoints(reference, tmp_path):
    dest = tmp_path / "copy"
    shutil.copytree(reference / "checkpointed" / "checkpoints", dest / "checkpoints")
    return dest


@pytest.mark.parametrize("change, words", [
    (["--delta", 0.7], ["protocol.delta: checkpoint 0.5, this run 0.7"]),
    (["--loss", "log"], ["learner.loss: checkpoint 'hinge', this run 'log'"]),  # hinge: mpisgd.defaults
    (["--seed", 4], ["data.seed: checkpoint 3, this run 4"]),
    (["--period", 4], ["protocol.period"]),
])
def test_resume_refuses_another_configuration(tmp_path, reference, change, words):
    text = refused(tmp_path / "new", *SYNTHETIC, *PROTOCOL, *change, "--resume", reference / "checkpointed")
    assert "round-500/COMPLETE is of another configuration" in text, text
    for word in words:
        assert word in text, text


ELASTIC_ROWS = 1000  # rows of each of 6 shards


@pytest.fixture(scope="module")
def elastic_data(tmp_path_factory):
    """6 shards (3 ranks stream 2 each, 2 ranks 3 each) and the uninterrupted 3-rank run on them."""
    from mpisgd.data.synthetic import NeuralNetStream, write_learner_shards

    base = tmp_path_factory.mktemp("elastic")
    # label noise: every part of the run makes errors, the rows after the resume too
    paths = write_learner_shards(NeuralNetStream(n_features=40, n_learners=6, seed=11), ELASTIC_ROWS, base / "data")
    args = [*paths, "--block-rows", 64, *PROTOCOL]
    ok(base / "plain", *args)
    return base, args


@pytest.mark.parametrize("before, after, mode", [(3, 2, "sync"), (2, 3, "sync"), (3, 2, "async")])
def test_a_checkpoint_of_k_ranks_resumes_on_another_number(tmp_path, elastic_data, before, after, mode):
    """Elastic resume: a run checkpointed on ``before`` ranks halfway, resumed
    on ``after``: every row of the 6 shards is learned once (the examples
    counted), T is the checkpoint's round plus the longest share of the rows
    left, and the online error is within 2 percentage points of the
    uninterrupted 3-rank run's and not 2 % worse (5 % in the default mode).
    Sync mode: checkpointed again on ``after`` ranks and resumed on as many,
    it ends as the elastic run did, bit for bit. Async mode (a cut, then the rows dealt again):
    every message counted on both sides."""
    base, args = elastic_data
    args = [*args, "--mode", mode]
    rows = 6 * ELASTIC_ROWS
    T = rows // before
    first = tmp_path / "first"
    ok(first, *args, "--checkpoint-every", T // 2, n=before)
    out = tmp_path / "elastic"
    text = ok(out, *args, "--resume", first, "--checkpoint-every", 500, n=after)
    report = json.loads((out / "report.json").read_text())
    assert report["checkpoints"]["resumed_from"] == {"directory": str(first / "checkpoints" / f"round-{T // 2}"),
                                                     "round": T // 2, "ranks": before}
    assert report["online"]["examples"] == rows  # every row learned once
    assert report["configuration"]["rounds"] == T // 2 + -(-(rows - before * (T // 2)) // after)
    plain = json.loads((base / "plain" / "report.json").read_text())

    def after_half(out, t):  # the online error on the rows after the first 3000 (round t)
        rows = {int(r.split(",")[0]): int(r.split(",")[1]) for r in (out / "timeline.csv").read_text().split()[1:]}
        return (rows[max(rows)] - rows[t]) / (rows_total - 3000)

    rows_total = rows
    print(f"online error: {before} -> {after} ranks {report['online']['error_rate']:.4f} "
          f"({after_half(out, T // 2):.4f} after the resume), uninterrupted 3 ranks "
          f"{plain['online']['error_rate']:.4f} ({after_half(base / 'plain', 1000):.4f} after round 1000)")
    # within 2 percentage points, and not 2 % (relative) worse: a 2 -> 3 run's first half runs on 2 ranks,
    # whose online error is lower than 3 ranks' (measured 0.1530 against 0.1588: 3.7 % lower). The default
    # mode's runs differ from launch to launch with the ranks' scheduling (0.1622 against 0.1588 seen under
    # load): 5 % there.
    assert abs(report["online"]["error_rate"] - plain["online"]["error_rate"]) <= 0.02
    assert report["online"]["error_rate"] <= (1.05 if mode == "async" else 1.02) * plain["online"]["error_rate"]
    for side in ("messages", "bytes"):  # every message counted by its sender and its receiver, before and after
        for category in report["per_rank"][0]["communication"]["sent"]:
            assert sum(s["communication"]["sent"][category][side] for s in report["per_rank"]) == \
                sum(s["communication"]["received"][category][side] for s in report["per_rank"]), (category, side)
    if mode == "async":
        return
    again = tmp_path / "again"
    shutil.copytree(out / "checkpoints", again / "checkpoints")
    ok(again, *args, "--resume", again, n=after)
    assert json.loads((again / "report.json").read_text())["checkpoints"]["resumed_from"]["ranks"] == after
    assert_same_run(out, again)


def test_resume_refuses_another_format_version(tmp_path, reference):
    """Neither checkpoint is intact: every reason is named."""
    import h5py

    from mpisgd.checkpoint import FORMAT_VERSION

    src = copy_checkpoints(reference, tmp_path)
    rank1 = src / "checkpoints" / "round-500" / "rank-1.h5"
    with h5py.File(rank1, "r+") as f:
        f.attrs["format_version"] = 0
    manifest = src / "checkpoints" / "round-400" / "COMPLETE"
    manifest.write_text(manifest.read_text().replace(f'"format_version": {FORMAT_VERSION}', '"format_version": 99'))
    text = refused(tmp_path / "new", *SYNTHETIC, *PROTOCOL, "--resume", src)
    assert f"--resume {src}: no intact checkpoint" in text, text
    assert f"{rank1}: format version 0, this mpisgd reads version {FORMAT_VERSION}" in text, text
    assert f"{manifest}: format version 99" in text, text


def replace_rank_file(directory, rank, source=None, **attrs):
    """Put ``source`` (a rank file) in place of ``directory``'s rank file,
    with ``attrs`` changed (and its digests made to match)."""
    from mpisgd.checkpoint import rank_file, read_rank, write_rank

    arrays, saved = read_rank(source or rank_file(directory, rank))
    saved.pop("attrs_sha256")
    write_rank(rank_file(directory, rank), arrays, {**saved, **attrs})


@pytest.mark.parametrize("n", [2, 3])
def test_a_rank_file_of_another_round_is_refused_on_every_rank_or_passed_over(tmp_path, reference, n):
    """round-400's rank-1.h5 copied over round-500's: resuming from round-500
    by name is refused at once, with the same message on every rank (not a
    hang, not an MPI error); resuming from the run (at 3 ranks) passes
    round-500 over, says so, and goes on from round-400 to the uninterrupted
    run's end."""
    args = [*SYNTHETIC, *PROTOCOL]
    if n == RANKS:
        src = copy_checkpoints(reference, tmp_path)
    else:
        src = tmp_path / "copy"
        ok(src, *args, "--checkpoint-every", 100, n=n)
    rounds = src / "checkpoints"
    shutil.copy(rounds / "round-400" / "rank-1.h5", rounds / "round-500" / "rank-1.h5")
    text = refused(tmp_path / "new", *args, "--resume", rounds / "round-500", n=n)
    assert (f"checkpoint {rounds / 'round-500' / 'rank-1.h5'}: of round 400, but {rounds / 'round-500' / 'COMPLETE'} "
            "is of round 500 (a rank file of another checkpoint)") in text, text
    if n != RANKS:
        return  # the fallback once, at 3 ranks
    out = tmp_path / "resumed"
    text = ok(out, *args, "--resume", src, n=n)
    assert f"resuming from {rounds / 'round-400'}, the newest intact checkpoint; passed over: {rounds / 'round-500'}" \
        in text, text
    assert json.loads((out / "report.json").read_text())["checkpoints"]["resumed_from"]["round"] == 400
    assert_same_run(reference / "plain", out)


def test_a_rank_file_of_another_run_is_refused(tmp_path, reference):
    src = copy_checkpoints(reference, tmp_path)
    directory = src / "checkpoints" / "round-500"
    replace_rank_file(directory, 2, run="0" * 32)  # another run's id, all else the same
    text = refused(tmp_path / "new", *SYNTHETIC, *PROTOCOL, "--resume", directory)
    assert f"checkpoint {directory / 'rank-2.h5'}: of another run than {directory / 'COMPLETE'}" in text, text


def test_a_rank_file_with_a_flipped_bit_or_an_altered_attribute_is_refused(tmp_path):
    import h5py

    from mpisgd.checkpoint import read_rank, write_rank
    from mpisgd.errors import MpisgdError

    path = tmp_path / "rank-0.h5"
    arrays = {"learners/V": np.arange(1000.0), "pilot/values": np.zeros(0), "transport/epoch": np.array(3)}
    write_rank(str(path), arrays, {"round": 5, "delta": "0.5"})
    back, attrs = read_rank(str(path))
    for name, value in arrays.items():
        np.testing.assert_array_equal(back[name], value)
    assert attrs["round"] == 5 and attrs["delta"] == "0.5"
    good = path.read_bytes()
    with h5py.File(path, "r") as f:
        V = f["learners/V"]
        at = (V.id.get_offset() if V.chunks is None else V.id.get_chunk_info(0).byte_offset) + 8 * 11 + 6  # in 11.0
    flipped = bytearray(good)
    flipped[at] ^= 0x10
    path.write_bytes(bytes(flipped))
    with pytest.raises(MpisgdError, match=r"rank-0.h5: dataset 'learners/V' is corrupt"):
        read_rank(str(path))
    path.write_bytes(good)
    with h5py.File(path, "r+") as f:
        f.attrs["round"] = 6
    with pytest.raises(MpisgdError, match=r"rank-0.h5: its attributes do not match their checksum"):
        read_rank(str(path))


def test_incomplete_checkpoints(tmp_path, reference):
    """round-500 incomplete (as if killed while writing it) is passed over
    for round-400, whose missing rank file is named; with neither complete,
    both are named. (A resume from the checkpoint before a passed-over one:
    test_a_rank_file_of_another_round_is_refused_on_every_rank_or_passed_over.)"""
    src = copy_checkpoints(reference, tmp_path)
    (src / "checkpoints" / "round-500" / "COMPLETE").unlink()
    missing = src / "checkpoints" / "round-400" / "rank-2.h5"
    missing.unlink()
    text = refused(tmp_path / "new", *SYNTHETIC, *PROTOCOL, "--resume", src)
    assert f"checkpoint {missing}: rank file missing" in text, text

    (src / "checkpoints" / "round-400" / "COMPLETE").unlink()
    text = refused(tmp_path / "new", *SYNTHETIC, *PROTOCOL, "--resume", src)
    assert "no complete checkpoint" in text and "round-400" in text and "round-500" in text, text


PACED = Path(__file__).resolve().parent / "helpers" / "paced.py"


def signalled_job(out, args, signal_it):
    """Run ``mpisgd train ARGS --out OUT`` at a set pace (tests/helpers/paced.py),
    call ``signal_it(the pid of mpiexec)`` once rank 0 is past the poll of round
    150, and return (exit code, stdout + stderr, seconds from its return to the end)."""
    cmd = [str(MPIEXEC), "-n", str(RANKS), sys.executable, "-m", "mpi4py", str(PACED), "0.3", "train",
           *map(str, args), "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        for line in proc.stdout:  # mid-run
            if line.startswith("paced: round 150"):
                break
        signal_it(proc.pid)
        start = time.monotonic()
        stdout, stderr = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, stdout + stderr, time.monotonic() - start


def sigterm(signalled):
    """``signal_it`` of ``signalled_job``: SIGTERM to mpiexec ("launcher") or to rank 1 alone ("one rank")."""
    from test_faults import _ranks

    if signalled == "launcher":
        return lambda mpiexec: os.kill(mpiexec, signal.SIGTERM)
    return lambda mpiexec: os.kill(_ranks(mpiexec)[1], signal.SIGTERM)


@pytest.mark.parametrize("signalled", ["launcher", "one rank"])
def test_sigterm_checkpoints_stops_and_resumes_to_the_same_result(tmp_path, reference, signalled):
    """SIGTERM to mpiexec (which passes it to every rank, as at a SLURM time
    limit) or to rank 1 alone: every rank checkpoints at the next poll and the
    job exits with 75, without outputs; resumed, the run ends as the
    uninterrupted one. Nothing is lost: the checkpoint is of the round where it stopped."""
    from mpisgd.checkpoint import EXIT_STOPPED

    out = tmp_path / "stopped"
    rc, text, _seconds = signalled_job(out, [*SYNTHETIC, *PROTOCOL, "--checkpoint-seconds", 3600, "--poll-rows", 50],
                                       sigterm(signalled))
    assert rc == EXIT_STOPPED, text
    assert "stopped by a signal" in text and "Traceback" not in text, text
    stopped = rounds_in(out)[-1]
    assert 150 <= stopped < 600 and stopped % 50 == 0, text
    assert f"checkpoint of round {stopped}" in text, text
    assert not (out / "report.json").exists() and not (out / "model.h5").exists()
    ok(out, *SYNTHETIC, *PROTOCOL, "--checkpoint-seconds", 3600, "--resume", out)
    report = json.loads((out / "report.json").read_text())
    assert report["checkpoints"]["resumed_from"]["round"] == stopped
    assert_same_run(reference / "plain", out)


# -- async mode (the default): a consistent cut, then the checkpoint ---------------------

ASYNC = ["--protocol", "dynamic", "--delta", 0.5, "--period", 2, "--augmentation", "random-one",
         "--protocol-seed", 7, "--timeline-every", 50, "--poll-rows", 25, "--quiet"]  # --mode async: the default
ROUNDS = 600


def assert_cut(directory, n):
    """A checkpoint of async mode is a consistent cut: every rank at its round,
    with the same reference, nothing in flight (no model awaiting a result, every
    result sent taken), and every message counted by a sender and a receiver."""
    from mpisgd.checkpoint import read_manifest, read_rank, rank_file

    t = read_manifest(directory)["round"]
    files = [read_rank(rank_file(directory, r)) for r in range(n)]
    for r, (arrays, attrs) in enumerate(files):
        assert attrs["round"] == t and json.loads(attrs["run.rows_done"]) == t, r
        assert arrays["learners/examples"][0] == t, r
        np.testing.assert_array_equal(arrays["learners/r"], files[0][0]["learners/r"])
        assert arrays["learners/r_bias"] == files[0][0]["learners/r_bias"]
        assert len(arrays["transport/last_sent"]) == 0 and "check/pending" not in arrays, r
        assert json.loads(attrs["transport.epoch"]) == files[0][0]["transport/results_sent"][r] or r == 0, r
    for sent, received in (("sent_messages", "recv_messages"), ("sent_bytes", "recv_bytes")):
        np.testing.assert_array_equal(sum(a[f"comm/{sent}"] for a, _ in files),
                                      sum(a[f"comm/{received}"] for a, _ in files))
    return t


def assert_consistent(out, n, resumed_from=None):
    """The invariants of a finished async run: every row of every rank learned
    once, T rounds, each timeline row once, every message counted on both sides,
    the coordinator's counts agreeing."""
    report = json.loads((out / "report.json").read_text())
    assert report["configuration"]["rounds"] == ROUNDS
    assert report["online"]["examples"] == n * ROUNDS
    assert [s["examples"] for s in report["per_rank"]] == [ROUNDS] * n
    for side in ("messages", "bytes"):
        for category in report["per_rank"][0]["communication"]["sent"]:
            sent = sum(s["communication"]["sent"][category][side] for s in report["per_rank"])
            received = sum(s["communication"]["received"][category][side] for s in report["per_rank"])
            assert sent == received, (category, side)
    p = report["protocol"]
    carried = not ProtocolConfig().syncs_every_violation(n)  # k ≤ 2: a violation is an empty message
    assert report["communication"]["model_messages_paper"]["violation"] == p["violations"] * carried
    assert carried or report["communication"]["sent"]["violation"]["bytes"] == 0
    assert p["full_syncs"]["final"] == 1
    rounds = [int(line.split(",")[0]) for line in (out / "timeline.csv").read_text().splitlines()[1:]]
    assert rounds == list(range(50, ROUNDS + 1, 50))
    if resumed_from is not None:
        assert report["checkpoints"]["resumed_from"]["round"] == resumed_from
    return report


@pytest.mark.parametrize("n", [2, 3])
def test_async_killed_run_resumes_consistently(tmp_path, n):
    """--checkpoint-every in the default mode: rank 1 SIGKILLed right after the
    checkpoint of round 300; the job dies at once; resumed, the run learns the
    remaining rows (the checkpoint holds exactly 300 rows per rank, the end
    600) and ends consistent."""
    out = tmp_path / "killed"
    args = [*SYNTHETIC, *ASYNC, "--checkpoint-every", 100]
    rc, text, seconds = job(out, *args, n=n, kill_after=(1, 300))
    assert rc != 0, text
    assert "Killed" in text or "signal 9" in text, text
    assert seconds < PROMPT, f"the killed job took {seconds:.1f} s to end"
    assert not (out / "report.json").exists()
    assert rounds_in(out) == [200, 300]
    for t in rounds_in(out):
        assert assert_cut(out / "checkpoints" / f"round-{t}", n) == t
    ok(out, *args, "--resume", out, n=n)
    assert_consistent(out, n, resumed_from=300)
    assert rounds_in(out) == [400, 500]
    assert assert_cut(out / "checkpoints" / "round-500", n) == 500


@pytest.mark.parametrize("n", [2, 3, 2 + RELAY_ABOVE])
def test_async_time_based_checkpoints_are_consistent_cuts(tmp_path, n):
    """--checkpoint-seconds in the default mode: rank 0 asks for a cut at every
    answer; each is agreed on, taken and the run goes on; resumed from the last
    one, it ends consistent. At 2 + RELAY_ABOVE ranks FULLSYNC and the results
    to everyone are relayed (docs/WIRE.md, "Relays"), and cuts meet them."""
    out = tmp_path / "timed"
    args = [*SYNTHETIC, *ASYNC, "--checkpoint-seconds", 1e-9]
    ok(out, *args, n=n)
    report = assert_consistent(out, n)
    assert report["checkpoints"]["written"] >= 2
    last = rounds_in(out)[-1]
    assert 0 < last < ROUNDS
    assert assert_cut(out / "checkpoints" / f"round-{last}", n) == last
    ok(out, *args, "--resume", out, n=n)
    assert_consistent(out, n, resumed_from=last)


@pytest.mark.parametrize("signalled", ["launcher", "one rank"])
def test_async_sigterm_checkpoints_stops_and_resumes(tmp_path, signalled):
    """SIGTERM in the default mode: to mpiexec (every rank) or to rank 1 alone
    (which tells rank 0): every rank stops at an agreed round, checkpoints it
    and the job exits with 75; resumed, the run ends consistent."""
    from mpisgd.checkpoint import EXIT_STOPPED

    out = tmp_path / "stopped"
    rc, text, _seconds = signalled_job(out, [*SYNTHETIC, *ASYNC, "--checkpoint-seconds", 3600], sigterm(signalled))
    assert rc == EXIT_STOPPED, text
    assert "stopped by a signal" in text and "Traceback" not in text, text
    stopped = rounds_in(out)[-1]
    assert 150 <= stopped < ROUNDS, text
    assert f"checkpoint of round {stopped}" in text, text
    assert not (out / "report.json").exists() and not (out / "model.h5").exists()
    assert assert_cut(out / "checkpoints" / f"round-{stopped}", RANKS) == stopped
    ok(out, *SYNTHETIC, *ASYNC, "--checkpoint-seconds", 3600, "--resume", out)
    assert_consistent(out, RANKS, resumed_from=stopped)


STATIC = ["--protocol", "static", "--period", 2, "--mode", "sync", "--timeline-every", 50, "--quiet"]


@pytest.mark.parametrize("protocol", [STATIC, PROTOCOL, ASYNC], ids=["static", "sync", "async"])
def test_sigterm_with_a_stuck_rank_ends_the_job_after_the_grace(tmp_path, protocol):
    """Rank 2 stuck (SIGSTOP), SIGTERM to mpiexec 2 s later, when the other
    ranks wait for rank 2 inside MPI, where no Python signal handler runs:
    each rank's watchdog ends it --stop-grace seconds after its signal, says
    why, and the job ends instead of hanging; the newest complete
    checkpoint (of round 100 or later) is intact, and no outputs are written."""
    from test_faults import _ranks

    from mpisgd.checkpoint import rank_file, read_manifest, read_rank

    def stop_rank_2_then_sigterm(mpiexec):
        os.kill(_ranks(mpiexec)[2], signal.SIGSTOP)
        time.sleep(2)
        os.kill(mpiexec, signal.SIGTERM)

    out = tmp_path / "stuck"
    rc, text, seconds = signalled_job(out, [*SYNTHETIC, *protocol, "--checkpoint-every", 100, "--poll-rows", 50,
                                            "--stop-grace", 2], stop_rank_2_then_sigterm)
    # 9: mpiexec reports a rank killed by SIGKILL (the watchdogs', and then its own of the stopped rank)
    assert rc == signal.SIGKILL and 2 <= seconds < 5, (rc, seconds, text)
    assert "SIGTERM 2 s ago, and the run has not stopped (a rank stuck or gone?)" in text, text
    assert "stopped by a signal" not in text, text
    assert not (out / "report.json").exists() and not (out / "model.h5").exists()
    newest = out / "checkpoints" / f"round-{rounds_in(out)[-1]}"
    t = read_manifest(newest)["round"]
    assert t >= 100
    assert [read_rank(rank_file(newest, r))[1]["round"] for r in range(RANKS)] == [t] * RANKS


@pytest.mark.parametrize("grace", [0, -1, "nan", "inf"])
def test_a_stop_grace_that_is_not_a_positive_number_of_seconds_is_refused(tmp_path, grace):
    text = refused(tmp_path / "bad", *SYNTHETIC, *PROTOCOL, "--checkpoint-every", 100, "--stop-grace", grace)
    assert f"--stop-grace must be a number of seconds > 0, got {float(grace)}" in text, text
    assert not (tmp_path / "bad").exists()


def test_a_fresh_run_into_the_out_of_an_unfinished_run_keeps_its_checkpoints(tmp_path, reference):
    """Checkpoints and no report.json (a run killed or stopped): a run without
    --resume is refused before it learns (its checkpoints would prune them);
    --overwrite starts afresh, saying that it removes them."""
    src = copy_checkpoints(reference, tmp_path)
    text = refused(src, *SYNTHETIC, *PROTOCOL)
    assert (f"--out {src} holds the checkpoints of an earlier run (newest {src / 'checkpoints' / 'round-500'}), "
            f"which this run's would replace: pass --resume {src} to go on from them") in text, text
    assert rounds_in(src) == [400, 500]
    text = ok(src, *SYNTHETIC, *PROTOCOL, "--overwrite", "--checkpoint-every", 250)
    assert f"removing the checkpoints of an earlier run in {src / 'checkpoints'}" in text, text
    assert rounds_in(src) == [250, 500]
    assert_same_run(reference / "plain", src)


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7])
def test_the_rows_left_are_dealt_once_each_and_served_from_the_resumed_round(size):
    """``rows_left`` and ``deal`` (the rows of 3 streams after 4, 0 and 9 of
    them, one stream done) against a NumPy twin: the dealt parts, in rank
    order, are exactly the rows left; each rank's ``DealtSource`` serves its
    rows, in order, as rounds t, t + 1, ... of the resumed run, also after a
    ``seek`` (a resume of the dealt run)."""
    from mpisgd.data.partition import deal, rows_left
    from mpisgd.data.rows import ArraySource, DealtSource

    rows = {0: 10, 1: 7, 2: 9}  # stream -> its rows; row r of stream s has label 100 s + r
    done = {0: 4, 1: 0, 2: 9}
    left = [p for s in rows for p in rows_left([(s, 0, rows[s])], done[s])]
    want = [(s, r) for s in rows for r in range(done[s], rows[s])]  # the twin: every row not learned, in order
    dealt = deal(left, size)
    got = [(s, r) for parts in dealt for s, a, b in parts for r in range(a, b)]
    assert got == want
    sizes = [sum(b - a for _s, a, b in parts) for parts in dealt]
    assert max(sizes) - min(sizes) <= 1

    def stream(s):
        n = rows[s]
        return ArraySource(np.arange(n + 1), np.zeros(n, np.int32), np.ones(n), 100.0 * s + np.arange(n), 1)

    t = 12
    served = []
    for parts in dealt:
        source = DealtSource([(stream(s), a, b) for s, a, b in parts], t, 1)
        assert source.rounds == t + len(source_rows := [100 * s + r for s, a, b in parts for r in range(a, b)])
        assert source.rows_until(t) == 0 and source.rows_until(t + 2) == min(2, len(source_rows))
        labels = []
        while (piece := source.take(3)) is not None:
            labels += piece[3].tolist()
        assert labels == source_rows
        served += labels
        again = DealtSource([(stream(s), a, b) for s, a, b in parts], t, 1)
        again.seek(t + 2)
        rest = []
        while (piece := again.take(100)) is not None:
            rest += piece[3].tolist()
        assert rest == source_rows[2:]
    assert served == [100 * s + r for s, r in want]
