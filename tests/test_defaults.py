"""One set of defaults for learning on a data set (mpisgd.defaults): the
estimators, `mpisgd fit` and `mpisgd train`/`simulate` take the same, and
where no γ0 is given it is calibrated on the data."""

import inspect

import numpy as np
import pytest

from mpisgd import defaults
from mpisgd.cli import build_parser


def parsed(command, *args):
    return build_parser(command).parse_args([command, *args])


def test_the_estimators_defaults_are_mpisgd_defaults():
    from mpisgd import estimator
    from mpisgd.estimator import SGDClassifier, SGDRegressor

    for cls, loss in ((SGDClassifier, defaults.CLASSIFIER_LOSS), (SGDRegressor, defaults.REGRESSOR_LOSS)):
        params = cls().get_params()
        assert (params["loss"], params["alpha"], params["algorithm"], params["eta0"]) == \
            (loss, defaults.ALPHA, defaults.ALGORITHM, defaults.ETA0), cls.__name__
        assert inspect.signature(cls).parameters["eta0"].default is defaults.ETA0
        assert estimator._resolve_algorithm(cls()) == defaults.L2_ALGORITHM  # "auto" under L2
    assert estimator.DEFAULT_SCHEDULE == defaults.SCHEDULE


def test_fit_takes_the_same_defaults():
    args = parsed("fit", "train.svm")
    assert (args.loss, args.lam, args.algorithm, args.schedule, args.eta0) == \
        (defaults.CLASSIFIER_LOSS, defaults.ALPHA, defaults.ALGORITHM, None, defaults.ETA0)


@pytest.mark.parametrize("command", ["train", "simulate"])
def test_train_and_simulate_take_the_same_defaults(command):
    from mpisgd.commands.options import learner_args

    learner = learner_args(parsed(command, "--synthetic", "disjunction"))
    assert (learner["loss"], learner["lam"], learner["schedule"], learner["average"], learner["eta0"]) == \
        (defaults.CLASSIFIER_LOSS, defaults.ALPHA, defaults.SCHEDULE[defaults.L2_ALGORITHM], True,
         None)  # None: calibrated


def test_the_papers_setting_is_spelled_out_in_full():
    from mpisgd.commands.options import learner_args

    args = parsed("train", "--loss", "log", "--lam", "0", "--schedule", "constant", "--eta0", "1", "--no-average")
    assert {key: learner_args(args)[key] for key in defaults.PAPER} == defaults.PAPER


@pytest.mark.parametrize("rule", ["pa", "pa-i", "rda"])
def test_the_other_rules_keep_their_own_defaults(rule):
    """Passive-aggressive and dual averaging have no L2 shrink and no γ0: no λ, no averaging, no calibration."""
    from mpisgd.commands.options import learner_args
    from mpisgd.learners import OnlineLearners

    learner = learner_args(parsed("train", "--rule", rule))
    assert (learner["lam"], learner["average"], learner["eta0"]) == (0.0, False, 1.0)
    OnlineLearners(2, 3, **learner)  # a valid learner as it stands


def test_calibration_is_the_estimators_search_on_learner_0s_first_rows():
    """γ0 from a RowSource is Bottou's search (mpisgd.calibrate) on its first
    1,000 rows with the learner's loss and λ, the bias at gain 1."""
    from mpisgd.calibrate import SAMPLE_SIZE, calibrate_eta0
    from mpisgd.commands.options import calibrate_eta0 as calibrated, learner_args
    from mpisgd.data.rows import StreamSource
    from mpisgd.data.synthetic import RCV1Stream
    from mpisgd.kernels.losses import LOSSES

    stream = RCV1Stream(n_features=2000, n_learners=3, seed=4)
    learner = learner_args(parsed("train", "--synthetic", "rcv1"))
    resolved, record = calibrated(learner, StreamSource(stream, 0, 5000, block_rows=300))  # blocks < the sample
    indptr, indices, data, y = stream.rows(0, SAMPLE_SIZE, [0])
    expected, tried = calibrate_eta0(indptr, indices, data, y, 2000, np.arange(SAMPLE_SIZE), LOSSES["hinge"], 0.0,
                                     defaults.ALPHA, True, False, 1.0)
    assert resolved["eta0"] == record["eta0"] == expected and record["rows"] == SAMPLE_SIZE
    assert [g for g, _ in record["tried"]] == [g for g, _ in tried]
    assert calibrated({**learner, "eta0": 0.25}, StreamSource(stream, 0, 10)) == ({**learner, "eta0": 0.25}, None)
