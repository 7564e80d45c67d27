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
    then hydra_pmi_proxy, then the ranks, which carry PMI_RANK)."""
    ranks, todo = {}, [mpiexec_pid]
    while todo:
        pid = todo.pop()
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError):
            continue
        for var in env:
            if var.startswith(b"PMI_RANK="):
                ranks[int(var[9:])] = pid
    return ranks


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_training_job_ends_when_a_rank_is_killed(tmp_path):
    """SIGKILL from outside to rank 1 of a running `mpisgd train` (as the
    kernel's OOM killer or a lost node would): hydra ends the other ranks."""
    proc = launch("-m", "mpisgd", "train", "--synthetic", "disjunction", "--rounds", 10**8,
                  "--out", tmp_path / "out")
    try:
        deadline = time.monotonic() + HANG
        ranks = {}
        while len(ranks) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            ranks = _ranks(proc.pid)
        assert len(ranks) == 3, f"did not find 3 ranks under mpiexec: {ranks}"
        time.sleep(3)  # into the training loop
        assert proc.poll() is None, "the job ended before it was killed"
        os.kill(ranks[1], signal.SIGKILL)
        rc, out, seconds = finish(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc != 0, out
    assert "Killed" in out or "signal 9" in out or "KILLED" in out, out
    assert seconds < PROMPT, f"the job took {seconds:.1f} s to end after the kill"


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
