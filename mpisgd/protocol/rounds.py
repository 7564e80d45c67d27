"""How one rank's rounds go between its stops, by mode: the runner's one loop
(``mpisgd.runner.Run``) learns up to ``next_stop``, then takes the mode's
``step`` there, a timeline row and, where ``checkpoint_due``, a checkpoint
after ``cut``; at the end the mode's ``end``. ``rounds_of`` picks the mode's
class for a run, the one place the choice is made.

``run``, the learning side each class drives (``mpisgd.runner.Run``): its
``learn(stop)`` and ``learn_until_violation(t, stop)`` (async) of its rows,
``check(t)`` (a sync check point), ``tell_progress(t)``, ``wait(done,
answer)`` (counted as waiting), and its ``pilot``, ``checkpointer``,
``engine``, ``transport``, ``config``, ``rank`` and ``size``."""


def rounds_of(config, k):
    """The class of a run's rounds under ``config`` with k learners: ``AsyncRounds``
    where the protocol runs the default mode (``ProtocolConfig.asynchronous``), else ``Lockstep``."""
    from mpisgd.protocol.asynchronous import AsyncRounds

    return AsyncRounds if config.asynchronous(k) else Lockstep


class Lockstep:
    """Sync mode (and every protocol without the default mode): every rank
    stops at each check point of the ``schedule``, where the check begun at
    the last one is settled (``Engine.check``); a checkpoint at any stop the
    ranks agree on (``Checkpointer.due``)."""

    def __init__(self, run, schedule):
        self.run, self.schedule, self.checkpointer = run, schedule, run.checkpointer

    def next_stop(self, t):
        stop = self.schedule.next_stop(t, pilot=self.run.pilot is not None)
        if self.checkpointer is not None:
            stop = min(stop, self.checkpointer.next_stop(t) or self.schedule.T)
        return stop

    def learn(self, t, stop):
        """Learn rounds (t, stop]; returns the round reached."""
        self.run.learn(stop)
        return stop

    def step(self, t):
        if self.schedule.is_check(t):
            self.run.check(t)

    def checkpoint_due(self, t):
        return self.checkpointer is not None and self.checkpointer.due(t)

    def cut(self, t):
        """Every rank is at round t, the check begun there travelling: nothing to do."""

    def end(self, T):
        self.run.engine.settle(T)  # the last check begun
