"""The HDF5 shard format (docs/FORMAT.md): one CSR matrix and its labels.

Datasets: ``indptr`` int64 (n_rows + 1), ``indices`` int32 (nnz), ``data``
float32 or float64 (nnz), ``labels`` float64 (n_rows), ``feature_sums``
float64 (n_features; Σ_rows x, so the global mean is one Allreduce away).
All chunked, with HDF5's fletcher32 checksum on every chunk (checked by
HDF5 on every read) and optional lzf/gzip compression. Root attributes name
the format and its version, the shape and provenance (see ``REQUIRED``).

Files are written under a temporary name in the target directory and
renamed at the end, so a failed write never leaves a partial shard.
"""

import json
import os
import tempfile

import numpy as np

from mpisgd.errors import MpisgdError

FORMAT = "mpisgd-shard"
FORMAT_VERSION = 1
CHUNK = 1 << 16  # elements per HDF5 chunk of indices/data
CHUNK_ROWS = 1 << 14  # elements per HDF5 chunk of indptr/labels
# Chosen by bench/bench_data.py (compression section): see bench/README.md.
DEFAULT_COMPRESSION = "none"
COMPRESSIONS = ("none", "lzf", "gzip")
REQUIRED = ("format", "format_version", "n_rows", "n_features", "nnz")
DATASETS = ("indptr", "indices", "data", "labels", "feature_sums")


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
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, default=lambda o: o.item() if hasattr(o, "item") else str(o))
    if v is None:
        return ""
    return v


class ShardWriter:
    """Append rows to a new shard; ``close()`` publishes it, ``abort()`` drops it.

    Use as a context manager: an exception inside the block aborts."""

    def __init__(self, path, n_features, dtype=np.float64, compression=DEFAULT_COMPRESSION,
                 **attrs):
        import h5py

        self.path = os.fspath(path)
        self.n_features = int(n_features)
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise MpisgdError(f"dtype: shard values are float32 or float64, not {self.dtype}")
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(
            prefix="." + os.path.basename(self.path) + ".", suffix=".tmp", dir=directory
        )
        os.close(fd)
        self.attrs = dict(attrs)
        self.f = h5py.File(self.tmp, "w")
        kw = _filters(compression)
        self.compression = compression
        self.compression_kw = kw
        mk = self.f.create_dataset
        self.d_indptr = mk("indptr", (1,), np.int64, maxshape=(None,), chunks=(CHUNK_ROWS,), **kw)
        self.d_indices = mk("indices", (0,), np.int32, maxshape=(None,), chunks=(CHUNK,), **kw)
        self.d_data = mk("data", (0,), self.dtype, maxshape=(None,), chunks=(CHUNK,), **kw)
        self.d_labels = mk("labels", (0,), np.float64, maxshape=(None,), chunks=(CHUNK_ROWS,),
                           **kw)
        self.d_indptr[0] = 0
        self.n_rows = 0
        self.nnz = 0

    def append(self, indptr, indices, data, y):
        """Append rows given as CSR pieces (``indptr`` may start anywhere)."""
        k = len(indptr) - 1
        m = int(indptr[-1] - indptr[0])
        if k <= 0:
            return
        if m and (indices.min() < 0 or indices.max() >= self.n_features):
            raise MpisgdError(
                f"{self.path}: feature index outside [0, {self.n_features}) in appended rows"
            )
        values = np.asarray(data, dtype=self.dtype)
        for d, new in (
            (self.d_indptr, np.asarray(indptr[1:], np.int64) - indptr[0] + self.nnz),
            (self.d_indices, np.asarray(indices, np.int32)),
            (self.d_data, values),
            (self.d_labels, np.asarray(y, np.float64)),
        ):
            n0 = d.shape[0]
            d.resize((n0 + len(new),))
            d[n0:] = new
        self.n_rows += k
        self.nnz += m

    def close(self, **attrs):
        """Write the attributes, flush, rename into place; returns the path."""
        self.attrs.update(attrs)
        # Σ x over rows, of the values as stored, in fixed blocks of entries:
        # the same bits however the rows were appended.
        sums = np.zeros(self.n_features, np.float64)
        step = 16 * CHUNK
        for a in range(0, self.nnz, step):
            sums += np.bincount(self.d_indices[a : a + step],
                                weights=self.d_data[a : a + step].astype(np.float64),
                                minlength=self.n_features)
        self.f.create_dataset("feature_sums", data=sums, chunks=(min(CHUNK, max(1, self.n_features)),),
                              **self.compression_kw)
        a = self.f.attrs
        a["format"] = FORMAT
        a["format_version"] = FORMAT_VERSION
        a["n_rows"] = self.n_rows
        a["n_features"] = self.n_features
        a["nnz"] = self.nnz
        a["compression"] = self.compression
        from mpisgd import __version__

        a["mpisgd_version"] = __version__
        for key in ("shard_index", "shard_count", "source", "label_mapping", "command"):
            a[key] = _attr_value(self.attrs.get(key, -1 if key.startswith("shard_") else ""))
        for key, v in self.attrs.items():
            if key not in a:
                a[key] = _attr_value(v)
        self.f.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.tmp, 0o666 & ~umask)  # mkstemp made it private
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self):
        try:
            self.f.close()
        finally:
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)

    def __enter__(self):
        return self

    def __exit__(self, etype, exc, tb):
        if etype is not None:
            self.abort()
        return False


def write_shard(path, X, y, dtype=np.float64, compression=DEFAULT_COMPRESSION, **attrs):
    """Write a CSR matrix and its labels as one shard, atomically."""
    X = X.tocsr()
    if X.shape[0] != len(y):
        raise MpisgdError(f"{path}: {X.shape[0]} rows but {len(y)} labels")
    with ShardWriter(path, X.shape[1], dtype, compression, **attrs) as w:
        step = 1 << 18
        for r in range(0, X.shape[0], step):
            s = min(r + step, X.shape[0])
            a, b = X.indptr[r], X.indptr[s]
            w.append(X.indptr[r : s + 1], X.indices[a:b], X.data[a:b], y[r:s])
        return w.close()


class Shard:
    """An open shard: attributes, feature sums, and row ranges on demand."""

    def __init__(self, path):
        import h5py

        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            raise MpisgdError(f"{self.path}: shard not found")
        try:
            self.f = h5py.File(self.path, "r")
        except OSError as exc:
            raise MpisgdError(
                f"{self.path}: not a readable HDF5 shard (truncated or corrupt?): {exc}"
            ) from None
        try:
            self._check()
        except Exception:
            self.f.close()
            raise

    def _check(self):
        a = self.f.attrs
        for key in REQUIRED:
            if key not in a:
                raise MpisgdError(f"{self.path}: not an mpisgd shard (attribute {key!r} missing)")
        if a["format"] != FORMAT:
            raise MpisgdError(f"{self.path}: format {a['format']!r}, expected {FORMAT!r}")
        if int(a["format_version"]) != FORMAT_VERSION:
            raise MpisgdError(
                f"{self.path}: shard format version {int(a['format_version'])}, this mpisgd "
                f"reads version {FORMAT_VERSION} (re-run mpisgd prep)"
            )
        for name in DATASETS:
            if name not in self.f:
                raise MpisgdError(f"{self.path}: dataset {name!r} missing")
        self.attrs = {k: (v.item() if hasattr(v, "item") else v) for k, v in a.items()}
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
        ends = self._get("indptr", np.s_[[0, -1]] if self.n_rows else np.s_[0:1])
        if ends[0] != 0 or ends[-1] != self.nnz:
            raise MpisgdError(f"{self.path}: dataset 'indptr' does not span [0, nnz]")
        self.feature_sums = self._get("feature_sums", np.s_[:])

    def _get(self, name, sel):
        try:
            return self.f[name][sel]
        except OSError as exc:
            raise MpisgdError(
                f"{self.path}: dataset {name!r} is corrupt (checksum or read error: {exc})"
            ) from None

    @property
    def data_dtype(self):
        return self.f["data"].dtype

    def read(self, start, stop):
        """Rows ``[start, stop)``: (indptr int64 from 0, indices int32, data float64, y float64)."""
        start, stop = max(0, int(start)), min(self.n_rows, int(stop))
        if stop <= start:
            return np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0), np.zeros(0)
        indptr = self._get("indptr", np.s_[start : stop + 1])
        a, b = int(indptr[0]), int(indptr[-1])
        indices = self._get("indices", np.s_[a:b])
        data = self._get("data", np.s_[a:b]).astype(np.float64, copy=False)
        y = self._get("labels", np.s_[start:stop])
        indptr -= a
        if a > b or (b - a and (indices.min() < 0 or indices.max() >= self.n_features)):
            raise MpisgdError(f"{self.path}: rows {start}..{stop} hold inconsistent CSR data")
        return indptr, indices, data, y

    def verify(self):
        """Read every dataset once, so HDF5 checks every chunk's checksum."""
        step = 1 << 20
        for name in DATASETS:
            n = self.f[name].shape[0]
            for s in range(0, n, step):
                self._get(name, np.s_[s : s + step])

    def close(self):
        self.f.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def open_shard(path, verify=False):
    """Open and check a shard (structure and attributes; ``verify`` also reads
    every chunk so HDF5 checks every checksum). Raises MpisgdError."""
    shard = Shard(path)
    if verify:
        try:
            shard.verify()
        except Exception:
            shard.close()
            raise
    return shard
