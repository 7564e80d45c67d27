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
"""

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from mpisgd.errors import MpisgdError

PROTOCOLS = ("none", "static", "dynamic", "central")
AUGMENTATIONS = ("random-one", "random-double", "farthest")
COUNTER_COUNTS = ("violators", "contacted")
COUNTER_RESETS = ("any-full-sync", "forced-only")


@dataclass(frozen=True)
class ProtocolConfig:
    """Every choice of the protocol, including those the paper leaves open."""

    name: str = "dynamic"
    period: int = 1  # b: rounds between syncs (static) or checks (dynamic)
    delta: float = 1.0  # Δ, or Δ0 when delta_decay
    delta_decay: bool = False  # Δ_t = Δ0 / √t
    augmentation: str = "random-one"
    counter_counts: str = "violators"  # what adds to the violation counter v
    counter_reset: str = "any-full-sync"  # which full syncs set v ← 0
    counter_limit: float = 1.0  # variant: the counter forces a full sync at v ≥ counter_limit·k (paper: 1)
    burst_fraction: float = 0.0  # variant: ≥ this share of violators at one check → full sync (0 = off)
    seed: int = 0  # the coordinator's random augmentation

    def __post_init__(self):
        if self.name not in PROTOCOLS:
            raise MpisgdError(f"protocol: unknown name {self.name!r}; choose one of {', '.join(PROTOCOLS)}")
        if int(self.period) != self.period or self.period < 1:
            raise MpisgdError(f"protocol: the period b must be an integer >= 1, got {self.period!r}")
        if self.name == "dynamic" and not (math.isfinite(self.delta) and self.delta > 0):
            raise MpisgdError(f"protocol: the divergence threshold delta must be > 0, got {self.delta!r}")
        for value, allowed, what in (
            (self.augmentation, AUGMENTATIONS, "augmentation"),
            (self.counter_counts, COUNTER_COUNTS, "counter_counts"),
            (self.counter_reset, COUNTER_RESETS, "counter_reset"),
        ):
            if value not in allowed:
                raise MpisgdError(f"protocol: unknown {what} {value!r}; choose one of {', '.join(allowed)}")
        if not (math.isfinite(self.counter_limit) and self.counter_limit > 0):
            raise MpisgdError(f"protocol: counter_limit must be > 0, got {self.counter_limit!r}")
        if not 0.0 <= self.burst_fraction <= 1.0:
            raise MpisgdError(f"protocol: burst_fraction must be in [0, 1], got {self.burst_fraction!r}")

    def as_dict(self):
        return asdict(self)


@dataclass
class ProtocolStats:
    """What the coordinator did, and the paper's count of model messages
    (one model vector sent up or down is one message)."""

    checks: int = 0
    violations: int = 0  # violating learners, summed over checks
    balancings: int = 0  # resolutions that ended in a partial sync
    augmented: int = 0  # learners pulled into a balancing set by augmentation
    full_syncs: dict = field(default_factory=lambda: {"static": 0, "forced": 0, "burst": 0, "augmented": 0, "final": 0})
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
        self.rng = np.random.default_rng(config.seed)
        self.stats = ProtocolStats()

    def threshold(self, t):
        """Δ_t for a check after round t (t ≥ 1; or an array of such t)."""
        if self.config.delta_decay:
            return self.config.delta / np.sqrt(t)  # Δ_t = Δ0 / √t
        return self.config.delta

    # -- full syncs ---------------------------------------------------------

    def full_sync(self, transport, cause):
        """Every learner takes the mean model, which becomes the reference."""
        transport.full_sync()
        self.stats.full_syncs[cause] += 1
        self.stats.model_messages["full_sync"] += 2 * self.k  # k up + k down
        if self.config.counter_reset == "any-full-sync" or cause == "forced":
            self.counter = 0

    # -- dynamic protocol ---------------------------------------------------

    def resolve(self, t, violators, models, transport):
        """Resolve the violations of one check (Kamp et al., Algorithm 1).

        ``violators``: ids of the learners whose local condition failed;
        ``models``: their models, as they sent them. Returns the balancing set
        (all learners after a full sync).
        """
        cfg, k = self.config, self.k
        members = [int(i) for i in violators]
        if not members:
            self.count_quiet(1)
            return members
        self.stats.checks += 1
        self.stats.violations += len(members)
        self.stats.model_messages["violation"] += len(members)
        self.counter += len(members)  # v ← v + |B|
        if self.counter >= cfg.counter_limit * k:  # hedging: too many violations since the last full sync
            self.full_sync(transport, "forced")
            return list(range(k))
        if cfg.burst_fraction > 0 and len(members) >= cfg.burst_fraction * k:
            self.full_sync(transport, "burst")
            return list(range(k))

        delta = self.threshold(t)
        total = np.asarray(models, dtype=np.float64).sum(axis=0)
        distances = None
        inside = np.zeros(k, dtype=bool)  # B as a mask
        inside[members] = True
        # Augment B until its mean lies within Δ of r (then every member, taking
        # that mean, meets its local condition), or B is everyone.
        while len(members) < k and transport.divergence(total / len(members)) > delta:
            if cfg.augmentation == "farthest" and distances is None:
                distances = np.asarray(transport.distances(), dtype=np.float64)
            new = self._augment(inside, distances)
            total += np.asarray(transport.fetch(np.array(new)), dtype=np.float64).sum(axis=0)
            members += new
            inside[new] = True
            self.stats.augmented += len(new)
            self.stats.model_messages["augmentation"] += len(new)
            if cfg.counter_counts == "contacted":
                self.counter += len(new)
        mean = total / len(members)
        everyone = len(members) == k
        transport.send_balanced(np.array(sorted(members)), mean, everyone)
        self.stats.model_messages["balance"] += len(members)
        if everyone:  # B = all: the balanced mean is the new reference
            self.stats.full_syncs["augmented"] += 1
            if cfg.counter_reset == "any-full-sync":
                self.counter = 0
        else:
            self.stats.balancings += 1
        return sorted(members)

    def count_quiet(self, checks):
        """Checks that found no violator: nothing to resolve."""
        self.stats.checks += checks

    def _augment(self, inside, distances):
        """The learners to add to the balancing set B (``inside``: B as a mask)."""
        strategy = self.config.augmentation
        outside = np.flatnonzero(~inside)
        if strategy == "random-one":
            return [int(outside[self.rng.integers(len(outside))])]  # the draw of rng.choice(outside)
        if strategy == "random-double":  # |B| ← min(2|B|, k)
            m = min(self.k - len(outside), len(outside))
            return [int(i) for i in self.rng.choice(outside, size=m, replace=False)]
        # farthest: the outsider farthest from r, by the distances each learner keeps
        return [int(outside[np.argmax(distances[outside])])]
