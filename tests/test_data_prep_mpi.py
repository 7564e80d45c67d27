"""Parallel ``mpisgd prep``: each rank parses its own byte range, and the
shards equal the serial conversion's, dataset by dataset, for any rank count.

Run: mpiexec -n 2 python -m pytest --only-mpi tests/test_data_prep_mpi.py (and -n 3)."""

import gzip
import os
import shutil
import tempfile

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from helpers.mpi import on_every_rank

from mpisgd.data.libsvm import write_svmlight
from mpisgd.errors import MpisgdError

OPTIONS = [
    ["--shards", "3"],
    ["--shards", "2", "--layout", "contiguous", "--shuffle-seed", "3", "--test-fraction", "0.3",
     "--test-shards", "2", "--normalize"],
    ["--shards", "4", "--dtype", "float32", "--n-features", "70"],
]


@pytest.fixture
def shared_dir():
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    d = tempfile.mkdtemp(prefix="mpisgd-prep-mpi-") if comm.rank == 0 else None
    d = comm.bcast(d)
    yield comm, d
    comm.Barrier()
    if comm.rank == 0:
        shutil.rmtree(d, ignore_errors=True)


def _make_input(d):
    rng = np.random.default_rng(0)
    X = sp.random(3001, 60, density=0.1, format="csr", random_state=1)
    X.data = rng.standard_normal(X.nnz)
    y = rng.choice([0.0, 1.0], 3001)
    p = os.path.join(d, "in.svm")
    write_svmlight(p, X, y)
    text = open(p).read().split("\n")
    text.insert(1000, "# a comment line")  # lines that are not rows, anywhere
    text.insert(2000, "")
    with open(p, "w") as f:
        f.write("\n".join(text))
    with open(p, "rb") as f, gzip.open(p + ".gz", "wb") as g:
        g.write(f.read())
    return p


def _same_shards(dir_a, dir_b):
    names = sorted(n for n in os.listdir(dir_a) if n.endswith(".h5"))
    assert names and names == sorted(n for n in os.listdir(dir_b) if n.endswith(".h5"))
    runs = set()
    for n in names:
        with h5py.File(os.path.join(dir_a, n), "r") as a, h5py.File(os.path.join(dir_b, n)) as b:
            for ds in ("indptr", "indices", "data", "labels", "feature_sums"):
                assert a[ds].dtype == b[ds].dtype
                assert np.array_equal(a[ds][:], b[ds][:]), (n, ds)  # bit for bit
            for key in a.attrs:
                if key not in ("command", "source", "prep_run"):  # a run id per run
                    assert np.all(a.attrs[key] == b.attrs[key]), (n, key)
            runs.add(a.attrs["prep_run"])
    assert len(runs) == 1  # every rank wrote rank 0's run id


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("options", OPTIONS)
@pytest.mark.parametrize("compressed", [False, True])
def test_parallel_equals_serial(shared_dir, options, compressed):
    from mpisgd.cli import main
    from mpisgd.data.convert import convert
    from mpisgd.data.sources import open_source

    comm, d = shared_dir
    p = _make_input(d) if comm.rank == 0 else None
    p = comm.bcast(p)
    if compressed:
        p += ".gz"
    par = os.path.join(d, "par")
    with on_every_rank(comm):
        assert main(["prep", p, "--out", par, "--name", "x"] + options) == 0
    with on_every_rank(comm):  # rank 0 compares; a mismatch fails every rank
        if comm.rank == 0:
            ser = os.path.join(d, "ser")
            kw = dict(n_shards=int(options[1]), compression="none")
            opts = dict(zip(options[::2], options[1::2])) if "--normalize" not in options else \
                dict(zip(options[:-1][::2], options[:-1][1::2]))
            convert(open_source(p, n_features=int(opts.get("--n-features", 0)) or None), ser, "x",
                    layout=opts.get("--layout", "round-robin"),
                    shuffle_seed=int(opts["--shuffle-seed"]) if "--shuffle-seed" in opts else None,
                    test_fraction=float(opts.get("--test-fraction", 0)),
                    test_shards=int(opts.get("--test-shards", 1)), normalize="--normalize" in options,
                    n_features=int(opts.get("--n-features", 0)) or None,
                    dtype=opts.get("--dtype", "float64"), log=lambda *a: None, **kw)
            _same_shards(par, ser)


@pytest.mark.mpi(min_size=2)
def test_parallel_error_names_the_global_line(shared_dir):
    from mpisgd.data.convert import convert
    from mpisgd.data.sources import open_source

    comm, d = shared_dir
    p = os.path.join(d, "bad.svm")
    if comm.rank == 0:
        lines = [f"{1 if i % 2 else -1} {i % 50 + 1}:1.5" for i in range(4000)]
        lines[3500] = "1 7:oops"
        with open(p, "w") as f:
            f.write("\n".join(lines) + "\n")
    comm.Barrier()
    with pytest.raises(MpisgdError, match=r"bad\.svm:3501: non-numeric feature value"):
        convert(open_source(p), os.path.join(d, "out"), "b", comm=comm, log=lambda *a: None)
    assert not os.path.exists(os.path.join(d, "out", "b-00000.h5"))
