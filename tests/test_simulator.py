"""Invariants of the protocol run through the simulator (mpisgd.simulator):
balancing keeps the mean and restores the local conditions, static b=1 makes
all models equal after every round, none is k independent learners, central
is one learner on the round-major rows, and the byte counters agree with the
wire sizes and with themselves (every point-to-point byte sent is received)."""

import math

import numpy as np
import pytest

from mpisgd import wire
from mpisgd.data.synthetic import DisjunctionStream, LinearTeacherStream, write_learner_shards
from mpisgd.errors import MpisgdError
from mpisgd.learners import OnlineLearners
from mpisgd.protocol import AUGMENTATIONS, ProtocolConfig
from mpisgd.simulator import ShardSource, Simulation, SimTransport, run_many, simulate

LEARNER = {"loss": "log", "eta0": 1.0, "lam": 0.0}


def dense_models(L):
    """(k, n + 1) dense [w_l, b_l] of every learner."""
    return np.hstack([L.alpha[:, None] * L.r + L.s[:, None] * L.V, L.bias[:, None]])


def dense_reference(L):
    r, rb = L.reference
    return np.append(r, rb)


def balanced_models(L, send_balanced, ids, model, new_reference, steps):
    """Send a balancing through ``send_balanced`` and check that its members
    hold one model once the steps each made since it sent are taken off
    (``steps``: learner -> ``L.progress``); also that the members' sum is
    kept. Returns their common model."""
    before = dense_models(L)
    send_balanced(ids, model, new_reference)
    after = dense_models(L)
    balanced = [after[l] - (np.append(*steps[l]) if l in steps else 0.0) for l in ids]
    for z in balanced:
        np.testing.assert_allclose(z, balanced[0], rtol=0, atol=1e-9)
    np.testing.assert_allclose(after[ids].sum(axis=0), before[ids].sum(axis=0), rtol=0, atol=1e-9)
    return balanced[0]


def watch_resolutions(sim, delta):
    """Wrap the coordinator's resolve: check the mean is kept and every member
    meets its local condition afterwards. Returns the list of set sizes."""
    sizes = []
    resolve = sim.coordinator.resolve

    def checked(t, violators, models, transport):
        before = dense_models(sim.L).mean(axis=0)
        members = resolve(t, violators, models, transport)
        after = dense_models(sim.L)
        np.testing.assert_allclose(after.mean(axis=0), before, rtol=0, atol=1e-9 * (1 + np.abs(before).max()))
        dist = ((after[members] - dense_reference(sim.L)) ** 2).sum(axis=1)
        assert np.all(dist <= delta * (1 + 1e-9)), (t, dist.max())
        # the O(1) distances agree with the dense ones
        np.testing.assert_allclose(sim.L.distances(), ((after - dense_reference(sim.L)) ** 2).sum(axis=1),
                                   rtol=1e-9, atol=1e-12)
        sizes.append(len(members))
        return members

    sim.coordinator.resolve = checked
    return sizes


@pytest.mark.parametrize("augmentation", AUGMENTATIONS)
def test_balancing_keeps_mean_and_local_conditions(augmentation):
    k, T, delta = 12, 400, 0.5
    stream = DisjunctionStream(20, k, seed=3, drift_prob=0.01)
    sim = Simulation(k, 20, T, ProtocolConfig(delta=delta, augmentation=augmentation, seed=1), LEARNER)
    sizes = watch_resolutions(sim, delta)
    run_many(stream, T, [sim], block=37)
    assert any(0 < s < k for s in sizes), "no partial balancing happened: the test proves nothing"
    st = sim.coordinator.stats
    assert st.checks == T
    assert st.balancings > 0


@pytest.mark.parametrize("theta", [0.2, 0.7])
@pytest.mark.parametrize("augmentation", ["random-one", "farthest"])
def test_partial_balancing_keeps_mean_and_local_conditions(augmentation, theta):
    """--partial: violations and replies carry partial models, the balancing
    averages each coordinate over the members that sent it (docs/ALGORITHMS.md
    §4.7); the mean of all models is kept on every coordinate and every member
    meets its local condition afterwards. Each member's result is its own: the
    balanced values on the S_l it sent and b̄, 8 + 8·|S_l| bytes (then the
    default mode's relay trailer)."""
    k, T, delta, n = 12, 400, 0.5, 60
    stream = DisjunctionStream(n, k, seed=3, drift_prob=0.01)
    sim = Simulation(k, n, T, ProtocolConfig(delta=delta, augmentation=augmentation, partial=theta, seed=1),
                     LEARNER)
    sizes = watch_resolutions(sim, delta)
    tr, send_parts, results = sim.transport, sim.transport.send_parts, []

    def checked(ids, parts):
        before = tr.counters()[0][0, wire.CATEGORIES.index("balance_result")]
        for i, part in zip(ids, parts, strict=True):
            np.testing.assert_array_equal(part.support, tr.sent[i].support)
            assert np.all(part.z[:n][~part.support] == 0.0) and part.z[n + 1] == 1.0
        send_parts(ids, parts)
        # the default mode: each with its relay trailer naming its receiver alone (8 bytes)
        expected = sum(8 + 8 * int(p.support.sum()) + 8 for i, p in zip(ids, parts) if i != 0)
        assert tr.counters()[0][0, wire.CATEGORIES.index("balance_result")] - before == expected
        results.append(len(ids))

    tr.send_parts = checked
    run_many(stream, T, [sim], block=37)
    assert any(0 < s < k for s in sizes), "no partial balancing happened: the test proves nothing"
    assert sim.coordinator.stats.balancings > 0 and sim.coordinator.stats.augmented > 0
    assert len(results) == sim.coordinator.stats.balancings


def test_static_b1_makes_all_models_equal_every_round():
    k, T = 5, 60
    stream = DisjunctionStream(15, k, seed=1, drift_prob=0.05)
    sim = Simulation(k, 15, T, ProtocolConfig(name="static", period=1), LEARNER)
    full_sync = sim.transport.full_sync
    seen = []

    def checked():
        full_sync()
        W = dense_models(sim.L)
        np.testing.assert_allclose(W, np.broadcast_to(W[0], W.shape), rtol=0, atol=1e-12)
        assert np.all(sim.L.distances() == 0.0)
        seen.append(sim.t)

    sim.transport.full_sync = checked
    run_many(stream, T, [sim], block=7)
    assert seen == list(range(1, T + 1))


def test_none_is_independent_learners():
    k, T, n = 3, 200, 30
    stream = LinearTeacherStream(n, k, seed=2, nnz_per_row=5)
    result = simulate(stream, T, ProtocolConfig(name="none"), LEARNER)
    errors = 0
    coefs = []
    for l in range(k):
        ip, ix, d, y = stream.rows(0, T, [l])
        one = OnlineLearners(1, n, **LEARNER)
        one.learn(ip, ix, d, y, np.zeros(T, np.int64))
        errors += int(one.errors[0])
        coefs.append(one.weights(0)[0])
    assert result["errors"] == errors
    np.testing.assert_allclose(result["coef"], np.mean(coefs, axis=0), rtol=1e-12, atol=1e-14)
    assert result["protocol_messages"] == 0
    assert result["bytes_sent"]["full_sync"] == k * wire.dense_nbytes(n)  # the final Allreduce only


@pytest.mark.parametrize("cfg", [ProtocolConfig(name="static", period=1), ProtocolConfig(delta=1e-6),
                                 ProtocolConfig(name="fda", theta=1e-6)], ids=["static", "dynamic", "fda"])
def test_a_lone_learner_never_checks_nor_syncs(cfg):
    """k = 1: the mean of one model is that model, so every protocol learns
    as none does, with the same counts: no check, no sync but the final one."""
    T, n = 200, 30
    stream = LinearTeacherStream(n, 1, seed=2, nnz_per_row=5)
    alone, none = (simulate(stream, T, c, LEARNER) for c in (cfg, ProtocolConfig(name="none")))
    assert cfg.checking(2) and not cfg.checking(1)
    np.testing.assert_array_equal(alone["coef"], none["coef"])
    for key in ("errors", "bytes_sent", "messages_sent", "protocol_messages"):
        assert alone[key] == none[key], key
    assert alone["stats"]["checks"] == 0 and sum(alone["stats"]["full_syncs"].values()) == 1  # the final one


def test_central_is_one_learner_on_round_major_rows():
    k, T, n = 4, 100, 30
    stream = LinearTeacherStream(n, k, seed=5, nnz_per_row=5)
    result = simulate(stream, T, ProtocolConfig(name="central"), LEARNER)
    ip, ix, d, y = stream.rows(0, T)
    one = OnlineLearners(1, n, **LEARNER)
    one.learn(ip, ix, d, y, np.zeros(len(y), np.int64))
    assert result["errors"] == int(one.errors[0])
    np.testing.assert_array_equal(result["coef"], one.weights(0)[0])


def test_blocks_do_not_change_the_result():
    k, T = 6, 300
    stream = DisjunctionStream(20, k, seed=4, drift_prob=0.01)
    cfg = ProtocolConfig(delta=0.3, period=2, augmentation="random-double")
    a = simulate(stream, T, cfg, LEARNER, block=1)
    b = simulate(stream, T, cfg, LEARNER, block=1000)
    for key in ("errors", "model_messages", "bytes_sent", "messages_sent", "stats"):
        assert a[key] == b[key]
    np.testing.assert_array_equal(a["coef"], b["coef"])


def test_counters_agree_with_wire_sizes():
    k, T, n = 9, 300, 25
    stream = DisjunctionStream(n, k, seed=6, drift_prob=0.01)
    sim = Simulation(k, n, T, ProtocolConfig(delta=0.4, augmentation="farthest"), LEARNER)
    # every fetched reply has the size of the learner's actual wire message
    fetch = sim.transport.fetch
    expected = {"reply": 0}

    def fetch_checked(ids, asked):
        expected["reply"] += sum(len(sim.L.message(int(i))) for i in ids if i != 0)
        return fetch(ids, asked)

    sim.transport.fetch = fetch_checked
    r = run_many(stream, T, [sim], block=50)[0]
    st = r["stats"]
    for c in wire.CATEGORIES:  # totals: what is sent is received
        assert r["bytes_sent"][c] == r["bytes_received"][c], c
        assert r["messages_sent"][c] == r["messages_received"][c], c
    assert r["bytes_sent"]["balance_reply"] == expected["reply"]
    syncs = sum(st["full_syncs"].values())
    allreduces = syncs - st["full_syncs"]["augmented"]  # an augmented "full sync" is a balancing of everyone
    assert r["bytes_sent"]["full_sync"] == allreduces * k * wire.dense_nbytes(n)
    assert r["messages_sent"]["balance_request"] * wire.CONTROL_BYTES == r["bytes_sent"]["balance_request"]
    assert st["model_messages"]["violation"] == st["violations"]
    assert st["model_messages"]["full_sync"] == 2 * k * allreduces
    assert r["model_messages"] == sum(st["model_messages"].values())
    per = r["per_rank"]
    assert per["sent_bytes"][1:, wire.CATEGORIES.index("balance_request")].sum() == 0  # only rank 0 requests
    assert per["sent_bytes"][0, wire.CATEGORIES.index("violation")] == 0  # rank 0's model is local
    # a violation message is 16 + 12·nnz bytes or dense: bounded by the dense size
    assert r["bytes_sent"]["violation"] <= r["messages_sent"]["violation"] * (16 + 8 * n)
    assert st["violations"] > 0 and st["augmented"] > 0


def test_counter_forced_full_syncs_happen_and_phases_add_up():
    k, T = 8, 500
    stream = DisjunctionStream(20, k, seed=7, drift_prob=0.01)
    r = simulate(stream, T, ProtocolConfig(delta=0.2), LEARNER, drift_window=50)
    assert r["stats"]["full_syncs"]["forced"] > 0
    by_cause = {}
    for phase in r["phase_messages"].values():
        for key, v in phase.items():
            if not key.endswith("_count"):
                by_cause[key] = by_cause.get(key, 0) + v
    assert sum(by_cause.values()) == r["protocol_messages"]
    assert sum(r["phase_errors"].values()) == r["errors"]
    assert sum(r["phase_rounds"].values()) == T


def test_check_learn_order_adds_the_check_at_zero():
    k, T = 4, 40
    stream = DisjunctionStream(10, k, seed=8, drift_prob=0.0)
    a = simulate(stream, T, ProtocolConfig(name="static", period=8), LEARNER, order="learn-check")
    b = simulate(stream, T, ProtocolConfig(name="static", period=8), LEARNER, order="check-learn")
    assert a["stats"]["full_syncs"]["static"] == 5  # after rounds 8, …, 40
    assert b["stats"]["full_syncs"]["static"] == 5  # before rounds 1, 9, …, 33
    assert a["errors"] == b["errors"]  # the sync at t = 0 and the one at T change no prediction


def test_shards_give_the_stream_result(tmp_path):
    k, T, n = 3, 120, 20
    stream = DisjunctionStream(n, k, seed=9, drift_prob=0.01)
    paths = write_learner_shards(stream, T, str(tmp_path))
    cfg = ProtocolConfig(delta=0.5, period=2)
    source = ShardSource(paths)
    try:
        from_shards = simulate(source, T, cfg, LEARNER, block=17)
    finally:
        source.close()
    from_stream = simulate(stream, T, cfg, LEARNER)
    for key in ("errors", "bytes_sent", "messages_sent", "stats", "drifts"):
        assert from_shards[key] == from_stream[key], key
    np.testing.assert_array_equal(from_shards["coef"], from_stream["coef"])


def test_transport_counts_collectives_at_every_rank():
    L = OnlineLearners(4, 3)
    tr = SimTransport(L)
    tr.allreduce("control", 8)
    tr.up(np.array([1, 2]), "violation", np.array([28, 40]))
    tr.down(np.array([3, 1]), "control", 16)
    sent_b, recv_b, sent_m, recv_m = tr.counters()
    c, v = wire.CATEGORIES.index("control"), wire.CATEGORIES.index("violation")
    assert list(sent_b[:, c]) == [8 + 32, 8, 8, 8] and list(recv_m[:, c]) == [1, 2, 1, 2]
    assert list(recv_b[:, c]) == [8, 24, 8, 24] and sent_m[0, c] == 3
    assert list(sent_b[:, v]) == [0, 28, 40, 0] and recv_b[0, v] == 68 and recv_m[0, v] == 2


def test_relayed_messages_leave_rank_0_once_and_each_member_at_most_twice():
    """The default mode's results and FULLSYNC commands to many (docs/WIRE.md,
    "Relays"): rank 0 sends one message, each member receives one and hands it
    on to at most two; in the event log every member waits for its message
    before sending, and on a network the last gets it after ⌈log2(m + 1)⌉ hops.
    To a few, rank 0 sends each its own."""
    from mpisgd import netmodel

    k = 13
    tr = SimTransport(OnlineLearners(k, 3), log=netmodel.EventLog())
    tr.relay(np.array([2, 3, 5, 6, 7, 9, 10, 11, 12]), "balance_result", 40)
    sent_b, recv_b, sent_m, recv_m = tr.counters()
    c = wire.CATEGORIES.index("balance_result")
    assert list(sent_m[:, c]) == [1, 0, 2, 2, 0, 2, 2] + [0] * 6  # 0 → 2; 2 → 3, 5; 3 → 6, 7; 5 → 9, 10; 6 → 11, 12
    assert list(sent_m[:, c] * 40) == list(sent_b[:, c])
    assert list(recv_m[:, c]) == [0, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 1] and recv_b[:, c].sum() == 9 * 40
    sends = tr.log.events[tr.log.events["kind"] == netmodel.SEND]
    assert [(int(e["rank"]), int(e["peer"])) for e in sends] == [
        (0, 2), (2, 3), (2, 5), (3, 6), (3, 7), (5, 9), (5, 10), (6, 11), (6, 12)]
    net = netmodel.Network("test", alpha=1.0, beta=0.0, o=0.0)
    p = netmodel.replay(tr.log.events, k, net, 0.0, tr.log.groups)
    assert p.wall == pytest.approx(4.0)  # four hops of α to ranks 11 and 12
    tr.relay(np.array([1, 4, 8]), "control", 8)
    sent_m = tr.counters()[2]
    assert sent_m[0, wire.CATEGORIES.index("control")] == 3  # rank 0 to each


def test_central_counts_the_start_allreduce_at_every_rank():
    k, T = 5, 20
    result = simulate(DisjunctionStream(10, k, seed=1), T, ProtocolConfig(name="central"), LEARNER)
    c = wire.CATEGORIES.index("control")
    assert [list(row) for row in result["per_rank"]["sent_msgs"]] == [[0] * c + [1]] * k  # one Allreduce (T) each
    assert result["messages_sent"]["control"] == k and result["model_messages"] == 0


def test_bad_input_is_named():
    with pytest.raises(MpisgdError, match="order"):
        Simulation(2, 3, 10, ProtocolConfig(), LEARNER, order="sideways")
    sim = Simulation(2, 3, 10, ProtocolConfig(), LEARNER)
    with pytest.raises(MpisgdError, match="whole rounds"):
        sim.feed(np.zeros(4, np.int64), np.zeros(0, np.int32), np.zeros(0), np.ones(3))


def test_adaptive_period_checks_every_b_after_violations_and_backs_off_when_quiet():
    k, T = 6, 400
    stream = DisjunctionStream(20, k, seed=12, drift_prob=0.01)
    sim = Simulation(k, 20, T, ProtocolConfig(delta=0.5, period=1), LEARNER, max_period=8)
    seen = []
    check = sim.check

    def recorded(t):
        quiet = check(t)
        seen.append((t, quiet))
        return quiet

    sim.check = recorded
    run_many(stream, T, [sim], block=64)
    gap = 1
    for (t0, quiet), (t1, _q) in zip(seen, seen[1:]):
        gap = min(2 * gap, 8) if quiet else 1
        assert t1 - t0 == gap
    assert any(not q for _t, q in seen) and any(t1 - t0 == 8 for (t0, _), (t1, _) in zip(seen, seen[1:]))
    with pytest.raises(MpisgdError, match="max_period"):
        Simulation(k, 20, T, ProtocolConfig(name="static", period=1), LEARNER, max_period=8)


@pytest.mark.parametrize("mode, pace", [("async", 0), ("async", 64), ("async", 100), ("sync", 64)])
def test_quiet_checks_cost_nothing_in_the_default_mode(mode, pace):
    """With no violator, the default mode sends only the start, the pacing
    barriers (one per rank at each pace round R, 2R, … < T), DONE/FINISH and
    the final sync; sync mode adds one control Allreduce per check and has no
    pacing."""
    k, T, n, b = 6, 300, 20, 4
    stream = DisjunctionStream(n, k, seed=2, drift_prob=0.01)
    sim = Simulation(k, n, T, ProtocolConfig(delta=1e12, period=b, pace=pace), LEARNER, mode=mode)
    r = run_many(stream, T, [sim], block=64)[0]
    assert r["stats"]["checks"] == T // b and r["stats"]["violations"] == 0
    per_check = k * (T // b) if mode == "sync" else 0
    done_finish = 2 * (k - 1) if mode == "async" else 0
    paced = k * ((T - 1) // pace) if mode == "async" and pace else 0
    assert r["messages_sent"]["control"] == k + per_check + done_finish + paced
    assert r["bytes_sent"]["control"] == 8 * (k + per_check + done_finish)  # a barrier carries no bytes
    assert r["messages_sent"]["full_sync"] == k  # the final sync alone


def test_sync_mode_settles_a_check_one_period_later_keeping_the_violators_progress():
    """--mode sync: the violators of the check at t are resolved at t + b, and
    each keeps the steps it made in between: the members' models minus those
    steps are one balanced model (within Δ of the reference, unless everyone
    took it), and the members' sum is kept."""
    k, T, n, b, delta = 8, 240, 20, 3, 0.4
    stream = DisjunctionStream(n, k, seed=5, drift_prob=0.01)
    sim = Simulation(k, n, T, ProtocolConfig(delta=delta, period=b, seed=2), LEARNER, mode="sync")
    seen = []
    send_balanced = sim.transport.send_balanced

    def checked(ids, model, new_reference):
        sent = dict(sim.transport.sent)
        steps = {l: sim.L.progress(l, z) for l, z in sent.items()}
        reference = dense_reference(sim.L)
        common = balanced_models(sim.L, send_balanced, ids, model, new_reference, steps)
        if not new_reference:  # a partial balancing stops once its mean is within Δ
            assert ((common - reference) ** 2).sum() <= delta * (1 + 1e-9)
        seen.append(sum(np.any(z != 0) for z in (np.append(*s) for s in steps.values())))

    sim.transport.send_balanced = checked
    run_many(stream, T, [sim], block=50)
    assert seen and max(seen) > 0, "no violator had made a step since it sent: the test proves nothing"


def test_network_prediction_replays_the_message_log_of_static():
    """Static b=8 in lock-step: T rounds of compute, the start Allreduce, T/8
    syncs and the final one, on the network's Allreduce cost."""
    from mpisgd import netmodel

    k, T, n = 4, 40, 10
    stream = DisjunctionStream(n, k, seed=1, drift_prob=0.0)
    sim = Simulation(k, n, T, ProtocolConfig(name="static", period=8), LEARNER, network="10gbe")
    run_many(stream, T, [sim])
    net = netmodel.network("10gbe")
    expected = T * 1e-6 + net.allreduce(k, 8) + (T // 8 + 1) * net.allreduce(k, wire.dense_nbytes(n))
    assert sim.predict(seconds_per_row=1e-6)["wall"] == pytest.approx(expected, rel=1e-9)


def test_sync_mode_hides_the_per_check_agreement_behind_learning():
    """Quiet checks in sync mode: each nonblocking Allreduce completes one
    period later, so it costs nothing when b rows take longer than it, and
    about its latency per check when they do not."""
    from mpisgd import netmodel

    k, T, n, b = 4, 64, 10, 2
    stream = DisjunctionStream(n, k, seed=1, drift_prob=0.0)
    sim = Simulation(k, n, T, ProtocolConfig(name="dynamic", delta=1e12, period=b), LEARNER, mode="sync",
                     network="10gbe")
    run_many(stream, T, [sim])
    net = netmodel.network("10gbe")
    fixed = net.allreduce(k, 8) + net.allreduce(k, wire.dense_nbytes(n))  # the start and the final sync
    slow = sim.predict(seconds_per_row=1e-3)["wall"]
    assert slow == pytest.approx(T * 1e-3 + fixed + net.allreduce(k, 8), rel=1e-6)  # the last check's wait
    fast = sim.predict(seconds_per_row=1e-9)["wall"]
    assert fast == pytest.approx(T / b * net.allreduce(k, 8) + fixed, rel=0.01)


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize("k, hedge", [(2, "counter"), (3, "half"), (4, "half")])
def test_where_every_resolution_is_a_full_sync_only_the_count_of_violators_travels(k, hedge, mode):
    """``ProtocolConfig.syncs_every_violation``: no violation carries a model. The
    default mode sends rank 0 an empty message per violator ≠ 0, then FULLSYNC
    to the others; sync mode sends nothing beyond the count of violators, the
    full sync following on every rank (no END, no FULLSYNC)."""
    T, n, b = 400, 20, 4
    stream = DisjunctionStream(n, k, seed=5, drift_prob=0.01)
    sim = Simulation(k, n, T, ProtocolConfig(delta=0.3, period=b, hedge=hedge, pace=0), LEARNER, mode=mode)
    r = run_many(stream, T, [sim], block=64)[0]
    st = r["stats"]
    syncs = sum(st["full_syncs"].values()) - 1  # the final one aside
    assert st["violations"] > 0 and syncs > 0 and st["checks"] == T // b
    assert st["balancings"] == 0 and st["augmented"] == 0 and st["model_messages"]["violation"] == 0
    assert r["bytes_sent"]["violation"] == 0 and r["bytes_sent"]["balance_reply"] == 0
    if mode == "sync":
        assert r["messages_sent"]["violation"] == 0
        assert r["messages_sent"]["control"] == k + k * (T // b)  # the start, and one count per check
    else:
        assert 0 < r["messages_sent"]["violation"] <= st["violations"]
        assert r["messages_sent"]["control"] == k + syncs * (k - 1) + 2 * (k - 1)  # start, FULLSYNC, DONE/FINISH


def test_half_hedge_keeps_mean_and_local_conditions_in_the_simulator():
    k, T, delta = 16, 400, 0.5
    stream = DisjunctionStream(20, k, seed=3, drift_prob=0.01)
    sim = Simulation(k, 20, T, ProtocolConfig(delta=delta, hedge="half", seed=1), LEARNER)
    sizes = watch_resolutions(sim, delta)
    run_many(stream, T, [sim], block=37)
    assert all(s == k or 2 * s < k for s in sizes)  # below half the learners, or a full sync
    assert any(0 < s < k for s in sizes) and sim.coordinator.stats.full_syncs["hedge"] > 0
    assert sim.coordinator.stats.full_syncs["forced"] == 0 and sim.coordinator.counter == 0


@pytest.mark.parametrize("mode", ["async", "sync"])
@pytest.mark.parametrize("block", [1, 7, 1000])
def test_delta_auto_measures_the_first_rounds_and_checks_nobody_before(mode, block):
    from mpisgd.protocol import auto_delta, pilot_values

    k, T, P = 5, 300, 24
    stream = DisjunctionStream(20, k, seed=5, drift_prob=0.01)
    cfg = ProtocolConfig(delta="auto", pilot_rounds=P, delta_scale=0.5, period=2)
    sim = Simulation(k, 20, T, cfg, LEARNER, mode=mode)
    seen = []
    resolve = sim.coordinator.resolve
    sim.coordinator.resolve = lambda t, *a: seen.append(t) or resolve(t, *a)
    result = run_many(stream, T, [sim], block=block)[0]
    assert seen and min(seen) > P  # the pilot's rounds are not checked
    indptr, indices, data, y = stream.rows(0, P)  # the same rows, learner l's = row l of each round
    values = pilot_values(indptr, data, y, LEARNER)
    lengths = np.diff(indptr)
    statistics = [(math.fsum(values[l::k].tolist()), P, int(lengths[l::k].sum())) for l in range(k)]
    want, record = auto_delta(cfg, LEARNER, statistics, 20)
    assert result["delta_auto"] == record and sim.coordinator.delta == want


def test_delta_auto_gives_the_same_result_whatever_the_blocks():
    k, T = 4, 200
    stream = DisjunctionStream(20, k, seed=6, drift_prob=0.01)
    cfg = ProtocolConfig(delta="auto", pilot_rounds=30)
    a = simulate(stream, T, cfg, LEARNER, block=1)
    b = simulate(stream, T, cfg, LEARNER, block=1000)
    for key in ("errors", "delta_auto", "bytes_sent", "messages_sent", "stats"):
        assert a[key] == b[key]


@pytest.mark.parametrize("args, word", [(["--delta", "-1"], "delta"), (["--delta", "0"], "delta"),
                                        (["--delta-scale", "0"], "delta_scale"),
                                        (["--delta-scale", "-2"], "delta_scale"),
                                        (["--pilot-rounds", "0"], "pilot_rounds"),
                                        (["--budget", "0"], "budget"), (["--budget", "1.01"], "budget")])
def test_simulate_names_a_bad_delta_before_learning(args, word, tmp_path, capsys):
    from mpisgd.cli import main

    out = tmp_path / "run"
    assert main(["simulate", "--synthetic", "disjunction", "-k", "2", "--rounds", "10", "--out", str(out),
                 "--quiet", *args]) == 2
    assert word in capsys.readouterr().err
    assert not out.exists()  # nothing learned, nothing written


def test_simulate_refuses_a_delta_that_is_no_number():
    from mpisgd.cli import main

    with pytest.raises(SystemExit):
        main(["simulate", "--synthetic", "disjunction", "--delta", "large"])


def test_simulate_reports_and_prints_delta_auto(tmp_path, capsys):
    import json

    from mpisgd.cli import main

    out = tmp_path / "run"
    assert main(["simulate", "--synthetic", "disjunction", "-k", "3", "--rounds", "200", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    auto = report["delta_auto"]
    assert report["configuration"]["protocol"]["delta"] == "auto"  # the default
    assert auto["delta"] == auto["c"] * auto["eta_P"] * math.sqrt(auto["eta_P"] * auto["G"])
    assert auto["pilot_rows"] == 3 * 8
    assert "delta auto: Δ = c·η·√(η·G)" in printed  # the configuration is report.json's


def test_simulate_reports_and_prints_the_budget(tmp_path, capsys):
    import json

    from mpisgd.cli import main

    out = tmp_path / "run"
    assert main(["simulate", "--synthetic", "disjunction", "-k", "3", "--rounds", "300", "--budget", "0.3",
                 "--hedge", "half", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    budget = report["budget"]
    assert report["configuration"]["protocol"]["budget"] == 0.3
    assert budget["steps"] == report["protocol"]["full_syncs"]["hedge"] > 0 and budget["horizon"] == 3 * 300
    assert budget["delta"] != report["delta_auto"]["delta"]  # steered from the measured Δ
    assert "budget F = 0.3: Δ steered at" in capsys.readouterr().out


# -- the default mode's delayed resolutions (DelayedCheckPoints) -------------------------


@pytest.mark.parametrize("k, hedge", [(3, "half"), (8, "counter")])
def test_a_resolution_one_period_late_is_sync_modes_protocol(k, hedge):
    """The default mode with a delay of b rounds resolves each check at the next
    check point, before that one's check, the violators keeping their steps: the
    protocol of --mode sync (the same errors, model messages and final model; k = 3
    where every resolution is a full sync, k = 8 with balancing), only its
    messages differ (no per-check agreement, results relayed)."""
    T, n, b = 300, 20, 3
    stream = DisjunctionStream(n, k, seed=5, drift_prob=0.01)
    config = ProtocolConfig(delta=0.4, period=b, seed=2, hedge=hedge)
    sync, late = run_many(stream, T, [Simulation(k, n, T, config, LEARNER, mode="sync"),
                                      Simulation(k, n, T, config, LEARNER, mode="async", async_delay=b)], block=64)
    assert sync["stats"]["violations"] > 10
    assert late["errors"] == sync["errors"] and late["model_messages"] == sync["model_messages"]
    np.testing.assert_array_equal(late["coef"], sync["coef"])
    assert late["messages_sent"] != sync["messages_sent"]


def test_a_delayed_resolution_takes_effect_d_rounds_late_and_its_violators_defer():
    """--mode async with a delay of d rounds: a violation of the check at t is
    resolved after round t + d (one resolution at a time: violations sent
    meanwhile wait for the next, due d rounds after it), a learner whose
    violation is open checks nothing, and the violators keep the steps they
    made since they sent: the members' models minus those steps are one model,
    and the members' sum is kept."""
    k, T, n, b, d = 8, 400, 20, 1, 5
    stream = DisjunctionStream(n, k, seed=5, drift_prob=0.01)
    sim = Simulation(k, n, T, ProtocolConfig(delta=0.4, period=b, seed=2, hedge="counter"), LEARNER,
                     mode="async", async_delay=d)
    tr, began, resolved, kept = sim.transport, {}, [], []
    begin_check, resolve, send_balanced = tr.begin_check, sim.coordinator.resolve, tr.send_balanced

    def checking(delta, deferring=()):
        assert set(deferring) == set(began)  # every open violator, and only they
        handle = begin_check(delta, deferring)
        began.update((l, sim.t) for l in handle[0].tolist())
        return handle

    def resolving(t, violators, models, transport):
        resolved.append((sim.t, min(began[l] for l in violators)))
        for l in violators:
            began.pop(l)
        return resolve(t, violators, models, transport)

    def balancing(ids, model, new_reference):
        steps = {l: sim.L.progress(l, z) for l, z in tr.sent.items() if l in ids or new_reference}
        balanced_models(sim.L, send_balanced, ids, model, new_reference, steps)
        kept.append(any(np.any(np.append(*s) != 0) for s in steps.values()))
        for l in (range(k) if new_reference else ids):  # a learner that took a result: its violation is void
            began.pop(int(l), None)

    def syncing():
        full_sync()
        began.clear()  # everyone took the result

    full_sync = tr.full_sync
    tr.begin_check, sim.coordinator.resolve, tr.send_balanced, tr.full_sync = checking, resolving, balancing, syncing
    r = run_many(stream, T, [sim], block=64)[0]
    assert len(resolved) > 10 and any(kept)
    previous = -d
    for at, first in resolved:
        if at < T:  # (at the end of the run every open violation is resolved)
            assert at == max(first, previous) + d  # d rounds after its first violation, or after the last resolution
        previous = at
    assert r["examples"] == k * T


def test_the_delayed_model_is_deterministic_and_named():
    k, T, n = 4, 300, 20
    config = ProtocolConfig(delta=0.4, period=2, seed=2)
    a, b = (simulate(DisjunctionStream(n, k, seed=5, drift_prob=0.01), T, config, LEARNER, async_delay=4)
            for _ in range(2))
    assert a["errors"] == b["errors"] and a["bytes_sent"] == b["bytes_sent"] and a["async_delay"] == 4
    np.testing.assert_array_equal(a["coef"], b["coef"])
    with pytest.raises(MpisgdError, match="async_delay"):
        Simulation(k, n, T, config, LEARNER, async_delay=-1)


@pytest.mark.parametrize("args, delay", [(["--protocol", "dynamic"], None), (["--protocol", "dynamic",
                                                                               "--async-delay", "2"], 2),
                                         (["--protocol", "dynamic", "--mode", "sync"], 0),
                                         (["--protocol", "static"], 0),
                                         (["--protocol", "dynamic", "--mode", "sync", "--async-delay", "2"], "refused"),
                                         (["--protocol", "static", "--async-delay", "0"], "refused")])
def test_simulate_records_its_async_delay_and_refuses_one_that_means_nothing(args, delay, tmp_path, capsys):
    """The default mode's delay: ASYNC_DELAY unless given, recorded in report.json;
    given where nothing resolves late (sync mode, static), a usage error naming it."""
    import json

    from mpisgd.cli import main
    from mpisgd.simulator import ASYNC_DELAY

    out = tmp_path / "run"
    code = main(["simulate", "--synthetic", "disjunction", "-k", "2", "--rounds", "20", "--features", "20",
                 "--out", str(out), "--quiet", *args])
    if delay == "refused":
        assert code == 2 and "--async-delay" in capsys.readouterr().err and not out.exists()
        return
    assert code == 0
    config = json.loads((out / "report.json").read_text())["configuration"]
    assert config["async_delay"] == config["options"]["async_delay"] == (ASYNC_DELAY if delay is None else delay)
