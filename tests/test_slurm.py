"""The job scripts of jobs/ under a real scheduler.

A one-node SLURM cluster (tests/slurm_cluster.py: munged, slurmctld and
slurmd on this host, installed with apt-get if missing) runs the scripts as
a user would submit them, with ``sbatch --wait``. Skipped with the reason
where SLURM cannot be installed or started. Every job is tiny (seconds),
but for the two at a real time limit (sync and async mode: paced to over
two minutes, mostly asleep). One test runs a script through jobs/local.sh,
the same without SLURM.
"""

import json
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers.env import MPIEXEC, ROOT, VENV, job_env
from slurm_cluster import SlurmCluster, SlurmUnavailable

pytestmark = pytest.mark.slurm

JOBS = ROOT / "jobs"
TIMEOUT = 180  # seconds per job, queueing included


@pytest.fixture(scope="session")
def cluster():
    try:
        cluster = SlurmCluster.start()
    except SlurmUnavailable as exc:
        pytest.skip(f"no SLURM here: {exc}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture()
def submit(cluster, tmp_path):
    """submit(script, *args, options=(), **env) -> (exit code, job id, job log, runs dir)."""

    def submit(script, *args, options=(), **env):
        runs = tmp_path / "runs"
        job_env = dict(cluster.env, MPISGD_RUNS=str(runs), MPISGD_VENV=str(VENV), **env)
        rc, job, out = cluster.sbatch_wait(
            JOBS / script, *args, env=job_env, cwd=ROOT, timeout=TIMEOUT,
            options=["--output", str(tmp_path / "%x-%A_%a.out"), "--time", "5", *options],
        )
        assert job, f"sbatch gave no job id: {out}"
        log = "\n".join(p.read_text() for p in sorted(tmp_path.glob("*.out")))
        return rc, job, log, runs

    return submit


def report(path):
    return json.loads((path / "report.json").read_text())


def test_train_job_writes_its_outputs_under_its_job_id(submit):
    rc, job, log, runs = submit("train.sbatch", "--synthetic", "disjunction", "--rounds", "300",
                                options=["--ntasks", "2"], PROTOCOL="static", PERIOD="4")
    assert rc == 0, log
    assert [p.name for p in runs.iterdir()] == [job], log
    out = runs / job
    assert {"model.h5", "report.json", "timeline.csv"} <= {p.name for p in out.iterdir()}, log
    r = report(out)
    assert r["configuration"]["ranks"] == 2
    assert r["configuration"]["protocol"]["name"] == "static"
    assert r["configuration"]["protocol"]["period"] == 4
    assert r["online"]["examples"] == 2 * 300
    assert "launcher mpiexec" in log


def test_sweep_array_gives_each_task_its_own_directory_and_threshold(submit):
    deltas = ["0.5", "2", "8"]
    rc, job, log, runs = submit("sweep.sbatch", "--rounds", "200",
                                options=["--array", "0-2", "--ntasks", "1"], DELTAS=" ".join(deltas))
    assert rc == 0, log
    assert sorted(p.name for p in runs.iterdir()) == [f"{job}_{i}" for i in range(3)], log
    for i, delta in enumerate(deltas):
        r = report(runs / f"{job}_{i}")
        assert r["configuration"]["protocol"]["name"] == "dynamic"
        assert r["configuration"]["protocol"]["delta"] == float(delta)


def test_prep_job_shards_a_file_in_parallel_for_a_train_job(submit, tmp_path):
    rng = np.random.default_rng(0)
    lines = [f"{rng.choice(['-1', '+1'])} " + " ".join(f"{j}:{rng.random():.3f}" for j in sorted(
        rng.choice(np.arange(1, 31), size=5, replace=False))) for _ in range(400)]
    data = tmp_path / "tiny.svm"
    data.write_text("\n".join(lines) + "\n")
    rc, job, log, runs = submit("prep.sbatch", data, options=["--ntasks", "2"], SHARDS="2")
    assert rc == 0, log
    shards = sorted((runs / job).glob("*.h5"))
    assert len(shards) == 2, log

    rc, train_job, log, runs = submit("train.sbatch", *shards, options=["--ntasks", "2"])
    assert rc == 0, log
    r = report(runs / train_job)
    assert r["configuration"]["ranks"] == 2
    assert r["online"]["examples"] == 400


def test_reproduce_job_writes_results_and_figures(submit):
    rc, job, log, runs = submit("reproduce.sbatch", "--only", "disjunction", "--seeds", "1",
                                "--sensitivity-seeds", "0", "--rounds", "200", "--k", "4",
                                options=["--cpus-per-task", "2", "--mem", "1G"])
    assert rc == 0, log
    out = runs / job
    assert {"results.json", "results.csv", "tables.md"} <= {p.name for p in out.iterdir()}, log
    assert list((out / "figures").glob("*.png")), log
    assert "--jobs 2" in log


def test_train_job_under_srun(submit):
    """MPISGD_LAUNCHER=srun: srun --mpi=pmi2 starts the ranks; the pip MPICH speaks PMI-2."""
    rc, job, log, runs = submit("train.sbatch", "--synthetic", "disjunction", "--rounds", "200",
                                options=["--ntasks", "2"], MPISGD_LAUNCHER="srun", MPISGD_WARM="0")
    assert rc == 0, log
    assert report(runs / job)["configuration"]["ranks"] == 2
    assert "srun --mpi=pmi2" in log


def test_rank_killed_inside_an_allocation_ends_the_job(cluster, tmp_path):
    """hydra under SLURM (proxies started through srun) also ends the job when
    a rank dies; sbatch reports the failure."""
    script = tmp_path / "kill.sbatch"
    script.write_text(
        "#!/bin/bash\n"
        f"exec {MPIEXEC} -n 2 {sys.executable} -m mpi4py {ROOT}/tests/helpers/fail_on_rank.py kill 1\n")
    rc, job, out = cluster.sbatch_wait(script, options=["--ntasks", "2", "--time", "2", "--output",
                                                        str(tmp_path / "kill.out")],
                                       cwd=tmp_path, timeout=TIMEOUT)
    log = (tmp_path / "kill.out").read_text()
    assert rc != 0, log
    assert "rank 0 started" in log and "passed a barrier" not in log, log
    assert "Killed" in log, log


def test_failing_job_exits_non_zero_with_the_message(submit):
    rc, job, log, runs = submit("train.sbatch", "--synthetic", "disjunction", "--rounds", "-1",
                                options=["--ntasks", "2"], MPISGD_WARM="0")
    assert rc != 0, log
    assert log.count("argument --rounds: must be >= 1, got -1") == 1, log  # rank 0's message alone
    assert not (runs / job).exists(), log  # no empty output directory left behind


def test_train_job_without_data_fails_with_the_message(submit):
    rc, job, log, runs = submit("train.sbatch", "--rounds", "200", options=["--ntasks", "2"], MPISGD_WARM="0")
    assert rc != 0, log
    assert "no data: give SHARD files" in log and "online error" not in log, log


def test_local_launcher_runs_the_array_tasks_it_is_given(tmp_path):
    runs = tmp_path / "runs"
    proc = subprocess.run(
        ["bash", JOBS / "local.sh", "-n", "1", "-a", "0,2", JOBS / "sweep.sbatch", "--rounds", "100"],
        cwd=ROOT, env=job_env(MPISGD_RUNS=runs, MPISGD_VENV=VENV, MPISGD_WARM=0, DELTAS="0.5 2 8"),
        capture_output=True, text=True, timeout=TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    dirs = sorted(runs.iterdir())
    assert [d.name.rsplit("_", 1)[1] for d in dirs] == ["0", "2"]
    assert all(d.name.startswith("local-") for d in dirs)
    assert [report(d)["configuration"]["protocol"]["delta"] for d in dirs] == [0.5, 8.0]
    # the grace a stuck job gets is inside the 60 s lead of the time-limit signal (jobs/lib.sh)
    assert {report(d)["configuration"]["options"]["stop_grace"] for d in dirs} == {45.0}


def through_requeues(cluster, tmp_path, args, pace):
    """``jobs/train.sbatch ARGS`` under a real time limit (--time 2, --signal
    B:TERM@30), paced at ``pace`` seconds per poll (tests/helpers/paced.py) so
    that the limit falls mid-run on any machine; requeued as often as it takes.
    SLURM holds a requeued job for 2 minutes (BeginTime); this releases it 2 s
    after it is seen there: the requeue revokes the job's credential, and
    slurmd refuses a relaunch whose credential bears the same second ("Job
    credential revoked" in slurmctld's log; the job then ends without its
    model). ``sbatch --wait`` may return at the requeue, so this waits until
    the job has left the queue for good. Returns (job id, job log, its output
    directory)."""
    import threading

    done = threading.Event()

    def release_requeued():
        held = {}  # job → when it was first seen held
        while not done.wait(1):
            for line in cluster.run("squeue", "-h", "-o", "%i %r").stdout.splitlines():
                job, reason = line.split(maxsplit=1)
                if reason.strip() == "BeginTime" and time.monotonic() - held.setdefault(job, time.monotonic()) >= 2:
                    cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
                    del held[job]

    releaser = threading.Thread(target=release_requeued, daemon=True)
    releaser.start()
    runs = tmp_path / "runs"
    env = dict(cluster.env, MPISGD_RUNS=str(runs), MPISGD_VENV=str(VENV), MPISGD_WARM="0",
               MPISGD_TEST_PACE=str(pace), PYTHONPATH=str(ROOT / "tests" / "helpers" / "paced_site"))
    try:
        rc, job, out = cluster.sbatch_wait(
            JOBS / "train.sbatch", *args, env=env, cwd=ROOT, timeout=900,
            options=["--output", str(tmp_path / "job.out"), "--ntasks", "2", "--time", "2",
                     "--signal", "B:TERM@30"])
        # A requeued job can drop out of squeue for a moment between its two
        # runs, and squeue can fail under load: the job is gone once its model
        # is written, or after 20 s out of a queue that squeue did list.
        deadline, absent = time.monotonic() + 600, 0
        while time.monotonic() < deadline:
            queue = cluster.run("squeue", "-h", "-o", "%i")
            if queue.returncode == 0:
                absent = 0 if job in queue.stdout.split() else absent + 1
            if absent and (runs / job / "model.h5").exists() or absent >= 10:
                break
            time.sleep(2)
    finally:
        done.set()
        releaser.join()
    log = (tmp_path / "job.out").read_text()
    assert job and (runs / job / "model.h5").exists(), (out + log + cluster.queue()
                                                        + cluster.logs("slurmctld", "slurmd"))
    assert "requeueing job" in log and "resuming from the checkpoints" in log, log
    assert "stopped by a signal (SIGTERM)" in log, log
    return job, log, runs / job


def reference_run(tmp_path, args):
    """The same run uninterrupted, unpaced, outside SLURM: its output directory."""
    ref = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train",
                          *args, "--out", str(tmp_path / "reference")], cwd=ROOT, env=job_env(),
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    return tmp_path / "reference"


def test_train_job_at_its_time_limit_checkpoints_requeues_and_resumes(cluster, tmp_path):
    """Sync mode at a real time limit: the batch shell passes SIGTERM to the
    ranks, the run checkpoints at its next poll and stops, the job requeues
    itself and resumes (``through_requeues``, 10 s per poll of
    50 rounds: over 120 s in all); the final model equals an uninterrupted run's."""
    from mpisgd.model import LinearModel

    args = ["--synthetic", "disjunction", "--rounds", "600", "--features", "20", "--seed", "3",
            "--protocol", "dynamic", "--delta", "1.0", "--period", "1", "--mode", "sync", "--poll-rows", "50", "--quiet"]
    reference = reference_run(tmp_path, args)
    job, log, out = through_requeues(cluster, tmp_path, args, pace=10)
    a = LinearModel.load(reference / "model.h5")
    b = LinearModel.load(out / "model.h5")
    np.testing.assert_array_equal(b.coef, a.coef)
    assert b.intercept == a.intercept
    resumed = report(out)["checkpoints"]["resumed_from"]["round"]
    assert 0 < resumed < 600 and resumed % 50 == 0


def test_async_train_job_at_its_time_limit_cuts_requeues_and_resumes_consistently(cluster, tmp_path):
    """The default (async) mode at a real time limit: on SIGTERM the ranks agree
    on a round, make a consistent cut there and checkpoint it, the job requeues
    itself and resumes. Async runs are not bit-reproducible, so the checks are
    the invariants of a consistent cut (tests/test_checkpoint.py): the stopped
    checkpoint has every rank at the agreed round with nothing in flight and
    every message counted on both sides; the resumed run learned each rank's
    600 rows once, wrote each timeline row once, and its counters agree; and
    its online error is near an uninterrupted run's."""
    from test_checkpoint import assert_consistent, assert_cut

    args = ["--synthetic", "disjunction", "--rounds", "600", "--features", "20", "--seed", "3",
            "--protocol", "dynamic", "--delta", "0.5", "--period", "2", "--augmentation", "random-one",
            "--protocol-seed", "7", "--timeline-every", "50", "--mode", "async", "--poll-rows", "50", "--quiet"]
    reference = reference_run(tmp_path, args)
    job, log, out = through_requeues(cluster, tmp_path, args, pace=10)
    resumed = report(out)["checkpoints"]["resumed_from"]["round"]
    assert 0 < resumed < 600 and f"checkpoint of round {resumed}" in log, log
    assert assert_cut(out / "checkpoints" / f"round-{resumed}", 2) == resumed
    assert_consistent(out, 2, resumed_from=resumed)
    errors = [report(d)["online"]["error_rate"] for d in (reference, out)]
    assert errors[1] <= max(2 * errors[0], errors[0] + 0.05), errors


def _job_ranks(job, rank):
    """PIDs of the processes of SLURM job ``job`` that carry PMI_RANK=rank (the rank and its own children)."""
    import os
    from pathlib import Path

    want = {f"SLURM_JOB_ID={job}".encode(), f"PMI_RANK={rank}".encode()}
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if want <= set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")):
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_train_job_that_loses_a_rank_requeues_and_resumes_on_the_tasks_it_gets(cluster, tmp_path):
    """Rank 1 SIGKILLed after the job's first checkpoint (as when its node
    fails): mpiexec ends non-zero, the job requeues itself (jobs/lib.sh); held,
    it is given 1 task instead of 2 (``scontrol update NumTasks=1``), and the
    requeued job resumes from the newest checkpoint on 1 rank (an elastic
    resume) and finishes with every row learned once."""
    import os
    import signal
    import threading

    runs = tmp_path / "runs"
    done, seen = threading.Event(), {}

    def fail_then_shrink():  # kill rank 1 after the first checkpoint; give the requeued job 1 task
        while not done.wait(1):
            for line in cluster.run("squeue", "-h", "-o", "%i %r").stdout.splitlines():
                job, reason = line.split(maxsplit=1)
                complete = list((runs / job).glob("checkpoints/round-*/COMPLETE"))
                if complete and "killed" not in seen:
                    pids = _job_ranks(job, 1)
                    for pid in pids:
                        os.kill(pid, signal.SIGKILL)
                    seen["killed"] = bool(pids) or None
                if reason.strip() == "BeginTime" and time.monotonic() - seen.setdefault(job, time.monotonic()) >= 2:
                    seen["shrunk"] = cluster.run("scontrol", "update", f"JobId={job}", "NumTasks=1").returncode
                    cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
                    del seen[job]

    worker = threading.Thread(target=fail_then_shrink, daemon=True)
    worker.start()
    env = dict(cluster.env, MPISGD_RUNS=str(runs), MPISGD_VENV=str(VENV), MPISGD_WARM="0", MPISGD_TEST_PACE="2",
               PYTHONPATH=str(ROOT / "tests" / "helpers" / "paced_site"), CHECKPOINT_SECONDS="0")
    args = ["--synthetic", "disjunction", "--rounds", "600", "--features", "20", "--seed", "3", "--mode", "sync",
            "--poll-rows", "50", "--checkpoint-every", "100", "--quiet"]
    try:
        rc, job, out = cluster.sbatch_wait(JOBS / "train.sbatch", *args, env=env, cwd=ROOT, timeout=600,
                                           options=["--output", str(tmp_path / "job.out"), "--ntasks", "2",
                                                    "--time", "10"])
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (runs / job / "report.json").exists():
            time.sleep(2)
    finally:
        done.set()
        worker.join()
    log = (tmp_path / "job.out").read_text()
    assert seen.get("killed") and seen.get("shrunk") == 0, (seen, log)
    assert (runs / job / "report.json").exists(), out + log + cluster.queue() + cluster.logs("slurmctld", "slurmd")
    assert "a rank or node lost (exit code" in log and "requeueing job" in log, log
    assert "resuming from the checkpoints" in log, log
    r = report(runs / job)
    assert r["checkpoints"]["resumed_from"]["ranks"] == 2 and r["configuration"]["ranks"] == 1, r["checkpoints"]
    assert r["online"]["examples"] == 2 * 600  # every row of the 2 streams once
