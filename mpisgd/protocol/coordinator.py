"""Rank 0's side of the protocol: when to sync, and with whom (Kamp et al.
2014, Algorithm 1; the hedges of docs/ALGORITHMS.md §4.5), written once
against a small transport interface, so that the MPI runner and the
simulator run exactly this code (docs/ALGORITHMS.md §4).

A model is a vector of dimension d in whatever linear coordinates the
transport chooses (dense w and bias; or, as the MPI runner and the simulator
do, coordinates relative to the reference model r, docs/ALGORITHMS.md §5). The
protocol only averages models and asks the transport for distances, so it
never depends on that choice. Learners check the local condition
‖w_l − r‖² ≤ Δ_t themselves (in O(1), see ``mpisgd.kernels.online``); the
coordinator sees only the violators and whatever it asks for.

Transport interface (the coordinator side; the transport counts every call
in its byte counters, by category):

    fetch(ids, asked) -> len(ids) models    balance request + balance reply:
                                            the current models of learners ids
                                            (asked None); with --partial their
                                            partial models (``wire.Part``) on at
                                            least the coordinates asked for
    divergence(model) -> float              ‖w − r‖² of a model (no communication)
    distances() -> (k,) array               control: every learner's ‖w_l − r‖²
                                            (only the farthest-first strategy asks)
    send_balanced(ids, model, new_reference)
                                            balance result: learners ids take
                                            `model`; with new_reference=True
                                            (ids = all) it also becomes r
    send_parts(ids, parts)                  balance result with --partial: each
                                            learner of ids takes its own part
                                            (``wire.Part``: the mean on its S_l)
    full_sync()                             full sync (Allreduce): every learner
                                            takes the mean of all models, which
                                            becomes r
    final_mean(z) -> mean                   the run's last Allreduce, of final models

The decisions of a resolution are written once, as the generator
``Coordinator.resolution``; ``drive`` runs it against a blocking transport
(sync mode, the simulator), ``AsyncCoordinator`` (``mpisgd.protocol.asynchronous``)
against a nonblocking one.
"""

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from mpisgd.protocol.delta import auto_delta, steered
from mpisgd.wire import Part


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


class Balance:
    """The balanced model of a set B of whole models: their mean (Σ added one by
    one in order), which every member takes; ``farthest`` is its ‖w − r‖², each
    member's after taking it (asked of the transport, a generator step), and
    ``result`` the transport's request that hands it to the members."""

    def __init__(self, models):
        self.total = np.array(models[0], dtype=np.float64)
        self.count = 1
        self.add(models[1:])

    def add(self, models):
        for z in models:
            self.total += z
            self.count += 1

    def support(self):
        return None  # a fetch asks for whole models

    def mean(self):
        return self.total / self.count

    def farthest(self):
        return (yield ("divergence", self.mean()))

    def result(self, members, everyone):
        """The request that hands the result to ``members`` (in the order they
        joined B): one model for all, sent in increasing id."""
        return ("send_balanced", np.array(sorted(members)), self.mean(), everyone)


class PartialBalance(Balance):
    """The balanced model of B's partial models (``wire.Part``: d_l on S_l,
    b_l, ρ_l; docs/ALGORITHMS.md §4.7): on each j of S_B = ∪ S_l the mean over
    B_j = {l ∈ B : j ∈ S_l}, which the members of B_j take (the others keep
    their d_lj), the mean bias over B, α = 1; 0 off S_B. So the mean of all
    models stays on every coordinate, and member l then holds
    ‖w_l − r‖² = ‖balanced on S_l‖² + (b̄ − r_b)² + ρ_l exactly: ``farthest``
    is the largest of these. ``support`` (S_B) is what a fetch asks for; each
    member's result is its own part (``parts``), the means on its S_l only."""

    def __init__(self, models):
        n = len(models[0].support)
        self.total = np.zeros(n + 2)  # [Σ_l d_{S_l}, Σ_l b_l, unused]
        self.per_coordinate = np.zeros(n, dtype=np.int64)  # |B_j|
        self.sent = []  # (S_l, ρ_l) of each member
        self.count = 0
        self.add(models)

    def add(self, models):
        n = len(self.per_coordinate)
        for part in models:
            self.total[:n] += part.z[:n]  # 0 off S_l
            self.total[n] += part.z[n]
            self.per_coordinate += part.support
            self.sent.append((part.support, part.rho))
            self.count += 1

    def support(self):
        return np.flatnonzero(self.per_coordinate)

    def mean(self):
        n = len(self.per_coordinate)
        mean = np.zeros(n + 2)
        np.divide(self.total[:n], self.per_coordinate, out=mean[:n], where=self.per_coordinate > 0)
        mean[n], mean[n + 1] = self.total[n] / self.count, 1.0
        return mean

    def parts(self):
        """What each member takes, in the order they joined B: ``wire.Part`` of
        [the means on its S_l, 0 elsewhere, b̄, α = 1], its ρ_l and S_l."""
        mean = self.mean()
        return [Part(np.where(np.append(support, (True, True)), mean, 0.0), rho, support)
                for support, rho in self.sent]

    def farthest(self):
        worst = 0.0
        for part in self.parts():
            worst = max(worst, (yield ("divergence", part.z)) + part.rho)
        return worst

    def result(self, members, everyone):
        """The request that hands each of ``members`` (in the order they joined
        B, as ``parts``) its own part, in increasing id (B is never everyone:
        ``Coordinator._syncs_instead``)."""
        parts, order = self.parts(), np.argsort(members)
        return ("send_parts", np.asarray(members)[order], [parts[i] for i in order])


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

    def state_dict(self):
        """Δ (as measured or steered), --delta auto's and --budget's records,
        the violation counter, the statistics and the random generator."""
        return {"delta": self.delta, "auto": self.auto, "budget": self.budget, "counter": self.counter,
                "stats": self.stats.as_dict(), "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state):
        self.delta, self.auto, self.budget = state["delta"], state["auto"], state["budget"]
        self.counter = state["counter"]
        self.stats = ProtocolStats(**state["stats"])
        self.rng.bit_generator.state = state["rng"]

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

    def set_auto_delta(self, statistics, learner, n_features):
        """End the pilot of --delta auto: Δ from every learner's (Σ, count,
        non-zeros) in learner (rank) order (``Pilot.statistics``, allgathered
        under MPI) over n_features. Every rank calls it with the same list and
        gets the same Δ."""
        self.delta, self.auto = auto_delta(self.config, learner, statistics, n_features)
        return self.delta

    def steer(self, spent, rounds, entries, n_features):
        """--budget F, at a full sync of the dynamic protocol, on every rank
        with the same agreed inputs (``mpisgd.protocol.delta.steered``)."""
        self.delta, self.budget = steered(self.config.budget, self.delta, self.k, self.horizon, spent, rounds,
                                          entries, n_features, self.budget)
        return self.delta

    def partial_budget(self):
        """--partial θ, or the θ --delta auto chose (``auto_delta``'s record):
        θΔ, the divergence each learner may keep off a full sync, which then
        averages only the coordinates beyond it (docs/ALGORITHMS.md §4.7);
        None: a full sync of every coordinate (no θ, or Δ not measured yet)."""
        theta = self.config.partial if self.config.partial is not None else (self.auto or {}).get("partial")
        if theta is None or self.delta is None:
            return None
        return theta * float(self.delta)

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
        ``models``: their models, as they sent them (with --partial their
        partial models, ``wire.Part``; None where violations carry none:
        ``ProtocolConfig.syncs_every_violation``). Every step that needs the
        transport is yielded as a tuple ``(method, *args)`` naming a transport
        method (``fetch``, ``divergence``, ``distances``, ``send_balanced``,
        ``send_parts``, ``full_sync``), and the generator is resumed with its result, so that
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
        balance = (PartialBalance if self.partial_budget() is not None else Balance)(models)
        distances = None
        inside = np.zeros(k, dtype=bool)  # B as a mask
        inside[members] = True
        # Augment B until every member, taking the balanced model, meets its local
        # condition, or B is everyone.
        while len(members) < k and (yield from balance.farthest()) > delta:
            if self.half and 4 * len(members) >= k:  # doubling B would reach half the learners: a full sync
                yield from self.full_sync_steps("hedge")
                return list(range(k))
            if cfg.augmentation == "farthest" and distances is None:
                distances = np.asarray((yield ("distances",)), dtype=np.float64)
            new = self._augment(inside, distances)
            if self._syncs_instead(len(members) + len(new)):
                yield from self.full_sync_steps("augmented")
                return list(range(k))
            balance.add((yield ("fetch", np.array(new), balance.support())))  # --partial: asking for S_B
            members += new
            inside[new] = True
            self.stats.augmented += len(new)
            self.stats.model_messages["augmentation"] += len(new)
            if cfg.counter_counts == "contacted":
                self.counter += len(new)
        everyone = len(members) == k
        yield balance.result(members, everyone)
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
        if self._syncs_instead(count):
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

    def _syncs_instead(self, size):
        """A balancing set of ``size`` learners that would be everyone is a full
        sync instead: with --budget, so that its Allreduce steers Δ (without it,
        where balancing makes nearly every sync, as at k = 2, Δ would hardly move:
        docs/ALGORITHMS.md §4.6); with --partial where violations carry (partial)
        models, because partial models make no new reference (§4.7)."""
        cfg = self.config
        partial = self.partial_budget() is not None and not cfg.syncs_every_violation(self.k)
        return size == self.k and (cfg.budget is not None or partial)

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
