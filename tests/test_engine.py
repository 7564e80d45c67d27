"""The engine loop (``mpisgd.engine.run_rounds``), which the MPI runner and the
simulator both run: for the same schedule the runner's rounds in sync mode
(``protocol.rounds.Lockstep``) and the simulator's (``SimLockstep``, fed in
blocks of any size) end the pilot, check and record a timeline row after the
same rounds, in the same order; the simulator's default mode (``SimDelayed``)
paces at the schedule's pace rounds and lets a resolution take effect
``async_delay`` rounds after its check."""

import numpy as np
import pytest

from mpisgd.engine import run_rounds
from mpisgd.protocol import Lockstep, ProtocolConfig, Schedule
from mpisgd.simulator import SimDelayed, SimLockstep, Simulation, make_stream, run_many

LEARNER = {"loss": "log", "eta0": 1.0, "lam": 0.0}
K, N, T = 4, 10, 60


class RecordingRun:
    """The learning side of the runner's ``Lockstep`` (``mpisgd.runner.Run``),
    learning nothing: what the loop asks of it, in order."""

    def __init__(self, pilot_end):
        self.events, self.learned = [], 0
        self.pilot_end = pilot_end
        self.pilot = object() if pilot_end else None
        self.checkpointer = self.progress = None
        self.rank = 0

    def learn(self, stop):
        assert stop > self.learned
        self.learned = stop

    def end_pilot(self, t):
        if self.pilot is not None and t == self.pilot_end:
            self.events.append(("pilot", t))
            self.pilot = None

    def check(self, t):
        self.events.append(("check", t))

    def record(self, t):
        self.events.append(("record", t))


def simulated(config, block, timeline_every):
    """The events of a simulation fed in blocks of ``block`` rounds."""
    events = []
    sim = Simulation(K, N, T, config, LEARNER, timeline_every=timeline_every,
                     network="10gbe" if config.resolving else None)  # an event log: every check point visited
    check, record, end_pilot = sim.check, sim.record, sim.end_pilot

    def ending(t):
        if sim.pilot is not None and t == sim.pilot.end:
            events.append(("pilot", t))
        end_pilot(t)

    sim.check = lambda t: events.append(("check", t)) or check(t)
    sim.record = lambda t: events.append(("record", t)) or record(t)
    sim.end_pilot = ending
    result = run_many(make_stream("disjunction", N, K, 3), T, [sim], block=block)[0]
    return events, result


@pytest.mark.parametrize("protocol, timeline_every", [
    (dict(name="static", period=3), 5),
    (dict(name="dynamic", period=4, delta="auto", pilot_rounds=6, mode="sync"), 7),
    (dict(name="fda", period=5, theta=0.5, mode="sync"), 0),
    (dict(name="static", period=4, node_size=2, node_period=2), 9),  # hierarchical: stops at node averages
    (dict(name="none"), 8),
])
def test_the_runner_and_the_simulator_visit_the_same_stops(protocol, timeline_every):
    config = ProtocolConfig(**protocol)
    run = RecordingRun(config.pilot_rounds if config.auto else 0)
    assert run_rounds(Lockstep(run, Schedule(config, K, T, timeline_every)), 0, T) == T
    assert run.learned == T
    assert ("record", T) in run.events and (not config.checking(K) or ("check", T) in run.events)
    for block in (T, 7, 1):
        events, result = simulated(config, block, timeline_every)
        assert events == run.events, block
        assert result["rounds"] == T


def test_the_simulator_picks_its_rounds_by_the_mode_as_the_runner():
    for mode, cls in (("sync", SimLockstep), ("async", SimDelayed)):
        sim = Simulation(K, N, T, ProtocolConfig(delta=0.5, mode=mode), LEARNER)
        assert type(sim.mode_rounds) is cls
    assert type(Simulation(K, N, T, ProtocolConfig(name="static", mode="async"), LEARNER).mode_rounds) is SimLockstep


def test_the_default_mode_paces_and_resolves_late():
    """SimDelayed: a pacing barrier at every pace round before T, after that
    round's check; a resolution takes effect async_delay rounds after the
    check (or the arrival) that began it, the loop stopping for it between
    check points."""
    delay, pace, b = 3, 8, 2
    sim = Simulation(K, N, T, ProtocolConfig(delta=0.05, period=b, pace=pace), LEARNER, async_delay=delay)
    events = []  # (what, round, the due round after it)
    check, arrive, barrier = sim.check, sim.arrive, sim.transport.pace
    sim.check = lambda t: [check(t), events.append(("check", t, sim.checkpoints.due))][0]
    sim.arrive = lambda t: [arrive(t), events.append(("arrive", t, sim.checkpoints.due))][0]
    sim.transport.pace = lambda: [barrier(), events.append(("pace", sim.t, None))][0]
    run_many(make_stream("disjunction", N, K, 3, 0.05), T, [sim], block=7)
    paced = [i for i, (e, _t, _d) in enumerate(events) if e == "pace"]
    assert [events[i][1] for i in paced] == list(range(pace, T, pace))
    assert all(events[i - 1][:2] == ("check", events[i][1]) for i in paced)
    due, arrivals = None, 0
    for e, t, after in events:
        if e == "arrive":
            assert t == due and t % b, (t, due)  # when due, between check points
            arrivals += 1
        if e != "pace":
            assert after in (None, due, t + delay), (e, t, after, due)
            due = after
    assert arrivals > 0
    announced = {d for _e, _t, d in events if d is not None and d < T}  # later ones: settled at the end
    assert announced <= {t for e, t, _d in events if e != "pace"}  # each took effect at its round
