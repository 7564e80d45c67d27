"""Synchronization protocols of Kamp et al. (2014), as pure logic.

The coordinator's decisions are written once, here, against a small
transport interface; the MPI runner (``mpisgd.comm``) and the in-process
simulator (``mpisgd.simulator``) each implement the transport, so both run
exactly this code (docs/ALGORITHMS.md §4).

A model is a vector of dimension d in whatever linear coordinates the
transport chooses (dense w and bias; or, as the MPI runner and the simulator
do, coordinates relative to the reference model r, docs/ALGORITHMS.md §5). The
protocol only averages models and asks the transport for distances, so it
never depends on that choice. Learners check the local condition
‖w_l − r‖² ≤ Δ_t themselves (in O(1), see ``mpisgd.kernels.online``); the
coordinator sees only the violators and whatever it asks for.

Transport interface (the coordinator side; the transport counts every call
in its byte counters, by category):

    fetch(ids) -> (len(ids), d) array       balance request + balance reply:
                                            the current models of learners ids
    divergence(model) -> float              ‖w − r‖² of a model (no communication)
    distances() -> (k,) array               control: every learner's ‖w_l − r‖²
                                            (only the farthest-first strategy asks)
    send_balanced(ids, model, new_reference)
                                            balance result: learners ids take
                                            `model`; with new_reference=True
                                            (ids = all) it also becomes r
    full_sync()                             full sync (Allreduce): every learner
                                            takes the mean of all models, which
                                            becomes r
    final_mean(z) -> mean                   the run's last Allreduce, of final models

The decisions of a resolution are written once, as the generator
``Coordinator.resolution``; ``drive`` runs it against a blocking transport
(sync mode, the simulator), ``AsyncCoordinator`` against a nonblocking one
(the default mode: ``collect``, ``current`` and ``start_fetch``,
``start_distances``, ``start_full_sync``, whose handles are polled).
``CheckPoints`` is what happens at a check point in sync mode, on every rank
(``coordinating``, ``begin_check``, ``end_check``, ``open_resolution``,
``close_resolution``, ``serve``, ``settled``). ``NodeCheckPoints`` is the
hierarchical variant (``--node-size``): node averages, ``CheckPoints`` between
the node leaders, and their results shared in the nodes.
"""

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from mpisgd.errors import MpisgdError

PROTOCOLS = ("none", "static", "dynamic", "central", "fda")
SILENT = ("none", "central")  # the protocols that send no model
MODES = ("async", "sync")  # how the dynamic protocol runs: CheckPoints (sync) or AsyncCoordinator
AUGMENTATIONS = ("random-one", "random-double", "farthest")
COUNTER_COUNTS = ("violators", "contacted")
COUNTER_RESETS = ("any-full-sync", "forced-only")
FDA_ESTIMATES = ("linear", "exact")  # exact: the simulator's oracle δ, a diagnostic
AUTO = "auto"  # delta = AUTO: Δ measured in a pilot (``auto_delta``, docs/ALGORITHMS.md §4.4); hedge = AUTO
# Kamp et al.'s violation counter, or the authors' later DynamicHedgeSync; AUTO: half with at most
# HALF_HEDGE_LEARNERS learners, where it makes every resolution a full sync, else the counter (§4.5)
HEDGES = (AUTO, "counter", "half")
HALF_HEDGE_LEARNERS = 4  # the most learners at which doubling a lone violator reaches half of them (4·1 ≥ k)
DELTA_SCALE = 3.6  # c of the auto rule Δ = c·η·√(η·G) (measured: docs/ALGORITHMS.md §4.4)
RDA_DELTA_SCALE = 0.006  # c of the rda learners' rule Δ = c·η²·G (measured: docs/ALGORITHMS.md §4.4)
PILOT_ROUNDS = 8  # P: rounds of the pilot (unchecked: kept short, docs/ALGORITHMS.md §4.4)
PACE = 256  # R: rounds between the default mode's pacing barriers (measured: docs/RUNNING.md, "Pacing")
SHARED = "shared"  # node_size = SHARED: the nodes of MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)


@dataclass(frozen=True)
class ProtocolConfig:
    """Every choice of the protocol, including those the paper leaves open."""

    name: str = "dynamic"
    period: int = 1  # b: rounds between syncs (static) or checks (dynamic)
    delta: object = 1.0  # Δ, or Δ0 when delta_decay, or AUTO (measured in a pilot of pilot_rounds rounds)
    delta_scale: float = None  # c of the auto rule (auto_delta; None: the rule's own, DELTA_SCALE or RDA_DELTA_SCALE)
    pilot_rounds: int = PILOT_ROUNDS  # P: with delta AUTO, rounds 1..P are unchecked and measure G
    budget: float = None  # F: Δ steered at each full sync toward F times static b=8's bytes (None: off)
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
        if self.name not in PROTOCOLS:
            raise MpisgdError(f"protocol: unknown name {self.name!r}; choose one of {', '.join(PROTOCOLS)}")
        if int(self.period) != self.period or self.period < 1:
            raise MpisgdError(f"protocol: the period b must be an integer >= 1, got {self.period!r}")
        if self.delta != AUTO:
            if isinstance(self.delta, str) or not (math.isfinite(self.delta) and self.delta > 0):
                if self.name == "dynamic":
                    raise MpisgdError(f"protocol: the divergence threshold delta must be > 0 or 'auto', "
                                      f"got {self.delta!r}")
        elif self.delta_decay and self.name == "dynamic":
            raise MpisgdError("protocol: delta_decay needs a numeric delta (Δ0), not 'auto'")
        if self.delta_scale is not None and not (math.isfinite(self.delta_scale) and self.delta_scale > 0):
            raise MpisgdError(f"protocol: delta_scale (c of --delta auto) must be > 0, got {self.delta_scale!r}")
        if int(self.pilot_rounds) != self.pilot_rounds or self.pilot_rounds < 1:
            raise MpisgdError(f"protocol: pilot_rounds must be an integer >= 1, got {self.pilot_rounds!r}")
        if self.budget is not None:
            if isinstance(self.budget, str) or not (math.isfinite(self.budget) and 0 < self.budget <= 1):
                raise MpisgdError(f"protocol: budget (--budget F, a fraction of static b=8's bytes) must be in "
                                  f"(0, 1], got {self.budget!r}")
            if self.name != "dynamic" or self.delta_decay:
                raise MpisgdError("protocol: budget steers the Δ of the dynamic protocol (without delta_decay)")
        for value, allowed, what in (
            (self.augmentation, AUGMENTATIONS, "augmentation"),
            (self.counter_counts, COUNTER_COUNTS, "counter_counts"),
            (self.counter_reset, COUNTER_RESETS, "counter_reset"),
            (self.hedge, HEDGES, "hedge"),
        ):
            if value not in allowed:
                raise MpisgdError(f"protocol: unknown {what} {value!r}; choose one of {', '.join(allowed)}")
        if not (math.isfinite(self.counter_limit) and self.counter_limit > 0):
            raise MpisgdError(f"protocol: counter_limit must be > 0, got {self.counter_limit!r}")
        if int(self.pace) != self.pace or self.pace < 0:
            raise MpisgdError(f"protocol: pace (rounds between pacing barriers) must be an integer >= 0, "
                              f"got {self.pace!r}")
        if not 0.0 <= self.burst_fraction <= 1.0:
            raise MpisgdError(f"protocol: burst_fraction must be in [0, 1], got {self.burst_fraction!r}")
        self._check_fda()
        self._check_nodes()

    def _check_nodes(self):
        if self.node_size is None:
            if self.node_period is not None:
                raise MpisgdError("protocol: node_period (--node-period) needs --node-size")
            return
        if self.node_size != SHARED and (isinstance(self.node_size, (str, bool)) or int(self.node_size) != self.node_size
                                         or self.node_size < 1):
            raise MpisgdError(f"protocol: node_size (--node-size) must be an integer >= 1 or {SHARED!r}, "
                              f"got {self.node_size!r}")
        if self.name not in ("static", "dynamic"):
            raise MpisgdError(f"protocol: hierarchical synchronization (--node-size) runs the static or dynamic "
                              f"protocol between node leaders, not {self.name!r}")
        if self.budget is not None:
            raise MpisgdError("protocol: --budget does not steer hierarchical synchronization (--node-size) yet")
        if self.node_period is None:
            object.__setattr__(self, "node_period", int(self.period))
        if (isinstance(self.node_period, bool) or int(self.node_period) != self.node_period or self.node_period < 1
                or self.period % self.node_period):
            raise MpisgdError(f"protocol: node_period (--node-period) must be an integer >= 1 that divides the "
                              f"period b = {self.period}, got {self.node_period!r}")

    def _check_fda(self):
        names = ("theta", "fda_directions", "fda_estimate", "fda_lag")
        given = [name for name in names if getattr(self, name) is not None]
        if self.name != "fda":
            if given:
                raise MpisgdError(f"protocol: {', '.join(given)} belong to the fda protocol, not {self.name!r}")
            return
        if self.theta is None or not (math.isfinite(self.theta) and self.theta > 0):
            raise MpisgdError(f"protocol: fda needs a variance threshold theta > 0, got {self.theta!r}")
        object.__setattr__(self, "fda_directions", 1 if self.fda_directions is None else self.fda_directions)
        object.__setattr__(self, "fda_estimate", "linear" if self.fda_estimate is None else self.fda_estimate)
        object.__setattr__(self, "fda_lag", 1 if self.fda_lag is None else self.fda_lag)
        if self.fda_lag not in (0, 1):
            raise MpisgdError(f"protocol: fda_lag must be 0 or 1, got {self.fda_lag!r}")
        if int(self.fda_directions) != self.fda_directions or self.fda_directions < 0:
            raise MpisgdError(f"protocol: fda_directions must be an integer >= 0, got {self.fda_directions!r}")
        if self.fda_estimate not in FDA_ESTIMATES:
            raise MpisgdError(f"protocol: unknown fda_estimate {self.fda_estimate!r}; "
                              f"choose one of {', '.join(FDA_ESTIMATES)}")

    def as_dict(self):
        return asdict(self)

    @property
    def auto(self):
        """Δ is measured in a pilot (``auto_delta``)."""
        return self.resolving and self.delta == AUTO

    @property
    def resolving(self):
        """dynamic: at a check point every learner tests its local condition
        ‖w_l − r‖² ≤ Δ, and only the violations are resolved (Kamp et al.)."""
        return self.name == "dynamic"

    @property
    def central(self):
        """The serial reference: one learner over every stream, nothing communicated."""
        return self.name == "central"

    def checking(self, k):
        """Whether k learners stop every b rounds: for a full sync (static) or a
        check (dynamic, fda). A lone learner never does: the mean of one model
        is that model, so its check or sync could change nothing and would
        only cost time and count bytes that go nowhere."""
        return k > 1 and self.name in ("static", "dynamic", "fda")

    def hedge_of(self, k):
        """The hedge among k learners: ``hedge``, or for AUTO the half hedge
        with at most HALF_HEDGE_LEARNERS, where every resolution becomes a
        full sync with no model sent (``syncs_every_violation``), and Kamp et
        al.'s counter with more, where it reaches static b=8's error with fewer
        bytes (docs/ALGORITHMS.md §4.5)."""
        if self.hedge != AUTO:
            return self.hedge
        return "half" if k <= HALF_HEDGE_LEARNERS else "counter"

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
        return self.name == "fda"

    @property
    def directions(self):
        """J, the projections each learner keeps (``OnlineLearners(directions=J)``)."""
        return int(self.fda_directions) if self.name == "fda" else 0

    @property
    def hierarchical(self):
        """Learners average within their node; the node leaders run the protocol (``NodeCheckPoints``)."""
        return self.node_size is not None

    def check_hierarchy(self, mode, k=None, node_size=None):
        """A hierarchical run in ``mode`` (sync only, for dynamic) of k learners
        in nodes of node_size (when given: the nodes must split the k learners)."""
        if mode == "async" and self.name == "dynamic":
            raise MpisgdError("protocol: hierarchical synchronization (--node-size) of the dynamic protocol runs "
                              "in --mode sync only (the default async mode is not built for it)")
        if k is not None and k % node_size:
            raise MpisgdError(f"protocol: --node-size {node_size} does not divide the {k} learners into nodes")

    def asynchronous(self, mode, k):
        """Whether a run of k learners in ``mode`` uses the default mode's machinery
        (``AsyncCoordinator``); the mode matters only where learners check."""
        return mode == "async" and self.resolving and k > 1

    def pace_rounds(self, mode, k):
        """R of the pacing barriers of a run of k learners in ``mode`` (0: none).
        The default mode's learners never wait for a quiet check, so a fast one
        could run any number of rounds ahead, and a resolution would then
        average models of different rounds (of different targets, on a
        drifting stream). Every R rounds each learner enters a nonblocking
        barrier and goes past the next pace round only once the previous
        barrier has completed: no learner is more than 2R rounds ahead."""
        return int(self.pace) if self.asynchronous(mode, k) else 0


@dataclass
class ProtocolStats:
    """What the coordinator did, and the paper's count of model messages
    (one model vector sent up or down is one message)."""

    hedge: str = None  # dynamic: the hedge in use (``ProtocolConfig.hedge_of``)
    checks: int = 0
    violations: int = 0  # violating learners, summed over checks
    balancings: int = 0  # resolutions that ended in a partial sync
    augmented: int = 0  # learners pulled into a balancing set by augmentation
    full_syncs: dict = field(default_factory=lambda: {"static": 0, "forced": 0, "burst": 0, "augmented": 0, "hedge": 0,
                                                      "variance": 0, "final": 0})  # variance: fda; hedge: --hedge half
    model_messages: dict = field(default_factory=lambda: {"violation": 0, "augmentation": 0, "balance": 0, "full_sync": 0})

    def as_dict(self):
        return asdict(self)


class Coordinator:
    """Rank 0's side of the protocol: when to sync, and with whom.

    One instance per run; ``k`` learners, models of dimension ``d``.
    """

    def __init__(self, config, k):
        self.config = config
        self.k = int(k)
        self.counter = 0  # v: violations since the last full sync
        hedge = config.hedge_of(self.k)
        self.half = hedge == "half"  # the authors' hedge, else the counter
        self.rng = np.random.default_rng(config.seed)
        self.stats = ProtocolStats(hedge=hedge if config.resolving else None)
        self.delta = None if config.auto else config.delta  # Δ (Δ0); with AUTO, set by set_auto_delta
        self.auto = None  # with AUTO: the rule, its measured inputs and Δ (auto_delta)
        self.budget = None  # with a budget: the last steering step's inputs and Δ (steer)
        self.horizon = 0  # with a budget: k·T, the rounds of every learner in the run (set by the driver)

    def threshold(self, t):
        """Δ_t for a check after round t (t ≥ 1; or an array of such t).
        With delta AUTO the pilot's checks (t ≤ P) find nobody: Δ_t = ∞."""
        if self.config.auto:
            pilot = t <= self.config.pilot_rounds  # the pilot's checks find nobody
            if self.delta is None and not np.all(pilot):
                raise RuntimeError("threshold: the pilot of --delta auto has not ended")
            if np.ndim(t) == 0:  # one check (a resolution's): no array arithmetic
                return math.inf if pilot else float(self.delta)
            return np.where(pilot, math.inf, math.inf if self.delta is None else self.delta)
        if self.config.delta_decay:
            return self.delta / np.sqrt(t)  # Δ_t = Δ0 / √t
        return self.delta

    def set_auto_delta(self, statistics, learner, k=None):
        """End the pilot of --delta auto: Δ from every learner's (Σ, count) in
        learner (rank) order (``Pilot.statistics``, allgathered under MPI).
        Every rank calls it with the same list and gets the same Δ."""
        self.delta, self.auto = auto_delta(self.config, learner, statistics)
        return self.delta

    def steer(self, spent, rounds, entries, n_features):
        """--budget F, at a full sync of the dynamic protocol, on every rank
        with the same agreed inputs (one Allreduce, wire.BUDGET_BYTES per rank):
        ``spent`` the bytes every rank has sent so far, ``rounds`` the sum of
        the rounds every learner has done, ``entries`` the non-zeros of the
        rows they learned. Static b=8 sends, per learner every 8 rounds, one
        full sync's bytes (wire.sync_nbytes) with m₈ = min(n, ⌈8·entries /
        rounds⌉) non-zeros in z, those of 8 rows of the mean length seen so
        far: S(x) over x learner-rounds. Of F times that over the run
        (``horizon`` = k·T learner-rounds) the budget plans F·S(horizon −
        rounds) for the rest, and F·S(horizon) − spent is left: Δ ←
        Δ·clip(√(planned / left), ½, 2), more Δ when ahead of the budget, less
        when behind (docs/ALGORITHMS.md §4.6)."""
        from mpisgd import wire

        n = int(n_features)
        m8 = min(n, math.ceil(8.0 * entries / rounds)) if rounds > 0 else n  # non-zeros of 8 rows
        s8 = wire.sync_nbytes(n, self.k, m8)  # what one learner sends in static's full sync every 8 rounds
        per_round = self.config.budget / 8.0 * s8  # F·S per learner-round
        planned = per_round * (self.horizon - rounds)  # what the budget leaves for the rest of the run
        left = per_round * self.horizon - float(spent)  # what is actually left of it
        ratio = planned / left if left > 0 else math.inf  # > 1: spent ahead of the budget
        if self.delta is not None:
            self.delta *= min(2.0, max(0.5, math.sqrt(ratio)))  # γ = ½: measured, docs/ALGORITHMS.md §4.6
        steps = 1 + (self.budget or {}).get("steps", 0)
        self.budget = {"rule": "delta <- delta * clip(sqrt(planned / left), 1/2, 2) at each full sync, planned = F * "
                               "(k*T - rounds) / 8 * S8, left = F * k*T / 8 * S8 - spent, S8 = sync_nbytes(n, k, m8), "
                               "m8 = min(n, ceil(8 * entries / rounds))",
                       "F": self.config.budget, "steps": steps, "spent": int(spent), "rounds": float(rounds),
                       "entries": float(entries), "m8": int(m8), "S8": int(s8),
                       "horizon": self.horizon, "ratio": ratio if math.isfinite(ratio) else None, "delta": self.delta}
        return self.delta

    # -- full syncs ---------------------------------------------------------

    def full_sync_steps(self, cause):
        """Every learner takes the mean model, which becomes the reference."""
        yield ("full_sync",)
        self._synced(cause)

    def final_sync(self, transport, z):
        """The run's last full sync: the mean of every learner's final model z
        (dense [w, b, 0], the averaged one for ASGD), by one Allreduce
        (``transport.final_mean``). Returns the mean."""
        mean = transport.final_mean(z)
        self._synced("final")
        return mean

    def _synced(self, cause):
        self.stats.full_syncs[cause] += 1
        self.stats.model_messages["full_sync"] += 2 * self.k  # k up + k down
        if self.config.counter_reset == "any-full-sync" or cause == "forced":
            self.counter = 0

    def full_sync(self, transport, cause):
        """``full_sync_steps`` against a blocking ``transport``."""
        drive(self.full_sync_steps(cause), transport)

    # -- dynamic protocol ---------------------------------------------------

    def resolution(self, t, violators, models):
        """Resolve the violations of one check (Kamp et al., Algorithm 1), as a
        generator of transport requests.

        ``violators``: ids of the learners whose local condition failed;
        ``models``: their models, as they sent them (None where violations
        carry none: ``ProtocolConfig.syncs_every_violation``). Every step that needs the
        transport is yielded as a tuple ``(method, *args)`` naming a transport
        method (``fetch``, ``divergence``, ``distances``, ``send_balanced``,
        ``full_sync``), and the generator is resumed with its result, so that
        a blocking driver (``resolve``) and a nonblocking one
        (``AsyncCoordinator``) run the same decisions. Returns the balancing
        set (all learners after a full sync).
        """
        cfg, k = self.config, self.k
        members = [int(i) for i in violators]
        if not members:
            self.count_quiet(1)
            return members
        if not cfg.syncs_every_violation(k):
            self.stats.model_messages["violation"] += len(members)
        cause = self._count_violations(len(members))
        if cause is not None:
            yield from self.full_sync_steps(cause)
            return list(range(k))
        delta = self.threshold(t)
        total = np.array(models[0], dtype=np.float64)  # Σ of B's models, added one by one in order
        for z in models[1:]:
            total += z
        mean = total / len(members)
        distances = None
        inside = np.zeros(k, dtype=bool)  # B as a mask
        inside[members] = True
        # Augment B until its mean lies within Δ of r (then every member, taking
        # that mean, meets its local condition), or B is everyone.
        while len(members) < k and (yield ("divergence", mean)) > delta:
            if self.half and 4 * len(members) >= k:  # doubling B would reach half the learners: a full sync
                yield from self.full_sync_steps("hedge")
                return list(range(k))
            if cfg.augmentation == "farthest" and distances is None:
                distances = np.asarray((yield ("distances",)), dtype=np.float64)
            new = self._augment(inside, distances)
            if self._steering_sync(len(members) + len(new)):
                yield from self.full_sync_steps("augmented")
                return list(range(k))
            for z in (yield ("fetch", np.array(new))):
                total += z
            members += new
            inside[new] = True
            self.stats.augmented += len(new)
            self.stats.model_messages["augmentation"] += len(new)
            if cfg.counter_counts == "contacted":
                self.counter += len(new)
            mean = total / len(members)
        everyone = len(members) == k
        yield ("send_balanced", np.array(sorted(members)), mean, everyone)
        self.stats.model_messages["balance"] += len(members)
        if everyone:  # B = all: the balanced mean is the new reference
            self.stats.full_syncs["augmented"] += 1
            if cfg.counter_reset == "any-full-sync":
                self.counter = 0
        else:
            self.stats.balancings += 1
        return sorted(members)

    def _count_violations(self, count):
        """What ``count`` violators of one check decide before any model is
        looked at: the cause of a full sync, or None when their balancing set
        is to be grown."""
        cfg, k = self.config, self.k
        self.stats.checks += 1
        self.stats.violations += count
        if self.half and 2 * count >= k:  # DynamicHedgeSync: no counter; a balancing set of half the learners
            return "hedge"
        if not self.half:
            self.counter += count  # v ← v + |B|
            if self.counter >= cfg.counter_limit * k:  # hedging: too many violations since the last full sync
                return "forced"
        if cfg.burst_fraction > 0 and count >= cfg.burst_fraction * k:
            return "burst"
        if self._steering_sync(count):
            return "augmented"
        if cfg.syncs_every_violation(k):  # B would grow to everyone, or (half) to half of them
            return "hedge" if self.half else "augmented"
        return None

    def sync_violations(self, count):
        """The resolution of ``count`` violators where every resolution is a full
        sync (``ProtocolConfig.syncs_every_violation``): decided from their
        number alone, on every rank (sync mode), with no model sent."""
        yield from self.full_sync_steps(self._count_violations(count))
        return list(range(self.k))

    def _steering_sync(self, size):
        """--budget: a balancing set of ``size`` learners that would be everyone
        is a full sync instead, so that its Allreduce steers Δ (without it, where
        balancing makes nearly every sync, as at k = 2, Δ would hardly move:
        docs/ALGORITHMS.md §4.6)."""
        return self.config.budget is not None and size == self.k

    def resolve(self, t, violators, models, transport):
        """``resolution`` run to completion against a blocking ``transport``."""
        return drive(self.resolution(t, violators, models), transport)

    def count_quiet(self, checks):
        """Checks that found no violator: nothing to resolve."""
        self.stats.checks += checks

    # -- fda: variance monitoring ---------------------------------------------

    def variance_estimate(self, sums):
        """δ̂ from the sums over learners of [‖D_l‖², ⟨D_l, ξ_1⟩, …, ⟨D_l, ξ_J⟩],
        D_l = w_l − r (one Allreduce, docs/ALGORITHMS.md §8):
        δ̂ = (1/k) Σ ‖D_l‖² − Σ_q ⟨D̄, ξ_q⟩², which is ≥ δ = (1/k) Σ ‖D_l‖² − ‖D̄‖²
        because Σ_q ⟨D̄, ξ_q⟩² ≤ ‖D̄‖² for orthonormal ξ_q (Bessel)."""
        mean = np.asarray(sums, dtype=np.float64) / self.k
        return float(mean[0] - mean[1:] @ mean[1:])

    def variance_check(self, estimate):
        """One settled fda check: a full sync when δ̂ > Θ. Returns True if synced."""
        self.stats.checks += 1
        return estimate > self.config.theta

    def _augment(self, inside, distances):
        """The learners to add to the balancing set B (``inside``: B as a mask)."""
        strategy = "random-double" if self.half else self.config.augmentation
        outside = np.flatnonzero(~inside)
        if strategy == "random-one":
            return [int(outside[self.rng.integers(len(outside))])]  # the draw of rng.choice(outside)
        if strategy == "random-double":  # |B| ← min(2|B|, k)
            m = min(self.k - len(outside), len(outside))
            return [int(i) for i in self.rng.choice(outside, size=m, replace=False)]
        # farthest: the outsider farthest from r, by the distances each learner keeps
        return [int(outside[np.argmax(distances[outside])])]


# -- --delta auto -------------------------------------------------------------


def pilot_values(indptr, data, y, learner):
    """G of each row (x, y): ℓ'(0, y)²·(‖x‖² + 1[bias]), the squared norm of the
    first SGD step from w = 0 over η² (docs/ALGORITHMS.md §4.4). ``learner``:
    keyword arguments of ``OnlineLearners``; indptr may start anywhere in data."""
    from mpisgd.kernels.losses import DEFAULT_PARAM, LOSSES, dloss

    loss = learner.get("loss", "log")
    param = learner.get("loss_param")
    param = float(DEFAULT_PARAM.get(loss, 0.0) if param is None else param)
    indptr = np.asarray(indptr, np.int64)
    m = len(indptr) - 1
    x = np.asarray(data[indptr[0] : indptr[-1]], np.float64)
    rows = np.repeat(np.arange(m), np.diff(indptr))
    squares = np.bincount(rows, weights=x * x, minlength=m)  # ‖x‖², each row summed in its order
    labels, which = np.unique(np.asarray(y, np.float64), return_inverse=True)
    slope = np.array([dloss(LOSSES[loss], 0.0, float(v), param) for v in labels])[which]  # ℓ'(0, y)
    return slope * slope * (squares + float(learner.get("fit_intercept", True)))


class Pilot:
    """The pilot of --delta auto: the rows of the first P rounds of each of k
    learners, as ``pilot_values``; ``statistics`` gives each learner's exact
    sum (math.fsum, so the order rows arrive in does not matter) and count."""

    def __init__(self, config, learner, k, rounds):
        self.learner = dict(learner)
        self.end = min(int(config.pilot_rounds), int(rounds))  # the round after which Δ is set
        self.parts = [[] for _ in range(int(k))]

    def add(self, indptr, data, y, owner):
        """Rows of rounds < end; owner: each row's learner."""
        if len(y):
            values = pilot_values(indptr, data, y, self.learner)
            owner = np.asarray(owner)
            for l in np.unique(owner).tolist():
                self.parts[l].append(values[owner == l])

    def statistics(self):
        """[(Σ G, rows)] per learner."""
        return [(math.fsum(np.concatenate(p).tolist()) if p else 0.0, int(sum(len(a) for a in p)))
                for p in self.parts]


def warm_up_protocol(config, learner):
    """Load the kernels of the protocol's own arithmetic before a run's clock
    starts (numba reads its cache on a function's first call, tens of
    milliseconds): under --delta auto, the pilot's and the rule's."""
    if config.auto:
        auto_delta(config, learner, [(float(pilot_values(np.array([0, 1]), np.ones(1), np.ones(1), learner)[0]), 1)])


def auto_delta(config, learner, statistics):
    """Δ = c·√(η_P · η_P²·G) = c·η_P·√(η_P·G) (docs/ALGORITHMS.md §4.4): the
    geometric mean of the step size η_P (the scale of SGD's own fluctuation)
    and η_P²·G (the squared length of a first step), times c. G is the mean
    over the pilot's rows of every learner of ``pilot_values``, from
    [(Σ, rows)] per learner in learner order, summed with math.fsum; η_P the
    step size at round P (passive-aggressive rules: 1). For rda, whose step
    1/(γ√t) decays and whose model has no stationary fluctuation, Δ = c·η_P²·G
    with η_P = 1/(γ√P). c: ``config.delta_scale``, else the rule's own
    (DELTA_SCALE, RDA_DELTA_SCALE). Returns (Δ, the record for report.json)."""
    from mpisgd.kernels.schedules import SCHEDULES, eta

    sums = [float(s) for s, _n in statistics]
    rows = sum(int(n) for _s, n in statistics)
    G = math.fsum(sums) / rows if rows else 0.0
    P = int(config.pilot_rounds)
    rule = learner.get("rule", "sgd")
    c = config.delta_scale if config.delta_scale is not None else RDA_DELTA_SCALE if rule == "rda" else DELTA_SCALE
    if rule == "rda":
        step = 1.0 / (float(learner.get("gamma", 1.0)) * math.sqrt(P))  # the step of u at round P
        delta = c * step * step * G  # c·η²G: a squared first step
        name, formula = "delta = c * eta_P^2 * G (rda)", f"c·η²·G = {c:g}·{step:.4g}²·{G:.6g}"
    else:
        step = 1.0  # passive-aggressive rules
        if rule == "sgd":
            step = float(eta(SCHEDULES[learner.get("schedule", "constant")], float(P), float(learner.get("eta0", 1.0)),
                             float(learner.get("lam", 0.0)), float(learner.get("t0", 0.0)),
                             float(learner.get("power", 0.5))))
        delta = c * step * math.sqrt(step * G)  # c·√(η · η²G): both scale like Δ
        name, formula = "delta = c * eta_P * sqrt(eta_P * G)", f"c·η·√(η·G) = {c:g}·{step:.4g}·√({step:.4g}·{G:.6g})"
    if not (math.isfinite(delta) and delta > 0):
        raise MpisgdError(f"protocol: --delta auto measured G = {G!r} over the first {P} rounds ({rows} rows): "
                          "the loss has no slope at w = 0 there; give a numeric --delta")
    record = {"rule": f"{name}, G = mean over the pilot's rows of dloss(0, y)^2 * (|x|^2 + fit_intercept)",
              "formula": formula, "c": c, "pilot_rounds": P, "eta_P": step, "G": G, "pilot_rows": rows, "delta": delta}
    return delta, record


def drive(steps, transport):
    """Run a generator of transport requests (``Coordinator.resolution``,
    ``full_sync_steps``) to completion, each request a blocking call of
    ``transport``; returns the generator's value."""
    reply = None
    try:
        while True:
            method, *args = steps.send(reply)
            reply = getattr(transport, method)(*args)
    except StopIteration as stop:
        return stop.value


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
      as soon as it is begun (the simulator's count of the paper's instant
      resolution, used for ``--mode async``).
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

    def __init__(self, coordinator, lagged=True):
        self.coordinator = coordinator
        self.lagged = lagged
        self.pending = None  # (t, handle) of the check begun and not yet settled

    def check(self, t, transport):
        """The check point after round t. Returns the balancing set settled
        here on the coordinating rank (all learners after a full sync), else None."""
        name = self.coordinator.config.name
        if name == "static":
            self.coordinator.full_sync(transport, "static")
            return list(range(self.coordinator.k))
        if name == "fda":
            lagged = self.coordinator.config.fda_lag == 1
            members = self.settle(transport) if lagged else None
            if members is None:
                self.pending = (t, transport.begin_variance(), None)
            if not lagged:
                members = self.settle(transport)
            return members
        if name != "dynamic":
            return None
        members = self.settle(transport) if self.lagged else None
        self.pending = (t, transport.begin_check(self.coordinator.threshold(t)), None)
        if not self.lagged:
            members = self.settle(transport)
        return members

    def agree(self, transport):
        """Complete the agreement of the pending check (the resolution waits
        for its check point). Returns (t, count, violators, models), or None
        when no check is pending; a checkpoint saves it (``restore``)."""
        if self.pending is None:
            return None
        t, handle, agreed = self.pending
        if agreed is None:
            agreed = transport.end_variance(handle) if self._fda else transport.end_check(handle)
            self.pending = (t, handle, agreed)
        return (t, *agreed)

    def restore(self, t, count, violators, models):
        """The pending check as ``agree`` returned it (a resumed run)."""
        self.pending = (t, None, (count, violators, models))

    def settle(self, transport):
        """Settle the pending check, if any (every rank)."""
        agreed = self.agree(transport)
        if agreed is None:
            return None
        self.pending = None
        if self._fda:
            return self._settle_variance(*agreed[1:], transport)
        t, count, violators, models = agreed
        members = None
        if count == 0:
            self.coordinator.count_quiet(1)
        elif self.lagged and self.coordinator.config.syncs_every_violation(self.coordinator.k):
            # sync mode: every rank knows what follows (unlagged, the simulator's count of the default
            # mode, rank 0 commands the full sync as the runtime's does)
            members = drive(self.coordinator.sync_violations(count), transport)
        elif transport.coordinating:
            transport.open_resolution()
            members = self.coordinator.resolve(t, violators, models, transport)
            transport.close_resolution()
        else:
            transport.serve()
        transport.settled()
        return members

    @property
    def _fda(self):
        return self.coordinator.config.name == "fda"

    def _settle_variance(self, sums, exact, transport):
        """Every rank: δ̂ of the agreed ``sums`` (``end_variance``; or ``exact``, the
        simulator's δ, with fda_estimate exact), and the full sync if it exceeds Θ.
        Returns all learners after a full sync, else None."""
        c = self.coordinator
        estimate = exact if c.config.fda_estimate == "exact" else c.variance_estimate(sums)
        if not c.variance_check(estimate):
            return None
        c.full_sync(transport, "variance")
        return list(range(c.k))


class NodeCheckPoints:
    """Hierarchical synchronization (docs/ALGORITHMS.md §6, "Hierarchical
    synchronization"), at every round t ≡ 0 mod b_node, on every rank:

    1. the m learners of each node average their models (``node.average()``,
       an Allreduce on the node communicator), so that every member holds the
       node's mean model w̄_j and the mean over all learners is unchanged;
    2. at t ≡ 0 mod b, the node leaders, each holding w̄_j, run the flat
       protocol among themselves (``CheckPoints`` over the leaders' transport:
       one learner per node, as if the node were one learner);
    3. then every leader broadcasts to its members the model it holds when a
       result changed it (``node.share()``: the new reference too after a full
       sync), so that the members of a node hold one model again.

    The leaders' lagged check of round t is settled at t + b after step 1:
    a leader's steps since it sent w̄_j(t) are then the mean of its members'
    steps, which the result keeps (``OnlineLearners.progress``). ``node``:
    this rank's node transport (``average``, ``share``); ``leaders``: the
    leaders' transport on a leader, None on the other members.
    """

    def __init__(self, coordinator):
        self.config = coordinator.config
        self.leaders = CheckPoints(coordinator)
        self.pending = False  # a leaders' check is begun and not settled (every rank knows it)

    def check(self, t, node, leaders):
        """The node average after round t, and at a check point the leaders'
        protocol and its result shared in the nodes. Returns the balancing set
        settled here on the coordinating leader, else None."""
        node.average()
        if t % self.config.period:
            return None
        members = self.leaders.check(t, leaders) if leaders is not None else None
        node.share()
        self.pending = self.config.name == "dynamic"
        return members

    def settle(self, t, node, leaders):
        """The last check begun, at the end of the run after round t (every
        rank): first a node average, unless one came at t, so that the result
        keeps every member's steps."""
        if not self.pending:
            return None
        if t % self.config.node_period:
            node.average()
        members = self.leaders.settle(leaders) if leaders is not None else None
        node.share()
        self.pending = False
        return members


def check_hierarchy_learner(learner):
    """``learner`` (keyword arguments of ``OnlineLearners``) for a hierarchical run:
    hierarchical synchronization moves exact models only."""
    if learner.get("compress", "none") != "none":
        raise MpisgdError("--compress: hierarchical synchronization (--node-size) moves exact models; "
                          "use --compress none")


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
