"""The fda protocol (variance monitoring, docs/ALGORITHMS.md §8): its options,
the lagged decision of ``CheckPoints``, its counts in the simulator, and,
under mpiexec, the invariants at every check point of the MPI runner:

    mpiexec -n 2 python -m pytest --only-mpi -m mpi tests/test_fda.py   (and -n 3)
"""

import numpy as np
import pytest

from mpisgd import wire
from mpisgd.cli import main
from mpisgd.errors import MpisgdError
from mpisgd.protocol import CheckPoints, Coordinator, ProtocolConfig

# -- options -----------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, word", [
    ({"name": "fda"}, "theta"),
    ({"name": "fda", "theta": 0.0}, "theta"),
    ({"name": "fda", "theta": -1.0}, "theta"),
    ({"name": "fda", "theta": float("nan")}, "theta"),
    ({"name": "fda", "theta": float("inf")}, "theta"),
    ({"name": "fda", "theta": 1.0, "fda_directions": -1}, "fda_directions"),
    ({"name": "fda", "theta": 1.0, "fda_directions": 1.5}, "fda_directions"),
    ({"name": "fda", "theta": 1.0, "fda_estimate": "sketch"}, "fda_estimate"),
    ({"name": "static", "theta": 1.0}, "theta .* of the fda protocol, not of .static."),
    ({"name": "dynamic", "fda_directions": 2}, "fda_directions .* of the fda protocol"),
    ({"name": "none", "fda_estimate": "exact"}, "fda_estimate"),
    ({"name": "fda", "theta": 1.0, "fda_lag": 2}, "fda_lag"),
    ({"name": "static", "fda_lag": 0}, "fda_lag .* of the fda protocol"),
])  # fmt: skip
def test_bad_fda_options_are_named(kwargs, word):
    with pytest.raises(MpisgdError, match=word):
        ProtocolConfig(**kwargs)


def test_fda_defaults_and_other_protocols_keep_none():
    cfg = ProtocolConfig(name="fda", theta=2.0)
    assert (cfg.fda_directions, cfg.fda_estimate, cfg.fda_lag, cfg.directions, cfg.checking(4)) == \
        (1, "linear", 1, 1, True)
    assert not ProtocolConfig(name="fda", theta=2.0, mode="async").asynchronous(4)  # fda has one mode: lagged, deterministic
    assert ProtocolConfig(name="dynamic").as_dict()["theta"] is None
    assert ProtocolConfig(name="dynamic").directions == 0


@pytest.mark.parametrize("args, word", [
    (["--protocol", "static", "--theta", "1"], "theta"),
    (["--protocol", "dynamic", "--fda-directions", "2"], "fda_directions"),
    (["--protocol", "fda"], "theta"),
    (["--protocol", "fda", "--theta", "0"], "theta"),
    (["--protocol", "fda", "--theta", "-2"], "theta"),
])  # fmt: skip
def test_cli_refuses_before_learning(args, word, tmp_path, capsys):
    code = main(["simulate", "--synthetic", "disjunction", "--learners", "2", "--rounds", "10", "--out",
                 str(tmp_path / "out"), "--quiet", *args])
    err = capsys.readouterr().err
    assert code == 2 and word in err and "Traceback" not in err
    assert not (tmp_path / "out" / "report.json").exists()


def test_train_refuses_the_oracle():
    from mpisgd.runner import RunConfig

    with pytest.raises(MpisgdError, match="fda_estimate"):
        RunConfig(protocol=ProtocolConfig(name="fda", theta=1.0, fda_estimate="exact"), mode="sync")


def test_train_refuses_checkpoints_of_fda():
    from mpi4py import MPI

    from mpisgd.data.rows import ArraySource
    from mpisgd.runner import Run, RunConfig

    source = ArraySource(np.array([0, 1]), np.array([0], np.int32), np.ones(1), np.ones(1), 3)
    cfg = RunConfig(protocol=ProtocolConfig(name="fda", theta=1.0), mode="sync")
    with pytest.raises(MpisgdError, match="checkpoints .* fda"):
        Run(MPI.COMM_SELF, source, cfg, checkpointer=object())


# -- the lagged decision (protocol.py) ---------------------------------------------


class FakeTransport:
    """Records the calls of ``CheckPoints``; the summary sums of the n-th check begun
    are ``sums[n]``."""

    coordinating = True

    def __init__(self, sums):
        self.sums, self.calls, self.begun = sums, [], 0

    def begin_variance(self):
        self.calls.append("begin")
        self.begun += 1
        return self.begun - 1

    def end_variance(self, handle):
        self.calls.append(f"end {handle}")
        return np.asarray(self.sums[handle], dtype=np.float64), None

    def full_sync(self):
        self.calls.append("full_sync")


def test_a_check_begun_at_t_syncs_at_the_next_check_point_and_none_begins_after_a_sync():
    k, theta = 4, 1.0
    c = Coordinator(ProtocolConfig(name="fda", period=8, theta=theta, fda_directions=1), k)
    # sums of [‖D_l‖², ⟨D_l, ξ⟩]: δ̂ = 4/4 − (2/4)² = 0.75 (quiet); 8/4 − (4/4)² = 1 (not > Θ); 12/4 − 0 = 3 (sync)
    tr = FakeTransport([[4.0, 2.0], [8.0, 4.0], [12.0, 0.0], [40.0, 0.0]])
    cp = CheckPoints(c)
    assert [cp.check(t, tr) for t in (8, 16, 24)] == [None, None, None]
    assert cp.check(32, tr) == list(range(k))  # the check begun at 24 settles here: a full sync
    assert tr.calls == ["begin", "end 0", "begin", "end 1", "begin", "end 2", "full_sync"]
    assert cp.pending is None  # nothing to check right after a full sync
    assert cp.check(40, tr) is None and cp.settle(tr) == list(range(k))  # the end of the run settles the last
    assert c.stats.full_syncs["variance"] == 2 and c.stats.checks == 4
    assert c.stats.model_messages["full_sync"] == 2 * 2 * k


def test_without_lag_a_check_syncs_at_its_own_check_point():
    k = 3
    c = Coordinator(ProtocolConfig(name="fda", period=8, theta=1.0, fda_lag=0), k)
    tr = FakeTransport([[3.0, 0.0], [30.0, 0.0], [3.0, 0.0]])
    cp = CheckPoints(c, lagged=True)  # the mode's lag does not apply to fda
    assert [cp.check(t, tr) for t in (8, 16, 24)] == [None, list(range(k)), None]
    assert tr.calls == ["begin", "end 0", "begin", "end 1", "full_sync", "begin", "end 2"]
    assert cp.pending is None and cp.settle(tr) is None


def test_the_exact_estimate_decides_on_the_transports_delta():
    c = Coordinator(ProtocolConfig(name="fda", theta=1.0, fda_estimate="exact"), 2)

    class Exact(FakeTransport):
        def end_variance(self, handle):
            return np.array([100.0, 0.0]), 0.5  # the bound says sync, the exact δ does not

    tr, cp = Exact([]), CheckPoints(c)
    cp.check(1, tr)
    assert cp.check(2, tr) is None and "full_sync" not in tr.calls


# -- the simulator -----------------------------------------------------------------


def simulate(k, rounds, theta, period=4, J=1, estimate=None, seed=3, lag=None):
    from mpisgd.simulator import make_stream, simulate

    cfg = ProtocolConfig(name="fda", period=period, theta=theta, fda_directions=J, fda_estimate=estimate,
                         fda_lag=lag)
    return simulate(make_stream("disjunction", 20, k, seed, 0.01), rounds, cfg, {"loss": "log", "eta0": 1.0},
                    mode="sync")


def test_a_huge_threshold_only_checks_and_each_check_is_one_small_allreduce():
    k, T, b, J = 5, 200, 4, 2
    r = simulate(k, T, 1e12, period=b, J=J)
    checks = T // b
    assert r["stats"]["full_syncs"]["variance"] == 0 and r["stats"]["checks"] == checks
    assert r["bytes_sent"]["control"] == k * (8 + checks * wire.summary_nbytes(J))  # T, then one sum per check
    assert r["messages_sent"]["control"] == k * (1 + checks)
    assert r["bytes_sent"]["full_sync"] == k * wire.dense_nbytes(20)  # the final one
    assert r["fda"]["checks"] == checks and r["fda"]["bound_violations"] == 0


@pytest.mark.parametrize("T", [200, 204])
def test_a_tiny_threshold_syncs_at_every_other_check_point(T):
    k, b = 4, 4
    r = simulate(k, T, 1e-12, period=b)
    m = T // b  # check points; begun at b, 3b, 5b, …, each settled by a full sync one period later
    assert r["stats"]["full_syncs"]["variance"] == (m + 1) // 2
    assert r["stats"]["checks"] == (m + 1) // 2


def test_a_tiny_threshold_without_lag_is_static_averaging():
    from mpisgd.simulator import make_stream, simulate as run

    fda = simulate(4, 200, 1e-12, period=4, lag=0)
    static = run(make_stream("disjunction", 20, 4, 3, 0.01), 200, ProtocolConfig(name="static", period=4),
                 {"loss": "log", "eta0": 1.0}, mode="sync")
    assert fda["stats"]["full_syncs"]["variance"] == static["stats"]["full_syncs"]["static"] == 50
    assert fda["errors"] == static["errors"]
    np.testing.assert_allclose(fda["coef"], static["coef"], rtol=1e-12)


@pytest.mark.parametrize("J", [0, 1, 3])
def test_the_estimate_never_falls_below_the_exact_variance(J):
    r = simulate(6, 400, 0.5, J=J)
    d = r["fda"]
    assert d["checks"] > 10 and d["bound_violations"] == 0
    assert d["median_exact_over_estimate"] <= 1.0
    if J == 0:  # no projection: δ̂ = mean ‖D_l‖², Kamp's quantity
        assert d["median_captured"] == pytest.approx(0.0, abs=1e-12)


def test_the_oracle_syncs_no_more_often_at_the_same_checks():
    linear, exact = simulate(6, 400, 0.5), simulate(6, 400, 0.5, estimate="exact")
    assert exact["fda"]["bound_violations"] == 0
    assert exact["stats"]["full_syncs"]["variance"] <= linear["stats"]["full_syncs"]["variance"] + 2
    assert exact["bytes_sent"]["control"] <= linear["bytes_sent"]["control"] + 2 * 6 * wire.summary_nbytes(1)


# -- under mpiexec: the runner's check points ---------------------------------------


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


class VarianceChecker:
    """Around every check point of an fda run: the estimate δ̂ of the models at a
    check is ≥ their exact δ; the run fully synced at this check point exactly
    when δ̂ > Θ for the check begun one period earlier (lag 1) or begun here (lag
    0), and then every model equals the new reference."""

    def __init__(self, lag):
        from helpers.mpi import Deferred

        self.comm = world().Dup()
        self.k = self.comm.Get_size()
        self.lag = lag
        self.checks = Deferred(self.comm)
        self.begun = None  # δ̂ of the check begun last (lag 1)
        self.full_syncs = 0

    def estimate(self, run):
        """(δ̂, δ) of the current models, by two collectives."""
        coef, intercept = run.learners.weights(0)
        mine = np.append(coef, intercept)
        models = np.empty((self.k, len(mine)))
        self.comm.Allgather(mine, models)
        summary = np.ascontiguousarray(run.learners.summaries()[0])
        sums = np.empty_like(summary)
        self.comm.Allreduce(summary, sums)
        exact = float(((models - models.mean(axis=0)) ** 2).sum(axis=1).mean())
        return run.coordinator.variance_estimate(sums), exact, models

    def before(self, t, run):
        self.now = self.estimate(run)[0]

    def after(self, t, run, members):
        estimate, exact, models = self.estimate(run)
        synced = self.comm.bcast(members, root=0) is not None
        with self.checks.check():
            decided = self.begun if self.lag else self.now
            assert synced == (decided is not None and decided > run.config.protocol.theta)
            if synced:
                self.full_syncs += 1
                r, r_b = run.learners.reference
                np.testing.assert_allclose(models, np.append(r, r_b)[None, :].repeat(self.k, 0), rtol=0,
                                           atol=1e-12)
            assert estimate >= exact - 1e-9 * max(1.0, estimate)
        self.begun = None if synced else estimate  # no check begins right after a full sync

    def close(self):
        try:
            self.checks.raise_on_every_rank()
        finally:
            self.comm.Free()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("J, lag", [(1, 1), (2, 1), (1, 0)])
def test_runner_syncs_exactly_when_the_lagged_estimate_exceeds_theta(J, lag):
    from mpisgd.data.rows import ArraySource
    from mpisgd.data.synthetic import DisjunctionStream
    from mpisgd.runner import RunConfig, train

    checker = VarianceChecker(lag)
    comm = world().Dup()
    try:
        k, rank = comm.Get_size(), comm.Get_rank()
        ip, ix, d, y = DisjunctionStream(n_features=30, n_learners=k, seed=5, drift_prob=0.01).rows(0, 300, [rank])
        cfg = RunConfig(protocol=ProtocolConfig(name="fda", period=3, theta=0.3, fda_directions=J, fda_lag=lag),
                        mode="async",
                        learner={"loss": "log", "eta0": 0.5, "lam": 0.01})
        run, report = train(comm, ArraySource(ip, ix, d, y, 30), cfg, observer=checker)
        if rank == 0:
            assert report["protocol"]["full_syncs"]["variance"] >= checker.full_syncs > 0
    finally:
        comm.Free()
        checker.close()
