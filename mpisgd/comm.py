"""Counted MPI communication: the only module on the model path that calls mpi4py.

``CountingComm`` wraps a communicator and records, per category of
``mpisgd.wire.CATEGORIES``, the messages and bytes this rank sends and
receives, and the wall time spent inside MPI calls. It offers upper-case
(buffer) calls only, so no model data is ever pickled.

``MPITransport`` is the protocol's transport (``mpisgd.protocol``) over MPI:
on rank 0 the coordinator side (fetch, divergence, distances,
send_balanced, full_sync), on the other ranks the follower side (``serve``
until END), exactly as docs/WIRE.md lays out for ``--mode sync``; plus the
check-point exchange of violations, the static and final Allreduce, and the
non-blocking polling that ``--mode async`` uses (docs/RUNNING.md).

Every rank is one learner: learner l is rank l, and its model lives in an
``OnlineLearners(k=1)`` (index 0 locally).
"""

import time

import numpy as np
from mpi4py import MPI

from mpisgd import wire
from mpisgd.errors import MpisgdError

# Tags of docs/WIRE.md.
VIOLATION, REQUEST, REPLY, BALANCED, NEWREF, COMMAND = 1, 2, 3, 4, 5, 6
# Async mode: a violation carries the number of sync results its sender had
# received, as tag VIOLATION_ASYNC + epoch mod EPOCHS, so that rank 0 can
# drop a violation overtaken by a resolution that already included the sender.
VIOLATION_ASYNC, EPOCHS = 1000, 16384
# Commands (one int64, tag COMMAND).
DIST, FULLSYNC, END, DONE, FINISH = 1, 2, 3, 4, 5

_CAT = {name: i for i, name in enumerate(wire.CATEGORIES)}


class CountingComm:
    """A communicator that counts what it moves, by category.

    Counters (int64 arrays indexed like ``wire.CATEGORIES``): ``sent_messages``,
    ``sent_bytes``, ``recv_messages``, ``recv_bytes``. A point-to-point call
    counts its buffer's size once, on the side that makes it; an Allreduce
    counts its send buffer as sent and its receive buffer as received at every
    rank (docs/WIRE.md). ``seconds`` is the wall time spent in MPI calls.
    """

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        n = len(wire.CATEGORIES)
        self.sent_messages = np.zeros(n, dtype=np.int64)
        self.sent_bytes = np.zeros(n, dtype=np.int64)
        self.recv_messages = np.zeros(n, dtype=np.int64)
        self.recv_bytes = np.zeros(n, dtype=np.int64)
        self.seconds = 0.0

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

    def wait(self, request):
        start = time.perf_counter()
        request.Wait()
        self.seconds += time.perf_counter() - start

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
    Rank 0 calls the coordinator side; the others call ``serve``.
    ``asynchronous`` (async mode) makes model results add the progress a
    learner made since it last sent its model (docs/RUNNING.md).
    """

    def __init__(self, comm, learners, asynchronous=False):
        self.comm = comm
        self.learners = learners
        self.rank = comm.rank
        self.k = comm.size
        self.n = learners.n_features
        self.asynchronous = asynchronous
        self.serving = False  # rank 0: the followers are in serve() and need commands
        # async: the model this rank last sent (violation or reply), and how many
        # sync results (balanced models, new references, full syncs) it has received
        self.last_sent = None
        self.epoch = 0
        self.pending = False  # async: a violation of this rank awaits its resolution
        self.results_sent = np.zeros(self.k, dtype=np.int64)  # rank 0, async: results sent to each rank
        self._requests = []  # (request, buffer) of this rank's violation Isends

    # -- helpers --------------------------------------------------------------

    def _model(self):
        """This rank's model z (dense, dim = n + 2)."""
        return self.learners.models([0])[0]

    def _dense(self):
        """This rank's model as dense [w, b] (n + 1)."""
        coef, intercept = self.learners.weights(0)
        return np.append(coef, intercept)

    def _message(self):
        """This rank's model message; async mode remembers what it sent."""
        buf = self.learners.message(0)
        if self.asynchronous:
            self.last_sent = self._dense()
        return buf

    def _encode(self, z):
        """Model message of z = [u, b, α], relative to the current reference."""
        u = z[: self.n]
        idx = np.flatnonzero(u).astype(np.int32)
        return wire.encode(z[self.n + 1], z[self.n], idx, u[idx], self.n)

    def _take(self, z, new_reference):
        """This rank's learner takes model z (and, with new_reference, r ← z).

        Async mode: the learner keeps the progress it made since it last sent
        its model, w ← w(z) + (w_now − w_sent), so the mean over the balancing
        set is the mean of the models that went into it plus every step taken
        meanwhile (O(n), once per resolution that reaches this rank)."""
        progress = None
        if self.asynchronous and self.last_sent is not None:
            progress = self._dense() - self.last_sent
        if new_reference:
            self.learners.set_reference(z)
        else:
            self.learners.set_models([0], z)
        if progress is not None and progress.any():
            z = self._model()
            z[: self.n + 1] += progress  # u ← u + Δw, b ← b + Δb (α unchanged)
            self.learners.set_models([0], z)
        self._result_received()

    def _result_received(self):
        self.epoch += 1
        self.pending = False
        self.last_sent = None

    # -- collective steps (every rank) ------------------------------------------

    def rows_allreduce(self, rows):
        """T = the longest shard, in rounds (control)."""
        out = np.zeros(1, dtype=np.int64)
        self.comm.Allreduce(_int64(rows), out, MPI.MAX, "control")
        return int(out[0])

    def allreduce_model(self, z=None):
        """Full sync: the mean of every rank's z (dense, 8·(n+2) bytes)."""
        z = self._model() if z is None else np.ascontiguousarray(z, dtype=np.float64)
        total = np.empty_like(z)
        self.comm.Allreduce(z, total, MPI.SUM, "full_sync")
        return total / self.k

    def static_sync(self):
        """Every learner takes the mean model, which becomes r (static protocol)."""
        self.learners.set_reference(self.allreduce_model())
        self._result_received()

    def exchange_violations(self, violating):
        """Check point of the dynamic protocol (sync mode), steps 1–3 of docs/WIRE.md.

        Rank l ≠ 0 Isends its model if ``violating``; everyone learns the number
        of violators. Returns the count, and on rank 0 also the violator ids
        (itself first if it violates, then increasing ranks) and their models z.
        """
        if violating and self.rank != 0:
            buf = self._message()
            self._requests.append((self.comm.Isend(buf, 0, VIOLATION, "violation"), buf))
        count = np.zeros(1, dtype=np.int64)
        self.comm.Allreduce(_int64(int(bool(violating))), count, MPI.SUM, "control")
        count = int(count[0])
        if self.rank != 0:
            return count, None, None
        violators, models = [], []
        if violating:
            violators.append(0)
            models.append(self._model())
        received = {}
        for _ in range(count - len(violators)):
            buf, src, _tag = self.comm.recv_bytes_message(MPI.ANY_SOURCE, VIOLATION, "violation")
            received[src] = self.learners.decode(buf)
        for src in sorted(received):
            violators.append(src)
            models.append(received[src])
        return count, violators, models

    def finish_violation(self):
        """Follower: complete the Isends of its violation messages (rank 0 has
        received them all by the time it sends END or FINISH)."""
        for request, _buf in self._requests:
            self.comm.wait(request)
        self._requests = []

    # -- coordinator side (rank 0) ----------------------------------------------

    def fetch(self, ids):
        """Models z of learners ids: REQUEST to each (balance_request), their replies (balance_reply)."""
        ids = [int(i) for i in ids]
        for i in ids:
            if i != 0:
                self.comm.Send(_int64(i), i, REQUEST, "balance_request")
        out = np.empty((len(ids), self.n + 2), dtype=np.float64)
        for row, i in enumerate(ids):
            if i == 0:
                out[row] = self._model()
            else:
                buf, _src, _tag = self.comm.recv_bytes_message(i, REPLY, "balance_reply")
                out[row] = self.learners.decode(buf)
        return out

    def divergence(self, model):
        return float(self.learners.divergence(np.asarray(model, dtype=np.float64)))

    def distances(self):
        """Every learner's ‖w_l − r‖²: a DIST command and a float64 reply per rank (control)."""
        for i in range(1, self.k):
            self.comm.Send(_int64(DIST), i, COMMAND, "control")
        out = np.empty(self.k, dtype=np.float64)
        out[0] = self.learners.distances()[0]
        value = np.empty(1, dtype=np.float64)
        for i in range(1, self.k):
            self.comm.Recv(value, i, REPLY, "control")
            out[i] = value[0]
        return out

    def send_balanced(self, ids, model, new_reference):
        """Learners ids take ``model`` (balance_result); with new_reference it also becomes r."""
        model = np.asarray(model, dtype=np.float64)
        buf = self._encode(model)
        tag = NEWREF if new_reference else BALANCED
        for i in ids:
            i = int(i)
            self.results_sent[i] += 1
            if i != 0:
                self.comm.Send(buf, i, tag, "balance_result")
        if new_reference or 0 in [int(i) for i in ids]:
            self._take(model, new_reference)

    def full_sync(self):
        """Every learner takes the mean of all models, which becomes r."""
        if self.serving:
            for i in range(1, self.k):
                self.comm.Send(_int64(FULLSYNC), i, COMMAND, "control")
        self.results_sent += 1
        self.static_sync()

    def end(self):
        """Release the followers from serve()."""
        for i in range(1, self.k):
            self.comm.Send(_int64(END), i, COMMAND, "control")

    # -- follower side (ranks ≠ 0) ----------------------------------------------

    def serve(self):
        """Answer rank 0 until END (sync mode)."""
        while self.handle(self.comm.probe(0, MPI.ANY_TAG)) != END:
            pass

    def poll(self):
        """Async mode: answer whatever rank 0 has sent, without waiting.
        Returns FINISH when rank 0 has ended the run."""
        while True:
            found = self.comm.probe(0, MPI.ANY_TAG, block=False)
            if found is None:
                return None
            if self.handle(found) == FINISH:
                return FINISH

    def handle(self, found):
        """Follower: act on one message from rank 0 (already probed as ``found``).
        Returns the command code for COMMAND messages, else None."""
        _src, tag = found
        if tag == REQUEST:
            req = np.empty(1, dtype=np.int64)
            self.comm.Recv(req, 0, REQUEST, "balance_request")
            self.comm.Send(self._message(), 0, REPLY, "balance_reply")
            return None
        if tag in (BALANCED, NEWREF):
            buf, _s, _t = self.comm.recv_bytes_message(0, tag, "balance_result")
            self._take(self.learners.decode(buf), tag == NEWREF)
            return None
        if tag != COMMAND:
            raise MpisgdError(f"rank {self.rank}: unexpected message tag {tag} from rank 0")
        cmd = np.empty(1, dtype=np.int64)
        self.comm.Recv(cmd, 0, COMMAND, "control")
        code = int(cmd[0])
        if code == DIST:
            self.comm.Send(np.array([self.learners.distances()[0]]), 0, REPLY, "control")
        elif code == FULLSYNC:
            self.static_sync()
        return code

    # -- async mode ---------------------------------------------------------------

    def send_violation_async(self):
        """Follower: Isend this rank's model as a violation tagged with its epoch."""
        # drop the requests already completed; never wait here (rank 0 may be
        # waiting for this rank's reply to a balance request)
        self._requests = [(r, b) for r, b in self._requests if not r.Test()]
        buf = self._message()
        tag = VIOLATION_ASYNC + self.epoch % EPOCHS
        self._requests.append((self.comm.Isend(buf, 0, tag, "violation"), buf))
        self.pending = True

    def send_done(self):
        """Follower, async: tell rank 0 this rank has learned its last round."""
        self.comm.Send(_int64(DONE), 0, COMMAND, "control")

    def collect_async(self, block):
        """Rank 0, async: receive the violations and DONE notices that have arrived
        (wait for at least one message when ``block``). Returns (violators, models,
        dones): violations overtaken by a resolution that already included their
        sender are dropped (the sender's pending state was cleared by that result)."""
        violators, models, dones = [], [], 0
        while True:
            found = self.comm.probe(MPI.ANY_SOURCE, MPI.ANY_TAG, block=block and not (violators or dones))
            if found is None:
                break
            src, tag = found
            if tag == COMMAND:
                cmd = np.empty(1, dtype=np.int64)
                self.comm.Recv(cmd, src, COMMAND, "control")
                if int(cmd[0]) != DONE:
                    raise MpisgdError(f"rank 0: unexpected command {int(cmd[0])} from rank {src}")
                dones += 1
            elif tag >= VIOLATION_ASYNC:
                buf, _s, _t = self.comm.recv_bytes_message(src, tag, "violation")
                if (tag - VIOLATION_ASYNC) == self.results_sent[src] % EPOCHS:
                    violators.append(src)
                    models.append(self.learners.decode(buf))
            else:
                raise MpisgdError(f"rank 0: unexpected message tag {tag} from rank {src}")
        order = np.argsort(violators, kind="stable")
        return [violators[i] for i in order], [models[i] for i in order], dones

    def finish(self):
        """Rank 0, async: release the followers from their final serving loop."""
        for i in range(1, self.k):
            self.comm.Send(_int64(FINISH), i, COMMAND, "control")
