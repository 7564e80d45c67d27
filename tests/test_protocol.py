"""Invariants of the coordinator's logic (mpisgd.protocol), over a plain dense
transport: balancing keeps the mean model, every member of a balancing set
meets its local condition afterwards, a full sync makes all models equal,
and the violation counter forces a full sync; and the default mode's rule that
a violation crossing a fetch is its learner's reply, over a scripted transport."""

import math

import numpy as np
import pytest

from mpisgd.errors import MpisgdError
from mpisgd.protocol import (AUGMENTATIONS, DELTA_SCALE, RDA_DELTA_SCALE, Coordinator, Pilot, ProtocolConfig,
                             auto_delta, drive, pilot_values)


class DenseTransport:
    """k models as rows of a matrix; the obviously correct transport."""

    def __init__(self, models, reference):
        self.models = np.array(models, dtype=np.float64)
        self.reference = np.array(reference, dtype=np.float64)
        self.fetched = []

    def fetch(self, ids, asked=None):
        self.fetched.extend(int(i) for i in ids)
        return self.models[ids].copy()

    def divergence(self, model):
        return sqdist(model, self.reference)

    def distances(self):
        return ((self.models - self.reference) ** 2).sum(axis=1)

    def send_balanced(self, ids, model, new_reference):
        self.models[ids] = model
        if new_reference:
            assert len(ids) == len(self.models)
            self.reference = model.copy()

    def full_sync(self):
        mean = self.models.mean(axis=0)
        self.models[:] = mean
        self.reference = mean.copy()


def sqdist(a, b):
    return float(((a - b) ** 2).sum())


def violators_of(transport, delta):
    return np.flatnonzero(transport.distances() > delta)


def random_setup(k, d, seed, spread):
    rng = np.random.default_rng(seed)
    reference = rng.normal(size=d)
    models = reference + spread * rng.normal(size=(k, d))
    return models, reference


@pytest.mark.parametrize("augmentation", AUGMENTATIONS)
@pytest.mark.parametrize("k", [2, 3, 8, 17])
def test_balancing_keeps_mean_and_restores_local_conditions(augmentation, k):
    for seed in range(20):
        models, reference = random_setup(k, 5, seed, spread=0.6)
        delta = 1.0
        transport = DenseTransport(models, reference)
        coordinator = Coordinator(ProtocolConfig(delta=delta, augmentation=augmentation, seed=seed), k)
        coordinator.counter = -10**9  # keep the counter out of this test
        violators = violators_of(transport, delta)
        mean_before = transport.models.mean(axis=0)
        members = coordinator.resolve(1, violators, transport.models[violators], transport)
        np.testing.assert_allclose(transport.models.mean(axis=0), mean_before, rtol=0, atol=1e-12)
        assert set(violators) <= set(members)
        for i in members:  # every member now meets its local condition
            assert sqdist(transport.models[i], transport.reference) <= delta + 1e-12


def test_no_violation_no_communication():
    models, reference = random_setup(4, 3, 0, spread=0.01)
    transport = DenseTransport(models, reference)
    coordinator = Coordinator(ProtocolConfig(delta=1.0), 4)
    assert coordinator.resolve(1, [], np.empty((0, 3)), transport) == []
    assert transport.fetched == []
    assert coordinator.stats.model_messages["violation"] == 0


def test_full_sync_makes_all_models_equal_and_resets_reference():
    models, reference = random_setup(5, 4, 1, spread=2.0)
    transport = DenseTransport(models, reference)
    coordinator = Coordinator(ProtocolConfig(name="static", period=3), 5)
    mean = models.mean(axis=0)
    coordinator.full_sync(transport, "static")
    for row in transport.models:
        np.testing.assert_array_equal(row, transport.models[0])
    np.testing.assert_allclose(transport.reference, mean)
    assert coordinator.stats.full_syncs["static"] == 1
    assert coordinator.stats.model_messages["full_sync"] == 10


@pytest.mark.parametrize("limit", [1.0, 2.5])  # 1: the paper; 2.5: our variant, 2.5·k violations
@pytest.mark.parametrize("k", [2, 3, 6])
def test_violation_counter_forces_full_sync(k, limit):
    reference = np.zeros(3)
    transport = DenseTransport(np.zeros((k, 3)), reference)
    # forced-only: with k = 2 both learners form the balancing set, and an augmented-to-all sync would reset v
    coordinator = Coordinator(ProtocolConfig(delta=1.0, counter_limit=limit, counter_reset="forced-only",
                                             hedge="counter"), k)
    step = np.array([1.2, 0.0, 0.0])
    for check in range(1, int(limit * k) + 1):
        # two learners drift past Δ in opposite directions: their mean is r, so
        # balancing them needs nobody else, and only the counter grows
        i, j = (2 * check) % k, (2 * check + 1) % k
        transport.models[i] = reference + step
        transport.models[j] = reference - step
        violators = violators_of(transport, 1.0)
        counter_before = coordinator.counter
        coordinator.resolve(check, violators, transport.models[violators], transport)
        if counter_before + len(violators) >= limit * k:
            assert coordinator.stats.full_syncs["forced"] == 1
            assert coordinator.counter == 0
            for row in transport.models:
                np.testing.assert_array_equal(row, transport.models[0])
            return
        assert coordinator.stats.full_syncs["forced"] == 0
        assert coordinator.counter == counter_before + len(violators)
    pytest.fail("the counter never forced a full sync")


def test_counter_counts_contacted_learners_when_asked():
    k = 8
    models, reference = random_setup(k, 2, 3, spread=0.1)
    models[0] = reference + 2.0  # ‖w_0 − r‖² = 8: two or three helpers bring the mean within Δ
    transport = DenseTransport(models, reference)
    coordinator = Coordinator(ProtocolConfig(delta=1.0, counter_counts="contacted"), k)
    coordinator.resolve(1, [0], models[[0]], transport)
    assert 0 < coordinator.stats.augmented < k - 1
    assert coordinator.counter == 1 + coordinator.stats.augmented


def test_burst_variant_answers_many_violations_with_one_full_sync():
    k = 10
    models, reference = random_setup(k, 3, 4, spread=3.0)
    transport = DenseTransport(models, reference)
    coordinator = Coordinator(ProtocolConfig(delta=1.0, burst_fraction=0.3), k)
    coordinator.counter = -100
    violators = np.arange(4)
    coordinator.resolve(1, violators, models[violators], transport)
    assert coordinator.stats.full_syncs["burst"] == 1
    assert transport.fetched == []


def test_time_dependent_threshold():
    coordinator = Coordinator(ProtocolConfig(delta=2.0, delta_decay=True), 3)
    assert coordinator.threshold(4) == pytest.approx(1.0)  # Δ0/√t


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"name": "sometimes"}, "name"),
        ({"period": 0}, "period"),
        ({"delta": 0.0}, "delta"),
        ({"delta": -1.0}, "delta"),
        ({"augmentation": "best"}, "augmentation"),
        ({"counter_counts": "x"}, "counter_counts"),
        ({"counter_limit": 0.0}, "counter_limit"),
        ({"counter_limit": float("nan")}, "counter_limit"),
        ({"burst_fraction": 2.0}, "burst_fraction"),
        ({"delta": "sometimes"}, "delta"),
        ({"delta": "auto", "delta_scale": 0.0}, "delta_scale"),
        ({"delta": "auto", "delta_scale": -1.0}, "delta_scale"),
        ({"delta": "auto", "pilot_rounds": 0}, "pilot_rounds"),
        ({"delta": "auto", "delta_decay": True}, "delta_decay"),
        ({"hedge": "sometimes"}, "hedge"),
        ({"budget": 0.0}, "budget"),
        ({"budget": -0.5}, "budget"),
        ({"budget": 1.5}, "budget"),
        ({"budget": float("nan")}, "budget"),
        ({"budget": "half"}, "budget"),
        ({"budget": 0.5, "name": "static"}, "budget"),
        ({"budget": 0.5, "delta": 1.0, "delta_decay": True}, "budget"),
        ({"partial": 0.0}, "partial"),
        ({"partial": 1.5}, "partial"),
        ({"partial": float("nan")}, "partial"),
        ({"partial": 0.5, "name": "static"}, "partial"),
        ({"partial": 0.5, "name": "fda", "theta": 1.0}, "partial"),
        ({"partial": 0.5, "delta": 1.0, "delta_decay": True}, "partial"),
        ({"partial": 0.5, "node_size": 2, "mode": "sync"}, "partial"),
        ({"pace": -1}, "pace"),
        ({"pace": 2.5}, "pace"),
    ],
)
def test_bad_configuration_is_named(kwargs, word):
    with pytest.raises(MpisgdError, match=word):
        ProtocolConfig(**kwargs)


# -- the authors' later hedge (--hedge half) ------------------------------------------


@pytest.mark.parametrize("k", [2, 3, 8, 17, 64])
def test_half_hedge_keeps_mean_and_local_conditions_without_a_counter(k):
    for seed in range(20):
        models, reference = random_setup(k, 5, seed, spread=0.6)
        transport = DenseTransport(models, reference)
        coordinator = Coordinator(ProtocolConfig(delta=1.0, hedge="half", seed=seed), k)
        for check in range(1, 4):  # several checks: no counter ever forces a full sync
            violators = violators_of(transport, 1.0)
            mean_before = transport.models.mean(axis=0)
            members = coordinator.resolve(check, violators, transport.models[violators], transport)
            np.testing.assert_allclose(transport.models.mean(axis=0), mean_before, rtol=0, atol=1e-12)
            assert set(violators.tolist()) <= set(members)
            for i in members:
                assert sqdist(transport.models[i], transport.reference) <= 1.0 + 1e-12
            if len(violators):
                # a balancing set below half the learners, or everyone
                assert len(members) == k or 2 * len(members) < k
            transport.models += 0.3 * np.random.default_rng(seed + check).normal(size=transport.models.shape)
        assert coordinator.counter == 0
        assert coordinator.stats.full_syncs["forced"] == 0


def test_half_hedge_doubles_the_balancing_set_then_syncs_everyone():
    k = 16
    reference = np.zeros(2)
    models = np.zeros((k, 2))
    models[0] = [10.0, 0.0]  # far out: no set smaller than half the learners brings its mean within Δ
    transport = DenseTransport(models, reference)
    coordinator = Coordinator(ProtocolConfig(delta=1.0, hedge="half"), k)
    members = coordinator.resolve(1, [0], models[[0]], transport)
    assert members == list(range(k))
    assert coordinator.stats.full_syncs["hedge"] == 1
    assert len(transport.fetched) == 1 + 2  # B: 1 → 2 → 4; doubling to 8 = k/2 is the full sync
    assert coordinator.stats.model_messages["augmentation"] == 3


def test_half_hedge_with_half_the_learners_violating_is_a_full_sync():
    k = 6
    models, reference = random_setup(k, 3, 2, spread=3.0)
    transport = DenseTransport(models, reference)
    coordinator = Coordinator(ProtocolConfig(delta=1.0, hedge="half"), k)
    coordinator.resolve(1, np.arange(3), models[:3], transport)
    assert coordinator.stats.full_syncs["hedge"] == 1
    assert transport.fetched == []


# -- --delta auto -------------------------------------------------------------------


def _rows(seed, m, n=7):
    rng = np.random.default_rng(seed)
    nnz = rng.integers(0, 4, size=m)
    indptr = np.concatenate([[0], np.cumsum(nnz)])
    data = rng.normal(size=indptr[-1])
    y = rng.choice([-1.0, 1.0], size=m)
    return indptr, data, y


@pytest.mark.parametrize("loss", ["log", "hinge", "squared", "huber"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_pilot_values_are_the_squared_first_step(loss, fit_intercept):
    from mpisgd.kernels.losses import DEFAULT_PARAM, LOSSES, dloss

    indptr, data, y = _rows(1, 50)
    got = pilot_values(indptr, data, y, {"loss": loss, "fit_intercept": fit_intercept})
    param = DEFAULT_PARAM.get(loss, 0.0)
    for i in range(50):  # the slow twin: one row at a time
        x = data[indptr[i] : indptr[i + 1]]
        g = dloss(LOSSES[loss], 0.0, y[i], param)
        assert got[i] == pytest.approx(g * g * (float(np.sum(x * x)) + fit_intercept), rel=1e-12)


def test_pilot_statistics_do_not_depend_on_how_rows_arrive():
    indptr, data, y = _rows(2, 90)
    owner = np.arange(90) % 3
    learner = {"loss": "log"}
    config = ProtocolConfig(delta="auto", pilot_rounds=30)
    whole = Pilot(config, learner, 3, 1000)
    whole.add(indptr, data, y, owner)
    pieces = Pilot(config, learner, 3, 1000)
    for lo, hi in ((0, 7), (7, 8), (8, 61), (61, 90)):
        pieces.add(indptr[lo : hi + 1], data, y[lo:hi], owner[lo:hi])
    assert whole.statistics() == pieces.statistics()  # bit for bit
    per_learner = []
    for l in range(3):  # each learner alone, as one MPI rank sees it
        alone = Pilot(config, learner, 1, 1000)
        rows = np.flatnonzero(owner == l)
        for i in rows:
            alone.add(indptr[i : i + 2], data, y[i : i + 1], [0])
        per_learner += alone.statistics()
    assert per_learner == whole.statistics()


def test_auto_delta_rule_and_threshold():
    config = ProtocolConfig(delta="auto", delta_scale=3.0, pilot_rounds=10, period=4)
    learner = {"loss": "log", "eta0": 0.5}
    statistics = [(2.0, 4, 12), (6.0, 4, 4)]  # G = 1, 2 non-zeros a row
    coordinator = Coordinator(config, 2)
    assert coordinator.threshold(10) == float("inf")  # the pilot's checks (t ≤ P) find nobody
    np.testing.assert_array_equal(coordinator.threshold(np.array([4, 8])), [np.inf, np.inf])
    with pytest.raises(RuntimeError):
        coordinator.threshold(12)
    delta = coordinator.set_auto_delta(statistics, learner, 50)
    assert delta == 3.0 * 0.5 * math.sqrt(0.5 * 1.0)  # c·η·√(η·G)
    assert delta == auto_delta(config, learner, statistics, 50)[0]
    assert coordinator.auto["G"] == 1.0 and coordinator.auto["pilot_rows"] == 8 and coordinator.auto["spread"] == 25.0
    assert coordinator.threshold(10) == float("inf") and coordinator.threshold(12) == delta
    np.testing.assert_array_equal(coordinator.threshold(np.array([10, 12])), [np.inf, delta])


def test_auto_delta_follows_the_schedule_at_the_pilots_end():
    config = ProtocolConfig(delta="auto", delta_scale=1.0, pilot_rounds=16)
    learner = {"loss": "hinge", "schedule": "invscaling", "eta0": 2.0, "power": 0.5}
    delta, record = auto_delta(config, learner, [(5.0, 5, 5)], 10)
    assert record["eta_P"] == pytest.approx(2.0 / 4.0)  # η0 / P^power
    assert delta == pytest.approx(0.5 * math.sqrt(0.5))


def test_auto_delta_of_rda_is_c_times_a_squared_first_step():
    """RDA's step 1/(γ√t) decays: Δ = c·η_P²·G, c its own unless given."""
    learner = {"loss": "log", "rule": "rda", "gamma": 0.01}
    eta_p = 1.0 / (0.01 * math.sqrt(16))
    delta, record = auto_delta(ProtocolConfig(delta="auto", pilot_rounds=16), learner, [(3.0, 2, 2), (1.0, 2, 2)], 10)  # G = 1
    assert record["eta_P"] == pytest.approx(eta_p) and record["c"] == RDA_DELTA_SCALE
    assert delta == pytest.approx(RDA_DELTA_SCALE * eta_p**2) and "rda" in record["rule"]
    delta, record = auto_delta(ProtocolConfig(delta="auto", pilot_rounds=16, delta_scale=2.0), learner, [(4.0, 4, 4)], 10)
    assert delta == pytest.approx(2.0 * eta_p**2) and record["c"] == 2.0
    sgd, record = auto_delta(ProtocolConfig(delta="auto", pilot_rounds=16), {"loss": "log", "eta0": 0.5}, [(4.0, 4, 4)],
                             10)
    assert record["c"] == DELTA_SCALE and sgd == pytest.approx(DELTA_SCALE * 0.5 * math.sqrt(0.5))


def test_auto_delta_without_a_slope_is_a_clear_error():
    with pytest.raises(MpisgdError, match="--delta"):
        auto_delta(ProtocolConfig(delta="auto"), {"loss": "squared"}, [(0.0, 10, 10)], 10)


def test_budget_steers_delta_by_what_is_left_against_what_the_budget_leaves():
    from mpisgd.wire import dense_nbytes

    coordinator = Coordinator(ProtocolConfig(delta=2.0, budget=0.5), 2)
    coordinator.horizon = 2 * 800  # k·T
    per_round = 0.5 / 8 * dense_nbytes(6)  # F·(static b=8's bytes) per learner-round: 6 features, dense
    entries = 3 * 800.0  # 3 non-zeros a row: 8 rows fill all 6 features
    assert coordinator.steer(per_round * 800, 800, entries, 6) == 2.0  # on budget: Δ stays
    delta = coordinator.steer(per_round * 1000, 800, entries, 6)  # ahead: planned 800, left 600
    assert delta == pytest.approx(2.0 * math.sqrt(800 / 600))
    assert coordinator.budget["steps"] == 2 and coordinator.budget["spent"] == per_round * 1000
    assert coordinator.steer(0.0, 800, entries, 6) == pytest.approx(delta * math.sqrt(0.5))  # behind: Δ shrinks
    before = coordinator.delta
    assert coordinator.steer(per_round * 1600, 1000, entries, 6) == before * 2  # the budget used up: at most doubled
    assert coordinator.budget["ratio"] is None
    coordinator.steer(per_round * 10, 1600, entries, 6)  # at the end nothing is planned: at most halved
    assert coordinator.delta == before
    assert coordinator.threshold(5) == coordinator.delta


def test_the_default_hedge_is_the_half_hedge_with_at_most_4_learners_else_the_counter():
    auto = ProtocolConfig(delta=1.0)
    assert auto.hedge == "auto"
    assert [auto.hedge_of(k) for k in (2, 3, 4, 5, 8, 512)] == ["half"] * 3 + ["counter"] * 3
    assert [k for k in range(1, 9) if auto.syncs_every_violation(k)] == [1, 2, 3, 4]
    for hedge in ("counter", "half"):
        assert {ProtocolConfig(delta=1.0, hedge=hedge).hedge_of(k) for k in (2, 3, 512)} == {hedge}
    assert [Coordinator(auto, k).stats.hedge for k in (3, 5)] == ["half", "counter"]
    assert Coordinator(ProtocolConfig(name="static"), 3).stats.hedge is None


@pytest.mark.parametrize("hedge, largest", [("counter", 2), ("half", 4)])
def test_where_every_resolution_is_a_full_sync_violations_carry_no_model(hedge, largest):
    """A violator is beyond Δ by its own check, so its balancing set grows: with
    k ≤ 2 to everyone, with the half hedge and k ≤ 4 to half the learners. There
    the coordinator resolves with no model (None) and without asking anyone:
    a full sync, the mean of every model. Beyond, it needs the models."""
    for other in (ProtocolConfig(name="static"), ProtocolConfig(name="fda", theta=1.0), ProtocolConfig(name="none")):
        assert not other.syncs_every_violation(2)
    config = ProtocolConfig(delta=1.0, hedge=hedge)
    assert [k for k in range(1, 9) if config.syncs_every_violation(k)] == list(range(1, largest + 1))
    for k in range(2, largest + 1):
        for violating in range(1, k + 1):
            models, reference = random_setup(k, 4, violating, spread=0.1)
            transport = DenseTransport(models, reference)
            coordinator = Coordinator(config, k)
            members = coordinator.resolve(1, list(range(violating)), None, transport)
            assert members == list(range(k)) and transport.fetched == []
            np.testing.assert_allclose(transport.models, np.tile(models.mean(axis=0), (k, 1)), rtol=0, atol=1e-12)
            causes = {c for c, n in coordinator.stats.full_syncs.items() if n}
            assert causes == ({"hedge"} if hedge == "half" else {"forced" if violating == k else "augmented"})
            assert coordinator.stats.violations == violating and coordinator.stats.model_messages["violation"] == 0
            # sync mode: every rank decides from the agreed count alone, the same way
            twin = Coordinator(config, k)
            assert drive(twin.sync_violations(violating), DenseTransport(models, reference)) == members
            assert twin.stats == coordinator.stats


@pytest.mark.parametrize("budget", [None, 0.5])
@pytest.mark.parametrize("k", [2, 3, 5])
def test_with_a_budget_a_balancing_set_of_everyone_is_a_full_sync(k, budget):
    """With --budget, a balancing set that would hold every learner is a full
    sync instead (whose Allreduce steers Δ): the learners it would have fetched
    are not asked. Without one, the same resolution fetches everyone and
    balances them through rank 0, except with k = 2, where every resolution
    is a full sync (``syncs_every_violation``). Either way every model is the mean."""
    for violating in range(1, k + 1):
        models, reference = random_setup(k, 4, violating, spread=0.0)
        models[:violating] += 10.0  # far past Δ, in the same direction: B grows to everyone
        transport = DenseTransport(models, reference)
        mean = models.mean(axis=0)
        coordinator = Coordinator(ProtocolConfig(delta=1.0, budget=budget, counter_limit=10.0, hedge="counter"), k)
        members = coordinator.resolve(1, list(range(violating)), models[:violating], transport)
        assert members == list(range(k))
        np.testing.assert_allclose(transport.models, np.tile(mean, (k, 1)), rtol=0, atol=1e-12)
        np.testing.assert_allclose(transport.reference, mean, rtol=0, atol=1e-12)
        assert coordinator.stats.full_syncs["augmented"] == 1
        if budget is None and k > 2:
            assert sorted(transport.fetched) == list(range(violating, k))
            assert coordinator.stats.model_messages["full_sync"] == 0
        else:
            assert len(transport.fetched) == max(0, k - violating - 1)  # the last augmentation became the full sync
            assert set(transport.fetched) <= set(range(violating, k))
            assert coordinator.stats.model_messages["full_sync"] == 2 * k


def test_budget_prices_static_by_the_rows_non_zeros():
    """On wide sparse rows static b=8's full syncs exchange pairs: the budget
    counts what they send (wire.sync_nbytes with the non-zeros of 8 rows of
    the mean length), not a dense model."""
    from mpisgd.wire import dense_nbytes, sync_block_nbytes, sync_nbytes

    n, k = 50_000, 4
    coordinator = Coordinator(ProtocolConfig(delta=2.0, budget=0.5), k)
    coordinator.horizon = k * 1000
    coordinator.steer(0.0, 4000.0, 4000.0 * 75.5, n)  # 75.5 non-zeros a row: 604 in 8 rows
    assert coordinator.budget["m8"] == 604
    assert coordinator.budget["S8"] == sync_nbytes(n, k, 604) == 8 + sync_block_nbytes(604)  # probe, pairs
    assert sync_nbytes(n, k, 604) < dense_nbytes(n) / 40
    assert sync_nbytes(n, 100, 604) == 8 + dense_nbytes(n)  # 100 blocks outweigh the dense sum
    assert sync_nbytes(6, k, 6) == dense_nbytes(6)  # narrow: no probe, dense
    coordinator.steer(0.0, 4000.0, 4000.0 * 10_000, n)  # 8 rows cover every feature: dense
    assert coordinator.budget["m8"] == n and coordinator.budget["S8"] == 8 + dense_nbytes(n)


# -- the default mode's coordinator (AsyncCoordinator), over a scripted transport ------------


class ScriptedTransport:
    """Rank 0's async transport for k = 3 (rank 0's own violation: ``own``), where rank 1's
    violation (epoch 0) comes at the ``arrives``-th ``collect``; records the REQUESTs a fetch sends."""

    def __init__(self, own, violation, arrives):
        self.own, self.violation, self.arrives, self.collects = own, violation, arrives, 0
        self.requests, self.balanced, self.divergences = [], [], 0
        self.epoch, self.results_sent = 0, np.zeros(3, dtype=np.int64)  # no result has been sent yet

    def own_model(self):
        return self.own

    def collect(self):
        self.collects += 1
        return [(1, 0, self.violation)] if self.collects == self.arrives else [], []

    def divergence(self, model):
        self.divergences += 1
        return math.inf if self.divergences == 1 else 0.0  # the violator alone is not balanced: B grows

    def start_fetch(self, ids, asked, violations):
        self.requests += [int(i) for i in ids if int(i) not in violations]
        return ScriptedFetch(ids, violations)

    def send_balanced(self, ids, model, new_reference):
        self.balanced.append((list(ids), np.array(model), new_reference))


class ScriptedFetch:
    def __init__(self, ids, violations):
        self.ids, self.models = [int(i) for i in ids], dict(violations)

    def answer(self, i, z):
        assert i in self.ids and i not in self.models
        self.models[i] = z

    def test(self):
        if len(self.models) < len(self.ids):
            return False, None  # the REQUESTed learner does not reply: its violation is its reply
        return True, np.array([self.models[i] for i in self.ids])


@pytest.mark.parametrize("arrives, requests", [(2, []), (3, [1])])
def test_a_violation_that_comes_during_a_resolution_is_its_learners_reply(arrives, requests):
    """Rank 0 resolves its own violation and fetches rank 1, whose violation comes
    while the resolution runs: before the fetch starts (collect 2), it is taken
    without a REQUEST; while the fetch waits (collect 3), it answers the REQUEST.
    Either way the balanced model is the mean of the two violations' models."""
    from mpisgd.protocol import AsyncCoordinator, AsyncLearner

    own, theirs = np.array([1.0, 2.0, 1.0]), np.array([3.0, 0.0, 1.0])
    transport = ScriptedTransport(own, theirs, arrives)
    # k = 3 (with k = 2 every resolution is a full sync); seed 1: the random augmentation draws rank 1
    coordinator = AsyncCoordinator(Coordinator(ProtocolConfig(delta=1.0, seed=1, hedge="counter"), 3),
                                   AsyncLearner(transport))
    coordinator.violate()
    for _ in range(5):  # each call takes what has come and advances as far as it can
        coordinator.progress(1)
    assert coordinator.idle and transport.requests == requests
    [(ids, model, new_reference)] = transport.balanced
    assert ids == [0, 1] and not new_reference
    np.testing.assert_array_equal(model, (own + theirs) / 2)


class PacedTransport:
    """A follower's transport of a quiet run: pacing barriers that complete when the test says."""

    epoch = 0

    def __init__(self):
        self.barriers = []  # [completed] of each barrier started

    def pace_barrier(self):
        self.barriers.append([False])
        return self.barriers[-1]

    def paced(self, barrier):
        return barrier[0]


def test_a_block_ends_at_a_poll_at_least_BLOCK_SECONDS_away_within_2R_of_the_last_completed_pace_round():
    """A rank's next stop (``AsyncRounds.next_stop``): the next multiple of
    poll_rows, or where rows are cheap the first one at least BLOCK_SECONDS of
    learning away (the next again after a block in which it took a result,
    or while its learner awaits one); at most
    poll_seconds of learning away; never more than 2R rounds past the last
    pace round whose barrier has completed."""
    from types import SimpleNamespace

    from mpisgd.protocol.asynchronous import BLOCK_SECONDS, AsyncRounds
    from mpisgd.protocol.schedule import Schedule

    poll, R = 8, 16
    transport = PacedTransport()
    run = SimpleNamespace(transport=transport, engine=SimpleNamespace(coordinator=None), rank=1, pilot=None,
                          checkpointer=None, config=SimpleNamespace(poll_rows=poll, poll_seconds=0.01, staleness=0))
    rounds = AsyncRounds(run, Schedule(ProtocolConfig(delta=1.0, pace=R), 2, 1000))
    assert rounds.next_stop(3) == poll  # no rate measured yet: the next poll
    rounds.rate = 20 / BLOCK_SECONDS  # 20 rows in BLOCK_SECONDS: the third poll from round 3
    assert rounds.next_stop(3) == 3 * poll
    transport.epoch = 1  # a result taken in the last block: the next poll, then again by time
    assert (rounds.next_stop(3), rounds.next_stop(3)) == (poll, 3 * poll)
    rounds.rate = 1e12  # rows cheap without bound: 2R past round 0, no barrier yet
    assert rounds.next_stop(3) == 2 * R
    rounds.learner.start_paces(2 * R, 1000)  # at round 2R: the barriers of rounds R and 2R
    assert len(transport.barriers) == 2 and rounds.next_stop(2 * R) == 2 * R  # neither complete: no further
    transport.barriers[0][0] = True
    assert rounds.next_stop(2 * R) == 3 * R
    transport.barriers[1][0] = True
    assert rounds.next_stop(2 * R) == 4 * R
    rounds.learner.join()  # awaiting a result: the next poll
    assert rounds.next_stop(2 * R + 1) == 5 * poll
    rounds.rate = 100  # a slow rank: at most poll_seconds of its rows (1 round)
    assert rounds.next_stop(2 * R + 1) == 2 * R + 2


# -- the configuration's table and the registry ------------------------------------


@pytest.mark.parametrize("kwargs, word", [
    ({"name": "static", "delta": 3.0}, "delta .* of the dynamic protocol, not of 'static'"),
    ({"name": "static", "hedge": "half"}, "hedge"),
    ({"name": "none", "period": 8}, "period .* static, dynamic or fda protocol, not of 'none'"),
    ({"name": "central", "augmentation": "farthest"}, "augmentation"),
    ({"name": "fda", "theta": 1.0, "pace": 16}, "pace"),
    ({"name": "dynamic", "delta": 0.3, "pilot_rounds": 3}, "pilot_rounds .* --delta auto"),
    ({"name": "dynamic", "delta": 0.3, "delta_scale": 2.0}, "delta_scale .* --delta auto"),
    ({"name": "dynamic", "mode": "eventually"}, "mode"),
    ({"name": "dynamic", "node_size": 2, "mode": "async"}, "--mode sync only"),
    ({"name": "dynamic", "seed": 1.5}, "seed"),
    ({"name": "dynamic", "delta_decay": 1}, "delta_decay"),
])  # fmt: skip
def test_every_invalid_combination_is_refused_by_name(kwargs, word):
    with pytest.raises(MpisgdError, match=word):
        ProtocolConfig(**kwargs)


def test_mode_is_part_of_the_configuration():
    config = ProtocolConfig(name="dynamic", delta=0.3)
    assert config.mode is None and config.with_mode(None).mode == "async"  # not chosen: train's default
    sync = config.with_mode("sync")
    assert sync.mode == "sync" and sync.as_dict()["mode"] == "sync" and not sync.asynchronous(4)
    assert config.with_mode("async").asynchronous(4) and not config.with_mode("async").asynchronous(1)
    assert config.with_mode("async").pace_rounds(4) == config.pace and sync.pace_rounds(4) == 0


def test_the_mode_picks_the_rounds_of_the_runners_loop():
    from mpisgd.engine import rounds_of
    from mpisgd.protocol import AsyncRounds, Lockstep

    config = ProtocolConfig(name="dynamic", delta=0.3)
    assert rounds_of(config.with_mode("async"), 4) is AsyncRounds
    assert rounds_of(config.with_mode("sync"), 4) is Lockstep
    assert rounds_of(config.with_mode("async"), 1) is Lockstep  # a lone learner never checks
    assert rounds_of(ProtocolConfig(name="static", period=4).with_mode(None), 4) is Lockstep


def test_every_protocol_is_one_registered_class_reading_known_parameters():
    from dataclasses import fields

    from mpisgd.protocol import PROTOCOLS, REGISTRY

    known = {f.name for f in fields(ProtocolConfig)}
    assert tuple(REGISTRY) == PROTOCOLS
    for name, protocol in REGISTRY.items():
        assert protocol.name == name
        assert set(protocol.parameters) <= known and set(protocol.required) <= set(protocol.parameters)
        assert set(protocol.defaults) <= set(protocol.parameters)
        config = ProtocolConfig(name=name, **{p: 1.0 for p in protocol.required})
        assert config.protocol is protocol


def test_no_protocol_name_is_compared_outside_the_protocol_package():
    import re
    from pathlib import Path

    from mpisgd.protocol import PROTOCOLS

    root = Path(__file__).parent.parent / "mpisgd"
    names = "|".join(PROTOCOLS)
    pattern = re.compile(rf"""(==|!=)\s*["']({names})["']|["']({names})["']\s*(==|!=)|\.name\s*(==|!=|in\b)""")
    found = [f"{path.relative_to(root)}:{i}: {line.strip()}"
             for path in sorted(root.rglob("*.py")) if path.parent.name != "protocol"
             for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)
             and not re.search(r"compress|shuffle", line)]  # "none" is also a compression's name
    assert not found, "\n".join(found)


@pytest.mark.parametrize("k", [2, 3])
def test_train_and_simulate_default_to_the_same_mode(k):
    """The same defaults give the same configuration, mode included, to both commands."""
    from mpisgd.cli import build_parser
    from mpisgd.commands.options import protocol_config

    train = build_parser("train").parse_args(["train", "--synthetic", "disjunction"])
    simulate = build_parser("simulate").parse_args(["simulate", "--synthetic", "disjunction", "--learners", str(k)])
    assert protocol_config(train) == protocol_config(simulate)
    assert protocol_config(train).mode == "async" and protocol_config(train).asynchronous(k)


# -- the schedule ---------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, k, T, every", [
    (dict(name="dynamic", delta="auto", period=3, pilot_rounds=5, mode="async", pace=7), 3, 40, 10),
    (dict(name="dynamic", delta=0.5, period=4, node_size=2, node_period=2, mode="sync"), 4, 30, 0),
    (dict(name="static", period=5), 1, 23, 6),  # a lone learner never stops to check
    (dict(name="none"), 2, 17, 4),
])  # fmt: skip
def test_schedule_stops_at_the_first_event_after_each_round(kwargs, k, T, every):
    """``Schedule.next_stop`` against the events of every round, enumerated."""
    from mpisgd.protocol import Schedule

    config = ProtocolConfig(**kwargs)
    s = Schedule(config, k, T, every)
    step = config.node_period if config.hierarchical else config.period
    checks = {t for t in range(1, T + 1) if k > 1 and config.name != "none" and t % step == 0}
    records = {t for t in range(1, T + 1) if (every and t % every == 0) or t == T}
    pilot = min(config.pilot_rounds, T) if config.auto else None
    paces = {t for t in range(1, T + 1) if config.asynchronous(k) and t % config.pace == 0}
    for t in range(T):
        assert s.next_stop(t, pilot=False) == min({T} | {u for u in checks | records if u > t})
        assert s.next_stop(t) == min({T} | {u for u in checks | records | {pilot or T} if u > t})
        assert s.next_stop(t, protocol=False, pace=True) == min({T} | {u for u in records | paces | {pilot or T}
                                                                        if u > t})
    assert {t for t in range(1, T + 1) if s.is_check(t)} == checks
    assert {t for t in range(1, T + 1) if s.is_record(t)} == records
    assert {t for t in range(1, T + 1) if s.is_pace(t)} == paces - {T}
