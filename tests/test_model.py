"""LinearModel: predictions on CSR/dense, HDF5 round trip, validation."""

import h5py
import numpy as np
import pytest
import scipy.sparse as sp

from mpisgd.errors import MpisgdError
from mpisgd.model import FORMAT_VERSION, LinearModel, normalize_rows


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


def test_normalize_rows_against_dense_twin():
    rng = np.random.default_rng(0)
    D = rng.normal(size=(6, 4)) * (rng.random((6, 4)) < 0.6)
    D[2] = 0.0  # an empty row stays empty
    norms = np.linalg.norm(D, axis=1, keepdims=True)
    want = np.divide(D, norms, out=np.zeros_like(D), where=norms > 0)
    X = sp.csr_matrix(D)
    np.testing.assert_allclose(normalize_rows(X).toarray(), want, rtol=1e-15)
    np.testing.assert_array_equal(X.toarray(), D)  # the input is not modified


def test_preprocess_follows_the_record():
    D = np.array([[3.0, 4.0, 0.0]])
    plain = LinearModel(np.ones(3), 0.0, "hinge")
    assert plain.preprocessing == {"normalize": "none"}
    np.testing.assert_array_equal(plain.preprocess(D).toarray(), D)
    l2 = LinearModel(np.ones(3), 0.0, "hinge", preprocessing={"normalize": "l2"})
    np.testing.assert_allclose(l2.preprocess(D).toarray(), [[0.6, 0.8, 0.0]])
    with pytest.raises(MpisgdError, match="test.svm has 2 features, but the model expects 3"):
        l2.preprocess(D[:, :2], "test.svm")
    with pytest.raises(MpisgdError, match="normalize='max'"):
        LinearModel(np.ones(3), 0.0, "hinge", preprocessing={"normalize": "max"})


def test_one_versus_rest_model_round_trip_and_scores(tmp_path):
    coef = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    m = LinearModel(coef, [0.0, 0.1, 0.0], "log", {"classes": ["a", "b", "c"], "lambda": 0.5},
                    {"normalize": "l2", "n_features": 2})
    m.save(tmp_path / "m.h5")
    back = LinearModel.load(tmp_path / "m.h5")
    np.testing.assert_array_equal(back.coef, coef)
    np.testing.assert_array_equal(back.intercept, [0.0, 0.1, 0.0])
    assert back.preprocessing == m.preprocessing and back.one_vs_rest
    X = np.array([[2.0, 0.0], [0.0, 2.0], [-1.0, -1.0]])
    np.testing.assert_array_equal(back.predict(X), ["a", "b", "c"])
    scored = back.evaluate(X, ["a", "c", "c"])
    assert scored["error"] == pytest.approx(1 / 3)
    p = X / np.linalg.norm(X, axis=1, keepdims=True) @ coef.T + [0.0, 0.1, 0.0]  # normalize="l2"
    y = np.array([[1, -1, -1], [-1, -1, 1], [-1, -1, 1]])
    want = np.mean(np.sum(np.log1p(np.exp(-y * p)), axis=1))  # Σ over the problems, mean over rows
    assert scored["loss"] == pytest.approx(want, rel=1e-12)
    assert scored["cost"] == pytest.approx(want + 0.25 * np.sum(coef**2), rel=1e-12)
    with pytest.raises(MpisgdError, match=r"labels \['z'\] are not among the model's classes"):
        back.evaluate(X, ["a", "z", "c"], "t.svm")
    with pytest.raises(MpisgdError, match="one-versus-rest"):
        LinearModel(coef, [0.0, 0.0, 0.0], "squared", {"classes": [1, 2, 3]})
    with pytest.raises(MpisgdError, match="intercept"):
        LinearModel(coef, 0.0, "log", {"classes": [1, 2, 3]})


def test_version_1_models_are_refused_with_the_reason(tmp_path):
    path = tmp_path / "m.h5"
    model().save(path)
    with h5py.File(path, "a") as f:
        f.attrs["format_version"] = 1
    with pytest.raises(MpisgdError, match="version 1 does not record how the training rows were preprocessed"):
        LinearModel.load(path)


def test_predict_takes_rows_as_the_file_holds_them(tmp_path):
    """One contract: decision_function, predict and evaluate apply the recorded preprocessing;
    rows already preprocessed say so. mpisgd.load_model gives the same model back."""
    import mpisgd

    m = LinearModel(np.array([1.0, -2.0, 0.5]), -0.1, "hinge", {"lambda": 0.1},
                    {"normalize": "l2", "n_features": 3})
    X = sp.csr_matrix(np.array([[30.0, 0.0, 40.0], [0.0, 0.5, 0.0], [0.05, 0.0, 0.0]]))
    y = np.array([1.0, -1.0, -1.0])
    Xn = normalize_rows(X)
    np.testing.assert_allclose(m.decision_function(X), Xn @ m.coef - 0.1, rtol=1e-15)
    np.testing.assert_array_equal(m.decision_function(Xn, preprocessed=True), Xn @ m.coef - 0.1)
    np.testing.assert_array_equal(m.predict(X), [1.0, -1.0, 1.0])
    assert not np.array_equal(m.predict(X, preprocessed=True), m.predict(X))  # raw rows score otherwise
    assert m.evaluate(X, y) == m.evaluate(Xn, y, preprocessed=True)
    assert m.evaluate(X, y)["error"] == pytest.approx(1 / 3)
    m.save(tmp_path / "m.h5")
    back = mpisgd.load_model(tmp_path / "m.h5")
    np.testing.assert_array_equal(back.decision_function(X.toarray()), m.decision_function(X))
