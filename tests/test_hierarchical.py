"""Hierarchical synchronization (--node-size, docs/ALGORITHMS.md §6): the node
average, the leaders' protocol and the sharing of its results, in the
simulator and under MPI (the MPI tests at any number of ranks:

    mpiexec -n 2 python -m pytest --only-mpi -m mpi tests/test_hierarchical.py   (and -n 3, -n 4)

The simulator against ``train`` message for message: tests/test_equivalence.py."""

import numpy as np
import pytest

from mpisgd.errors import MpisgdError
from mpisgd.protocol import ProtocolConfig
from mpisgd.simulator import Simulation, make_stream, run_many, simulate
from mpisgd.wire import CATEGORIES, CONTROL_BYTES, dense_nbytes

N = 30
LEARNER = {"loss": "log", "eta0": 0.5, "lam": 0.01}


def _stream(k, seed=3):
    return make_stream("disjunction", N, k, seed, drift_prob=0.01)


def _sim(k, rounds=300, **protocol):
    return simulate(_stream(k), rounds, ProtocolConfig(**protocol), LEARNER, mode="sync")


def _dense(L):
    z = L.models(np.arange(L.k))
    return np.column_stack([z[:, N + 1, None] * L.r + z[:, :N], z[:, N]])  # [α·r + u, b]


# -- invariants (simulator) ------------------------------------------------------------


@pytest.mark.parametrize("protocol", [dict(name="dynamic", delta=0.3, period=2, node_size=3),
                                      dict(name="dynamic", delta=0.2, period=4, node_size=2, node_period=2,
                                           augmentation="farthest"),
                                      dict(name="static", period=3, node_size=4)])
def test_members_of_a_node_hold_one_model_and_the_mean_is_kept(protocol):
    """After every node average (every b_node rounds) the members of a node hold
    the same model; a node average, the leaders' protocol and the sharing of its
    results keep the mean over all learners."""
    k, rounds = 12, 240
    config = ProtocolConfig(**protocol)
    sim = Simulation(k, N, rounds, config, LEARNER, mode="sync")
    m, step = config.node_size, config.node_period
    indptr, indices, data, y = _stream(k).rows(0, rounds)
    checked = 0
    for t0 in range(0, rounds, step):
        lo, hi = t0 * k, (t0 + step) * k
        sim.L.learn(indptr[lo : hi + 1] - indptr[lo], indices[indptr[lo] : indptr[hi]],
                    data[indptr[lo] : indptr[hi]], y[lo:hi], np.tile(np.arange(k), step))
        sim.t += step
        before = _dense(sim.L).mean(axis=0)
        sim.check(sim.t)
        w = _dense(sim.L)
        np.testing.assert_allclose(w.mean(axis=0), before, rtol=0, atol=1e-10)
        nodes = w.reshape(k // m, m, -1)
        np.testing.assert_allclose(nodes, np.broadcast_to(nodes[:, :1], nodes.shape), rtol=0, atol=1e-12)
        checked += 1
    assert checked == rounds // step and sim.coordinator.stats.checks + sim.coordinator.stats.full_syncs["static"] > 0


def test_node_average_keeps_the_mean_and_equalizes_the_node():
    from mpisgd.simulator import Leaders, NodeSim

    k, m = 8, 4
    sim = Simulation(k, N, 50, ProtocolConfig(name="none"), LEARNER)
    indptr, indices, data, y = _stream(k).rows(0, 50)
    sim.L.learn(indptr, indices, data, y, np.tile(np.arange(k), 50))
    before = _dense(sim.L)
    nodes = NodeSim(Leaders(sim.L, m))
    nodes.average()
    after = _dense(sim.L)
    np.testing.assert_allclose(after.mean(axis=0), before.mean(axis=0), rtol=0, atol=1e-12)
    for j in range(k // m):
        np.testing.assert_allclose(after[j * m : (j + 1) * m], np.broadcast_to(before[j * m : (j + 1) * m].mean(axis=0),
                                                                               (m, N + 1)), rtol=0, atol=1e-12)
    sent_b, recv_b, sent_m, _ = nodes.counts.counters()
    assert (sent_b[:, CATEGORIES.index("full_sync")] == dense_nbytes(N)).all()  # one dense Allreduce per node
    assert (recv_b == sent_b).all() and sent_m.sum() == k


@pytest.mark.parametrize("protocol", [dict(name="dynamic", delta=0.3, period=1),
                                      dict(name="dynamic", delta=0.2, period=2, augmentation="random-double"),
                                      dict(name="dynamic", delta="auto", pilot_rounds=20, period=2),
                                      dict(name="static", period=3)])
def test_node_size_one_is_the_flat_protocol_bit_for_bit(protocol):
    flat = _sim(4, **protocol)
    hier = _sim(4, **protocol, node_size=1)
    assert hier["errors"] == flat["errors"] and hier["loss"] == flat["loss"]
    assert np.array_equal(hier["coef"], flat["coef"]) and hier["intercept"] == flat["intercept"]
    for key in ("bytes_sent", "bytes_received", "messages_sent", "messages_received", "stats", "model_messages",
                "delta_auto"):
        assert hier[key] == flat[key], key
    for key in ("sent_bytes", "recv_bytes", "sent_msgs", "recv_msgs"):
        assert np.array_equal(hier["per_rank"][key], flat["per_rank"][key]), key
    assert sum(hier["hierarchy"]["intra_node"]["bytes_sent"].values()) == 0  # nodes of one move nothing


def test_static_every_round_is_the_flat_static_protocol():
    """Static b = 1 in nodes: a node average, then the leaders' full sync of the
    node means: every learner holds the mean of all k models, as in a flat
    full sync; the leaders' full syncs move N dense vectors, not k."""
    k, m, rounds = 8, 4, 200
    flat = _sim(k, rounds, name="static", period=1)
    hier = _sim(k, rounds, name="static", period=1, node_size=m)
    assert hier["errors"] == flat["errors"]
    np.testing.assert_allclose(hier["coef"], flat["coef"], rtol=1e-9, atol=1e-12)
    syncs = hier["stats"]["full_syncs"]["static"]
    assert syncs == rounds
    nodes = k // m
    # inter-node: N leaders' Allreduces, and the final one of every rank
    assert hier["bytes_sent"]["full_sync"] == (syncs * nodes + k) * dense_nbytes(N)
    assert flat["bytes_sent"]["full_sync"] == (syncs + 1) * k * dense_nbytes(N)
    intra = hier["hierarchy"]["intra_node"]
    assert intra["bytes_sent"]["full_sync"] == syncs * k * dense_nbytes(N)  # every member's node average
    # every full sync: a flag, then r and the leader's model from each leader to its m − 1 members
    assert intra["bytes_sent"]["control"] == syncs * nodes * CONTROL_BYTES
    assert intra["bytes_sent"]["balance_result"] == syncs * nodes * 2 * dense_nbytes(N)
    assert intra["bytes_received"]["balance_result"] == syncs * nodes * (m - 1) * 2 * dense_nbytes(N)
    assert hier["model_messages"] == 2 * nodes * (syncs + 1)


def test_leaders_protocol_counts_on_the_leaders_ranks():
    k, m = 9, 3  # three leaders: their violations carry models (two would not: syncs_every_violation)
    hier = _sim(k, name="dynamic", delta=0.2, period=1, node_size=m, hedge="counter")
    sent = np.asarray(hier["per_rank"]["sent_bytes"])
    members = [r for r in range(k) if r % m]
    v = CATEGORIES.index("violation")
    assert sent[members, v].sum() == 0 and sent[[m, 2 * m], v].min() > 0  # only leaders ≠ 0 send violations
    # a member moves only the start, pilot and final collectives between nodes
    assert (sent[members].sum(axis=1) == sent[members[0]].sum()).all()
    assert hier["hierarchy"] == {**hier["hierarchy"], "node_size": m, "nodes": k // m, "node_period": 1}


def test_run_many_shares_one_stream_with_hierarchical_configurations():
    k, rounds = 8, 120
    configs = [Simulation(k, N, rounds, ProtocolConfig(name="dynamic", delta=0.3, node_size=m), LEARNER, mode="sync")
               for m in (1, 2, 8)]
    results = run_many(_stream(k), rounds, configs)
    assert [r["hierarchy"]["nodes"] for r in results] == [8, 4, 1]
    assert all(r["examples"] == k * rounds for r in results)


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, match", [
    (dict(node_size=0), "node_size"), (dict(node_size=-2), "node_size"), (dict(node_size=2.5), "node_size"),
    (dict(node_size="two"), "node_size"), (dict(node_size=True), "node_size"),
    (dict(node_size=2, period=4, node_period=3), "node_period"),
    (dict(node_size=2, node_period=0), "node_period"),
    (dict(node_period=1), "needs --node-size"),
    (dict(name="fda", theta=1.0, node_size=2), "not of 'fda'"),
    (dict(name="none", node_size=2), "not of 'none'"),
    (dict(name="central", node_size=2), "not of 'central'"),
    (dict(node_size=2, budget=0.5), "--budget"),
])
def test_bad_hierarchy_is_refused(kwargs, match):
    with pytest.raises(MpisgdError, match=match):
        ProtocolConfig(**{"name": "dynamic", "delta": 1.0, **kwargs})


@pytest.mark.parametrize("kwargs, match", [
    (dict(mode="async"), "--mode sync only"),
    (dict(k=6, node=4), "does not divide the 6 learners"),
    (dict(node="shared"), "no machines"),
    (dict(learner={"compress": "q8"}), "exact models"),
    (dict(order="check-learn"), "learn-check"),
    (dict(max_period=4), "max-period"),
])
def test_simulator_refuses_what_it_cannot_run_in_nodes(kwargs, match):
    k, node = kwargs.pop("k", 4), kwargs.pop("node", 2)
    args = {"mode": "sync", **kwargs}
    learner = {**LEARNER, **args.pop("learner", {})}
    with pytest.raises(MpisgdError, match=match):
        Simulation(k, N, 10, ProtocolConfig(name="dynamic", delta=1.0, node_size=node), learner, **args)


def test_static_in_nodes_runs_in_either_mode():
    assert simulate(_stream(4), 30, ProtocolConfig(name="static", period=2, node_size=2), LEARNER,
                    mode="async")["hierarchy"]["nodes"] == 2


def test_cli_refuses_bad_node_size(tmp_path, capsys):
    from mpisgd.cli import main

    with pytest.raises(SystemExit):
        main(["simulate", "--synthetic", "disjunction", "-k", "4", "--rounds", "10", "--node-size", "many",
              "--out", str(tmp_path / "a")])
    assert "--node-size" in capsys.readouterr().err
    code = main(["simulate", "--synthetic", "disjunction", "-k", "6", "--rounds", "10", "--mode", "sync",
                 "--node-size", "4", "--out", str(tmp_path / "b"), "--quiet"])
    assert code != 0 and "does not divide the 6 learners" in capsys.readouterr().err
    assert not (tmp_path / "b" / "report.json").exists()


def test_train_config_refuses_async_dynamic_in_nodes():
    from mpisgd.runner import RunConfig

    with pytest.raises(MpisgdError, match="--mode sync only"):
        RunConfig(protocol=ProtocolConfig(name="dynamic", delta=1.0, node_size=2), mode="async")
    with pytest.raises(MpisgdError, match="exact models"):
        RunConfig(protocol=ProtocolConfig(name="static", node_size=2), mode="sync", learner={"compress": "fp16"})


# -- under MPI (any number of ranks) ------------------------------------------------------------


def _mpi_run(node_size, observer=None, rows=240, **protocol):
    from mpi4py import MPI

    from mpisgd.data.rows import ArraySource
    from mpisgd.data.synthetic import DisjunctionStream
    from mpisgd.runner import RunConfig, train

    comm = MPI.COMM_WORLD.Dup()
    try:
        k, rank = comm.Get_size(), comm.Get_rank()
        ip, ix, d, y = DisjunctionStream(n_features=N, n_learners=k, seed=1, drift_prob=0.01).rows(0, rows, [rank])
        cfg = RunConfig(protocol=ProtocolConfig(node_size=node_size, **protocol), mode="sync", learner=LEARNER,
                        timeline_every=50)
        return train(comm, ArraySource(ip, ix, d, y, N, describe=f"test[{rank}]"), cfg, observer=observer)
    finally:
        comm.Free()


class NodeChecker:
    """Around every stop of the loop (a node average, and at check points the
    leaders' protocol): the mean over all learners is kept and, after it, the
    members of each node hold one model."""

    def __init__(self, m):
        from mpi4py import MPI

        from helpers.mpi import Deferred

        self.comm = MPI.COMM_WORLD.Dup()
        self.k, self.m = self.comm.Get_size(), m
        self.deferred = Deferred(self.comm)
        self.stops = 0

    def models(self, run):
        coef, intercept = run.learners.weights(0)
        mine = np.append(coef, intercept)
        out = np.empty((self.k, len(mine)))
        self.comm.Allgather(mine, out)
        return out

    def before(self, t, run):
        self.before_models = self.models(run)

    def after(self, t, run, members):
        models = self.models(run)
        with self.deferred.check():
            np.testing.assert_allclose(models.mean(axis=0), self.before_models.mean(axis=0), rtol=0, atol=1e-10)
            nodes = models.reshape(self.k // self.m, self.m, -1)
            np.testing.assert_allclose(nodes, np.broadcast_to(nodes[:, :1], nodes.shape), rtol=0, atol=1e-12)
            self.stops += 1

    def close(self):
        try:
            self.deferred.raise_on_every_rank()
        finally:
            self.comm.Free()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("protocol", [dict(name="dynamic", delta=0.3, period=2),
                                      dict(name="dynamic", delta=0.2, period=4, node_period=2),
                                      dict(name="static", period=3)])
@pytest.mark.parametrize("nodes", ["one", "pairs", "singles"])
def test_mpi_members_hold_one_model_and_the_mean_is_kept(nodes, protocol):
    from mpi4py import MPI

    k = MPI.COMM_WORLD.Get_size()
    m = {"one": k, "pairs": 2, "singles": 1}[nodes]
    if k % m:
        pytest.skip(f"{k} ranks do not split into nodes of {m}")
    checker = NodeChecker(m)
    try:
        run, report = _mpi_run(m, observer=checker, **protocol)
    finally:
        checker.close()
    assert checker.stops == 240 // protocol.get("node_period", protocol["period"])
    if run.rank == 0:
        assert report["hierarchy"]["node_size"] == m and report["hierarchy"]["nodes"] == k // m
        intra = sum(v["bytes"] for v in report["hierarchy"]["intra_node"]["sent"].values())
        assert (intra > 0) == (m > 1)


@pytest.mark.mpi(min_size=2)
def test_mpi_node_size_one_equals_the_flat_protocol():
    flat_run, flat = _mpi_run(None, name="dynamic", delta=0.3, period=2)
    hier_run, hier = _mpi_run(1, name="dynamic", delta=0.3, period=2)
    assert np.array_equal(flat_run.coef, hier_run.coef) and flat_run.intercept == hier_run.intercept
    if flat_run.rank == 0:
        assert flat["communication"]["sent"] == hier["communication"]["sent"]
        assert flat["communication"]["received"] == hier["communication"]["received"]
        assert flat["protocol"] == hier["protocol"] and flat["online"] == hier["online"]


@pytest.mark.mpi(min_size=2)
def test_mpi_shared_nodes_are_the_machine():
    """On one machine MPI_Comm_split_type(SHARED) puts every rank in one node."""
    from mpi4py import MPI

    k = MPI.COMM_WORLD.Get_size()
    run, report = _mpi_run("shared", name="static", period=2)
    if run.rank == 0:
        assert report["hierarchy"]["node_size"] == k and report["hierarchy"]["nodes"] == 1
