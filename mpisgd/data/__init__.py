"""Data: LIBSVM/VW text parsing, the HDF5 shard format, the streaming block
reader, partitioning of shards over ranks, and seeded synthetic streams.

Modules: ``libsvm`` (numba byte parser), ``textio`` (byte ranges of plain or
compressed text, aligned to line starts), ``shard`` (format, writer, reader),
``shardset`` (the user's shard paths and folders to one checked set; ``prep``'s
output folder), ``reader`` (blocks with background read-ahead), ``partition`` (pure
``(n, size, rank)`` functions), ``synthetic`` (streams of docs/ALGORITHMS.md §4 and
the RCV1-scale set), ``sources`` (LIBSVM, Vowpal Wabbit and .npz inputs; ``load_text`` reads a
text file into memory), ``convert`` (the work of ``mpisgd prep``)."""
