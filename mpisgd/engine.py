"""The protocol side of a run and its loop, one for the MPI runner and the simulator.

``run_rounds`` is the engine loop both drive, stop by stop: learn up to the
next stop; at the pilot's end ``end_pilot``; the mode's step there (a check
point: ``Engine.check``); a timeline row; a checkpoint; progress. How each
goes is the rounds object's (``mpisgd.protocol.rounds``: the runner's
``Lockstep`` and ``AsyncRounds``, the simulator's ``SimLockstep`` and
``SimDelayed``); at the end ``settle`` the last check begun. (The runner's
default mode checks inside its learning call and resolves through
``AsyncRounds`` over this ``Coordinator``: no ``check`` or ``settle`` there.)
``Engine`` holds what the protocol needs for that — the ``Coordinator``, the
check points (``CheckPoints``; ``NodeCheckPoints`` with nodes; in the
simulator's default mode ``DelayedCheckPoints``) and the transport they talk
to — built here once, so that the runner (one rank, ``MPITransport``) and the
simulator (k learners, ``SimTransport``) set up and call the protocol alike.
"""

from mpisgd.protocol import AsyncRounds, CheckPoints, Coordinator, Lockstep, NodeCheckPoints
from mpisgd.protocol.checks import DelayedCheckPoints


class Engine:
    """``config``: a ``ProtocolConfig`` (its mode chosen); ``k``: the learners
    the protocol runs between (hierarchical: the nodes); ``transport``: their
    transport (hierarchical: the leaders', None on a rank that leads no node);
    ``nodes``: the node transport (``NodeTransport``, ``NodeSim``) or None;
    ``delay``: None, a check settles at the next check point (sync mode, and
    the MPI runner's checks); else the simulator's model of the default mode,
    a resolution taking effect ``delay`` rounds after its check
    (``DelayedCheckPoints``)."""

    def __init__(self, config, k, transport, nodes=None, delay=None):
        self.config = config
        self.coordinator = Coordinator(config, k)  # resolves on rank 0 only
        self.transport, self.nodes = transport, nodes
        if nodes is not None:
            self.points = NodeCheckPoints(self.coordinator)
        else:
            if delay is None:
                self.points = CheckPoints(self.coordinator)
            else:
                self.points = DelayedCheckPoints(self.coordinator, delay)
            transport.steer = self.coordinator.steer if config.budget else None  # --budget: Δ at full syncs
            # --partial, or --delta auto's choice at the pilot's end: θΔ
            transport.partial = self.coordinator.partial_budget if config.partial or config.auto else None

    def end_pilot(self, world, statistics, learner, n_features):
        """--delta auto, after round P on every rank: the pilot's ``statistics``
        of this side's learners to every rank (``world.pilot_allgather``), and
        Δ from every learner's (``Coordinator.set_auto_delta``)."""
        return self.coordinator.set_auto_delta(world.pilot_allgather(statistics), learner, n_features)

    def check(self, t):
        """The check point after round t (Δ_t of t ≥ 1). Returns the balancing
        set settled here on the coordinating rank, else None."""
        if self.nodes is not None:
            return self.points.check(t, self.nodes, self.transport)
        return self.points.check(max(t, 1), self.transport)

    def settle(self, t):
        """The last check begun, at the end of the run after round t."""
        if self.nodes is not None:
            return self.points.settle(t, self.nodes, self.transport)
        return self.points.settle(self.transport)


def rounds_of(config, k):
    """The class of an MPI run's rounds under ``config`` with k learners:
    ``AsyncRounds`` where the protocol runs the default mode
    (``ProtocolConfig.asynchronous``), else ``Lockstep``; the one place the
    runner's mode is chosen (the simulator's counterpart: ``Simulation``)."""
    return AsyncRounds if config.asynchronous(k) else Lockstep


def run_rounds(rounds, t, stop):
    """The engine loop: rounds (t, stop] of a run, stop by stop — the runner's
    (``Run._rounds``: one rank's rows, from 0 or a resumed round to T) and the
    simulator's (``Simulation.feed``: a block of every learner's rows, t to
    t + m). Learn up to the next stop; at the pilot's end, Δ; the mode's step
    there (a check point, a resolution taking effect, the async mode's
    answers and waits, a pacing barrier); a timeline row where the schedule
    has one; a checkpoint where one is due, after the mode's cut; progress.
    ``rounds`` says how each goes (``mpisgd.protocol.rounds``); its
    ``end(T)`` is the caller's. Returns the round reached, stop."""
    schedule = rounds.schedule
    while t < stop:
        t = rounds.learn(t, min(rounds.next_stop(t), stop))
        rounds.end_pilot(t)  # Δ before any check it applies to (t ≥ P); async: nothing is in flight before P
        rounds.step(t)
        if schedule.is_record(t):
            rounds.record(t)
        if t < schedule.T and rounds.checkpoint_due(t):
            rounds.cut(t)  # async: every rank at round t, nothing in flight
            rounds.checkpoint(t)
        rounds.progress(t)
    return t
