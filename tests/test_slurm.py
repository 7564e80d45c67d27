"""The job scripts of jobs/ under a real scheduler.

A one-node SLURM cluster (tests/slurm_cluster.py: munged, slurmctld and
slurmd on this host, installed with apt-get if missing) runs the scripts as
a user would submit them, with ``sbatch --wait``. Skipped with the reason
where SLURM cannot be installed or started. Every job is tiny (seconds).
"""

import json

import pytest
from helpers.env import ROOT, VENV
from slurm_cluster import SlurmCluster, SlurmUnavailable

pytestmark = pytest.mark.slurm

JOBS = ROOT / "jobs"
TIMEOUT = 180  # seconds per job, queueing included


@pytest.fixture(scope="module")
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
    rc, job, log, runs = submit("train.sbatch", "--rounds", "300", options=["--ntasks", "2"],
                                PROTOCOL="static", PERIOD="4")
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


def test_train_job_under_srun(submit):
    """MPISGD_LAUNCHER=srun: srun --mpi=pmi2 starts the ranks; the pip MPICH speaks PMI-2."""
    rc, job, log, runs = submit("train.sbatch", "--rounds", "200", options=["--ntasks", "2"],
                                MPISGD_LAUNCHER="srun", MPISGD_WARM="0")
    assert rc == 0, log
    assert report(runs / job)["configuration"]["ranks"] == 2
    assert "srun --mpi=pmi2" in log


def test_failing_job_exits_non_zero_with_the_message(submit):
    rc, job, log, runs = submit("train.sbatch", "--rounds", "-1", options=["--ntasks", "2"],
                                MPISGD_WARM="0")
    assert rc != 0, log
    assert "--rounds must be >= 0" in log
