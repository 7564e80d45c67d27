"""The MPI runner at any number of ranks (pytest-mpi):

    mpiexec -n 2 python -m pytest --only-mpi tests/test_mpi_runner.py   (and -n 3)

Each test runs a small job in-process on a Dup of COMM_WORLD, one learner per
rank, on a seeded disjunction stream, and checks the protocol's invariants
around every check point, or compares the run with a serial computation."""

import numpy as np
import pytest

pytestmark = pytest.mark.mpi(min_size=2)

N_FEATURES = 30


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def stream(k, seed=1, drift_prob=0.01):
    from mpisgd.data.synthetic import DisjunctionStream

    return DisjunctionStream(n_features=N_FEATURES, n_learners=k, seed=seed, drift_prob=drift_prob)


def source(rows, rank, k, seed=1):
    """Learner ``rank``'s first ``rows`` rounds of the stream, in memory."""
    from mpisgd.data.rows import ArraySource

    ip, ix, d, y = stream(k, seed).rows(0, rows, [rank])
    return ArraySource(ip, ix, d, y, N_FEATURES, describe=f"test[{rank}]")


def config(name="dynamic", period=1, delta=1.0, mode="sync", **protocol):
    """A run's configuration; period and delta only where the protocol reads them."""
    from mpisgd.protocol import REGISTRY, ProtocolConfig
    from mpisgd.runner import RunConfig

    reads = REGISTRY[name].parameters
    protocol.update({key: value for key, value in (("period", period), ("delta", delta)) if key in reads})
    return RunConfig(protocol=ProtocolConfig(name=name, mode=mode, **protocol),
                     learner={"loss": "log", "eta0": 0.5, "lam": 0.01}, timeline_every=50)


def run_job(cfg, rows=300, observer=None, rows_of=None, seed=1):
    from mpisgd.runner import train

    comm = world().Dup()
    try:
        k, rank = comm.Get_size(), comm.Get_rank()
        n = rows_of(rank, k) if rows_of else rows
        run, report = train(comm, source(n, rank, k, seed), cfg, observer=observer)
    finally:
        comm.Free()
    return run, report


def dense(run):
    coef, intercept = run.learners.weights(0)
    return np.append(coef, intercept)


class Checker:
    """Around every check point (sync mode, a check settled one period after
    it began): the mean model is kept; after a resolution every member holds
    the balanced model, which meets the local condition, plus, for a
    violator, the steps it made since it sent its model; after a full sync
    every model is equal; the violation counter stays below k."""

    def __init__(self):
        from helpers.mpi import Deferred

        self.comm = world().Dup()
        self.k = self.comm.Get_size()
        self.checks = Deferred(self.comm)  # a failed check must not leave the other ranks in a collective
        self.resolutions = 0
        self.full_syncs = 0
        self.sent = {}  # violators of the check begun last: their models as sent
        self.begun = None  # the round of that check

    def models(self, run):
        mine = dense(run)
        out = np.empty((self.k, len(mine)))
        self.comm.Allgather(mine, out)
        return out

    def before(self, t, run):
        self.before_models = self.models(run)

    def after(self, t, run, members):
        models = self.models(run)
        members = self.comm.bcast(members, root=0)
        with self.checks.check():
            self._check(t, run, models, members)

    def _check(self, t, run, models, members):
        np.testing.assert_allclose(models.mean(axis=0), self.before_models.mean(axis=0), rtol=0, atol=1e-10)
        r, r_b = run.learners.reference
        reference = np.append(r, r_b)
        if members:
            self.resolutions += 1
            if np.allclose(models, reference, rtol=0, atol=1e-12):  # a full sync of the current models
                assert len(members) == self.k
                self.full_syncs += 1
            else:
                steps = {i: self.before_models[i] - z for i, z in self.sent.items()}
                balanced = [models[i] - steps.get(i, 0.0) for i in members]
                delta = run.coordinator.threshold(self.begun)
                for z in balanced:
                    np.testing.assert_allclose(z, balanced[0], rtol=0, atol=1e-10)
                assert ((balanced[0] - reference) ** 2).sum() <= delta * (1 + 1e-9) + 1e-12
                self.full_syncs += len(members) == self.k
        delta = run.coordinator.threshold(t)  # the check begun at t: who violates (static: no Δ, nobody)
        self.sent = {i: z for i, z in enumerate(models) if delta is not None and ((z - reference) ** 2).sum() > delta}
        self.begun = t
        if run.rank == 0:
            assert run.coordinator.counter < self.k  # the counter forced a full sync in time

    def close(self):
        try:
            self.checks.raise_on_every_rank()
        finally:
            self.comm.Free()


@pytest.mark.parametrize("augmentation", ["random-one", "random-double", "farthest"])
def test_dynamic_keeps_mean_and_local_conditions(augmentation):
    checker = Checker()
    try:
        run, report = run_job(config(delta=0.3, period=2, augmentation=augmentation), observer=checker)
        assert checker.resolutions > 0
    finally:
        checker.close()
    if run.rank == 0:
        assert report["protocol"]["violations"] > 0


def test_time_dependent_threshold_keeps_the_invariants():
    checker = Checker()
    try:
        run, report = run_job(config(delta=2.0, period=3, delta_decay=True), observer=checker)
        assert checker.resolutions > 0
    finally:
        checker.close()
    assert run.coordinator.threshold(100) == pytest.approx(0.2)


def test_asgd_final_model_is_the_mean_of_averaged_models():
    from mpisgd.learners import OnlineLearners

    cfg = config(name="none")
    cfg.learner["average"] = True
    run, report = run_job(cfg)
    alone = OnlineLearners(1, N_FEATURES, loss="log", eta0=0.5, lam=0.01, average=True)
    ip, ix, d, y = stream(run.size).rows(0, 300, [run.rank])
    alone.learn(ip, ix, d, y, np.zeros(len(y), np.int64))
    mine = np.append(*alone.averaged_weights(0))
    total = np.zeros_like(mine)
    world().Allreduce(mine, total)
    np.testing.assert_allclose(np.append(run.coef, run.intercept), total / run.size, rtol=1e-10, atol=1e-13)


def test_violation_counter_forces_full_sync():
    checker = Checker()
    try:
        run, report = run_job(config(delta=0.2, period=1, hedge="counter"), observer=checker)
    finally:
        checker.close()
    if run.rank == 0:
        assert report["protocol"]["full_syncs"]["forced"] > 0
        assert checker.full_syncs >= report["protocol"]["full_syncs"]["forced"]


def test_static_full_syncs_make_models_equal():
    checker = Checker()
    try:
        run, report = run_job(config(name="static", period=7), observer=checker)
        assert checker.full_syncs == 300 // 7
    finally:
        checker.close()


def test_static_b1_equals_k_models_stepping_on_the_mean():
    from naive import naive_static_mean

    def rows_of(rank, k):
        return 60 - 7 * rank  # unequal lengths

    run, report = run_job(config(name="static", period=1), rows_of=rows_of)
    k = run.size
    Xs, ys = [], []
    for l in range(k):
        ip, ix, d, y = stream(k).rows(0, rows_of(l, k), [l])
        X = np.zeros((len(y), N_FEATURES))
        for i in range(len(y)):
            X[i, ix[ip[i] : ip[i + 1]]] = d[ip[i] : ip[i + 1]]
        Xs.append(X)
        ys.append(y)
    lam = run.config.learner["lam"]
    w, b, errors, loss_sum = naive_static_mean(Xs, ys, "log", 0.5, lam)
    np.testing.assert_allclose(run.coef, w, rtol=1e-9, atol=1e-12)
    assert run.intercept == pytest.approx(b, rel=1e-9, abs=1e-12)
    if run.rank == 0:
        assert report["online"]["errors"] == errors
        assert report["online"]["loss"] == pytest.approx(loss_sum, rel=1e-9)


def test_none_equals_independent_fits():
    from mpisgd.learners import OnlineLearners

    run, report = run_job(config(name="none"))
    k, rank = run.size, run.rank
    alone = OnlineLearners(1, N_FEATURES, loss="log", eta0=0.5, lam=0.01)
    ip, ix, d, y = stream(k).rows(0, 300, [rank])
    alone.learn(ip, ix, d, y, np.zeros(len(y), np.int64))
    assert alone.errors[0] == run.learners.errors[0]
    assert alone.loss_sum[0] == run.learners.loss_sum[0]
    np.testing.assert_array_equal(dense(run), np.append(*alone.weights(0)))
    mine = np.append(*alone.weights(0))
    total = np.zeros_like(mine)
    world().Allreduce(mine, total)
    np.testing.assert_allclose(np.append(run.coef, run.intercept), total / k, rtol=1e-12, atol=1e-14)
    if rank == 0:
        assert [s["errors"] for s in report["per_rank"]][rank] == alone.errors[0]
        assert report["communication"]["total_bytes"] == k * (8 + 8 * (N_FEATURES + 2))  # T, final sync


class SpyComm:
    """A communicator proxy that records the size of every buffer handed to MPI for sending."""

    def __init__(self, comm):
        self._comm = comm
        self.sent = 0

    def __getattr__(self, name):
        return getattr(self._comm, name)

    def Send(self, buf, dest, tag):
        self.sent += np.asarray(buf).nbytes
        return self._comm.Send(buf, dest=dest, tag=tag)

    def Isend(self, buf, dest, tag):
        self.sent += np.asarray(buf).nbytes
        return self._comm.Isend(buf, dest=dest, tag=tag)

    def Allreduce(self, sendbuf, recvbuf, op):
        self.sent += np.asarray(sendbuf).nbytes
        return self._comm.Allreduce(sendbuf, recvbuf, op=op)

    def Iallreduce(self, sendbuf, recvbuf, op):
        self.sent += np.asarray(sendbuf).nbytes
        return self._comm.Iallreduce(sendbuf, recvbuf, op=op)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_byte_counters_equal_buffers_sent(mode):
    from mpisgd.runner import Run
    from mpisgd.wire import CATEGORIES

    comm = world().Dup()
    spy = SpyComm(comm)
    try:
        k, rank = comm.Get_size(), comm.Get_rank()
        run = Run(spy, source(300, rank, k), config(delta=0.3, period=2, augmentation="farthest", mode=mode))
        run.run()
        counted = run.comm.sent_bytes.sum()
        assert counted == spy.sent
        report = run.report()
    finally:
        comm.Free()
    if rank == 0:
        c = report["communication"]
        from mpisgd import wire

        for cat in CATEGORIES:  # every byte sent point-to-point is received once (an Allgather: k times)
            assert (c["sent"][cat]["bytes"] == c["received"][cat]["bytes"] or
                    (cat == "full_sync" and c["sent"][cat]["bytes"] < c["received"][cat]["bytes"])), cat
            assert c["sent"][cat]["messages"] == c["received"][cat]["messages"], cat
        fs = report["protocol"]["full_syncs"]
        # an augmented full sync is sent point-to-point (with k = 2 it is an Allreduce:
        # ProtocolConfig.syncs_every_violation); the final
        syncs = fs["total"] - 1 - (0 if run.config.protocol.syncs_every_violation(k) else fs["augmented"])
        probe = wire.sync_probe_size(N_FEATURES, k, "none")  # then pairs or the dense sum (docs/WIRE.md)
        dense = 8 * (N_FEATURES + 2)
        assert c["sent"]["full_sync"]["messages"] == k * (1 + syncs * (2 if probe else 1))
        assert c["sent"]["full_sync"]["bytes"] <= k * (dense + syncs * (8 * probe + dense))
        assert c["sent"]["balance_request"]["bytes"] == 8 * c["sent"]["balance_request"]["messages"]


@pytest.mark.parametrize("name", ["none", "static", "dynamic"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_run_with_an_empty_shard_ends(name, mode):
    def rows_of(rank, k):
        return 0 if rank == k - 1 else 100 + 13 * rank

    run, report = run_job(config(name=name, period=3, delta=0.3, mode=mode), rows_of=rows_of)
    k = run.size
    if run.rank == k - 1:
        assert run.learners.examples[0] == 0
    if run.rank == 0:
        assert report["online"]["examples"] == sum(rows_of(r, k) for r in range(k))
        assert report["configuration"]["rounds"] == max(rows_of(r, k) for r in range(k))


def test_sync_mode_is_deterministic():
    runs = [run_job(config(delta=0.3, period=2, augmentation="random-double")) for _ in range(2)]
    (a, ra), (b, rb) = runs
    np.testing.assert_array_equal(a.coef, b.coef)
    assert a.intercept == b.intercept
    np.testing.assert_array_equal(a.comm.sent_bytes, b.comm.sent_bytes)
    np.testing.assert_array_equal(a.comm.recv_messages, b.comm.recv_messages)
    if a.rank == 0:
        assert ra["protocol"] == rb["protocol"]


def test_async_dynamic_ends_with_one_model():
    run, report = run_job(config(delta=0.3, period=2, mode="async"))
    assert not run.rounds.learner.pending  # every violation was resolved, or overtaken by a resolution
    assert run.transport._sends == [] and run.transport._full_sync is None
    if run.rank == 0:
        assert report["protocol"]["violations"] > 0
        assert run.coordinator.counter < run.size
    mine = np.append(run.coef, run.intercept)
    everyone = world().allgather(mine)
    for other in everyone:
        np.testing.assert_allclose(other, mine, rtol=0, atol=1e-12)
    if run.rank == 0:
        assert report["online"]["examples"] == 300 * run.size


def test_central_is_one_learner_over_every_stream_in_round_order():
    from mpisgd.learners import OnlineLearners
    from mpisgd.data.rows import RoundMajorSource
    from mpisgd.runner import train

    comm = world().Dup()
    try:
        k = comm.Get_size()
        src = RoundMajorSource([source(120 - 10 * l, l, k) for l in range(k)], block_rounds=16)
        run, report = train(comm, src, config(name="central"))
    finally:
        comm.Free()
    if run.rank != 0:
        return
    alone = OnlineLearners(1, N_FEATURES, loss="log", eta0=0.5, lam=0.01)
    s = stream(k)
    ip, ix, d, y = s.rows(0, 120, range(k))
    keep = [t * k + l for t in range(120) for l in range(k) if t < 120 - 10 * l]  # round-major, shorter streams end
    for i in keep:
        alone.learn(ip[i : i + 2], ix, d, y[i : i + 1], np.zeros(1, np.int64))
    assert report["online"]["errors"] == alone.errors[0]
    assert report["online"]["examples"] == len(keep)
    np.testing.assert_allclose(run.coef, alone.weights(0)[0], rtol=1e-12, atol=1e-14)
    assert report["communication"]["total_bytes"] == 8 * k  # the rounds Allreduce only


class _Clocked:
    """A source that records (monotonic time, rounds taken) at every take and,
    on the slow rank, sleeps before each one."""

    def __init__(self, inner, sleep):
        self.inner, self.sleep, self.log = inner, sleep, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def take(self, m):
        import time

        if self.sleep:
            time.sleep(self.sleep)
        rows = self.inner.take(m)
        if rows is not None:
            self.log.append((time.monotonic(), len(rows[3])))
        return rows


def _round_skew(pace, T=480):
    """The largest lead, in rounds, of any rank over another at any take of a
    quiet async run (Δ too large to violate) whose last rank sleeps 2 ms
    before each of its takes of at most 8 rows."""
    from mpisgd.runner import Run

    comm = world().Dup()
    try:
        k, rank = comm.Get_size(), comm.Get_rank()
        src = _Clocked(source(T, rank, k), 0.002 if rank == k - 1 else 0.0)
        cfg = config(delta=1e12, period=4, mode="async", pace=pace)
        cfg.poll_rows = 8
        Run(comm, src, cfg).run()
        reached = np.cumsum([m for _t, m in src.log])  # the round each take reaches
        logs = comm.allgather([(t, int(x)) for (t, _m), x in zip(src.log, reached)])
    finally:
        comm.Free()
    lead = 0
    for a, mine in enumerate(logs):
        for when, x in mine:
            for b, theirs in enumerate(logs):
                if b != a:
                    before = [y for t, y in theirs if t <= when]  # b had taken up to round max(before) then
                    lead = max(lead, x - (max(before) if before else 0))
    return lead


def test_pacing_bounds_the_round_skew_of_the_default_mode():
    """--pace R: no rank takes rows past round x before every other rank has
    taken rows up to x − 2R (it waits at each pace round for the barrier of
    the previous one). Without pacing, the slowed rank falls far behind."""
    pace = 16
    assert _round_skew(0) > 4 * pace, "the slowed rank did not fall behind: the test proves nothing"
    assert _round_skew(pace) <= 2 * pace
