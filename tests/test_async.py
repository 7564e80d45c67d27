"""The invariants of ``--mode async`` at any number of ranks (pytest-mpi):

    mpiexec -n 2 python -m pytest --only-mpi tests/test_async.py   (and -n 3)

Each test sets every rank's model by hand, lets one or more learners violate,
moves models on while the resolution is under way (as learning would), and
drives rank 0's ``AsyncCoordinator`` and the followers' polling to the end of
the resolution. Steps are separated by barriers on a separate communicator,
so the scenario is the same whatever the timing."""

import numpy as np
import pytest

from mpisgd import wire

pytestmark = pytest.mark.mpi(min_size=2)

N = 12  # features


def _setup(delta, augmentation="random-one"):
    from mpi4py import MPI

    from mpisgd.comm import CountingComm, MPITransport
    from mpisgd.learners import OnlineLearners
    from mpisgd.protocol import AsyncCoordinator, AsyncLearner, Coordinator, ProtocolConfig

    comm = MPI.COMM_WORLD.Dup()
    steps = MPI.COMM_WORLD.Dup()  # the test's own barriers and checks
    learners = OnlineLearners(1, N, loss="log", eta0=0.1)
    config = ProtocolConfig(name="dynamic", period=1, delta=delta, augmentation=augmentation, seed=3,
                            hedge="counter")  # the counter's paths (with 2 ranks every resolution is a full sync)
    co = Coordinator(config, comm.Get_size())
    tr = MPITransport(CountingComm(comm), learners, asynchronous=True,
                      violation_models=not config.syncs_every_violation(co.k))  # as the runner makes it
    me = AsyncLearner(tr)  # this rank's side of the async mode
    return comm, steps, learners, tr, me, AsyncCoordinator(co, me) if tr.coordinating else None


def _model(learners):
    coef, intercept = learners.weights(0)
    return np.append(coef, intercept)


def _set(learners, w):
    """This learner's model becomes the dense [coef, intercept] w."""
    learners.take(0, learners.weights_z(w[:N], w[N]))


def _step(learners, w):
    """As a step of learning would: the model becomes w, and the step is counted
    (a learner that made no step since it sent its model has no progress to keep)."""
    _set(learners, w)
    learners.steps[0] += 1


def _resolve(me, coordinator, steps):
    """Rank 0 resolves until a resolution has ended and nothing is left; the
    followers answer until rank 0 releases them (FINISH)."""
    if coordinator is not None:
        while coordinator.members is None or not coordinator.idle:
            coordinator.progress(1)
        coordinator.finish()
    else:
        me.serve_until_finish()
    return steps.bcast(coordinator.members if coordinator is not None else None, root=0)


def _all(steps, flag):
    """Every rank's assertion, seen by every rank (no rank hangs in a collective)."""
    return steps.allgather(bool(flag))


def test_balancing_keeps_the_mean_and_the_progress_made_meanwhile():
    comm, steps, learners, tr, me, coordinator = _setup(delta=1.0)
    rank, k = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(rank)
    w = 0.01 * rng.standard_normal(N + 1)
    if rank == 1:
        w[0] = 1.8  # ‖w − r‖² ≈ 3.2 > Δ; with one more learner the mean is within Δ
    _set(learners, w)
    if rank == 1:
        me.violate()
    sent = _model(learners)
    steps.Barrier()
    meanwhile = 0.05 * np.random.default_rng(10 + rank).standard_normal(N + 1)  # steps while it is resolved
    _step(learners, sent + meanwhile)
    before = steps.allgather(_model(learners))
    members = _resolve(me, coordinator, steps)
    after = np.array(steps.allgather(_model(learners)))
    before = np.array(before)
    # the mean over the balancing set of the current models is kept
    np.testing.assert_allclose(after[members].mean(axis=0), before[members].mean(axis=0), atol=1e-12)
    if not tr.violation_models:  # k = 2: a full sync, joined by every rank after its steps (none since)
        assert members == list(range(k))
        np.testing.assert_allclose(after, np.tile(before.mean(axis=0), (k, 1)), atol=1e-12)
    else:
        assert 1 in members and 1 < len(members) < k
        # the violator keeps the steps it made after sending; a fetched member replied after its own
        balanced = after[1] - (before[1] - np.array(steps.allgather(sent))[1])
        for i in members:
            expected = balanced if i == 1 else after[i]
            np.testing.assert_allclose(expected, balanced, atol=1e-12)
        # the balanced model meets the local condition (r is still 0)
        assert (balanced ** 2).sum() <= 1.0
        outside = [i for i in range(k) if i not in members]
        np.testing.assert_array_equal(after[outside], before[outside])  # nobody else was touched
    assert all(_all(steps, not me.pending and not tr._sends))
    steps.Free()
    comm.Free()


def test_a_violation_that_crosses_a_balance_request_is_the_reply():
    """Rank 0's resolution asks for models; rank 1 violates before it has seen
    the request. Its violation is its reply: rank 1 sends no reply, and the
    balanced model is the mean of the models sent, its violation's included."""
    comm, steps, learners, tr, me, coordinator = _setup(delta=1e-6)  # every balancing grows to everyone
    rank, k = comm.Get_rank(), comm.Get_size()
    _set(learners, np.full(N + 1, 0.1 * (rank + 1)))
    sent = _model(learners)
    if coordinator is not None:
        coordinator.violate()
        coordinator.progress(1)  # the resolution starts: it asks for a model
    steps.Barrier()
    if rank == 1:
        me.violate()  # sent before rank 1 has seen a request
    steps.Barrier()
    members = _resolve(me, coordinator, steps)
    assert members == list(range(k))
    ok = not me.pending and not me.violated  # rank 1's violation was answered by the new reference
    if rank == 1:
        ok = ok and _count(tr, "sent", "balance_reply") == 0 and _count(tr, "sent", "violation") == 1
    if coordinator is not None:
        stats = coordinator.coordinator.stats
        ok = ok and stats.violations == 1 and stats.full_syncs["augmented"] == 1  # rank 1's is a reply
        ok = ok and _count(tr, "received", "balance_reply") == k - 2 and coordinator.idle
    models = np.array(steps.allgather(_model(learners)))
    mean = np.array(steps.allgather(sent)).mean(axis=0)
    np.testing.assert_allclose(models, np.broadcast_to(mean, models.shape), atol=1e-12)
    assert all(_all(steps, ok))
    steps.Free()
    comm.Free()


def test_a_violation_overtaken_by_a_full_sync_is_dropped():
    """Rank 0's own violation forces a full sync; rank 1 violates before it has
    seen FULLSYNC. The full sync includes rank 1's model, so its violation is
    stale when rank 0 gets it: dropped, not resolved again."""
    comm, steps, learners, tr, me, coordinator = _setup(delta=1e-6)
    rank, k = comm.Get_rank(), comm.Get_size()
    _set(learners, np.full(N + 1, float(rank)))
    if coordinator is not None:
        coordinator.coordinator.counter = k  # the violation counter is due: the next violation forces a full sync
        coordinator.violate()
        coordinator.progress(1)
    steps.Barrier()
    if rank == 1:
        me.violate()  # sent before rank 1 has seen FULLSYNC
    steps.Barrier()
    members = _resolve(me, coordinator, steps)
    assert members == list(range(k))
    models = np.array(steps.allgather(_model(learners)))
    np.testing.assert_allclose(models, np.full(models.shape, (k - 1) / 2), atol=1e-12)
    ok = not me.pending and not me.violated and tr._full_sync is None
    if coordinator is not None:
        stats = coordinator.coordinator.stats
        ok = ok and stats.violations == 1 and stats.full_syncs["forced"] == 1 and sum(stats.full_syncs.values()) == 1
        ok = ok and _count(tr, "received", "violation") == 1 and coordinator.idle
    assert all(_all(steps, ok))
    steps.Free()
    comm.Free()


def test_forced_full_sync_is_nonblocking_and_keeps_progress():
    comm, steps, learners, tr, me, coordinator = _setup(delta=1e-6)
    rank, k = comm.Get_rank(), comm.Get_size()
    if coordinator is not None:
        coordinator.coordinator.counter = k  # the violation counter is due: the next violation forces a full sync
    _set(learners, np.full(N + 1, float(rank)))
    if rank == 1:
        me.violate()
    steps.Barrier()
    members = _resolve(me, coordinator, steps)
    assert members == list(range(k))
    models = np.array(steps.allgather(_model(learners)))
    mean = np.full(N + 1, (k - 1) / 2)
    np.testing.assert_allclose(models, np.broadcast_to(mean, models.shape), atol=1e-12)
    ok = not me.pending and tr._full_sync is None
    if coordinator is not None:
        ok = ok and coordinator.coordinator.stats.full_syncs["forced"] == 1
    assert all(_all(steps, ok))
    steps.Free()
    comm.Free()


def test_a_fetched_member_awaits_the_result_and_keeps_its_steps():
    """A learner that answered a balance request is in the resolution (pending:
    no own checks, so the model it sent stays the one the result is computed
    from, and --staleness bounds how far it learns on); the result then keeps
    the steps it made since its reply. Rank 0 answering its own fetch likewise."""
    comm, steps, learners, tr, me, coordinator = _setup(delta=1.0)
    rank = comm.Get_rank()
    _set(learners, np.full(N + 1, 0.1 * (rank + 1)))
    sent = _model(learners)
    handle = None
    if coordinator is not None:
        handle = tr.start_fetch([0, 1])
        me.join()  # its own model sent: a member, as AsyncCoordinator makes it
    steps.Barrier()
    if rank == 1:
        while tr.last_sent is None:  # until it has answered the request
            me.poll()
    ok = [me.pending] if rank in (0, 1) else [not me.pending]
    steps.Barrier()
    meanwhile = 0.05 * np.random.default_rng(20 + rank).standard_normal(N + 1)
    if rank in (0, 1):
        _step(learners, sent + meanwhile)  # steps made after the reply
    steps.Barrier()
    if coordinator is not None:
        from mpisgd.comm import _wait

        mean = np.mean(_wait(handle), axis=0)  # the replies, one model each
        tr.send_balanced([0, 1], mean, False)
        coordinator.finish()
    else:
        me.serve_until_finish()
    after = _model(learners)
    balanced = np.array(steps.allgather(sent))[[0, 1]].mean(axis=0)
    if rank in (0, 1):
        np.testing.assert_allclose(after, balanced + meanwhile, atol=1e-12)
    ok.append(not me.pending)
    assert all(_all(steps, all(ok)))
    steps.Free()
    comm.Free()


def _count(tr, side, category):
    counts = tr.comm.sent_messages if side == "sent" else tr.comm.recv_messages
    return int(counts[wire.CATEGORIES.index(category)])


RELAYED = 2 + wire.RELAY_ABOVE  # ranks: rank 0 and a relayed set of followers


@pytest.mark.mpi(min_size=RELAYED)
def test_a_request_that_overtakes_a_relayed_result_waits_for_it():
    """Rank 0 sends a result to every follower (relayed: 0 → 1 → 2, 3 …), then
    asks rank 2 for its model. Rank 2 gets the request first (rank 1 has not
    polled yet): it answers only once it has taken the relayed result, so the
    model it sends is the result."""
    comm, steps, learners, tr, me, coordinator = _setup(delta=1.0)
    rank, k = comm.Get_rank(), comm.Get_size()
    _set(learners, np.full(N + 1, 0.1 * (rank + 1)))
    result = learners.weights_z(np.full(N, 0.7), 0.3)
    if coordinator is not None:
        tr.send_balanced(list(range(1, k)), result, False)
        fetch = tr.start_fetch([2])
    steps.Barrier()
    ok = True
    if rank == 2:
        while _count(tr, "received", "balance_request") == 0:
            me.poll()
        ok = _count(tr, "received", "balance_result") == 0 and _count(tr, "sent", "balance_reply") == 0
    steps.Barrier()
    if rank == 1:
        while tr.epoch == 0:
            me.poll()
        ok = _count(tr, "sent", "balance_result") == 2  # handed on to ranks 2 and 3
    if rank == 2:
        while _count(tr, "sent", "balance_reply") == 0:
            me.poll()
    if rank > 2:
        while tr.epoch == 0:
            me.poll()
    if coordinator is not None:
        from mpisgd.comm import _wait

        fetched = _wait(fetch)[0]
        ok = np.allclose(fetched, result, atol=1e-12)
    steps.Barrier()  # every follower has the result: FINISH cannot meet a poll of this test's
    if coordinator is not None:
        tr.send_balanced([2], fetched, False)  # rank 2's resolution ends
        coordinator.finish()
    else:
        me.serve_until_finish()
    if rank != 0:
        ok = ok and np.allclose(_model(learners), np.append(np.full(N, 0.7), 0.3), atol=1e-12)
    ok = ok and not me.pending and me._deferred is None
    assert all(_all(steps, ok))
    steps.Free()
    comm.Free()


@pytest.mark.mpi(min_size=RELAYED)
def test_a_distance_request_that_overtakes_a_relayed_result_waits_for_it():
    """Rank 0 sends a result to every follower (relayed: 0 → 1 → 2, 3 …), then
    asks every learner for ‖w − r‖² (DIST, for --augmentation farthest). Rank 2
    gets the command first (rank 1 has not polled yet): it answers only once it
    has taken the relayed result, so every distance rank 0 gets is that of the
    learner's model with the result in it."""
    comm, steps, learners, tr, me, coordinator = _setup(delta=1.0, augmentation="farthest")
    rank, k = comm.Get_rank(), comm.Get_size()
    _set(learners, np.full(N + 1, 0.1 * (rank + 1)))
    if coordinator is not None:
        tr.send_balanced(list(range(1, k)), learners.weights_z(np.full(N, 0.7), 0.3), False)
        asked = tr.start_distances()
    steps.Barrier()
    ok = True
    if rank == 2:
        while _count(tr, "received", "control") == 0:
            me.poll()
        ok = _count(tr, "received", "balance_result") == 0 and _count(tr, "sent", "control") == 0
    steps.Barrier()
    if rank != 0:
        while tr.epoch == 0 or me._deferred is not None:
            me.poll()
    distances = None
    if coordinator is not None:
        from mpisgd.comm import _wait

        distances = _wait(asked)
    distances = steps.bcast(distances, root=0)
    ok = ok and distances[rank] == learners.distances()[0]  # the model it holds now, the result's for followers
    steps.Barrier()
    if coordinator is not None:
        coordinator.finish()
    else:
        me.serve_until_finish()
    ok = ok and not me.pending and me._deferred is None
    assert all(_all(steps, ok))
    steps.Free()
    comm.Free()


@pytest.mark.mpi(min_size=RELAYED + 1)
def test_a_relayed_full_sync_that_overtakes_a_relayed_result_waits_for_it():
    """Rank 0 sends a result to {2, 3, …} (relayed: 0 → 2 → 3, 4 …), then starts
    a full sync (FULLSYNC relayed: 0 → 1 → 2, 3 …). Rank 3 gets the command from
    rank 1 before rank 2 has relayed the result: it joins only once it has
    taken it, so the mean is that of every current model, with the result in
    every member's."""
    comm, steps, learners, tr, me, coordinator = _setup(delta=1.0)
    rank, k = comm.Get_rank(), comm.Get_size()
    w = np.full(N + 1, 0.1 * (rank + 1))
    _set(learners, w)
    w_result = np.full(N + 1, 0.7)
    current = np.array(steps.allgather(w_result if rank >= 2 else w))
    if coordinator is not None:
        tr.send_balanced(list(range(2, k)), learners.weights_z(w_result[:N], w_result[N]), False)
        full_sync = tr.start_full_sync()
    steps.Barrier()
    ok = True
    if rank == 1:
        while _count(tr, "received", "control") == 0:
            me.poll()  # takes FULLSYNC and hands it on to ranks 2 and 3
    steps.Barrier()
    if rank == 3:
        while _count(tr, "received", "control") == 0:
            me.poll()
        ok = _count(tr, "received", "balance_result") == 0 and tr._full_sync is None  # waits for the result
    steps.Barrier()
    if coordinator is not None:
        from mpisgd.comm import _wait

        _wait(full_sync)
    else:
        while tr.references == 0:
            me.poll()
    models = np.array(steps.allgather(_model(learners)))
    np.testing.assert_allclose(models, np.broadcast_to(current.mean(axis=0), models.shape), atol=1e-12)
    if coordinator is not None:
        coordinator.finish()
    else:
        me.serve_until_finish()
    ok = ok and not me.pending and me._deferred is None and tr._full_sync is None
    assert all(_all(steps, ok))
    steps.Free()
    comm.Free()


def test_the_pacing_barriers_bound_a_learner_to_2R_past_the_last_pace_round_every_rank_has_entered():
    """A learner enters the pacing barrier of every pace round jR before T
    that it has passed, in order, and may learn 2R rounds past the last pace
    round whose barrier has completed (every rank has entered it); entering
    (which tests the open barriers once) and testing never wait."""
    import time

    comm, steps, learners, tr, me, coordinator = _setup(delta=1.0)
    rank, R = comm.Get_rank(), 4
    me.pace = R

    def until(bound):  # the bound seen within 30 s (False rather than a hang)
        deadline = time.monotonic() + 30
        while me.pace_limit(2 * R, 100) != bound:
            if time.monotonic() > deadline:
                return False
        return True

    ok = [me.pace_limit(0, 100) == 2 * R]  # no barrier yet: 2R past the run's first round
    if rank != 0:
        me.start_paces(2 * R, 100)  # at round 2R: the barriers of rounds R and 2R
        ok.append(len(me._paces) == 2)
    steps.Barrier()
    if rank != 0:
        ok.append(me.pace_limit(2 * R, 100) == 2 * R)  # rank 0 has entered neither
    steps.Barrier()
    if rank == 0:
        me.start_paces(2 * R, 2 * R)  # round 2R is the run's last: round R's barrier only (complete already, maybe)
        ok.append([round_ for round_, _barrier in me._paces] in ([R], []))
    ok.append(until(3 * R))  # every rank in round R's barrier; rank 0 not in round 2R's
    steps.Barrier()
    if rank == 0:
        me.start_paces(2 * R, 100)
    ok.append(until(4 * R))
    ok.append(not me._paces and me.pace_limit(2 * R, 3 * R) == 3 * R)
    assert all(_all(steps, all(ok)))
    tr.close()
    steps.Free()
    comm.Free()
