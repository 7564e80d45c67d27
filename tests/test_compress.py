"""--compress end to end in the simulator: bad settings refused before any
learning, full syncs exact (pairs, dense) or unbiased (levels), the counters
counting the encoded sizes, and the setting in report.json."""

import json

import numpy as np
import pytest

from mpisgd import wire
from mpisgd.errors import MpisgdError
from mpisgd.learners import OnlineLearners
from mpisgd.simulator import SimTransport


def _learners(k, n, compress, touched, seed=0):
    rng = np.random.default_rng(seed)
    L = OnlineLearners(k, n, loss="log", compress=compress)
    z = np.zeros((k, n + 2))
    for l in range(k):
        z[l, rng.choice(n, size=touched, replace=False)] = rng.standard_normal(touched)
        z[l, n], z[l, n + 1] = rng.standard_normal(), 1.0 + 0.01 * rng.standard_normal()
        L.set_models([l], z[l])
    return L, z


@pytest.mark.parametrize("touched, pairs", [(2, True), (1500, False)])
def test_uncompressed_full_sync_is_the_exact_mean(touched, pairs):
    k, n = 3, 2000  # a dense sum over wire.SYNC_PROBE_MIN_BYTES: the probe is made
    L, z = _learners(k, n, "none", touched)
    tr = SimTransport(L)
    tr.full_sync()
    mean = z.mean(axis=0)
    np.testing.assert_allclose(L.r, mean[:n], rtol=1e-14, atol=1e-16)  # r was 0
    assert L.r_bias == pytest.approx(mean[n], rel=1e-14)
    assert np.all(L.distances() == 0)
    sent = tr.counters()[0][:, tr_cat("full_sync")]
    want = 8 + (wire.sync_block_nbytes(touched) if pairs else wire.dense_nbytes(n))
    assert wire.sync_pairs(n, k, "none", touched) == pairs and np.all(sent == want)
    received = tr.counters()[1][:, tr_cat("full_sync")]
    assert np.all(received == 8 + (k * wire.sync_block_nbytes(touched) if pairs else wire.dense_nbytes(n)))


def tr_cat(name):
    return wire.CATEGORIES.index(name)


def test_no_probe_when_pairs_cannot_pay():
    """k = 512 learners of n = 100: empty pairs (512·24 bytes) exceed the dense
    sum, so the full sync is one dense Allreduce, as without sparse exchanges."""
    assert wire.sync_probe_size(100, 512, "none") == 0
    L, _z = _learners(512, 100, "none", 1)
    tr = SimTransport(L)
    tr.full_sync()
    assert np.all(tr.counters()[2][:, tr_cat("full_sync")] == 1)
    assert np.all(tr.counters()[0][:, tr_cat("full_sync")] == wire.dense_nbytes(100))


@pytest.mark.parametrize("compress", ["fp16", "q8"])
def test_quantized_full_sync_is_unbiased(compress):
    """The mean of r over 400 syncs of the same models (fresh draws each time)
    within 4.5 standard errors of the exact mean."""
    k, n, trials = 3, 20, 400
    got = np.empty((trials, n + 1))
    for t in range(trials):
        L, z = _learners(k, n, compress, 15)
        L.encoded[:] = t  # message t of every learner: new draws
        SimTransport(L).full_sync()
        got[t, :n], got[t, n] = L.r, L.r_bias
    mean = z.mean(axis=0)[: n + 1]
    se = got.std(axis=0) / np.sqrt(trials)
    assert np.all(np.abs(got.mean(axis=0) - mean) <= 4.5 * se + 1e-15)
    assert se.max() > 0


@pytest.mark.parametrize("compress", ["none", "fp16", "q8"])
def test_simulated_counters_count_the_encoded_messages(compress, tmp_path):
    """Every model message counted as wire.model_nbytes of its setting, which
    is the encoded length; the setting is in report.json."""
    from mpisgd.cli import main

    out = tmp_path / "sim"
    assert main(["simulate", "--synthetic", "disjunction", "--learners", "8", "--rounds", "300", "--seed", "2",
                 "--protocol", "dynamic", "--delta", "0.5", "--period", "2", "--compress", compress,
                 "--out", str(out), "--quiet"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["configuration"]["learner"]["compress"] == compress
    assert report["communication"]["sent"]["violation"]["bytes"] > 0


def test_encoded_sizes_are_model_nbytes():
    n = 50
    for compress in ("fp16", "q8"):
        L = OnlineLearners(4, n, loss="log", compress=compress)
        rng = np.random.default_rng(1)
        for l in range(4):
            z = np.zeros(n + 2)
            z[rng.choice(n, 5 * l, replace=False)] = 1.0 + rng.random(5 * l)
            z[n + 1] = 1.0
            L.set_models([l], z)
        nnz = L.models_and_nnz(np.arange(4))[1]
        assert [len(L.message(l)) for l in range(4)] == list(L.message_nbytes(nnz))
        assert list(L.encoded) == [1, 1, 1, 1]


@pytest.mark.parametrize("argv, match", [
    (["--compress", "int4"], "compress: unknown 'int4'"),
    (["--compress", "q8", "--protocol", "none"], "compress: protocol 'none' sends no models"),
    (["--compress", "fp16", "--protocol", "central"], "compress: protocol 'central' sends no models"),
])
def test_bad_compress_settings_are_refused_before_learning(argv, match, tmp_path, capsys):
    from mpisgd.cli import main

    assert main(["simulate", "--synthetic", "disjunction", "--learners", "4", "--rounds", "10", *argv,
                 "--out", str(tmp_path / "x"), "--quiet"]) != 0
    assert match in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
    with pytest.raises(MpisgdError, match="compress: unknown"):
        OnlineLearners(1, 3, compress="zip")
