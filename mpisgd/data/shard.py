"""The HDF5 shard format (docs/FORMAT.md): one CSR matrix and its labels.

Datasets: ``indptr`` int64 (n_rows + 1), ``indices`` int32 (nnz), ``data``
float32 or float64 (nnz), ``labels`` float64 (n_rows), ``feature_sums``
float64 (n_features; Σ_rows x, so the global mean is one Allreduce away).
Root attributes name the format and its version, the shape and provenance
(see ``REQUIRED``).

Two layouts, both plain HDF5 for any reader:

- ``compression="none"`` (the default): contiguous datasets, so that a
  reader maps them into memory and hands out row blocks without copying;
  integrity by stored checksums (group ``checksums``: for every 1 MiB
  segment of every dataset, Σ w and Σ (i+1)·w over its 32-bit words, mod
  2^64), each segment verified the first time a read touches it.
- ``"lzf"`` / ``"gzip"``: chunked datasets with HDF5's fletcher32 filter
  (HDF5 checks every chunk it reads) and the compressor.

Files are written under a temporary name in the target directory and
renamed at the end (``mpisgd.atomic``), so a failed write never leaves a
partial shard.
"""

import json
import mmap
import os

import numpy as np
from numba import njit

from mpisgd.atomic import AtomicFile, write_error
from mpisgd.errors import MpisgdError

FORMAT = "mpisgd-shard"
FORMAT_VERSION = 1
CHUNK = 1 << 16  # elements per HDF5 chunk of indices/data (compressed layout)
CHUNK_ROWS = 1 << 14  # elements per HDF5 chunk of indptr/labels (compressed layout)
SEGMENT = 1 << 20  # bytes per checksum segment (contiguous layout)
# Chosen by bench/bench_data.py --sections compression,read.
DEFAULT_COMPRESSION = "none"
COMPRESSIONS = ("none", "lzf", "gzip")
REQUIRED = ("format", "format_version", "n_rows", "n_features", "nnz")
DATASETS = ("indptr", "indices", "data", "labels", "feature_sums")
STREAMED = ("indptr", "labels", "indices", "data")  # the datasets read row by row (``release``, ``rewind``)
# Each dataset's stored type (docs/FORMAT.md), little-endian as written. Checked on
# opening: a damaged type message (float64 turned into uint64 by one bit) passes the
# checksums, which cover the values' bytes, not their type.
TYPES = {"indptr": ("<i8",), "indices": ("<i4",), "data": ("<f8", "<f4"), "labels": ("<f8",),
         "feature_sums": ("<f8",)}
# Segments already verified in this process, per file version: a shard read
# again (the next epoch) is not checksummed again.
_VERIFIED = {}
_STREAMED = (("indptr", np.int64), ("indices", np.int32), ("data", None), ("labels", np.float64))
# What h5py raises on a file whose HDF5 structure is damaged.
_CORRUPT = (OSError, RuntimeError, KeyError, ValueError, TypeError)


@njit(cache=True, nogil=True)
def _segment_checksum(words):
    """(Σ w, Σ (i+1)·w) mod 2^64 over uint32 words (a loop LLVM vectorizes)."""
    a = np.uint64(0)
    b = np.uint64(0)
    for i in range(len(words)):
        w = np.uint64(words[i])
        a += w
        b += np.uint64(i + 1) * w
    return a, b


@njit(cache=True, nogil=True)
def _checksums(words, seg_words, out):
    """Per segment of ``seg_words`` uint32 words: (Σ w, Σ (i+1)·w) mod 2^64."""
    for s in range(len(out)):
        a, b = _segment_checksum(words[s * seg_words : (s + 1) * seg_words])
        out[s, 0] = a
        out[s, 1] = b


@njit(cache=True, nogil=True)
def _index_checksum(words, ints):
    """The checksum of a segment of int32 indices (``words``: the same bytes as
    uint32) and their range (min, max), in one pass."""
    a = np.uint64(0)
    b = np.uint64(0)
    lo = np.int64(1) << 40
    hi = -lo
    for i in range(len(words)):
        w = np.uint64(words[i])
        a += w
        b += np.uint64(i + 1) * w
        lo = min(lo, np.int64(ints[i]))
        hi = max(hi, np.int64(ints[i]))
    return a, b, lo, hi


def warm_up():
    """Load the checksum kernels (numba reads its cache on a first call) with
    the types segment verification calls them with: read-only views of a map."""
    words = np.frombuffer(b"", np.uint32)
    _index_checksum(words, np.frombuffer(b"", np.int32))
    checksums(np.frombuffer(b"", np.uint8))


def checksums(arr):
    """Segment checksums of an array's bytes (a (segments, 2) uint64 array)."""
    words = np.ascontiguousarray(arr).view(np.uint8).view(np.uint32)
    seg = SEGMENT // 4
    out = np.zeros(((len(words) + seg - 1) // seg, 2), np.uint64)
    _checksums(words, seg, out)
    return out


def _filters(compression):
    if compression not in COMPRESSIONS:
        raise MpisgdError(f"compression: expected one of {COMPRESSIONS}, got {compression!r}")
    kw = {"fletcher32": True}
    if compression == "lzf":
        kw["compression"] = "lzf"
    elif compression == "gzip":
        kw.update(compression="gzip", compression_opts=4, shuffle=True)
    return kw


def _attr_value(v):
    """An attribute as stored: strings (and JSON) as fixed-length UTF-8 bytes,
    kept in the attribute's own header. A variable-length string would live in
    the file's global heap, where one damaged size field sends libhdf5 into an
    endless loop on reading (found by tests/test_properties.py)."""
    if isinstance(v, (dict, list, tuple)):
        v = json.dumps(v, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    if v is None:
        v = ""
    if isinstance(v, str):
        return np.bytes_(v.encode("utf-8"))
    return v


def _attr_read(v):
    """An attribute as read: fixed-length bytes back to str, NumPy scalars to Python."""
    v = v.item() if hasattr(v, "item") else v
    return v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v


class ShardWriter:
    """Append rows to a new shard; ``close()`` publishes it, ``abort()`` drops it.

    Contiguous layout: with ``size`` = (n_rows, nnz) known in advance, the
    datasets are allocated in the HDF5 file at once and every appended byte is
    written once, at its place in the file; without it, rows go to raw
    temporary files that ``close()`` copies into the file. Compressed layout:
    chunked datasets. Use as a context manager: an exception inside the block
    aborts."""

    def __init__(self, path, n_features, dtype=np.float64, compression=DEFAULT_COMPRESSION,
                 size=None, **attrs):
        self.path = os.fspath(path)
        self.n_features = int(n_features)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise MpisgdError(f"dtype: shard values are float32 or float64, not {self.dtype}")
        self.compression_kw = _filters(compression)
        self.compression = compression
        directory = os.path.dirname(os.path.abspath(self.path))
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as exc:
            raise write_error(self.path, exc) from None
        self.out = AtomicFile(self.path)
        self.tmp = self.out.tmp
        self.attrs = dict(attrs)
        self.n_rows = 0
        self.nnz = 0
        self.f = None
        self.raw = {}
        self.size = None if size is None else (int(size[0]), int(size[1]))
        self.part = None  # the writer of this shard's own rows, when written in place
        self.offsets = {}  # dataset → file offset of its first byte (written in place)
        if compression == "none" and self.size is not None:
            try:
                self._allocate()
            except OSError as exc:
                self._fail(exc)
            except MpisgdError:
                self.abort()
                raise
        elif compression == "none":
            for name, dt in _STREAMED:
                self.out.extra.append(f".{name}")
                self.raw[name] = open(f"{self.tmp}.{name}", "wb")
            self.raw["indptr"].write(np.zeros(1, np.int64).data)
        else:
            import h5py

            # No chunk cache: each append reaches the disk at once, so that a full disk
            # fails it with an error (flushing cached chunks to a full disk crashed HDF5;
            # tests/test_full_disk.py). Appends were no slower (bench: 100k rows, gzip).
            self.f = h5py.File(self.tmp, "w", rdcc_nbytes=0)
            kw = self.compression_kw
            mk = self.f.create_dataset
            for name, dt in _STREAMED:
                rows = name in ("indptr", "labels")
                mk(name, (1 if name == "indptr" else 0,), dt or self.dtype, maxshape=(None,),
                   chunks=(CHUNK_ROWS if rows else CHUNK,), **kw)
            self.f["indptr"][0] = 0

    def _allocate(self):
        """Create the contiguous datasets of ``size`` (space reserved, nothing
        written); this writer's own rows go in through a ShardPart at row 0."""
        import h5py

        n_rows, nnz = self.size
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        dcpl.set_fill_time(h5py.h5d.FILL_TIME_NEVER)
        with h5py.File(self.tmp, "w") as f:
            for name, dt in _STREAMED:
                n = {"indptr": n_rows + 1, "labels": n_rows}.get(name, nnz)
                ds = f.create_dataset(name, (n,), dt or self.dtype, dcpl=dcpl)
                self.offsets[name] = ds.id.get_offset() if n else 0
        self.part = ShardPart(self.layout(), 0, 0)
        self.part._write("indptr", np.zeros(1, np.int64), self.offsets["indptr"])

    def layout(self):
        """Where the allocated datasets lie (picklable), for ShardPart."""
        return (self.path, self.tmp, dict(self.offsets), self.dtype.str, self.n_features,
                self.size)

    def append(self, indptr, indices, data, y):
        """Append rows given as CSR pieces (``indptr`` may start anywhere)."""
        k = len(indptr) - 1
        m = int(indptr[-1] - indptr[0])
        if k <= 0:
            return
        if self.part is not None:
            try:
                self.part.append(indptr, indices, data, y)
            except MpisgdError:
                self.abort()
                raise
            self.n_rows, self.nnz = self.part.n_rows, self.part.nnz
            return
        if m and (indices.min() < 0 or indices.max() >= self.n_features):
            raise MpisgdError(
                f"{self.path}: feature index outside [0, {self.n_features}) in appended rows"
            )
        new = {
            "indptr": np.asarray(indptr[1:], np.int64) - indptr[0] + self.nnz,
            "indices": np.asarray(indices, np.int32),
            "data": np.asarray(data, dtype=self.dtype),
            "labels": np.asarray(y, np.float64),
        }
        try:
            for name, arr in new.items():
                if self.raw:
                    self.raw[name].write(np.ascontiguousarray(arr).data)  # a full disk: ENOSPC
                else:
                    d = self.f[name]
                    n0 = d.shape[0]
                    d.resize((n0 + len(arr),))
                    d[n0:] = arr
        except OSError as exc:  # e.g. a full disk
            self._fail(exc)
        self.n_rows += k
        self.nnz += m

    def close(self, written=None, **attrs):
        """Write the attributes, flush, rename into place; returns the path.
        ``written``: (rows, non-zeros) that ShardParts (of any process) have
        written in place in all, instead of this writer's own appends."""
        if written is not None:
            self.n_rows, self.nnz = int(written[0]), int(written[1])
        try:
            self._finish(attrs)
        except OSError as exc:  # e.g. a full disk
            self._fail(exc)
        self.out.commit()
        return self.path

    def _fail(self, exc):
        self.abort()
        raise write_error(self.path, exc) from None

    def _finish(self, attrs):
        import h5py

        self.attrs.update(attrs)
        fsums = None  # the feature sums, when read back with the checksums
        if self.part is not None:
            self.part.close()
            self.part = None
            if (self.n_rows, self.nnz) != self.size:
                raise MpisgdError(f"{self.path}: {self.n_rows} rows and {self.nnz} non-zeros "
                                  f"appended, {self.size[0]} and {self.size[1]} announced")
            self.f = h5py.File(self.tmp, "r+")
            fsums, found = self._read_back()
            group = self.f.create_group("checksums")
            group.attrs["segment_bytes"] = SEGMENT
            for name, _ in _STREAMED:
                group.create_dataset(name, data=found[name])
        elif self.raw:
            for fh in self.raw.values():
                fh.close()
            self.f = h5py.File(self.tmp, "w")
            group = self.f.create_group("checksums")
            group.attrs["segment_bytes"] = SEGMENT
            for name, dt in _STREAMED:
                dt = np.dtype(dt or self.dtype)
                n = os.path.getsize(f"{self.tmp}.{name}") // dt.itemsize
                ds = self.f.create_dataset(name, (n,), dt)  # contiguous
                step = (16 * SEGMENT) // dt.itemsize  # whole segments per copy
                sums = []
                with open(f"{self.tmp}.{name}", "rb") as src:  # plain reads: bounded RSS
                    for a in range(0, n, step):
                        part = np.fromfile(src, dt, min(step, n - a))
                        ds[a : a + len(part)] = part
                        sums.append(checksums(part))
                group.create_dataset(name, data=np.concatenate(sums) if sums else
                                     np.zeros((0, 2), np.uint64))
                os.unlink(f"{self.tmp}.{name}")
            self.raw = {}
        # Σ x over rows, of the values as stored, in fixed blocks of entries:
        # the same bits however the rows were appended.
        step = 16 * CHUNK
        if fsums is None:
            fsums = np.zeros(self.n_features, np.float64)
            for a in range(0, self.nnz, step):
                fsums += np.bincount(self.f["indices"][a : a + step],
                                    weights=self.f["data"][a : a + step].astype(np.float64),
                                    minlength=self.n_features)
        if self.compression == "none":
            self.f.create_dataset("feature_sums", data=fsums)
            self.f["checksums"].create_dataset("feature_sums", data=checksums(fsums))
        else:
            self.f.create_dataset("feature_sums", data=fsums,
                                  chunks=(min(CHUNK, max(1, self.n_features)),),
                                  **self.compression_kw)
        a = self.f.attrs
        a["format"] = _attr_value(FORMAT)
        a["format_version"] = FORMAT_VERSION
        a["n_rows"] = self.n_rows
        a["n_features"] = self.n_features
        a["nnz"] = self.nnz
        a["compression"] = _attr_value(self.compression)
        from mpisgd import __version__

        a["mpisgd_version"] = _attr_value(__version__)
        for key in ("shard_index", "shard_count", "source", "label_mapping", "command"):
            a[key] = _attr_value(self.attrs.get(key, -1 if key.startswith("shard_") else ""))
        for key, v in self.attrs.items():
            if key not in a:
                a[key] = _attr_value(v)
        self.f.close()

    def _read_back(self):
        """The feature sums and every dataset's segment checksums of a shard
        written in place, from one plain read of the file (bounded RSS)."""
        found = {}
        with open(self.tmp, "rb") as src:
            for name, dt in (("indptr", np.int64), ("labels", np.float64)):
                n = self.f[name].shape[0]
                step = (16 * SEGMENT) // 8  # whole segments per read
                src.seek(self.offsets[name])
                found[name] = [checksums(np.fromfile(src, dt, min(step, n - a)))
                               for a in range(0, n, step)]
        sums = np.zeros(self.n_features, np.float64)
        found["indices"], found["data"] = [], []
        with open(self.tmp, "rb") as fi, open(self.tmp, "rb") as fd:
            fi.seek(self.offsets["indices"])
            fd.seek(self.offsets["data"])
            step = 16 * CHUNK  # the feature sums' blocks, whole segments of both
            for a in range(0, self.nnz, step):
                ix = np.fromfile(fi, np.int32, min(step, self.nnz - a))
                d = np.fromfile(fd, self.dtype, len(ix))
                found["indices"].append(checksums(ix))
                found["data"].append(checksums(d))
                sums += np.bincount(ix, weights=d.astype(np.float64), minlength=self.n_features)
        return sums, {name: np.concatenate(c) if c else np.zeros((0, 2), np.uint64)
                      for name, c in found.items()}

    def abort(self):
        """Drop the shard: close and remove its temporary files."""
        for fh in [*self.raw.values(), self.f]:
            try:
                if fh is not None:
                    fh.close()
            except Exception:  # removed next anyway (on a full disk the flush fails)
                pass
        if self.part is not None:
            self.part.close()
        self.raw, self.f, self.part = {}, None, None
        self.out.discard()

    def __enter__(self):
        return self

    def __exit__(self, etype, exc, tb):
        if etype is not None:
            self.abort()
        return False


class ShardPart:
    """Rows of a shard allocated by a ShardWriter with ``size`` (its ``layout()``,
    possibly from another process), written in place from row ``row0`` and
    entry ``nnz0`` on: the bytes that the shard's own appends would put there.
    Parts of one shard may be written by several processes at once (disjoint
    ranges); the ShardWriter publishes it after all of them are closed."""

    def __init__(self, layout, row0, nnz0):
        self.path, self.tmp, offsets, dtype, self.n_features, self.size = layout
        self.dtype = np.dtype(dtype)
        self.row0, self.nnz0 = int(row0), int(nnz0)
        self.n_rows = self.nnz = 0  # written so far
        # file offset of this part's first element of each dataset
        self.at = {"indptr": offsets["indptr"] + 8 * (self.row0 + 1),
                   "indices": offsets["indices"] + 4 * self.nnz0,
                   "data": offsets["data"] + self.dtype.itemsize * self.nnz0,
                   "labels": offsets["labels"] + 8 * self.row0}
        try:
            self.fd = os.open(self.tmp, os.O_WRONLY)
        except OSError as exc:
            raise write_error(self.path, exc) from None

    def _write(self, name, arr, offset):
        buf = memoryview(np.ascontiguousarray(arr)).cast("B")
        try:
            while len(buf):  # pwrite may write less than asked
                n = os.pwrite(self.fd, buf, offset)  # a full disk: ENOSPC
                buf, offset = buf[n:], offset + n
        except OSError as exc:
            self.close()
            raise write_error(self.path, exc) from None
        return offset

    def append(self, indptr, indices, data, y):
        """Append rows given as CSR pieces (``indptr`` may start anywhere)."""
        k = len(indptr) - 1
        m = int(indptr[-1] - indptr[0])
        if k <= 0:
            return
        if (self.row0 + self.n_rows + k > self.size[0] or
                self.nnz0 + self.nnz + m > self.size[1]):
            self.close()
            raise MpisgdError(f"{self.path}: more rows or non-zeros appended than the "
                              f"{self.size[0]} rows and {self.size[1]} non-zeros announced")
        if m and (indices.min() < 0 or indices.max() >= self.n_features):
            self.close()
            raise MpisgdError(
                f"{self.path}: feature index outside [0, {self.n_features}) in appended rows"
            )
        new = {
            "indptr": np.asarray(indptr[1:], np.int64) - indptr[0] + self.nnz0 + self.nnz,
            "indices": np.asarray(indices, np.int32),
            "data": np.asarray(data, dtype=self.dtype),
            "labels": np.asarray(y, np.float64),
        }
        for name, arr in new.items():
            self.at[name] = self._write(name, arr, self.at[name])
        self.n_rows += k
        self.nnz += m

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def write_shard(path, X, y, dtype=np.float64, compression=DEFAULT_COMPRESSION, **attrs):
    """Write a CSR matrix and its labels as one shard, atomically."""
    X = X.tocsr()
    if X.shape[0] != len(y):
        raise MpisgdError(f"{path}: {X.shape[0]} rows but {len(y)} labels")
    with ShardWriter(path, X.shape[1], dtype, compression, size=(X.shape[0], X.nnz),
                     **attrs) as w:
        step = 1 << 18
        for r in range(0, X.shape[0], step):
            s = min(r + step, X.shape[0])
            a, b = X.indptr[r], X.indptr[s]
            w.append(X.indptr[r : s + 1], X.indices[a:b], X.data[a:b], y[r:s])
        return w.close()


class Shard:
    """An open shard: attributes, feature sums, and row ranges on demand.

    With the contiguous layout ``read`` returns read-only views of the
    memory-mapped file (no copy) for ``indices``, ``data`` (float64 shards)
    and ``labels``."""

    def __init__(self, path):
        import h5py

        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise MpisgdError(f"{self.path}: shard not found")
        try:
            self.f = h5py.File(self.path, "r")
            self.key = _file_key(self.path)
        except OSError as exc:
            raise MpisgdError(
                f"{self.path}: not a readable HDF5 shard (truncated or corrupt?): {exc}"
            ) from None
        try:
            self._check()
        except MpisgdError:
            self.close()
            raise
        except _CORRUPT as exc:
            self.close()
            raise MpisgdError(f"{self.path}: not a readable shard (corrupt HDF5 structure: {exc})") from None

    def _check(self):
        import h5py

        a = self.f.attrs
        for key in REQUIRED:
            if key not in a:
                raise MpisgdError(f"{self.path}: not an mpisgd shard (attribute {key!r} missing)")
        if _attr_read(a["format"]) != FORMAT:
            raise MpisgdError(f"{self.path}: format {_attr_read(a['format'])!r}, expected {FORMAT!r}")
        if int(a["format_version"]) != FORMAT_VERSION:
            raise MpisgdError(
                f"{self.path}: shard format version {int(a['format_version'])}, this mpisgd "
                f"reads version {FORMAT_VERSION} (re-run mpisgd prep)"
            )
        for name in DATASETS:
            if name not in self.f:
                raise MpisgdError(f"{self.path}: dataset {name!r} missing")
            if not isinstance(self.f[name], h5py.Dataset):  # a damaged file can turn one into another object
                raise MpisgdError(f"{self.path}: {name!r} is not a dataset")
            if self.f[name].dtype.str not in TYPES[name]:
                raise MpisgdError(f"{self.path}: dataset {name!r} is of type {self.f[name].dtype.str}, "
                                  f"the format says {' or '.join(TYPES[name])}")
            if self.f[name].chunks is not None:
                self._check_filters(name)
        self.attrs = {k: _attr_read(v) for k, v in a.items()}
        self.n_rows = int(a["n_rows"])
        self.n_features = int(a["n_features"])
        self.nnz = int(a["nnz"])
        shapes = {
            "indptr": self.n_rows + 1,
            "indices": self.nnz,
            "data": self.nnz,
            "labels": self.n_rows,
            "feature_sums": self.n_features,
        }
        for name, length in shapes.items():
            if self.f[name].shape != (length,):
                raise MpisgdError(
                    f"{self.path}: dataset {name!r} has shape {self.f[name].shape}, "
                    f"attributes say ({length},)"
                )
        self.maps = {}
        if self.f["indptr"].chunks is None:
            self._map()
        first = self._get("indptr", slice(0, 1))[0]
        last = self._get("indptr", slice(self.n_rows, self.n_rows + 1))[0]
        if first != 0 or last != self.nnz:
            raise MpisgdError(f"{self.path}: dataset 'indptr' does not span [0, nnz]")
        self.feature_sums = np.array(self._get("feature_sums", slice(0, self.n_features)))

    def _check_filters(self, name):
        """A chunked dataset's chunks are all there (``_chunks``) and its filters
        are the writer's (``_filters``): every chunk
        checksummed (fletcher32), the shuffle filter's element size the type's,
        and no chunk stored with the shuffle skipped (it never fails; lzf and
        deflate may, on bytes they cannot shrink). A damaged filter message
        otherwise reads checksummed chunks into wrong values without an error
        (one bit made labels' shuffle size 9: every label read as 0)."""
        import h5py

        ds = self.f[name]
        dcpl = ds.id.get_create_plist()
        filters = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]  # (code, flags, values, name)
        codes = [code for code, *_rest in filters]
        if h5py.h5z.FILTER_FLETCHER32 not in codes:
            raise MpisgdError(f"{self.path}: dataset {name!r} is corrupt (chunks without checksums)")
        if h5py.h5z.FILTER_SHUFFLE not in codes:
            self._chunks(name)
            return
        at = codes.index(h5py.h5z.FILTER_SHUFFLE)
        if tuple(filters[at][2][:1]) != (ds.dtype.itemsize,):
            raise MpisgdError(f"{self.path}: dataset {name!r} is corrupt (shuffle filter of element size "
                              f"{tuple(filters[at][2][:1])}, its type has {ds.dtype.itemsize})")
        if any(mask >> at & 1 for _offset, mask in self._chunks(name)):
            raise MpisgdError(f"{self.path}: dataset {name!r} is corrupt (a chunk stored unshuffled)")

    def _chunks(self, name):
        """[(first element, filter mask)] of a chunked dataset's stored chunks,
        refused unless they are exactly its chunks (the writer writes every
        element): a damaged index entry (one bit moved labels' chunk from 0 to
        65,536) leaves elements unallocated, which HDF5 reads as 0 without an error."""
        ds = self.f[name]
        chunks = []
        if hasattr(ds.id, "chunk_iter"):  # one pass over the chunk index (HDF5 >= 1.12.3)
            ds.id.chunk_iter(lambda info: chunks.append((info.chunk_offset[0], info.filter_mask)))
        else:  # a lookup per chunk
            chunks = [(info.chunk_offset[0], info.filter_mask)
                      for info in map(ds.id.get_chunk_info, range(ds.id.get_num_chunks()))]
        n, c = ds.shape[0], ds.chunks[0]
        if len(chunks) != -(-n // c) or sorted(offset for offset, _mask in chunks) != list(range(0, n, c)):
            raise MpisgdError(f"{self.path}: dataset {name!r} is corrupt (its chunk index does not cover it)")
        return chunks

    def _map(self):
        """Memory-map the contiguous datasets; checksums verified lazily."""
        if "checksums" not in self.f:
            raise MpisgdError(f"{self.path}: contiguous shard without its 'checksums' group")
        self.seg = int(self.f["checksums"].attrs["segment_bytes"])
        self.sums = {}
        size = self.key[3]
        self.verified = _VERIFIED.setdefault(self.key, {})
        self.all_verified = set()  # datasets whose every segment is verified
        self.map_start = {}
        self.released = {}  # dataset → bytes of its map dropped by ``release``
        for name in DATASETS:
            ds = self.f[name]
            if ds.chunks is not None or name not in self.f["checksums"]:
                raise MpisgdError(f"{self.path}: dataset {name!r} is not in the contiguous layout")
            self.sums[name] = self.f["checksums"][name][:]
            n = ds.shape[0]
            nseg = (n * ds.dtype.itemsize + self.seg - 1) // self.seg
            if self.sums[name].shape != (nseg, 2):
                raise MpisgdError(f"{self.path}: checksums of {name!r} do not match its size")
            if self.verified.get(name, np.zeros(0)).shape != (nseg,):
                self.verified[name] = np.zeros(nseg, np.bool_)
            if n == 0:
                self.maps[name] = np.zeros(0, ds.dtype)
                continue
            offset = ds.id.get_offset()
            if offset is None or offset + n * ds.dtype.itemsize > size:
                raise MpisgdError(f"{self.path}: dataset {name!r} lies beyond the end of the "
                                  f"file (truncated?)")
            self.maps[name] = np.memmap(self.path, ds.dtype, "r", offset, (n,))
            self.map_start[name] = offset % mmap.ALLOCATIONGRANULARITY  # array's place in the map

    def _verify(self, name, lo, hi):
        """Check the segments holding elements [lo, hi) of a mapped dataset."""
        arr = self.maps[name]
        item = arr.dtype.itemsize
        s0, s1 = (lo * item) // self.seg, (max(hi, lo + 1) * item - 1) // self.seg + 1
        done = self.verified[name]
        if done[s0:s1].all() or hi <= lo:  # every later pass
            return
        for s in np.flatnonzero(~done[s0:s1]) + s0:
            self._check_segment(name, s)
            done[s] = True
        if done.all():
            self.all_verified.add(name)

    def _check_segment(self, name, s):
        """Verify segment ``s`` of a mapped dataset: its checksum (and for
        ``indices`` the range of its values)."""
        arr = self.maps[name]
        per = self.seg // arr.dtype.itemsize
        part = np.asarray(arr[s * per : (s + 1) * per])
        # Indices are bounds-checked once, with their checksum, not per read.
        if name == "indices":
            a, b, low, high = _index_checksum(part.view(np.uint32), part)
            got = np.array([a, b], np.uint64)
        else:
            got, low, high = checksums(part)[0], 0, 0
        if not np.array_equal(got, self.sums[name][s]):
            raise MpisgdError(
                f"{self.path}: dataset {name!r} is corrupt (checksum mismatch in bytes "
                f"{s * self.seg}..{(s + 1) * self.seg})"
            )
        if len(part) and (low < 0 or high >= self.n_features):
            raise MpisgdError(f"{self.path}: dataset 'indices' holds an index outside "
                              f"[0, {self.n_features}) (bytes {s * self.seg}..)")

    def _get(self, name, sel):
        if self.maps:
            if name not in self.all_verified:  # a later pass skips the look-up
                lo, hi, _ = sel.indices(len(self.maps[name]))
                self._verify(name, lo, hi)
            return self.maps[name][sel]
        try:
            return self.f[name][sel]
        except _CORRUPT as exc:
            raise MpisgdError(
                f"{self.path}: dataset {name!r} is corrupt (checksum or read error: {exc})"
            ) from None

    @property
    def preprocessing(self):
        """What ``mpisgd prep`` did to the rows (docs/FORMAT.md, "Preprocessing"):
        the record a model trained on this shard keeps."""
        mapping = self.attrs.get("label_mapping") or ""
        zero_based = self.attrs.get("zero_based_input")
        return {
            "normalize": "l2" if self.attrs.get("normalized") else "none",
            "zero_based_input": None if zero_based is None else bool(zero_based),
            "n_features": self.n_features,
            "source": self.attrs.get("source", ""),
            "label_mapping": json.loads(mapping) if mapping else {},
            "vw_hash_bits": int(self.attrs.get("vw_hash_bits", 0)),
        }

    @property
    def data_dtype(self):
        return self.f["data"].dtype

    def read(self, start, stop):
        """Rows ``[start, stop)``: (indptr int64 from 0, indices int32, data float64, y float64)."""
        start, stop = max(0, int(start)), min(self.n_rows, int(stop))
        if stop <= start:
            return np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0), np.zeros(0)
        indptr = np.array(self._get("indptr", slice(start, stop + 1)))
        a, b = int(indptr[0]), int(indptr[-1])
        if not 0 <= a <= b <= self.nnz or np.any(indptr[1:] < indptr[:-1]):  # row bounds in order
            raise MpisgdError(f"{self.path}: rows {start}..{stop} hold inconsistent CSR data "
                              f"(dataset 'indptr' not non-decreasing within [0, nnz])")
        indices = np.asarray(self._get("indices", slice(a, b)))
        data = np.asarray(self._get("data", slice(a, b))).astype(np.float64, copy=False)
        y = np.asarray(self._get("labels", slice(start, stop)))
        indptr -= a
        if not self.maps and b - a and (indices.min() < 0 or indices.max() >= self.n_features):
            raise MpisgdError(f"{self.path}: rows {start}..{stop} hold inconsistent CSR data")
        return indptr, indices, data, y

    def release(self, stop_row):
        """Drop this process's mapping of rows before ``stop_row`` (the file's
        pages stay in the OS cache, and reading them again maps them again), so
        that streaming a shard keeps the resident set bounded."""
        if not self.maps or stop_row <= 0:
            return
        stop_row = min(stop_row, self.n_rows)
        nnz = int(self.maps["indptr"][stop_row])
        for name, count in zip(STREAMED, (stop_row, stop_row, nnz, nnz)):
            arr = self.maps[name]
            end = self.map_start[name] + count * arr.dtype.itemsize
            end -= end % mmap.PAGESIZE
            begin = self.released.get(name, 0)  # dropped by the previous calls
            if end > begin and hasattr(arr, "_mmap") and arr._mmap is not None:
                arr._mmap.madvise(mmap.MADV_DONTNEED, begin, end - begin)
                self.released[name] = end

    def mapped_bytes(self):
        """Bytes of the mapped datasets that ``release`` drops (0: chunked layout)."""
        return sum(self.maps[name].nbytes for name in self.map_start) if self.maps else 0

    def unchanged(self):
        """Whether the file at ``path`` is still the one opened (same device,
        inode, size and modification time): a shard kept open across epochs is
        opened (and verified) again when it is not."""
        try:
            return _file_key(self.path) == self.key
        except OSError:
            return False

    def rewind(self):
        """Start another pass over the rows: ``release`` counts from row 0 again.
        Returns what the last pass left mapped, for ``drop`` once the caller
        is done with those rows."""
        if not self.maps:  # the chunked layout: nothing mapped
            return []
        tail = [(self.maps[name]._mmap, self.released.get(name, 0)) for name in STREAMED
                if name in self.map_start and getattr(self.maps[name], "_mmap", None) is not None]
        self.released = {}
        return tail

    @staticmethod
    def drop(tail):
        """Drop the mapped pages ``rewind`` returned (they stay in the OS cache)."""
        for m, begin in tail:
            if begin < len(m):
                m.madvise(mmap.MADV_DONTNEED, begin, len(m) - begin)

    def verify(self):
        """Check every checksum once (every segment, or every HDF5 chunk)."""
        step = 1 << 20
        for name in DATASETS:
            n = self.f[name].shape[0]
            for s in range(0, n, step):
                self._get(name, slice(s, min(n, s + step)))

    def close(self):
        self.maps = {}
        try:
            self.f.close()
        except _CORRUPT:  # a damaged file can fail to close; it was only read
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _file_key(path):
    """What identifies a file version: (device, inode, modification time, size)."""
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def preprocessing_of(paths):
    """The preprocessing record shared by the shards ``paths``; shards that were
    preprocessed differently (normalization, index base, n_features, label
    mapping, VW hashing) are an error naming two of them."""
    first = first_path = None
    sources = []
    for path in paths:
        with open_shard(path) as shard:
            record = shard.preprocessing
        sources.append(record.pop("source"))
        if first is None:
            first, first_path = record, path
        elif record != first:
            key = next(k for k in first if first[k] != record[k])
            if key == "n_features":
                raise MpisgdError(f"n_features differs across shards ({first_path}: "
                                  f"{first[key]}, {path}: {record[key]})")
            raise MpisgdError(
                f"{path}: {key}={record[key]!r}, but {first_path}: {key}={first[key]!r}: "
                "the shards were not prepared the same way"
            )
    if first is None:
        return {}
    distinct = sorted(set(sources))
    return {**first, "source": distinct[0] if len(distinct) == 1 else distinct}


def open_shard(path, verify=False):
    """Open and check a shard (structure and attributes; ``verify`` also checks
    every checksum now rather than at first read). Raises MpisgdError."""
    shard = Shard(path)
    if verify:
        try:
            shard.verify()
        except Exception:
            shard.close()
            raise
    return shard
