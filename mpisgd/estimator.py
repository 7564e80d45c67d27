"""scikit-learn compatible estimators over the numba kernels.

The estimator validates the input, turns option strings into integer codes,
allocates the state and calls one kernel per epoch; the kernels only compute
(mpisgd.kernels.sgd for Bottou's SGD/ASGD with any schedule,
mpisgd.kernels.dekel for Dekel's SGD/ASGD/CASGD with step 1/(λt),
mpisgd.kernels.sgdqn for SGD-QN, mpisgd.kernels.lasso for L1/elastic net).

scikit-learn's parameters keep their names and meanings: ``tol``,
``n_iter_no_change``, ``early_stopping``, ``validation_fraction``,
``learning_rate``, ``class_weight``, ``sample_weight``, ``warm_start``,
``n_jobs``, ``average``, ``max_iter``, ``verbose``. Defaults that differ from
scikit-learn's: ``algorithm="auto"`` (ASGD for L2), ``learning_rate=None`` (the
algorithm's schedule), ``eta0=None`` (calibrated), ``epsilon=None`` (Huber's
δ = 1.0, ε = 0.1), ``shuffle="block"``.

``algorithm``:
  "auto"         "asgd" for penalty "l2" (unless ``average`` is False or 0),
                 "sgd" otherwise (the L1 kernel does not average).
  "sgd"          Bottou's SGD, schedule "bottou" γ0/(1 + λγ0 t) by default.
  "asgd"         Bottou's ASGD (Xu's schedule γ0(1 + λγ0 t)^-0.75 by default),
                 averaging from ``avg_start`` examples on (default: one epoch).
  "dekel-sgd", "dekel-asgd", "dekel-casgd"
                 Dekel's kernels, step 1/(λt), bias regularized or not.
  "sgdqn"        SGD-QN (Bordes, Bottou and Gallinari 2009 with its erratum):
                 a diagonal gain B starting at γ0 I, re-estimated every
                 ``skip_`` steps (mpisgd.kernels.sgdqn); λ > 0.
When γ0 (``eta0``) is None it is calibrated on 1,000 examples as Bottou's
svmsgd does, once for all the classes of a one-versus-rest fit (the sum of
their sample objectives; ``eta0_`` holds the choice, printed when ``verbose``).

``learning_rate``: None (the algorithm's), one of
mpisgd.kernels.schedules.SCHEDULES ("optimal" 1/(λ(t0 + t)), "bottou", "xu",
"constant" γ0, "invscaling" γ0/t^power_t) or "adaptive" (scikit-learn's: the
constant γ0, divided by 5 whenever ``n_iter_no_change`` epochs in a row miss
the ``tol`` improvement, training stops once it is ≤ 1e-6). ``t0`` None with
"optimal" is scikit-learn's (Bottou's) choice, γ at the first step =
λ^(-1/4) / max(1, −ℓ'(−λ^(-1/4), 1)).

Stopping (``fit`` only), as scikit-learn: an epoch without improvement is one
whose training objective exceeds the best so far minus ``tol``, or, with
``early_stopping``, whose score on the held-out ``validation_fraction`` of the
rows (stratified for classifiers; accuracy or R² of the model, weighted by
``sample_weight``) is below the best plus ``tol``; ``n_iter_no_change`` of them
in a row stop that problem (one-versus-rest: each class on its own). The
training objective is the epoch's mean online loss (each example's, weighted,
at the prediction made before its step) plus the penalty of the model at the
epoch's end (scikit-learn 1.9 adds each step's penalty instead).
``tol=None`` runs ``max_iter`` epochs. ``n_iter_`` is the epochs of the last
``fit``/``partial_fit`` (the largest over the classes), ``t_`` the examples
seen since the first fit.

``sample_weight`` s_i and ``class_weight`` (a dict, or "balanced":
n / (K · count of the class)) multiply into one weight per example: its loss
and gradient are scaled by it in every kernel (one-versus-rest: in every
class's problem, so ``class_weight`` equals the sample weights it implies).

``warm_start=True``: ``fit`` continues the previous fit's state (weights,
averages, step counter, γ0, row order) for ``max_iter`` more epochs, as
``partial_fit`` does for one; parameters that define the state (algorithm,
penalty kind, averaging, fit_intercept) must not change in between.

``n_jobs``: one-versus-rest classes trained in that many threads (the kernels
release the GIL); the model equals the n_jobs=1 model.

``average`` (scikit-learn's): None lets ``algorithm`` decide; False (or 0)
selects Bottou's kernel without averaging, an int n ≥ 1 averaging from
example n on (ā_n = w_n, then ā_t = ā_{t−1} + (w_t − ā_{t−1})/(t − n + 1):
``avg_start`` = n), True is n = 1; only with algorithm "sgd", "asgd" or
"auto", and with penalty "l2" (the L1 kernel does not average).

``penalty``: one of PENALTIES, "l2" for every algorithm, "l1" and
"elasticnet" (with ``l1_ratio``) only with algorithm "sgd"
(mpisgd.kernels.lasso, exact zeros).

Classification with K ≥ 3 classes is one-versus-rest: K binary problems
(class c against the others, c → +1) share the options, the rows, their
order and γ0, each with its own kernel state; the predicted class has the
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
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    _check_sample_weight,
    check_is_fitted,
    check_random_state,
    validate_data,
)

from mpisgd.errors import MpisgdError
from mpisgd.kernels import dekel, lasso, sgd, sgdqn
from mpisgd.kernels.losses import (
    CLASSIFICATION_LOSSES,
    DEFAULT_PARAM,
    LOSSES,
    REGRESSION_LOSSES,
    dloss,
)
from mpisgd.kernels.order import SHUFFLES, chunk_rows, epoch_order
from mpisgd.kernels.schedules import CONSTANT, NEEDS_POSITIVE_LAMBDA, OPTIMAL, SCHEDULES
from mpisgd.model import LinearModel, loss_error_sums

ALGORITHMS = ("auto", "sgd", "asgd", "dekel-sgd", "dekel-asgd", "dekel-casgd", "sgdqn")
DEFAULT_SCHEDULE = {"sgd": "bottou", "asgd": "xu"}
LEARNING_RATES = tuple(SCHEDULES) + ("adaptive",)
ADAPTIVE_DIVISOR = 5.0  # scikit-learn's "adaptive": γ0 ← γ0 / 5 on a plateau
ADAPTIVE_MIN = 1e-6  # … and stop once γ0 ≤ this
# Penalties, and the L1 share ρ of λ(ρ‖w‖₁ + (1 − ρ)/2 ‖w‖²) they fix (None: ``l1_ratio``).
PENALTIES = {"l2": 0.0, "l1": 1.0, "elasticnet": None}
LOSS_ALIASES = {"log_loss": "log", "squared_error": "squared"}
# What a continued fit (warm_start, partial_fit) may not change: the kernel state's form.
STATE_KEYS = ("algorithm", "lasso", "average", "fit_intercept")


def _shuffle_mode(est):
    """``shuffle`` as one of SHUFFLES: True is "block", False is "none"."""
    mode = est.shuffle
    if isinstance(mode, (bool, np.bool_)):
        mode = "block" if mode else "none"
    if not isinstance(mode, str) or mode not in SHUFFLES:
        raise MpisgdError(f"{type(est).__name__}: shuffle must be one of {', '.join(SHUFFLES)}, "
                          f"True or False, got {est.shuffle!r}")
    return mode


def _resolve_algorithm(est):
    """``algorithm`` with "auto" replaced: ASGD for L2 unless averaging is turned off."""
    if est.algorithm not in ALGORITHMS:
        raise MpisgdError(f"{type(est).__name__}: unknown algorithm {est.algorithm!r}; "
                          f"choose one of {', '.join(ALGORITHMS)}")
    if est.algorithm != "auto":
        return est.algorithm
    no_average = est.average is not None and not est.average  # False or 0
    return "sgd" if est.penalty != "l2" or no_average else "asgd"


def _optimal_t0(loss_code, loss_param, lam):
    """scikit-learn's t0 of 1/(λ(t0 + t)) (after Bottou's svmsgd): the first step is
    γ_1 = typw / max(1, ℓ'(−typw, 1)) with typw = λ^(-1/4) (γ_1 = typw for every
    loss here, whose ℓ'(−typw, 1) < 0)."""
    typw = math.sqrt(1.0 / math.sqrt(lam))
    gamma1 = typw / max(1.0, dloss(loss_code, -typw, 1.0, loss_param))
    return 1.0 / (gamma1 * lam) - 1.0  # 1/(λ(t0 + 1)) = γ_1


def _check_config(est, losses):
    """Resolve and check the parameters; return a dict of kernel codes and values."""
    name = type(est).__name__
    loss = LOSS_ALIASES.get(est.loss, est.loss)
    if loss not in losses:
        raise MpisgdError(f"{name}: unknown loss {est.loss!r}; choose one of {', '.join(losses)}")
    if est.penalty not in PENALTIES:
        raise MpisgdError(
            f"{name}: unknown penalty {est.penalty!r}; choose one of {', '.join(PENALTIES)}"
        )
    algorithm = _resolve_algorithm(est)
    average, avg_start = _check_average(est, algorithm)
    lam = float(est.alpha)
    if not math.isfinite(lam) or lam < 0:
        raise MpisgdError(f"{name}: alpha (λ) must be a finite number ≥ 0, got {est.alpha!r}")
    dekel = algorithm.startswith("dekel-")
    sgdqn = algorithm == "sgdqn"
    rate = est.learning_rate
    if sgdqn:
        # B starts at γ0 I and 1/B_ii grows by λ·skip (or more): Bottou's SGD gain
        if rate is not None:
            raise MpisgdError(
                f"{name}: algorithm 'sgdqn' sets its own gains; learning_rate must be None, "
                f"got {rate!r}"
            )
        schedule = "bottou"
    elif dekel:
        if rate not in (None, "optimal"):
            raise MpisgdError(
                f"{name}: algorithm {algorithm!r} uses the step 1/(λt); "
                f"learning_rate must be None, got {rate!r}"
            )
        schedule = "optimal"
    else:
        schedule = rate if rate is not None else DEFAULT_SCHEDULE[algorithm]
        if schedule not in LEARNING_RATES:
            raise MpisgdError(
                f"{name}: unknown learning_rate {schedule!r}; choose one of "
                f"{', '.join(LEARNING_RATES)}"
            )
    if (dekel or sgdqn or schedule in NEEDS_POSITIVE_LAMBDA) and lam <= 0:
        raise MpisgdError(
            f"{name}: alpha (λ) must be > 0 for the step 1/(λt) "
            f"(algorithm {algorithm!r}, learning_rate {schedule!r}), got {est.alpha!r}"
        )
    l1_ratio = PENALTIES[est.penalty]
    if l1_ratio is None:
        l1_ratio = float(est.l1_ratio)
        if not 0.0 <= l1_ratio <= 1.0:
            raise MpisgdError(f"{name}: l1_ratio must lie in [0, 1], got {est.l1_ratio!r}")
    lasso = est.penalty != "l2"
    if lasso:
        # w = u − v with u, v ≥ 0 (mpisgd.kernels.lasso): plain SGD, any schedule
        if algorithm != "sgd":
            raise MpisgdError(
                f"{name}: penalty {est.penalty!r} needs algorithm 'sgd' or 'auto' (averaging "
                f"would undo the sparsity), got {algorithm!r}"
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
    if est.tol is not None and not math.isfinite(float(est.tol)):
        raise MpisgdError(f"{name}: tol must be a finite number or None, got {est.tol!r}")
    if int(est.n_iter_no_change) < 1:
        raise MpisgdError(f"{name}: n_iter_no_change must be ≥ 1, got {est.n_iter_no_change!r}")
    if est.early_stopping and not 0.0 < float(est.validation_fraction) < 1.0:
        raise MpisgdError(f"{name}: validation_fraction must lie in (0, 1), got "
                          f"{est.validation_fraction!r}")
    param = est.epsilon if est.epsilon is not None else DEFAULT_PARAM.get(loss, 0.0)
    t0 = est.t0
    if t0 is None:
        t0 = _optimal_t0(LOSSES[loss], float(param), lam) if schedule == "optimal" else 0.0
    return dict(
        loss=loss,
        loss_code=LOSSES[loss],
        loss_param=float(param),
        lam=lam,
        algorithm=algorithm,
        schedule=schedule,
        sched_code=CONSTANT if schedule == "adaptive" else SCHEDULES[schedule],
        adaptive=schedule == "adaptive",
        t0=float(t0),
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
        tol=None if est.tol is None else float(est.tol),
        n_iter_no_change=int(est.n_iter_no_change),
    )


def _check_average(est, algorithm):
    """(average?, avg_start or None) of Bottou's kernel from ``average`` and the algorithm."""
    name = type(est).__name__
    if est.average is None:
        return algorithm == "asgd", est.avg_start
    if algorithm not in ("sgd", "asgd"):
        raise MpisgdError(
            f"{name}: average={est.average!r} selects Bottou's kernel; it needs algorithm "
            f"'sgd', 'asgd' or 'auto', got {algorithm!r} (Dekel's kernels average by their "
            f"name, 'sgdqn' does not average; leave average=None)"
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
        return bool(est.average), (1.0 if est.average else None)
    if isinstance(est.average, (int, np.integer)) and est.average >= 0:
        return est.average > 0, (float(est.average) if est.average > 0 else None)
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


class _Problem:
    """One binary (or regression) problem's kernel state, advanced one epoch per
    kernel call, and its stopping state (scikit-learn's rule)."""

    def __init__(self, cfg, n_features, eta0, skip, xbar):
        self.cfg = cfg
        self.xbar = xbar  # x̄ of CASGD, else empty
        if cfg["dekel"]:
            self.variant = dekel.VARIANTS[cfg["algorithm"]]
            if not cfg["fit_intercept"]:
                self.bias_mode = dekel.NO_BIAS
            elif cfg["regularize_bias"]:
                self.bias_mode = dekel.REGULARIZED
            else:
                self.bias_mode = dekel.UNREGULARIZED
            self.v = np.zeros(n_features)
            self.u = np.zeros(n_features) if self.variant != dekel.SGD else np.zeros(0)
            self.st = np.zeros(dekel.N_STATE)
        elif cfg["sgdqn"]:
            self.v, self.B, self.st = sgdqn.new_state(n_features, 0.0, 0)
            skip = sgdqn.start(self.B, self.st, eta0, cfg["lam"], skip)  # B = γ0 I
        elif cfg["lasso"]:
            self.r, self.st = lasso.new_state(n_features)  # w = A soft(r, D)
        else:
            self.v = np.zeros(n_features)
            self.a = np.zeros(n_features) if cfg["average"] else np.zeros(0)
            self.st = sgd.new_state()
        self.skip = skip
        self.w = np.zeros(n_features)
        self.b = 0.0

    def start(self, cfg, eta0):
        """Before a fit or partial_fit call: its options, γ0, a fresh stopping state."""
        self.cfg = cfg
        self.eta = eta0  # "adaptive" divides it on a plateau
        self.best = math.inf  # the best objective, or −(the best validation score)
        self.stalled = 0  # epochs in a row without a tol improvement
        self.done = False
        self.n_iter = 0

    @property
    def t(self):
        return int(self.st[0])

    def epoch(self, arrays, y, sw, order, xbar_dot, name):
        """One kernel call over the rows ``order``; returns (weighted online loss sum, errors)."""
        indptr, indices, data = arrays
        cfg = self.cfg
        if cfg["dekel"]:
            loss_sum, n_err = dekel.dekel_epoch(
                indptr, indices, data, y, sw, order, cfg["loss_code"], cfg["loss_param"],
                cfg["lam"], self.variant, self.bias_mode, xbar_dot,
                float(self.xbar @ self.xbar), self.v, self.u, self.st,
            )
            status = 0 if math.isfinite(loss_sum) else -1
        elif cfg["sgdqn"]:
            loss_sum, n_err, status = sgdqn.sgdqn_epoch(
                indptr, indices, data, y, sw, order, cfg["loss_code"], cfg["loss_param"],
                cfg["lam"], float(self.skip), cfg["bias_gain"], cfg["fit_intercept"],
                cfg["regularize_bias"], self.v, self.B, self.st,
            )
        elif cfg["lasso"]:
            loss_sum, n_err, status = lasso.lasso_epoch(
                indptr, indices, data, y, sw, order, cfg["loss_code"], cfg["loss_param"],
                cfg["sched_code"], float(self.eta or 0.0), cfg["lam"], cfg["l1_ratio"],
                cfg["t0"], cfg["power"], cfg["bias_gain"], cfg["fit_intercept"], self.r,
                self.st,
            )
        else:
            loss_sum, n_err, status = sgd.sgd_epoch(
                indptr, indices, data, y, sw, order, cfg["loss_code"], cfg["loss_param"],
                cfg["sched_code"], float(self.eta or 0.0), cfg["lam"], cfg["t0"],
                cfg["power"], cfg["bias_gain"], cfg["fit_intercept"], cfg["regularize_bias"],
                cfg["average"], cfg["avg_start"], self.v, self.a, self.st,
            )
        if status == -2:  # mpisgd.kernels.lasso: the L2 shrink 1 − γλ(1 − ρ) reached 0
            raise MpisgdError(
                f"{name}: step γ·alpha·(1 − l1_ratio) ≥ 1 near example {self.t + 1} "
                f"(learning_rate={cfg['schedule']!r}, eta0={self.eta}, alpha={cfg['lam']}): "
                f"use a smaller eta0"
            )
        if status != 0:
            raise MpisgdError(
                f"{name}: training diverged (a prediction became infinite or NaN near example "
                f"{self.t}) with loss={cfg['loss']!r}, learning_rate={cfg['schedule']!r}, "
                f"eta0={self.eta}, alpha={cfg['lam']}: use a smaller eta0 or a larger alpha"
            )
        self.n_iter += 1
        self._publish(name)
        return loss_sum, n_err

    def _publish(self, name):
        """(w, b) from the kernel state (one dense combination)."""
        st, cfg = self.st, self.cfg
        if cfg["dekel"]:
            w, b = dekel.weights(self.variant, self.bias_mode, cfg["lam"], self.xbar,
                                 float(self.xbar @ self.xbar), self.v, self.u, st)
        elif cfg["sgdqn"]:
            w, b = self.v.copy(), st[sgdqn.BIAS]
        elif cfg["lasso"]:
            w, b = lasso.weights(self.r, st), st[lasso.BIAS]  # u − v
        elif cfg["average"] and not st[sgd.COPYING]:
            w = (self.a + st[sgd.W_FRACTION] * self.v) / st[sgd.A_DIVISOR]  # ā
            b = st[sgd.A_BIAS]
        else:
            w = self.v / st[sgd.W_DIVISOR]  # w = v / wDivisor
            b = st[sgd.W_BIAS]
        if not (np.all(np.isfinite(w)) and math.isfinite(b)):
            raise MpisgdError(
                f"{name}: training diverged (non-finite weights after {self.t} examples): "
                f"use a smaller eta0 or a larger alpha"
            )
        self.w = np.asarray(w, dtype=np.float64)
        self.b = float(b)

    def penalty(self):
        """λ(ρ‖w‖₁ + (1 − ρ)/2 ‖w‖²) (+ λb²/2 with ``regularize_bias``) of the model."""
        cfg, w = self.cfg, self.w
        rho = cfg["l1_ratio"]
        reg = w @ w + (self.b * self.b if cfg["regularize_bias"] else 0.0)
        return cfg["lam"] * (rho * float(np.abs(w).sum()) + 0.5 * (1.0 - rho) * reg)

    def stop_after(self, current, tol):
        """scikit-learn's rule after an epoch: no improvement when ``current`` (the
        training objective, or −(validation score): lower is better) exceeds the best
        so far minus ``tol``; True when this problem is done."""
        if current > self.best - tol:
            self.stalled += 1
        else:
            self.stalled = 0
        self.best = min(self.best, current)
        if self.stalled >= self.cfg["n_iter_no_change"]:
            if self.cfg["adaptive"] and self.eta > ADAPTIVE_MIN:
                self.eta /= ADAPTIVE_DIVISOR
                self.stalled = 0
            else:
                self.done = True
        return self.done


class _BaseSGD(BaseEstimator):
    """Shared parameters, state and epoch loop of SGDClassifier and SGDRegressor.

    Parameters (scikit-learn's where they exist; see the module docstring):
    ``loss``; ``penalty`` (PENALTIES); ``alpha`` λ of F(w, b) (docs/ALGORITHMS.md
    §1); ``l1_ratio`` ρ of "elasticnet"; ``fit_intercept``; ``max_iter`` epochs of
    ``fit`` at most; ``tol``, ``n_iter_no_change``, ``early_stopping``,
    ``validation_fraction`` (stopping); ``shuffle`` the row order of every
    epoch (mpisgd.kernels.order: "block" (default, also True) visits chunks of
    ~32 KiB of consecutive rows of X in a fresh random order, each read front
    to back; no copy of X is made; data of at most 16 MiB get one-row chunks,
    i.e. the same order as "full"; "full" permutes all rows; "none" (also
    False) is file order) and ``random_state`` its seed; ``verbose`` prints the
    calibrated γ0 and a line per epoch and class as scikit-learn does;
    ``epsilon`` δ of huber / ε of epsilon_insensitive (None: 1.0 / 0.1);
    ``learning_rate``, ``eta0`` γ0 (None: calibrated), ``power_t`` of
    "invscaling", ``t0`` of "optimal" (None: scikit-learn's); ``warm_start``;
    ``average``; ``algorithm``; ``regularize_bias`` adds λb²/2; ``bias_gain``;
    ``avg_start`` examples before ASGD starts averaging (None: one epoch of the
    first fit).

    Fitted: ``coef_``, ``intercept_`` (the averaged model for the averaging
    algorithms), ``eta0_``, ``bias_gain_``, ``t_`` (examples seen), ``n_iter_``,
    ``skip_`` (SGD-QN's period of the dense steps).
    """

    _losses = ()

    def __init__(
        self,
        loss,
        *,
        penalty="l2",
        alpha=1e-4,
        l1_ratio=0.15,
        fit_intercept=True,
        max_iter=1000,
        tol=1e-3,
        shuffle="block",
        verbose=0,
        epsilon=None,
        random_state=None,
        learning_rate=None,
        eta0=None,
        power_t=0.5,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=5,
        warm_start=False,
        average=None,
        algorithm="auto",
        t0=None,
        regularize_bias=False,
        bias_gain=None,
        avg_start=None,
    ):
        self.loss = loss
        self.penalty = penalty
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.shuffle = shuffle
        self.verbose = verbose
        self.epsilon = epsilon
        self.random_state = random_state
        self.learning_rate = learning_rate
        self.eta0 = eta0
        self.power_t = power_t
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.warm_start = warm_start
        self.average = average
        self.algorithm = algorithm
        self.t0 = t0
        self.regularize_bias = regularize_bias
        self.bias_gain = bias_gain
        self.avg_start = avg_start

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

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

    def _sample_weight(self, sample_weight, X):
        """``sample_weight`` as float64 (m,), ≥ 0 (None: ones)."""
        try:
            return _check_sample_weight(sample_weight, X, dtype=np.float64,
                                        ensure_non_negative=True)
        except ValueError as exc:
            raise MpisgdError(f"{type(self).__name__}: sample_weight: {exc}") from None

    def _class_weights(self, y, partial):
        """Per-example class weights (SGDClassifier); 1.0 otherwise."""
        return 1.0

    @classmethod
    def _is_classifier(cls):
        return issubclass(cls, ClassifierMixin)

    def _split(self, y, sample_weight):
        """(training rows, validation rows) of ``early_stopping``: scikit-learn's
        split, stratified for classifiers."""
        from sklearn.model_selection import ShuffleSplit, StratifiedShuffleSplit

        splitter = StratifiedShuffleSplit if self._is_classifier() else ShuffleSplit
        cv = splitter(test_size=float(self.validation_fraction), random_state=self.random_state)
        try:
            train, val = next(cv.split(np.zeros((y.shape[0], 1)), y))
        except ValueError as exc:
            raise MpisgdError(f"{type(self).__name__}: early_stopping: validation_fraction="
                              f"{self.validation_fraction}: {exc}") from None
        if not np.any(sample_weight[val] > 0):
            raise MpisgdError(f"{type(self).__name__}: early_stopping: the sample weights of "
                              f"the validation rows are all zero; use another random_state")
        return np.sort(train), np.sort(val)

    # -- the epoch loop --------------------------------------------------------

    def _config(self, X, first):
        """This call's configuration; a continued fit keeps the state's form, γ0,
        avg_start and bias gain."""
        cfg = _check_config(self, self._losses)
        if first:
            if cfg["bias_gain"] is None:
                cfg["bias_gain"] = 0.01 if sp.issparse(X) else 1.0
            return cfg
        old = self._cfg
        changed = [k for k in STATE_KEYS if cfg[k] != old[k]]
        if changed:
            raise MpisgdError(
                f"{type(self).__name__}: cannot continue the previous fit (warm_start or "
                f"partial_fit) with another {', '.join(changed)}: "
                + ", ".join(f"{k} {old[k]!r} → {cfg[k]!r}" for k in changed)
                + "; fit from scratch (warm_start=False)"
            )
        if cfg["bias_gain"] is None:
            cfg["bias_gain"] = old["bias_gain"]
        cfg["avg_start"] = old["avg_start"]
        return cfg

    def _eta0(self, cfg, first, arrays, targets, sw, n_features, order):
        """γ0: ``eta0``; else the previous fit's when continuing it; else calibrated
        once on the first 1,000 rows of ``order`` for all the problems. None where
        no γ0 is used (Dekel's kernels, "optimal")."""
        from mpisgd.calibrate import SAMPLE_SIZE, calibrate_eta0

        if cfg["dekel"] or cfg["sched_code"] == OPTIMAL:
            return None
        if self.eta0 is not None:
            return float(self.eta0)
        if not first and self.eta0_ is not None:
            return self.eta0_
        eta0, tried = calibrate_eta0(
            *arrays, targets, n_features, order, cfg["loss_code"], cfg["loss_param"],
            cfg["lam"], cfg["fit_intercept"], cfg["regularize_bias"], cfg["bias_gain"],
            sample_weight=sw,
        )
        self.calibration_ = tried
        if self.verbose:
            print(f"# Using eta0={eta0:g} (calibrated on {min(len(order), SAMPLE_SIZE)} "
                  f"examples{f', {len(targets)} classes' if len(targets) > 1 else ''})")
        return eta0

    def _init_problems(self, cfg, X, n_problems, m_train, eta0):
        """Fresh kernel states for the problems."""
        n = X.shape[1]
        if cfg["avg_start"] is None:
            cfg["avg_start"] = float(m_train)  # ASGD averages from the second epoch on
        self.bias_gain_ = cfg["bias_gain"]
        skip = 0
        if cfg["sgdqn"]:
            nnz = X.nnz if sp.issparse(X) else np.count_nonzero(X)
            skip = sgdqn.default_skip(n, nnz, X.shape[0])
        xbar = np.zeros(0)
        if cfg["dekel"] and dekel.VARIANTS[cfg["algorithm"]] == dekel.CASGD:
            # x̄ = (1/m) Σ x_j over the first batch (dense, O(mk))
            xbar = np.asarray(X.mean(axis=0), dtype=np.float64).ravel()
        self._xbar = xbar
        self._problems = [_Problem(cfg, n, eta0, skip, xbar) for _ in range(n_problems)]
        if cfg["sgdqn"]:  # lowered with γ0 (mpisgd.kernels.sgdqn.start), the same for all
            self.skip_ = self._problems[0].skip

    def _epochs(self, X, y, sample_weight=None, max_iter=1, first=True, classes=None,
                stop=False):
        """Generator: validate, (re)initialize when ``first``, then run up to ``max_iter``
        epochs, yielding (epoch, seconds, online mean loss, online error rate) after
        each; one-versus-rest, loss and errors are summed over the classes still
        training. ``stop``: scikit-learn's stopping rule and ``early_stopping``'s
        held-out rows (``fit``)."""
        name = type(self).__name__
        X, y = self._validate(X, y, reset=first)
        targets = self._targets(y, first, classes)  # one row of ±1 (or y) per problem
        m = X.shape[0]
        if m == 0:
            raise MpisgdError(f"{name}: empty data (0 samples)")
        given = self._sample_weight(sample_weight, X)
        sw = given * self._class_weights(y, partial=not stop)
        cfg = self._config(X, first)
        arrays = _csr(X)
        rows, val = None, None  # training rows (None: all), held-out rows
        if stop and self.early_stopping:
            rows, val_rows = self._split(y, given)
            val = (X[val_rows], targets[:, val_rows], given[val_rows])
        m_train = m if rows is None else len(rows)
        if first:
            self._rng = check_random_state(self.random_state)
            self._epochs_total = 0
        chunk = chunk_rows(arrays[0])  # c of "block" (no copy of X: the order is enough)

        def order():
            o = epoch_order(cfg["shuffle"], m_train, self._rng, chunk)
            return o if rows is None else rows[o]

        first_order = order()
        eta0 = self._eta0(cfg, first, arrays, targets, sw, X.shape[1], first_order)
        if first:
            self._init_problems(cfg, X, len(targets), m_train, eta0)
        self._cfg = cfg
        self.eta0_ = eta0
        problems = self._problems
        for problem in problems:
            problem.start(cfg, eta0)
        xbar_dot = np.zeros(0)
        if self._xbar.size:  # x̄·x_i for the rows of ``arrays``, O(mk)
            xbar_dot = np.asarray(sp.csr_matrix(arrays[::-1], shape=X.shape) @ self._xbar,
                                  dtype=np.float64).ravel()
        tol = cfg["tol"] if stop else None
        jobs = self._n_jobs(len(problems))
        started = time.perf_counter()

        def advance(k, rows_order):
            """One epoch of problem k, its verbose lines and its stopping test."""
            problem = problems[k]
            loss_sum, n_err = problem.epoch(arrays, targets[k], sw, rows_order, xbar_dot, name)
            lines = []
            if self.verbose:
                lines.append(self._verbose_lines(k, problem, loss_sum / m_train, started))
            if tol is not None:
                if val is None:
                    done = problem.stop_after(loss_sum / m_train + problem.penalty(), tol)
                else:
                    done = problem.stop_after(-self._score(problem, *val, k), tol)
                if done and self.verbose:
                    lines.append(f"Convergence after {problem.n_iter} epochs took "
                                 f"{time.perf_counter() - started:.2f} seconds")
            return loss_sum, n_err, lines

        pool = ThreadPoolExecutor(jobs) if jobs > 1 else None
        try:
            for epoch in range(max_iter):
                active = [k for k, p in enumerate(problems) if not p.done]
                if not active:
                    break
                rows_order = first_order if epoch == 0 else order()
                tick = time.perf_counter()
                if pool is None:
                    results = [advance(k, rows_order) for k in active]
                else:
                    results = list(pool.map(lambda k: advance(k, rows_order), active))
                for _, _, lines in results:
                    for line in lines:
                        print(line)
                self._epochs_total += 1
                self._combine()
                seconds = time.perf_counter() - tick
                loss_sum = sum(r[0] for r in results)
                n_err = sum(r[1] for r in results)
                yield epoch + 1, seconds, loss_sum / m_train, n_err / m_train
        finally:
            if pool is not None:
                pool.shutdown()
        if tol is not None and not all(p.done for p in problems):
            warnings.warn(
                f"{name}: maximum number of iterations ({max_iter}) reached before the "
                f"stopping criterion (tol={cfg['tol']}); consider increasing max_iter",
                ConvergenceWarning,
            )

    def _n_jobs(self, n_problems):
        """Threads for the one-versus-rest problems (``n_jobs`` of SGDClassifier)."""
        return 1

    def _score(self, problem, X_val, targets_val, sw_val, k):
        """scikit-learn's validation score of problem k: accuracy of sign(w·x + b)
        (classifiers) or R² (regressors), weighted by ``sample_weight``."""
        y_val = targets_val[k]
        p = X_val @ problem.w + problem.b
        total = sw_val.sum()
        if self._is_classifier():
            return float(sw_val @ (np.where(p > 0, 1.0, -1.0) == y_val)) / total
        mean = float(sw_val @ y_val) / total
        spread = float(sw_val @ (y_val - mean) ** 2)
        residual = float(sw_val @ (y_val - p) ** 2)
        return 1.0 - residual / spread if spread > 0 else (1.0 if residual == 0 else 0.0)

    def _verbose_lines(self, k, problem, mean_loss, started):
        """scikit-learn's three lines for an epoch of problem k."""
        head = f"-- Epoch {problem.n_iter}"
        if len(self._problems) > 1:
            head += f" (class {self.classes_[k]})"
        w = problem.w
        return (f"{head}\nNorm: {float(np.sqrt(w @ w)):.2f}, NNZs: {np.count_nonzero(w)}, "
                f"Bias: {problem.b:.6f}, T: {problem.t}, Avg. loss: {mean_loss:.6f}\n"
                f"Total training time: {time.perf_counter() - started:.2f} seconds.")

    def _combine(self):
        """coef_, intercept_ and the counters from every problem's (w, b)."""
        ps = self._problems
        coef = np.vstack([p.w for p in ps])
        self.coef_ = coef if self._is_classifier() else coef[0]
        self.intercept_ = np.array([p.b for p in ps])
        self.t_ = max(p.t for p in ps)
        self.n_iter_ = max(p.n_iter for p in ps)

    def fit(self, X, y, sample_weight=None):
        """Train for at most ``max_iter`` epochs (from scratch, or continuing the
        previous fit with ``warm_start``) until the stopping rule holds."""
        first = not (self.warm_start and hasattr(self, "_problems"))
        for _ in self._epochs(X, y, sample_weight, int(self.max_iter), first=first,
                              stop=True):
            pass
        return self

    def _partial_fit(self, X, y, sample_weight, classes=None):
        first = not hasattr(self, "_problems")
        for _ in self._epochs(X, y, sample_weight, 1, first=first, classes=classes):
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
            algorithm=cfg["algorithm"],
            penalty=cfg["penalty"],
            **{"lambda": cfg["lam"]},
            schedule="1/(lambda t)" if cfg["dekel"] else cfg["schedule"],
            eta0=self.eta0_,
            t0=cfg["t0"],
            power_t=cfg["power"],
            loss_param=cfg["loss_param"],
            fit_intercept=cfg["fit_intercept"],
            regularize_bias=cfg["regularize_bias"],
            bias_gain=cfg["bias_gain"],
            epochs=self._epochs_total,
            examples_seen=self.t_,
            n_features=int(self.coef_.shape[-1]),
        )
        if not cfg["dekel"] and cfg["average"]:
            meta["avg_start"] = cfg["avg_start"]
        if cfg["sgdqn"]:
            meta["skip"] = self.skip_
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
        fit_intercept=True,
        max_iter=1000,
        tol=1e-3,
        shuffle="block",
        verbose=0,
        epsilon=None,
        n_jobs=None,
        random_state=None,
        learning_rate=None,
        eta0=None,
        power_t=0.5,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=5,
        class_weight=None,
        warm_start=False,
        average=None,
        algorithm="auto",
        t0=None,
        regularize_bias=False,
        bias_gain=None,
        avg_start=None,
    ):
        super().__init__(
            loss, penalty=penalty, alpha=alpha, l1_ratio=l1_ratio, fit_intercept=fit_intercept,
            max_iter=max_iter, tol=tol, shuffle=shuffle, verbose=verbose, epsilon=epsilon,
            random_state=random_state, learning_rate=learning_rate, eta0=eta0, power_t=power_t,
            early_stopping=early_stopping, validation_fraction=validation_fraction,
            n_iter_no_change=n_iter_no_change, warm_start=warm_start, average=average,
            algorithm=algorithm, t0=t0, regularize_bias=regularize_bias, bias_gain=bias_gain,
            avg_start=avg_start,
        )
        self.n_jobs = n_jobs
        self.class_weight = class_weight

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

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """One epoch over (X, y), continuing the previous state (no stopping rule,
        no held-out rows). The first call fixes the classes from ``classes`` (or
        from y)."""
        return self._partial_fit(X, y, sample_weight, classes)

    def _class_weights(self, y, partial):
        """``class_weight`` of each example's class (1.0 without class_weight)."""
        from sklearn.utils.class_weight import compute_class_weight

        name = type(self).__name__
        if self.class_weight is None:
            return 1.0
        if partial and isinstance(self.class_weight, str) and self.class_weight == "balanced":
            raise MpisgdError(
                f"{name}: class_weight 'balanced' is not supported by partial_fit (one call "
                f"sees part of the data); pass compute_class_weight('balanced', classes=..., "
                f"y=...) on a large enough sample of the labels as class_weight"
            )
        try:
            per_class = compute_class_weight(self.class_weight, classes=self.classes_, y=y)
        except ValueError as exc:
            raise MpisgdError(f"{name}: class_weight: {exc}") from None
        return per_class[np.searchsorted(self.classes_, y)]

    def _n_jobs(self, n_problems):
        """Threads for the one-versus-rest problems: ``n_jobs`` as joblib reads it."""
        from joblib import effective_n_jobs

        try:
            jobs = effective_n_jobs(self.n_jobs)
        except ValueError as exc:
            raise MpisgdError(f"{type(self).__name__}: n_jobs: {exc}") from None
        return max(1, min(jobs, n_problems))

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
        fit_intercept=True,
        max_iter=1000,
        tol=1e-3,
        shuffle="block",
        verbose=0,
        epsilon=None,
        random_state=None,
        learning_rate=None,
        eta0=None,
        power_t=0.25,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=5,
        warm_start=False,
        average=None,
        algorithm="auto",
        t0=None,
        regularize_bias=False,
        bias_gain=None,
        avg_start=None,
    ):
        super().__init__(
            loss, penalty=penalty, alpha=alpha, l1_ratio=l1_ratio, fit_intercept=fit_intercept,
            max_iter=max_iter, tol=tol, shuffle=shuffle, verbose=verbose, epsilon=epsilon,
            random_state=random_state, learning_rate=learning_rate, eta0=eta0, power_t=power_t,
            early_stopping=early_stopping, validation_fraction=validation_fraction,
            n_iter_no_change=n_iter_no_change, warm_start=warm_start, average=average,
            algorithm=algorithm, t0=t0, regularize_bias=regularize_bias, bias_gain=bias_gain,
            avg_start=avg_start,
        )

    def _targets(self, y, reset, classes=None):
        y = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise MpisgdError(f"{type(self).__name__}: targets y contain NaN or infinity")
        return np.ascontiguousarray(y)[None, :]

    def partial_fit(self, X, y, sample_weight=None):
        """One epoch over (X, y), continuing the previous state (no stopping rule,
        no held-out rows)."""
        return self._partial_fit(X, y, sample_weight)

    def predict(self, X):
        """w·x + b."""
        return self._decision(X)[:, 0]
