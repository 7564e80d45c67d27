"""Convert a source into K shards (the work of ``mpisgd prep``), serial or MPI.

The text is parsed once, each rank over its own part (``block_range`` of the
source's size; text parts cut at line starts):

1. Parse and check everything, writing each rank's rows as parsed (raw
   indices, labels as written, normalized if asked) to a binary piece of a
   hidden temporary directory, so that no shard is written before the input
   is known to be good; reduce the counts, the index range and the label
   classes; decide the index base, n_features and the label mapping.
2. Route every row: global row i goes to the test split iff hash(seed, i)
   < test_fraction; its position j within its split, shuffled (if asked) by a
   seeded bijection p = π(j) of [0, M), goes to shard p mod K at p div K
   (round-robin) or to the contiguous block holding p. Without a shuffle, a
   rank's rows of a shard are a contiguous range of it: the ranks announce
   their rows and non-zeros per shard (from their pieces' row lengths), each
   shard's owner allocates its datasets, and every rank reads its own piece
   and writes its rows in place into every shard (``ShardPart``), so each
   byte of a shard is written once, by the rank that parsed it. With a
   shuffle, each shard's owner reads every piece and writes the shard ordered
   by position.

Every row's destination depends only on its global index, so the shards
hold the same rows in the same order for any number of ranks. On any error
the temporary directory goes (and the output directory, if prep made it).
Memory: one text chunk per rank, plus one shard when shuffling.
"""

import json
import math
import os
import shutil

import numpy as np
from numba import njit

from mpisgd.atomic import atomic_path
from mpisgd.data import libsvm
from mpisgd.data.partition import block_range
from mpisgd.data.shard import DEFAULT_COMPRESSION, ShardPart, ShardWriter
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


@njit(cache=True)
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
                            split_name, n_features, binary, dtype, compression, command)
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
             dtype, compression, command):
    path = source.path
    # Pass 1: parse and check, keeping the rows; every rank reports its counts or its first error.
    parsed = os.path.join(tmp, f"parsed.{c.rank:06d}")
    stats = libsvm.ParseStats()
    err = None
    try:
        _parse(source, start, stop, parsed, normalize, stats)
    except libsvm.ParseError as exc:
        err = ("line", exc.line, exc.what)
    except MpisgdError as exc:
        err = ("other", 0, str(exc))
    mine = (err, stats.lines, stats.rows, stats.nnz, stats.min_index, stats.max_index,
            stats.eq_line, stats.first_neg, stats.first_zero, stats.sorted_rows, stats.qids)
    every = c.allgather(mine)
    offsets = np.concatenate([[0], np.cumsum([e[1] for e in every])[:-1]]).tolist()
    for e, off in zip(every, offsets):
        if e[0] is not None:
            kind, line, what = e[0]
            if kind == "line":
                raise MpisgdError(f"{path}:{off + line}: {what}")
            raise MpisgdError(what)
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
                f"{total.first_zero})"
            )
        mapping = {"0": -1, "1": 1} if total.first_zero else {"-1": -1, "1": 1}
    say(f"prep: {path} ({type(source).__name__[:-6].lower()}"
        f"{', ' + source.compression if source.compression else ''}): {total.rows} rows, "
        f"{total.nnz} non-zeros, {nf} features; {why}")
    if total.sorted_rows:
        say(f"prep: sorted the indices of {total.sorted_rows} rows")
    if total.qids:
        say(f"prep: ignored {total.qids} qid fields")
    if mapping.get("0") == -1:
        say("prep: labels {0, 1} mapped to {-1, +1}")

    # Split sizes (the test split is a hash of the global row index).
    row0 = sum(e[2] for e in every[: c.rank])
    test_rows_mine = int(_test_mask(split_seed, row0, stats.rows, test_fraction).sum()) \
        if test_fraction > 0 else 0
    tests = c.allgather(test_rows_mine)
    n_test = sum(tests)
    n_train = total.rows - n_test
    splits = [("train" if test_fraction > 0 else split_name, n_train, n_shards)]
    if test_fraction > 0:
        splits.append(("test", n_test, test_shards))
    for s, (sname, m, k) in enumerate(splits):
        if m < k:
            raise MpisgdError(f"{path}: {m} {sname or ''} rows cannot fill {k} shards")

    # Pass 2: each rank writes its share of the shards from every rank's piece.
    jobs = [(s, k) for s in range(len(splits)) for k in range(splits[s][2])]
    lo, hi = block_range(len(jobs), c.size, c.rank)
    attrs = {
        "source": os.path.abspath(path), "label_mapping": mapping, "command": command,
        "zero_based_input": bool(zero_based), "normalized": bool(normalize),
        "shuffle_seed": -1 if shuffle_seed is None else int(shuffle_seed),
        "layout": layout, "test_fraction": float(test_fraction),
        "split_seed": int(split_seed),
    }
    pieces = [os.path.join(tmp, f"parsed.{q:06d}") for q in range(c.size)]
    if shuffle_seed is None:
        j0 = [row0 - sum(tests[: c.rank]), sum(tests[: c.rank])][: len(splits)]
        files = _write_in_place(c, pieces[c.rank], row0, j0, jobs, jobs[lo:hi], splits, shift,
                                mapping, layout, test_fraction, split_seed, out_dir, name, nf,
                                dtype, compression, attrs)
    else:
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
        "label_mapping": mapping, "command": command,
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


def _parse(source, start, stop, parsed, normalize, stats):
    """Pass 1: parse the range once into ``stats`` and the binary piece ``parsed.*``."""
    files = {field: open(f"{parsed}.{field}", "wb") for field, _ in PARSED}
    try:
        for indptr, indices, data, y, st in source.chunks(start, stop):
            stats.merge(st)
            if normalize:
                _l2_normalize(indptr, data)
            for (field, dt), arr in zip(PARSED, (np.diff(indptr), indices, data, y)):
                np.asarray(arr, dt).tofile(files[field])
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


def _write_in_place(c, piece, row0, j0, jobs, my_jobs, splits, shift, mapping, layout,
                    test_fraction, split_seed, out_dir, name, nf, dtype, compression, attrs):
    """Pass 2 without a shuffle: a rank's rows of each shard are a contiguous
    range of it, so every rank writes its own rows (its piece only, from global
    row ``row0``, split positions ``j0``) in place into every shard, whose
    datasets the shard's owner (``my_jobs``) has allocated with the sizes the
    ranks announced; each byte is written once. Returns {(split, shard): path}."""
    mine = _shard_sizes([piece], jobs, _Router(splits, layout, None, test_fraction,
                                                split_seed, row0, j0))
    every = c.allgather(mine)
    before = {job: (sum(e[job][0] for e in every[: c.rank]),
                    sum(e[job][1] for e in every[: c.rank])) for job in jobs}
    total = {job: (sum(e[job][0] for e in every), sum(e[job][1] for e in every))
             for job in jobs}
    writers, parts = {}, {}
    try:
        for s, k in my_jobs:
            writers[(s, k)] = _shard_writer(out_dir, name, splits[s], k, nf, dtype, compression, total[(s, k)], attrs)
        layouts = {}
        for d in c.allgather({job: w.layout() for job, w in writers.items()}):
            layouts.update(d)
        err = None
        try:
            router = _Router(splits, layout, None, test_fraction, split_seed, row0, j0)
            parts = {job: ShardPart(layouts[job], *before[job]) for job in jobs if mine[job][0]}
            first_key = np.cumsum([0] + [K for _, _, K in splits])  # key of job (s, k): first_key[s] + k
            for indptr, indices, data, y in _read_parsed(piece):
                split, shard, pos = router.route(len(y))
                ip, ix, d, yw, order, rows, ents = _group(
                    indptr, indices, data, y, first_key[split] + shard, len(jobs), shift)
                yw = _labels_as_written(yw, mapping)
                for job, part in parts.items():
                    key = first_key[job[0]] + job[1]
                    q0, q1 = rows[key], rows[key + 1]
                    if q0 == q1:
                        continue
                    expect = part.row0 + part.n_rows
                    if pos[order[q0]] != expect or pos[order[q1 - 1]] != expect + q1 - q0 - 1:
                        raise RuntimeError(f"prep: shard {part.path} rows out of order")
                    part.append(ip[q0 : q1 + 1], ix[ents[key] : ents[key + 1]],
                                d[ents[key] : ents[key + 1]], yw[q0:q1])
        except MpisgdError as exc:  # e.g. a full disk: every rank learns of it below
            err = str(exc)
        finally:
            for part in parts.values():
                part.close()
        errors = [e for e in c.allgather(err) if e]  # every part is written (or failed)
        if errors:
            raise MpisgdError(errors[0])
        files = {}
        for job, w in writers.items():
            n_rows = _shard_rows(splits[job[0]][1], splits[job[0]][2], job[1], layout)
            if total[job][0] != n_rows:
                raise RuntimeError(f"prep: shard {w.path} has {total[job][0]} rows, "
                                   f"expected {n_rows}")
            files[job] = w.close(written=total[job], n_rows_split=splits[job[0]][1])
        return files
    except BaseException:
        for w in writers.values():
            w.abort()
        raise


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
