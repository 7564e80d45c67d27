"""The defaults of learning on a data set, one set for the estimators
(``SGDClassifier``, ``SGDRegressor``, ``mpisgd fit``) and for ``mpisgd train``
and ``mpisgd simulate``: Bottou's averaged SGD on the L2-regularized hinge
loss (docs/ALGORITHMS.md §1, §3), its first step γ0 calibrated on the data
where the user gives none (``mpisgd.calibrate``).

Kamp et al.'s online setting (logistic loss, no regularization, the constant
step η = 1, no averaging) is a choice the user spells out: ``PAPER`` (what
``mpisgd demo`` passes).
"""

CLASSIFIER_LOSS = "hinge"
REGRESSOR_LOSS = "squared"
ALPHA = 1e-4  # λ of the penalty λ/2‖w‖² (scikit-learn's alpha, the CLI's --lam)
ALGORITHM = "auto"  # the estimators': L2_ALGORITHM for the L2 penalty, SGD for L1 and elastic net
# Bottou's ASGD (SGD whose final model averages its steps): "auto" under the L2 penalty,
# the only one of train and simulate.
L2_ALGORITHM = "asgd"
# The step-size schedule of each of Bottou's algorithms (mpisgd.kernels.schedules).
SCHEDULE = {"sgd": "bottou", "asgd": "xu"}  # γ0/(1 + λγ0t), γ0(1 + λγ0t)^−0.75
ETA0 = None  # γ0: None calibrates it (mpisgd.calibrate: one pass over 1,000 rows per candidate)

# The paper's online learner, as options of `mpisgd train` and `simulate`.
PAPER = {"loss": "log", "lam": 0.0, "schedule": "constant", "eta0": 1.0, "average": False}
