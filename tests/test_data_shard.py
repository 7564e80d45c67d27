"""Shards: round trip, attributes, feature sums, integrity errors; the block
reader; partitioning of shards over ranks."""

import os

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.data import shard as shard_mod
from mpisgd.data.partition import block_range, shards_for_rank
from mpisgd.data.reader import iter_blocks
from mpisgd.data.shard import ShardWriter, open_shard, write_shard
from mpisgd.errors import MpisgdError


def _data(rows=1000, n=30, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(rows, n, density=0.1, format="csr", random_state=seed)
    X.data = rng.standard_normal(X.nnz)
    keep = np.ones(rows)
    keep[5:6] = 0.0  # an empty row
    X = sp.diags(keep) @ X
    X.eliminate_zeros()
    y = np.where(rng.random(rows) < 0.5, -1.0, 1.0)
    return X.tocsr(), y


@pytest.mark.parametrize("compression", shard_mod.COMPRESSIONS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_round_trip(tmp_path, compression, dtype):
    X, y = _data()
    p = tmp_path / "s.h5"
    write_shard(p, X, y, dtype=dtype, compression=compression, shard_index=2, shard_count=5,
                source="test", label_mapping={"-1": -1, "1": 1}, command="pytest")
    assert [f for f in os.listdir(tmp_path)] == ["s.h5"]  # no temporary left
    with open_shard(p, verify=True) as s:
        assert (s.n_rows, s.n_features, s.nnz) == (1000, 30, X.nnz)
        assert s.attrs["shard_index"] == 2 and s.attrs["shard_count"] == 5
        assert s.attrs["format_version"] == shard_mod.FORMAT_VERSION
        assert s.attrs["source"] == "test"
        Xs = X.astype(dtype).astype(np.float64)
        np.testing.assert_allclose(s.feature_sums, np.asarray(Xs.sum(axis=0)).ravel(), rtol=1e-12)
        indptr, indices, data, yy = s.read(0, 1000)
        assert indptr.dtype == np.int64 and indices.dtype == np.int32
        assert data.dtype == np.float64 and yy.dtype == np.float64
        R = sp.csr_matrix((data, indices, indptr), shape=(1000, 30))
        assert (R != Xs).nnz == 0 and np.array_equal(yy, y)
        indptr, indices, data, yy = s.read(100, 250)
        assert indptr[0] == 0 and len(yy) == 150
        assert (sp.csr_matrix((data, indices, indptr), shape=(150, 30)) != Xs[100:250]).nnz == 0


def test_plain_h5py_reads_a_shard(tmp_path):
    """The documented layout (docs/FORMAT.md) is enough to read a shard."""
    X, y = _data(50)
    p = tmp_path / "s.h5"
    write_shard(p, X, y)
    with h5py.File(p, "r") as f:
        assert f.attrs["format"] == b"mpisgd-shard"  # fixed-length UTF-8 (docs/FORMAT.md)
        R = sp.csr_matrix((f["data"][:], f["indices"][:], f["indptr"][:]),
                          shape=(f.attrs["n_rows"], f.attrs["n_features"]))
        assert (R != X).nnz == 0 and np.array_equal(f["labels"][:], y)
        assert f.attrs["compression"] == b"none" and f["data"].chunks is None  # contiguous
    write_shard(p, X, y, compression="lzf")
    with h5py.File(p, "r") as f:
        assert f["data"].fletcher32 and f["data"].compression == "lzf"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_announced_size_writes_the_same_shard_in_place(tmp_path, dtype):
    """With ``size`` the rows go straight into the allocated datasets: the same
    datasets, checksums and feature sums as through the temporary files."""
    X, y = _data(3000, 200)
    paths = {}
    for size in (None, (X.shape[0], X.nnz)):
        p = paths[size] = tmp_path / f"s{size is None}.h5"
        with ShardWriter(p, 200, dtype, size=size) as w:
            cuts = (0, 1, 7, 1500, 1500, 3000)  # pieces of any size, an empty one included
            for r, q in zip(cuts, cuts[1:]):
                a, b = X.indptr[r], X.indptr[q]
                w.append(X.indptr[r : q + 1], X.indices[a:b], X.data[a:b], y[r:q])
            w.close()
    assert sorted(os.listdir(tmp_path)) == ["sFalse.h5", "sTrue.h5"]
    with h5py.File(paths[None], "r") as a, h5py.File(paths[(3000, X.nnz)], "r") as b:
        for name in ("indptr", "indices", "data", "labels", "feature_sums"):
            assert np.array_equal(a[name][:], b[name][:]) and a[name].chunks is None
            assert np.array_equal(a["checksums"][name][:], b["checksums"][name][:])
    with open_shard(paths[(3000, X.nnz)], verify=True) as s:
        R = sp.csr_matrix(s.read(0, 3000)[2::-1], shape=(3000, 200))
        assert (R != X.astype(dtype)).nnz == 0


def test_announced_size_must_be_met(tmp_path):
    X, y = _data(50)
    p = tmp_path / "s.h5"
    with pytest.raises(MpisgdError, match="s.h5: 49 rows .* 50 and .* announced"):
        with ShardWriter(p, 30, size=(50, X.nnz)) as w:
            w.append(X.indptr[:50], X.indices[: X.indptr[49]], X.data[: X.indptr[49]], y[:49])
            w.close()
    with pytest.raises(MpisgdError, match="more rows or non-zeros appended than the 49 rows"):
        with ShardWriter(p, 30, size=(49, X.nnz)) as w:
            w.append(X.indptr, X.indices, X.data, y)
    assert os.listdir(tmp_path) == []


def test_failed_write_leaves_nothing(tmp_path):
    X, y = _data(50)
    p = tmp_path / "s.h5"
    with pytest.raises(RuntimeError):
        with ShardWriter(p, 30) as w:
            w.append(X.indptr, X.indices, X.data, y)
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    with pytest.raises(MpisgdError, match="feature index outside"):
        with ShardWriter(p, 3) as w:
            w.append(X.indptr, X.indices, X.data, y)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_missing_truncated_corrupt_and_foreign_shards(tmp_path, compression):
    X, y = _data(3000, 200)
    p = tmp_path / "s.h5"
    write_shard(p, X, y, compression=compression)
    with pytest.raises(MpisgdError, match="nothere.h5: shard not found"):
        open_shard(tmp_path / "nothere.h5")
    raw = p.read_bytes()
    cut = tmp_path / "cut.h5"
    cut.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(MpisgdError, match="cut.h5"):
        with open_shard(cut, verify=True):
            pass
    # Flip bytes inside the data dataset: fletcher32 or the stored checksums catch it.
    with h5py.File(p, "r") as f:
        ds = f["data"]
        offset = ds.id.get_offset() if ds.chunks is None else ds.id.get_chunk_info(0).byte_offset
    bad = bytearray(raw)
    for k in range(offset + 100, offset + 108):
        bad[k] ^= 0xFF
    corrupt = tmp_path / "corrupt.h5"
    corrupt.write_bytes(bytes(bad))
    with open_shard(corrupt) as s:  # structure is fine
        with pytest.raises(MpisgdError, match=r"corrupt.h5: dataset 'data' is corrupt"):
            s.read(0, s.n_rows)
    with pytest.raises(MpisgdError, match=r"corrupt.h5: dataset 'data' is corrupt"):
        open_shard(corrupt, verify=True)
    other = tmp_path / "v2.h5"
    other.write_bytes(raw)
    with h5py.File(other, "a") as f:
        f.attrs["format_version"] = 99
    with pytest.raises(MpisgdError, match="v2.h5: shard format version 99"):
        open_shard(other)
    plain = tmp_path / "plain.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(MpisgdError, match="plain.h5: not an mpisgd shard"):
        open_shard(plain)
    notes = tmp_path / "notes.h5"
    notes.write_text("hello")
    with pytest.raises(MpisgdError, match="notes.h5: not a readable HDF5 shard"):
        open_shard(notes)


@pytest.mark.parametrize("readahead", [0, 1, 3])
def test_iter_blocks_in_file_order(tmp_path, readahead):
    paths = []
    parts = [_data(rows, 30, seed) for rows, seed in ((700, 1), (0, 2), (333, 3))]
    for k, (X, y) in enumerate(parts):
        paths.append(tmp_path / f"s{k}.h5")
        write_shard(paths[-1], X, y)
    blocks = list(iter_blocks(paths, 128, readahead=readahead))
    assert [b.row_start for b in blocks if b.shard == 0] == list(range(0, 700, 128))
    assert all(b.n_rows <= 128 for b in blocks)
    X = sp.vstack([sp.csr_matrix((b.data, b.indices, b.indptr), shape=(b.n_rows, 30))
                   for b in blocks])
    assert (X != sp.vstack([p[0] for p in parts])).nnz == 0
    np.testing.assert_array_equal(np.concatenate([b.y for b in blocks]),
                                  np.concatenate([p[1] for p in parts]))


def test_iter_blocks_errors_and_early_stop(tmp_path):
    X, y = _data(1000)
    good = tmp_path / "good.h5"
    write_shard(good, X, y)
    gen = iter_blocks([good] * 5, 10, readahead=2)
    next(gen)
    gen.close()  # the reading thread stops; nothing hangs
    with pytest.raises(MpisgdError, match="missing.h5: shard not found"):
        list(iter_blocks([good, tmp_path / "missing.h5"], 100))
    with pytest.raises(MpisgdError, match="block_rows"):
        list(iter_blocks([good], 0))


def test_shards_for_rank():
    for n in range(1, 12):
        for size in range(1, n + 1):
            got = [shards_for_rank(n, size, r) for r in range(size)]
            assert sorted(sum(got, [])) == list(range(n))
            assert max(map(len, got)) - min(map(len, got)) <= 1
            assert all(g == list(range(g[0], g[-1] + 1)) for g in got)
    with pytest.raises(MpisgdError, match="3 ranks but only 2 shards"):
        shards_for_rank(2, 3, 0)
    assert block_range(10, 3, 2) == (6, 10)


def test_index_checksum_is_the_checksum_and_the_range():
    """The reader's one-pass check of an index segment agrees with checksums(), min and max."""
    from mpisgd.data.shard import _index_checksum, checksums

    ix = np.random.default_rng(5).integers(-3, 1 << 30, 10_000).astype(np.int32)
    a, b, lo, hi = _index_checksum(ix.view(np.uint32), ix)
    assert [a, b] == checksums(ix)[0].tolist()
    assert (lo, hi) == (ix.min(), ix.max())


def _count_opens(monkeypatch):
    """Count the shards opened (Shard objects made) from now on."""
    opened = []
    init = shard_mod.Shard.__init__

    def counting(self, path):
        opened.append(os.fspath(path))
        init(self, path)

    monkeypatch.setattr(shard_mod.Shard, "__init__", counting)
    return opened


@pytest.mark.parametrize("readahead,resident_mb", [(0, 0), (2, 0), (0, 64), (2, 64)])
@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_shard_listed_again_is_opened_and_verified_once(tmp_path, monkeypatch, readahead, resident_mb,
                                                          compression):
    """[path] * epochs (``mpisgd train --epochs``): one open, every segment
    checked once, the later passes reading the same rows from the open map
    (chunked: from the open file, HDF5 checking every chunk it reads)."""
    X, y = _data(3000, 200)
    p = tmp_path / "s.h5"
    write_shard(p, X, y, compression=compression)
    shard_mod._VERIFIED.clear()
    opened = _count_opens(monkeypatch)
    checked = []
    check = shard_mod.Shard._check_segment
    monkeypatch.setattr(shard_mod.Shard, "_check_segment",
                        lambda self, name, s: (checked.append((name, s)), check(self, name, s)))
    blocks = list(iter_blocks([p] * 3, 128, readahead=readahead, resident_mb=resident_mb))
    assert opened == [str(p)]
    assert len(checked) == len(set(checked))
    assert {name for name, _ in checked} == (
        {"indptr", "indices", "data", "labels", "feature_sums"} if compression == "none" else set())
    for k in range(3):
        mine = [b for b in blocks if b.shard == k]
        got = sp.vstack([sp.csr_matrix((b.data, b.indices, b.indptr), shape=(b.n_rows, 200))
                         for b in mine])
        assert (got != X).nnz == 0
        np.testing.assert_array_equal(np.concatenate([b.y for b in mine]), y)


def test_shard_source_opens_each_shard_twice_whatever_the_epochs(tmp_path, monkeypatch):
    """Once to count its rows, once by the reader for every epoch (before: 2 × epochs)."""
    from mpisgd.data.rows import ShardSource

    paths = []
    for k in range(2):
        X, y = _data(500, 30, seed=k)
        paths.append(str(write_shard(tmp_path / f"s{k}.h5", X, y)))
    opened = _count_opens(monkeypatch)
    src = ShardSource(paths * 4, block_rows=64)
    assert src.n_rows == 4000
    rows = 0
    while (got := src.take(100)) is not None:
        rows += len(got[3])
    src.close()
    assert rows == 4000
    assert sorted(opened) == sorted(paths * 2)


def test_shard_source_resumes_inside_a_shard_of_a_later_epoch(tmp_path):
    from mpisgd.data.rows import ShardSource

    X, y = _data(500, 30)
    p = str(write_shard(tmp_path / "s.h5", X, y))
    src = ShardSource([p] * 3, block_rows=64)
    src.seek(500 + 123)  # epoch 2, row 123
    ys = []
    while (got := src.take(50)) is not None:
        ys.append(got[3])
    np.testing.assert_array_equal(np.concatenate(ys), np.concatenate([y[123:], y]))


@pytest.mark.parametrize("resident_mb", [0, 64])
def test_a_shard_damaged_between_epochs_is_verified_again(tmp_path, resident_mb):
    """A shard rewritten in place between passes (a new modification time) is
    opened and verified again: the damage is an MpisgdError naming the file and
    the dataset in that pass, after the previous passes' rows."""
    X, y = _data(3000, 200)
    p = tmp_path / "s.h5"
    write_shard(p, X, y)
    shard_mod._VERIFIED.clear()
    with h5py.File(p, "r") as f:
        offset = f["data"].id.get_offset()
    gen = iter_blocks([p] * 3, 128, readahead=0, resident_mb=resident_mb)
    first = [next(gen) for _ in range(-(-3000 // 128))]
    assert {b.shard for b in first} == {0}
    with open(p, "r+b") as f:  # in place: same inode
        f.seek(offset + 800)
        f.write(b"\xff" * 8)
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(MpisgdError, match=r"s.h5: dataset 'data' is corrupt"):
        next(gen)


@pytest.mark.parametrize("readahead", [0, 2])
def test_a_shard_replaced_by_another_during_the_run_is_refused(tmp_path, readahead):
    X, y = _data(300, 30)
    p = tmp_path / "s.h5"
    write_shard(p, X, y)
    gen = iter_blocks([p] * 2, 1000, readahead=readahead)
    assert next(gen).n_rows == 300
    write_shard(p, X[:200], y[:200])  # renamed into place: another inode
    if readahead:  # the reader thread may have begun the next pass before
        try:
            blocks = list(gen)
        except MpisgdError as exc:
            assert "s.h5: the shard changed during the run (300 rows before, 200 now)" in str(exc)
        else:
            assert [b.n_rows for b in blocks] == [300]
        return
    with pytest.raises(MpisgdError, match=r"s.h5: the shard changed during the run \(300 rows before, 200 now\)"):
        next(gen)


def _mapped_kib(path):
    """Resident KiB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, mine = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                mine = len(head) >= 6 and head[5] == str(path)
            elif mine and head[0] == "Rss:":
                total += int(head[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps")
def test_later_passes_keep_the_resident_set_bounded(tmp_path):
    """Each pass over a shard kept open drops the map behind it again, and the
    tail the previous pass left mapped."""
    rng = np.random.default_rng(0)
    rows, per = 12000, 200
    X = sp.csr_matrix((rng.standard_normal(rows * per), rng.integers(0, 5000, rows * per).astype(np.int32),
                       np.arange(0, rows * per + 1, per)), shape=(rows, 5000))  # 29 MB of values
    p = tmp_path / "big.h5"
    write_shard(p, X, np.ones(rows))
    peak = [0, 0, 0]
    for b in iter_blocks([p] * 3, 250, readahead=0):  # 0.6 MB of values and indices a block
        b.data.sum(), b.indices.sum(), b.y.sum()  # as a learner touches them
        peak[b.shard] = max(peak[b.shard], _mapped_kib(p))
    assert 0 < peak[0] < os.path.getsize(p) / 1024 / 2
    assert max(peak[1:]) <= 1.2 * peak[0], peak


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs /proc/self/smaps")
def test_resident_mb_keeps_a_shard_mapped_between_its_passes(tmp_path):
    """Within the budget the map stays between passes (a later pass maps
    nothing again) and the last pass drops it behind it; beyond the budget
    every pass drops it, as with resident_mb=0."""
    rng = np.random.default_rng(1)
    rows, per = 12000, 200
    X = sp.csr_matrix((rng.standard_normal(rows * per), rng.integers(0, 5000, rows * per).astype(np.int32),
                       np.arange(0, rows * per + 1, per)), shape=(rows, 5000))
    p = tmp_path / "big.h5"
    write_shard(p, X, np.ones(rows))
    size_kib = os.path.getsize(p) / 1024

    def passes(resident_mb):
        kib = [[], [], []]
        for b in iter_blocks([p] * 3, 250, readahead=0, resident_mb=resident_mb):
            b.data.sum(), b.indices.sum(), b.y.sum()
            kib[b.shard].append(_mapped_kib(p))
        return kib

    kept = passes(64)
    assert kept[0][-1] > 0.9 * size_kib and min(kept[1]) > 0.9 * size_kib  # all mapped, still
    assert kept[2][-1] < 0.3 * size_kib  # the last pass dropped it behind it
    dropped = passes(1)  # the shard (29 MB) is over the budget
    assert max(max(dropped[1]), max(dropped[2])) < 0.5 * size_kib
