"""The network model and clock engine of mpisgd/netmodel.py: hand-computed logs, a plain-Python
twin on random logs, invariants and bad input."""

import math

import numpy as np
import pytest

from mpisgd import netmodel as nm
from mpisgd.errors import MpisgdError

A, B = 1e-6, 1e-9  # α = 1 µs, β = 1 ns/byte (1 GB/s)
NET = nm.Network("test", A, B)
SPR = 1e-6  # one µs per row


# ---------------------------------------------------------------- a plain-Python twin of replay


def thakur_allreduce(a, b, c, k, m):
    """Thakur et al. 2005, §4.4: a power of two p ≤ k; with k − p > 0 extra ranks, one step before
    (their data to a partner, reduced) and one after (the result back)."""
    p = 2 ** int(math.floor(math.log2(k)))
    lg = int(math.log2(p))
    doubling = lg * (a + m * b + m * c)
    rabenseifner = 2 * lg * a + 2 * (p - 1) / p * m * b + (p - 1) / p * m * c
    if p < k:
        doubling += (a + m * b + m * c) + (a + m * b)
        rabenseifner += (a + m * b + m * c) + (a + m * b)
    return min(doubling, rabenseifner)



def naive_replay(events, k, net, spr, groups=()):
    """The rules of the module docstring, one event at a time, with dicts."""
    spr = [spr] * k if np.ndim(spr) == 0 else list(spr)
    clock, compute, idle = [0.0] * k, [0.0] * k, [0.0] * k
    out_free, in_free = [0.0] * k, [0.0] * k
    arrival, to, nbytes, done, starters, marks = {}, {}, {}, {}, {}, {}

    def cost(kind, n, m):
        a, b, c = net.step[0], net.step[1], net.gamma
        if n == 1:
            return 0.0
        if kind in (nm.BARRIER, nm.IBARRIER):
            return math.ceil(math.log2(n)) * a
        return thakur_allreduce(a, b, c, n, m)

    for e in events.tolist():
        kind, rank, group, peer, size, ident = e
        ranks = [rank] if rank >= 0 else (list(range(k)) if group < 0 else [int(r) for r in groups[group]])
        if kind == nm.COMPUTE:
            for r in ranks:
                clock[r] += size * spr[r]
                compute[r] += size * spr[r]
        elif kind == nm.SEND:
            depart = max(clock[rank], out_free[rank])
            out_free[rank] = depart + size * net.beta
            arrival[ident] = depart + net.alpha + size * net.beta
            to[ident] = peer
            nbytes[ident] = size
            clock[rank] += net.overhead
        elif kind == nm.WAIT:
            assert to[ident] == rank
            ready = max(arrival[ident], in_free[rank] + nbytes[ident] * net.beta)
            in_free[rank] = ready
            idle[rank] += max(0.0, ready - clock[rank])
            clock[rank] = max(clock[rank], ready)
        elif kind == nm.COMPLETE:
            for r in ranks:
                assert r in starters[ident]
                idle[r] += max(0.0, done[ident] - clock[r])
                clock[r] = max(clock[r], done[ident])
        elif kind in (nm.ALLREDUCE, nm.BARRIER):
            latest = max(clock[r] for r in ranks)
            for r in ranks:
                idle[r] += latest - clock[r]
                clock[r] = latest + cost(kind, len(ranks), size)
        elif kind in (nm.IALLREDUCE, nm.IBARRIER):
            done[ident] = max(clock[r] for r in ranks) + cost(kind, len(ranks), size)
            starters[ident] = set(ranks)
        elif kind == nm.MARK:
            marks[ident] = max(clock)
    return np.array(clock), np.array(compute), np.array(idle), marks


def random_log(rng, k, n_events, groups):
    """A causal random log: every wait after its send, at its recipient; every completion after its
    start, by a starter."""
    log = nm.EventLog()
    ids = [log.group(g) for g in groups]  # equal groups share an index
    pending, requests, next_id, row = [], [], 0, 0
    for _ in range(n_events):
        choice = rng.integers(8)
        if choice <= 1:
            log.compute(int(rng.integers(-1, k)), int(rng.integers(0, 50)))
        elif choice == 2:
            src, dst = rng.choice(k, 2, replace=False)
            log.send(int(src), int(dst), int(rng.integers(0, 10**5)), next_id)
            pending.append((int(dst), next_id))
            next_id += 1
        elif choice == 3 and pending:
            dst, mid = pending.pop(int(rng.integers(len(pending))))
            log.wait(dst, mid)
        elif choice == 4:
            g = ids[int(rng.integers(len(ids)))] if rng.integers(4) else nm.ALL
            (log.allreduce if rng.integers(2) else lambda nbytes, group: log.barrier(group))(
                int(rng.integers(0, 10**5)), group=g)
        elif choice == 5:
            g = ids[int(rng.integers(len(ids)))] if rng.integers(4) else nm.ALL
            if rng.integers(2):
                log.iallreduce(int(rng.integers(0, 10**5)), next_id, group=g)
            else:
                log.ibarrier(next_id, group=g)
            requests.append((g, next_id))
            next_id += 1
        elif choice == 6 and requests:
            g, rid = requests.pop(int(rng.integers(len(requests))))
            members = range(k) if g < 0 else log.groups[g]
            if rng.integers(2):
                log.complete(rid, group=g)
            else:
                for r in members:
                    log.complete(rid, rank=int(r))
        elif choice == 7:
            log.mark(row)
            row += 1
    return log


@pytest.mark.parametrize("seed", range(6))
def test_replay_equals_naive_twin_on_random_logs(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 9))
    groups = [sorted(rng.choice(k, int(rng.integers(1, k + 1)), replace=False).tolist()) for _ in range(3)]
    log = random_log(rng, k, 400, groups)
    spr = rng.uniform(0.5e-6, 2e-6, size=k)
    net = nm.Network("r", rng.uniform(1e-7, 1e-5), rng.uniform(1e-11, 1e-8), gamma=rng.uniform(0, 1e-9),
                     o=rng.uniform(0, 1e-6), step_alpha=rng.uniform(1e-7, 1e-5), step_beta=rng.uniform(1e-11, 1e-8))
    got = nm.replay(log.events, k, net, spr, log.groups)
    clock, compute, idle, marks = naive_replay(log.events, k, net, spr, log.groups)
    np.testing.assert_allclose(got.clock, clock, rtol=1e-12)
    np.testing.assert_allclose(got.compute, compute, rtol=1e-12)
    np.testing.assert_allclose(got.idle, idle, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(got.marks, [marks[i] for i in range(len(marks))], rtol=1e-12)
    assert got.wall == pytest.approx(clock.max(), rel=1e-12)
    np.testing.assert_allclose(got.mpi, got.clock - got.compute)
    assert np.all(got.idle <= got.mpi + 1e-15)


# ---------------------------------------------------------------- hand-computed logs


def test_ping_pong_two_ranks():
    log = nm.EventLog()
    log.compute(0, 10)  # rank 0 at 10 µs
    log.send(0, 1, 1000, 1)  # arrives 10 + 1 + 1 = 12 µs; rank 0 pays o = α: 11 µs
    log.wait(1, 1)  # rank 1 idle 0 → 12
    log.send(1, 0, 1000, 2)  # arrives 14; rank 1 at 13
    log.wait(0, 2)  # rank 0 idle 11 → 14
    p = nm.replay(log.events, 2, NET, SPR)
    np.testing.assert_allclose(p.clock, [14e-6, 13e-6])
    np.testing.assert_allclose(p.idle, [3e-6, 12e-6])
    np.testing.assert_allclose(p.compute, [10e-6, 0])
    assert p.wall == pytest.approx(14e-6)


def test_collective_on_five_ranks_waits_for_the_late_one():
    log = nm.EventLog()
    for r in range(4):
        log.compute(r, 10)
    log.compute(4, 50)  # the late rank
    log.allreduce(800)
    p = nm.replay(log.events, 5, NET, SPR)
    # 5 = 4 + 1 extra: doubling (2 + 2)·(1 + 0.8) = 7.2 µs < Rabenseifner 6·1 + (1.5 + 2)·0.8 = 8.8 µs
    np.testing.assert_allclose(p.clock, [57.2e-6] * 5)
    np.testing.assert_allclose(p.idle, [40e-6] * 4 + [0.0])
    np.testing.assert_allclose(p.mpi, [47.2e-6] * 4 + [7.2e-6])


def test_collective_on_a_group_leaves_the_others_alone():
    log = nm.EventLog()
    log.compute(nm.ALL, 10)
    log.compute(3, 5)
    g = log.group([1, 3])
    log.barrier(group=g)  # two ranks: one step of α
    p = nm.replay(log.events, 4, NET, SPR, log.groups)
    np.testing.assert_allclose(p.clock, [10e-6, 16e-6, 10e-6, 16e-6])


def test_nonblocking_collective_hidden_behind_compute():
    log = nm.EventLog()
    log.compute(nm.ALL, 10)
    log.iallreduce(1000, request=7)  # done at 10 + (1 + 1) = 12 µs
    log.compute(nm.ALL, 100)
    log.complete(7)
    p = nm.replay(log.events, 2, NET, SPR)
    np.testing.assert_allclose(p.clock, [110e-6] * 2)
    np.testing.assert_allclose(p.idle, [0, 0])


def test_nonblocking_collective_not_hidden_costs_the_rest():
    log = nm.EventLog()
    log.compute(nm.ALL, 10)
    log.compute(1, 5)  # rank 1 starts late: done at 15 + 2 = 17 µs
    log.iallreduce(1000, request=7)
    log.compute(nm.ALL, 1)
    log.complete(7)
    p = nm.replay(log.events, 2, NET, SPR)
    np.testing.assert_allclose(p.clock, [17e-6, 17e-6])
    np.testing.assert_allclose(p.idle, [6e-6, 1e-6])


def test_sends_into_one_rank_share_its_link():
    log = nm.EventLog()
    log.send(1, 2, 10**4, 2)
    log.send(0, 2, 10**4, 1)
    log.wait(2, 1)  # arrives α + 10 µs = 11 µs
    log.wait(2, 2)  # its bytes after the first's: 21 µs
    p = nm.replay(log.events, 3, NET, SPR)
    assert p.clock[2] == pytest.approx(21e-6)
    assert p.idle[2] == pytest.approx(21e-6)


def test_sends_from_one_rank_share_its_link():
    log = nm.EventLog()
    log.send(0, 1, 10**4, 1)  # leaves at 0, arrives 11 µs
    log.send(0, 2, 10**4, 2)  # leaves at 10 µs (the first one's bytes), arrives 21 µs
    log.wait(1, 1)
    log.wait(2, 2)
    p = nm.replay(log.events, 3, NET, SPR)
    np.testing.assert_allclose(p.clock, [2e-6, 11e-6, 21e-6])


@pytest.mark.parametrize("k", [2, 4, 8, 64, 1024])
def test_allreduce_is_the_cheaper_of_doubling_and_rabenseifner(k):
    steps = int(math.log2(k))
    crossover = steps * A / ((steps - 2 * (k - 1) / k) * B) if steps > 2 * (k - 1) / k else math.inf
    for m in (0, 8, 1000, 10**4, 10**6):
        doubling = steps * (A + m * B)
        rabenseifner = 2 * steps * A + 2 * (k - 1) / k * m * B
        assert NET.allreduce(k, m) == pytest.approx(min(doubling, rabenseifner))
        assert NET.allreduce(k, m) == pytest.approx(doubling if m <= crossover else rabenseifner)


@pytest.mark.parametrize("k", [3, 5, 7, 100, 1000])
def test_allreduce_on_a_non_power_of_two(k):
    for m in (0, 8, 1000, 10**6):
        assert NET.allreduce(k, m) == pytest.approx(thakur_allreduce(A, B, 0.0, k, m))
    assert NET.allreduce(3, 8) == pytest.approx(3 * (A + 8 * B))  # to a partner, one exchange, back


def test_collective_steps_apart_from_messages():
    net = nm.Network("s", A, B, step_alpha=3 * A, step_beta=2 * B)
    assert net.p2p(1000) == pytest.approx(A + 1000 * B)
    assert net.allreduce(2, 1000) == pytest.approx(3 * A + 2000 * B)
    assert net.barrier(4) == pytest.approx(6 * A)


def test_crossover_at_eight_ranks():
    # k = 8: 3α + 3mβ against 6α + 1.75mβ; equal at m = 3α/(1.25β) = 2400 bytes
    assert NET.allreduce(8, 2000) == pytest.approx(3 * (A + 2000 * B))
    assert NET.allreduce(8, 3000) == pytest.approx(6 * A + 1.75 * 3000 * B)
    assert NET.allreduce(8, 2400) == pytest.approx(3 * (A + 2400 * B))


def test_allreduce_with_the_reduction_cost():
    net = nm.Network("g", A, B, gamma=0.5e-9)
    # k = 4, m = 10^4: doubling 2·(1 + 10 + 5) = 32 µs; Rabenseifner 4·1 + 3/4·10^4·(2 + 0.5) ns = 22.75 µs
    assert net.allreduce(4, 10**4) == pytest.approx(22.75e-6)
    assert net.allreduce(4, 100) == pytest.approx(2 * (A + 100 * 1.5e-9))


def test_barrier_and_small_messages():
    assert NET.barrier(1) == 0 and NET.allreduce(1, 10**6) == 0
    assert NET.barrier(1024) == pytest.approx(10 * A)
    assert NET.allreduce(1024, 8) == pytest.approx(10 * (A + 8 * B))
    assert NET.p2p(100) == pytest.approx(A + 100 * B)


def test_marks_and_time_to_error():
    log = nm.EventLog()
    for row in range(4):
        log.compute(nm.ALL, 10)
        log.allreduce(8)
        log.mark(row)
    p = nm.replay(log.events, 2, NET, SPR)
    step = 10e-6 + A + 8 * B
    np.testing.assert_allclose(p.marks, step * np.arange(1, 5))
    rounds, errors = [10, 20, 30, 40], [8, 12, 15, 16]  # rates over 2 learners: 0.4, 0.3, 0.25, 0.2
    assert nm.time_to_error(p.marks, rounds, errors, 2, 0.25) == pytest.approx(3 * step)
    assert nm.time_to_error(p.marks, rounds, errors, 2, 0.1) == math.inf


# ---------------------------------------------------------------- invariants


@pytest.mark.parametrize("seed", range(4))
def test_more_bytes_never_faster(seed):
    rng = np.random.default_rng(100 + seed)
    k = 5
    groups = [[0, 2, 4], [1, 3]]
    log = random_log(rng, k, 300, groups)
    events, groups = log.events, log.groups
    before = nm.replay(events, k, NET, SPR, groups)
    bigger = events.copy()
    moves_bytes = np.isin(bigger["kind"], [nm.SEND, nm.ALLREDUCE, nm.IALLREDUCE])
    bigger["size"][moves_bytes] *= 3
    after = nm.replay(bigger, k, NET, SPR, groups)
    assert np.all(after.clock >= before.clock - 1e-15)
    slower = nm.replay(events, k, nm.Network("slow", 2 * A, 2 * B), SPR, groups)
    assert np.all(slower.clock >= before.clock - 1e-15)


def test_no_communication_is_the_longest_compute():
    rng = np.random.default_rng(3)
    log = nm.EventLog()
    rows = np.zeros(4)
    for _ in range(50):
        r, n = int(rng.integers(4)), int(rng.integers(100))
        log.compute(r, n)
        rows[r] += n
    spr = np.array([1e-6, 2e-6, 0.5e-6, 1e-6])
    p = nm.replay(log.events, 4, "10gbe", spr)
    assert p.wall == pytest.approx((rows * spr).max())
    np.testing.assert_allclose(p.clock, rows * spr)
    assert np.all(p.mpi == 0) and np.all(p.idle == 0)


def test_presets_exist_and_are_ordered():
    shm, ge, ib = (nm.network(name) for name in ("shm", "10gbe", "ib100"))
    assert ge.alpha > ib.alpha and ge.beta > ib.beta
    assert ge.beta == pytest.approx(1 / 1.25e9) and ib.beta == pytest.approx(1 / 12.5e9)
    assert all(net.source for net in nm.NETWORKS.values())


# ---------------------------------------------------------------- bad input


def test_unknown_preset():
    with pytest.raises(MpisgdError, match="unknown network 'myrinet'.*10gbe"):
        nm.network("myrinet")
    with pytest.raises(MpisgdError, match="unknown network"):
        nm.replay(np.zeros(0, nm.EVENT), 2, "myrinet", SPR)


@pytest.mark.parametrize("field, value", [("alpha", -1e-6), ("beta", math.nan), ("gamma", -1e-9), ("o", -1.0),
                                          ("step_alpha", math.inf), ("step_beta", -1e-9)])
def test_negative_or_nan_parameters(field, value):
    kwargs = dict(alpha=A, beta=B, gamma=0.0, o=None, step_alpha=None, step_beta=None)
    kwargs[field] = value
    with pytest.raises(MpisgdError, match=field):
        nm.Network("bad", **kwargs)


def test_rank_out_of_range():
    log = nm.EventLog()
    log.compute(2, 10)
    with pytest.raises(MpisgdError, match=r"event 0 \(compute\).*rank must be in \[0, 2\)"):
        nm.replay(log.events, 2, NET, SPR)
    log = nm.EventLog()
    log.send(0, 5, 10, 1)
    with pytest.raises(MpisgdError, match="destination peer"):
        nm.replay(log.events, 2, NET, SPR)


def test_wait_for_a_message_never_sent():
    log = nm.EventLog()
    log.send(0, 1, 10, 1)
    log.wait(1, 2)
    with pytest.raises(MpisgdError, match=r"event 1 \(wait\) waits for message 2, which was not sent"):
        nm.replay(log.events, 2, NET, SPR)


def test_wait_before_its_send():
    log = nm.EventLog()
    log.wait(1, 1)
    log.send(0, 1, 10, 1)
    with pytest.raises(MpisgdError, match="event 0 .*not sent before it"):
        nm.replay(log.events, 2, NET, SPR)


def test_wait_at_the_wrong_rank_and_sent_twice():
    log = nm.EventLog()
    log.send(0, 1, 10, 1)
    log.wait(2, 1)
    with pytest.raises(MpisgdError, match="at rank 2 for message 1, which was sent to another rank"):
        nm.replay(log.events, 3, NET, SPR)
    log = nm.EventLog()
    log.send(0, 1, 10, 1)
    log.send(0, 2, 10, 1)
    with pytest.raises(MpisgdError, match="sends message 1 a second time"):
        nm.replay(log.events, 3, NET, SPR)


def test_a_wait_names_one_rank():
    log = nm.EventLog()
    log.send(0, 1, 10, 1)
    log.wait(nm.ALL, 1)
    with pytest.raises(MpisgdError, match=r"event 1 \(wait\): a wait names one rank"):
        nm.replay(log.events, 2, NET, SPR)


def test_requests_never_started_or_completed_by_an_outsider():
    log = nm.EventLog()
    log.complete(4)
    with pytest.raises(MpisgdError, match="completes request 4, which was not started"):
        nm.replay(log.events, 3, NET, SPR)
    log = nm.EventLog()
    g = log.group([0, 1])
    log.ibarrier(4, group=g)
    log.complete(4, rank=2)
    with pytest.raises(MpisgdError, match="at rank 2, which did not start it"):
        nm.replay(log.events, 3, NET, SPR, log.groups)
    log = nm.EventLog()
    log.ibarrier(4, group=log.group([0, 1]))
    log.complete(4, group=log.group([1, 2]))
    with pytest.raises(MpisgdError, match="at rank 2, which did not start it"):
        nm.replay(log.events, 3, NET, SPR, log.groups)


def test_bad_groups_dtype_and_parameters():
    with pytest.raises(MpisgdError, match="group 0 must be distinct ranks"):
        nm.replay(np.zeros(0, nm.EVENT), 2, NET, SPR, groups=[[0, 0]])
    log = nm.EventLog()
    log.barrier(group=3)
    with pytest.raises(MpisgdError, match="group must be in"):
        nm.replay(log.events, 2, NET, SPR)
    with pytest.raises(MpisgdError, match="dtype"):
        nm.replay(np.zeros((0, 6)), 2, NET, SPR)
    with pytest.raises(MpisgdError, match="seconds_per_row"):
        nm.replay(np.zeros(0, nm.EVENT), 2, NET, -1.0)
    with pytest.raises(MpisgdError, match="k must be"):
        nm.replay(np.zeros(0, nm.EVENT), 0, NET, SPR)
    log = nm.EventLog()
    log.send(0, 1, -5, 1)
    with pytest.raises(MpisgdError, match="size"):
        nm.replay(log.events, 2, NET, SPR)


def test_time_to_error_bad_input():
    with pytest.raises(MpisgdError, match="one entry per timeline row"):
        nm.time_to_error([1.0], [10, 20], [1, 2], 2, 0.1)
    with pytest.raises(MpisgdError, match="timeline row 1 has no MARK"):
        nm.time_to_error([1.0, math.nan], [10, 20], [1, 2], 2, 0.1)


# ---------------------------------------------------------------- per-rank logs of an MPI run


def split_by_rank(events, k, groups):
    """Each rank's view of a global log: its own events, and every collective it takes part in."""
    logs = [[] for _ in range(k)]
    for e in events.tolist():
        kind, rank, group, peer, size, ident = e
        ranks = [rank] if rank >= 0 else (list(range(k)) if group < 0 else [int(r) for r in groups[group]])
        if kind in (nm.ALLREDUCE, nm.BARRIER, nm.IALLREDUCE, nm.IBARRIER):
            for r in ranks:
                logs[r].append(e)
        elif kind != nm.MARK:
            for r in ranks:
                logs[r].append((kind, r, nm.ALL, peer, size, ident))
    return [np.array(log, dtype=nm.EVENT) for log in logs]


def test_merge_two_rank_logs_of_a_ping_pong():
    a, b = nm.EventLog(), nm.EventLog()
    a.compute(0, 10), a.send(0, 1, 1000, 1), a.wait(0, 2), a.allreduce(8)
    b.wait(1, 1), b.compute(1, 3), b.send(1, 0, 1000, 2), b.allreduce(8)
    merged = nm.merge_rank_logs([a.events, b.events])
    expected = nm.EventLog()
    expected.compute(0, 10), expected.send(0, 1, 1000, 1), expected.wait(1, 1), expected.compute(1, 3)
    expected.send(1, 0, 1000, 2), expected.wait(0, 2), expected.allreduce(8)
    assert merged.tolist() == expected.events.tolist()
    p = nm.replay(merged, 2, NET, SPR)
    np.testing.assert_allclose(p.clock, [12e-6 + 3e-6 + 2e-6 + NET.allreduce(2, 8)] * 2)


@pytest.mark.parametrize("seed", range(4))
def test_merged_rank_logs_replay_like_the_global_log(seed):
    rng = np.random.default_rng(200 + seed)
    k = 4
    log = random_log(rng, k, 300, [[0, 1], [1, 2, 3]])
    events = log.events
    events = events[events["kind"] != nm.MARK]
    merged = nm.merge_rank_logs(split_by_rank(events, k, log.groups), log.groups)
    # the same events, each rank's in its order; collectives once
    assert split_by_rank(merged, k, log.groups)[2].tolist() == split_by_rank(events, k, log.groups)[2].tolist()
    assert np.sum(np.isin(merged["kind"], [nm.ALLREDUCE, nm.BARRIER, nm.IALLREDUCE, nm.IBARRIER])) == \
        np.sum(np.isin(events["kind"], [nm.ALLREDUCE, nm.BARRIER, nm.IALLREDUCE, nm.IBARRIER]))
    # any causal order of the same ranks' events gives the same clocks
    np.testing.assert_allclose(nm.replay(merged, k, NET, SPR, log.groups).clock,
                               nm.replay(events, k, NET, SPR, log.groups).clock, rtol=1e-12)


def test_merge_deadlock_and_bad_rank_logs():
    a, b = nm.EventLog(), nm.EventLog()
    a.wait(0, 2), a.send(0, 1, 8, 1)
    b.wait(1, 1), b.send(1, 0, 8, 2)
    with pytest.raises(MpisgdError, match=r"deadlock.*0: 'wait 2 \(event 0\)'.*1: 'wait 1 \(event 0\)'"):
        nm.merge_rank_logs([a.events, b.events])
    a, b = nm.EventLog(), nm.EventLog()
    a.barrier()
    with pytest.raises(MpisgdError, match="deadlock.*barrier"):
        nm.merge_rank_logs([a.events, b.events])
    a = nm.EventLog()
    a.compute(1, 5)
    with pytest.raises(MpisgdError, match="log of rank 0, event 0 \\(compute\\)"):
        nm.merge_rank_logs([a.events, nm.EventLog().events])
