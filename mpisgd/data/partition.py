"""Pure partition functions: of ``(n, size, rank)``, and of the rows left
of learners' streams (an elastic resume, ``mpisgd.checkpoint``). No MPI, no I/O."""

from mpisgd.errors import MpisgdError


def block_range(n, size, rank):
    """``[start, stop)`` of the rank-th of ``size`` near-equal contiguous blocks of n."""
    return n * rank // size, n * (rank + 1) // size


def shards_for_rank(n_shards, size, rank):
    """Shards a rank streams: a contiguous, near-equal block of shard indices.

    Every shard goes to exactly one rank; raises MpisgdError when there are
    more ranks than shards (a rank would have no data)."""
    if n_shards < 1:
        raise MpisgdError(f"no shards to distribute (n_shards={n_shards})")
    if not 0 <= rank < size:
        raise MpisgdError(f"rank {rank} outside [0, {size})")
    if size > n_shards:
        raise MpisgdError(
            f"{size} ranks but only {n_shards} shards: every rank needs at least one "
            f"shard (run with at most {n_shards} ranks, or prepare more shards)"
        )
    start, stop = block_range(n_shards, size, rank)
    return list(range(start, stop))


def rows_left(parts, done):
    """The parts ``[(stream, start, stop)]`` of a learner's rows after the
    first ``done`` of them (rows in part order)."""
    left = []
    for stream, start, stop in parts:
        skip = min(done, stop - start)
        done -= skip
        if start + skip < stop:
            left.append((stream, start + skip, stop))
    return left


def deal(parts, size):
    """``size`` lists of parts that together hold the rows of ``parts`` (in
    order) once each: the rank-th holds the rank-th ``block_range`` of them."""
    total = sum(stop - start for _s, start, stop in parts)
    dealt = []
    for rank in range(size):
        lo, hi = block_range(total, size, rank)
        mine, offset = [], 0
        for stream, start, stop in parts:
            a, b = max(lo - offset, 0), min(hi - offset, stop - start)  # this part's rows in [lo, hi)
            if a < b:
                mine.append((stream, start + a, start + b))
            offset += stop - start
        dealt.append(mine)
    return dealt
