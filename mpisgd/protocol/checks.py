"""What happens at a check point of the deterministic mode, on every rank:
``CheckPoints`` holds the check begun and not yet settled, and hands each
step to the protocol's own class (``mpisgd.protocol.registry``);
``DelayedCheckPoints`` is the simulator's deterministic model of the default
mode, whose resolutions take effect d rounds after their check."""

import numpy as np

from mpisgd import wire


class CheckPoints:
    """What happens at a check point of the deterministic mode (``--mode sync``
    of ``mpisgd train``; the simulator's ``--mode sync``), on every rank.

    - static: a full sync (Allreduce) every b rounds;
    - dynamic: the check of round t is *begun* at t (every learner checks its
      local condition, violators send their models, and a nonblocking sum of
      violators starts) and *settled* at the next check point (or at the end
      of the run), so that the agreement travels while the learners learn b
      more rounds. If anyone violated, rank 0 resolves (``Coordinator``) while
      the others serve it; the violators keep the steps they made since they
      sent (docs/ALGORITHMS.md §4). Where every resolution is a full sync
      (``ProtocolConfig.syncs_every_violation``) nobody sends a model and,
      the count being non-zero, every rank takes part in the full sync at
      once, with no command of rank 0. With ``lagged=False`` a check is settled
      by the rank that coordinates it (``DelayedCheckPoints``, the simulator's
      model of ``--mode async``, settles it when its delay has passed).
    - fda: the same lag for the variance check (docs/ALGORITHMS.md §8): at t
      every rank starts a nonblocking sum of its summary [‖w_l − r‖²,
      ⟨w_l − r, ξ_q⟩ …] (``begin_variance``); at the next check point every
      rank completes it (``end_variance``), computes the same δ̂ and, when
      δ̂ > Θ, takes part in a full sync there. No check is begun right after
      a full sync (every w_l = r then). In either mode; with fda_lag 0 the
      check is settled as soon as it is begun (a blocking Allreduce).
    - none, central: nothing.

    The transport (``MPITransport`` or ``SimTransport``) provides
    ``coordinating``, ``begin_check(Δ)``, ``end_check(handle)``,
    ``open_resolution``/``close_resolution``, ``serve`` and ``settled``, plus
    the coordinator's requests (``Coordinator.resolution``); for fda
    ``begin_variance()`` and ``end_variance(handle)`` -> (sums, exact δ or None).
    """

    due = None  # checks settle at check points: no resolution takes effect between them (``DelayedCheckPoints.due``)

    def __init__(self, coordinator, lagged=True):
        self.coordinator = coordinator
        self.protocol = coordinator.config.protocol  # its class: each step of a check point
        self.lagged = lagged
        self.pending = None  # (t, handle, agreed) of the check begun and not yet settled

    def check(self, t, transport):
        """The check point after round t. Returns the balancing set settled
        here on the coordinating rank (all learners after a full sync), else None."""
        return self.protocol.check(self, t, transport)

    def agree(self, transport):
        """Complete the agreement of the pending check (the resolution waits
        for its check point). Returns (t, *agreed) — dynamic: (t, count,
        violators, models) — or None when no check is pending; a checkpoint
        saves it (``restore``)."""
        if self.pending is None:
            return None
        t, handle, agreed = self.pending
        if agreed is None:
            agreed = self.protocol.agree(transport, handle)
            self.pending = (t, handle, agreed)
        return (t, *agreed)

    def state_dict(self):
        """The pending check once agreed on (``agree``; dynamic: its round and
        count, and on rank 0 the violators and their models), else nothing."""
        if self.pending is None:
            return {}
        t, handle, agreed = self.pending
        if agreed is None:
            raise RuntimeError("CheckPoints.state_dict: the pending check is not agreed on yet (agree first)")
        count, violators, models = agreed
        state = {"pending": np.array([t, count], dtype=np.int64)}
        if violators is not None:  # rank 0, where violations carry models
            state["violators"] = np.asarray(violators, dtype=np.int64)
            state["models"] = np.array([wire.stored(m) for m in models]).reshape(len(violators), -1) if violators \
                else np.zeros((0, 0))
            if violators and isinstance(models[0], wire.Part):  # --partial: [z, ρ, S_l] of n features each
                state["partial"] = np.array([(state["models"].shape[1] - 3) // 2], dtype=np.int64)
        return state

    def load_state_dict(self, state):
        """The pending check as ``state_dict`` gave it (a resumed run)."""
        if "pending" not in state:
            self.pending = None
            return
        t, count = (int(v) for v in state["pending"])
        violators = [int(v) for v in state["violators"]] if "violators" in state else None
        models = list(state["models"]) if "models" in state else None
        if "partial" in state:
            models = [wire.restored(m, int(state["partial"][0])) for m in models]
        self.pending = (t, None, (count, violators, models))

    def settle(self, transport):
        """Settle the pending check, if any (every rank)."""
        agreed = self.agree(transport)
        if agreed is None:
            return None
        self.pending = None
        return self.protocol.settle(self, agreed, transport)


class DelayedCheckPoints(CheckPoints):
    """The simulator's model of the default mode (``--mode async``) of the
    dynamic protocol: a resolution takes effect ``delay`` rounds after the
    check that began it, as ``train``'s does once its messages have travelled
    and the ranks have polled (``mpisgd.protocol.AsyncCoordinator``); it is
    deterministic, the same seed giving the same run. Other protocols are
    checked as by ``CheckPoints``.

    At a check point t (or, ``arrive``, after a round t between check
    points), first the open resolution, if due (begun at t₀ ≤ t − delay), is
    settled: rank 0 resolves it with the violators' models
    as they sent them and the other members' current models, and the
    violators keep the steps they made since they sent (docs/ALGORITHMS.md
    §4), as a late result is taken in ``train``. Then every learner checks,
    except those whose violation is still open (in ``train`` a learner with a
    resolution pending defers its checks). One resolution is under way at a
    time: violations sent while one is open wait for it, and when it settles
    those of learners that took its result are dropped (the result already
    included them; their messages were sent all the same) and the rest begin
    the next resolution, due ``delay`` rounds later. With delay 0 every check
    is settled as soon as it is begun (the paper's instant resolution).

    The transport (``SimTransport``) also provides ``begin_check(Δ,
    deferring)``, ``merge_checks(handles)``, ``results`` (the results each
    learner has taken) and ``sent`` (the models the violators sent)."""

    def __init__(self, coordinator, delay):
        super().__init__(coordinator, lagged=False)
        self.delay = int(delay)
        self.open = None  # (due round, handle) of the resolution under way
        self.queue = []  # (handle, results then) of the violations sent while it is open
        self.at = 0  # the round of the last check point

    def check(self, t, transport):
        if not self.protocol.resolving:
            return super().check(t, transport)
        self.at = t
        members = self._settle_due(t, transport)
        waiting = self._violators()
        handle = transport.begin_check(self.coordinator.threshold(max(t, 1)), waiting)
        if transport.last_count == 0:
            self.coordinator.count_quiet(1)
        elif self.open is None:
            self.open = (t + self.delay, handle)
        else:
            self.queue.append((handle, transport.results.copy()))
        settled = self._settle_due(t, transport)
        return members if settled is None else settled

    @property
    def due(self):
        """The round at which the resolution under way takes effect (``arrive`` there,
        if it is no check point), or None."""
        return None if self.open is None else self.open[0]

    def arrive(self, t, transport):
        """After round t, between check points: the resolutions due by then take
        effect. Returns the last balancing set settled, else None."""
        self.at = t
        return self._settle_due(t, transport)

    def settle(self, transport):
        """At the end of the run: every resolution open or queued, as ``train``'s
        rank 0 resolves or drops every violation sent before it ends."""
        if not self.protocol.resolving:
            return super().settle(transport)
        return self._settle_due(self.at, transport, final=True)

    def _violators(self):
        """The learners whose violation is open or queued (they defer their checks)."""
        handles = ([self.open[1]] if self.open else []) + [h for h, _r in self.queue]
        return {l for h in handles for l in h[0].tolist()}

    def _settle_due(self, t, transport, final=False):
        """Settle at check point t the resolutions due by then (``final``: all);
        returns the last balancing set settled, else None."""
        members = None
        while self.open is not None and (final or self.open[0] <= t):
            queued, self.queue = self.queue, []
            kept = {l: transport.sent[l] for h, _r in queued for l in h[0].tolist() if l in transport.sent}
            self.pending, self.open = (t, self.open[1], None), None
            members = CheckPoints.settle(self, transport)
            # a queued violation is current while its sender has taken no result since it sent it
            current = [(h, [l for l in h[0].tolist() if transport.results[l] == results[l]]) for h, results in queued]
            merged = transport.merge_checks(current)
            if len(merged[0]):
                transport.sent.update((l, kept[l]) for l in merged[0].tolist() if l in kept)
                self.open = (t + self.delay, merged)
            elif merged[2]:
                transport.end_check(merged)  # the dropped violations still reach rank 0
        return members
