"""Inputs of ``mpisgd prep``: LIBSVM text, Vowpal Wabbit text, scipy .npz.

A source has a ``size`` (bytes of text, or rows of an .npz) and ``chunks(start,
stop)``, which parses the part ``[start, stop)`` of it (lines that begin
there, or rows) and yields ``(indptr, indices, data, y, stats)`` blocks with
raw int64 indices (see ``libsvm.iter_parsed``); ``counts(start, stop)``
counts the part's rows without parsing it (``libsvm.iter_counted``), or is
None where that is not cheaper than a parse. P ranks that take the P
``block_range`` parts of ``size`` together see every row exactly once.
"""

import os
import zlib

import numpy as np
from numba import njit

from mpisgd.data import libsvm, textio
from mpisgd.errors import MpisgdError


@njit(cache=True)
def _vw_to_libsvm(buf, n, out):
    """Rewrite VW lines ``label [importance] ['tag]|ns f[:v] ...`` as LIBSVM
    lines ``label f:v ...`` (``:1`` added where v is missing), line for line.

    Returns (bytes written, first bad line or 0, 1: no '|', 2: a second '|')."""
    i = 0
    o = 0
    line = 0
    while i < n:
        line += 1
        e = i
        while e < n and buf[e] != 10:
            e += 1
        s = i
        while s < e and (buf[s] == 32 or buf[s] == 9 or buf[s] == 13):
            s += 1
        if s == e or buf[s] == 35:  # blank or comment: keep as is
            for k in range(i, min(e + 1, n)):
                out[o] = buf[k]
                o += 1
            i = e + 1
            continue
        bar = s
        while bar < e and buf[bar] != 124:
            bar += 1
        if bar == e:
            return o, line, 1
        k = s
        while k < bar and buf[k] != 32 and buf[k] != 9:  # the label
            out[o] = buf[k]
            o += 1
            k += 1
        k = bar + 1
        if k < e and buf[k] != 32 and buf[k] != 9 and buf[k] != 13:
            while k < e and buf[k] != 32 and buf[k] != 9:  # the namespace's name
                k += 1
        while k < e:
            while k < e and (buf[k] == 32 or buf[k] == 9 or buf[k] == 13):
                k += 1
            if k >= e:
                break
            out[o] = 32
            o += 1
            colon = False
            while k < e and buf[k] != 32 and buf[k] != 9 and buf[k] != 13:
                if buf[k] == 124:
                    return o, line, 2
                colon = colon or buf[k] == 58
                out[o] = buf[k]
                o += 1
                k += 1
            if not colon:  # a feature without a value has value 1
                out[o] = 58
                out[o + 1] = 49
                o += 2
        if e < n:
            out[o] = 10
            o += 1
        i = e + 1
    return o, 0, 0


def detect_format(path):
    """'npz', 'vw' or 'libsvm', from the file name."""
    name = os.path.basename(str(path)).lower()
    for ext in (".gz", ".bz2", ".xz"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    if name.endswith(".npz"):
        return "npz"
    if name.endswith(".vw"):
        return "vw"
    return "libsvm"


class LibsvmSource:
    def __init__(self, path, zero_based="auto", n_features=None, binary=True):
        self.path = str(path)
        self.zero_based, self.n_features, self.binary = zero_based, n_features, binary
        self.compression = textio.compression_of(self.path)
        self._size = None

    @property
    def size(self):
        if self._size is None:
            self._size = textio.text_size(self.path)
        return self._size

    def chunks(self, start=0, stop=None):
        return libsvm.iter_parsed(self.path, self.zero_based, self.n_features, start, stop,
                                  self.binary)

    def counts(self, start=0, stop=None):
        """The rows of the part counted without parsing the values
        (``libsvm.iter_counted``), or None when a count costs a second
        decompression (compressed text)."""
        if self.compression is not None:
            return None
        return libsvm.iter_counted(self.path, self.zero_based, self.n_features, start, stop,
                                   self.binary)


class VWSource(LibsvmSource):
    """Vowpal Wabbit text, one namespace: ``label [importance] ['tag]|ns f[:v] f[:v] ...``.

    With ``hash_bits`` = 0 feature names must be integers (indices, with the
    same zero/one-based rules as LIBSVM): each chunk is rewritten to LIBSVM
    lines in numba and parsed by the LIBSVM parser, at about its speed. With
    ``hash_bits`` = b every name is hashed (CRC-32, not VW's murmurhash) into
    [0, 2^b), zero-based, colliding values add up; that path is Python
    (fine for small sets, not for GBs). A feature without ``:v`` has value
    1. Importance weights and tags are ignored."""

    def __init__(self, path, zero_based="auto", n_features=None, binary=True, hash_bits=0):
        super().__init__(path, zero_based, n_features, binary)
        self.hash_bits = int(hash_bits)
        if not 0 <= self.hash_bits <= 30:  # 2^b features in int32 indices
            raise MpisgdError(f"--vw-hash-bits must lie in 0..30, got {hash_bits}")
        if self.hash_bits:
            self.zero_based = True

    def chunks(self, start=0, stop=None):
        if not self.hash_bits:
            # Integer feature names: rewrite to LIBSVM and use the numba parser.
            return self._hinted(libsvm.iter_parsed(self.path, self.zero_based, self.n_features,
                                                   start, stop, self.binary,
                                                   transform=self._transform))
        return self._chunks_hashed(start, stop)

    @staticmethod
    def _hinted(chunks):
        """The blocks of ``chunks``; a feature name that is not an integer says
        that such names need hashing."""
        try:
            yield from chunks
        except libsvm.ParseError as exc:
            if not exc.what.startswith(libsvm._MESSAGES[libsvm.E_INDEX]):
                raise
            raise libsvm.ParseError(exc.path, exc.line, f"{exc.what}: VW feature names that are "
                                    "not integers need hashing (--vw-hash-bits B)") from None

    def counts(self, start=0, stop=None):
        return None  # the rows are known once the text is rewritten, i.e. parsed

    def _transform(self, buf, n, lines_before):
        out = np.empty(2 * n + 16, np.uint8)
        m, bad, why = _vw_to_libsvm(buf, n, out)
        if bad:
            what = "missing '|' (VW line without features)" if why == 1 else \
                "more than one namespace (only one is supported)"
            raise libsvm.ParseError(self.path, lines_before + bad, what)
        return out, m

    def _chunks_hashed(self, start, stop):
        lines = 0
        for buf, n in textio.iter_line_chunks(self.path, start, stop):
            text = bytes(buf[:n]).decode("utf-8", "replace")
            yield self._parse(text.split("\n"), lines)
            lines += text.count("\n") + (0 if text.endswith("\n") else 1)

    def _parse(self, lines, first):
        ptr, idx, val, ys = [0], [], [], []
        st = libsvm.ParseStats()
        for k, line in enumerate(lines):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            lineno = first + k + 1
            head, bar, feats = line.partition("|")
            if not bar:
                raise libsvm.ParseError(self.path, lineno, "missing '|' (VW line without features)")
            parts = head.split()
            try:
                y = float(parts[0])
            except (ValueError, IndexError):
                raise libsvm.ParseError(self.path, lineno, "unparseable label") from None
            if not np.isfinite(y):
                raise libsvm.ParseError(self.path, lineno, "unparseable label")
            if self.binary:
                if y not in (-1.0, 0.0, 1.0):
                    raise libsvm.ParseError(self.path, lineno, f"{libsvm._MESSAGES[libsvm.E_CLASS]}; "
                                                            f"{libsvm.BINARY_WHY}")
                if y == -1.0 and not st.first_neg:
                    st.first_neg = k + 1
                if y == 0.0 and not st.first_zero:
                    st.first_zero = k + 1
            tokens = feats.split()
            if feats[:1] not in (" ", "\t", ""):
                tokens = tokens[1:]  # namespace name
            row = {}
            for tok in tokens:
                name, colon, v = tok.rpartition(":") if ":" in tok else (tok, "", "1")
                try:
                    value = float(v)
                except ValueError:
                    raise libsvm.ParseError(self.path, lineno,
                                            f"non-numeric feature value ({tok!r})") from None
                if not np.isfinite(value):
                    raise libsvm.ParseError(self.path, lineno, f"NaN or infinite value ({tok!r})")
                if self.hash_bits:
                    j = zlib.crc32(name.encode()) & ((1 << self.hash_bits) - 1)
                else:
                    if not name.lstrip("-").isdigit():
                        raise libsvm.ParseError(
                            self.path, lineno,
                            f"non-numeric feature name ({tok!r}); use --vw-hash-bits")
                    j = int(name)
                    if j < 0:
                        raise libsvm.ParseError(self.path, lineno,
                                                f"negative feature index ({tok!r})")
                    if j == 0 and self.zero_based is False:
                        raise libsvm.ParseError(self.path, lineno, libsvm._MESSAGES[libsvm.E_ZERO])
                if j in row:
                    if not self.hash_bits:
                        raise libsvm.ParseError(self.path, lineno,
                                                libsvm._MESSAGES[libsvm.E_DUPLICATE])
                    row[j] += value  # hash collision: values add up, as in VW
                else:
                    row[j] = value
            for j in sorted(row):
                idx.append(j)
                val.append(row[j])
            ptr.append(len(idx))
            ys.append(y)
        indices = np.array(idx, np.int64)
        st.rows, st.nnz, st.lines = len(ys), len(idx), len(lines) - (1 if lines[-1] == "" else 0)
        if st.nnz:
            st.min_index, st.max_index = int(indices.min()), int(indices.max())
        base = libsvm._base_code(self.zero_based)
        if base == 1:
            indices -= 1
        if self.n_features is not None and st.nnz:
            limit = libsvm._max_raw(self.n_features, base)
            bad = np.flatnonzero(np.array(idx) > limit)
            if len(bad):
                row = int(np.searchsorted(np.array(ptr), bad[0], side="right")) - 1
                raise libsvm.ParseError(self.path, first + self._line_of_row(lines, row),
                                        f"{libsvm._MESSAGES[libsvm.E_BEYOND]}; n_features is "
                                        f"{self.n_features}")
            if base == -1:
                hit = np.flatnonzero(np.array(idx) == limit)
                if len(hit):
                    row = int(np.searchsorted(np.array(ptr), hit[0], side="right")) - 1
                    st.eq_line = self._line_of_row(lines, row)
        return (np.array(ptr, np.int64), indices, np.array(val, np.float64),
                np.array(ys, np.float64), st)

    @staticmethod
    def _line_of_row(lines, row):
        r = -1
        for k, line in enumerate(lines):
            s = line.strip()
            if s and not s.startswith("#"):
                r += 1
                if r == row:
                    return k + 1
        return len(lines)


class NpzSource:
    """A sparse matrix saved by ``scipy.sparse.save_npz`` whose file also holds
    the labels under ``y`` (or ``labels``), e.g. ``np.savez(path, data=...,
    indices=..., indptr=..., shape=..., format="csr", y=...)``. Indices are
    zero-based. ``size`` and ranges count rows."""

    def __init__(self, path, n_features=None, binary=True, block_rows=1 << 16):
        import scipy.sparse as sp

        self.path = str(path)
        self.binary, self.block_rows = binary, block_rows
        self.zero_based = True
        self.compression = None
        try:
            with np.load(self.path, allow_pickle=False) as z:
                keys = set(z.files)
                ykey = "y" if "y" in keys else "labels" if "labels" in keys else None
                if ykey is None:
                    raise MpisgdError(f"{self.path}: no labels (array 'y' or 'labels')")
                y = np.asarray(z[ykey], np.float64).ravel()
            X = sp.load_npz(self.path).tocsr()
        except (OSError, ValueError, KeyError) as exc:
            raise MpisgdError(f"{self.path}: not a readable scipy .npz ({exc})") from None
        if X.shape[0] != len(y):
            raise MpisgdError(f"{self.path}: {X.shape[0]} rows but {len(y)} labels")
        if n_features is not None and X.shape[1] > n_features:
            raise MpisgdError(f"{self.path}: {X.shape[1]} columns, beyond n_features {n_features}")
        X.sort_indices()
        self.X, self.y = X, y
        self.n_features = n_features if n_features is not None else X.shape[1]
        self.size = X.shape[0]

    def counts(self, start=0, stop=None):
        return None  # the rows are in memory: read once, never parsed

    def chunks(self, start=0, stop=None):
        stop = self.size if stop is None else min(stop, self.size)
        for r0 in range(start, stop, self.block_rows):
            r1 = min(stop, r0 + self.block_rows)
            a, b = self.X.indptr[r0], self.X.indptr[r1]
            indptr = self.X.indptr[r0 : r1 + 1].astype(np.int64) - a
            data = self.X.data[a:b].astype(np.float64)
            y = self.y[r0:r1]
            bad = ~np.isfinite(data)
            if bad.any():
                row = r0 + int(np.searchsorted(indptr, np.flatnonzero(bad)[0], side="right")) - 1
                raise MpisgdError(f"{self.path}: row {row}: NaN or infinite value")
            st = libsvm.ParseStats()
            st.rows, st.nnz, st.lines = r1 - r0, b - a, r1 - r0
            if self.binary:
                ok = (y == -1) | (y == 0) | (y == 1)
                if not ok.all():
                    row = r0 + int(np.flatnonzero(~ok)[0])
                    raise MpisgdError(f"{self.path}: row {row}: "
                                      f"{libsvm._MESSAGES[libsvm.E_CLASS]}; {libsvm.BINARY_WHY}")
                neg, zero = np.flatnonzero(y == -1), np.flatnonzero(y == 0)
                st.first_neg = int(neg[0]) + 1 if len(neg) else 0
                st.first_zero = int(zero[0]) + 1 if len(zero) else 0
            if b > a:
                st.min_index = int(self.X.indices[a:b].min())
                st.max_index = int(self.X.indices[a:b].max())
            yield indptr, self.X.indices[a:b].astype(np.int64), data, y, st


def open_source(path, fmt="auto", zero_based="auto", n_features=None, binary=True,
                hash_bits=0):
    path = str(path)
    if not os.path.exists(path):
        raise MpisgdError(f"{path}: input not found")
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt == "npz":
        return NpzSource(path, n_features, binary)
    if fmt == "vw":
        return VWSource(path, zero_based, n_features, binary, hash_bits)
    if fmt == "libsvm":
        return LibsvmSource(path, zero_based, n_features, binary)
    raise MpisgdError(f"format: expected auto, libsvm, vw or npz, got {fmt!r}")


def load_text(path, n_features=None, zero_based="auto", hash_bits=0, stop=None):
    """``(X, y)`` of a LIBSVM/svmlight or Vowpal Wabbit text file (plain or
    compressed; VW by its name, ``.vw[.gz|.bz2|.xz]``, as ``prep`` decides),
    read into memory as ``libsvm.load_svmlight`` reads LIBSVM: X CSR float64,
    y the labels as written. VW feature names are hashed into 2^``hash_bits``
    features as ``prep --vw-hash-bits`` hashes them (0: integer indices).
    ``stop``: only the lines that begin before this byte of the text (a
    quick look at a file's first lines). Errors name ``file:line``."""
    path = str(path)
    if not os.path.exists(path):
        raise MpisgdError(f"{path}: no such file")
    fmt = detect_format(path)
    if fmt == "npz":
        raise MpisgdError(f"{path}: a .npz is read by `mpisgd prep` only: convert it to shards")
    if fmt == "libsvm" and stop is None:
        return libsvm.load_svmlight(path, n_features, zero_based)
    if fmt == "libsvm":
        source = LibsvmSource(path, zero_based, n_features, binary=False)
    else:
        source = VWSource(path, zero_based, n_features, binary=False, hash_bits=hash_bits)
        if hash_bits and n_features is None:
            n_features = 1 << int(hash_bits)
    return libsvm.assemble(path, source.chunks(0, stop), source.zero_based, n_features)
