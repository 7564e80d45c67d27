"""LinearModel: predictions on CSR/dense, HDF5 round trip, validation."""

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.errors import MpisgdError
from mpisgd.model import FORMAT_VERSION, LinearModel


def model():
    return LinearModel(np.array([1.0, -2.0, 0.5]), 0.25, "log",
                       {"lambda": 1e-5, "schedule": "xu", "algorithm": "asgd",
                        "classes": ["no", "yes"]})


def test_decision_function_dense_and_csr():
    m = model()
    X = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]])
    np.testing.assert_allclose(m.decision_function(X), [2.25, -1.75])
    np.testing.assert_allclose(m.decision_function(sp.csr_matrix(X)), [2.25, -1.75])
    np.testing.assert_array_equal(m.predict(X), ["yes", "no"])
    with pytest.raises(MpisgdError, match="X has 2 features, but the model expects 3"):
        m.decision_function(X[:, :2])


def test_save_load_round_trip(tmp_path):
    path = tmp_path / "m.h5"
    model().save(path)
    back = LinearModel.load(path)
    np.testing.assert_array_equal(back.coef, model().coef)
    assert back.intercept == 0.25 and back.loss == "log" and back.meta == model().meta
    with h5py.File(path) as f:  # self-describing
        assert f.attrs["format_version"] == FORMAT_VERSION
        assert f.attrs["n_features"] == 3 and f.attrs["loss"] == "log"
        assert f.attrs["schedule"] == "xu" and f.attrs["lambda"] == 1e-5
        assert f.attrs["algorithm"] == "asgd"
    assert [p.name for p in tmp_path.iterdir()] == ["m.h5"]  # no temp file left


def test_load_errors_name_the_file(tmp_path):
    path = tmp_path / "m.h5"
    model().save(path)
    with h5py.File(path, "a") as f:
        f.attrs["format_version"] = 99
    with pytest.raises(MpisgdError, match=f"{path}: model format version 99"):
        LinearModel.load(path)
    junk = tmp_path / "junk.h5"
    junk.write_text("hello")
    with pytest.raises(MpisgdError, match=f"{junk}: not an HDF5 model file"):
        LinearModel.load(junk)
    with pytest.raises(MpisgdError, match="no such model file"):
        LinearModel.load(tmp_path / "missing.h5")


def test_constructor_validates():
    with pytest.raises(MpisgdError, match="unknown loss"):
        LinearModel(np.zeros(2), 0.0, "nope")
    with pytest.raises(MpisgdError, match="finite"):
        LinearModel(np.array([np.nan]), 0.0, "hinge")
