"""When things happen in a run of T rounds: the check points (every b rounds;
hierarchical: the node averages every b_node rounds, the leaders' check
points among them), the end of the --delta auto pilot (round P), the default
mode's pacing barriers (every R rounds) and the timeline's rows. The MPI
runner and the simulator stop their learning at ``next_stop`` and ask the
``is_*`` questions after it, so both keep one schedule."""


class Schedule:
    """The rounds of a run of k learners and T rounds under ``config`` (a
    ``ProtocolConfig`` with its mode), a timeline row every ``timeline_every``
    rounds (0: only the last)."""

    def __init__(self, config, k, T, timeline_every=0):
        self.T = int(T)
        self.checking = config.checking(k)  # learners stop every b rounds (a lone learner never does)
        # rounds between the stops of the protocol: check points, or hierarchical node averages
        self.step = int(config.node_period if config.hierarchical else config.period)
        self.pace = config.pace_rounds(k)  # R (0: no pacing barriers)
        self.pilot_end = min(int(config.pilot_rounds), self.T) if config.auto else 0  # Δ set after round P
        self.timeline_every = int(timeline_every)

    @staticmethod
    def _next(t, every):
        """The first multiple of ``every`` after round t."""
        return (t // every + 1) * every

    def next_stop(self, t, protocol=True, pilot=True, pace=False):
        """The first round after t at which the loop must stop: T, a timeline
        row, with ``protocol`` a check point (or node average), with ``pilot``
        the pilot's end (while it lasts), with ``pace`` a pace round."""
        stop = self.T
        if protocol and self.checking:
            stop = min(stop, self._next(t, self.step))
        if self.timeline_every:
            stop = min(stop, self._next(t, self.timeline_every))
        if pilot and t < self.pilot_end:
            stop = min(stop, self.pilot_end)
        if pace and self.pace:
            stop = min(stop, self._next(t, self.pace))
        return stop

    def is_check(self, t):
        """Round t ends at a check point (or, hierarchical, a node average)."""
        return self.checking and t % self.step == 0

    def is_record(self, t):
        """Round t ends with a timeline row."""
        return bool(self.timeline_every and t % self.timeline_every == 0) or t == self.T

    def is_pace(self, t):
        """Round t is a pace round, before the run's last (a pacing barrier)."""
        return bool(self.pace) and t % self.pace == 0 and t < self.T
