"""Convert a source into K shards (the work of ``mpisgd prep``), serial or MPI.

Each rank takes its own part of the source (``block_range`` of its size; text
parts cut at line starts). Plain LIBSVM text without a shuffle goes in one
parse:

1. Count: each rank counts its rows and their non-zeros (reading labels and
   indices, not the values: ``libsvm.iter_counted``), keeping the row lengths
   in a hidden temporary directory; the ranks reduce the counts, the index
   range and the label classes, and decide from them what the parse will
   decide (index base, n_features, label mapping, split sizes). If the counts
   predict a good input, the ranks announce their rows and non-zeros per
   shard, each shard's owner allocates its datasets, and every rank opens its
   parts of every shard (``_InPlace``, ``ShardPart``).
2. Parse and check everything, each block of rows going straight to its place
   in the shards as parsed: routed (below), grouped by shard, written by the
   rank that parsed it, each byte once, on a thread of that rank while it
   parses the next block (the text itself is read ahead on another:
   ``textio``). The parse then decides for real; a
   bad line anywhere (or a count that the parse contradicts) aborts every
   shard, which were written under temporary names.

Other inputs (compressed or VW text, .npz, where counting would cost a second
decompression or parse) and shuffled conversions parse first, writing each
rank's rows as parsed to a binary piece in the temporary directory, so that no
shard is written before the input is known to be good; then the shards are
written from the pieces: in place from each rank's own piece as above, or,
with a shuffle, by each shard's owner reading every piece and writing the
shard ordered by position.

Routing: global row i goes to the test split iff hash(seed, i) <
test_fraction; its position j within its split, shuffled (if asked) by a
seeded bijection p = π(j) of [0, M), goes to shard p mod K at p div K
(round-robin) or to the contiguous block holding p. Without a shuffle, a
rank's rows of a shard are a contiguous range of it.

Every row's destination depends only on its global index, so the shards
hold the same rows in the same order for any number of ranks and either way
of writing them. On any error the temporary directory goes (and the output
directory, if prep made it). Memory: two text chunks and one block of rows
being written per rank, plus one shard when shuffling.
"""

import json
import math
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from mpisgd.atomic import atomic_path, write_error
from mpisgd.data import libsvm
from mpisgd.data.partition import block_range
from mpisgd.data.shard import DEFAULT_COMPRESSION, ShardPart, ShardWriter
from mpisgd.data.shardset import RUN_ATTR, new_run_id
from mpisgd.data.synthetic import _key, _mix, _unit
from mpisgd.errors import MpisgdError

TAG_SPLIT, TAG_SHUFFLE = 11, 12
FIELDS = (("lens", np.int64), ("indices", np.int32), ("data", np.float64),
          ("y", np.float64), ("pos", np.int64))
PARSED = FIELDS[:4]  # a rank's rows as parsed (pass 1)
BLOCK_ROWS = 1 << 16  # rows per block read back from a binary piece


@njit(cache=True)
def _test_mask(seed, g0, rows, fraction):
    """Row g0 + r is a test row iff its uniform hash < fraction."""
    out = np.empty(rows, np.bool_)
    for r in range(rows):
        out[r] = _unit(_key(seed, TAG_SPLIT, g0 + r, 0)) < fraction
    return out


@njit(cache=True)
def _permute(js, M, seed):
    """π(j): a seeded bijection of [0, M): a 4-round Feistel network on the
    smallest even number of bits covering M, cycle-walked back into range."""
    bits = 2
    while (np.int64(1) << bits) < M:
        bits += 2
    half = bits // 2
    mask = np.uint64((np.int64(1) << half) - 1)
    out = np.empty(len(js), np.int64)
    for a in range(len(js)):
        x = np.uint64(js[a])
        while True:
            left = x >> np.uint64(half)
            right = x & mask
            for k in range(4):
                f = _mix(right ^ _key(seed, TAG_SHUFFLE, k, 0)) & mask
                left, right = right, left ^ f
            x = (left << np.uint64(half)) | right
            if np.int64(x) < M:
                break
        out[a] = np.int64(x)
    return out


@njit(cache=True)
def _l2_normalize(indptr, data):
    """Scale each nonzero row to unit L2 norm (empty or zero rows stay)."""
    for r in range(len(indptr) - 1):
        s = 0.0
        for a in range(indptr[r], indptr[r + 1]):
            s += data[a] * data[a]
        if s > 0.0:
            inv = 1.0 / math.sqrt(s)
            for a in range(indptr[r], indptr[r + 1]):
                data[a] *= inv


def _gather(indptr, order):
    """Entry positions and row lengths of rows ``order`` of a CSR block."""
    lens = indptr[order + 1] - indptr[order]
    starts = np.zeros(len(order) + 1, np.int64)
    np.cumsum(lens, out=starts[1:])
    take = np.repeat(indptr[order] - starts[:-1], lens) + np.arange(starts[-1])
    return take, lens


@njit(cache=True, nogil=True)
def _group(indptr, indices, data, y, key, n_keys, shift):
    """The rows of a CSR block grouped by ``key`` (stable), in one copy, with
    ``shift`` subtracted from the indices: (indptr, indices, data, y, order,
    row_starts, entry_starts), where rows row_starts[k]..row_starts[k + 1] of
    the output (entries entry_starts[k]..) are the block's rows order[...] of key k."""
    m = len(key)
    row_starts = np.zeros(n_keys + 1, np.int64)
    entry_starts = np.zeros(n_keys + 1, np.int64)
    for r in range(m):
        row_starts[key[r] + 1] += 1
        entry_starts[key[r] + 1] += indptr[r + 1] - indptr[r]
    for k in range(n_keys):
        row_starts[k + 1] += row_starts[k]
        entry_starts[k + 1] += entry_starts[k]
    nnz = entry_starts[n_keys]
    out_indptr = np.empty(m + 1, np.int64)
    out_indices = np.empty(nnz, np.int32)
    out_data = np.empty(nnz, np.float64)
    out_y = np.empty(m, np.float64)
    order = np.empty(m, np.int64)
    next_row = row_starts[:-1].copy()
    next_entry = entry_starts[:-1].copy()
    out_indptr[0] = 0
    for r in range(m):
        k = key[r]
        q = next_row[k]
        o = next_entry[k]
        order[q] = r
        out_y[q] = y[r]
        for a in range(indptr[r], indptr[r + 1]):
            out_indices[o] = indices[a] - shift
            out_data[o] = data[a]
            o += 1
        out_indptr[q + 1] = o  # a key's rows and entries are both consecutive
        next_row[k] = q + 1
        next_entry[k] = o
    return out_indptr, out_indices, out_data, out_y, order, row_starts, entry_starts


class _Comm:
    """The few collectives prep needs, or their serial identities."""

    def __init__(self, comm):
        self.comm = comm
        self.size = 1 if comm is None else comm.Get_size()
        self.rank = 0 if comm is None else comm.Get_rank()

    def allgather(self, obj):
        return [obj] if self.comm is None else self.comm.allgather(obj)

    def barrier(self):
        if self.comm is not None:
            self.comm.Barrier()


def _first_line(values, offsets):
    """Smallest global line among per-rank local lines (0 = none)."""
    lines = [off + v for v, off in zip(values, offsets) if v]
    return min(lines) if lines else 0


def convert(source, out_dir, name, n_shards=1, layout="round-robin", shuffle_seed=None,
            normalize=False, test_fraction=0.0, test_shards=1, split_seed=0, split_name=None,
            n_features=None, binary=True, dtype="float64", compression=DEFAULT_COMPRESSION,
            command="", comm=None, log=print):
    """Convert ``source`` into shards under ``out_dir``; returns the manifest dict
    (also written as ``<out_dir>/<name>[-<split_name>].json``). Collective over ``comm``."""
    c = _Comm(comm)
    run = c.allgather(new_run_id() if c.rank == 0 else None)[0]  # rank 0's, on every rank
    if n_shards < 1 or test_shards < 1:
        raise MpisgdError(f"shards: need at least one, got {n_shards} and {test_shards}")
    if layout not in ("round-robin", "contiguous"):
        raise MpisgdError(f"layout: expected round-robin or contiguous, got {layout!r}")
    if not 0.0 <= test_fraction < 1.0:
        raise MpisgdError(f"test_fraction: must lie in [0, 1), got {test_fraction}")
    say = log if c.rank == 0 else (lambda *a, **k: None)
    size = source.size if c.size > 1 else None
    start, stop = (0, None) if size is None else block_range(size, c.size, c.rank)

    tmp = os.path.join(out_dir, f".{name}.prep-tmp")
    made_out = False
    if c.rank == 0:
        made_out = not os.path.isdir(out_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
    c.barrier()
    done = False
    try:
        manifest = _convert(source, out_dir, name, tmp, c, say, start, stop, n_shards, layout,
                            shuffle_seed, normalize, test_fraction, test_shards, split_seed,
                            split_name, n_features, binary, dtype, compression, command, run)
        done = True
    finally:
        if c.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            if made_out and not done:
                try:
                    os.rmdir(out_dir)  # only if empty
                except OSError:
                    pass
    return manifest


def _convert(source, out_dir, name, tmp, c, say, start, stop, n_shards, layout, shuffle_seed,
             normalize, test_fraction, test_shards, split_seed, split_name, n_features, binary,
             dtype, compression, command, run):
    piece = os.path.join(tmp, f"parsed.{c.rank:06d}")  # this rank's binary piece (its fields' prefix)
    counts = source.counts(start, stop) if shuffle_seed is None else None
    writer = counted = None
    if counts is not None:
        writer, counted = _count(source, counts, piece, c, n_shards, layout, normalize,
                                 test_fraction, test_shards, split_seed, split_name, n_features,
                                 binary, dtype, compression, command, run, out_dir, name)
    try:
        return _parse_and_write(source, out_dir, name, c, say, start, stop, piece, counted,
                                writer, n_shards, layout, shuffle_seed, normalize, test_fraction,
                                test_shards, split_seed, split_name, n_features, binary, dtype,
                                compression, command, run)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise


def _count(source, counts, piece, c, n_shards, layout, normalize, test_fraction, test_shards,
           split_seed, split_name, n_features, binary, dtype, compression, command, run, out_dir,
           name):
    """The count pass: count this rank's rows (their lengths into the piece's
    ``lens`` field) and, if the counts of every rank predict a good input,
    allocate the shards. Returns (the _InPlace writer of this rank's rows,
    decided as the full parse will decide, or None: the parse finds the
    error; every rank's ``_fields`` as counted). Collective."""
    stats = libsvm.ParseStats()
    ok, err = True, None
    try:
        with open(f"{piece}.lens", "wb") as f:
            for lens, st, ok in counts:
                stats.merge(st)
                f.write(lens.data)  # a full disk: ENOSPC, named
    except MpisgdError:  # e.g. an unreadable input: the parse reports it
        ok = False
    except OSError as exc:  # e.g. a full disk
        err = str(write_error(f"{piece}.lens", exc))
    reports = c.allgather((err, ok) + _fields(stats))
    errors = [r[0] for r in reports if r[0]]
    if errors:
        raise MpisgdError(errors[0])
    every = [(None,) + r[2:] for r in reports]  # as the parse reports them
    counted = [e[1:] for e in every]
    if not all(r[1] for r in reports):
        return None, counted
    total = _total(every)
    try:
        shift, zero_based, nf, _, mapping = _decide(source, n_features, binary, total)
        row0 = sum(e[2] for e in every[: c.rank])
        splits, j0 = _splits(c, source.path, every, row0, n_shards, test_fraction, test_shards,
                             split_seed, split_name)
    except MpisgdError:
        return None, counted
    attrs = _attrs(source, mapping, command, run, zero_based, normalize, None, layout,
                   test_fraction, split_seed)
    return _InPlace(c, piece, row0, j0, splits, shift, mapping, layout, test_fraction,
                    split_seed, out_dir, name, nf, dtype, compression, attrs), counted


def _fields(stats):
    """What a rank reports of its part: lines, rows, nnz, index range, the first
    lines of raw index max_raw and of labels -1 and 0, rows sorted, qids."""
    return (stats.lines, stats.rows, stats.nnz, stats.min_index, stats.max_index,
            stats.eq_line, stats.first_neg, stats.first_zero, stats.sorted_rows, stats.qids)


def _total(every):
    """The ParseStats of the whole input from every rank's (error, *_fields)."""
    offsets = np.concatenate([[0], np.cumsum([e[1] for e in every])[:-1]]).tolist()
    total = libsvm.ParseStats()
    total.lines = sum(e[1] for e in every)
    total.rows = sum(e[2] for e in every)
    total.nnz = sum(e[3] for e in every)
    total.min_index = min(e[4] for e in every)
    total.max_index = max(e[5] for e in every)
    total.eq_line = _first_line([e[6] for e in every], offsets)
    total.first_neg = _first_line([e[7] for e in every], offsets)
    total.first_zero = _first_line([e[8] for e in every], offsets)
    total.sorted_rows = sum(e[9] for e in every)
    total.qids = sum(e[10] for e in every)
    return total


def _decide(source, n_features, binary, total):
    """(shift, zero_based, n_features, why, label mapping) of the input, or
    MpisgdError naming what is wrong with it as a whole."""
    path = source.path
    if total.rows == 0:
        raise MpisgdError(f"{path}: no examples")
    shift, zero_based, nf, why = libsvm.resolve_base(path, source.zero_based, n_features, total)
    if getattr(source, "hash_bits", 0) and n_features is None:
        nf = 1 << source.hash_bits
    if nf >= 2**31:
        raise MpisgdError(f"{path}: {nf} features do not fit int32 indices")
    mapping = {}
    if binary:
        if total.first_neg and total.first_zero:
            line = max(total.first_neg, total.first_zero)
            raise MpisgdError(
                f"{path}:{line}: more than two classes for a binary task (labels -1, 0 and 1 "
                f"all occur; first -1 on line {total.first_neg}, first 0 on line "
                f"{total.first_zero}); {libsvm.BINARY_WHY}"
            )
        mapping = {"0": -1, "1": 1} if total.first_zero else {"-1": -1, "1": 1}
    return shift, zero_based, nf, why, mapping


def _splits(c, path, every, row0, n_shards, test_fraction, test_shards, split_seed, split_name):
    """The splits [(name, rows, shards)] (the test split is a hash of the global
    row index) and this rank's first position in each. Collective."""
    rows = every[c.rank][2]
    test_rows_mine = int(_test_mask(split_seed, row0, rows, test_fraction).sum()) \
        if test_fraction > 0 else 0
    tests = c.allgather(test_rows_mine)
    n_test = sum(tests)
    n_train = sum(e[2] for e in every) - n_test
    splits = [("train" if test_fraction > 0 else split_name, n_train, n_shards)]
    if test_fraction > 0:
        splits.append(("test", n_test, test_shards))
    for sname, m, k in splits:
        if m < k:
            raise MpisgdError(f"{path}: {m} {sname or ''} rows cannot fill {k} shards")
    j0 = [row0 - sum(tests[: c.rank]), sum(tests[: c.rank])][: len(splits)]
    return splits, j0


def _attrs(source, mapping, command, run, zero_based, normalize, shuffle_seed, layout,
           test_fraction, split_seed):
    """The shards' provenance attributes (``run``: the id of this prep run)."""
    return {
        "source": os.path.abspath(source.path), "label_mapping": mapping, "command": command,
        RUN_ATTR: run, "vw_hash_bits": int(getattr(source, "hash_bits", 0)),
        "zero_based_input": bool(zero_based), "normalized": bool(normalize),
        "shuffle_seed": -1 if shuffle_seed is None else int(shuffle_seed),
        "layout": layout, "test_fraction": float(test_fraction),
        "split_seed": int(split_seed),
    }


def _parse_and_write(source, out_dir, name, c, say, start, stop, piece, counted, writer, n_shards,
                     layout, shuffle_seed, normalize, test_fraction, test_shards, split_seed,
                     split_name, n_features, binary, dtype, compression, command, run):
    path = source.path
    # The parse: check everything; the rows go to the shards (``writer``), or to
    # the binary piece (input not counted), or nowhere (counted, predicted bad).
    stats = libsvm.ParseStats()
    err = None
    try:
        _parse(source, start, stop, normalize, stats, writer,
               piece if counted is None else None)
    except libsvm.ParseError as exc:
        err = ("line", exc.line, exc.what)
    except MpisgdError as exc:
        err = ("other", 0, str(exc))
    every = c.allgather((err,) + _fields(stats))
    offsets = np.concatenate([[0], np.cumsum([e[1] for e in every])[:-1]]).tolist()
    for e, off in zip(every, offsets):
        if e[0] is not None:
            kind, line, what = e[0]
            if kind == "line":
                raise MpisgdError(f"{path}:{off + line}: {what}")
            raise MpisgdError(what)
    total = _total(every)
    shift, zero_based, nf, why, mapping = _decide(source, n_features, binary, total)
    row0 = sum(e[2] for e in every[: c.rank])
    splits, j0 = _splits(c, path, every, row0, n_shards, test_fraction, test_shards, split_seed,
                         split_name)
    # A good input that the count predicted bad, or counted otherwise (lines,
    # rows, nnz, index range, first lines of max_raw, -1, 0): a bug, not the input's.
    if counted is not None and (writer is None or
                                [e[1:9] for e in every] != [e[:8] for e in counted]):
        raise RuntimeError(f"prep: the count and the parse of {path} disagree")
    say(f"prep: {path} ({type(source).__name__[:-6].lower()}"
        f"{', ' + source.compression if source.compression else ''}): {total.rows} rows, "
        f"{total.nnz} non-zeros, {nf} features; {why}")
    if total.sorted_rows:
        say(f"prep: sorted the indices of {total.sorted_rows} rows")
    if total.qids:
        say(f"prep: ignored {total.qids} qid fields")
    if mapping.get("0") == -1:
        say("prep: labels {0, 1} mapped to {-1, +1}")

    attrs = _attrs(source, mapping, command, run, zero_based, normalize, shuffle_seed, layout,
                   test_fraction, split_seed)
    if writer is not None:  # the rows are written: publish the shards
        files = writer.close()
    elif shuffle_seed is None:  # each rank writes its piece's rows in place
        from_piece = _InPlace(c, piece, row0, j0, splits, shift, mapping, layout, test_fraction,
                              split_seed, out_dir, name, nf, dtype, compression, attrs)
        try:
            err = None
            try:
                for block in _read_parsed(piece):
                    from_piece.write(*block)
                from_piece.flush()
            except MpisgdError as exc:  # e.g. a full disk: every rank learns of it below
                err = str(exc)
            errors = [e for e in c.allgather(err) if e]
            if errors:
                raise MpisgdError(errors[0])
            files = from_piece.close()
        except BaseException:
            from_piece.abort()
            raise
    else:  # each shard's owner reads every piece
        jobs = [(s, k) for s in range(len(splits)) for k in range(splits[s][2])]
        lo, hi = block_range(len(jobs), c.size, c.rank)
        pieces = [os.path.join(os.path.dirname(piece), f"parsed.{q:06d}") for q in range(c.size)]
        files = _write_shuffled(pieces, jobs[lo:hi], splits, shift, mapping, shuffle_seed,
                                layout, test_fraction, split_seed, out_dir, name, nf, dtype,
                                compression, attrs)
    every_files = c.allgather(files)
    c.barrier()
    shards = {}
    for f in every_files:
        shards.update(f)
    manifest = {
        "format": "mpisgd-shards", "name": name, "n_features": nf, "source": os.path.abspath(path),
        "rows": total.rows, "nnz": total.nnz, "zero_based_input": bool(zero_based),
        "label_mapping": mapping, "command": command, RUN_ATTR: run,
        "splits": {(sname or "all"): {"rows": m, "shards": [os.path.basename(shards[(s, k)])
                                                              for k in range(K)]}
                   for s, (sname, m, K) in enumerate(splits)},
    }
    if c.rank == 0:
        mpath = os.path.join(out_dir, f"{name}{'-' + split_name if split_name else ''}.json")
        with atomic_path(mpath) as tmp, open(tmp, "w") as f:
            json.dump(manifest, f, indent=1, default=int)
        for s, (sname, m, K) in enumerate(splits):
            say(f"prep: wrote {K} shard(s), {m} rows{' (' + sname + ')' if sname else ''}: "
                f"{shards[(s, 0)]}{' ...' if K > 1 else ''}")
    return manifest


def _destinations(js, m, K, layout, shuffle_seed):
    """(shard, position in shard) of split positions ``js`` of a split of m rows."""
    p = _permute(js, m, shuffle_seed) if shuffle_seed is not None else js
    if layout == "round-robin":
        return p % K, p // K
    k = ((p + 1) * K - 1) // m  # largest k with ⌊m·k/K⌋ ≤ p
    return k, p - (m * k) // K


def _parse(source, start, stop, normalize, stats, writer, piece):
    """Parse the range once into ``stats``, handing the rows (normalized if
    asked) to ``writer`` and/or the binary piece ``piece.*`` (if not None)."""
    files = {field: open(f"{piece}.{field}", "wb") for field, _ in PARSED} if piece else {}
    try:
        for indptr, indices, data, y, st in source.chunks(start, stop):
            stats.merge(st)
            if normalize:
                _l2_normalize(indptr, data)
            if writer is not None:
                writer.write(indptr, indices, data, y)
            if files:
                try:
                    for (field, dt), arr in zip(PARSED, (np.diff(indptr), indices, data, y)):
                        files[field].write(np.ascontiguousarray(arr, dt).data)  # ENOSPC named
                except OSError as exc:  # e.g. a full disk
                    raise write_error(piece, exc) from None
        if writer is not None:
            writer.flush()
    finally:
        for f in files.values():
            f.close()


def _read_parsed(parsed, lens_only=False):
    """Yield (indptr, indices, data, y) blocks of BLOCK_ROWS rows of a binary
    piece (with ``lens_only``, the row lengths of each block only)."""
    files = {field: open(f"{parsed}.{field}", "rb") for field, _ in PARSED
             if field == "lens" or not lens_only}
    try:
        while True:
            lens = np.fromfile(files["lens"], np.int64, BLOCK_ROWS)
            if not len(lens):
                return
            if lens_only:
                yield lens
                continue
            indptr = np.zeros(len(lens) + 1, np.int64)
            np.cumsum(lens, out=indptr[1:])
            nnz = int(indptr[-1])
            yield (indptr, np.fromfile(files["indices"], np.int32, nnz),
                   np.fromfile(files["data"], np.float64, nnz),
                   np.fromfile(files["y"], np.float64, len(lens)))
    finally:
        for f in files.values():
            f.close()


class _Router:
    """(split, shard, position in shard) of consecutive global rows, block by
    block, from global row ``g`` on, whose positions in the splits are ``next_j``."""

    def __init__(self, splits, layout, shuffle_seed, test_fraction, split_seed, g=0,
                 next_j=None):
        self.splits, self.layout, self.shuffle_seed = splits, layout, shuffle_seed
        self.test_fraction, self.split_seed = test_fraction, split_seed
        self.g = g  # global row index of the next block's first row
        self.next_j = list(next_j or [0] * len(splits))  # each split's position of its next row

    def route(self, r):
        split = _test_mask(self.split_seed, self.g, r, self.test_fraction).astype(np.int64) \
            if self.test_fraction > 0 else np.zeros(r, np.int64)
        shard = np.empty(r, np.int64)
        pos = np.empty(r, np.int64)
        for s, (_, m, K) in enumerate(self.splits):
            rows = np.flatnonzero(split == s)
            js = self.next_j[s] + np.arange(len(rows), dtype=np.int64)
            self.next_j[s] += len(rows)
            shard[rows], pos[rows] = _destinations(js, m, K, self.layout, self.shuffle_seed)
        self.g += r
        return split, shard, pos


def _shard_sizes(pieces, jobs, router):
    """{job: (rows, non-zeros)} of the shards ``jobs``, from the pieces' row lengths."""
    sizes = {job: [0, 0] for job in jobs}
    for piece in pieces:
        for lens in _read_parsed(piece, lens_only=True):
            split, shard, _ = router.route(len(lens))
            for job in jobs:
                grp = (split == job[0]) & (shard == job[1])
                sizes[job][0] += int(grp.sum())
                sizes[job][1] += int(lens[grp].sum())
    return sizes


def _labels_as_written(y, mapping):
    """Labels as the shards hold them: {0, 1} mapped to ±1 (the indices are
    shifted to zero-based by ``_group``)."""
    return np.where(y == 0.0, -1.0, y) if mapping.get("0") == -1 else y


def _shard_writer(out_dir, name, split, k, nf, dtype, compression, size, attrs):
    """The ShardWriter of shard k of ``split`` (sname, rows, K), allocated at ``size`` (rows, nnz)."""
    sname, _m, K = split
    path = os.path.join(out_dir, f"{name}{'-' + sname if sname else ''}-{k:05d}.h5")
    return ShardWriter(path, nf, np.dtype(dtype), compression, size=size, shard_index=k, shard_count=K,
                       split=sname or "", **attrs)


class _InPlace:
    """Writing without a shuffle: a rank's rows of each shard are a contiguous
    range of it, so every rank writes its own rows (handed to ``write`` in
    order, from global row ``row0``, split positions ``j0``) in place into
    every shard, whose datasets the shard's owner has allocated with the sizes
    the ranks announced (from the row lengths ``piece.lens``); each byte is
    written once. A block's rows are grouped and written on a thread while
    the caller parses the next block (filling fresh page-cache pages is kernel
    time that parsing does not need), so the arrays handed to ``write`` must
    not be reused; ``write`` reports the previous block's error, ``flush`` the
    last one's. The constructor and ``close`` are collective."""

    def __init__(self, c, piece, row0, j0, splits, shift, mapping, layout, test_fraction,
                 split_seed, out_dir, name, nf, dtype, compression, attrs):
        self.c, self.splits, self.shift, self.mapping = c, splits, shift, mapping
        self.layout = layout
        self.jobs = [(s, k) for s in range(len(splits)) for k in range(splits[s][2])]
        lo, hi = block_range(len(self.jobs), c.size, c.rank)
        self.mine = _shard_sizes([piece], self.jobs, _Router(splits, layout, None, test_fraction,
                                                              split_seed, row0, j0))
        every = c.allgather(self.mine)
        before = {job: (sum(e[job][0] for e in every[: c.rank]),
                        sum(e[job][1] for e in every[: c.rank])) for job in self.jobs}
        self.total = {job: (sum(e[job][0] for e in every), sum(e[job][1] for e in every))
                      for job in self.jobs}
        self.writers, self.parts = {}, {}
        self.pool, self.pending = ThreadPoolExecutor(1, thread_name_prefix="prep-write"), None
        self.router = _Router(splits, layout, None, test_fraction, split_seed, row0, j0)
        self.first_key = np.cumsum([0] + [K for _, _, K in splits])  # key of (s, k): first_key[s] + k
        err = None
        try:
            for s, k in self.jobs[lo:hi]:
                self.writers[(s, k)] = _shard_writer(out_dir, name, splits[s], k, nf, dtype,
                                                     compression, self.total[(s, k)], attrs)
        except MpisgdError as exc:  # e.g. a full disk: every rank learns of it below
            err = str(exc)
        try:
            layouts, errors = {}, []
            for e, d in c.allgather((err, {job: w.layout() for job, w in self.writers.items()})):
                layouts.update(d)
                errors += [e] if e else []
            if errors:
                raise MpisgdError(errors[0])
            self.parts = {job: ShardPart(layouts[job], *before[job]) for job in self.jobs
                          if self.mine[job][0]}
        except BaseException:
            self.abort()
            raise

    def write(self, indptr, indices, data, y):
        """Write the next rows of this rank (raw indices, labels as parsed)."""
        split, shard, pos = self.router.route(len(y))
        self.flush()
        self.pending = self.pool.submit(self._append, indptr, indices, data, y,
                                        self.first_key[split] + shard, pos)

    def flush(self):
        """Wait for the rows handed to ``write`` to be written (raising their error)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def _append(self, indptr, indices, data, y, keys, pos):
        """Append a block's rows, grouped by shard (each row's key), to this rank's parts."""
        ip, ix, d, yw, order, rows, ents = _group(indptr, indices, data, y, keys,
                                                  len(self.jobs), self.shift)
        yw = _labels_as_written(yw, self.mapping)
        for job, part in self.parts.items():
            key = self.first_key[job[0]] + job[1]
            q0, q1 = rows[key], rows[key + 1]
            if q0 == q1:
                continue
            expect = part.row0 + part.n_rows
            if pos[order[q0]] != expect or pos[order[q1 - 1]] != expect + q1 - q0 - 1:
                raise RuntimeError(f"prep: shard {part.path} rows out of order")
            part.append(ip[q0 : q1 + 1], ix[ents[key] : ents[key + 1]],
                        d[ents[key] : ents[key + 1]], yw[q0:q1])

    def close(self):
        """Publish the shards once every rank has written its rows (each part
        as announced); returns {(split, shard): path}."""
        self.flush()
        self.pool.shutdown()
        short = []
        for job, part in self.parts.items():
            part.close()
            if [part.n_rows, part.nnz] != self.mine[job]:
                short.append(part.path)
        short = [p for s in self.c.allgather(short) for p in s]  # every part is written
        if short:
            raise RuntimeError(f"prep: shard {short[0]}: fewer rows written than announced")
        files = {}
        for job, w in self.writers.items():
            n_rows = _shard_rows(self.splits[job[0]][1], self.splits[job[0]][2], job[1],
                                 self.layout)
            if self.total[job][0] != n_rows:
                raise RuntimeError(f"prep: shard {w.path} has {self.total[job][0]} rows, "
                                   f"expected {n_rows}")
            files[job] = w.close(written=self.total[job], n_rows_split=self.splits[job[0]][1])
        return files

    def abort(self):
        """Drop this rank's parts and the shards it owns."""
        self.pool.shutdown()  # the block being written, if any, ends first
        for part in self.parts.values():
            part.close()
        for w in self.writers.values():
            w.abort()


def _write_shuffled(pieces, jobs, splits, shift, mapping, shuffle_seed, layout, test_fraction,
                    split_seed, out_dir, name, nf, dtype, compression, attrs):
    """Pass 2 with a shuffle: read the parsed pieces in rank order (global row
    order), hold the rows of each of the shards ``jobs`` [(split, shard)] in
    memory and write it ordered by position (allocated first, each byte written
    once). Returns {(split, shard): path}."""
    writers, held = {}, {}
    sizes = _shard_sizes(pieces, jobs, _Router(splits, layout, shuffle_seed, test_fraction,
                                                split_seed))
    try:
        for s, k in jobs:
            writers[(s, k)] = _shard_writer(out_dir, name, splits[s], k, nf, dtype, compression, sizes[(s, k)], attrs)
            held[(s, k)] = []
        router = _Router(splits, layout, shuffle_seed, test_fraction, split_seed)
        first_key = np.cumsum([0] + [K for _, _, K in splits])  # key of job (s, k): first_key[s] + k
        for piece in pieces:
            for indptr, indices, data, y in _read_parsed(piece):
                split, shard, pos = router.route(len(y))
                ip, ix, d, yw, order, rows, ents = _group(
                    indptr, indices, data, y, first_key[split] + shard,
                    int(first_key[-1]), shift)
                yw = _labels_as_written(yw, mapping)
                for job in jobs:
                    key = first_key[job[0]] + job[1]
                    q0, q1, e0, e1 = rows[key], rows[key + 1], ents[key], ents[key + 1]
                    if q1 > q0:
                        held[job].append((np.diff(ip[q0 : q1 + 1]), ix[e0:e1], d[e0:e1],
                                          yw[q0:q1], pos[order[q0:q1]]))
        files = {}
        for job in jobs:
            _append_by_position(writers[job], held.pop(job))
            n_rows = _shard_rows(splits[job[0]][1], splits[job[0]][2], job[1], layout)
            if writers[job].n_rows != n_rows:
                raise RuntimeError(f"prep: shard {writers[job].path} has "
                                   f"{writers[job].n_rows} rows, expected {n_rows}")
            files[job] = writers[job].close(n_rows_split=splits[job[0]][1])
        return files
    except BaseException:
        for w in writers.values():
            w.abort()
        raise


def _shard_rows(m, K, k, layout):
    """Rows of shard k of a split of m rows."""
    if layout == "round-robin":
        return (m - k + K - 1) // K
    lo, hi = block_range(m, K, k)
    return hi - lo


def _append_by_position(writer, parts, step=1 << 16):
    """Append the held rows of a shuffled shard in the order of their positions."""
    fields = list(zip(*parts)) if parts else [[np.zeros(0, dt)] for _, dt in FIELDS]
    lens, indices, data, y, pos = (np.concatenate(f) for f in fields)
    indptr = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=indptr[1:])
    order = np.argsort(pos, kind="stable")
    if not np.array_equal(pos[order], np.arange(len(pos))):
        raise RuntimeError(f"prep: shard {writer.path} positions are not a permutation")
    for a in range(0, len(order), step):
        o = order[a : a + step]
        take, part_lens = _gather(indptr, o)
        ip = np.zeros(len(o) + 1, np.int64)
        np.cumsum(part_lens, out=ip[1:])
        writer.append(ip, indices[take], data[take], y[o])
