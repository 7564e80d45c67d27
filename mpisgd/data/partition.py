"""Pure partition functions of ``(n, size, rank)``: no MPI, no I/O."""

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
