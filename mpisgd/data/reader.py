"""Stream shards as CSR blocks of B rows, read ahead on a background thread.

At most ``readahead`` blocks wait in the queue (plus the one being read and
the one the caller holds), so memory stays bounded while I/O overlaps the
caller's compute. An error in the reading thread is raised in the caller.
Blocks of contiguous (uncompressed) shards are read-only views of the
memory-mapped file; the thread verifies their checksums, which also pages
them in. The overlap needs the caller's compute to release the GIL (numba
``nogil=True``); otherwise the thread runs between the caller's blocks.

A path listed more than once (``[path] * epochs``) is opened once per call:
its later passes reuse the open, mapped shard, whose segments verified in
the first pass are not checked again, unless the file has changed on disk
since (another inode, size or modification time), in which case it is
opened and verified again (and must still hold as many rows). Its map is
dropped behind each pass (a resident set of a few blocks), or, up to
``resident_mb`` of such shards, kept between its passes: a later pass then
reads pages already mapped instead of mapping them again (that re-mapping
cost more than the reading itself: bench/bench_data.py --sections read).
"""

import os
import queue
import threading
from dataclasses import dataclass

import numpy as np

from mpisgd.data.shard import open_shard
from mpisgd.errors import MpisgdError


@dataclass
class Block:
    """``block_rows`` rows of one shard (fewer at its end); ``row_start`` is the
    first row's index within that shard, ``shard`` its position in ``paths``."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    y: np.ndarray
    row_start: int
    shard: int

    @property
    def n_rows(self):
        return len(self.y)


_DONE = object()


def _put(out, item, stop):
    """Queue ``item`` unless the consumer has gone; False if it has."""
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


class _Shards:
    """The shards of one ``iter_blocks`` call, each path opened once while it is
    listed again later (see the module's docstring)."""

    def __init__(self, paths):
        self.paths = paths
        self.last = {p: k for k, p in enumerate(paths)}  # a path's last pass
        self.kept = {}  # path → open Shard between its passes
        self.rows = {}  # path → rows when first opened

    def open(self, k):
        """The open shard for pass ``k`` (over ``paths[k]``) and what its previous
        pass left mapped (for ``Shard.drop``)."""
        path = self.paths[k]
        shard = self.kept.pop(path, None)
        if shard is not None:
            if shard.unchanged():
                return shard, shard.rewind()
            shard.close()  # replaced or rewritten since: open and verify it again
        shard = open_shard(path)
        if self.rows.setdefault(path, shard.n_rows) != shard.n_rows:
            shard.close()
            raise MpisgdError(f"{path}: the shard changed during the run ({self.rows[path]} rows "
                              f"before, {shard.n_rows} now)")
        return shard, []

    def done(self, k, shard):
        """Pass ``k`` is over: keep the shard for a later pass, or close it."""
        if self.last[self.paths[k]] > k:
            self.kept[self.paths[k]] = shard
        else:
            shard.close()

    def close(self):
        for shard in self.kept.values():
            shard.close()
        self.kept = {}


def _read(paths, block_rows, keep, skip=0, resident_bytes=0):
    """The blocks of ``paths`` (the first ``skip`` rows of ``paths[0]`` left
    out). After yielding a block at row r, drops the map of the rows before
    r − keep·block_rows (the consumer is done with those); the tail a shard's
    previous pass left mapped is dropped ``keep`` blocks into the next pass.
    A shard listed again stays mapped between its passes instead, while the
    shards so kept hold at most ``resident_bytes``: its later passes read
    pages already mapped; its last pass drops them behind it."""
    shards = _Shards(paths)
    tails = []  # [blocks to go, tail]
    resident = {}  # path → bytes kept mapped
    try:
        for k in range(len(paths)):
            path = paths[k]
            shard, tail = shards.open(k)
            if tail and path in resident and resident[path][0] is shard:
                tail = []  # the map of the previous pass is the one to read
            resident.pop(path, None)
            if (shards.last[path] > k and shard.maps
                    and sum(b for _s, b in resident.values()) + shard.mapped_bytes() <= resident_bytes):
                resident[path] = (shard, shard.mapped_bytes())
            if tail:
                tails.append([keep, tail])
            try:
                for r in range(skip if k == 0 else 0, shard.n_rows, block_rows):
                    yield Block(*shard.read(r, r + block_rows), row_start=r, shard=k)
                    if path not in resident:
                        shard.release(r - keep * block_rows)
                    for pending in tails:
                        pending[0] -= 1
                        if pending[0] <= 0:
                            shard.drop(pending[1])
                    tails = [p for p in tails if p[0] > 0]
            except BaseException:
                shard.close()
                raise
            shards.done(k, shard)
    finally:
        shards.close()


def _produce(blocks, out, stop):
    try:
        for block in blocks:
            if not _put(out, block, stop):
                return
        _put(out, _DONE, stop)
    except BaseException as exc:  # handed to the consumer
        _put(out, exc, stop)
    finally:
        blocks.close()


def iter_blocks(paths, block_rows, readahead=2, skip=0, resident_mb=0):
    """Yield the rows of ``paths`` (in order) as ``Block`` objects of ``block_rows``;
    ``skip``: rows of the first shard left out (a resumed run). ``resident_mb``:
    MiB of shards listed again that stay mapped between their passes (0: every
    pass drops the map behind it, and the resident set is a few blocks)."""
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    paths = [os.fspath(p) for p in paths]
    if block_rows < 1:
        raise MpisgdError(f"block_rows: must be positive, got {block_rows}")
    if readahead < 0:
        raise MpisgdError(f"readahead: must be ≥ 0, got {readahead}")
    if readahead == 0:
        blocks = _read(paths, block_rows, 1, skip, resident_mb << 20)
        try:
            yield from blocks
        finally:
            blocks.close()
        return
    out = queue.Queue(maxsize=readahead)
    stop = threading.Event()
    # Blocks older than the queue, the caller's and one spare are done.
    blocks = _read(paths, block_rows, readahead + 3, skip, resident_mb << 20)
    thread = threading.Thread(target=_produce, args=(blocks, out, stop), name="mpisgd-reader",
                              daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()
