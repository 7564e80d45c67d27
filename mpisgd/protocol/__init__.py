"""Synchronization protocols of Kamp et al. (2014), as pure logic: one home
for each concern of the protocol, and no MPI.

    config.py        ProtocolConfig: every choice, the mode included, checked from one table
    registry.py      the protocols by name; one class each:
    none.py          none, central (no model sent)
    static.py        static: a full sync every b rounds
    dynamic.py       dynamic: local conditions, violations resolved
    fda.py           fda: variance monitoring
    base.py          what a protocol's class says (its parameters, its check point)
    schedule.py      Schedule: when check points, node averages, the pilot's end, pacing and timeline rows come
    checks.py        CheckPoints: the check begun and its settling (sync mode); DelayedCheckPoints: the
                     simulator's default mode (resolutions d rounds late)
    coordinator.py   Coordinator: resolution, hedges, augmentation (rank 0)
    delta.py         Δ: the auto rule's pilot, the budget's steering
    rounds.py        a rank's rounds between the stops of the engine loop, by mode (Lockstep: sync; AsyncRounds:
                     async)
    asynchronous.py  the default mode's state machine: AsyncLearner (every rank), AsyncCoordinator (rank 0),
                     AsyncRounds (its rounds)
    hierarchy.py     NodeCheckPoints: node averages and the leaders' protocol

The MPI runner (``mpisgd.runner`` over ``mpisgd.comm``) and the in-process
simulator (``mpisgd.simulator``) each provide the transport, so both run
exactly this code (docs/ALGORITHMS.md §4, docs/ARCHITECTURE.md).
"""

from mpisgd.protocol.asynchronous import AsyncCoordinator, AsyncLearner, AsyncRounds
from mpisgd.protocol.checks import CheckPoints
from mpisgd.protocol.config import (AUGMENTATIONS, AUTO, CONSTRAINTS, COUNTER_COUNTS, COUNTER_RESETS, FDA_ESTIMATES,
                                    HALF_HEDGE_LEARNERS, HEDGES, MODES, PACE, PROTOCOLS, SHARED, SILENT, ProtocolConfig)
from mpisgd.protocol.coordinator import Coordinator, ProtocolStats, drive
from mpisgd.protocol.delta import (DELTA_SCALE, PILOT_ROUNDS, RDA_DELTA_SCALE, Pilot, auto_delta, pilot_values,
                                   warm_up_protocol)
from mpisgd.protocol.hierarchy import NodeCheckPoints, check_hierarchy_learner
from mpisgd.protocol.registry import REGISTRY
from mpisgd.protocol.rounds import Lockstep
from mpisgd.protocol.schedule import Schedule

__all__ = ["AUGMENTATIONS", "AUTO", "CONSTRAINTS", "COUNTER_COUNTS", "COUNTER_RESETS", "DELTA_SCALE", "FDA_ESTIMATES",
           "HALF_HEDGE_LEARNERS", "HEDGES", "MODES", "PACE", "PILOT_ROUNDS", "PROTOCOLS", "RDA_DELTA_SCALE", "REGISTRY",
           "SHARED", "SILENT", "AsyncCoordinator", "AsyncLearner", "AsyncRounds", "Lockstep", "Schedule", "CheckPoints", "Coordinator", "NodeCheckPoints", "Pilot",
           "ProtocolConfig", "ProtocolStats", "auto_delta", "check_hierarchy_learner", "drive", "pilot_values",
           "warm_up_protocol"]
