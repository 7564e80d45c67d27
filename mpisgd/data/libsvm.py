"""LIBSVM / svmlight text: a numba parser over raw bytes.

Line grammar: ``label [qid:N] idx:val idx:val ... [# comment]``. Blank and
comment-only lines are skipped (they are not rows). ``\\r`` counts as white
space, so CRLF files parse like LF files. Within a row, unsorted indices are
sorted (with their values); a repeated index is an error. Values must be
finite decimal numbers; they are correctly rounded (Clinger's fast path for
up to 15 significant digits and exponents within ±22, else Python's
``float``). Labels are any finite number; the binary check (±1, or {0, 1}
mapped explicitly) happens in the caller.

Indices: ``zero_based`` True, False or "auto". In "auto" mode the parser
keeps raw indices and the file is one-based unless some index is 0 (the rule
of scikit-learn's ``load_svmlight_file``); the decision is in
``ParseStats.zero_based``.
"""

import math

import numba
import numpy as np
from numba import njit

from mpisgd.data import textio
from mpisgd.errors import MpisgdError

# Error codes of the numba parser and their messages.
E_LABEL, E_INDEX, E_COLON, E_VALUE, E_NONFINITE = 1, 2, 3, 4, 5
E_NEGATIVE, E_ZERO, E_DUPLICATE, E_BEYOND, E_CLASS = 6, 7, 8, 9, 10
_MESSAGES = {
    E_LABEL: "unparseable label",
    E_INDEX: "non-numeric feature index",
    E_COLON: "missing ':' in feature (expected idx:val)",
    E_VALUE: "non-numeric feature value",
    E_NONFINITE: "NaN or infinite value",
    E_NEGATIVE: "negative feature index",
    E_ZERO: "feature index 0 in a one-based file (use --zero-based)",
    E_DUPLICATE: "duplicate feature index in one row",
    E_BEYOND: "feature index beyond n_features",
    E_CLASS: "label is not a binary class (expected -1/+1, or 0/1)",
}
# Why a binary task refuses other labels (``prep``: shards hold one binary task).
BINARY_WHY = ("shards hold one binary task, as `mpisgd train` learns one linear model: train "
              "3 or more classes one-versus-rest in one process with `mpisgd fit`, or give "
              "--task regression for real-valued labels")

# Slots of the ``stats`` array the parser fills.
S_ROWS, S_NNZ, S_LINES, S_MIN, S_MAX, S_ERR, S_ERR_LINE, S_ERR_POS = range(8)
S_EQ_LINE, S_SORTED, S_QID, S_FIRST_NEG, S_FIRST_ZERO = 8, 9, 10, 11, 12
N_STATS = 13

_POW10 = np.array([10.0**k for k in range(23)])
_TWO53 = 1 << 53


@njit(cache=True)
def _is_space(c):
    return c == 32 or c == 9 or c == 13  # ' ', '\t', '\r'


@njit(cache=True)
def _is_end(c):
    return c == 32 or c == 9 or c == 13 or c == 10 or c == 35  # space or '\n' or '#'


@njit(cache=True)
def _line_start(buf, i, n):
    """Past the leading spaces of the line at buf[i]: (position, blank); a
    blank or comment line is skipped whole (position: the next line's start)."""
    while i < n and _is_space(buf[i]):
        i += 1
    if i >= n or buf[i] == 10 or buf[i] == 35:
        while i < n and buf[i] != 10:
            i += 1
        return i + 1, True
    return i, False


@njit(cache=True)
def _is_qid(buf, i, n):
    """A ``qid:`` field starts at buf[i]."""
    return i + 3 < n and buf[i] == 113 and buf[i + 1] == 105 and buf[i + 2] == 100 and buf[i + 3] == 58


@njit(cache=True)
def _read_index(buf, i, n):
    """The decimal digits at buf[i:]: (value, capped past 2^40; digits; position after)."""
    idx = np.int64(0)
    nd = 0
    while i < n and 48 <= buf[i] <= 57:
        if idx < (np.int64(1) << 40):
            idx = idx * 10 + (buf[i] - 48)
        nd += 1
        i += 1
    return idx, nd, i


@njit(cache=True)
def _slow_float(buf, i, j):
    with numba.objmode(v="float64"):
        try:
            v = float(bytes(buf[i:j]))
        except ValueError:
            v = np.nan
    return v


@njit(cache=True)
def _exponent(buf, i, n, most):
    """The exponent after an 'e' at buf[i − 1]: a sign and at most ``most``
    digits, its size capped near 10⁵. Returns (exponent, digits read, end)."""
    neg = False
    if i < n and (buf[i] == 45 or buf[i] == 43):  # '-' '+'
        neg = buf[i] == 45
        i += 1
    e = 0
    k = i
    while i < n and 48 <= buf[i] <= 57 and i - k < most:
        if e < 100000:
            e = e * 10 + (buf[i] - 48)
        i += 1
    return (-e if neg else e), i - k, i


@njit(cache=True)
def _parse_number(buf, i, n, pow10):
    """Parse a decimal number at ``buf[i:]``.

    Returns (value, end, code): code 0 ok, E_VALUE not a number, E_NONFINITE
    nan/inf or overflow. ``end`` is the first byte after the token."""
    start = i
    neg = False
    if i < n and (buf[i] == 45 or buf[i] == 43):  # '-' '+'
        neg = buf[i] == 45
        i += 1
    # Fast path: at most 18 digits in all (mant exact in int64), exponent of
    # at most 3 digits, within Clinger's range; else the careful path below.
    j = i
    mant = 0
    while j < n and 48 <= buf[j] <= 57:
        mant = mant * 10 + (buf[j] - 48)
        j += 1
    nd = j - i
    exp10 = 0
    if j < n and buf[j] == 46:  # '.'
        j += 1
        f = j
        while j < n and 48 <= buf[j] <= 57:
            mant = mant * 10 + (buf[j] - 48)
            j += 1
        exp10 = f - j
        nd += j - f
    if 0 < nd <= 18:
        if j < n and (buf[j] == 101 or buf[j] == 69):  # 'e' 'E'
            e, ed, j = _exponent(buf, j + 1, n, 3)
            exp10 = exp10 + e if ed else 99  # no exponent digits: the careful path reports it
        if (j >= n or _is_end(buf[j])) and mant < _TWO53 and -22 <= exp10 <= 22:
            v = float(mant)
            v = v * pow10[exp10] if exp10 >= 0 else v / pow10[-exp10]
            return (-v if neg else v), j, 0
    mant = 0
    digits = 0  # significant digits kept in mant (at most 18: fits int64)
    dropped = 0  # integer digits beyond those (exponent adjustment)
    lost = False  # fraction digits beyond those
    exp10 = 0
    seen = False
    while i < n and 48 <= buf[i] <= 57:
        seen = True
        if digits < 18:
            if mant != 0 or buf[i] != 48:
                digits += 1
            mant = mant * 10 + (buf[i] - 48)
        else:
            dropped += 1
        i += 1
    if i < n and buf[i] == 46:  # '.'
        i += 1
        while i < n and 48 <= buf[i] <= 57:
            seen = True
            if digits < 18:
                if mant != 0 or buf[i] != 48:
                    digits += 1
                mant = mant * 10 + (buf[i] - 48)
                exp10 -= 1
            else:
                lost = True
            i += 1
    if not seen:
        while i < n and not _is_end(buf[i]):
            i += 1
        k = start + 1 if (start < n and (neg or buf[start] == 43)) else start
        low = (buf[k] | 32) if k < n else 0
        if low == 110 or low == 105:  # 'n'an, 'i'nf
            return 0.0, i, E_NONFINITE
        return 0.0, i, E_VALUE
    if i < n and (buf[i] == 101 or buf[i] == 69):  # 'e' 'E'
        e, ed, i = _exponent(buf, i + 1, n, n)
        if ed == 0:
            return 0.0, i, E_VALUE
        exp10 += e
    if i < n and not _is_end(buf[i]):
        while i < n and not _is_end(buf[i]):
            i += 1
        return 0.0, i, E_VALUE
    exp10 += dropped
    if mant == 0:
        v = 0.0
    elif dropped == 0 and not lost and mant < _TWO53 and -22 <= exp10 <= 22:
        # Clinger's fast path: one correctly rounded operation.
        if exp10 >= 0:
            v = float(mant) * pow10[exp10]
        else:
            v = float(mant) / pow10[-exp10]
    else:
        v = _slow_float(buf, start, i)
        if math.isnan(v):
            return 0.0, i, E_VALUE
        neg = False
    if neg:
        v = -v
    if math.isinf(v):
        return 0.0, i, E_NONFINITE
    return v, i, 0


@njit(cache=True, nogil=True)
def count_lines_colons(buf, n):
    """(newlines, colons) in ``buf[:n]``: capacity bounds for rows and entries."""
    lines = 0
    colons = 0
    for i in range(n):
        c = buf[i]
        lines += c == 10
        colons += c == 58
    return lines, colons


@njit(cache=True, nogil=True)
def parse_chunk(buf, n, index_base, max_raw, binary, indptr, indices, data, labels, stats,
                pow10):
    """Parse whole lines in ``buf[:n]`` into preallocated CSR arrays.

    ``index_base``: -1 auto (raw indices kept), 0 zero-based, 1 one-based
    (raw − 1 stored). ``max_raw``: largest raw index allowed (-1: no bound);
    in auto mode the first line holding raw index == max_raw is recorded,
    since it is legal only if the file turns out one-based. ``binary``:
    labels must be -1, 0 or +1 (the first lines of -1 and of 0 are recorded,
    so the caller can reject a file that mixes them). Capacities:
    rows ≤ newlines + 1, nnz ≤ colons. On error, stops and records the
    code, the 1-based line within the chunk and the byte offset."""
    i = 0
    row = 0
    nnz = 0
    line = 0
    mn = np.int64(1) << 62
    mx = np.int64(-1)
    indptr[0] = 0
    while i < n:
        line += 1
        i, blank = _line_start(buf, i, n)
        if blank:
            continue
        # Label.
        lab = i
        y, i, code = _parse_number(buf, i, n, pow10)
        if code != 0:
            stats[S_ERR] = E_LABEL
            stats[S_ERR_LINE] = line
            stats[S_ERR_POS] = lab
            break
        if binary:
            if y == -1.0:
                if stats[S_FIRST_NEG] == 0:
                    stats[S_FIRST_NEG] = line
            elif y == 0.0:
                if stats[S_FIRST_ZERO] == 0:
                    stats[S_FIRST_ZERO] = line
            elif y != 1.0:
                stats[S_ERR] = E_CLASS
                stats[S_ERR_LINE] = line
                stats[S_ERR_POS] = lab
                break
        row_start = nnz
        err = 0
        sorted_row = True
        prev = np.int64(-1)
        while True:
            while i < n and _is_space(buf[i]):
                i += 1
            if i >= n or buf[i] == 10 or buf[i] == 35:
                break
            tok = i
            if _is_qid(buf, i, n):
                i += 4  # qid:N, kept out of the features
                while i < n and not _is_end(buf[i]):
                    i += 1
                stats[S_QID] += 1
                continue
            neg = False
            if buf[i] == 45:
                neg = True
                i += 1
            idx, nd, i = _read_index(buf, i, n)
            if i < n and buf[i] == 58 and nd == 0:
                err = E_INDEX
            elif i >= n or buf[i] != 58:
                while i < n and not _is_end(buf[i]) and buf[i] != 58:
                    i += 1
                if i < n and buf[i] == 58:
                    err = E_INDEX
                else:
                    err = E_COLON
            elif neg:
                err = E_NEGATIVE
            if err != 0:
                stats[S_ERR_POS] = tok
                break
            i += 1  # ':'
            v, i, code = _parse_number(buf, i, n, pow10)
            if code != 0:
                err = code
                stats[S_ERR_POS] = tok
                break
            if index_base == 1:
                if idx == 0:
                    err = E_ZERO
                    stats[S_ERR_POS] = tok
                    break
            if (max_raw >= 0 and idx > max_raw) or idx > 2147483647 + (index_base == 1):
                err = E_BEYOND
                stats[S_ERR_POS] = tok
                break
            if index_base == -1 and idx == max_raw and stats[S_EQ_LINE] == 0:
                stats[S_EQ_LINE] = line
            if idx <= prev:
                sorted_row = False
            prev = idx
            if idx < mn:
                mn = idx
            if idx > mx:
                mx = idx
            indices[nnz] = idx - 1 if index_base == 1 else idx
            data[nnz] = v
            nnz += 1
        if err != 0:
            stats[S_ERR] = err
            stats[S_ERR_LINE] = line
            break
        if not sorted_row:
            # Insertion sort of the row's (index, value) pairs, then reject repeats.
            for a in range(row_start + 1, nnz):
                ki = indices[a]
                kv = data[a]
                b = a - 1
                while b >= row_start and indices[b] > ki:
                    indices[b + 1] = indices[b]
                    data[b + 1] = data[b]
                    b -= 1
                indices[b + 1] = ki
                data[b + 1] = kv
            stats[S_SORTED] += 1
            for a in range(row_start + 1, nnz):
                if indices[a] == indices[a - 1]:
                    err = E_DUPLICATE
            if err != 0:
                stats[S_ERR] = err
                stats[S_ERR_LINE] = line
                stats[S_ERR_POS] = i
                break
        labels[row] = y
        row += 1
        indptr[row] = nnz
        # Skip a comment to the end of the line.
        while i < n and buf[i] != 10:
            i += 1
        i += 1
    stats[S_ROWS] = row
    stats[S_NNZ] = nnz
    stats[S_LINES] = line  # every line, blank or not, counts once it starts
    stats[S_MIN] = mn
    stats[S_MAX] = mx


@njit(cache=True, nogil=True)
def count_chunk(buf, n, index_base, max_raw, binary, lens, stats, pow10):
    """Count the rows of ``buf[:n]`` as ``parse_chunk`` finds them in a good
    file, without parsing the values: each row's non-zeros into ``lens``
    (capacity: rows), and the stats a parse records (rows, nnz, lines,
    raw index range, the first lines of raw index max_raw and of labels -1
    and 0). Labels and indices are read as ``parse_chunk`` reads them; at the
    first label or index it would reject, counting stops with S_ERR set (a
    value, a duplicate index or the sorting of a row is not looked at)."""
    i = 0
    row = 0
    nnz = 0
    line = 0
    mn = np.int64(1) << 62
    mx = np.int64(-1)
    while i < n:
        line += 1
        i, blank = _line_start(buf, i, n)
        if blank:
            continue
        y, i, code = _parse_number(buf, i, n, pow10)
        if code != 0 or (binary and y != -1.0 and y != 0.0 and y != 1.0):
            stats[S_ERR] = E_LABEL
            break
        if binary and y == -1.0 and stats[S_FIRST_NEG] == 0:
            stats[S_FIRST_NEG] = line
        if binary and y == 0.0 and stats[S_FIRST_ZERO] == 0:
            stats[S_FIRST_ZERO] = line
        k = 0
        while True:
            while i < n and _is_space(buf[i]):
                i += 1
            if i >= n or buf[i] == 10 or buf[i] == 35:
                break
            if _is_qid(buf, i, n):
                i += 4
                while i < n and not _is_end(buf[i]):
                    i += 1
                continue
            idx, nd, i = _read_index(buf, i, n)
            if (nd == 0 or i >= n or buf[i] != 58 or (index_base == 1 and idx == 0)
                    or (max_raw >= 0 and idx > max_raw)
                    or idx > 2147483647 + (index_base == 1)):
                stats[S_ERR] = E_INDEX
                break
            if index_base == -1 and idx == max_raw and stats[S_EQ_LINE] == 0:
                stats[S_EQ_LINE] = line
            mn = min(mn, idx)
            mx = max(mx, idx)
            while i < n and not _is_end(buf[i]):  # the value, unread
                i += 1
            k += 1
        if stats[S_ERR] != 0:
            break
        lens[row] = k
        row += 1
        nnz += k
        while i < n and buf[i] != 10:  # a comment to the end of the line
            i += 1
        i += 1
    stats[S_ROWS] = row
    stats[S_NNZ] = nnz
    stats[S_LINES] = line
    stats[S_MIN] = mn
    stats[S_MAX] = mx


class ParseError(MpisgdError):
    """A bad line: ``path:line: what``. ``line`` counts from the start of the
    parsed range (the file, unless a parallel parse shifts it)."""

    def __init__(self, path, line, what):
        self.path, self.line, self.what = path, line, what
        super().__init__(f"{path}:{line}: {what}")


class ParseStats:
    """What a parse found: rows, nnz, lines, index range, rows sorted, qids,
    and (binary task) the first lines holding label -1 and label 0."""

    def __init__(self):
        self.rows = self.nnz = self.lines = self.sorted_rows = self.qids = 0
        self.min_index = 1 << 62
        self.max_index = -1
        self.eq_line = 0  # first line holding raw index == max_raw (auto mode)
        self.first_neg = self.first_zero = 0

    def merge(self, other):
        self.rows += other.rows
        self.nnz += other.nnz
        for name in ("eq_line", "first_neg", "first_zero"):
            if getattr(self, name) == 0 and getattr(other, name):
                setattr(self, name, self.lines + getattr(other, name))
        self.lines += other.lines
        self.sorted_rows += other.sorted_rows
        self.qids += other.qids
        self.min_index = min(self.min_index, other.min_index)
        self.max_index = max(self.max_index, other.max_index)


def _base_code(zero_based):
    if zero_based == "auto":
        return -1
    if zero_based is True or zero_based == "true" or zero_based == 1:
        return 0
    if zero_based is False or zero_based == "false" or zero_based == 0:
        return 1
    raise MpisgdError(f"zero_based: expected True, False or 'auto', got {zero_based!r}")


def _max_raw(n_features, base):
    if n_features is None:
        return -1
    if n_features < 1:
        raise MpisgdError(f"n_features: must be positive, got {n_features}")
    return n_features if base == -1 else n_features - 1 + base


def _token(buf, n, pos):
    end = pos
    while end < n and buf[end] not in (32, 9, 13, 10) and end - pos < 40:
        end += 1
    return bytes(buf[pos:end]).decode("utf-8", "replace")


def iter_parsed(path, zero_based="auto", n_features=None, start=0, stop=None,
                binary=False, chunk_bytes=textio.CHUNK_BYTES, out=None, transform=None):
    """Parse the lines of ``path`` in the byte range ``[start, stop)``.

    Yields ``(indptr, indices, data, y, stats)`` per chunk (fresh arrays;
    indices int32, raw in auto mode; stats lines count from the chunk's
    start). With ``out`` = (indptr, indices, data, y) arrays of capacity
    lines + 2 / lines + 1 rows and colons entries of the range, the chunks
    are parsed into them in place (and the yielded views hold global
    offsets). ``transform(buf, n, lines_before)`` may rewrite each chunk into
    LIBSVM lines first, line for line (the Vowpal Wabbit reader does). Raises
    ParseError naming ``path:line`` (line counted from ``start``) on the
    first bad line."""
    base = _base_code(zero_based)
    max_raw = _max_raw(n_features, base)
    lines = 0
    r0 = z0 = 0
    for buf, n in textio.iter_line_chunks(path, start, stop, chunk_bytes):
        if transform is not None:
            buf, n = transform(buf, n, lines)
        cap_rows, cap_nnz = count_lines_colons(buf, n)
        cap_rows += 1
        if out is None:
            indptr = np.empty(cap_rows + 1, np.int64)
            indices = np.empty(cap_nnz, np.int32)
            data = np.empty(cap_nnz, np.float64)
            y = np.empty(cap_rows, np.float64)
        else:
            indptr = out[0][r0 : r0 + cap_rows + 1]
            indices, data = out[1][z0 : z0 + cap_nnz], out[2][z0 : z0 + cap_nnz]
            y = out[3][r0 : r0 + cap_rows]
        st = np.zeros(N_STATS, np.int64)
        parse_chunk(buf, n, base, max_raw, binary, indptr, indices, data, y, st, _POW10)
        if st[S_ERR]:
            code = int(st[S_ERR])
            tok = _token(buf, n, int(st[S_ERR_POS]))
            detail = f" ({tok!r})" if code != E_DUPLICATE else ""
            if code == E_CLASS:
                detail += f"; {BINARY_WHY}"
            if code == E_BEYOND:
                detail += f"; n_features is {n_features}" if n_features else "; beyond int32"
            raise ParseError(path, lines + int(st[S_ERR_LINE]), _MESSAGES[code] + detail)
        stats = ParseStats()
        stats.rows, stats.nnz, stats.lines = int(st[S_ROWS]), int(st[S_NNZ]), int(st[S_LINES])
        stats.min_index, stats.max_index = int(st[S_MIN]), int(st[S_MAX])
        stats.sorted_rows, stats.qids = int(st[S_SORTED]), int(st[S_QID])
        stats.eq_line = int(st[S_EQ_LINE])
        stats.first_neg, stats.first_zero = int(st[S_FIRST_NEG]), int(st[S_FIRST_ZERO])
        lines += stats.lines
        r, z = stats.rows, stats.nnz
        if out is not None:
            indptr[: r + 1] += z0  # chunk offsets to global ones
            r0 += r
            z0 += z
        yield indptr[: r + 1], indices[:z], data[:z], y[:r], stats


def iter_counted(path, zero_based="auto", n_features=None, start=0, stop=None, binary=False,
                 chunk_bytes=textio.CHUNK_BYTES):
    """Count the rows of ``[start, stop)`` of a plain text file with
    ``count_chunk``: yields ``(lens, stats, ok)`` per chunk: each row's
    non-zeros, the ParseStats a parse of a good file finds, and whether the
    chunk was counted to its end (not: it holds a label or an index the parser
    rejects, and is the last one yielded)."""
    base = _base_code(zero_based)
    max_raw = _max_raw(n_features, base)
    for buf, n in textio.iter_line_chunks(path, start, stop, chunk_bytes):
        lens = np.empty(n // 2 + 1, np.int64)  # a row takes 2 bytes or more, but the last
        st = np.zeros(N_STATS, np.int64)
        count_chunk(buf, n, base, max_raw, binary, lens, st, _POW10)
        stats = ParseStats()
        stats.rows, stats.nnz, stats.lines = int(st[S_ROWS]), int(st[S_NNZ]), int(st[S_LINES])
        stats.min_index, stats.max_index = int(st[S_MIN]), int(st[S_MAX])
        stats.eq_line = int(st[S_EQ_LINE])
        stats.first_neg, stats.first_zero = int(st[S_FIRST_NEG]), int(st[S_FIRST_ZERO])
        yield lens[: stats.rows], stats, not st[S_ERR]
        if st[S_ERR]:
            return


def resolve_base(path, zero_based, n_features, stats):
    """Decide the index base and n_features after a parse; returns
    (shift, zero_based, n_features, explanation). ``shift`` is subtracted
    from the raw indices (1 for a one-based file parsed in auto mode)."""
    base = _base_code(zero_based)
    if base == -1:
        zb = stats.nnz > 0 and stats.min_index == 0
        shift = 0 if zb else 1
        why = (
            f"indices: {'zero' if zb else 'one'}-based (auto-detected: smallest index is "
            f"{stats.min_index if stats.nnz else 'none'})"
        )
        if zb and n_features is not None and stats.eq_line:
            raise ParseError(
                path, stats.eq_line, f"{_MESSAGES[E_BEYOND]} ({n_features!r} in a "
                f"zero-based file); n_features is {n_features}"
            )
    else:
        zb = base == 0
        shift = 0
        why = f"indices: {'zero' if zb else 'one'}-based (as requested)"
    top = stats.max_index - shift + 1 if stats.nnz else 0
    nf = top if n_features is None else n_features
    return shift, zb, nf, why


def load_svmlight(path, n_features=None, zero_based="auto"):
    """Read a LIBSVM/svmlight file (plain, .gz, .bz2 or .xz) into memory.

    Returns ``(X, y)``: X a float64 ``scipy.sparse.csr_matrix`` with int32
    indices and int64 indptr, y float64 (labels as written). Errors are
    MpisgdError naming ``file:line``."""
    path = str(path)
    total = ParseStats()
    if textio.compression_of(path) is None:
        # Plain text: count rows and entries first (a fast scan), then parse
        # every chunk in place into the final arrays (no second copy).
        lines = colons = 0
        for buf, n in textio.iter_line_chunks(path):
            a, b = count_lines_colons(buf, n)
            lines, colons = lines + a, colons + b
        out = (np.empty(lines + 2, np.int64), np.empty(colons, np.int32),
               np.empty(colons, np.float64), np.empty(lines + 1, np.float64))
        for *_, stats in iter_parsed(path, zero_based, n_features, out=out):
            total.merge(stats)
        shift, _, nf, _ = resolve_base(path, zero_based, n_features, total)
        _check_width(path, nf)
        indptr, indices = out[0][: total.rows + 1], out[1][: total.nnz]
        data, y = out[2][: total.nnz], out[3][: total.rows]
        if shift:
            indices -= shift
        indptr[0] = 0
        return _csr(indptr, indices, data, total.rows, nf), y
    return assemble(path, iter_parsed(path, zero_based, n_features), zero_based, n_features)


def assemble(path, chunks, zero_based="auto", n_features=None):
    """``(X, y)`` as ``load_svmlight`` returns them, from the ``(indptr,
    indices, data, y, stats)`` blocks of a parse (``iter_parsed``, or a
    ``sources`` reader's ``chunks``) with raw indices."""
    total = ParseStats()
    parts = []
    for indptr, indices, data, y, stats in chunks:
        parts.append((indptr, indices, data, y))
        total.merge(stats)
    shift, _, nf, _ = resolve_base(path, zero_based, n_features, total)
    _check_width(path, nf)
    indptr = np.empty(total.rows + 1, np.int64)
    indices = np.empty(total.nnz, np.int32)
    data = np.empty(total.nnz, np.float64)
    y = np.empty(total.rows, np.float64)
    indptr[0] = 0
    r = z = 0
    for p_indptr, p_indices, p_data, p_y in parts:
        k, m = len(p_y), len(p_data)
        indptr[r + 1 : r + k + 1] = p_indptr[1:] + z
        np.subtract(p_indices, shift, out=indices[z : z + m], casting="unsafe")
        data[z : z + m] = p_data
        y[r : r + k] = p_y
        r += k
        z += m
    return _csr(indptr, indices, data, total.rows, nf), y


def _check_width(path, nf):
    if nf >= 2**31:
        raise MpisgdError(f"{path}: {nf} features do not fit int32 indices")


def _csr(indptr, indices, data, rows, nf):
    import scipy.sparse as sp

    X = sp.csr_matrix((data, indices, indptr), shape=(rows, nf), copy=False)
    # scipy may downcast indptr; the contract is int64 indptr, int32 indices.
    X.indptr = indptr
    X.indices = indices
    return X


@njit(cache=True)
def _put_int(out, o, v):
    if v < 0:
        out[o] = 45
        o += 1
        v = -v
    k = o
    while True:
        out[o] = 48 + v % 10
        o += 1
        v //= 10
        if v == 0:
            break
    b = o - 1
    while k < b:  # digits came out reversed
        out[k], out[b] = out[b], out[k]
        k += 1
        b -= 1
    return o


@njit(cache=True)
def _put_float(out, o, v):
    """Integers as integers, else 7 significant digits: d.dddddde±XX."""
    if v == math.floor(v) and abs(v) < 1e15:
        return _put_int(out, o, np.int64(v))
    if v < 0:
        out[o] = 45
        o += 1
        v = -v
    e = int(math.floor(math.log10(v)))
    m = np.int64(round(v * 10.0 ** (6 - e)))
    if m >= 10000000:
        e += 1
        m = np.int64(round(v * 10.0 ** (6 - e)))
    elif m < 1000000:
        e -= 1
        m = np.int64(round(v * 10.0 ** (6 - e)))
    k = o
    o = _put_int(out, o + 1, m)  # 7 digits at o+1.., then move the first before '.'
    out[k] = out[k + 1]
    out[k + 1] = 46
    out[o] = 101  # 'e'
    o += 1
    out[o] = 45 if e < 0 else 43
    o += 1
    e = abs(e)
    if e < 10:
        out[o] = 48
        o += 1
    return _put_int(out, o, e)


@njit(cache=True)
def _format_rows(indptr, indices, data, y, r0, r1, base, out):
    o = 0
    for r in range(r0, r1):
        o = _put_float(out, o, y[r])
        for a in range(indptr[r], indptr[r + 1]):
            out[o] = 32
            o = _put_int(out, o + 1, np.int64(indices[a]) + base)
            out[o] = 58
            o = _put_float(out, o + 1, data[a])
        out[o] = 10
        o += 1
    return o


def write_svmlight(path, X, y, zero_based=False, rows_per_batch=65536):
    """Write CSR rows as LIBSVM text (values with 7 significant digits),
    atomically. Used by the benchmarks and tests to make large inputs fast."""
    from mpisgd.atomic import atomic_path

    X = X.tocsr()
    indptr = np.asarray(X.indptr, np.int64)
    y = np.asarray(y, np.float64)
    base = 0 if zero_based else 1
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        for r0 in range(0, X.shape[0], rows_per_batch):
            r1 = min(X.shape[0], r0 + rows_per_batch)
            out = np.empty(24 * (r1 - r0) + 36 * int(indptr[r1] - indptr[r0]), np.uint8)
            n = _format_rows(indptr, X.indices, X.data, y, r0, r1, base, out)
            f.write(out[:n].tobytes())
