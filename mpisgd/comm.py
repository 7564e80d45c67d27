"""Counted MPI communication: every MPI call of a training run.

``CountingComm`` wraps a communicator and records, per category of
``mpisgd.wire.CATEGORIES``, the messages and bytes this rank sends and
receives, and the wall time spent inside MPI calls. Model data goes through
its upper-case (buffer) calls only, so it is never pickled; the ``*_meta``
calls carry small metadata around a run (shapes, round counts, the report)
and are not counted.

``MPITransport`` is the protocol's transport (``mpisgd.protocol``) over MPI:
on rank 0 the coordinator's requests (fetch, divergence, distances,
send_balanced, send_parts, full_sync), blocking for sync mode and as polled handles for
the default async mode (start_fetch, start_distances, start_full_sync); on
the other ranks the answers (``serve`` until END in sync mode); the
sync-mode check (``begin_check``: violation Isends and a nonblocking
Allreduce of the count; ``end_check``), the static and final Allreduce; and
the messages of the async mode, exactly as docs/WIRE.md lays out: a
follower's ``probe`` and ``receive`` (relayed results and FULLSYNC commands
handed on from member to member), its violations, replies, DONE and STOP,
rank 0's ``collect``, CUT and FINISH, the agreement on a cut's round and the
pacing barriers. What the async mode decides with them (when to answer, a
message deferred behind a relayed result, cuts, pacing) is
``mpisgd.protocol.AsyncLearner``'s.
Hierarchical synchronization (``--node-size``): ``node_communicators`` splits
the ranks into nodes and their leaders, ``NodeTransport`` averages within a
node and shares its leader's results.

Every rank is one learner: learner l is rank l, and its model lives in an
``OnlineLearners(k=1)`` (index 0 locally).
"""

import os
import time
from typing import NamedTuple

import numpy as np
from mpi4py import MPI

from mpisgd import wire
from mpisgd.errors import MpisgdError
from mpisgd.kernels import sync
from mpisgd.wire import (BALANCED, COMMAND, CUT, DIST, DISTANCE, DONE, END, EPOCHS, FINISH, FULLSYNC, NEWREF, REPLY,
                         REQUEST, STOP, VIOLATION, VIOLATION_ASYNC)  # the tags and commands of docs/WIRE.md

_CAT = {name: i for i, name in enumerate(wire.CATEGORIES)}


_COUNTERS = ("sent_messages", "sent_bytes", "recv_messages", "recv_bytes")  # CountingComm's


class CountingComm:
    """A communicator that counts what it moves, by category.

    Counters (int64 arrays indexed like ``wire.CATEGORIES``): ``sent_messages``,
    ``sent_bytes``, ``recv_messages``, ``recv_bytes``. A point-to-point call
    counts its buffer's size once, on the side that makes it; an Allreduce
    counts its send buffer as sent and its receive buffer as received at every
    rank (docs/WIRE.md). ``seconds`` is the wall time spent in MPI calls.
    """

    def __init__(self, comm, counters_of=None):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        n = len(wire.CATEGORIES)
        if counters_of is not None:  # a sub-communicator counted with its parent (the node leaders' in the world's)
            self.sent_messages, self.sent_bytes = counters_of.sent_messages, counters_of.sent_bytes
            self.recv_messages, self.recv_bytes = counters_of.recv_messages, counters_of.recv_bytes
        else:
            self.sent_messages = np.zeros(n, dtype=np.int64)
            self.sent_bytes = np.zeros(n, dtype=np.int64)
            self.recv_messages = np.zeros(n, dtype=np.int64)
            self.recv_bytes = np.zeros(n, dtype=np.int64)
        self.seconds = 0.0

    def state_dict(self):
        """The counters and the seconds (a checkpoint)."""
        return {**{name: getattr(self, name).copy() for name in _COUNTERS}, "seconds": self.seconds}

    def load_state_dict(self, state):
        for name in _COUNTERS:
            getattr(self, name)[...] = state[name]
        self.seconds = float(state["seconds"])

    def _sent(self, category, buf):
        c = _CAT[category]
        self.sent_messages[c] += 1
        self.sent_bytes[c] += buf.nbytes

    def _received(self, category, buf):
        c = _CAT[category]
        self.recv_messages[c] += 1
        self.recv_bytes[c] += buf.nbytes

    def Send(self, buf, dest, tag, category):
        start = time.perf_counter()
        self.comm.Send(buf, dest=dest, tag=tag)
        self.seconds += time.perf_counter() - start
        self._sent(category, buf)

    def Isend(self, buf, dest, tag, category):
        """Non-blocking send; keep ``buf`` alive until the request completes."""
        start = time.perf_counter()
        request = self.comm.Isend(buf, dest=dest, tag=tag)
        self.seconds += time.perf_counter() - start
        self._sent(category, buf)
        return request

    def Recv(self, buf, source, tag, category):
        start = time.perf_counter()
        self.comm.Recv(buf, source=source, tag=tag)
        self.seconds += time.perf_counter() - start
        self._received(category, buf)

    def recv_bytes_message(self, source, tag, category):
        """Receive a message of unknown length (a model message) as uint8.

        Returns (buffer, source, tag)."""
        start = time.perf_counter()
        status = MPI.Status()
        self.comm.Probe(source=source, tag=tag, status=status)
        buf = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
        src, tg = status.Get_source(), status.Get_tag()
        self.comm.Recv(buf, source=src, tag=tg)
        self.seconds += time.perf_counter() - start
        self._received(category, buf)
        return buf, src, tg

    def probe(self, source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, block=True):
        """(source, tag) of the next matching message, or None (block=False, nothing there).
        Probing moves no data and is not counted as a message."""
        start = time.perf_counter()
        status = MPI.Status()
        if block:
            self.comm.Probe(source=source, tag=tag, status=status)
            found = True
        else:
            found = self.comm.Iprobe(source=source, tag=tag, status=status)
        self.seconds += time.perf_counter() - start
        return (status.Get_source(), status.Get_tag()) if found else None

    def Allreduce(self, sendbuf, recvbuf, op, category):
        start = time.perf_counter()
        self.comm.Allreduce(sendbuf, recvbuf, op=op)
        self.seconds += time.perf_counter() - start
        self._sent(category, sendbuf)
        self._received(category, recvbuf)

    def Iallreduce(self, sendbuf, recvbuf, op, category):
        """Nonblocking Allreduce, counted when it starts; keep both buffers alive
        until the request completes."""
        start = time.perf_counter()
        request = self.comm.Iallreduce(sendbuf, recvbuf, op=op)
        self.seconds += time.perf_counter() - start
        self._sent(category, sendbuf)
        self._received(category, recvbuf)
        return request

    def Bcast(self, buf, root, category):
        """buf from root to every rank: one message sent at the root, one
        received at every other rank, of buf's size."""
        start = time.perf_counter()
        self.comm.Bcast(buf, root=root)
        self.seconds += time.perf_counter() - start
        if self.rank == root:
            self._sent(category, buf)
        else:
            self._received(category, buf)

    def Allgather(self, sendbuf, recvbuf, category):
        """Every rank's sendbuf, in rank order, into recvbuf at every rank."""
        start = time.perf_counter()
        self.comm.Allgather(sendbuf, recvbuf)
        self.seconds += time.perf_counter() - start
        self._sent(category, sendbuf)
        self._received(category, recvbuf)

    def Iallgather(self, sendbuf, recvbuf, category):
        """Nonblocking Allgather (uint8 blocks), counted when it starts: the
        block as sent, every rank's blocks as received."""
        start = time.perf_counter()
        request = self.comm.Iallgather(sendbuf, recvbuf)
        self.seconds += time.perf_counter() - start
        self._sent(category, sendbuf)
        self._received(category, recvbuf)
        return request

    def Ibarrier(self, category):
        """Nonblocking barrier: one message of no bytes sent and received at every rank."""
        start = time.perf_counter()
        request = self.comm.Ibarrier()
        self.seconds += time.perf_counter() - start
        self.sent_messages[_CAT[category]] += 1
        self.recv_messages[_CAT[category]] += 1
        return request

    def Dup(self):
        """A duplicate of this communicator, counted with it: its collectives never
        meet this one's, whatever order the ranks start them in."""
        return CountingComm(self.comm.Dup(), counters_of=self)

    def wait(self, request):
        start = time.perf_counter()
        request.Wait()
        self.seconds += time.perf_counter() - start

    def test(self, request):
        """True when ``request`` has completed (never waits)."""
        start = time.perf_counter()
        done = request.Test()
        self.seconds += time.perf_counter() - start
        return done

    # Metadata around a run (shapes, round counts, reports, checkpoints): not model
    # traffic, so not counted.

    def allgather_meta(self, obj):
        return self.comm.allgather(obj)

    def bcast_meta(self, obj, root=0):
        return self.comm.bcast(obj, root=root)

    def gather_meta(self, obj, root=0):
        return self.comm.gather(obj, root=root)

    def Gather_meta(self, sendbuf, recvbuf, root=0):
        self.comm.Gather(sendbuf, recvbuf, root=root)

    def max_meta(self, value):
        return self.comm.allreduce(value, op=MPI.MAX)

    def counters(self):
        """{"sent"|"received": {category: {"messages", "bytes"}}} of this rank."""
        out = {}
        for side, msgs, nbytes in (("sent", self.sent_messages, self.sent_bytes),
                                   ("received", self.recv_messages, self.recv_bytes)):
            out[side] = {name: {"messages": int(msgs[i]), "bytes": int(nbytes[i])}
                         for i, name in enumerate(wire.CATEGORIES)}
        return out

    def bytes_by_category(self):
        """Bytes sent so far, as a dict by category (for the timeline)."""
        return {name: int(self.sent_bytes[i]) for i, name in enumerate(wire.CATEGORIES)}


def _int64(value):
    return np.array([value], dtype=np.int64)


class MPITransport:
    """The protocol's transport over MPI for one rank's learner.

    ``comm``: a CountingComm; ``learners``: this rank's OnlineLearners(k=1).
    Rank 0 (``coordinating``) carries out the coordinator's requests; the
    others answer them (``serve`` in sync mode; in async mode
    ``AsyncLearner.poll`` over ``probe`` and ``receive``).

    A learner remembers the model it last sent (violation, balance reply or
    full-sync contribution): a result that arrives later is applied keeping
    the steps it made since (``OnlineLearners.progress``), so that the
    balancing set's mean is the mean of their current models (docs/WIRE.md).
    """

    def __init__(self, comm, learners, asynchronous=False, violation_models=True):
        self.comm = comm
        self.sequence = wire.SEQUENCE["async" if asynchronous else "sync"]  # what a check point sends
        # whether a violation carries its model (not where every resolution is a full sync:
        # ``ProtocolConfig.syncs_every_violation``); without, an async violation is an empty message
        self.violation_models = violation_models
        self.learners = learners
        learners.first_id = comm.rank  # this rank's learner is learner `rank` of the run (its draws)
        self.rank = comm.rank
        self.k = comm.size
        self.n = learners.n_features
        self.coordinating = self.rank == 0
        self.serving = False  # rank 0, sync mode: the followers are in serve() and need commands
        self.last_sent = None  # z this learner last sent, until a result arrives
        self._sent_step = None  # its step count then, if z was its model exactly (``_sent``)
        self.epoch = 0  # sync results (balanced models, new references, full syncs) received
        self.references = 0  # of which new references (full syncs, balancing sets of everyone)
        self.results_sent = np.zeros(self.k, dtype=np.int64)  # rank 0: results sent to each rank
        self.at = 0  # async: the rounds this learner has done, which it contributes to a cut's agreement
        self.entries = 0  # --budget: the non-zeros of the rows this learner has learned (set with ``at``)
        self._sends = []  # (request, buffer) of nonblocking sends not known to be complete
        self._full_sync = None  # async: this rank's full sync in flight
        self._status = MPI.Status()  # of every poll (``probe``)
        # async: the pacing barriers (``pace_barrier``) on a duplicate communicator, made here
        # while every rank is at the start; None in sync mode
        self._pacing = comm.Dup() if asynchronous else None
        self.steer = None  # --budget: Coordinator.steer, called after every full sync (_full_sync_steps)
        self.partial = None  # --partial: Coordinator.partial_budget, θΔ at every full sync (_partial_steps)
        # a full sync's buffers, kept from sync to sync (``_pairs_steps``; one full sync at a time)
        self._scratch = self._block = self._blocks = None
        self._partial_scratch = None  # --partial: S_l, the probe's, the sum over S (``_partial_steps``)
        self._index_block = self._index_blocks = None  # --partial: this rank's index block, every rank's

    # -- this rank's learner ----------------------------------------------------

    def _model(self):
        """This rank's model z (dense, dim = n + 2)."""
        return self.learners.models([0])[0]

    def _sent(self, z, exact=True):
        """Remember z as the model this learner last sent; ``exact``: z is its
        model itself (not a quantized message), so that while it makes no step
        there is no progress to keep (``_take``)."""
        self.last_sent = z
        self._sent_step = int(self.learners.steps[0]) if exact else None
        return z

    def _budget(self):
        """--partial: θΔ now (model messages are partial, docs/ALGORITHMS.md §4.7); else None."""
        return None if self.partial is None else self.partial()

    def _message(self, asked=None):
        """This rank's model message, remembered as sent: as the receiver
        decodes it, so that a quantized message's rounding error stays in the
        steps this learner keeps (error feedback, docs/WIRE.md). With --partial
        its partial model message (``OnlineLearners.partial_message``), on at
        least the coordinates ``asked`` for."""
        budget = self._budget()
        if budget is not None:
            buf, part = self.learners.partial_message(0, budget, asked)
            self._sent(part, exact=False)
            return buf
        buf = self.learners.message(0)
        exact = self.learners.compress == "none"
        self._sent(self._model() if exact else self.learners.decode(buf), exact)
        return buf

    def _own(self, asked=None):
        """Rank 0: its own model as the coordinator takes it (not sent: exact),
        remembered as sent; with --partial its partial model (``wire.Part``)."""
        budget = self._budget()
        if budget is None:
            return self._sent(self._model())
        return self._sent(self.learners.partial_message(0, budget, asked, local=True)[1], exact=False)

    def _decode(self, buf):
        """A model message received by rank 0: a whole model, or with --partial a partial one."""
        return self.learners.decode(buf) if self._budget() is None else self.learners.decode_partial(buf)

    def _take(self, z, new_reference, total=False):
        """This rank's learner takes model z (with new_reference, r ← z too;
        with total, z is the sum of every rank's model, the mean taken in the
        same pass), keeping the steps it made since it last sent its model."""
        part = isinstance(self.last_sent, wire.Part)  # a partial model sent (docs/ALGORITHMS.md §4.7)
        moved = self.last_sent is not None and not part and self._sent_step != self.learners.steps[0]
        progress = self.learners.progress(0, self.last_sent) if moved else None  # none without a step
        self.references += bool(total or new_reference)
        if total:  # z = (S, the sum): a full sync (S None) or a partial one (docs/ALGORITHMS.md §4.7)
            support, z = z
            if isinstance(z, _PairsSum):  # with steps since, v is no longer 0 off own
                self.learners.set_reference_pairs(z.total, self.k, z.index, z.counts, None if moved else z.own)
            elif support is None:
                self.learners.set_reference_sum(z, self.k)
            else:
                self.learners.set_partial_sum(support, z, self.k)
                if progress is not None:  # off S the model is the current one already: keep the steps on S
                    kept = np.zeros(self.n)
                    kept[support] = progress[0][support]
                    progress = kept, progress[1]
            if progress is not None:
                self.learners.take(0, self._model(), progress)
        elif new_reference:
            self.learners.set_reference(z)
            if progress is not None:
                self.learners.take(0, self._model(), progress)
        elif part:  # a balanced model, taken on the coordinates sent
            self.learners.take_part(0, z, self.last_sent)
        else:
            self.learners.take(0, z, progress)
        self.epoch += 1
        self.last_sent = None

    def _isend(self, buf, dest, tag, category):
        self._sends.append((self.comm.Isend(buf, dest, tag, category), buf))

    def complete_sends(self):
        """Wait for this rank's nonblocking sends (their receivers are known to take them)."""
        for request, _buf in self._sends:
            self.comm.wait(request)
        self._sends = []

    def state_dict(self):
        """What a later result depends on (a checkpoint, nothing in flight):
        the model this learner last sent (empty: none; ``wire.stored``), the results it took
        and, on rank 0, the results sent to each rank."""
        return {"last_sent": np.zeros(0) if self.last_sent is None else wire.stored(self.last_sent),
                "epoch": self.epoch, "results_sent": self.results_sent.copy()}

    def load_state_dict(self, state):
        self.last_sent = wire.restored(state["last_sent"], self.n) if len(state["last_sent"]) else None
        self.epoch = int(state["epoch"])
        self.results_sent[...] = state["results_sent"]

    def prune_sends(self):
        """Forget the nonblocking sends that have completed (never waits)."""
        if self._sends:
            self._sends = [(r, b) for r, b in self._sends if not self.comm.test(r)]

    # -- collective steps (every rank) ------------------------------------------

    def rows_allreduce(self, rows):
        """T = the longest shard, in rounds (control)."""
        out = np.zeros(1, dtype=np.int64)
        self.comm.Allreduce(_int64(rows), out, MPI.MAX, "control")
        return int(out[0])

    def pilot_allgather(self, statistics):
        """--delta auto: this learner's pilot (Σ, rows, non-zeros) to every rank
        (control, wire.PILOT_BYTES each); returns every learner's, in rank order."""
        mine = np.array(statistics, dtype=np.float64)  # rows, non-zeros < 2^53: exact
        every = np.empty(3 * self.k, dtype=np.float64)
        self.comm.Allgather(mine, every, "control")
        return [(float(every[3 * i]), int(every[3 * i + 1]), int(every[3 * i + 2])) for i in range(self.k)]

    def final_mean(self, z):
        """The run's last full sync: the mean of every rank's final model z
        (dense [w, b, 0], 8·(n+2) bytes, exact)."""
        z = np.ascontiguousarray(z, dtype=np.float64)
        total = np.empty_like(z)
        self.comm.Allreduce(z, total, MPI.SUM, "full_sync")
        return total / self.k

    def full_sync(self):
        """Every learner takes the mean of all models, which becomes r (blocking;
        inside a sync-mode resolution rank 0 first commands the serving followers)."""
        if self.serving:
            command = self.sequence["fullsync_command"]
            for i in range(1, self.k):
                self.comm.Send(_int64(command.code), i, command.tag, command.category)
        if self.coordinating:
            self.results_sent += 1
        self.last_sent = None  # every current model goes into the mean
        steps = self._full_sync_steps()
        try:
            while True:
                name, *args = next(steps)
                getattr(self.comm, name)(*args, "full_sync")  # the blocking collective
        except StopIteration as stop:
            self._take(stop.value, True, total=True)

    def _full_sync_steps(self, remember=False):
        """``_sum_steps``, then with --budget the agreement of the bytes sent,
        the rounds done and the non-zeros learned so far (Allreduce,
        wire.BUDGET_BYTES) that every rank steers Δ by (``Coordinator.steer``).
        Returns (S, the sum): S None after a full sync, the union of the
        supports after a partial one (--partial, ``_partial_steps``)."""
        budget = None if self.partial is None else self.partial()
        if budget is None:
            support, total = None, (yield from self._sum_steps(remember))
        else:
            support, total = yield from self._partial_steps(budget, remember)
        if self.steer is not None:
            mine = np.array([float(self.comm.sent_bytes.sum()), float(self.at), float(self.entries)])  # before it
            agreed = np.empty(3)
            yield "Allreduce", mine, agreed, MPI.SUM
            self.steer(agreed[0], agreed[1], agreed[2], self.n)
        return support, total

    def _sum_steps(self, remember=False):
        """This rank's part of a full sync (docs/WIRE.md, "Full syncs"): a
        generator that yields each collective (name, sendbuf, recvbuf[, op]),
        to be completed before it is resumed, blocking or not, and returns the
        sum of every rank's z.
        With remember, this rank's z is remembered as sent (async: the steps
        it makes meanwhile are kept)."""
        L, n, k, compress = self.learners, self.n, self.k, self.learners.compress
        probe = wire.sync_probe_size(n, k, compress)
        if probe and compress == "none":
            return (yield from self._pairs_steps(remember))
        z, nnz, scales = L.sync_parts([0])  # the one pass before the exchange
        if remember:
            self._sent(z[0])
        if probe:  # max nnz (and the shared scales) over ranks
            top = np.empty(probe)
            yield "Allreduce", np.array([nnz[0], *scales[0]])[:probe], top, MPI.MAX
            m, c = int(top[0]), top[1:]
            if wire.sync_pairs(n, k, compress, m):
                block = wire.encode_block(z[0, n + 1], z[0, n], z[0, :n], m)
                blocks = np.empty(k * len(block), dtype=np.uint8)
                yield "Allgather", block, blocks
                return wire.sum_blocks(blocks, n, m)
        if compress == "none":
            total = np.empty(n + 2)
            yield "Allreduce", z[0], total, MPI.SUM
            return total
        q = L.sync_levels([0], z, c, k)[0].astype(wire.sync_dtype(k, compress))
        total = np.empty_like(q)
        yield "Allreduce", q, total, MPI.SUM
        return wire.sync_unlevel(total, c, k, L.r_bias, compress)

    def _pairs_steps(self, remember):
        """``_sum_steps`` uncompressed, with the probe: this rank's non-zeros
        gathered from the coordinates its learner touched (the dense z only
        where it is sent, or remembered: made from the pairs), into buffers
        kept from sync to sync; after a pairs exchange returns a ``_PairsSum``,
        which the new reference is made from in work proportional to the
        non-zeros (``OnlineLearners.set_reference_pairs``)."""
        L, n, k = self.learners, self.n, self.k
        if self._scratch is None:  # pairs of up to n non-zeros, the probe's, the sum, the z remembered,
            self._scratch = (np.empty(n), np.empty(n, dtype=np.int32), np.empty(1), np.empty(1),
                             np.zeros(n + 2), np.empty(n + 2), np.empty(k, np.int64))  # every block's count
        vals, idx, mine, top, total, sent, counts = self._scratch
        nnz, c, bias, alpha = L.sync_pairs(0, vals, idx)
        z = None
        if remember:  # its z, from its pairs (u is 0 off them), until the sync's result is taken
            sync.model_of_pairs(vals[:c], idx[:c], bias, alpha, sent)
            z = self._sent(sent)
        mine[0] = nnz
        yield "Allreduce", mine, top, MPI.MAX
        m = int(top[0])
        if not wire.sync_pairs(n, k, "none", m):
            if z is None:
                z = L.models([0])[0]
            total = np.empty(n + 2)
            yield "Allreduce", z, total, MPI.SUM
            return total
        size = wire.sync_block_nbytes(m)
        if self._blocks is None or len(self._blocks) < k * size:  # grown to the largest exchange so far
            self._blocks = np.empty(2 * k * size, dtype=np.uint8)
            self._block = np.empty(2 * size, dtype=np.uint8)
        block = wire.fill_block(self._block[:size], alpha, bias, vals[:c], idx[:c], m)
        blocks = self._blocks[: k * size]
        yield "Allgather", block, blocks
        try:
            index = wire.add_blocks(blocks, n, m, total, counts)  # total is 0 before, and cleared on U after
        except MpisgdError:
            total[:] = 0.0
            raise
        own = idx[:c] if c == nnz else None  # u_j ≠ 0 only where v_j ≠ 0: then these are all of v's non-zeros
        return _PairsSum(total, index, counts, own)

    def _partial_steps(self, budget, remember):
        """A partial sync (docs/ALGORITHMS.md §4.7, docs/WIRE.md "Partial
        syncs"): this learner's S_l for θΔ = budget; m = max |S_l| (Allreduce
        MAX); the index blocks (Allgather) whose union is S; the sum of
        [(w_l − r)_S, b_l] (Allreduce). Returns (S, that sum), or (None, the
        sum of every z) when the index blocks alone would outweigh a dense sum."""
        L, n, k = self.learners, self.n, self.k
        if self._partial_scratch is None:  # S_l, the probe's, [d_S, b] and its sum, kept from sync to sync
            self._partial_scratch = (np.empty(n, dtype=np.int32), np.empty(1), np.empty(1), np.empty(n + 1),
                                     np.empty(n + 1))
        idx, mine, top, values, total = self._partial_scratch
        c = L.partial_support(0, budget, idx)
        if remember:
            self._sent(self._model())
        mine[0] = c
        yield "Allreduce", mine, top, MPI.MAX
        m = int(top[0])
        if not wire.partial_pays(n, k, m):
            total = np.empty(n + 2)
            yield "Allreduce", (self.last_sent if remember else self._model()), total, MPI.SUM
            return None, total
        size = m + 1
        if self._index_blocks is None or len(self._index_blocks) < k * size:  # grown to the largest exchange so far
            self._index_blocks = np.empty(2 * k * size, dtype=np.int32)
            self._index_block = np.empty(2 * size, dtype=np.int32)
        block = wire.fill_index_block(self._index_block[:size], idx[:c], m)
        blocks = self._index_blocks[: k * size]
        yield "Allgather", block, blocks
        support = wire.union_of_blocks(blocks, n, m)
        s = len(support)
        sent = self.last_sent if remember else None  # async: the model as it was sent, not after the steps since
        L.deviation_on(0, support, values, sent)  # [(w − r)_S, b]
        values[s] = L.bias[0] if sent is None else sent[n]
        yield "Allreduce", values[: s + 1], total[: s + 1], MPI.SUM
        return support, total[: s + 1]

    # -- sync mode: a check begun at one check point, settled at the next --------

    def begin_check(self, delta):
        """Check the local condition ‖w − r‖² ≤ Δ; a violator ≠ 0 Isends its
        model to rank 0, and every rank starts the nonblocking sum of violators."""
        violating = bool(self.learners.distances()[0] > delta)
        own = None
        if violating and self.violation_models:
            if self.coordinating:
                own = self._own()
            else:
                self._isend(self._message(), 0, VIOLATION, "violation")
        flag, count = _int64(int(violating)), np.zeros(1, dtype=np.int64)
        return self.comm.Iallreduce(flag, count, MPI.SUM, self.sequence["count"].category), flag, count, own

    def end_check(self, handle):
        """Complete a check: (count, violators, models); violators and models on
        rank 0 only (itself first if it violated, then increasing ranks), and
        only where violations carry models."""
        request, _flag, count, own = handle
        self.comm.wait(request)
        count = int(count[0])
        if not self.coordinating or not self.violation_models:
            return count, None, None
        violators, models = ([0], [own]) if own is not None else ([], [])
        received = {}
        for _ in range(count - len(violators)):
            buf, src, _tag = self.comm.recv_bytes_message(MPI.ANY_SOURCE, VIOLATION, "violation")
            received[src] = self._decode(buf)
        for src in sorted(received):
            violators.append(src)
            models.append(received[src])
        return count, violators, models

    def begin_variance(self):
        """fda: start the nonblocking sum of this learner's summary
        [‖w − r‖², ⟨w − r, ξ_q⟩ …] (control, ``wire.summary_nbytes``)."""
        summary = np.ascontiguousarray(self.learners.summaries()[0])
        sums = np.empty_like(summary)
        return self.comm.Iallreduce(summary, sums, MPI.SUM, "control"), summary, sums

    def end_variance(self, handle):
        """fda: complete the sum; (sums over learners, None: no exact δ here)."""
        request, _summary, sums = handle
        self.comm.wait(request)
        return sums, None

    def open_resolution(self):
        """Rank 0: the followers now serve until ``close_resolution``."""
        self.serving = True

    def close_resolution(self):
        """Rank 0: END to every follower."""
        end = self.sequence["end"]
        for i in range(1, self.k):
            self.comm.Send(_int64(end.code), i, end.tag, end.category)
        self.serving = False

    def settled(self):
        """After a check's resolution: complete this rank's violation Isends."""
        self.complete_sends()
        self.last_sent = None

    # -- coordinator side, blocking (rank 0, sync mode) -------------------------

    def fetch(self, ids, asked=None):
        """Models z of learners ids: REQUEST to each (balance_request), their replies (balance_reply)."""
        return _wait(self.start_fetch(ids, asked))

    def divergence(self, model):
        return float(self.learners.divergence(np.asarray(model, dtype=np.float64)))

    def distances(self):
        """Every learner's ‖w_l − r‖²: a DIST command and a float64 reply per rank (control)."""
        return _wait(self.start_distances())

    def send_balanced(self, ids, model, new_reference):
        """Learners ids take ``model`` (balance_result); with new_reference it also becomes r.
        Async: relayed to a large set (docs/WIRE.md, "Relays"), so rank 0 sends it once."""
        model = np.asarray(model, dtype=np.float64)
        ids = [int(i) for i in ids]
        others = [i for i in ids if i != 0]
        result = self.sequence["balance_result"]
        tag = NEWREF if new_reference else result.tag
        self.results_sent[ids] += 1
        if others:
            buf = self.learners.encode(0, model)
            if self.learners.compress != "none":
                model = self.learners.decode(buf)  # every member takes the model sent
            if result.route == "relay" and wire.relayed(len(others)):
                self._isend(np.concatenate([buf, wire.relay_trailer(others, self.k)]), others[0], tag,
                            result.category)
            elif result.route == "relay":  # each member's message names it alone: it hands it on to no one
                for i in others:
                    self._isend(np.concatenate([buf, wire.relay_trailer([i], self.k)]), i, tag, result.category)
            else:
                for i in others:
                    self._isend(buf, i, tag, result.category)
        if 0 in ids or new_reference:
            self._take(model, new_reference)
        self.prune_sends()

    def send_parts(self, ids, parts):
        """--partial: each learner of ids takes its own part (``wire.Part``):
        a message of its values on its S_l and b̄ to each (partial_result,
        never relayed: every one differs); rank 0 takes its own exactly."""
        step = self.sequence["partial_result"]
        relay = self.sequence["balance_result"].route == "relay"  # its receiver reads a relay trailer
        for i, part in zip((int(i) for i in ids), parts, strict=True):
            self.results_sent[i] += 1
            if i == 0:
                self._take(part.z, False)
                continue
            buf = self.learners.result_message(0, part)
            if relay:
                buf = np.concatenate([buf, wire.relay_trailer([i], self.k)])
            self._isend(buf, i, step.tag, step.category)
        self.prune_sends()

    # -- coordinator side, nonblocking (rank 0; blocking calls wait on these) ----

    def start_fetch(self, ids, asked=None, violations=None):
        """REQUEST to each learner of ids but 0, carrying the results rank 0 has sent it
        (and with --partial S_B = ``asked``, the coordinates its partial model must carry):
        it replies once it has taken them all (a relayed one may come after the request).
        ``violations`` {id: z}: models of learners that answer otherwise, sent no REQUEST
        (async: a current violation is its learner's reply, ``AsyncCoordinator``); the
        returned handle's ``answer`` takes one that comes later."""
        ids = [int(i) for i in ids]
        violations = violations or {}
        for i in ids:
            if i != 0 and i not in violations:
                self._isend(wire.encode_request(self.results_sent[i], asked), i, REQUEST, "balance_request")
        fetch = _Replies(self, ids, REPLY, "balance_reply", asked)
        for i, z in violations.items():
            fetch.answer(i, z)
        return fetch

    def start_distances(self):
        """DIST to every follower, carrying the results rank 0 has sent it: it
        answers once it has taken them all, as a REQUEST (``start_fetch``)."""
        for i in range(1, self.k):
            self._isend(np.array([DIST, self.results_sent[i]], np.int64), i, COMMAND, "control")
        return _Replies(self, list(range(self.k)), DISTANCE, "control")

    def start_full_sync(self):
        """Async full sync: FULLSYNC to every follower, relayed from rank 1 when
        there are many (docs/WIRE.md, "Relays"), and this rank's part of the
        nonblocking Allreduce; completes through the returned handle. A relayed
        command carries the parity of the results sent to each rank: one
        relayed to it may come after the command, and it joins once taken (at
        most one is ever in flight to a rank: ``handle``)."""
        if wire.relayed(self.k - 1):
            self._isend(wire.fullsync_command(FULLSYNC, self.results_sent & 1), 1, COMMAND, "control")
        else:
            for i in range(1, self.k):
                self._isend(_int64(FULLSYNC), i, COMMAND, "control")
        self.results_sent += 1
        return self._join_full_sync()

    def _join_full_sync(self):
        self._full_sync = _FullSync(self, self._full_sync_steps(remember=True))
        return self._full_sync

    def join_full_sync(self):
        """Follower, async: this rank's part of the full sync rank 0 commanded (FULLSYNC)."""
        self._join_full_sync()

    @property
    def syncing(self):
        """Async: whether this rank's full sync is in flight."""
        return self._full_sync is not None

    def test_full_sync(self):
        """Async: advance this rank's full sync in flight, if any, without waiting."""
        if self._full_sync is not None:
            self._full_sync.test()

    def wait_full_sync(self):
        """Async: complete this rank's full sync in flight, if any."""
        if self._full_sync is not None:
            _wait(self._full_sync)

    # -- follower side: receiving and answering ------------------------------------

    def serve(self):
        """Sync mode: answer rank 0 until END. Its results come before its
        requests, in the order sent: every request finds them taken."""
        while True:
            tag, code, value = self.receive(self.comm.probe(0, MPI.ANY_TAG))
            results = value[0] if tag == REQUEST else value
            if (tag == REQUEST or code == DIST) and results > self.epoch:
                raise MpisgdError(f"rank {self.rank}: a request of rank 0 came before {results - self.epoch} "
                                  "of its results")
            if tag == REQUEST:
                self.reply(value[1])
            elif tag in (BALANCED, NEWREF):
                self.take(value, tag == NEWREF)
            elif code == END:
                return
            elif code == DIST:
                self.send_distance()
            elif code == FULLSYNC:
                self.full_sync()

    def probe(self):
        """(source, tag) of a message that has come (to a follower: from rank 0
        or, async, a member relaying its message; to rank 0: from any
        follower), or None: an Iprobe into a kept status, timed as every MPI
        call (``CountingComm.seconds``), nothing more."""
        start = time.perf_counter()
        found = self.comm.comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, self._status)
        self.comm.seconds += time.perf_counter() - start
        return (self._status.Get_source(), self._status.Get_tag()) if found else None

    def receive(self, found):
        """Follower: receive the message probed as ``found`` (docs/WIRE.md); a
        relayed result or FULLSYNC is handed on at once ("Relays"). Returns
        (tag, command code or None, value): (REQUEST, None, (the results rank 0
        had sent this rank, the coordinates asked for)), (BALANCED or NEWREF, None, the model z), (COMMAND,
        DIST, the results sent), (COMMAND, FULLSYNC, the parity of the results
        sent when relayed, else None), or (COMMAND, code, None)."""
        src, tag = found
        if tag == REQUEST:
            buf, _s, _t = self.comm.recv_bytes_message(0, REQUEST, "balance_request")
            return tag, None, wire.decode_request(buf, self.n)
        if tag in (BALANCED, NEWREF):
            buf, _s, _t = self.comm.recv_bytes_message(src, tag, "balance_result")
            message = buf
            if self.sequence["balance_result"].route == "relay":
                message, onward = wire.relay_result(buf, self.rank, self.k)
                for child, part in onward:
                    self._isend(part, child, tag, "balance_result")
            if isinstance(self.last_sent, wire.Part):  # --partial: its values on the S_l this learner sent
                return tag, None, self.learners.decode_result(message, self.last_sent.support)
            return tag, None, self.learners.decode(message)
        if tag != COMMAND:
            raise MpisgdError(f"rank {self.rank}: unexpected message tag {tag} from rank {src}")
        buf, _s, _t = self.comm.recv_bytes_message(src, COMMAND, "control")
        if len(buf) < 8:
            raise MpisgdError(f"rank {self.rank}: a command of {len(buf)} bytes from rank {src}")
        code = int(buf[:8].view(np.int64)[0])
        if code == DIST:
            if len(buf) != wire.DIST_BYTES:
                raise MpisgdError(f"rank {self.rank}: a DIST command of {len(buf)} bytes from rank {src}")
            return tag, DIST, int(buf[8:16].view(np.int64)[0])
        if code == FULLSYNC and self.sequence["fullsync_command"].route == "relay" and wire.relayed(self.k - 1):
            parity, onward = wire.fullsync_forward(buf, self.rank, self.k)
            for child, part in onward:
                self._isend(part, child, COMMAND, "control")
            return tag, FULLSYNC, parity
        return tag, code, None

    def take(self, z, new_reference):
        """This learner takes the result z received (``_take``)."""
        self._take(z, new_reference)

    def send_distance(self):
        """Answer a DIST: ‖w − r‖² of this learner to rank 0 (control)."""
        self.comm.Send(np.array([self.learners.distances()[0]]), 0, DISTANCE, "control")

    def reply(self, asked):
        """Answer a REQUEST: this learner's model to rank 0 (balance_reply);
        with --partial on at least the coordinates ``asked`` for."""
        self.comm.Send(self._message(asked), 0, REPLY, "balance_reply")

    def send_violation(self):
        """Follower, async: Isend this rank's model (or, without violation
        models, an empty message) as a violation tagged with its epoch."""
        self.prune_sends()  # never wait here: rank 0 may be waiting for this rank's reply
        buf = self._message() if self.violation_models else np.empty(0, dtype=np.uint8)
        self._isend(buf, 0, VIOLATION_ASYNC + self.epoch % EPOCHS, "violation")

    def send_done(self):
        """Follower, async: tell rank 0 this rank has learned its last round (of the run or before a cut)."""
        self.comm.Send(_int64(DONE), 0, COMMAND, "control")

    def send_stop(self):
        """Follower, async: ask rank 0 for a cut, this rank having been signalled to stop."""
        self._isend(_int64(STOP), 0, COMMAND, "control")

    # -- async: barriers and agreements of every rank ---------------------------------

    def pace_barrier(self):
        """Async: this rank's part of a pacing barrier (control: one message, no
        bytes), on the pacing communicator; returns its request."""
        return self._pacing.Ibarrier("control")

    def paced(self, barrier):
        """Whether the pacing ``barrier`` has completed (never waits)."""
        return self._pacing.test(barrier)

    def wait_pace(self, barrier):
        """Complete the pacing ``barrier``."""
        self._pacing.wait(barrier)

    def close(self):
        """After the run's last pacing barrier: free the pacing communicator."""
        if self._pacing is not None:
            self._pacing.comm.Free()
            self._pacing = None

    def send_cut(self):
        """Rank 0, async: CUT to every follower."""
        for i in range(1, self.k):
            self._isend(_int64(CUT), i, COMMAND, "control")

    def agree_round(self):
        """Async: this rank's part of the agreement on a cut's round, the largest
        round any learner has done (``at``); returns (request, agreed)."""
        agreed = np.zeros(1, dtype=np.int64)
        return self.comm.Iallreduce(_int64(self.at), agreed, MPI.MAX, "control"), agreed

    def agreed(self, handle):
        """The round agreed by ``agree_round``'s handle, or None while it travels."""
        request, agreed = handle
        return int(agreed[0]) if self.comm.test(request) else None

    # -- rank 0, async ---------------------------------------------------------------

    def own_model(self):
        """Rank 0, async: its own violation's model, remembered as sent (None without violation models)."""
        return self._own() if self.violation_models else None

    def collect(self):
        """Rank 0, async: the messages of the followers that have arrived, until
        one a pending fetch or distances awaits: violations (src, epoch, model;
        None from an empty message) and the codes of DONE and STOP notices."""
        violations, notices = [], []
        while True:
            found = self.probe()
            if found is None:
                return violations, notices
            src, tag = found
            if tag >= VIOLATION_ASYNC:
                buf, _s, _t = self.comm.recv_bytes_message(src, tag, "violation")
                violations.append((src, tag - VIOLATION_ASYNC, self._decode(buf) if len(buf) else None))
            elif tag == COMMAND:
                cmd = np.empty(1, dtype=np.int64)
                self.comm.Recv(cmd, src, COMMAND, "control")
                code = int(cmd[0])
                if code not in (DONE, STOP):
                    raise MpisgdError(f"rank 0: unexpected command {code} from rank {src}")
                notices.append(code)
            elif tag in (REPLY, DISTANCE):
                return violations, notices  # awaited by a pending fetch or distances: taken there
            else:
                raise MpisgdError(f"rank 0: unexpected message tag {tag} from rank {src}")

    def send_finish(self):
        """Rank 0, async: release the followers from their final serving loop (FINISH)."""
        for i in range(1, self.k):
            self.comm.Send(_int64(FINISH), i, COMMAND, "control")
        self.complete_sends()


# -- hierarchical synchronization (docs/ALGORITHMS.md §6) ----------------------------


def node_communicators(world, node_size):
    """Split the CountingComm ``world`` into nodes: of node_size consecutive
    ranks, or (node_size ``protocol.SHARED``) those of
    MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). Every node must have the same
    size. Returns (node, leaders, m): the node's CountingComm (counted on its
    own: intra-node traffic), on a node leader (its lowest rank) the leaders'
    CountingComm counted with ``world`` (inter-node traffic; None on the other
    ranks), and the node size m. Collective over ``world``."""
    from mpisgd.protocol import SHARED

    raw = world.comm
    if node_size == SHARED:
        node = raw.Split_type(MPI.COMM_TYPE_SHARED, key=world.rank)
    else:
        if world.size % int(node_size):
            raise MpisgdError(f"--node-size {node_size} does not divide the {world.size} ranks into nodes")
        node = raw.Split(world.rank // int(node_size), key=world.rank)
    sizes = world.allgather_meta(node.Get_size())
    if len(set(sizes)) != 1:
        node.Free()
        raise MpisgdError(f"--node-size {node_size}: the nodes have different sizes ({sorted(set(sizes))} ranks); "
                          "hierarchical synchronization needs nodes of one size (give --node-size m)")
    leader = node.Get_rank() == 0
    leaders = raw.Split(0 if leader else MPI.UNDEFINED, key=world.rank)
    return CountingComm(node), (CountingComm(leaders, counters_of=world) if leader else None), sizes[0]


class NodeTransport:
    """One rank's part of its node's steps (``protocol.NodeCheckPoints``) over
    the node's CountingComm: the node average and the sharing of the leader's
    model. ``leaders``: the leaders' MPITransport on the node leader, None on
    the other members. A node of one rank moves nothing."""

    def __init__(self, node, learners, leaders=None):
        self.comm, self.learners, self.leaders = node, learners, leaders
        self.m = node.size
        self.n = learners.n_features
        self._seen = (0, 0)  # the leader's (epoch, references) at its last share

    def average(self):
        """Every member takes the mean of the node's models z (one dense
        Allreduce, wire.dense_nbytes; every member holds the leader's r)."""
        if self.m == 1:
            return
        z = np.ascontiguousarray(self.learners.models([0])[0])
        total = np.empty_like(z)
        self.comm.Allreduce(z, total, MPI.SUM, "full_sync")
        self.learners.set_models([0], total / self.m)

    def share(self):
        """The leader tells its members whether a result changed its model
        (control, 8 bytes: 0 no, 1 the model, 2 the model and a new reference),
        then broadcasts [r, r_b, 0] if 2 and its model z if 1 or 2
        (balance_result, wire.dense_nbytes each); the members take them."""
        if self.m == 1:
            return
        L, n = self.learners, self.n
        flag = np.zeros(1, dtype=np.int64)
        if self.leaders is not None:
            seen, self._seen = self._seen, (self.leaders.epoch, self.leaders.references)
            flag[0] = 2 if self._seen[1] != seen[1] else int(self._seen[0] != seen[0])
        self.comm.Bcast(flag, 0, "control")
        if flag[0] == 2:
            r = np.zeros(n + 2)
            if self.leaders is not None:
                r[:n], r[n] = L.reference
            self.comm.Bcast(r, 0, "balance_result")
            if self.leaders is None:
                L.set_reference(r)  # α = 0: r ← 0·r + r_leader, exactly the leader's r
        if flag[0]:
            z = np.ascontiguousarray(L.models([0])[0])
            self.comm.Bcast(z, 0, "balance_result")
            if self.leaders is None:
                L.set_models([0], z)


def _wait(handle):
    """Block until a nonblocking step completes; returns its value."""
    while True:
        done, value = handle.test()
        if done:
            return value
        os.sched_yield()  # a waiting rank leaves its core to the ranks that must progress


class _Replies:
    """Rank 0: one reply per learner of ``ids`` (rank 0's own answered locally):
    models (balance replies, on the coordinates ``asked`` for) or ‖w_l − r‖² (distances)."""

    def __init__(self, transport, ids, tag, category, asked=None):
        self.tr, self.ids, self.tag, self.category = transport, ids, tag, category
        self.out = [None] * len(ids) if tag == REPLY else np.empty(len(ids), dtype=np.float64)
        self.missing = {}
        for row, i in enumerate(ids):
            if i == 0:  # rank 0's own answer, remembered as sent like any reply
                if tag == REPLY:
                    self.out[row] = transport._own(asked)
                else:
                    self.out[row] = transport.learners.distances()[0]
            else:
                self.missing[i] = row

    def answer(self, i, z):
        """Learner i's model z, come otherwise than as a reply (its violation)."""
        self.out[self.missing.pop(i)] = z

    def test(self):
        tr = self.tr
        for i in list(self.missing):
            if tr.comm.probe(i, self.tag, block=False) is None:
                continue
            row = self.missing.pop(i)
            if self.tag == REPLY:
                buf, _s, _t = tr.comm.recv_bytes_message(i, REPLY, self.category)
                self.out[row] = tr._decode(buf)
            else:
                value = np.empty(1, dtype=np.float64)
                tr.comm.Recv(value, i, self.tag, self.category)
                self.out[row] = value[0]
        if self.missing:
            return False, None
        return True, self.out


class _PairsSum(NamedTuple):
    """The sum of a full sync's pairs blocks (``wire.add_blocks``): total, 0
    off the blocks' indices (index[b, :counts[b]]),
    and this rank's own indices (None: not known to hold all its v's non-zeros)."""

    total: np.ndarray
    index: np.ndarray
    counts: np.ndarray
    own: np.ndarray | None


class _FullSync:
    """This rank's part of an async full sync (``MPITransport._full_sync_steps``,
    one nonblocking collective after another): when the last completes, the
    learner takes the mean as its new reference, keeping its steps since."""

    def __init__(self, transport, steps):
        self.tr, self.steps = transport, steps
        self.request = self._start(next(steps))  # every full sync has a collective

    def _start(self, step):
        name, *args = step
        return getattr(self.tr.comm, "I" + name[0].lower() + name[1:])(*args, "full_sync")  # its nonblocking form

    def test(self):
        tr = self.tr
        if tr._full_sync is not self:
            return True, None
        while tr.comm.test(self.request):
            try:
                self.request = self._start(next(self.steps))
            except StopIteration as stop:
                tr._full_sync = None
                tr._take(stop.value, True, total=True)
                return True, None
        return False, None
