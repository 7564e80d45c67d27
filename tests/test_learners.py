"""OnlineLearners (reference-relative models, O(1) distances) against the
dense twin tests/naive.py::NaiveOnline, through learning, balancing-style
model replacement, reference resets, s rescaling and averaging."""

import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd import wire
from mpisgd.errors import MpisgdError
from mpisgd.kernels import sync
from mpisgd.kernels.losses import CLASSIFICATION_LOSSES, DEFAULT_PARAM, LOSSES
from mpisgd.learners import OnlineLearners
from naive import NaiveOnline, naive_fda_summaries, naive_projector, naive_variance

RTOL = 1e-10


def make_data(m, n, seed, classification=True, density=0.3):
    rng = np.random.default_rng(seed)
    X = sp.random(m, n, density=density, format="csr", random_state=rng, data_rvs=rng.standard_normal)
    X.sort_indices()
    if classification:
        y = np.where(rng.random(m) < 0.5, -1.0, 1.0)
    else:
        y = rng.normal(size=m) * 2
    return X, y


def pair(k, n, **kw):
    opts = dict(loss="log", loss_param=None, schedule="constant", eta0=0.1, lam=0.0, t0=0.0, power=0.5,
                fit_intercept=True, regularize_bias=False, ties_are_errors=True)  # fmt: skip
    opts.update(kw)
    fast = OnlineLearners(k, n, average=True, **opts)
    param = DEFAULT_PARAM.get(opts["loss"], 0.0) if opts["loss_param"] is None else opts["loss_param"]
    slow = NaiveOnline(k, n, opts["loss"], param, opts["schedule"], opts["eta0"], opts["lam"], opts["t0"],
                       opts["power"], opts["fit_intercept"], opts["regularize_bias"], opts["ties_are_errors"])  # fmt: skip
    return fast, slow


def learn_both(fast, slow, X, y, owner):
    fast.learn(X.indptr, X.indices, X.data, y, owner)
    slow.learn(X, y, owner)


def assert_same(fast, slow):
    for l in range(fast.k):
        w, b = fast.weights(l)
        np.testing.assert_allclose(w, slow.w[l], rtol=RTOL, atol=1e-12)
        assert b == pytest.approx(slow.b[l], rel=RTOL, abs=1e-12)
    np.testing.assert_allclose(fast.distances(), slow.distances(), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fast.loss_sum, slow.loss_sum, rtol=RTOL)
    np.testing.assert_array_equal(fast.errors, slow.errors)


def run_scenario(fast, slow, X, y, seed):
    """Learn, replace two models by their mean, learn, reset the reference, learn."""
    k = fast.k
    rng = np.random.default_rng(seed)
    m = X.shape[0]
    cuts = [0, m // 3, 2 * m // 3, m]
    owner = rng.integers(0, k, size=m)
    learn_both(fast, slow, X[cuts[0] : cuts[1]], y[cuts[0] : cuts[1]], owner[cuts[0] : cuts[1]])
    assert_same(fast, slow)
    ids = np.array([0, k - 1])
    z = fast.models(ids).mean(axis=0)  # a balancing of learners 0 and k−1
    np.testing.assert_allclose(fast.divergence(z), ((slow.dense(z)[0] - slow.r) ** 2).sum() + (z[-2] - slow.r_b) ** 2)
    fast.set_models(ids, z)
    slow.set_models(ids, z)
    learn_both(fast, slow, X[cuts[1] : cuts[2]], y[cuts[1] : cuts[2]], owner[cuts[1] : cuts[2]])
    assert_same(fast, slow)
    z = fast.mean_model()  # a full sync
    np.testing.assert_array_equal(z, fast.models(np.arange(k)).mean(axis=0))
    np.testing.assert_allclose(slow.dense(z)[0], slow.w.mean(axis=0), rtol=RTOL, atol=1e-12)
    fast.set_reference(z)
    slow.set_reference(z)
    assert_same(fast, slow)
    np.testing.assert_allclose(fast.distances(), 0.0, atol=1e-12)
    learn_both(fast, slow, X[cuts[2] :], y[cuts[2] :], owner[cuts[2] :])
    assert_same(fast, slow)
    for l in range(k):  # ASGD: the average of every model after each step
        if slow.t[l]:
            w_avg, b_avg = fast.averaged_weights(l)
            np.testing.assert_allclose(w_avg, slow.sum_w[l] / slow.t[l], rtol=1e-9, atol=1e-12)
            assert b_avg == pytest.approx(slow.sum_b[l] / slow.t[l], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("loss", list(LOSSES))
def test_every_loss_matches_the_dense_twin(loss):
    classification = loss in CLASSIFICATION_LOSSES
    X, y = make_data(60, 12, seed=len(loss), classification=classification)
    fast, slow = pair(3, 12, loss=loss, eta0=0.05, lam=0.01)
    run_scenario(fast, slow, X, y, seed=1)


@pytest.mark.parametrize("schedule, eta0, lam", [("optimal", 1.0, 0.1), ("bottou", 0.5, 0.01), ("xu", 0.5, 0.01),
                                                 ("invscaling", 0.5, 0.0), ("constant", 1.0, 0.0)])  # fmt: skip
@pytest.mark.parametrize("regularize_bias", [False, True])
def test_every_schedule_matches_the_dense_twin(schedule, eta0, lam, regularize_bias):
    X, y = make_data(60, 10, seed=7)
    fast, slow = pair(2, 10, schedule=schedule, eta0=eta0, lam=lam, regularize_bias=regularize_bias)
    run_scenario(fast, slow, X, y, seed=2)


def test_rescaling_of_s_keeps_the_model():
    # γλ = 0.9: s shrinks tenfold per step and is folded into v every ~5 steps
    X, y = make_data(80, 8, seed=3, density=0.5)
    fast, slow = pair(2, 8, loss="hinge", eta0=0.9, lam=1.0)
    run_scenario(fast, slow, X, y, seed=3)
    assert fast.s.min() >= 1e-5


def test_without_intercept_and_ties_not_counted():
    X, y = make_data(30, 6, seed=4)
    fast, slow = pair(2, 6, fit_intercept=False, ties_are_errors=False)
    run_scenario(fast, slow, X, y, seed=4)
    assert np.all(fast.bias == 0.0)


def test_first_prediction_is_a_tie():
    X, y = make_data(1, 4, seed=5, density=1.0)
    counted = OnlineLearners(1, 4, ties_are_errors=True)
    counted.learn(X.indptr, X.indices, X.data, y, [0])
    skipped = OnlineLearners(1, 4, ties_are_errors=False)
    skipped.learn(X.indptr, X.indices, X.data, y, [0])
    assert (counted.errors[0], skipped.errors[0]) == (1, 0)


def test_messages_round_trip_and_stay_sparse():
    n = 1000
    X, y = make_data(5, n, seed=6, density=0.005)
    L = OnlineLearners(2, n)
    L.learn(X.indptr, X.indices, X.data, y, [0, 0, 1, 1, 1])
    for l in range(2):
        buf = L.message(l)
        np.testing.assert_array_equal(L.decode(buf), L.models([l])[0])
        nnz = np.count_nonzero(L.V[l])
        assert len(buf) == wire.model_nbytes(nnz, n) < wire.dense_nbytes(n)


@pytest.mark.parametrize("scale", [1.0, -0.37, 1e-300])
def test_support_matches_the_numpy_twin(scale):
    from mpisgd.kernels.online import support

    rng = np.random.default_rng(3)
    for u in (np.zeros(7), np.array([0.0, -0.0, np.nan, 1.5, 0.0, -2.0, np.inf]),
              np.where(rng.random(5000) < 0.05, rng.standard_normal(5000), 0.0), rng.standard_normal(64)):
        idx, vals = support(u, scale)
        want = np.flatnonzero(u)
        assert idx.dtype == np.int32
        np.testing.assert_array_equal(idx, want)
        np.testing.assert_array_equal(vals, scale * u[want])  # the same bits, NaN where u is NaN


def test_distance_check_cost_does_not_touch_v():
    L = OnlineLearners(4, 10)
    L.V[:] = np.nan  # distances read only the scalars α, s, P, Q, b
    assert np.all(np.isfinite(L.distances()))


@pytest.mark.parametrize("lam", [0.0, 0.1])
def test_the_distance_holds_whether_or_not_R_is_kept(lam):
    """R = ‖r‖² is kept where α can leave 1 (λ > 0, or a model taken with α ≠ 1); with λ = 0
    after a new reference every α is 1 and R is 0, and the distances are still ‖w − r‖²."""
    X, y = make_data(40, 6, seed=10)
    L = OnlineLearners(2, 6, lam=lam, eta0=0.3)
    L.learn(X.indptr, X.indices, X.data, y, np.arange(40) % 2)
    L.set_reference(L.mean_model())
    L.learn(X.indptr, X.indices, X.data, y, np.arange(40) % 2)
    assert L.R == (float(L.r @ L.r) if lam else 0.0)
    z = L.models([1])[0]
    z[-1] = 0.5  # α = 1/2: R enters the distance
    L.set_models([1], z)
    assert L.R == float(L.r @ L.r)
    w = L.alpha[:, None] * L.r + L.s[:, None] * L.V
    want = ((w - L.r) ** 2).sum(axis=1) + (L.bias - L.r_bias) ** 2
    np.testing.assert_allclose(L.distances(), want, rtol=1e-12)


def test_state_dict_round_trip():
    X, y = make_data(20, 5, seed=8)
    a = OnlineLearners(2, 5, average=True)
    a.learn(X.indptr, X.indices, X.data, y, np.arange(20) % 2)
    b = OnlineLearners(2, 5, average=True)
    b.load_state_dict(a.state_dict())
    a.learn(X.indptr, X.indices, X.data, y, np.arange(20) % 2)
    b.learn(X.indptr, X.indices, X.data, y, np.arange(20) % 2)
    np.testing.assert_array_equal(a.models([0, 1]), b.models([0, 1]))
    after = b.state_dict()  # the counters and sums too: what was loaded is what the kernel then updated
    for name, value in a.state_dict().items():
        np.testing.assert_array_equal(after[name], value, err_msg=name)


def test_divergence_is_a_clear_error():
    X, y = make_data(50, 5, seed=9, classification=False)
    L = OnlineLearners(1, 5, loss="squared", eta0=1e6)
    with pytest.raises(MpisgdError, match="diverged"):
        L.learn(X.indptr, X.indices, X.data, y * 1e100, np.zeros(50, dtype=np.int64))


@pytest.mark.parametrize(
    "kwargs, word",
    [({"loss": "hinj"}, "loss"), ({"schedule": "fast"}, "schedule"), ({"lam": -1.0}, "lam"),
     ({"schedule": "optimal", "lam": 0.0}, "lam"), ({"eta0": 0.0}, "eta0")],
)  # fmt: skip
def test_bad_options_are_named(kwargs, word):
    with pytest.raises(MpisgdError, match=word):
        OnlineLearners(1, 3, **kwargs)


def test_labels_outside_the_loss_domain():
    X, y = make_data(3, 3, seed=10)
    with pytest.raises(MpisgdError, match="labels"):
        OnlineLearners(1, 3, loss="hinge").learn(X.indptr, X.indices, X.data, np.array([0.0, 1.0, 1.0]), [0, 0, 0])


def test_non_finite_feature_and_bad_owner_are_named():
    X, y = make_data(4, 3, seed=11, density=1.0)
    data = X.data.copy()
    data[4] = np.nan  # row 1
    with pytest.raises(MpisgdError, match="non-finite value .* row 1"):
        OnlineLearners(1, 3).learn(X.indptr, X.indices, data, y, [0, 0, 0, 0])
    with pytest.raises(MpisgdError, match=r"owner: .*\[0, 2\), row 2 has 5"):
        OnlineLearners(2, 3).learn(X.indptr, X.indices, X.data, y, [0, 1, 5, 0])


def test_learning_until_a_violation_is_learning_and_checking_each_segment():
    k, n, m = 3, 25, 360
    X, y = make_data(m, n, seed=8)
    owner = np.arange(m) % k
    check_end = np.arange(30, m + 1, 30)  # 12 checks, one after every 30 rows
    _, slow = pair(k, n, eta0=0.3)
    peak = []  # the largest ‖w_l − r‖² at each check, by the twin
    for lo, hi in zip(np.r_[0, check_end[:-1]], check_end):
        slow.learn(X[lo:hi], y[lo:hi], owner[lo:hi])
        peak.append(slow.distances().max())
    threshold = np.array(peak) * 1.01  # quiet …
    threshold[2] = np.inf  # (no check after 90 rows)
    threshold[6] = peak[6] * 0.99  # … until the check after 210 rows
    fast, slow = pair(k, n, eta0=0.3)
    assert fast.learn_until_violation(X.indptr, X.indices, X.data, y, owner, check_end, threshold) == (7, True)
    stop = check_end[6]
    slow.learn(X[:stop], y[:stop], owner[:stop])  # the rows up to the violation, and no further
    assert_same(fast, slow)
    threshold[6] = np.inf  # no violation: every row is learned
    fast, slow = pair(k, n, eta0=0.3)
    assert fast.learn_until_violation(X.indptr, X.indices, X.data, y, owner, check_end, threshold) == (12, False)
    slow.learn(X, y, owner)
    assert_same(fast, slow)


def test_rows_after_the_last_check_are_learned_unchecked():
    k, n, m = 2, 20, 100
    X, y = make_data(m, n, seed=9)
    owner = np.arange(m) % k
    fast, slow = pair(k, n, eta0=0.3)
    slow.learn(X[:40], y[:40], owner[:40])
    below = slow.distances().max() * 1.01  # one threshold for every check: quiet after 20 and 40 rows
    assert fast.learn_until_violation(X.indptr, X.indices, X.data, y, owner, [20, 40], below) == (2, False)
    slow.learn(X[40:], y[40:], owner[40:])  # and on to the end, though the distances grow past it
    assert slow.distances().max() > below
    assert_same(fast, slow)
    fast, _ = pair(k, n, eta0=0.3)  # no check at all: learn
    assert fast.learn_until_violation(X.indptr, X.indices, X.data, y, owner, [], 0.0) == (0, False)
    assert_same(fast, slow)


def test_checks_before_any_row_and_at_the_same_row_are_all_made():
    """Rounds in which no learner has a row (shards that ended) put several checks at one row."""
    X, y = make_data(10, 5, seed=3)
    L = OnlineLearners(2, 5, eta0=0.3)  # w = r = 0: every distance is 0
    owner = np.arange(10) % 2
    assert L.learn_until_violation(X.indptr, X.indices, X.data, y, owner, [0, 0, 10, 10], [1.0, 1.0, np.inf, -1.0]) \
        == (4, True)
    assert L.examples.sum() == 10
    M = OnlineLearners(2, 5, eta0=0.3)
    assert M.learn_until_violation(X.indptr, X.indices, X.data, y, owner, [0, 0, 4], [1.0, -1.0, 1.0]) == (2, True)
    assert M.examples.sum() == 0  # it stopped before the first row


# -- variance monitoring: projections of w − r on the last reference changes (fda) ----


def assert_summaries(fast, slow, changes):
    """fast.summaries() against the dense twin, and fast.Xi against the span of the newest J changes."""
    J = len(fast.Xi)
    np.testing.assert_allclose(fast.Xi @ fast.Xi.T, np.diag((np.linalg.norm(fast.Xi, axis=1) > 0) * 1.0), atol=1e-10)
    want = naive_projector(changes, J) if changes else np.zeros((fast.n_features + 1,) * 2)
    np.testing.assert_allclose(fast.Xi.T @ fast.Xi, want, atol=1e-9)
    np.testing.assert_allclose(fast.summaries(), naive_fda_summaries(slow.w, slow.b, slow.r, slow.r_b, fast.Xi),
                               rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("J, kw", [(1, {}), (2, {}), (3, {"loss": "hinge", "eta0": 0.9, "lam": 1.0}),
                                   (2, {"fit_intercept": False})])
def test_projections_match_the_dense_twin(J, kw):
    k, n = 4, 15
    X, y = make_data(240, n, seed=20 + J, density=0.4)
    fast, slow = pair(k, n, **kw)
    fast = OnlineLearners(k, n, average=True, directions=J, **{key: v for key, v in fast.options.items()
                                                               if key != "average"})
    rng = np.random.default_rng(J)
    owner = rng.integers(0, k, size=240)
    changes = []
    for part in range(6):  # learn, then (alternately) a full sync or a balancing of two learners
        lo, hi = 40 * part, 40 * (part + 1)
        learn_both(fast, slow, X[lo:hi], y[lo:hi], owner[lo:hi])
        assert_summaries(fast, slow, changes)
        if part % 2:
            ids = np.array([0, 2])
            z = fast.models(ids).mean(axis=0)
            fast.set_models(ids, z)
            slow.set_models(ids, z)
        else:
            z = fast.mean_model()
            before = np.append(slow.r, slow.r_b)
            slow.set_reference(z)
            fast.set_reference(z)
            changes.insert(0, np.append(slow.r, slow.r_b) - before)
        assert_summaries(fast, slow, changes)
    if kw.get("lam"):
        assert fast.s.min() >= 1e-5  # s was folded into v on the way


def test_no_directions_costs_nothing_and_keeps_the_distance():
    X, y = make_data(50, 6, seed=30)
    L = OnlineLearners(3, 6, directions=0)
    L.learn(X.indptr, X.indices, X.data, y, np.arange(50) % 3)
    L.set_reference(L.mean_model())
    L.learn(X.indptr, X.indices, X.data, y, np.arange(50) % 3)
    np.testing.assert_array_equal(L.summaries()[:, 0], L.distances())
    assert L.summaries().shape == (3, 1)


@pytest.mark.parametrize("seed", range(6))
def test_the_estimate_bounds_the_variance(seed):
    """δ̂ = mean ‖D_l‖² − Σ_q (mean ⟨D_l, ξ_q⟩)² ≥ δ for any models and any orthonormal ξ (Bessel)."""
    from mpisgd.protocol import Coordinator, ProtocolConfig

    rng = np.random.default_rng(seed)
    k, n, J = 1 + seed, 8, 1 + seed % 3
    X, y = make_data(200, n, seed=40 + seed, density=0.5)
    L = OnlineLearners(k, n, directions=J, eta0=0.5)
    c = Coordinator(ProtocolConfig(name="fda", theta=1.0, fda_directions=J), k)
    owner = rng.integers(0, k, size=200)
    for lo in range(0, 200, 25):
        part = X[lo : lo + 25]
        L.learn(part.indptr, part.indices, part.data, y[lo : lo + 25], owner[lo : lo + 25])
        w, b = (np.array(v) for v in zip(*(L.weights(l) for l in range(k))))
        estimate = c.variance_estimate(L.summaries().sum(axis=0))
        assert estimate >= naive_variance(w, b) - 1e-9 * max(1.0, estimate)
        if lo % 50 == 0:  # a new reference: the mean, or (a balancing-style r) one learner's model
            L.set_reference(L.mean_model() if lo % 100 == 0 else L.models([k - 1])[0])


_WARM_UP_CHECK = """
import numpy as np
from mpisgd.kernels import losses, online, schedules
from mpisgd.learners import OnlineLearners
from mpisgd.protocol import ProtocolConfig, auto_delta, pilot_values, warm_up_protocol

learner = {"loss": "log"}
config = ProtocolConfig(name="dynamic", delta="auto")
L = OnlineLearners(1, 10, **learner)
L.warm_up()
warm_up_protocol(config, learner)
kernels = (online.learn_rows, losses.dloss, schedules.eta)
before = [set(k.signatures) for k in kernels]
indptr, indices, data, y = np.array([0, 2]), np.array([1, 5], np.int32), np.array([1.0, 2.0]), np.array([1.0])
for rows in (indices, data, y):
    rows.setflags(write=False)  # as read from a shard
owner = np.zeros(1, np.int64)
L.learn(indptr, indices, data, y, owner)
L.learn_until_violation(indptr, indices, data, y, owner, np.array([1]), np.array([1e300]))
auto_delta(config, learner, [(float(pilot_values(indptr, data, y, learner).sum()), 1, 2)], 10)
print([sorted(map(str, set(k.signatures) - b)) for k, b in zip(kernels, before)])
"""


def test_warm_up_loads_the_kernels_of_a_run_on_shard_rows():
    """After ``warm_up`` (and ``warm_up_protocol`` under --delta auto) a run calls
    no kernel numba has yet to load: rows read from a shard are read-only views,
    a specialization of their own, and a first call reads numba's cache inside
    the run's clock. In a fresh process, since numba's dispatchers are per
    process."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _WARM_UP_CHECK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[[], [], []]", done.stdout


@pytest.mark.parametrize("lam", [0.0, 1e-3])
def test_sync_pairs_match_the_model_and_its_non_zeros(lam):
    """A full sync's pairs (``sync_pairs``): the non-zeros of u = s·v, in increasing j; the
    model made from them (``sync.model_of_pairs``) is z."""
    rng = np.random.default_rng(7)
    n, m = 500, 30
    L = OnlineLearners(1, n, loss="log", eta0=0.5, lam=lam)
    indptr = np.arange(0, 5 * m + 1, 5)
    L.learn(indptr, rng.integers(0, n, 5 * m).astype(np.int32), rng.random(5 * m), rng.choice([-1.0, 1.0], m),
            np.zeros(m, np.int64))
    z = L.models([0])[0]
    want = np.flatnonzero(z[:n])
    vals, idx = np.full(n, 7.0), np.full(n, -7, np.int32)
    out = L.sync_pairs(0, vals, idx)
    assert out[:2] == (np.count_nonzero(L.V[0]), len(want))
    np.testing.assert_array_equal(idx[: len(want)], want)
    np.testing.assert_array_equal(vals[: len(want)], z[want])
    assert out[2:] == (z[n], z[n + 1])
    made = np.full(n + 2, 7.0)
    sync.model_of_pairs(vals[: len(want)], idx[: len(want)], *out[2:], made)
    np.testing.assert_array_equal(made, z)
