"""--delta auto, the dynamic protocol's default Δ: its arithmetic against a slow
twin, the one place that default is declared (``Dynamic.defaults``), and what
the defaults achieve against static b=8 on the disjunction and a9a at small
scale (docs/REPRODUCTION.md and docs/RESULTS.md have them at full scale)."""

import math

import numpy as np
import pytest
from helpers.data import real_data
from naive import naive_dloss, naive_eta

from mpisgd.errors import MpisgdError
from mpisgd.protocol import AUTO, DELTA_SCALE, REGISTRY, Pilot, ProtocolConfig, auto_delta
from mpisgd.data.synthetic import LinearTeacherStream
from mpisgd.protocol.delta import PARTIAL_SCALE, PARTIAL_THETA, SPREAD_PARTIAL, partial_default, spread
from mpisgd.simulator import Simulation, make_stream, run_many

PAPER = {"loss": "log", "lam": 0.0, "schedule": "constant", "eta0": 1.0, "average": False}


@pytest.mark.parametrize("learner", [
    PAPER,
    {"loss": "hinge", "lam": 1e-4, "schedule": "bottou", "eta0": 0.7, "average": True},
    {"loss": "log", "lam": 1e-3, "schedule": "xu", "eta0": 2.0, "fit_intercept": False},
    {"loss": "squared", "schedule": "invscaling", "eta0": 0.5, "power": 0.5},
])
def test_auto_delta_is_the_rule_of_the_pilots_rows(learner):
    """Δ = c·η_P·√(η_P·G), G the mean over the first P rounds of every learner
    of ℓ'(0, y)²(‖x‖² + 1[bias]): a row at a time, from the rows themselves."""
    rng = np.random.default_rng(3)
    k, P, m = 3, 5, 15
    nnz = rng.integers(1, 6, size=m)
    indptr = np.concatenate([[0], np.cumsum(nnz)])
    data = rng.normal(size=indptr[-1])
    y = rng.choice([-1.0, 1.0], size=m)
    owner = np.arange(m) % k  # round-major: P rounds of k learners
    config = ProtocolConfig(pilot_rounds=P)
    pilot = Pilot(config, learner, k, 100)
    pilot.add(indptr, data, y, owner)
    delta, record = auto_delta(config, learner, pilot.statistics(), 40)

    fit_intercept = learner.get("fit_intercept", True)
    G = sum(naive_dloss(learner["loss"], 0.0, y[i], 0.0) ** 2
            * (sum(v * v for v in data[indptr[i]:indptr[i + 1]]) + fit_intercept) for i in range(m)) / m
    eta = naive_eta(learner["schedule"], P, learner["eta0"], learner.get("lam", 0.0), 0.0, learner.get("power", 0.5))
    assert record["G"] == pytest.approx(G, rel=1e-12) and record["pilot_rows"] == m
    assert record["eta_P"] == pytest.approx(eta, rel=1e-12)
    assert delta == pytest.approx(DELTA_SCALE * eta * math.sqrt(eta * G), rel=1e-12)
    assert record["spread"] == 40 * m / nnz.sum()  # n over a row's mean non-zeros


def test_the_spread_is_n_over_the_mean_non_zeros_of_every_learners_pilot_rows():
    """The pilot's statistic against a NumPy twin: per learner its rows and
    their non-zeros, in any order and any cut of the rows into pieces; over
    every learner n·rows / non-zeros (None where the rows hold no non-zero)."""
    rng = np.random.default_rng(11)
    k, m, n = 4, 40, 1000
    nnz = rng.integers(0, 30, size=m)
    indptr = np.concatenate([[0], np.cumsum(nnz)])
    data, y, owner = rng.normal(size=indptr[-1]), rng.choice([-1.0, 1.0], size=m), rng.integers(0, k, size=m)
    pilot = Pilot(ProtocolConfig(), PAPER, k, 100)
    for lo, hi in ((0, 7), (7, 8), (8, 40)):
        pilot.add(indptr[lo : hi + 1], data, y[lo:hi], owner[lo:hi])
    statistics = pilot.statistics()
    assert [e for _s, _r, e in statistics] == [int(nnz[owner == l].sum()) for l in range(k)]
    assert [r for _s, r, _e in statistics] == np.bincount(owner, minlength=k).tolist()
    assert spread(statistics, n) == n * m / nnz.sum()
    assert spread([(1.0, 3, 0), (1.0, 2, 0)], n) is None


def test_a_pilot_stopped_and_restored_from_its_state_gives_the_same_statistics():
    """A checkpoint during the pilot: its rows so far (``Pilot.state_dict``),
    restored into a new pilot (``load_state_dict``) that takes the rest, give
    every learner's sum, count and non-zeros exactly, as one pilot that took them all."""
    rng = np.random.default_rng(5)
    k, m = 3, 24
    indptr = np.concatenate([[0], np.cumsum(rng.integers(1, 6, size=m))])
    data, y, owner = rng.normal(size=indptr[-1]), rng.choice([-1.0, 1.0], size=m), np.arange(m) % k
    config = ProtocolConfig(pilot_rounds=8)
    whole = Pilot(config, PAPER, k, 100)
    whole.add(indptr, data, y, owner)
    first = Pilot(config, PAPER, k, 100)
    first.add(indptr[: 10 + 1], data, y[:10], owner[:10])  # learner 0 has 4 rows, 1 and 2 have 3
    resumed = Pilot(config, PAPER, k, 100)
    resumed.load_state_dict(first.state_dict())
    resumed.add(indptr[10:], data, y[10:], owner[10:])
    assert resumed.statistics() == whole.statistics()
    assert [n for _s, n, _e in resumed.statistics()] == [8, 8, 8]
    assert [e for _s, _n, e in resumed.statistics()] == [int(np.diff(indptr)[owner == l].sum()) for l in range(k)]
    with pytest.raises(ValueError, match="state of 3 learners, this pilot has 2"):
        Pilot(config, PAPER, 2, 100).load_state_dict(first.state_dict())


def test_partial_syncs_are_the_default_only_where_the_rows_spread_and_nothing_rules_them_out():
    """The one decision (``partial_default``): (θ, F) from the spread
    threshold on, where every resolution is a full sync (k ≤ 2, the half
    hedge at k ≤ 4), None below it or with more learners; an explicit
    --partial, --delta-scale, --budget or --node-size, or a rule other than
    SGD's, keeps full syncs."""
    for k in (2, 3, 4):
        assert partial_default(ProtocolConfig(), PAPER, SPREAD_PARTIAL, k) == (PARTIAL_THETA, PARTIAL_SCALE)
    assert partial_default(ProtocolConfig(), PAPER, SPREAD_PARTIAL * 0.99, 2) is None
    assert partial_default(ProtocolConfig(), PAPER, None, 2) is None  # no non-zero in the pilot
    assert partial_default(ProtocolConfig(), PAPER, 1e6, 5) is None  # the counter hedge: violations carry models
    assert partial_default(ProtocolConfig(hedge="counter"), PAPER, 1e6, 3) is None
    assert partial_default(ProtocolConfig(hedge="half"), PAPER, 1e6, 4) == (PARTIAL_THETA, PARTIAL_SCALE)
    for chosen in ({"partial": 0.5}, {"delta_scale": 1.0}, {"budget": 0.5}, {"node_size": 2, "mode": "sync"}):
        assert partial_default(ProtocolConfig(**chosen), PAPER, 1e6, 2) is None, chosen
    for rule in ("rda", "pa"):
        assert partial_default(ProtocolConfig(), {**PAPER, "rule": rule}, 1e6, 2) is None, rule


def _same_run(a, b):
    return all(a[key] == b[key] for key in ("errors", "examples", "bytes_sent", "messages_sent"))


def test_the_defaults_sync_partially_on_a_sparse_stream_and_fully_on_shared_coordinates():
    """The linear teacher on 8,000 features, 20 non-zeros a row (spread 400):
    the defaults' pilot turns on partial syncs of θ with F times the rule's Δ,
    and the run is the one of those options given; the disjunction on 30
    features (every row over a third of them) keeps full syncs, the run of the
    rule's own c given."""
    k, T = 2, 800
    sparse = LinearTeacherStream(8000, k, seed=1, nnz_per_row=20)
    given = ProtocolConfig(partial=PARTIAL_THETA, delta_scale=PARTIAL_SCALE * DELTA_SCALE)
    same_delta = ProtocolConfig(delta_scale=PARTIAL_SCALE * DELTA_SCALE)  # full syncs
    default, explicit, full = run_many(sparse, T, [Simulation(k, 8000, T, c, PAPER)
                                                   for c in (ProtocolConfig(), given, same_delta)])
    auto = default["delta_auto"]
    assert auto["spread"] == pytest.approx(400.0) and auto["partial"] == PARTIAL_THETA
    assert auto["partial_scale"] == PARTIAL_SCALE and auto["delta"] == explicit["delta_auto"]["delta"]
    assert explicit["delta_auto"]["partial"] is None  # the user's θ and c: no choice made
    assert default["stats"]["full_syncs"]["hedge"] > 0 and _same_run(default, explicit)
    assert default["bytes_sent"]["full_sync"] < full["bytes_sent"]["full_sync"]  # the syncs were partial
    dense = make_stream("disjunction", 30, k, 1, 0.0002)
    default, full = run_many(dense, T, [Simulation(k, 30, T, c, PAPER)
                                        for c in (ProtocolConfig(), ProtocolConfig(delta_scale=DELTA_SCALE))])
    assert default["delta_auto"]["spread"] < SPREAD_PARTIAL and default["delta_auto"]["partial"] is None
    assert default["delta_auto"]["delta"] == full["delta_auto"]["delta"] and _same_run(default, full)


def test_the_dynamic_protocol_declares_its_default_delta():
    """One source of truth: Dynamic.defaults; the configuration's field and
    --delta leave Δ unset, a protocol without Δ keeps it unset."""
    from mpisgd.cli import build_parser
    from mpisgd.commands.options import protocol_config

    assert REGISTRY["dynamic"].defaults["delta"] == AUTO
    assert ProtocolConfig.__dataclass_fields__["delta"].default is None
    assert ProtocolConfig().delta == AUTO and ProtocolConfig().auto
    assert ProtocolConfig(delta=2.0).delta == 2.0
    assert ProtocolConfig(name="static").delta is None
    with pytest.raises(MpisgdError, match=r"delta \(--delta\)"):
        ProtocolConfig(name="static", delta=AUTO)  # asked for, with a protocol that has no Δ
    with pytest.raises(MpisgdError, match="delta_decay"):
        ProtocolConfig(delta_decay=True)  # Δ0 must be given

    def config(*args):
        return protocol_config(build_parser("simulate").parse_args(["simulate", "--synthetic", "rcv1", *args]))

    assert config() == ProtocolConfig(mode="async")
    assert config("--protocol", "static", "--period", "8") == ProtocolConfig(name="static", period=8, mode="async")
    assert config("--delta", "3").delta == 3.0
    with pytest.raises(MpisgdError, match=r"--delta"):
        config("--protocol", "static", "--delta", "auto")


def _ratios(results):
    """Each run's online errors and bytes over the first run's (static b=8)."""
    errors, nbytes = results[0]["errors"], sum(results[0]["bytes_sent"].values())
    return [(r["errors"] / errors, sum(r["bytes_sent"].values()) / nbytes) for r in results]


@pytest.mark.parametrize("seed", [0, 1])
def test_the_defaults_on_the_disjunction_keep_static_b8s_error_with_a_quarter_of_its_bytes(seed):
    """k = 16, T = 3,000, the paper's learner (measured: errors 0.94–0.97×
    static b=8's at 0.21–0.27× its bytes; `none` errs 3.8–3.9×)."""
    k, n, T = 16, 100, 3000
    stream = make_stream("disjunction", n, k, seed, 0.0002)
    configs = [ProtocolConfig(name="static", period=8), ProtocolConfig(), ProtocolConfig(name="none")]
    results = run_many(stream, T, [Simulation(k, n, T, c, PAPER) for c in configs])
    (_, _), (error, nbytes), (error_none, _) = _ratios(results)
    assert results[1]["delta_auto"]["delta"] == pytest.approx(DELTA_SCALE * math.sqrt(results[1]["delta_auto"]["G"]))
    assert error <= 1.0 and nbytes <= 0.3
    assert error_none >= 3.5


def test_the_defaults_on_a9a_keep_static_b8s_error_with_half_its_bytes():
    """The first 8,000 rows of a9a (rows of unit norm) to 2 learners, hinge,
    λ = 1e-4, Bottou's schedule, averaged (measured: b = 1 errs 0.997×
    static b=8 at 0.52× its bytes, b = 8 1.007× at 0.34×)."""
    import scipy.sparse as sp
    from sklearn.preprocessing import normalize

    from mpisgd.data.libsvm import load_svmlight

    X, y = load_svmlight(real_data("a9a", "a9a.bz2"), n_features=123)
    m = 8000
    X, y = sp.csr_matrix(normalize(X))[:m], y[:m]
    learner = {"loss": "hinge", "lam": 1e-4, "schedule": "bottou", "eta0": 1.0, "average": True}
    results = []
    for config in (ProtocolConfig(name="static", period=8), ProtocolConfig(), ProtocolConfig(period=8)):
        sim = Simulation(2, 123, m // 2, config, learner)
        sim.feed(X.indptr, X.indices, X.data, y, np.arange(m) % 2)
        results.append(sim.finish())
    _, (error_b1, bytes_b1), (error_b8, bytes_b8) = _ratios(results)
    assert error_b1 <= 1.01 and bytes_b1 <= 0.6
    assert error_b8 <= 1.02 and bytes_b8 <= 0.4
