"""CountingComm on COMM_SELF (serial): every call counts its buffer's size
once per side, by category; and the metrics writers."""

import csv
import json

import numpy as np
import pytest

from mpisgd import wire


def test_counting_comm_counts_buffers_by_category():
    from mpi4py import MPI

    from mpisgd.comm import CountingComm

    comm = CountingComm(MPI.COMM_SELF.Dup())
    try:
        msg = wire.encode(0.5, 1.0, np.eye(100)[1] * 2.0 + np.eye(100)[4] * 3.0, 1.0, 100)
        request = comm.Isend(msg, 0, 7, "violation")
        buf, src, tag = comm.recv_bytes_message(0, 7, "violation")
        comm.wait(request)
        np.testing.assert_array_equal(buf, msg)
        assert (src, tag) == (0, 7)
        z = np.arange(5.0)
        out = np.empty_like(z)
        comm.Allreduce(z, out, MPI.SUM, "full_sync")
        np.testing.assert_array_equal(out, z)
        counters = comm.counters()
        assert counters["sent"]["violation"] == {"messages": 1, "bytes": wire.model_nbytes(2, 100)}
        assert counters["received"]["violation"] == {"messages": 1, "bytes": 16 + 24}
        assert counters["sent"]["full_sync"] == {"messages": 1, "bytes": 40}
        assert counters["received"]["full_sync"] == {"messages": 1, "bytes": 40}
        assert counters["sent"]["control"] == {"messages": 0, "bytes": 0}
        assert comm.bytes_by_category()["violation"] == 40
        assert comm.probe(block=False) is None
    finally:
        comm.comm.Free()


def test_timeline_and_report_writers(tmp_path):
    from mpisgd.metrics import Timeline, read_report, write_report

    a, b = Timeline(), Timeline()
    a.record(10, 3, 1.5, {"violation": 40}, 0.25)
    b.record(10, 2, 0.5, {"violation": 12, "control": 8}, 0.75)
    a.record(20, 4, 2.5, {"violation": 40}, 1.5)
    b.record(20, 3, 1.0, {"violation": 12, "control": 8}, 1.25)
    total = Timeline.summed([a.as_array(), b.as_array()])
    assert Timeline.from_array(total.as_array()).rows == total.rows  # a checkpoint's round trip
    path = tmp_path / "timeline.csv"
    total.write(path)
    rows = list(csv.DictReader(path.open()))
    assert rows[0] == {"round": "10", "errors": "5", "loss": "2.0", "bytes_total": "60", "bytes_violation": "52",
                       "bytes_balance_request": "0", "bytes_balance_reply": "0", "bytes_balance_result": "0",
                       "bytes_full_sync": "0", "bytes_control": "8", "seconds": "0.75"}  # the later learner's clock
    assert [r["seconds"] for r in rows] == ["0.75", "1.5"]
    unknown = Timeline()
    unknown.record(10, 3, 1.5, {})  # no clock (simulate without --network): an empty field
    unknown.write(path)
    assert list(csv.DictReader(path.open()))[0]["seconds"] == ""
    write_report(tmp_path / "report.json", {"x": np.int64(3), "y": np.arange(2), "z": {"w": np.float64(0.5)}})
    assert read_report(tmp_path / "report.json") == {"x": 3, "y": [0, 1], "z": {"w": 0.5}}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_run_config_is_checked():
    from mpisgd.errors import MpisgdError
    from mpisgd.runner import RunConfig

    with pytest.raises(MpisgdError, match="mode"):
        RunConfig(mode="eventually")
    with pytest.raises(MpisgdError, match="poll_rows"):
        RunConfig(poll_rows=0)
    with pytest.raises(MpisgdError, match="poll_seconds"):
        RunConfig(poll_seconds=0.0)
    assert json.dumps(RunConfig().as_dict())


# -- full syncs over MPI (docs/WIRE.md, "Full syncs"): mpiexec -n 2 and -n 3 ----------------


def _sync_setup(n, compress, models, asynchronous=False):
    """Every rank's learner takes models[rank] (z relative to r = 0); returns (comm, learners, transport)."""
    from mpi4py import MPI

    from mpisgd.comm import CountingComm, MPITransport
    from mpisgd.learners import OnlineLearners

    comm = CountingComm(MPI.COMM_WORLD.Dup())
    learners = OnlineLearners(1, n, loss="log", compress=compress)
    tr = MPITransport(comm, learners, asynchronous=asynchronous)
    learners.set_models([0], models[comm.rank])
    return comm, learners, tr


def _models(k, n, touched, seed=5):
    """k models z = [u, b, α], u non-zero on `touched` coordinates each."""
    rng = np.random.default_rng(seed)
    z = np.zeros((k, n + 2))
    for l in range(k):
        z[l, rng.choice(n, size=touched, replace=False)] = rng.standard_normal(touched)
    z[:, n] = rng.standard_normal(k)
    z[:, n + 1] = 1.0 + 0.01 * rng.standard_normal(k)
    return z


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("touched, method", [(3, "pairs"), (1500, "dense")])
def test_full_sync_is_the_exact_mean_sparse_or_dense(touched, method):
    """Uncompressed: r becomes the mean of every rank's model, by pairs when
    few coordinates are touched (bytes growing with them) or densely."""
    from mpisgd import wire

    n = 2000  # a dense sum over wire.SYNC_PROBE_MIN_BYTES: the probe is made
    from mpi4py import MPI

    k = MPI.COMM_WORLD.Get_size()
    z = _models(k, n, touched)
    comm, learners, tr = _sync_setup(n, "none", z)
    tr.full_sync()
    mean = z.mean(axis=0)
    r, r_bias = learners.reference
    np.testing.assert_allclose(r, mean[n + 1] * 0.0 + mean[:n], rtol=1e-12, atol=1e-15)  # r was 0: r = ū
    assert abs(r_bias - mean[n]) < 1e-12
    assert learners.distances()[0] == 0.0 and learners.R == 0.0  # λ = 0: every α stays 1, R is not needed
    assert wire.sync_pairs(n, k, "none", touched) == (method == "pairs")
    block = wire.sync_block_nbytes(touched)
    sent = comm.counters()["sent"]["full_sync"]
    want = 8 + (block if method == "pairs" else wire.dense_nbytes(n))  # the probe, then the exchange
    assert sent == {"messages": 2, "bytes": want}
    received = comm.counters()["received"]["full_sync"]["bytes"]
    assert received == 8 + (k * block if method == "pairs" else wire.dense_nbytes(n))
    comm.comm.Free()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("compress", ["fp16", "q8"])
@pytest.mark.parametrize("asynchronous", [False, True])
def test_quantized_full_sync_equals_the_simulator_and_is_near_the_mean(compress, asynchronous):
    """Compressed: the levels of every rank, summed in integers, give the
    simulator's reference exactly (the same draws) and lie within one level of
    the exact mean per coordinate; blocking or nonblocking alike."""
    from mpi4py import MPI

    from mpisgd import wire
    from mpisgd.learners import OnlineLearners
    from mpisgd.simulator import SimTransport

    n = 300
    k = MPI.COMM_WORLD.Get_size()
    z = _models(k, n, 200, seed=8)
    comm, learners, tr = _sync_setup(n, compress, z, asynchronous)
    if asynchronous:
        from mpisgd.comm import _wait

        _wait(tr._join_full_sync())
    else:
        tr.full_sync()
    sim = OnlineLearners(k, n, loss="log", compress=compress)
    for l in range(k):
        sim.set_models([l], z[l])
    SimTransport(sim).full_sync()
    r, r_bias = learners.reference
    np.testing.assert_array_equal(r, sim.reference[0])
    assert r_bias == sim.reference[1]
    mean = z.mean(axis=0)
    levels = wire.sync_format(k, compress)[1]
    step = np.abs(z[:, :n]).max() / levels  # one level of the shared scale
    assert np.all(np.abs(r - mean[:n]) <= step * (1 + 1e-12))
    assert abs(r_bias - mean[n]) <= np.abs(z[:, n]).max() / levels
    sent = comm.counters()["sent"]["full_sync"]
    assert sent == {"messages": 2, "bytes": 32 + wire.sync_dense_nbytes(n, k, compress)}
    comm.comm.Free()


@pytest.mark.mpi(min_size=2)
def test_an_async_partial_sync_averages_the_models_sent_and_keeps_the_steps_made_meanwhile():
    """--partial in the default mode: a rank that learns while its partial
    sync is in flight takes the mean of the models as sent (weights and bias)
    plus its own steps since, so that the mean of all models is kept."""
    from mpi4py import MPI

    from mpisgd.comm import _wait

    n = 300
    k, rank = MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank()
    z = _models(k, n, 60, seed=11)
    z[:, n + 1] = 1.0  # λ = 0: α = 1
    comm, learners, tr = _sync_setup(n, "none", z, asynchronous=True)
    tr.partial = lambda: 0.5 * float(learners.distances()[0])  # θΔ: about half of each divergence stays
    sent = np.append(*learners.weights(0))
    sync = tr._join_full_sync()
    step = np.zeros(n + 1)  # a step made meanwhile, on a coordinate and the bias
    step[rank], step[n] = 0.5, 0.25 * (rank + 1)
    learners.take(0, learners.weights_z(sent[:n] + step[:n], sent[n] + step[n]))
    learners.steps[0] += 1
    _wait(sync)
    after = np.append(*learners.weights(0))
    every_sent, every_after = np.array(comm.comm.allgather(sent)), np.array(comm.comm.allgather(after - step))
    differ = np.ptp(every_sent[:, :n], axis=0) > 0
    synced = differ & (np.ptp(every_after[:, :n], axis=0) < 1e-12)
    assert 0 < synced.sum() < differ.sum()  # a partial sync: the mean taken on some coordinates, not all
    np.testing.assert_allclose(every_after.mean(axis=0), every_sent.mean(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(every_after[:, n], every_sent[:, n].mean(), rtol=1e-12, atol=1e-12)  # the bias
    comm.comm.Free()


@pytest.mark.mpi(min_size=2)
def test_compressed_messages_keep_the_rounding_error_with_the_sender():
    """A follower's q8 balance reply is remembered as rank 0 decodes it: when
    the balanced model comes back, the follower keeps u − Q(u), so the set's
    sum is off only by the rounding of the model sent down."""
    from mpi4py import MPI

    n = 40
    k = MPI.COMM_WORLD.Get_size()
    z = _models(k, n, 30, seed=2)
    comm, learners, tr = _sync_setup(n, "q8", z)
    ids = list(range(k))
    if tr.coordinating:
        got = np.array(tr.fetch(ids))  # one model per learner
        tr.open_resolution()
        tr.send_balanced(ids, got.mean(axis=0), False)
        tr.close_resolution()
    else:
        tr.serve()
    tr.complete_sends()
    mine = learners.models([0])[0]
    every = np.array(MPI.COMM_WORLD.allgather(mine))
    sent = np.array(MPI.COMM_WORLD.bcast(got if tr.coordinating else None, root=0))
    c = np.abs(sent.mean(axis=0)[:n]).max()
    # Σ after = k·Q(mean of the sent) + Σ (z − sent); Q within one level c/127 of the mean
    want = z.sum(axis=0) - sent.sum(axis=0) + k * sent.mean(axis=0)
    assert np.all(np.abs(every.sum(axis=0)[:n] - want[:n]) <= k * c / 127 * (1 + 1e-9))
    np.testing.assert_allclose(every[1:, n + 1], sent.mean(axis=0)[n + 1])  # α exact
    comm.comm.Free()
