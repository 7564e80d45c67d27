"""The default mode (``--mode async``) of the dynamic protocol: rank 0
resolves violations as they arrive and never waits (``AsyncCoordinator``)."""


class AsyncCoordinator:
    """Rank 0's side of ``--mode async``: resolves violations as they arrive,
    one resolution at a time, and never waits.

    ``progress(t)`` takes the violations that have arrived and advances the
    current resolution (``Coordinator.resolution``) as far as it can: the
    transport's ``start_fetch``, ``start_distances`` and ``start_full_sync``
    return handles whose ``test()`` says whether the answer is in; every other
    request completes at once. A violation whose sender has received a result
    since it sent it is dropped: that result already included the sender. A
    current violation of a learner the resolution fetches is that learner's
    reply: it sent its model already, and does not answer the request.
    """

    NONBLOCKING = {"fetch": "start_fetch", "distances": "start_distances", "full_sync": "start_full_sync"}

    def __init__(self, coordinator, transport):
        self.coordinator, self.transport = coordinator, transport
        self.queue = []  # (src, epoch, model) of violations not yet resolved
        self.active = None  # the resolution under way (a generator)
        self.waiting = None  # the handle it waits on
        self.fetched = set()  # the followers whose replies the fetch under way awaits
        self.members = None  # the last balancing set

    @property
    def idle(self):
        return self.active is None and not self.queue

    def violate(self, violation):
        """Rank 0's own violation (src 0, epoch, model)."""
        self.queue.append(violation)

    def progress(self, t):
        """Advance without waiting (t: rank 0's rounds done, for Δ_t)."""
        self.queue.extend(self.transport.collect())
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
        tr = self.transport
        current = sorted(((src, model) for src, epoch, model in self.queue if tr.current(src, epoch)), key=lambda v: v[0])
        self.queue = []
        if not current:
            return False
        self.active = self.coordinator.resolution(t, [s for s, _m in current], [m for _s, m in current])
        return True

    def _violations_of(self, ids):
        """The queued current violations of the followers among ids, taken from the
        queue (and from ``fetched``): {id: model}. Each is its learner's reply to
        the fetch: that learner does not answer its REQUEST (docs/WIRE.md)."""
        tr, ids = self.transport, set(ids) - {0}
        taken = {src: model for src, epoch, model in self.queue if src in ids and tr.current(src, epoch)}
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
                self.queue.extend(self.transport.collect())
                ids, violations = args[0], self._violations_of(args[0])
                self.fetched = {int(i) for i in ids} - {0} - violations.keys()
                args.append(violations)
            if method in self.NONBLOCKING:
                self.waiting = getattr(self.transport, self.NONBLOCKING[method])(*args)
                return
            reply = getattr(self.transport, method)(*args)
