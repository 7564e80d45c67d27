"""Stream shards as CSR blocks of B rows, read ahead on a background thread.

At most ``readahead`` blocks wait in the queue (plus the one being read and
the one the caller holds), so memory stays bounded while I/O overlaps the
caller's compute. An error in the reading thread is raised in the caller.
Blocks of contiguous (uncompressed) shards are read-only views of the
memory-mapped file; the thread verifies their checksums, which also pages
them in. The overlap needs the caller's compute to release the GIL (numba
``nogil=True``); otherwise the thread runs between the caller's blocks.
"""

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


def _produce(paths, block_rows, out, stop, keep):
    try:
        for k, path in enumerate(paths):
            with open_shard(path) as shard:
                for r in range(0, shard.n_rows, block_rows):
                    block = Block(*shard.read(r, r + block_rows), row_start=r, shard=k)
                    if not _put(out, block, stop):
                        return
                    # Blocks older than the queue, the caller's and one spare are done.
                    shard.release(r - keep * block_rows)
        _put(out, _DONE, stop)
    except BaseException as exc:  # handed to the consumer
        _put(out, exc, stop)


def iter_blocks(paths, block_rows, readahead=2):
    """Yield the rows of ``paths`` (in order) as ``Block`` objects of ``block_rows``."""
    if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__"):
        paths = [paths]
    paths = list(paths)
    if block_rows < 1:
        raise MpisgdError(f"block_rows: must be positive, got {block_rows}")
    if readahead < 0:
        raise MpisgdError(f"readahead: must be ≥ 0, got {readahead}")
    if readahead == 0:
        for k, path in enumerate(paths):
            with open_shard(path) as shard:
                for r in range(0, shard.n_rows, block_rows):
                    yield Block(*shard.read(r, r + block_rows), row_start=r, shard=k)
                    shard.release(r - block_rows)
        return
    out = queue.Queue(maxsize=readahead)
    stop = threading.Event()
    thread = threading.Thread(
        target=_produce, args=(paths, block_rows, out, stop, readahead + 3), name="mpisgd-reader",
        daemon=True
    )
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
