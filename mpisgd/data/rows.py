"""Learners' streams of rows, served in pieces: the input side of
``mpisgd train`` (one stream per rank) and ``mpisgd simulate`` (k streams,
round-major).

Round t of learner l is row t of l's stream. ``RowSource`` subclasses serve
one stream from memory, a synthetic generator or HDF5 shards;
``RoundMajorSource`` interleaves k streams by round (the serial reference,
``central``), and ``interleave`` is the one round-major merge both it and the
simulator use.
"""

import os
import time

import numpy as np

from mpisgd.errors import MpisgdError


class RowSource:
    """One learner's stream of rows, served in pieces of at most m rows.

    Subclasses give ``n_rows``, ``n_features``, ``describe`` and ``_blocks()``,
    a generator of CSR blocks (indptr from 0, indices int32, data float64, y).
    ``io_seconds`` is the time spent waiting for blocks.
    """

    n_rows = 0
    n_features = 0
    describe = ""
    rounds = property(lambda self: self.n_rows)  # rounds of the stream

    def rows_until(self, t):
        """Rows in rounds [0, t)."""
        return min(t, self.n_rows)

    def __init__(self):
        self._gen = None
        self._block = None
        self._pos = 0
        self._io = 0.0
        self._start = 0  # first row served (``seek``)

    def seek(self, t):
        """Start the stream at round t (a resumed run), before any row is taken."""
        if self._gen is not None:
            raise RuntimeError("seek: rows have been taken already")
        self._start = self.rows_until(t)

    @property
    def io_seconds(self):
        """Time spent waiting for blocks (reading or generating rows)."""
        return self._io

    def _blocks(self):
        raise NotImplementedError

    def warm_up(self):
        """Load the numba kernels that serving rows will call (numba reads its
        cache on a function's first call, tens of milliseconds), so that a
        run's clock and ``io_seconds`` hold none of it. Serves no row."""

    def take(self, m):
        """Up to m next rows as CSR (indptr from 0; indices, data and y are views
        of the block). Fewer rows at the end of a block; None at the end of the
        stream."""
        if self._gen is None:
            self._gen = self._blocks()
        while self._block is None or self._pos >= len(self._block[3]):
            start = time.perf_counter()
            try:
                self._block = next(self._gen)
            except StopIteration:
                self._block = None
                self._io += time.perf_counter() - start
                return None
            self._io += time.perf_counter() - start
            self._pos = 0
        indptr, indices, data, y = self._block
        lo = self._pos
        hi = min(len(y), lo + m)
        self._pos = hi
        a, b = indptr[lo], indptr[hi]
        return indptr[lo : hi + 1] - a, indices[a:b], data[a:b], y[lo:hi]

    def put_back(self, m):
        """Return the last m rows taken (m at most the last ``take``'s): the next
        ``take`` serves them again."""
        if not 0 <= m <= self._pos:
            raise RuntimeError(f"put_back: {m} rows, {self._pos} taken from this block")
        self._pos -= m

    def close(self):
        if self._gen is not None:
            self._gen.close()


class ArraySource(RowSource):
    """Rows held in memory as CSR arrays (tests, small data)."""

    def __init__(self, indptr, indices, data, y, n_features, describe="in-memory"):
        super().__init__()
        self.arrays = (np.asarray(indptr, np.int64), np.asarray(indices, np.int32),
                       np.asarray(data, np.float64), np.asarray(y, np.float64))
        self.n_rows = len(self.arrays[3])
        self.n_features = int(n_features)
        self.describe = describe

    def _blocks(self):
        if self._start < self.n_rows:
            ip, ix, d, y = self.arrays
            a, b = ip[self._start], ip[-1]
            yield ip[self._start :] - a, ix[a:b], d[a:b], y[self._start :]


class StreamSource(RowSource):
    """Learner ``learner``'s rows of a synthetic stream (``mpisgd.data.synthetic``),
    rounds [0, rounds), generated in blocks of ``block_rows``."""

    def __init__(self, stream, learner, rounds, block_rows=4096):
        super().__init__()
        self.stream, self.learner = stream, int(learner)
        self.n_rows = int(rounds)
        self.n_features = stream.n_features
        self.block_rows = int(block_rows)
        self.describe = f"synthetic:{stream.name}[learner {learner}]"

    def _blocks(self):
        # counter-based: any round can be generated directly
        for t0 in range(self._start, self.n_rows, self.block_rows):
            yield self.stream.rows(t0, min(self.n_rows, t0 + self.block_rows), [self.learner])

    def warm_up(self):
        self.stream.rows(0, 1, [self.learner])  # round 0, thrown away: the stream keeps no state


class ShardSource(RowSource):
    """The rows of one or more HDF5 shards, in order, read ahead in blocks. A
    path listed again (``[path] * epochs``) is opened once, here and by the
    reader (``iter_blocks``), whose later passes reuse the verified map, kept
    mapped between passes up to ``resident_mb`` MiB of such shards."""

    def __init__(self, paths, block_rows=4096, resident_mb=0):
        from mpisgd.data.shard import open_shard

        super().__init__()
        self.paths = [os.fspath(p) for p in paths]
        self.block_rows = int(block_rows)
        self.resident_mb = int(resident_mb)
        n_features = set()
        self._shard_rows = []
        rows = {}
        for p in self.paths:
            if p not in rows:
                with open_shard(p) as shard:
                    rows[p] = shard.n_rows
                    n_features.add((shard.n_features, p))
            self.n_rows += rows[p]
            self._shard_rows.append(rows[p])
        if len({n for n, _ in n_features}) > 1:
            detail = ", ".join(f"{p}: {n}" for n, p in sorted(n_features))
            raise MpisgdError(f"n_features differs across shards ({detail})")
        self.n_features = next(iter(n_features))[0] if n_features else 0
        self.describe = ",".join(self.paths)

    def _blocks(self):
        from mpisgd.data.reader import iter_blocks

        skip, first = self._start, 0
        while first < len(self.paths) and skip >= self._shard_rows[first]:
            skip -= self._shard_rows[first]
            first += 1
        # A resumed run starts ``skip`` rows into the shard it had begun.
        for block in iter_blocks(self.paths[first:], self.block_rows, skip=skip,
                                 resident_mb=self.resident_mb):
            yield block.indptr, block.indices, block.data, block.y

    def warm_up(self):
        from mpisgd.data.shard import warm_up

        warm_up()  # the checksums the reader verifies segments with


class DealtSource(RowSource):
    """Rows ``[start, stop)`` of other streams, one part after the other,
    from round ``first`` on: round ``first + i`` is row i (a stream dealt by
    an elastic resume, ``mpisgd.data.partition.deal``). ``parts``: [(RowSource,
    start, stop)], each source fresh (no row taken)."""

    def __init__(self, parts, first, n_features):
        super().__init__()
        self.parts = [(s, int(a), int(b)) for s, a, b in parts]
        self.first = int(first)
        self.n_rows = sum(b - a for _s, a, b in self.parts)
        self.n_features = int(n_features)
        self.describe = "; ".join(f"{s.describe} rows {a}-{b}" for s, a, b in self.parts) or "no rows"

    @property
    def rounds(self):
        return self.first + self.n_rows

    def rows_until(self, t):
        return min(max(t - self.first, 0), self.n_rows)

    def _blocks(self):
        skip = self._start
        for source, a, b in self.parts:
            if skip >= b - a:
                skip -= b - a
                continue
            source.seek(a + skip)  # round = row of a stream as it was dealt at first
            want, skip = b - a - skip, 0
            while want > 0 and (rows := source.take(want)) is not None:
                want -= len(rows[3])
                yield rows

    def warm_up(self):
        for s, _a, _b in self.parts:
            s.warm_up()

    def close(self):
        super().close()
        for s, _a, _b in self.parts:
            s.close()


class RoundMajorSource(RowSource):
    """The rows of k sources interleaved by round: round t of source 0, of
    source 1, ..., then round t + 1 (``central``'s single stream)."""

    def __init__(self, sources, block_rounds=1024):
        super().__init__()
        self.sources = list(sources)
        self.n_rows = sum(s.n_rows for s in self.sources)
        self.n_features = self.sources[0].n_features
        self.block_rounds = int(block_rounds)
        self.describe = f"round-major[{len(self.sources)} streams]"

    @property
    def rounds(self):
        return max((s.n_rows for s in self.sources), default=0)

    def rows_until(self, t):
        return sum(min(t, s.n_rows) for s in self.sources)

    def seek(self, t):
        super().seek(t)
        for s in self.sources:
            s.seek(t)

    def _blocks(self):
        while True:
            parts = []
            for l, s in enumerate(self.sources):
                rows = _take_rows(s, self.block_rounds)
                if rows is not None:
                    parts.append((l, rows))
            if not parts:
                return
            yield interleave(parts)[:4]

    @property
    def io_seconds(self):
        return sum(s.io_seconds for s in self.sources)

    def warm_up(self):
        for s in self.sources:
            s.warm_up()


def _take_rows(source, m):
    """Exactly min(m, rows left) rows of ``source`` as CSR from 0, or None when empty."""
    pieces = []
    got = 0
    while got < m:
        rows = source.take(m - got)
        if rows is None:
            break
        pieces.append(rows)
        got += len(rows[3])
    if not pieces:
        return None
    return _concat(pieces)


def _concat(pieces):
    indptr = [np.zeros(1, np.int64)]
    offset = 0
    for ip, _ix, _d, _y in pieces:
        indptr.append(ip[1:] + offset)
        offset += int(ip[-1])
    return (np.concatenate(indptr), np.concatenate([p[1] for p in pieces]).astype(np.int32, copy=False),
            np.concatenate([p[2] for p in pieces]), np.concatenate([p[3] for p in pieces]))


def interleave(parts, n_rounds=None):
    """Round-major CSR of (learner, rows) parts, each starting at the same round:
    round t of every part in learner order, then round t + 1.

    Returns (indptr, indices, data, y, owner, round_ptr): each row's learner,
    and the first row of each of the ``n_rounds`` rounds (default: the longest
    part's) plus the end."""
    ip, ix, d, y = _concat([rows for _l, rows in parts])
    rounds = np.concatenate([np.arange(len(rows[3])) for _l, rows in parts])
    learner = np.concatenate([np.full(len(rows[3]), l, np.int64) for l, rows in parts])
    order = np.lexsort((learner, rounds))  # by round, then by learner
    lens = (ip[1:] - ip[:-1])[order]
    out_ip = np.zeros(len(order) + 1, np.int64)
    np.cumsum(lens, out=out_ip[1:])
    take = np.repeat(ip[:-1][order] - out_ip[:-1], lens) + np.arange(out_ip[-1])  # source of each entry
    if n_rounds is None:
        n_rounds = int(rounds.max()) + 1 if len(rounds) else 0
    round_ptr = np.searchsorted(rounds[order], np.arange(n_rounds + 1), side="left").astype(np.int64)
    return out_ip, ix[take], d[take], y[order], learner[order], round_ptr
