"""scikit-learn compatible estimators over the numba kernels.

The estimator validates the input, turns option strings into integer codes,
allocates the state and calls one kernel per epoch; the kernels only compute
(mpisgd.kernels.sgd for Bottou's SGD/ASGD with any schedule,
mpisgd.kernels.dekel for Dekel's SGD/ASGD/CASGD with step 1/(λt),
mpisgd.kernels.sgdqn for SGD-QN, mpisgd.kernels.lasso for L1/elastic net).

``algorithm``:
  "sgd"          Bottou's SGD, schedule "bottou" γ0/(1 + λγ0 t) by default.
  "asgd"         Bottou's ASGD (Xu's schedule γ0(1 + λγ0 t)^-0.75 by default),
                 averaging from ``avg_start`` examples on (default: one epoch).
  "dekel-sgd", "dekel-asgd", "dekel-casgd"
                 Dekel's kernels, step 1/(λt), bias regularized or not.
  "sgdqn"        SGD-QN (Bordes, Bottou and Gallinari 2009 with its erratum):
                 a diagonal gain B starting at γ0 I, re-estimated every
                 ``skip_`` steps (mpisgd.kernels.sgdqn); λ > 0.
When γ0 (``eta0``) is None it is calibrated on 1,000 examples as Bottou's
svmsgd does (``eta0_`` holds the choice, printed when ``verbose``).

``average`` (scikit-learn's name): None lets ``algorithm`` decide; False,
True or an int n ≥ 1 select Bottou's kernel without averaging, averaging
from the first example on, or averaging from example n on (``avg_start``
= 0 or n; only with algorithm "sgd" or "asgd", and with penalty "l2":
the L1 kernel does not average).

``penalty``: one of PENALTIES, "l2" for every algorithm, "l1" and
"elasticnet" (with ``l1_ratio``) only with algorithm "sgd"
(mpisgd.kernels.lasso, exact zeros).

Classification with K ≥ 3 classes is one-versus-rest: K binary problems
(class c against the others, c → +1) share the options and the rows, each
with its own kernel state (and calibrated γ0); the predicted class has the
largest w_c·x + b_c. ``coef_`` is (1, n_features) for two classes and
(K, n_features) for K, ``intercept_`` (1,) or (K,), as in scikit-learn;
SGDRegressor's ``coef_`` is (n_features,) and ``intercept_`` (1,).

``bias_gain`` multiplies the bias step of Bottou's kernels. Default None:
0.01 for scipy.sparse input (svmsgd's sparse-data gain: on a9a and w8a it
divides the objective gap after 10 epochs by 2 to 10) and 1.0 for dense
input. The resolved value is ``bias_gain_``. Dekel's kernels ignore it (their
step is 1/(λt) for every coordinate).
"""

import math
import time

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data

from mpisgd.errors import MpisgdError
from mpisgd.kernels.losses import (
    CLASSIFICATION_LOSSES,
    DEFAULT_PARAM,
    LOSSES,
    REGRESSION_LOSSES,
)
from mpisgd.kernels.order import SHUFFLES, chunk_rows, epoch_order
from mpisgd.kernels.schedules import NEEDS_POSITIVE_LAMBDA, OPTIMAL, SCHEDULES
from mpisgd.model import LinearModel, loss_error_sums

ALGORITHMS = ("sgd", "asgd", "dekel-sgd", "dekel-asgd", "dekel-casgd", "sgdqn")
DEFAULT_SCHEDULE = {"sgd": "bottou", "asgd": "xu"}
# Penalties, and the L1 share ρ of λ(ρ‖w‖₁ + (1 − ρ)/2 ‖w‖²) they fix (None: ``l1_ratio``).
PENALTIES = {"l2": 0.0, "l1": 1.0, "elasticnet": None}
LOSS_ALIASES = {"log_loss": "log", "squared_error": "squared"}


def _shuffle_mode(est):
    """``shuffle`` as one of SHUFFLES: True is "block", False is "none"."""
    mode = est.shuffle
    if isinstance(mode, (bool, np.bool_)):
        mode = "block" if mode else "none"
    if not isinstance(mode, str) or mode not in SHUFFLES:
        raise MpisgdError(f"{type(est).__name__}: shuffle must be one of {', '.join(SHUFFLES)}, "
                          f"True or False, got {est.shuffle!r}")
    return mode


def _check_config(est, losses):
    """Resolve and check the parameters; return a dict of kernel codes and values."""
    name = type(est).__name__
    loss = LOSS_ALIASES.get(est.loss, est.loss)
    if loss not in losses:
        raise MpisgdError(f"{name}: unknown loss {est.loss!r}; choose one of {', '.join(losses)}")
    if est.algorithm not in ALGORITHMS:
        raise MpisgdError(
            f"{name}: unknown algorithm {est.algorithm!r}; choose one of {', '.join(ALGORITHMS)}"
        )
    if est.penalty not in PENALTIES:
        raise MpisgdError(
            f"{name}: unknown penalty {est.penalty!r}; choose one of {', '.join(PENALTIES)}"
        )
    average, avg_start = _check_average(est)
    lam = float(est.alpha)
    if not math.isfinite(lam) or lam < 0:
        raise MpisgdError(f"{name}: alpha (λ) must be a finite number ≥ 0, got {est.alpha!r}")
    dekel = est.algorithm.startswith("dekel-")
    sgdqn = est.algorithm == "sgdqn"
    if sgdqn:
        # B starts at γ0 I and 1/B_ii grows by λ·skip (or more): Bottou's SGD gain
        if est.schedule is not None:
            raise MpisgdError(
                f"{name}: algorithm 'sgdqn' sets its own gains; schedule must be None, "
                f"got {est.schedule!r}"
            )
        schedule = "bottou"
    elif dekel:
        if est.schedule not in (None, "optimal"):
            raise MpisgdError(
                f"{name}: algorithm {est.algorithm!r} uses the step 1/(λt); "
                f"schedule must be None, got {est.schedule!r}"
            )
        schedule = "optimal"
    else:
        schedule = est.schedule if est.schedule is not None else DEFAULT_SCHEDULE[est.algorithm]
        if schedule not in SCHEDULES:
            raise MpisgdError(
                f"{name}: unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}"
            )
    if (dekel or sgdqn or schedule in NEEDS_POSITIVE_LAMBDA) and lam <= 0:
        raise MpisgdError(
            f"{name}: alpha (λ) must be > 0 for the step 1/(λt) "
            f"(algorithm {est.algorithm!r}, schedule {schedule!r}), got {est.alpha!r}"
        )
    l1_ratio = PENALTIES[est.penalty]
    if l1_ratio is None:
        l1_ratio = float(est.l1_ratio)
        if not 0.0 <= l1_ratio <= 1.0:
            raise MpisgdError(f"{name}: l1_ratio must lie in [0, 1], got {est.l1_ratio!r}")
    lasso = est.penalty != "l2"
    if lasso:
        # w = u − v with u, v ≥ 0 (mpisgd.kernels.lasso): plain SGD, any schedule
        if est.algorithm != "sgd":
            raise MpisgdError(
                f"{name}: penalty {est.penalty!r} needs algorithm 'sgd' (averaging would "
                f"undo the sparsity), got {est.algorithm!r}"
            )
        if lam <= 0:
            raise MpisgdError(f"{name}: alpha (λ) must be > 0 with penalty {est.penalty!r}, "
                              f"got {est.alpha!r}")
        if est.regularize_bias:
            raise MpisgdError(f"{name}: regularize_bias is not supported with penalty "
                              f"{est.penalty!r} (the bias is not penalized)")
    if est.eta0 is not None and not (float(est.eta0) > 0 and math.isfinite(float(est.eta0))):
        raise MpisgdError(f"{name}: eta0 (γ0) must be > 0 or None, got {est.eta0!r}")
    if int(est.max_iter) < 1:
        raise MpisgdError(f"{name}: max_iter must be ≥ 1, got {est.max_iter!r}")
    param = est.epsilon if est.epsilon is not None else DEFAULT_PARAM.get(loss, 0.0)
    return dict(
        loss=loss,
        loss_code=LOSSES[loss],
        loss_param=float(param),
        lam=lam,
        schedule=schedule,
        sched_code=SCHEDULES[schedule],
        t0=float(est.t0),
        power=float(est.power_t),
        bias_gain=None if est.bias_gain is None else float(est.bias_gain),
        fit_intercept=bool(est.fit_intercept),
        regularize_bias=bool(est.regularize_bias),
        dekel=dekel,
        sgdqn=sgdqn,
        lasso=lasso,
        penalty=est.penalty,
        l1_ratio=l1_ratio,
        average=average,
        avg_start=avg_start,
        shuffle=_shuffle_mode(est),
    )


def _check_average(est):
    """(average?, avg_start or None) of Bottou's kernel from ``average`` and ``algorithm``."""
    name = type(est).__name__
    if est.average is None:
        return est.algorithm == "asgd", est.avg_start
    if est.algorithm not in ("sgd", "asgd"):
        raise MpisgdError(
            f"{name}: average={est.average!r} selects Bottou's kernel; it needs algorithm "
            f"'sgd' or 'asgd', got {est.algorithm!r} (Dekel's kernels average by their name, "
            f"'sgdqn' does not average; leave average=None)"
        )
    if est.penalty != "l2" and est.average is not False and est.average != 0:
        raise MpisgdError(
            f"{name}: average={est.average!r} averages in Bottou's L2 kernel; penalty "
            f"{est.penalty!r} runs the L1 kernel (algorithm 'sgd' only, no averaging: it would "
            f"undo the sparsity); leave average None or False"
        )
    if est.avg_start is not None:
        raise MpisgdError(f"{name}: give average or avg_start, not both")
    if isinstance(est.average, (bool, np.bool_)):
        return bool(est.average), (0.0 if est.average else None)
    if isinstance(est.average, (int, np.integer)) and est.average >= 0:
        return est.average > 0, (float(est.average) if est.average > 1 else 0.0)
    raise MpisgdError(f"{name}: average must be None, a bool or an int ≥ 0, got {est.average!r}")


def _csr(X):
    """CSR arrays in the kernels' dtypes (indptr int64, indices int32, data float64)."""
    if sp.issparse(X):
        X = X.tocsr()
        # one index dtype, so that scipy's canonical-format check does not first
        # copy the indices to int64 (0.8 s on RCV1-scale data with int64 indptr)
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=X.shape)
        X.sum_duplicates()
    else:
        X = sp.csr_matrix(np.asarray(X, dtype=np.float64))
    return (
        np.ascontiguousarray(X.indptr, dtype=np.int64),
        np.ascontiguousarray(X.indices, dtype=np.int32),
        np.ascontiguousarray(X.data, dtype=np.float64),
    )


class _BaseSGD(BaseEstimator):
    """Shared parameters, state and epoch loop of SGDClassifier and SGDRegressor.

    Parameters: ``penalty`` (PENALTIES); ``alpha`` λ of F(w, b) (docs/ALGORITHMS.md §1); ``algorithm`` (see
    the module docstring); ``schedule`` one of mpisgd.kernels.schedules.SCHEDULES
    (None: per algorithm); ``eta0`` γ0 (None: calibrated); ``t0`` of "optimal"
    1/(λ(t0 + t)); ``power_t`` of "invscaling"; ``fit_intercept``;
    ``regularize_bias`` adds λb²/2; ``bias_gain`` (see the module docstring);
    ``avg_start`` examples before ASGD starts averaging (None: one epoch of the
    first fit); ``average`` (see the module docstring); ``penalty`` "l2"
    (λ/2‖w‖²), "l1" (λ‖w‖₁) or "elasticnet" (λ(ρ‖w‖₁ + (1 − ρ)/2 ‖w‖²),
    ρ = ``l1_ratio``): "l1" and "elasticnet" run SGD on w = u − v
    (mpisgd.kernels.lasso; algorithm "sgd", λ > 0, no averaging) and give
    exact zeros; ``epsilon`` δ of huber / ε of epsilon_insensitive (None: 1.0 /
    0.1); ``max_iter`` epochs of ``fit``; ``shuffle`` the row order of every
    epoch (mpisgd.kernels.order: "block" (default, also True) visits chunks of
    ~32 KiB of consecutive rows of X in a fresh random order, each read front
    to back; no copy of X is made; data of at most 16 MiB get one-row chunks,
    i.e. the same order as "full"; "full" permutes all rows; "none" (also
    False) is file order) and ``random_state`` its seed; ``verbose`` prints
    the calibrated γ0.

    Fitted: ``coef_``, ``intercept_`` (the averaged model for the averaging
    algorithms), ``eta0_`` (one-versus-rest: one per class), ``bias_gain_``,
    ``t_`` (examples seen), ``n_iter_``, ``skip_`` (SGD-QN's period of the
    dense steps; one-versus-rest: one per class).
    """

    _losses = ()

    def __init__(
        self,
        loss,
        *,
        penalty="l2",
        alpha=1e-4,
        l1_ratio=0.15,
        algorithm="asgd",
        schedule=None,
        eta0=None,
        t0=0.0,
        power_t=0.5,
        fit_intercept=True,
        regularize_bias=False,
        bias_gain=None,
        avg_start=None,
        average=None,
        epsilon=None,
        max_iter=5,
        shuffle="block",
        random_state=None,
        verbose=0,
    ):
        self.loss = loss
        self.penalty = penalty
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.algorithm = algorithm
        self.schedule = schedule
        self.eta0 = eta0
        self.t0 = t0
        self.power_t = power_t
        self.fit_intercept = fit_intercept
        self.regularize_bias = regularize_bias
        self.bias_gain = bias_gain
        self.avg_start = avg_start
        self.average = average
        self.epsilon = epsilon
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state
        self.verbose = verbose

    # -- input ---------------------------------------------------------------

    def _validate(self, X, y=None, reset=True):
        """validate_data, with every problem reported as an MpisgdError."""
        try:
            if y is None and not reset:
                return validate_data(self, X, accept_sparse="csr", dtype=np.float64,
                                     reset=False), None
            X, y = validate_data(self, X, y, accept_sparse="csr", dtype=np.float64,
                                 reset=reset, y_numeric=not self._is_classifier())
        except MpisgdError:
            raise
        except ValueError as exc:
            raise MpisgdError(f"{type(self).__name__}: {exc}") from None
        return X, y

    @classmethod
    def _is_classifier(cls):
        return issubclass(cls, ClassifierMixin)

    # -- state ---------------------------------------------------------------

    def _init_state(self, cfg, X, n_rows):
        from mpisgd.kernels import dekel, sgd

        n = X.shape[1]
        self._cfg = cfg
        self._v = np.zeros(n)
        if cfg["dekel"]:
            self._variant = dekel.VARIANTS[self.algorithm]
            if not cfg["fit_intercept"]:
                self._bias_mode = dekel.NO_BIAS
            elif cfg["regularize_bias"]:
                self._bias_mode = dekel.REGULARIZED
            else:
                self._bias_mode = dekel.UNREGULARIZED
            self._u = np.zeros(n) if self._variant != dekel.SGD else np.zeros(0)
            if self._variant == dekel.CASGD:
                # x̄ = (1/m) Σ x_j over the first batch (dense, O(mk))
                self._xbar = np.asarray(X.mean(axis=0), dtype=np.float64).ravel()
            else:
                self._xbar = np.zeros(0)
            self._st = np.zeros(dekel.N_STATE)
        elif cfg["sgdqn"]:
            from mpisgd.kernels import sgdqn

            # B = γ0 I is set before the first step: γ0 is calibrated after this
            self._v, self._B, self._st = sgdqn.new_state(n, 0.0, 0)
            self._average = False
            self._xbar = np.zeros(0)
            self.skip_ = sgdqn.default_skip(n, X.nnz if sp.issparse(X) else X.size, n_rows)
        elif cfg["lasso"]:
            from mpisgd.kernels import lasso

            self._r, self._st = lasso.new_state(n)  # w = A soft(r, D)
            self._average = False
            self._xbar = np.zeros(0)
        else:
            self._average = cfg["average"]
            self._a = np.zeros(n) if self._average else np.zeros(0)
            self._xbar = np.zeros(0)
            self._st = sgd.new_state()
            self._avg_start = float(n_rows if cfg["avg_start"] is None else cfg["avg_start"])
        self._rng = check_random_state(self.random_state)
        self.eta0_ = None if cfg["dekel"] else self.eta0
        self.t_ = 0
        self.n_iter_ = 0

    def _epoch(self, arrays, y, order, xbar_dot):
        """One kernel call over the rows ``order``; returns (online loss sum, errors).
        ``xbar_dot``: x̄·x_i per row (CASGD), else empty."""
        from mpisgd.kernels import dekel, sgd

        indptr, indices, data = arrays
        cfg = self._cfg
        if cfg["dekel"]:
            loss_sum, n_err = dekel.dekel_epoch(
                indptr, indices, data, y, order, cfg["loss_code"], cfg["loss_param"],
                cfg["lam"], self._variant, self._bias_mode, xbar_dot,
                float(self._xbar @ self._xbar), self._v, self._u, self._st,
            )
            status = 0 if math.isfinite(loss_sum) else -1
        elif cfg["sgdqn"]:
            from mpisgd.kernels import sgdqn

            if self._st[sgdqn.T] == 0:
                self.skip_ = sgdqn.start(self._B, self._st, self.eta0_, cfg["lam"], self.skip_)
            loss_sum, n_err, status = sgdqn.sgdqn_epoch(
                indptr, indices, data, y, order, cfg["loss_code"], cfg["loss_param"],
                cfg["lam"], float(self.skip_), cfg["bias_gain"], cfg["fit_intercept"],
                cfg["regularize_bias"], self._v, self._B, self._st,
            )
        elif cfg["lasso"]:
            from mpisgd.kernels import lasso

            loss_sum, n_err, status = lasso.lasso_epoch(
                indptr, indices, data, y, order, cfg["loss_code"], cfg["loss_param"],
                cfg["sched_code"], float(self.eta0_ or 0.0), cfg["lam"], cfg["l1_ratio"],
                cfg["t0"], cfg["power"], cfg["bias_gain"], cfg["fit_intercept"], self._r,
                self._st,
            )
        else:
            loss_sum, n_err, status = sgd.sgd_epoch(
                indptr, indices, data, y, order, cfg["loss_code"], cfg["loss_param"],
                cfg["sched_code"], float(self.eta0_ or 0.0), cfg["lam"], cfg["t0"],
                cfg["power"], cfg["bias_gain"], cfg["fit_intercept"], cfg["regularize_bias"],
                self._average, self._avg_start, self._v, self._a, self._st,
            )
        if status == -2:  # mpisgd.kernels.lasso: the L2 shrink 1 − γλ(1 − ρ) reached 0
            raise MpisgdError(
                f"{type(self).__name__}: step γ·alpha·(1 − l1_ratio) ≥ 1 near example "
                f"{int(self._st[0]) + 1} (schedule={cfg['schedule']!r}, eta0={self.eta0_}, "
                f"alpha={cfg['lam']}): use a smaller eta0"
            )
        if status != 0:
            raise MpisgdError(
                f"{type(self).__name__}: training diverged (a prediction became infinite "
                f"or NaN near example {int(self._st[0])}, epoch {self.n_iter_ + 1}) with "
                f"loss={cfg['loss']!r}, schedule={cfg['schedule']!r}, eta0={self.eta0_}, "
                f"alpha={cfg['lam']}: use a smaller eta0 or a larger alpha"
            )
        self.t_ = int(self._st[0])
        self.n_iter_ += 1
        self._publish()
        return loss_sum, n_err

    def _publish(self):
        """This problem's (w, b) from the kernel state (one dense combination)."""
        from mpisgd.kernels import dekel, sgd

        st = self._st
        if self._cfg["dekel"]:
            xbar = self._xbar
            w, b = dekel.weights(self._variant, self._bias_mode, self._cfg["lam"], xbar,
                                 float(xbar @ xbar), self._v, self._u, st)
        elif self._cfg["sgdqn"]:
            from mpisgd.kernels import sgdqn

            w, b = self._v.copy(), st[sgdqn.BIAS]
        elif self._cfg["lasso"]:
            from mpisgd.kernels import lasso

            w, b = lasso.weights(self._r, st), st[lasso.BIAS]  # u − v
        elif self._average and not st[sgd.COPYING]:
            w = (self._a + st[sgd.W_FRACTION] * self._v) / st[sgd.A_DIVISOR]  # ā
            b = st[sgd.A_BIAS]
        else:
            w = self._v / st[sgd.W_DIVISOR]  # w = v / wDivisor
            b = st[sgd.W_BIAS]
        if not (np.all(np.isfinite(w)) and math.isfinite(b)):
            raise MpisgdError(
                f"{type(self).__name__}: training diverged (non-finite weights after "
                f"{int(st[0])} examples): use a smaller eta0 or a larger alpha"
            )
        self._w = np.asarray(w, dtype=np.float64)
        self._b = float(b)

    def _calibrate(self, arrays, y, n_features, order):
        from mpisgd.calibrate import calibrate_eta0

        cfg = self._cfg
        if cfg["dekel"] or cfg["sched_code"] == OPTIMAL or self.eta0 is not None:
            return
        eta0, tried = calibrate_eta0(
            *arrays, y, n_features, order, cfg["loss_code"], cfg["loss_param"], cfg["lam"],
            cfg["fit_intercept"], cfg["regularize_bias"], cfg["bias_gain"],
        )
        self.eta0_ = eta0
        self.calibration_ = tried
        if self.verbose:
            print(f"# Using eta0={eta0:g} (calibrated on {min(len(order), 1000)} examples)")

    def _order(self, m, chunk):
        return epoch_order(self._cfg["shuffle"], m, self._rng, chunk)

    # -- the epoch loop --------------------------------------------------------

    def _problem(self):
        """A holder of one more problem's kernel state (one-versus-rest)."""
        return type(self)(**self.get_params())

    def _epochs(self, X, y, max_iter, reset, classes=None):
        """Generator: validate, (re)initialize when ``reset``, then run ``max_iter``
        epochs, yielding (epoch, seconds, online mean loss, online error rate);
        one-versus-rest, loss and errors are summed over the K problems."""
        X, y = self._validate(X, y, reset=reset)
        targets = self._targets(y, reset, classes)  # one row of targets per problem
        cfg = _check_config(self, self._losses) if reset else self._cfg
        m = X.shape[0]
        if m == 0:
            raise MpisgdError(f"{type(self).__name__}: empty data (0 samples)")
        arrays = _csr(X)
        if reset:
            if cfg["bias_gain"] is None:
                cfg["bias_gain"] = 0.01 if sp.issparse(X) else 1.0
            self.bias_gain_ = cfg["bias_gain"]
            self._cfg = cfg
            self._problems = [self] if len(targets) == 1 else [self._problem() for _ in targets]
            for problem in self._problems:
                problem._init_state(cfg, X, m)
        chunk = chunk_rows(arrays[0])  # c of "block" (no copy of X: the order is enough)
        first_orders = None
        if reset:  # each problem's first order, on which γ0 is calibrated
            first_orders = [p._order(m, chunk) for p in self._problems]
            for problem, y_pm, order in zip(self._problems, targets, first_orders):
                problem._calibrate(arrays, y_pm, X.shape[1], order)
        xbar = self._problems[0]._xbar
        xbar_dot = np.zeros(0)
        if xbar.size:  # x̄·x_i for the rows of ``arrays``, O(mk)
            rows = sp.csr_matrix(arrays[::-1], shape=X.shape)
            xbar_dot = np.asarray(rows @ xbar, dtype=np.float64).ravel()
        for epoch in range(max_iter):
            start = time.perf_counter()
            loss_sum = n_err = 0.0
            for k, (problem, y_pm) in enumerate(zip(self._problems, targets)):
                order = first_orders[k] if first_orders and epoch == 0 else problem._order(m, chunk)
                part_loss, part_err = problem._epoch(arrays, y_pm, order, xbar_dot)
                loss_sum, n_err = loss_sum + part_loss, n_err + part_err
            self._combine()
            seconds = time.perf_counter() - start
            yield epoch + 1, seconds, loss_sum / m, n_err / m

    def _combine(self):
        """coef_, intercept_ and the counters from every problem's (w, b)."""
        ps = self._problems
        coef = np.vstack([p._w for p in ps])
        self.coef_ = coef if self._is_classifier() else coef[0]
        self.intercept_ = np.array([p._b for p in ps])
        self.t_, self.n_iter_ = ps[0].t_, ps[0].n_iter_
        if len(ps) > 1:
            self.eta0_ = np.array([np.nan if p.eta0_ is None else p.eta0_ for p in ps])
            if self._cfg["sgdqn"]:  # lowered per class with its γ0 (mpisgd.kernels.sgdqn.start)
                self.skip_ = np.array([p.skip_ for p in ps])

    def fit(self, X, y):
        """Train from scratch for ``max_iter`` epochs."""
        for _ in self._epochs(X, y, int(self.max_iter), reset=True):
            pass
        return self

    def _partial_fit(self, X, y, classes=None):
        first = not hasattr(self, "_st") and not hasattr(self, "_problems")
        for _ in self._epochs(X, y, 1, reset=first, classes=classes):
            pass
        return self

    # -- prediction and model --------------------------------------------------

    def _decision(self, X):
        """w_k·x + b_k for every row of X and problem k: (m, K)."""
        check_is_fitted(self, "coef_")
        X = self._validate(X, reset=False)[0]
        return np.asarray(X @ np.atleast_2d(self.coef_).T, dtype=np.float64) + self.intercept_

    def objective(self, X, y):
        """(mean loss, error rate, primal objective F(w, b) of docs/ALGORITHMS.md §1) on X, y;
        one-versus-rest: loss and objective summed over the K problems, the error
        of the predicted class."""
        check_is_fitted(self, "coef_")
        X, y = self._validate(X, y, reset=False)
        targets = self._targets(y, reset=False)
        p = self._decision(X)
        cfg = self._cfg
        total, n_err = loss_error_sums(cfg["loss_code"], np.ascontiguousarray(p.T).ravel(),
                                       targets.ravel(), cfg["loss_param"])
        m = max(p.shape[0], 1)
        if p.shape[1] > 1:
            n_err = int(np.sum(np.argmax(p, axis=1) != np.argmax(targets, axis=0)))
        reg = float(np.sum(self.coef_ * self.coef_))
        if cfg["regularize_bias"]:
            reg += float(np.sum(self.intercept_**2))
        rho = cfg["l1_ratio"]  # λ(ρ‖w‖₁ + (1 − ρ)/2 ‖w‖²); ρ = 0 for "l2"
        penalty = cfg["lam"] * (rho * float(np.abs(self.coef_).sum()) + 0.5 * (1.0 - rho) * reg)
        return total / m, n_err / m, total / m + penalty

    def to_model(self):
        """The fitted model as a LinearModel (what ``save`` writes)."""
        check_is_fitted(self, "coef_")
        cfg = self._cfg
        meta = dict(
            algorithm=self.algorithm,
            penalty=cfg["penalty"],
            **{"lambda": cfg["lam"]},
            schedule="1/(lambda t)" if cfg["dekel"] else cfg["schedule"],
            eta0=self.eta0_.tolist() if isinstance(self.eta0_, np.ndarray) else self.eta0_,
            t0=cfg["t0"],
            power_t=cfg["power"],
            loss_param=cfg["loss_param"],
            fit_intercept=cfg["fit_intercept"],
            regularize_bias=cfg["regularize_bias"],
            bias_gain=cfg["bias_gain"],
            epochs=self.n_iter_,
            examples_seen=self.t_,
            n_features=int(self.coef_.shape[-1]),
        )
        if not cfg["dekel"] and cfg["average"]:
            meta["avg_start"] = self._problems[0]._avg_start
        if cfg["sgdqn"]:
            meta["skip"] = self.skip_.tolist() if isinstance(self.skip_, np.ndarray) else self.skip_
        if cfg["lasso"]:
            meta["l1_ratio"] = cfg["l1_ratio"]
        coef, intercept = self.coef_, self.intercept_
        if hasattr(self, "classes_"):
            meta["classes"] = [c.item() if hasattr(c, "item") else c for c in self.classes_]
            if len(self.classes_) == 2:
                meta["label_map"] = {"-1": meta["classes"][0], "+1": meta["classes"][1]}
        if coef.ndim == 1 or coef.shape[0] == 1:
            coef, intercept = coef.reshape(-1), intercept[0]
        return LinearModel(coef, intercept, cfg["loss"], meta)


class SGDClassifier(ClassifierMixin, _BaseSGD):
    """Linear classifier trained by sparse SGD/ASGD/CASGD.

    Two classes: ``classes_[0]`` is mapped to −1 and ``classes_[1]`` to +1
    (``label_map_`` records it). K ≥ 3 classes: one-versus-rest (see the
    module docstring).
    """

    _losses = CLASSIFICATION_LOSSES + ("log_loss",)

    def __init__(
        self,
        loss="hinge",
        *,
        penalty="l2",
        alpha=1e-4,
        l1_ratio=0.15,
        algorithm="asgd",
        schedule=None,
        eta0=None,
        t0=0.0,
        power_t=0.5,
        fit_intercept=True,
        regularize_bias=False,
        bias_gain=None,
        avg_start=None,
        average=None,
        epsilon=None,
        max_iter=5,
        shuffle="block",
        random_state=None,
        verbose=0,
    ):
        super().__init__(
            loss, penalty=penalty, alpha=alpha, l1_ratio=l1_ratio, algorithm=algorithm,
            schedule=schedule, eta0=eta0, t0=t0, power_t=power_t, fit_intercept=fit_intercept,
            regularize_bias=regularize_bias, bias_gain=bias_gain, avg_start=avg_start,
            average=average, epsilon=epsilon, max_iter=max_iter,
            shuffle=shuffle, random_state=random_state, verbose=verbose,
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _targets(self, y, reset, classes=None):
        """±1 targets, one row per problem: one row (classes_[1] → +1) for two
        classes, K rows (class c → +1) one-versus-rest."""
        name = type(self).__name__
        try:
            check_classification_targets(y)
        except ValueError as exc:
            raise MpisgdError(f"{name}: {exc}") from None
        if reset:
            found = np.unique(y) if classes is None else np.unique(classes)
            if found.shape[0] < 2:
                raise MpisgdError(
                    f"{name}: classification needs at least 2 classes; got "
                    f"{found.shape[0]} class: {found.tolist()[:10]}"
                )
            self.classes_ = found
            if found.shape[0] == 2:
                self.label_map_ = {found[0]: -1, found[1]: +1}
        unknown = ~np.isin(y, self.classes_)
        if unknown.any():
            raise MpisgdError(
                f"{name}: labels {np.unique(y[unknown]).tolist()[:10]} are not among the "
                f"classes {self.classes_.tolist()} of the first fit"
            )
        if len(self.classes_) == 2:
            return np.where(y == self.classes_[1], 1.0, -1.0)[None, :]
        return np.where(y[None, :] == self.classes_[:, None], 1.0, -1.0)

    def partial_fit(self, X, y, classes=None):
        """One epoch over (X, y), continuing the previous state. The first call
        fixes the classes from ``classes`` (or from y)."""
        return self._partial_fit(X, y, classes)

    def decision_function(self, X):
        """w·x + b for every row of X (positive means classes_[1]); one-versus-rest
        (m, K): w_c·x + b_c per class."""
        p = self._decision(X)
        return p[:, 0] if p.shape[1] == 1 else p

    def predict(self, X):
        """The class of sign(w·x + b) (a score of 0 goes to classes_[0]), or of the
        largest w_c·x + b_c one-versus-rest."""
        p = self._decision(X)
        if p.shape[1] == 1:
            return self.classes_[(p[:, 0] > 0).astype(np.intp)]
        return self.classes_[np.argmax(p, axis=1)]

    def _has_proba(self):
        return LOSS_ALIASES.get(self.loss, self.loss) in ("log", "modified_huber")

    @available_if(_has_proba)
    def predict_proba(self, X):
        """P(class | x), columns following classes_: logistic for log loss,
        (clip(p, −1, 1) + 1)/2 for modified Huber; one-versus-rest, each class's
        binary probability, normalized over the classes (as scikit-learn)."""
        p = self._decision(X)
        if LOSS_ALIASES.get(self.loss, self.loss) == "log":
            pos = 0.5 * (1.0 + np.tanh(0.5 * p))  # 1/(1 + e^{−p}), without overflow
        else:
            pos = (np.clip(p, -1.0, 1.0) + 1.0) / 2.0
        if p.shape[1] == 1:
            return np.column_stack([1.0 - pos[:, 0], pos[:, 0]])
        total = pos.sum(axis=1, keepdims=True)
        k = p.shape[1]
        return np.where(total > 0, pos / np.where(total > 0, total, 1.0), 1.0 / k)

    @available_if(_has_proba)
    def predict_log_proba(self, X):
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))


class SGDRegressor(RegressorMixin, _BaseSGD):
    """Linear regressor trained by sparse SGD/ASGD/CASGD (losses: squared,
    absolute, huber, epsilon_insensitive; ``epsilon`` is Huber's δ or the ε)."""

    _losses = REGRESSION_LOSSES + ("squared_error",)

    def __init__(
        self,
        loss="squared",
        *,
        penalty="l2",
        alpha=1e-4,
        l1_ratio=0.15,
        algorithm="asgd",
        schedule=None,
        eta0=None,
        t0=0.0,
        power_t=0.5,
        fit_intercept=True,
        regularize_bias=False,
        bias_gain=None,
        avg_start=None,
        average=None,
        epsilon=None,
        max_iter=5,
        shuffle="block",
        random_state=None,
        verbose=0,
    ):
        super().__init__(
            loss, penalty=penalty, alpha=alpha, l1_ratio=l1_ratio, algorithm=algorithm,
            schedule=schedule, eta0=eta0, t0=t0, power_t=power_t, fit_intercept=fit_intercept,
            regularize_bias=regularize_bias, bias_gain=bias_gain, avg_start=avg_start,
            average=average, epsilon=epsilon, max_iter=max_iter,
            shuffle=shuffle, random_state=random_state, verbose=verbose,
        )

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _targets(self, y, reset, classes=None):
        y = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise MpisgdError(f"{type(self).__name__}: targets y contain NaN or infinity")
        return np.ascontiguousarray(y)[None, :]

    def partial_fit(self, X, y):
        """One epoch over (X, y), continuing the previous state."""
        return self._partial_fit(X, y)

    def predict(self, X):
        """w·x + b."""
        return self._decision(X)[:, 0]
