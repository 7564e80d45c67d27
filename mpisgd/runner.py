"""One rank's training loop: distributed online learning over MPI.

Every rank is one learner (an ``OnlineLearners(k=1)``) that streams its own
rows; rank 0 is also the coordinator (``mpisgd.protocol.Coordinator``). Round
t of learner l is row t of l's stream; every row is predicted first, its
loss and error charged, then learned from. The run lasts T rounds, T the
longest stream; a shorter stream stops learning after its last row but its
learner keeps taking part in every check and sync (docs/WIRE.md).

Modes (docs/RUNNING.md):

- ``sync``: lock-step rounds; at every b-th round each learner checks its
  local condition, and the protocol runs to completion before anyone goes
  on. The same seeds give the same messages and the same final model.
- ``async`` (dynamic protocol): a violator sends its model and goes on
  learning without waiting; it skips its own checks while its resolution is
  pending and, when the balanced model arrives, keeps the progress it made
  meanwhile. Followers answer rank 0 whenever they poll (every
  ``poll_rows`` rounds and at their check points); rank 0 resolves the
  violations that have arrived between its own blocks of rows.

``central``: rank 0 alone is the one learner of the serial reference, which
processes round t of every stream in stream order; the other ranks idle.

The run ends with a full sync of every learner's final model (the averaged
one with ``average=True``); rank 0 returns the report, and writes model.h5,
report.json and timeline.csv when given an output directory.

Sync mode can checkpoint at the end of a round (``mpisgd.checkpoint``) and
resume from one: the learners' state, the stream position, the counters and
timers, the timeline and, on rank 0, the coordinator's counter, statistics
and random generator; the resumed run ends exactly as the uninterrupted one.
"""

import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

from mpisgd.errors import MpisgdError
from mpisgd.metrics import Timeline
from mpisgd.protocol import Coordinator, ProtocolConfig
from mpisgd.wire import CATEGORIES

MODES = ("sync", "async")


# -- row sources ------------------------------------------------------------------


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


class ShardSource(RowSource):
    """The rows of one or more HDF5 shards, in order, read ahead in blocks."""

    def __init__(self, paths, block_rows=4096):
        from mpisgd.data.shard import open_shard

        super().__init__()
        self.paths = [os.fspath(p) for p in paths]
        self.block_rows = int(block_rows)
        n_features = set()
        self._shard_rows = []
        for p in self.paths:
            with open_shard(p) as shard:
                self.n_rows += shard.n_rows
                self._shard_rows.append(shard.n_rows)
                n_features.add((shard.n_features, p))
        if len({n for n, _ in n_features}) > 1:
            detail = ", ".join(f"{p}: {n}" for n, p in sorted(n_features))
            raise MpisgdError(f"n_features differs across shards ({detail})")
        self.n_features = next(iter(n_features))[0] if n_features else 0
        self.describe = ",".join(self.paths)

    def _blocks(self):
        from mpisgd.data.reader import iter_blocks
        from mpisgd.data.shard import open_shard

        skip, first = self._start, 0
        while first < len(self.paths) and skip >= self._shard_rows[first]:
            skip -= self._shard_rows[first]
            first += 1
        if skip:  # a resumed run: the rest of a shard begun before, read directly
            with open_shard(self.paths[first]) as shard:
                for r in range(skip, shard.n_rows, self.block_rows):
                    yield shard.read(r, r + self.block_rows)
                    shard.release(r - self.block_rows)
            first += 1
        for block in iter_blocks(self.paths[first:], self.block_rows):
            yield block.indptr, block.indices, block.data, block.y


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
            yield _interleave(parts)

    @property
    def io_seconds(self):
        return sum(s.io_seconds for s in self.sources)


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


def _interleave(parts):
    """Round-major CSR of (learner, rows) parts, each starting at the same round."""
    ip, ix, d, y = _concat([rows for _l, rows in parts])
    rounds = np.concatenate([np.arange(len(rows[3])) for _l, rows in parts])
    learner = np.concatenate([np.full(len(rows[3]), l) for l, rows in parts])
    order = np.lexsort((learner, rounds))  # by round, then by learner
    lens = (ip[1:] - ip[:-1])[order]
    out_ip = np.zeros(len(order) + 1, np.int64)
    np.cumsum(lens, out=out_ip[1:])
    take = np.repeat(ip[:-1][order] - out_ip[:-1], lens) + np.arange(out_ip[-1])
    return out_ip, ix[take], d[take], y[order]


# -- configuration --------------------------------------------------------------------


@dataclass
class RunConfig:
    """Everything a run needs besides its rows and its communicator."""

    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    mode: str = "sync"
    learner: dict = field(default_factory=dict)  # keyword arguments of OnlineLearners
    timeline_every: int = 0  # rounds between timeline rows (0: only at the end)
    poll_rows: int = 64  # async: rounds between polls for rank 0's messages

    def __post_init__(self):
        if self.mode not in MODES:
            raise MpisgdError(f"mode: unknown {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.timeline_every < 0:
            raise MpisgdError(f"timeline_every: must be >= 0, got {self.timeline_every}")
        if self.poll_rows < 1:
            raise MpisgdError(f"poll_rows: must be >= 1, got {self.poll_rows}")

    def as_dict(self):
        return {"protocol": self.protocol.as_dict(), "mode": self.mode, "learner": dict(self.learner),
                "timeline_every": self.timeline_every, "poll_rows": self.poll_rows}


class _FinalSync:
    """Transport adapter for the protocol's "final" full sync: the Allreduce of
    every learner's final model (dense, as z with α = 0)."""

    def __init__(self, transport, z):
        self.transport, self.z, self.mean = transport, z, None

    def full_sync(self):
        self.mean = self.transport.allreduce_model(self.z)


# -- the run --------------------------------------------------------------------------


class Run:
    """One rank's part of a distributed run over communicator ``comm``.

    ``source``: this rank's RowSource (rank 0's is the round-major stream of
    every learner for ``central``; the other ranks' are then ignored).
    ``progress(t, T)``: called on rank 0 after each block of rounds.
    ``observer``: tests' hook (sync mode), an object whose ``before(t, run)``
    and ``after(t, run, members)`` are called around every check point on
    every rank (members: the balancing set, on rank 0; else None).
    ``checkpointer``: a ``mpisgd.checkpoint.Checkpointer`` (sync mode);
    ``resume``: a directory to resume from (``checkpoint.newest``), checked
    against ``fingerprint`` (``checkpoint.fingerprint``).
    """

    def __init__(self, comm, source, config, progress=None, observer=None, checkpointer=None, resume=None,
                 fingerprint=None):
        from mpisgd.comm import CountingComm, MPITransport
        from mpisgd.learners import OnlineLearners

        self.raw = comm
        self.comm = CountingComm(comm)
        self.rank, self.size = self.comm.rank, self.comm.size
        self.source = source
        self.config = config
        self.progress = progress
        self.observer = observer
        self.central = config.protocol.name == "central"
        if config.mode == "async" and self.central:
            raise MpisgdError("mode: central is the serial reference; run it with --mode sync")
        if config.mode == "async" and (checkpointer is not None or resume is not None):
            raise MpisgdError("mode: checkpoints (--checkpoint-every, --checkpoint-seconds, --resume) "
                              "need --mode sync")
        self.checkpointer = checkpointer
        self.resume, self.fingerprint = resume, fingerprint
        self.resumed = None  # (round directory, t) when resumed
        self._check_inputs()
        self.learners = OnlineLearners(1, source.n_features, **config.learner)
        self.transport = MPITransport(self.comm, self.learners, asynchronous=config.mode == "async")
        self.coordinator = Coordinator(config.protocol, self.size)  # resolves on rank 0 only
        self.timeline = Timeline()
        self.members = None
        self._owner = np.zeros(0, dtype=np.int64)
        self.rows_done = 0
        self.compute_seconds = 0.0
        # times spent before the checkpoint a run resumed from
        self.times_before = {"io": 0.0, "wall": 0.0, "loop": 0.0, "checkpoint": 0.0}

    def _check_inputs(self):
        """Every rank has the same n_features (validation on the raw
        communicator: metadata before the run, not counted)."""
        mine = (int(self.source.n_features), self.source.describe)
        everyone = self.raw.allgather(mine)
        counts = {n for n, _ in everyone}
        if len(counts) > 1:
            first = everyone[0][0]
            odd = [f"rank {r} ({d}): {n}" for r, (n, d) in enumerate(everyone) if n != first]
            raise MpisgdError(
                f"n_features differs across shards: rank 0 ({everyone[0][1]}) has {first}, but "
                + "; ".join(odd)
            )
        if mine[0] < 1:
            raise MpisgdError(f"rank {self.rank} ({mine[1]}): n_features must be >= 1")

    # -- learning ---------------------------------------------------------------

    def _learn(self, stop):
        """Learn this rank's rows up to round ``stop`` (those that exist)."""
        start = time.perf_counter()
        io_before = self.source.io_seconds
        want = self.source.rows_until(stop) - self.rows_done
        while want > 0:
            rows = self.source.take(want)
            if rows is None:
                raise MpisgdError(
                    f"rank {self.rank} ({self.source.describe}): stream ended after "
                    f"{self.rows_done} rows, {self.source.n_rows} announced"
                )
            indptr, indices, data, y = rows
            m = len(y)
            if len(self._owner) < m:
                self._owner = np.zeros(m, dtype=np.int64)
            try:
                self.learners.learn(indptr, indices, data, y, self._owner[:m])
            except MpisgdError as exc:  # name the data
                raise MpisgdError(f"{self.source.describe}, rows from {self.rows_done}: {exc}") from None
            self.rows_done += m
            want -= m
        self.compute_seconds += time.perf_counter() - start - (self.source.io_seconds - io_before)

    # -- protocol steps (sync mode) -----------------------------------------------------

    def _check(self, t):
        name = self.config.protocol.name
        if self.observer is not None:
            self.observer.before(t, self)
        if name == "static":
            if self.rank == 0:
                self.coordinator.full_sync(self.transport, "static")
                self.members = list(range(self.size))
            else:
                self.transport.static_sync()
        elif name == "dynamic":
            delta = self.coordinator.threshold(t)
            violating = bool(self.learners.distances()[0] > delta)
            count, violators, models = self.transport.exchange_violations(violating)
            if self.rank == 0:
                if count:
                    self.transport.serving = True
                    self.members = self.coordinator.resolve(t, violators, models, self.transport)
                    self.transport.end()
                    self.transport.serving = False
                else:
                    self.members = self.coordinator.resolve(t, [], [], self.transport)
            elif count:
                self.transport.serve()
                self.transport.finish_violation()
        if self.observer is not None:
            self.observer.after(t, self, self.members if self.rank == 0 else None)

    def _final_sync(self):
        """Every learner's final model (averaged with ASGD), averaged over learners."""
        if self.learners.average:
            coef, intercept = self.learners.averaged_weights(0)
        else:
            coef, intercept = self.learners.weights(0)
        z = np.append(coef, [intercept, 0.0])  # z with α = 0: u = w
        if self.central:
            return coef, intercept
        final = _FinalSync(self.transport, z)
        if self.rank == 0:
            self.coordinator.full_sync(final, "final")
        else:
            final.full_sync()
        n = self.learners.n_features
        return final.mean[:n].copy(), float(final.mean[n])

    def _record(self, t):
        self.timeline.record(t, int(self.learners.errors[0]), float(self.learners.loss_sum[0]),
                             self.comm.bytes_by_category())

    # -- main loops -----------------------------------------------------------------

    def run(self):
        """Train; returns (coef, intercept) of the final model on every rank."""
        from mpi4py import MPI

        wall = self._wall_start = time.perf_counter()
        rounds = self.source.rounds if (self.rank == 0 or not self.central) else 0
        t = 0
        if self.resume is None:
            T = self.transport.rows_allreduce(rounds)
        else:
            T = self.raw.allreduce(rounds, op=MPI.MAX)  # counted once, by the interrupted run
            t = self._restore(T)
        self.T = T
        loop = self._loop_start = time.perf_counter()
        if self.config.mode == "async" and self.config.protocol.name == "dynamic" and self.size > 1:
            self._run_async(T)
        else:
            self._run_sync(T, t)
        self.loop_seconds = time.perf_counter() - loop + self.times_before["loop"]
        self.coef, self.intercept = self._final_sync()
        self.wall_seconds = time.perf_counter() - wall + self.times_before["wall"]
        return self.coef, self.intercept

    # -- checkpoints (sync mode) ------------------------------------------------------

    def checkpoint_state(self, t):
        """(arrays, attrs) of this rank after round t: everything the rest of
        the run depends on (nothing is in flight between rounds in sync mode)."""
        c = self.comm
        arrays = {f"learners/{k}": v for k, v in self.learners.state_dict().items()}
        arrays.update({"comm/sent_messages": c.sent_messages, "comm/sent_bytes": c.sent_bytes,
                       "comm/recv_messages": c.recv_messages, "comm/recv_bytes": c.recv_bytes,
                       "timeline": self.timeline.as_array()})
        now = time.perf_counter()
        times = {"compute": self.compute_seconds, "communication": c.seconds,
                 "io": self.source.io_seconds + self.times_before["io"],
                 "wall": now - self._wall_start + self.times_before["wall"],
                 "loop": now - self._loop_start + self.times_before["loop"],
                 "checkpoint": self.checkpointer.time + self.times_before["checkpoint"]}
        attrs = {"rank": self.rank, "ranks": self.size, "rounds": self.T, "rows_done": self.rows_done,
                 "source": self.source.describe, "source_rows": int(self.source.n_rows),
                 "times": json.dumps(times)}
        if self.rank == 0:
            co = self.coordinator
            attrs["coordinator"] = json.dumps({"counter": co.counter, "stats": co.stats.as_dict(),
                                               "rng": co.rng.bit_generator.state})
        return arrays, attrs

    def _restore(self, T):
        """Resume from the newest complete checkpoint under ``self.resume``:
        rank 0 picks and checks it, every rank loads its own file. Returns
        the round to go on from."""
        from mpisgd import checkpoint
        from mpisgd.protocol import ProtocolStats

        directory = None
        if self.rank == 0:
            directory = checkpoint.newest(self.resume)
            current = self.fingerprint or checkpoint.fingerprint(self.config, self.size, {})
            checkpoint.check(directory, checkpoint.read_manifest(directory), current)
        directory = self.raw.bcast(directory, root=0)
        path = checkpoint.rank_file(directory, self.rank)
        arrays, attrs = checkpoint.read_rank(path)
        t = int(attrs["round"])
        learning = self.rank == 0 or not self.central
        for key, want in (("rank", self.rank), ("ranks", self.size), ("rounds", T),
                          ("source_rows", int(self.source.n_rows)),
                          ("rows_done", self.source.rows_until(t) if learning else 0)):
            if int(attrs[key]) != want:
                raise MpisgdError(f"checkpoint {path}: {key} is {int(attrs[key])}, this run has {want} "
                                  f"(source {self.source.describe})")
        self.learners.load_state_dict({k[len("learners/"):]: v for k, v in arrays.items()
                                       if k.startswith("learners/")})
        c = self.comm
        for name in ("sent_messages", "sent_bytes", "recv_messages", "recv_bytes"):
            getattr(c, name)[...] = arrays[f"comm/{name}"]
        self.timeline.rows = [(int(r[0]), int(r[1]), float(r[2]), *(int(v) for v in r[3:]))
                              for r in arrays["timeline"]]
        times = json.loads(attrs["times"])
        self.compute_seconds, c.seconds = times["compute"], times["communication"]
        self.times_before = {k: times[k] for k in self.times_before}
        if self.rank == 0:
            state = json.loads(attrs["coordinator"])
            self.coordinator.counter = state["counter"]
            self.coordinator.stats = ProtocolStats(**state["stats"])
            self.coordinator.rng.bit_generator.state = state["rng"]
        self.rows_done = int(attrs["rows_done"])
        if learning:
            self.source.seek(t)
        self.resumed = (directory, t)
        return t

    def _boundaries(self, t, T, checking):
        """The next round at which the loop must stop: a check point, a timeline row or T."""
        b = self.config.protocol.period
        stop = T
        if checking:
            stop = min(stop, (t // b + 1) * b)
        every = self.config.timeline_every
        if every:
            stop = min(stop, (t // every + 1) * every)
        return stop

    def _run_sync(self, T, t=0):
        checking = self.config.protocol.name in ("static", "dynamic")
        learning = self.rank == 0 or not self.central
        b = self.config.protocol.period
        every = self.config.timeline_every
        ck = self.checkpointer
        while t < T:
            stop = self._boundaries(t, T, checking)
            if ck is not None:
                stop = min(stop, ck.next_stop(t) or T)
            if learning:
                self._learn(stop)
            t = stop
            if checking and t % b == 0:
                self._check(t)
            if (every and t % every == 0) or t == T:
                self._record(t)
            if ck is not None and t < T and ck.due(t):
                ck.save(t, *self.checkpoint_state(t))
                ck.exit_if_stopping()  # on SIGTERM: every rank ends here (checkpoint.Stopped)
            if self.progress is not None and self.rank == 0:
                self.progress(t, T)
        if T == 0:
            self._record(0)

    def _run_async(self, T):
        """Dynamic protocol without lock-step (module docstring, docs/RUNNING.md)."""
        from mpisgd.comm import FINISH

        b = self.config.protocol.period
        every = self.config.timeline_every
        poll = self.config.poll_rows
        tr = self.transport
        done = 0  # rank 0: followers that have learned their last round
        t = 0
        while t < T:
            stop = min(self._boundaries(t, T, True), (t // poll + 1) * poll)
            self._learn(stop)
            t = stop
            if self.rank == 0:
                done += self._coordinate_async(t, block=False)
            else:
                tr.poll()
            if t % b == 0 and not tr.pending:
                delta = self.coordinator.threshold(t)
                if self.learners.distances()[0] > delta:
                    if self.rank == 0:
                        done += self._coordinate_async(t, block=False, own=True)
                    else:
                        tr.send_violation_async()
            if (every and t % every == 0) or t == T:
                self._record(t)
            if self.progress is not None and self.rank == 0:
                self.progress(t, T)
        if T == 0:
            self._record(0)
        if self.rank == 0:
            # serve violations until every follower is done, then release them
            while done < self.size - 1:
                done += self._coordinate_async(T, block=True)
            self._coordinate_async(T, block=False)
            tr.finish()
        else:
            tr.send_done()
            while tr.handle(self.comm.probe(0)) != FINISH:
                pass
            tr.finish_violation()

    def _coordinate_async(self, t, block, own=False):
        """Rank 0, async: resolve the violations that have arrived (and its own).
        Returns the number of DONE notices received."""
        tr = self.transport
        violators, models, dones = tr.collect_async(block and not own)
        if own:
            violators = [0] + violators
            models = [tr._model()] + models
        if violators:
            tr.serving = True
            self.members = self.coordinator.resolve(t, violators, models, tr)
            tr.serving = False
        return dones

    # -- report -----------------------------------------------------------------------------

    def rank_summary(self):
        io = self.source.io_seconds + self.times_before["io"]
        comm_s = self.comm.seconds
        ck = self.times_before["checkpoint"]
        if self.checkpointer is not None:
            ck += self.checkpointer.time
        return {
            "rank": self.rank,
            "source": self.source.describe,
            "rows": int(self.source.n_rows) if (self.rank == 0 or not self.central) else 0,
            "examples": int(self.learners.examples[0]),
            "loss": float(self.learners.loss_sum[0]),
            "errors": int(self.learners.errors[0]),
            "error_rate": float(self.learners.errors[0] / max(1, self.learners.examples[0])),
            "communication": self.comm.counters(),
            "time": {"compute": self.compute_seconds, "communication": comm_s, "io": io,
                     "wall": self.wall_seconds,
                     "loop": self.loop_seconds,  # the rounds, without the start and the final sync
                     "checkpoint": ck,  # deciding on and writing checkpoints
                     # protocol bookkeeping outside MPI calls (encoding, new references)
                     "other": max(0.0, self.wall_seconds - self.compute_seconds - comm_s - io - ck)},
        }

    def report(self, extra=None):
        """Gather every rank's summary and timeline on rank 0 (raw communicator,
        after the run: not counted). Returns the report dict on rank 0, else None."""
        summaries = self.raw.gather(self.rank_summary(), root=0)
        timeline = self.timeline.as_array()
        gathered = None
        if self.rank == 0:
            gathered = np.empty((self.size,) + timeline.shape, dtype=np.float64)
        self.raw.Gather(np.ascontiguousarray(timeline), gathered, root=0)
        if self.rank != 0:
            return None
        from mpisgd import __version__

        self.merged_timeline = Timeline.summed(list(gathered))
        examples = sum(s["examples"] for s in summaries)
        errors = sum(s["errors"] for s in summaries)
        loss = sum(s["loss"] for s in summaries)
        comm = {side: {c: {key: sum(s["communication"][side][c][key] for s in summaries)
                           for key in ("messages", "bytes")} for c in CATEGORIES}
                for side in ("sent", "received")}
        stats = self.coordinator.stats.as_dict()
        model_messages = stats["model_messages"]
        report = {
            "mpisgd_version": __version__,
            "configuration": {**self.config.as_dict(), "ranks": self.size, "rounds": self.T,
                              "n_features": self.learners.n_features, **(extra or {})},
            "online": {"examples": examples, "loss": loss, "errors": errors,
                       "mean_loss": loss / max(1, examples), "error_rate": errors / max(1, examples)},
            "per_rank": summaries,
            "communication": {
                **comm,
                "total_bytes": sum(v["bytes"] for v in comm["sent"].values()),
                "total_messages": sum(v["messages"] for v in comm["sent"].values()),
                "model_bytes": sum(comm["sent"][c]["bytes"] for c in CATEGORIES if c != "control"),
                "model_messages_paper": {**model_messages, "total": sum(model_messages.values())},
            },
            "protocol": {
                "checks": stats["checks"], "violations": stats["violations"],
                "balancings": stats["balancings"], "augmented": stats["augmented"],
                "full_syncs": {**stats["full_syncs"], "total": sum(stats["full_syncs"].values())},
                "violation_counter": self.coordinator.counter,
            },
            "time": {
                "wall": max(s["time"]["wall"] for s in summaries),
                **{key: {"total": sum(s["time"][key] for s in summaries),
                         "max": max(s["time"][key] for s in summaries)}
                   for key in ("compute", "communication", "io", "checkpoint", "other")},
            },
        }
        ck = self.checkpointer
        if ck is not None or self.resumed is not None:
            report["checkpoints"] = {
                "directory": ck.directory if ck is not None else None,
                "every": ck.every if ck is not None else 0,
                "seconds": ck.seconds if ck is not None else 0.0,
                "written": ck.written if ck is not None else 0,
                "resumed_from": ({"directory": self.resumed[0], "round": self.resumed[1]}
                                 if self.resumed is not None else None),
            }
        return report

    def write_outputs(self, out_dir, report, loss):
        """Rank 0: model.h5, report.json, timeline.csv in ``out_dir``."""
        from mpisgd.metrics import write_report
        from mpisgd.model import LinearModel

        start = time.perf_counter()
        os.makedirs(out_dir, exist_ok=True)
        meta = {"algorithm": f"online-{self.config.protocol.name}",
                "protocol": self.config.protocol.as_dict(), "mode": self.config.mode,
                "ranks": self.size, "rounds": self.T, **{k: v for k, v in self.config.learner.items()
                                                        if isinstance(v, (str, int, float, bool))}}
        LinearModel(self.coef, self.intercept, loss, meta).save(os.path.join(out_dir, "model.h5"))
        self.merged_timeline.write(os.path.join(out_dir, "timeline.csv"))
        report["outputs"] = {"model": os.path.join(out_dir, "model.h5"),
                             "report": os.path.join(out_dir, "report.json"),
                             "timeline": os.path.join(out_dir, "timeline.csv")}
        report["time"]["output_io"] = time.perf_counter() - start
        write_report(os.path.join(out_dir, "report.json"), report)


def _one_blas_thread():
    """One BLAS thread per rank: ranks already fill the cores, and a
    multi-threaded BLAS spinning beside them makes a dense dot product (the
    ‖r‖² of every sync) a thousand times slower on a loaded machine."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def train(comm, source, config, out_dir=None, progress=None, observer=None, extra=None, checkpointer=None,
          resume=None, fingerprint=None):
    """Run distributed online learning; returns (run, report) with the report
    on rank 0 only (None elsewhere). Writes outputs when ``out_dir`` is given.
    ``checkpointer``, ``resume``, ``fingerprint``: see ``Run``."""
    with _one_blas_thread():
        run = Run(comm, source, config, progress=progress, observer=observer, checkpointer=checkpointer,
                  resume=resume, fingerprint=fingerprint)
        try:
            run.run()
        finally:
            source.close()
    report = run.report(extra)
    if out_dir is not None and run.rank == 0:
        run.write_outputs(out_dir, report, config.learner.get("loss", "log"))
    return run, report
