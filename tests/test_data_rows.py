"""Row sources (mpisgd/data/rows.py): ``warm_up`` loads the kernels that
serving rows calls, before a run's clock, and changes no row."""

import subprocess
import sys
import textwrap

import numpy as np
import scipy.sparse as sp

from mpisgd.data.rows import RoundMajorSource, ShardSource, StreamSource
from mpisgd.data.shard import write_shard
from mpisgd.data.synthetic import DisjunctionStream


def _all_rows(source, m=100):
    pieces = []
    while (got := source.take(m)) is not None:
        pieces.append(got)
    source.close()
    return pieces


def _shard(path, seed):
    rng = np.random.default_rng(seed)
    X = sp.random(300, 40, density=0.1, format="csr", random_state=rng)
    return str(write_shard(path, X, np.where(rng.random(300) < 0.5, -1.0, 1.0)))


def _sources(tmp_path):
    paths = [_shard(tmp_path / f"s{k}.h5", k) for k in range(2)]
    stream = DisjunctionStream(n_features=50, n_learners=2, seed=3, drift_prob=0.01)
    return {"stream": lambda: StreamSource(stream, 1, 500, block_rows=128),
            "shards": lambda: ShardSource(paths, block_rows=64),
            "round-major": lambda: RoundMajorSource([StreamSource(stream, 0, 300), ShardSource(paths[:1])])}


def test_warm_up_serves_no_row_and_reads_nothing(tmp_path):
    for name, make in _sources(tmp_path).items():
        cold, warm = make(), make()
        warm.warm_up()
        assert warm.io_seconds == 0.0, name
        got, want = _all_rows(warm), _all_rows(cold)
        assert len(got) == len(want), name
        for a, b in zip(got, want):
            for x, y in zip(a, b):
                np.testing.assert_array_equal(x, y, err_msg=name)


def test_after_warm_up_serving_rows_loads_no_kernel(tmp_path):
    """In a fresh process (numba loads a kernel's cached machine code at its first
    call with new argument types): warm_up gives each kernel the types that serving
    rows then calls it with, so serving adds no signature."""
    paths = [_shard(tmp_path / "s.h5", 0)]
    script = textwrap.dedent(f"""
        from mpisgd.data import shard, synthetic
        from mpisgd.data.rows import ShardSource, StreamSource
        kernels = (shard._index_checksum, shard._checksums, synthetic._drift_rounds, synthetic._disjunction_rows)
        sources = [ShardSource({paths!r}, block_rows=64),
                   StreamSource(synthetic.DisjunctionStream(50, 2, 3, 0.01), 1, 500)]
        for s in sources:
            s.warm_up()
        before = [list(k.signatures) for k in kernels]
        for s in sources:
            while s.take(100) is not None:
                pass
            s.close()
        after = [list(k.signatures) for k in kernels]
        assert all(before), before
        assert after == before, (before, after)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
