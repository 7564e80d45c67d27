"""Faults of a whole MPI job: a failing rank ends the job promptly (no hang)
with a non-zero exit and that rank's message; a bad output directory is
reported before training starts.

Each test launches a real job (``mpiexec -n 3 python -m mpi4py ...``, the
venv's MPICH) in a subprocess with a timeout, so a hang fails the test
instead of blocking the suite.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from helpers.env import MPIEXEC, ROOT, job_env

HELPERS = Path(__file__).resolve().parent / "helpers"
PROMPT = 30  # seconds: a failed job must be over well within this (it takes ~1 s)
HANG = 90  # seconds before a job that should have ended is called hung


def launch(*args, n=3):
    """``mpiexec -n N python -m mpi4py ARGS`` from the repo root, as a Popen
    leading a process group of its own (so that a hung job can be killed whole)."""
    return subprocess.Popen(
        [str(MPIEXEC), "-n", str(n), sys.executable, "-m", "mpi4py", *map(str, args)],
        cwd=ROOT, env=job_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )


def finish(proc, timeout=HANG):
    """(exit code, stdout + stderr, seconds) of a launched job; kills it if it hangs."""
    start = time.monotonic()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a rank outside the group holds the pipes
            out, err = "", ""
        pytest.fail(f"job hung: still running after {timeout} s\n{out}\n{err}")
    return proc.returncode, out + err, time.monotonic() - start


def run_job(*args, n=3, timeout=HANG):
    return finish(launch(*args, n=n), timeout)


@pytest.mark.parametrize("failing_rank", [0, 1])
def test_exception_on_one_rank_ends_the_job_with_its_message(failing_rank):
    rc, out, seconds = run_job(HELPERS / "fail_on_rank.py", "raise", failing_rank)
    assert rc != 0, out
    assert f"deliberate failure on rank {failing_rank}" in out
    assert "passed a barrier" not in out
    assert seconds < PROMPT, f"the job took {seconds:.1f} s to end"


@pytest.mark.parametrize("failing_rank", [0, 2])
def test_rank_killed_by_sigkill_ends_the_job(failing_rank):
    rc, out, seconds = run_job(HELPERS / "fail_on_rank.py", "kill", failing_rank)
    assert rc != 0, out
    assert "passed a barrier" not in out
    assert seconds < PROMPT, f"the job took {seconds:.1f} s to end"


def _ranks(mpiexec_pid):
    """{rank: pid} of the Python processes under an mpiexec (hydra: mpiexec,
    then hydra_pmi_proxy, then the ranks, which carry PMI_RANK; a rank's own
    children, such as its watchdog, inherit it but are not ranks)."""
    ranks, todo = {}, [mpiexec_pid]
    while todo:
        pid = todo.pop()
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            rank = next((int(var[9:]) for var in env if var.startswith(b"PMI_RANK=")), None)
            if rank is not None:
                ranks[rank] = pid
                continue
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return ranks


def _shard(path, seed):
    from mpisgd.data.shard import write_shard

    rng = np.random.default_rng(seed)
    X = sp.random(50, 20, density=0.2, format="csr", random_state=rng)
    write_shard(path, X, np.where(rng.random(50) < 0.5, -1.0, 1.0))


def test_bad_input_of_one_rank_ends_the_training_job(tmp_path):
    """Rank 1's shard is missing: rank 0's check of the shard set finds it
    before any learning, and every rank ends with its message, printed once,
    not a hang or a traceback."""
    shards = [tmp_path / f"part{i}.h5" for i in range(3)]
    _shard(shards[0], 0)
    _shard(shards[2], 2)
    rc, out, seconds = run_job("-m", "mpisgd", "train", *shards, "--out", tmp_path / "out")
    assert rc == 2, out
    assert out.count("part1.h5") == 1, out
    assert "Traceback" not in out, out
    assert seconds < PROMPT, f"the job took {seconds:.1f} s to end"


def test_unwritable_output_dir_is_reported_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    out_dir = blocker / "out"
    # 10^8 rounds would run for hours: only an early check ends this in time.
    rc, out, seconds = run_job("-m", "mpisgd", "train", "--synthetic", "disjunction",
                               "--rounds", 10**8, "--out", out_dir, timeout=10)
    assert rc != 0, out
    assert str(out_dir) in out and "mpisgd: error" in out, out
    assert "Traceback" not in out, out


def test_job_script_refuses_an_unwritable_output_dir_before_launching(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    proc = subprocess.run(
        ["bash", ROOT / "jobs" / "local.sh", "-n", "2", ROOT / "jobs" / "train.sbatch"],
        cwd=ROOT, env=job_env(MPISGD_RUNS=blocker, MPISGD_VENV=sys.prefix),
        capture_output=True, text=True, timeout=PROMPT,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"cannot create the output directory {blocker}/" in proc.stderr
    assert "mpiexec" not in proc.stdout


FAILING_MPI_TESTS = '''
import pytest
from mpi4py import MPI
from helpers.mpi import Deferred

pytestmark = pytest.mark.mpi(min_size=2)


def test_deferred():  # a failed check inside a sequence of collectives, gathered to every rank
    comm = MPI.COMM_WORLD.Dup()
    checks = Deferred(comm)
    for t in range(50):
        comm.allreduce(t)
        with checks.check():
            assert not (comm.rank == 1 and t == 10), "deliberate failure on rank 1"
    checks.raise_on_every_rank()


def test_bare():  # a bare assert between collectives: the other ranks are left waiting
    for t in range(50):
        MPI.COMM_WORLD.allreduce(t)
        assert not (MPI.COMM_WORLD.rank == 1 and t == 10), "deliberate bare failure on rank 1"
'''


@pytest.mark.parametrize("test", ["test_deferred", "test_bare"])
def test_a_failing_assert_on_one_rank_fails_the_mpi_test_run_promptly(tmp_path, test):
    """What `make test-mpi` runs (tests/conftest.py as a plugin, -x), on a
    test that fails on rank 1 only: the run ends with a failure well within
    60 s, gathered (the other ranks fail too) or by aborting the job."""
    (tmp_path / "test_failing.py").write_text(FAILING_MPI_TESTS)
    cmd = [str(MPIEXEC), "-n", "2", sys.executable, "-m", "pytest", "-p", "conftest", "-q", "-x",
           "--only-mpi", "-m", "mpi", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
           f"{tmp_path}/test_failing.py::{test}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=job_env(PYTHONPATH=HELPERS.parent), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    rc, out, seconds = finish(proc, timeout=HANG)
    assert rc != 0, out
    assert "deliberate" in out, out
    if test == "test_deferred":
        assert "failed on another rank:\nE           rank 1: AssertionError: deliberate failure" in out, out
        assert out.count("1 failed") == 2, out  # on both ranks
    else:
        assert "aborting the job" in out, out
    assert seconds < 60, f"{seconds:.1f} s"


# -- a rank killed in the middle of a protocol step ---------------------------------------

KILL_DURING = Path(__file__).resolve().parent / "helpers" / "kill_during.py"
SYNC_RUN = ["--synthetic", "disjunction", "--rounds", 600, "--features", 20, "--seed", 3, "--mode", "sync",
            "--protocol", "dynamic", "--delta", 0.5, "--period", 2, "--hedge", "counter", "--protocol-seed", 7,
            "--checkpoint-every", 100, "--quiet"]


def intact(out):
    """The round of the newest complete checkpoint in ``out``, every rank file of it read back."""
    from mpisgd.checkpoint import candidates, rank_file, read_manifest, read_rank

    newest = candidates(out)[0]
    manifest = read_manifest(newest)
    assert [read_rank(rank_file(newest, r))[1]["round"] for r in range(manifest["ranks"])] == \
        [manifest["round"]] * manifest["ranks"]
    return manifest["round"]


@pytest.mark.parametrize("step, rank, n", [
    ("balancing", 0, 3), ("balancing", 2, 3),  # balancings need k ≥ 3 (the counter hedge)
    ("full-sync", 0, 2), ("full-sync", 1, 3),
    ("checkpoint", 0, 3), ("checkpoint", 1, 2),
])
def test_a_rank_killed_during_a_protocol_step_ends_the_job_and_keeps_the_checkpoint(tmp_path, step, rank, n):
    """SIGKILL of rank 0 or of a follower while it balances, full-syncs or
    writes a checkpoint (after the one of round 100): the job ends at once,
    writes no outputs, and its newest complete checkpoint is intact; a
    checkpoint being written is left incomplete (no manifest) and passed over."""
    out = tmp_path / "out"
    rc, text, seconds = run_job(KILL_DURING, rank, step, 100, "train", *SYNC_RUN, "--out", out, n=n)
    assert rc != 0, text
    assert "Killed" in text or "signal 9" in text, text
    assert seconds < PROMPT, f"the job took {seconds:.1f} s to end"
    assert not (out / "report.json").exists() and not (out / "model.h5").exists()
    assert intact(out) >= 100
    if step == "checkpoint":
        assert intact(out) == 100 and not (out / "checkpoints" / "round-200" / "COMPLETE").exists()


# -- the run directory's lock -------------------------------------------------------------

def test_a_second_run_into_a_running_runs_out_is_refused_and_a_dead_runs_lock_taken_over(tmp_path):
    """Run A trains into OUT; run B into OUT is refused at once, naming A's
    host and PID, and A goes on; A's rank 0 killed, run C into OUT takes the
    lock over, says so, and finishes."""
    import socket

    out = tmp_path / "out"
    a = launch("-m", "mpisgd", "train", "--synthetic", "disjunction", "--rounds", 10**8, "--out", out, n=2)
    try:
        deadline = time.monotonic() + HANG
        while not ((out / ".lock").exists() and (out / ".lock").read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        holder = _ranks(a.pid)[0]
        rc, text, seconds = run_job("-m", "mpisgd", "train", "--synthetic", "disjunction", "--rounds", 100,
                                    "--out", out, n=2)
        assert rc != 0 and seconds < PROMPT, (rc, seconds, text)
        assert f"--out {out} is in use by another mpisgd train (host {socket.gethostname()}, PID {holder}, since" \
            in text, text
        assert a.poll() is None, "run A ended"
        os.kill(holder, signal.SIGKILL)
        rc, text, _seconds = finish(a)
        assert rc != 0, text
    finally:
        if a.poll() is None:
            os.killpg(a.pid, signal.SIGKILL)
    rc, text, _seconds = run_job("-m", "mpisgd", "train", "--synthetic", "disjunction", "--rounds", 100, "--quiet",
                                 "--out", out, n=2)
    assert rc == 0, text
    assert f"{out / '.lock'}: taking over the lock of a run that ended without releasing it (host " \
        f"{socket.gethostname()}, PID {holder}, since" in text, text
    assert (out / "report.json").exists() and not (out / ".lock").exists()


# -- the stop grace's watchdog --------------------------------------------------------------

STUCK_HOLDING_THE_GIL = """
import signal
from mpisgd import watchdog
signal.signal(signal.SIGTERM, lambda *a: print("the Python handler ran", flush=True))
watchdog.arm(1.0, 0, "CHECKPOINTS")
print("stuck", flush=True)
sum(range(10**12))  # one C call that holds the GIL for hours: no handler, no other thread runs
"""


def test_the_watchdog_ends_a_rank_stuck_in_c_holding_the_gil():
    """As in mpi4py's object collectives (comm.allreduce) waiting for a
    stuck rank: the grace is kept all the same, from outside the process."""
    proc = subprocess.Popen([sys.executable, "-c", STUCK_HOLDING_THE_GIL], cwd=ROOT, env=job_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "stuck\n"
        time.sleep(0.3)  # into sum()
        proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        out, err = proc.communicate(timeout=PROMPT)
    finally:
        proc.kill()
    seconds = time.monotonic() - start
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, out, err)
    assert "the Python handler ran" not in out
    assert ("mpisgd: rank 0: SIGTERM 1 s ago, and the run has not stopped (a rank stuck or gone?): ending it "
            "without a checkpoint of the stop; the newest complete checkpoint in CHECKPOINTS is kept") in err
    assert 1 <= seconds < 1 + 3, f"{seconds:.1f} s"


def test_the_watchdog_ends_with_its_rank():
    proc = subprocess.run([sys.executable, "-c", "import os; from mpisgd import watchdog; "
                           "watchdog.arm(60, 0, 'X'); print(open(f'/proc/self/task/{os.getpid()}/children').read())"],
                          cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=PROMPT)
    (pid,) = map(int, proc.stdout.split())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()


def test_on_a_file_system_without_locks_the_run_goes_on_and_says_so(tmp_path, monkeypatch, capsys):
    import errno
    import fcntl

    from mpisgd.rundir import RunLock

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "lockf", no_locks)
    (tmp_path / "out").mkdir()
    with RunLock(tmp_path / "out"):
        assert not (tmp_path / "out" / ".lock").exists()
    assert (f"--out {tmp_path / 'out'}: cannot lock {tmp_path / 'out' / '.lock'} (No locks available): going on "
            "without a lock") in capsys.readouterr().err
    assert (tmp_path / "out").is_dir()
