"""A full disk while writing a checkpoint, a model or a shard: a clear
MpisgdError naming the file and the reason, the previous file intact, no
temporary file left behind.

The disk is a small tmpfs mounted for the test (needs root, as in CI);
elsewhere the tests skip and say why.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.errors import MpisgdError

SIZE = 512 * 1024  # bytes of the small disk


@pytest.fixture
def disk():
    """A fresh 512 KiB tmpfs; fill(leave) fills it up to ``leave`` free bytes."""
    if os.geteuid() != 0:
        pytest.skip("a full disk needs a tmpfs mount, which needs root")
    d = tempfile.mkdtemp(prefix="mpisgd-full-")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", d],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip() or proc.returncode}")
    try:
        yield d
    finally:
        subprocess.run(["umount", d], check=False)
        os.rmdir(d)


def fill(d, leave=0):
    """Fill the disk at ``d`` until at most ``leave`` bytes are free."""
    with open(os.path.join(d, "filler"), "wb") as f:
        chunk = b"\0" * 4096
        try:
            while os.statvfs(d).f_bavail * os.statvfs(d).f_frsize > leave + 4096:
                f.write(chunk)
                f.flush()
        except OSError:
            pass


def leftovers(d):
    """Temporary files (atomic writes) anywhere under d."""
    return [os.path.join(r, n) for r, _dirs, names in os.walk(d) for n in names if n.endswith(".tmp")
            or ".tmp." in n]


def test_checkpoint_on_a_full_disk_keeps_the_previous_one(disk):
    from mpi4py import MPI

    from mpisgd import checkpoint

    old_handler = signal.getsignal(signal.SIGTERM)
    try:
        ck = checkpoint.Checkpointer(MPI.COMM_SELF, os.path.join(disk, "checkpoints"), every=1, seconds=0,
                                     poll=1, configuration={"run": 1})
        small = {"w": np.arange(100.0)}
        ck.save(1, {"learners": small, "run": {"note": "first"}})
        fill(disk, leave=8 * 1024)
        with pytest.raises(MpisgdError, match="No space left on device") as err:
            ck.save(2, {"learners": {"w": np.arange(200_000.0)}, "run": {"note": "second"}})
        assert "round-2" in str(err.value)
    finally:
        signal.signal(signal.SIGTERM, old_handler)
        os.close(signal.set_wakeup_fd(-1))  # its watchdog ends with its pipe
    directory = os.path.join(disk, "checkpoints")
    assert [t for t, _p in checkpoint.complete(directory)] == [1]
    assert checkpoint.candidates(disk)[0].endswith("round-1")
    arrays, attrs = checkpoint.read_rank(checkpoint.rank_file(checkpoint.candidates(disk)[0], 0))
    np.testing.assert_array_equal(arrays["learners/w"], small["w"])
    assert json.loads(attrs["run.note"]) == "first"
    assert leftovers(disk) == []


def test_model_on_a_full_disk_keeps_the_previous_one(disk):
    from mpisgd.model import LinearModel

    path = os.path.join(disk, "model.h5")
    LinearModel(np.arange(10.0), 0.5, "hinge").save(path)
    fill(disk, leave=8 * 1024)
    with pytest.raises(MpisgdError, match="model.h5: cannot write.*No space left on device"):
        LinearModel(np.arange(200_000.0), 1.5, "hinge").save(path)
    kept = LinearModel.load(path)
    np.testing.assert_array_equal(kept.coef, np.arange(10.0))
    assert kept.intercept == 0.5
    assert leftovers(disk) == []


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_shard_on_a_full_disk_is_not_written(disk, compression):
    from mpisgd.data.shard import write_shard

    rng = np.random.default_rng(0)
    X = sp.random(20_000, 100, density=0.05, format="csr", random_state=1)
    X.data = rng.standard_normal(X.nnz)
    y = np.where(rng.random(20_000) < 0.5, -1.0, 1.0)
    path = os.path.join(disk, "part.h5")
    with pytest.raises(MpisgdError, match="part.h5: cannot write.*No space left on device"):
        write_shard(path, X, y, compression=compression)
    assert not os.path.exists(path)
    assert os.listdir(disk) == []


# Written as parsed (in one block, and in many: the disk fills while the parse goes on
# and the failed block's error comes with the next), and from the binary pieces.
@pytest.mark.parametrize("shuffle_seed,chunk_bytes", [(None, None), (None, 4096), (3, None)])
def test_prep_on_a_full_disk_leaves_nothing(disk, tmp_path, shuffle_seed, chunk_bytes):
    from helpers.data import small_chunks

    from mpisgd.data.convert import convert
    from mpisgd.data.libsvm import write_svmlight
    from mpisgd.data.sources import open_source

    rng = np.random.default_rng(0)
    X = sp.random(20_000, 100, density=0.05, format="csr", random_state=1)
    X.data = rng.standard_normal(X.nnz)
    text = str(tmp_path / "in.svm")
    write_svmlight(text, X, np.where(rng.random(20_000) < 0.5, -1.0, 1.0))
    out = os.path.join(disk, "out")
    with pytest.raises(MpisgdError, match="No space left on device"):
        source = open_source(text)
        convert(small_chunks(source, chunk_bytes) if chunk_bytes else source, out, "in",
                n_shards=2, shuffle_seed=shuffle_seed,
                log=lambda *a: None)
    assert os.listdir(disk) == []


def test_run_outputs_on_a_full_disk_leave_nothing_that_looks_finished(disk):
    """The disk fills after model.h5 and timeline.csv, at report.json: the
    run fails naming report.json, --out holds none of the three (report.json,
    the proof of a finished run, is renamed into place last) and no staging
    directory (here not even --out, which the run created); freed, the same
    command works without --overwrite."""
    from helpers.env import MPIEXEC, ROOT, job_env

    def train(out):
        cmd = [str(MPIEXEC), "-n", "1", sys.executable, "-m", "mpi4py", "-m", "mpisgd", "train", "--synthetic",
               "disjunction", "--rounds", "200", "--features", "40000", "--quiet", "--out", out]
        return subprocess.run(cmd, cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=120)

    def used(path):  # bytes of the disk a file takes
        return os.stat(path).st_blocks * 512

    probe = os.path.join(disk, "probe")
    assert train(probe).returncode == 0
    before_report = sum(used(os.path.join(probe, n)) for n in ("model.h5", "timeline.csv")) + 4096  # and .lock
    assert used(os.path.join(probe, "report.json")) > 4096
    shutil.rmtree(probe)
    fill(disk, leave=before_report)  # free: before_report + at most one 4 KiB page
    out = os.path.join(disk, "run")
    proc = train(out)
    assert proc.returncode != 0
    assert f"{out}/report.json: cannot write (No space left on device)" in proc.stderr, proc.stderr
    assert not os.path.exists(out)  # nothing of the run: the lock removes the directory it made
    os.unlink(os.path.join(disk, "filler"))
    proc = train(out)
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(out)) == ["model.h5", "report.json", "timeline.csv"]


def test_a_set_of_files_on_a_full_disk_keeps_the_previous_set(disk):
    from mpisgd.atomic import file_set

    names = ("model.bin", "report.json")
    with file_set(disk, names) as files:
        for name in names:
            with open(files[name], "w") as f:
                f.write(f"first {name}")
    fill(disk, leave=8 * 1024)
    with pytest.raises(MpisgdError, match=f"{disk}/model.bin: cannot write.*No space left on device"):
        with file_set(disk, names) as files:
            atomic_write(files["model.bin"], b"\0" * 100_000)
    for name in names:
        with open(os.path.join(disk, name)) as f:
            assert f.read() == f"first {name}"
    assert sorted(os.listdir(disk)) == ["filler", *sorted(names)]


def atomic_write(path, data):
    from mpisgd.atomic import atomic_path

    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
