"""Invariants of the coordinator's logic (mpisgd.protocol), over a plain dense
transport: balancing keeps the mean model, every member of a balancing set
meets its local condition afterwards, a full sync makes all models equal,
and the violation counter forces a full sync."""

import numpy as np
import pytest

from mpisgd.errors import MpisgdError
from mpisgd.protocol import AUGMENTATIONS, Coordinator, ProtocolConfig


class DenseTransport:
    """k models as rows of a matrix; the obviously correct transport."""

    def __init__(self, models, reference):
        self.models = np.array(models, dtype=np.float64)
        self.reference = np.array(reference, dtype=np.float64)
        self.fetched = []

    def fetch(self, ids):
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
    coordinator = Coordinator(ProtocolConfig(delta=1.0, counter_limit=limit, counter_reset="forced-only"), k)
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
    ],
)
def test_bad_configuration_is_named(kwargs, word):
    with pytest.raises(MpisgdError, match=word):
        ProtocolConfig(**kwargs)
