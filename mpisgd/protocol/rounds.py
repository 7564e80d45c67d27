"""How one rank's rounds go between its stops, by mode. The engine loop
(``mpisgd.engine.run_rounds``) learns up to ``next_stop`` (``learn``), ends
the pilot there (``end_pilot``), takes the mode's ``step``, a timeline row
(``record``) where the ``schedule`` has one and, where ``checkpoint_due``, a
checkpoint (``checkpoint``) after ``cut``, then ``progress``; at the end the
mode's ``end``. ``Rounds`` holds what the runner's modes share, ``Lockstep``
and ``AsyncRounds`` (``mpisgd.protocol.asynchronous``) the modes; the
simulator has its own (``mpisgd.simulator.SimLockstep``, ``SimDelayed``). ``mpisgd.engine.rounds_of`` picks
the runner's class for a run, the one place the choice is made.

``run``, the learning side each class drives (``mpisgd.runner.Run``): its
``learn(stop)`` and ``learn_until_violation(t, stop)`` (async) of its rows,
``check(t)`` (a sync check point), ``end_pilot(t)``, ``record(t)``,
``state_dict(t)``, ``tell_progress(t)``, ``wait(done, answer)`` (counted as
waiting), and its ``pilot``, ``checkpointer``, ``progress``, ``engine``,
``transport``, ``config``, ``rank`` and ``size``."""


class Rounds:
    """What the runner's modes share: at a stop of the engine loop the run's
    own pilot end, timeline row, checkpoint (after the mode's ``cut``) and
    progress. A mode adds ``next_stop``, ``learn``, ``step``,
    ``checkpoint_due``, ``cut`` and ``end``."""

    def __init__(self, run, schedule):
        self.run, self.schedule, self.checkpointer = run, schedule, run.checkpointer

    def end_pilot(self, t):
        self.run.end_pilot(t)

    def record(self, t):
        self.run.record(t)

    def checkpoint(self, t):
        """This rank's state after round t saved; on SIGTERM every rank ends here (``checkpoint.Stopped``)."""
        self.checkpointer.save(t, self.run.state_dict(t))
        self.checkpointer.exit_if_stopping()

    def progress(self, t):
        if self.run.progress is not None and self.run.rank == 0:
            self.run.progress(t, self.schedule.T)


class Lockstep(Rounds):
    """Sync mode (and every protocol without the default mode): every rank
    stops at each check point of the ``schedule``, where the check begun at
    the last one is settled (``Engine.check``); a checkpoint at any stop the
    ranks agree on (``Checkpointer.due``)."""

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
