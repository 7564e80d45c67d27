"""The default mode (``--mode async``) of the dynamic protocol, as state and
transitions: what every rank decides (``AsyncLearner``: its learner's part in
resolutions, the followers' answers, cuts and pacing) and rank 0's
nonblocking resolutions (``AsyncCoordinator``). The transport
(``mpisgd.comm.MPITransport``) only sends and receives the messages of
docs/WIRE.md."""

import os

from mpisgd.errors import MpisgdError
from mpisgd.wire import BALANCED, CUT, DIST, DONE, EPOCHS, FINISH, FULLSYNC, NEWREF, REQUEST, STOP


class AsyncLearner:
    """Every rank's side of ``--mode async`` over its ``transport``.

    Membership: the learner's model is in a resolution under way
    (``pending``) from the moment it violates, replies to a balance request or
    joins a full sync until it takes the next result (the transport's
    ``epoch``, the results taken, moves on): no own checks meanwhile, so that
    the model it last sent stays the one the result is computed from. A
    violation on its way (``violated``) is the reply to a balance request
    that crosses it.

    Deferral: a relayed result can come after a later message of rank 0 (a
    REQUEST or DIST, or a FULLSYNC relayed by another path); such a message
    waits (``_defer``) until this learner has taken every result sent before
    it. At most one result is ever in flight to a learner: rank 0 sends it
    another only once it is a member again, through a current violation (sent
    after taking it) or a reply (given after taking it).
    """

    def __init__(self, transport):
        self.transport = transport
        self._joined = None  # the epoch in which this learner joined a resolution
        self._violated = None  # the epoch in which it sent its violation
        self._deferred = None  # (ready, action) of a message of rank 0 that waits for a relayed result
        self._cut = None  # the agreement on the round of the cut under way (``transport.agree_round``)
        self._pace = None  # the pacing barrier this rank started last, until it completes

    @property
    def pending(self):
        """This learner's model is in a resolution whose result it has not taken."""
        return self._joined == self.transport.epoch

    @property
    def violated(self):
        """Its violation is on its way to rank 0 and no result has come since."""
        return self._violated == self.transport.epoch

    def join(self):
        """This learner is now a member of a resolution: the result will come."""
        self._joined = self.transport.epoch

    def violate(self):
        """Follower: send this learner's violation, tagged with its epoch."""
        self.transport.send_violation()
        self._joined = self._violated = self.transport.epoch

    # -- a follower's answers ----------------------------------------------------

    def poll(self):
        """Follower: answer whatever rank 0 (or a member relaying its message)
        has sent, without waiting. Returns FINISH when rank 0 has ended the run."""
        tr = self.transport
        tr.test_full_sync()
        tr.prune_sends()
        while True:
            found = tr.probe()
            if found is None:
                return None
            if self.handle(found) == FINISH:
                return FINISH

    def handle(self, found):
        """Follower: act on one message (probed as ``found``). Returns its
        command code (None for a message that is not a command)."""
        tr = self.transport
        tr.wait_full_sync()  # rank 0 sends more only once every rank has joined it
        tag, code, value = tr.receive(found)
        if tag == REQUEST:
            self._defer(lambda: tr.epoch >= value, self._reply)
        elif tag in (BALANCED, NEWREF):
            tr.take(value, tag == NEWREF)
            self._release()
        elif code == DIST:
            self._defer(lambda: tr.epoch >= value, tr.send_distance)
        elif code == FULLSYNC and value is None:  # sent directly, after every result sent to this rank
            self._join_full_sync()
        elif code == FULLSYNC:  # relayed: once the results of its parity are taken
            self._defer(lambda: tr.epoch % 2 == value, self._join_full_sync)
        elif code == CUT:
            self._join_cut()
        return code

    def _reply(self):
        """Answer a REQUEST: this learner's model; a violation of this epoch on
        its way crossed the REQUEST and is the reply."""
        if self.violated:
            return
        self.transport.reply()
        self.join()

    def _join_full_sync(self):
        self.transport.join_full_sync()
        self.join()  # no own checks until the mean arrives

    def _defer(self, ready, action):
        """Carry out ``action`` once ``ready()``: now, or when the relayed result
        it waits for has been taken (``_release``)."""
        if self._deferred is not None:
            raise MpisgdError(f"rank {self.transport.rank}: a second message of rank 0 arrived while one waits "
                              "for a relayed result")
        self._deferred = (ready, action)
        self._release()

    def _release(self):
        """Carry out the deferred action if what it waits for has come."""
        if self._deferred is not None and self._deferred[0]():
            action, self._deferred = self._deferred[1], None
            action()

    def serve_until_finish(self):
        """Follower, after its last round: answer rank 0 until FINISH, and until
        the result of its resolution, if one is still being relayed, is taken."""
        while self.poll() != FINISH:
            os.sched_yield()  # a waiting rank leaves its core to the ranks that must progress
        while self.pending:
            self.poll()
            os.sched_yield()
        self.transport.wait_full_sync()
        self.transport.complete_sends()

    # -- pacing: the bound on the round skew (every rank) ------------------------

    def start_pace(self):
        """At a pace round jR: this rank's part of its pacing barrier."""
        self._pace = self.transport.pace_barrier()

    def paced(self):
        """Whether every rank has reached the round of the pacing barrier this
        rank started last (True when none is open). Never waits."""
        if self._pace is not None and self.transport.paced(self._pace):
            self._pace = None
        return self._pace is None

    def end_pace(self):
        """At the end of the run or at a cut, after FINISH (every rank has started
        every pacing barrier before it): complete the last one."""
        if self._pace is not None:
            self.transport.wait_pace(self._pace)
            self._pace = None

    # -- the consistent cut of a checkpoint (every rank) -------------------------

    def start_cut(self):
        """Rank 0: CUT to every follower, and this rank's part of the agreement
        on the cut's round. Not while this rank's full sync is in flight (the
        caller asks again later): its relayed FULLSYNC could reach a follower
        after the CUT, which would then join the two collectives in the other order."""
        if self.transport.syncing:
            return
        self.transport.send_cut()
        self._join_cut()

    def _join_cut(self):
        self.transport.wait_full_sync()  # its collectives before the cut's, in the same order on every rank
        self._cut = self.transport.agree_round()

    @property
    def cutting(self):
        """Whether a cut is being agreed on or awaits its round."""
        return self._cut is not None

    def cut_round(self):
        """The agreed round of the cut under way, or None while the agreement travels."""
        return self.transport.agreed(self._cut)

    def end_cut(self):
        """After the cut's checkpoint: ready for the next one."""
        self._cut = None


class AsyncCoordinator:
    """Rank 0's side of ``--mode async``: resolves violations as they arrive,
    one resolution at a time, and never waits.

    ``learner``: rank 0's ``AsyncLearner``. ``progress(t)`` takes the
    violations that have arrived (and counts the followers' DONE and STOP
    notices) and advances the current resolution (``Coordinator.resolution``) as far as it can: the
    transport's ``start_fetch``, ``start_distances`` and ``start_full_sync``
    return handles whose ``test()`` says whether the answer is in; every other
    request completes at once. A violation whose sender has received a result
    since it sent it is dropped: that result already included the sender. A
    current violation of a learner the resolution fetches is that learner's
    reply: it sent its model already, and does not answer the request.
    """

    NONBLOCKING = {"fetch": "start_fetch", "distances": "start_distances", "full_sync": "start_full_sync"}

    def __init__(self, coordinator, learner):
        self.coordinator, self.learner, self.transport = coordinator, learner, learner.transport
        self.queue = []  # (src, epoch, model) of violations not yet resolved
        self.active = None  # the resolution under way (a generator)
        self.waiting = None  # the handle it waits on
        self.fetched = set()  # the followers whose replies the fetch under way awaits
        self.members = None  # the last balancing set
        self.dones = 0  # followers that have learned their last round (or a cut's)
        self.stops = 0  # followers that were signalled to stop (STOP)

    @property
    def idle(self):
        return self.active is None and not self.queue

    def violate(self):
        """Rank 0's own violation, queued as (src 0, epoch, model)."""
        self.learner.join()
        self.queue.append((0, self.transport.epoch % EPOCHS, self.transport.own_model()))

    def _collect(self):
        """Queue the violations that have arrived; count the notices."""
        violations, notices = self.transport.collect()
        self.queue.extend(violations)
        self.dones += notices.count(DONE)
        self.stops += notices.count(STOP)

    def current(self, src, epoch):
        """A violation is current when its sender had received every result
        sent to it: otherwise a resolution has included the sender since."""
        return epoch == self.transport.results_sent[src] % EPOCHS

    def finish(self):
        """Release the followers from their final serving loop (FINISH)."""
        self.transport.send_finish()

    def end_cut(self):
        """After a cut's checkpoint: no notices yet for the next one."""
        self.dones = self.stops = 0

    def progress(self, t):
        """Advance without waiting (t: rank 0's rounds done, for Δ_t)."""
        self._collect()
        while True:
            if self.waiting is not None:
                for i, z in self._violations_of(self.fetched).items():
                    self.waiting.answer(i, z)
                done, reply = self.waiting.test()
                if not done:
                    return
                self.waiting, self.fetched = None, set()
            elif self.active is None:
                if not self._start(t):
                    return
                reply = None
            self._run(reply)

    def _start(self, t):
        """Begin resolving the current queued violations; False if there are none."""
        current = sorted(((src, model) for src, epoch, model in self.queue if self.current(src, epoch)),
                         key=lambda v: v[0])
        self.queue = []
        if not current:
            return False
        self.active = self.coordinator.resolution(t, [s for s, _m in current], [m for _s, m in current])
        return True

    def _violations_of(self, ids):
        """The queued current violations of the followers among ids, taken from the
        queue (and from ``fetched``): {id: model}. Each is its learner's reply to
        the fetch: that learner does not answer its REQUEST (docs/WIRE.md)."""
        ids = set(ids) - {0}
        taken = {src: model for src, epoch, model in self.queue if src in ids and self.current(src, epoch)}
        if taken:
            self.queue = [v for v in self.queue if v[0] not in taken]
            self.fetched -= taken.keys()
        return taken

    def _run(self, reply):
        """Resume the resolution with ``reply`` and carry out its requests until
        it waits on one or ends."""
        while True:
            try:
                method, *args = self.active.send(reply)
            except StopIteration as stop:
                self.active, self.members = None, stop.value
                return
            if method == "fetch":  # the violations of its learners, come meanwhile too, are their replies
                self._collect()
                ids, violations = args[0], self._violations_of(args[0])
                self.fetched = {int(i) for i in ids} - {0} - violations.keys()
                args.append(violations)
            if method in self.NONBLOCKING:
                self.waiting = getattr(self.transport, self.NONBLOCKING[method])(*args)
                if method == "full_sync" or (method == "fetch" and 0 in {int(i) for i in args[0]}):
                    self.learner.join()  # rank 0 is a member (its model sent): the result will come
                return
            reply = getattr(self.transport, method)(*args)
