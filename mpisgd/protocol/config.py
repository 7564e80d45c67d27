"""The protocol's configuration: every choice, the mode included, checked
from one table.

``CONSTRAINTS`` gives each parameter of ``ProtocolConfig`` the values it may
take (the way scikit-learn's ``_parameter_constraints`` does); each protocol
class names the parameters it reads (``Protocol.parameters``), and a
parameter that the chosen protocol does not read must keep its default, so
that ``--protocol static --delta 3`` is refused instead of Δ being ignored.
The few constraints between parameters follow in ``_check_combinations``.
Every refusal names the parameter and its option.
"""

import math
import numbers
from dataclasses import asdict, dataclass, fields, replace

from mpisgd.errors import MpisgdError
from mpisgd.protocol.delta import AUTO, PILOT_ROUNDS
from mpisgd.protocol.dynamic import HALF_HEDGE_LEARNERS, auto_hedge
from mpisgd.protocol.registry import REGISTRY

PROTOCOLS = tuple(REGISTRY)  # the names of the protocols (``mpisgd.protocol.registry``)
SILENT = tuple(name for name, protocol in REGISTRY.items() if protocol.silent)  # those that send no model
MODES = ("async", "sync")  # how the dynamic protocol runs: AsyncCoordinator (the default) or CheckPoints
AUGMENTATIONS = ("random-one", "random-double", "farthest")
COUNTER_COUNTS = ("violators", "contacted")
COUNTER_RESETS = ("any-full-sync", "forced-only")
FDA_ESTIMATES = ("linear", "exact")  # exact: the simulator's oracle δ, a diagnostic
# Kamp et al.'s violation counter, or the authors' later DynamicHedgeSync; hedge = AUTO: half with at most
# HALF_HEDGE_LEARNERS learners, where it makes every resolution a full sync, else the counter (§4.5)
HEDGES = (AUTO, "counter", "half")
PACE = 256  # R: rounds between the default mode's pacing barriers (measured: docs/RUNNING.md, "Async and sync modes")
SHARED = "shared"  # node_size = SHARED: the nodes of MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)


# -- the constraints: what one parameter may be ----------------------------------


class Interval:
    """A finite number of ``kind`` (int or float) in [low, high], an end open where
    ``closed`` says so ("both", "left", "right", "neither"); None: unbounded."""

    def __init__(self, kind, low, high, closed="both"):
        self.kind, self.low, self.high, self.closed = kind, low, high, closed

    def __call__(self, value):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            return False
        if self.kind is int and int(value) != value:
            return False
        if not math.isfinite(value):
            return False
        if self.low is not None and (value < self.low or (value == self.low and self.closed in ("right", "neither"))):
            return False
        if self.high is not None and (value > self.high or (value == self.high and self.closed in ("left", "neither"))):
            return False
        return True

    def __str__(self):
        kind = "an integer" if self.kind is int else "a number"
        left = "[" if self.closed in ("both", "left") else "("
        right = "]" if self.closed in ("both", "right") else ")"
        if self.low is None and self.high is None:
            return kind
        if self.high is None:
            return f"{kind} {'>=' if left == '[' else '>'} {self.low}"
        return f"{kind} in {left}{self.low}, {self.high}{right}"


class Options:
    """One of a few values."""

    def __init__(self, values):
        self.values = tuple(values)

    def __call__(self, value):
        return not isinstance(value, bool) and any(value == v and type(value) is type(v) for v in self.values)

    def __str__(self):
        return "one of " + ", ".join(repr(v) for v in self.values)


class Boolean:
    def __call__(self, value):
        return isinstance(value, bool)

    def __str__(self):
        return "True or False"


class Unset:
    """None: the parameter is not given (its protocol's default applies)."""

    def __call__(self, value):
        return value is None

    def __str__(self):
        return "None"


POSITIVE = Interval(float, 0, None, "neither")  # finite and > 0
CONSTRAINTS = {
    "name": [Options(PROTOCOLS)],
    "mode": [Options(MODES), Unset()],
    "period": [Interval(int, 1, None)],
    "delta": [Options((AUTO,)), POSITIVE, Unset()],
    "delta_scale": [POSITIVE, Unset()],
    "pilot_rounds": [Interval(int, 1, None)],
    "budget": [Interval(float, 0, 1, "right"), Unset()],
    "partial": [Interval(float, 0, 1, "right"), Unset()],
    "hedge": [Options(HEDGES)],
    "delta_decay": [Boolean()],
    "augmentation": [Options(AUGMENTATIONS)],
    "counter_counts": [Options(COUNTER_COUNTS)],
    "counter_reset": [Options(COUNTER_RESETS)],
    "counter_limit": [POSITIVE],
    "burst_fraction": [Interval(float, 0, 1)],
    "seed": [Interval(int, None, None)],
    "pace": [Interval(int, 0, None)],
    "theta": [POSITIVE, Unset()],
    "fda_directions": [Interval(int, 0, None), Unset()],
    "fda_estimate": [Options(FDA_ESTIMATES), Unset()],
    "fda_lag": [Options((0, 1)), Unset()],
    "node_size": [Interval(int, 1, None), Options((SHARED,)), Unset()],
    "node_period": [Interval(int, 1, None), Unset()],
}
# the command-line option of each parameter, for messages
OPTIONS = {"name": "--protocol", "seed": "--protocol-seed"}


def option(parameter):
    """``parameter``'s command-line option."""
    return OPTIONS.get(parameter, "--" + parameter.replace("_", "-"))


def refuse(parameter, message):
    """The error of an invalid ``parameter``: named, with its option."""
    return MpisgdError(f"protocol: {parameter} ({option(parameter)}) {message}")


@dataclass(frozen=True)
class ProtocolConfig:
    """Every choice of the protocol, including those the paper leaves open."""

    name: str = "dynamic"
    mode: str = None  # async (the default) or sync, where learners check (dynamic); None: not chosen yet (async)
    period: int = 1  # b: rounds between syncs (static) or checks (dynamic)
    delta: object = None  # Δ, Δ0 when delta_decay, or AUTO (a pilot of pilot_rounds rounds); None: the protocol's
    delta_scale: float = None  # c of the auto rule (auto_delta; None: the rule's own, DELTA_SCALE or RDA_DELTA_SCALE)
    pilot_rounds: int = PILOT_ROUNDS  # P: with delta AUTO, rounds 1..P are unchecked and measure G
    budget: float = None  # F: Δ steered at each full sync toward F times static b=8's bytes (None: off)
    partial: float = None  # θ: a full sync averages only what leaves each ‖w_l − r‖² ≤ θΔ (None: off)
    hedge: str = AUTO  # counter: v ≥ k forces a full sync; half: B doubles until |B| ≥ k/2; AUTO: hedge_of
    delta_decay: bool = False  # Δ_t = Δ0 / √t
    augmentation: str = "random-one"
    counter_counts: str = "violators"  # what adds to the violation counter v
    counter_reset: str = "any-full-sync"  # which full syncs set v ← 0
    counter_limit: float = 1.0  # variant: the counter forces a full sync at v ≥ counter_limit·k (paper: 1)
    burst_fraction: float = 0.0  # variant: ≥ this share of violators at one check → full sync (0 = off)
    seed: int = 0  # the coordinator's random augmentation
    pace: int = PACE  # default mode: a pacing barrier every R rounds, no learner 2R rounds ahead (0: off)
    # fda (variance monitoring, docs/ALGORITHMS.md §8); None = not given (fda's defaults: 1, "linear", 1)
    theta: float = None  # Θ: a full sync when the estimated variance δ̂ exceeds it
    fda_directions: int = None  # J: unit vectors ξ the learners project w − r on
    fda_estimate: str = None  # linear (the bound δ̂) or exact (simulator only)
    fda_lag: int = None  # checks settled one check point later (1, default) or at once (0: a blocking Allreduce)
    # hierarchical synchronization (docs/ALGORITHMS.md §6, "Hierarchical synchronization"); None = flat
    node_size: object = None  # m learners per node, or SHARED (train: the MPI shared-memory nodes)
    node_period: int = None  # b_node: rounds between node averages (None: b); must divide b

    def __post_init__(self):
        for parameter, allowed in CONSTRAINTS.items():
            value = getattr(self, parameter)
            if not any(accepts(value) for accepts in allowed):
                raise refuse(parameter, f"must be {' or '.join(str(a) for a in allowed)}, got {value!r}")
        self._check_parameters_of_protocol()
        for parameter, value in self.protocol.defaults.items():  # the protocol's own values of those not given
            if getattr(self, parameter) is None:
                object.__setattr__(self, parameter, value)
        self._check_combinations()
        if self.node_size is not None and self.node_period is None:
            object.__setattr__(self, "node_period", int(self.period))

    def _check_parameters_of_protocol(self):
        """A parameter the protocol does not read keeps its default."""
        reads = set(self.protocol.parameters) | {"name", "mode"}
        for f in fields(self):
            if f.name not in reads and getattr(self, f.name) != f.default:
                users = [name for name in PROTOCOLS if f.name in protocol_class(name).parameters]
                raise refuse(f.name, f"is a parameter of the {_either(users)} protocol, not of {self.name!r}")

    def _check_combinations(self):
        for parameter in self.protocol.required:
            if getattr(self, parameter) is None:
                raise refuse(parameter, f"is needed by the {self.name} protocol")
        if self.delta == AUTO:
            if self.delta_decay:
                raise refuse("delta_decay", "needs a numeric delta (Δ0), not 'auto'")
        else:
            for parameter in ("delta_scale", "pilot_rounds"):
                if getattr(self, parameter) != _default(parameter):
                    raise refuse(parameter, f"belongs to --delta auto, not to --delta {self.delta!r}")
        if self.partial is not None and self.delta_decay:
            raise refuse("partial", "needs one Δ that every rank knows at a full sync, not delta_decay's Δ_t")
        if self.partial is not None and self.node_size is not None:
            raise refuse("partial", "does not serve hierarchical synchronization (--node-size) yet")
        if self.budget is not None and self.delta_decay:
            raise refuse("budget", "steers the Δ of the dynamic protocol, not with delta_decay")
        if self.node_size is None:
            if self.node_period is not None:
                raise refuse("node_period", "needs --node-size")
            return
        if self.budget is not None:
            raise refuse("budget", "does not steer hierarchical synchronization (--node-size) yet")
        if self.node_period is not None and self.period % self.node_period:
            raise refuse("node_period", f"must divide the period b = {self.period}, got {self.node_period!r}")
        if self.mode == "async" and self.protocol.resolving:
            raise MpisgdError("protocol: hierarchical synchronization (--node-size) of the dynamic protocol runs "
                              "in --mode sync only (the default async mode is not built for it)")

    def as_dict(self):
        return asdict(self)

    def with_mode(self, mode):
        """This configuration in ``mode`` (None: keep its own, or the default async)."""
        mode = mode or self.mode or MODES[0]
        return self if mode == self.mode else replace(self, mode=mode)

    @property
    def protocol(self):
        """The protocol's class (``mpisgd.protocol.registry``)."""
        return protocol_class(self.name)

    @property
    def auto(self):
        """Δ is measured in a pilot (``auto_delta``)."""
        return self.resolving and self.delta == AUTO

    @property
    def resolving(self):
        """dynamic: at a check point every learner tests its local condition
        ‖w_l − r‖² ≤ Δ, and only the violations are resolved (Kamp et al.)."""
        return self.protocol.resolving

    @property
    def central(self):
        """The serial reference: one learner over every stream, nothing communicated."""
        return self.protocol.central

    @property
    def silent(self):
        """The protocol sends no model."""
        return self.protocol.silent

    def checking(self, k):
        """Whether k learners stop every b rounds: for a full sync (static) or a
        check (dynamic, fda). A lone learner never does: the mean of one model
        is that model, so its check or sync could change nothing and would
        only cost time and count bytes that go nowhere."""
        return k > 1 and self.protocol.checks

    def hedge_of(self, k):
        """The hedge among k learners: ``hedge``, or for AUTO the dynamic
        protocol's choice for k (``dynamic.auto_hedge``)."""
        return auto_hedge(k) if self.hedge == AUTO else self.hedge

    def syncs_every_violation(self, k):
        """Whether, among k learners, every resolution of the dynamic protocol
        is a full sync, whatever the models: a violator is beyond Δ by its
        own check, so its balancing set must grow, and with k ≤ 2 it grows to
        everyone, with the half hedge and k ≤ 4 to half the learners. Then no
        violation carries a model (the full sync's Allreduce takes every
        model), and in sync mode a non-zero count of violators is the full
        sync on every rank, with nothing sent to rank 0 (docs/ALGORITHMS.md §4.5)."""
        return self.resolving and (k <= 2 or (self.hedge_of(k) == "half" and k <= HALF_HEDGE_LEARNERS))

    @property
    def monitoring(self):
        """fda: every check is one small reduction of every learner's summary, and a
        full sync follows when the estimated variance exceeds Θ (§8); no coordinator."""
        return self.protocol.monitoring

    @property
    def directions(self):
        """J, the projections each learner keeps (``OnlineLearners(directions=J)``)."""
        return int(self.fda_directions) if self.monitoring else 0

    @property
    def hierarchical(self):
        """Learners average within their node; the node leaders run the protocol (``NodeCheckPoints``)."""
        return self.node_size is not None

    def check_nodes(self, k, node_size):
        """Nodes of node_size learners must split the k learners."""
        if k % node_size:
            raise MpisgdError(f"protocol: --node-size {node_size} does not divide the {k} learners into nodes")

    def asynchronous(self, k):
        """Whether a run of k learners uses the default mode's machinery
        (``AsyncCoordinator``); the mode matters only where learners check."""
        return self.with_mode(None).mode == "async" and self.resolving and k > 1

    def pace_rounds(self, k):
        """R of the pacing barriers of a run of k learners (0: none).
        The default mode's learners never wait for a quiet check, so a fast one
        could run any number of rounds ahead, and a resolution would then
        average models of different rounds (of different targets, on a
        drifting stream). Every R rounds each learner enters a nonblocking
        barrier and goes past the next pace round only once the previous
        barrier has completed: no learner is more than 2R rounds ahead."""
        return int(self.pace) if self.asynchronous(k) else 0


def _either(names):
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _default(parameter):
    return ProtocolConfig.__dataclass_fields__[parameter].default


def protocol_class(name):
    return REGISTRY[name]
