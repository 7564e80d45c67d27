"""The default mode (``--mode async``) of the dynamic protocol, as state and
transitions: what every rank decides (``AsyncLearner``: its learner's part in
resolutions, the followers' answers, cuts and pacing), rank 0's
nonblocking resolutions (``AsyncCoordinator``) and a rank's rounds between
its stops (``AsyncRounds``, the runner's loop in this mode,
``mpisgd.protocol.rounds``). The transport
(``mpisgd.comm.MPITransport``) only sends and receives the messages of
docs/WIRE.md."""

import math
import os
import time
from collections import deque

from mpisgd.errors import MpisgdError
from mpisgd.protocol.rounds import Rounds
from mpisgd.wire import BALANCED, CUT, DIST, DONE, EPOCHS, FINISH, FULLSYNC, NEWREF, REQUEST, STOP

# A block's least learning time where rows are cheap and nothing is being resolved: its 10–20 µs of Python and
# kernel dispatch a small part of it; a quiet rank answers rank 0 at most this late (measured: docs/RESULTS.md)
BLOCK_SECONDS = 2e-4


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

    def __init__(self, transport, pace=0):
        self.transport = transport
        self._joined = None  # the epoch in which this learner joined a resolution
        self._violated = None  # the epoch in which it sent its violation
        self._deferred = None  # (ready, action) of a message of rank 0 that waits for a relayed result
        self._cut = None  # the agreement on the round of the cut under way (``transport.agree_round``)
        self.pace = pace  # R: rounds between pace rounds (0: no pacing)
        self._paces = deque()  # (pace round, request) of the pacing barriers this rank started, open, oldest first
        self._reached = None  # the last pace round every rank is known to have reached (set at the first stop)

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
            results, asked = value
            self._defer(lambda: tr.epoch >= results, lambda: self._reply(asked))
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

    def _reply(self, asked):
        """Answer a REQUEST: this learner's model (--partial: on at least the
        coordinates ``asked`` for); a violation of this epoch on its way crossed
        the REQUEST and is the reply."""
        if self.violated:
            return
        self.transport.reply(asked)
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

    def start_paces(self, t, T):
        """At a stop at round t: this rank's part of the pacing barrier of
        every pace round jR ≤ t before T whose barrier it has not started (one
        per pace round, in order, as on every rank), then a test of the open
        ones: MPI moves a nonblocking barrier on only inside MPI calls, so
        this rank's part leaves now, not at its next poll, and the last rank
        to enter finds the barrier complete. Never waits."""
        if not self.pace:
            return
        first = self._reached + self.pace * (len(self._paces) + 1)  # the next pace round without a barrier
        for round_ in range(first, min(t, T - 1) + 1, self.pace):
            self._paces.append((round_, self.transport.pace_barrier()))
        if first <= min(t, T - 1):
            self._test_paces(math.inf)

    def pace_limit(self, t, want):
        """The furthest round up to ``want`` this rank may learn to from round
        t: 2R past the last pace round every rank has reached, which a barrier
        of that round says once it has completed. Tests the open barriers
        only while the bound is below ``want``. Never waits."""
        if not self.pace:
            return want
        if self._reached is None:  # the loop's first stop: a new or resumed run, every rank at round t
            self._reached = t // self.pace * self.pace
        self._test_paces(want)
        return min(want, self._reached + 2 * self.pace)

    def _test_paces(self, want):
        """Take the completed barriers, oldest first, while 2R past the last
        pace round they say every rank has reached is below ``want``."""
        while self._reached + 2 * self.pace < want and self._paces and self.transport.paced(self._paces[0][1]):
            self._reached = self._paces.popleft()[0]

    def end_pace(self):
        """At the end of the run or at a cut, after FINISH (every rank has started
        every pacing barrier before it): complete the open ones."""
        while self._paces:
            round_, barrier = self._paces.popleft()
            self.transport.wait_pace(barrier)
            self._reached = round_

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
    notices) and advances the current resolution (``Coordinator.resolution``)
    as far as it can: the transport's ``start_fetch``, ``start_distances`` and
    ``start_full_sync`` return handles whose ``test()`` says whether the
    answer is in; every other request completes at once. Rank 0 is a member
    of a resolution that fetches its model or syncs in full. A violation whose sender has received a result
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
        if notices:
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
        if not self.queue:
            return False
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


class AsyncRounds(Rounds):
    """The default mode's rounds on one rank (``mpisgd.protocol.rounds``; the
    runner's module docstring and docs/RUNNING.md): a learner checks its local
    condition while it learns and stops at its first violation, which it
    sends (on rank 0: queues) without waiting; after every block of rows
    (``poll_rows``, or where rows are cheap and nothing is being resolved a
    multiple of it of at least ``BLOCK_SECONDS``) it answers rank 0 (rank 0: advances its resolutions). A
    learner in a resolution makes no own checks until the result comes, and
    learns at most ``staleness`` rounds past the round it joined in before it
    waits for it; at its first stop at or past a pace round it enters that
    round's pacing barrier, and it learns at most 2R rounds past the last pace
    round whose barrier has completed. A
    checkpoint is a consistent cut at a round every rank knows
    (--checkpoint-every) or that rank 0 asks the ranks to agree on (a
    time-based or signalled one: the largest round any rank has done)."""

    def __init__(self, run, schedule):
        super().__init__(run, schedule)
        self.transport = run.transport
        self.learner = AsyncLearner(run.transport, schedule.pace)
        self.coordinator = AsyncCoordinator(run.engine.coordinator, self.learner) if run.rank == 0 else None
        self.poll, self.poll_seconds = run.config.poll_rows, run.config.poll_seconds
        self.staleness = run.config.staleness
        self.told = False  # a signalled follower has told rank 0
        self.cut_at = None  # the agreed round of the next cut
        self.violated = None  # the round of this learner's unresolved violation, or at which it joined a resolution
        self.rate = None  # rounds per second of this rank's last block (its polls come every ~poll_seconds)
        self.results = run.transport.epoch  # the results this rank had taken at its last stop

    def next_stop(self, t):
        ck = self.checkpointer
        # a block ends at a multiple of poll_rows: the next, or where rows are cheap and nothing is being
        # resolved the first at least BLOCK_SECONDS of learning away (quiet: no result taken in the last
        # block, none awaited, and on rank 0 no resolution under way or queued)
        polls = 1
        quiet = (self.transport.epoch == self.results and not self.learner.pending
                 and (self.coordinator is None or self.coordinator.idle))
        self.results = self.transport.epoch
        if self.rate is not None and quiet:
            polls = max(1, math.ceil(self.rate * BLOCK_SECONDS / self.poll))
        stop = min(self.schedule.next_stop(t, protocol=False, pilot=self.run.pilot is not None),
                   (t // self.poll + polls) * self.poll)
        if self.rate is not None:  # a slow rank answers within poll_seconds, not poll_rows of its rounds
            stop = min(stop, t + max(1, int(self.rate * self.poll_seconds)))
        if ck is not None and ck.every:
            stop = min(stop, (t // ck.every + 1) * ck.every)
        if self.cut_at is not None:
            stop = min(stop, self.cut_at)
        return self.learner.pace_limit(t, stop)

    def learn(self, t, stop):
        """Learn rounds (t, stop], through the check points while this learner
        is in no resolution; returns the round reached (a violation's)."""
        began, before = time.perf_counter(), t
        if self.learner.pending:  # no own checks until the resolution arrives
            if self.violated is not None:
                stop = min(stop, max(t + 1, self.violated + self.staleness))
            self.run.learn(stop)
            t = stop
        else:
            t, violating = self.run.learn_until_violation(t, stop)
            if violating:
                (self.coordinator or self.learner).violate()
                self.violated = t
        elapsed = time.perf_counter() - began
        if elapsed > 0:
            self.rate = (t - before) / elapsed
        return t

    def answer(self, t):
        """Whatever rank 0 needs or has sent, without waiting."""
        ck, learner = self.checkpointer, self.learner
        self.run.tell_progress(t)
        if self.coordinator is not None:
            self.coordinator.progress(t)
            if (ck is not None and t < self.schedule.T and not learner.cutting
                    and (ck.signalled or self.coordinator.stops or ck.late())):
                learner.start_cut()  # a checkpoint is due: agree on the round of a cut (once no full sync is in flight)
        else:
            learner.poll()
            if ck is not None and ck.signalled and not self.told:
                self.transport.send_stop()
                self.told = True

    def step(self, t):
        learner = self.learner
        self.answer(t)
        # Leave the core at each block's end: with more ranks than cores the ranks a resolution
        # waits for (rank 0, a fetched member) run sooner; a rank with a core of its own goes on at once.
        os.sched_yield()
        if learner.pending and self.violated is None:  # fetched into a resolution (or a full sync) meanwhile
            self.violated = t
        if self.violated is not None and learner.pending and t - self.violated >= self.staleness:
            self.run.wait(lambda: not learner.pending, self.answer, t)  # bounded staleness: the resolution first
        if not learner.pending:
            self.violated = None
        learner.start_paces(t, self.schedule.T)
        if t < self.schedule.T and learner.pace_limit(t, t + 1) <= t:  # 2R ahead: the next pace round's barrier first
            self.run.wait(lambda: learner.pace_limit(t, t + 1) > t, self.answer, t)
        if learner.cutting and self.cut_at is None:  # stop until the cut's round is agreed (≥ every rank's)
            while (cut := learner.cut_round()) is None:
                self.answer(t)
                os.sched_yield()
            self.cut_at = cut

    def checkpoint_due(self, t):
        ck = self.checkpointer
        return t == self.cut_at or (ck is not None and bool(ck.every) and t % ck.every == 0)

    def cut(self, t):
        """The consistent cut at round t, every rank there, before its checkpoint;
        agrees whether any rank was signalled (``Checkpointer.agree_stop``)."""
        learner = self.learner
        self.quiesce(t)
        if learner.cutting:  # a cut agreed on the same round as --checkpoint-every's
            while learner.cut_round() is None:
                pass
        learner.end_cut()
        if self.coordinator is not None:
            self.coordinator.end_cut()
        self.checkpointer.agree_stop(t)
        self.cut_at = self.violated = None

    def quiesce(self, t):
        """Every rank at round t: rank 0 resolves (or drops) every violation
        sent until then, and every result is taken; followers tell rank 0 they
        are done (DONE) and serve until it releases them (FINISH)."""
        self.run.tell_progress(t)
        if self.coordinator is None:
            self.transport.send_done()
            self.learner.serve_until_finish()
        else:
            while self.coordinator.dones < self.run.size - 1 or not self.coordinator.idle:
                self.coordinator.progress(t)
                os.sched_yield()  # as every wait: the followers it waits for may need this core
            self.coordinator.finish()
        self.learner.end_pace()  # every rank has said DONE: it started every pacing barrier before round t

    def end(self, T):
        self.quiesce(T)
        while self.learner.cutting and self.learner.cut_round() is None:  # a cut asked for too late: the run is over
            pass
        self.transport.close()
        self.run.members = self.coordinator.members if self.coordinator is not None else None
