"""A trained linear model p(x) = w·x + b, and its HDF5 file.

File layout (format version 1): dataset ``coef`` (float64, n_features);
root attributes ``format`` = "mpisgd-linear-model", ``format_version``,
``loss``, ``intercept``, ``n_features``, ``meta_json`` (the whole ``meta``
dict as JSON, read back exactly) and, for people reading the file with
h5dump, every scalar ``meta`` entry (λ as ``lambda``, ``schedule``,
``algorithm``, ...) as a root attribute of its own unless its name is one of
the above.
"""

import json
import math
import os

import numpy as np
from numba import njit

from mpisgd.atomic import atomic_path
from mpisgd.errors import MpisgdError
from mpisgd.kernels.losses import CLASSIFICATION_LOSSES, LOSSES, loss

FORMAT = "mpisgd-linear-model"
FORMAT_VERSION = 1
RESERVED = ("format", "format_version", "loss", "intercept", "n_features", "meta_json")


@njit(cache=True)
def loss_error_sums(loss_code, p, y, loss_param):
    """(Σ ℓ(p_i, y_i), number of i with y_i·p_i ≤ 0) over dense arrays."""
    total = 0.0
    n_err = 0
    for i in range(p.shape[0]):
        total += loss(loss_code, p[i], y[i], loss_param)
        if y[i] * p[i] <= 0.0:
            n_err += 1
    return total, n_err


class LinearModel:
    """coef: float64 (n_features,), intercept: float, loss: a name of
    mpisgd.kernels.losses.LOSSES, meta: JSON-serializable dict (λ,
    schedule, algorithm, classes, ...)."""

    def __init__(self, coef, intercept, loss, meta=None):
        coef = np.ascontiguousarray(coef, dtype=np.float64)
        if coef.ndim != 1:
            raise MpisgdError(f"LinearModel: coef must be 1-D, got shape {coef.shape}")
        if not np.all(np.isfinite(coef)) or not math.isfinite(float(intercept)):
            raise MpisgdError("LinearModel: coef and intercept must be finite")
        if loss not in LOSSES:
            raise MpisgdError(f"LinearModel: unknown loss {loss!r}; known: {', '.join(LOSSES)}")
        self.coef = coef
        self.intercept = float(intercept)
        self.loss = loss
        self.meta = dict(meta or {})

    @property
    def n_features(self):
        return self.coef.shape[0]

    @property
    def is_classifier(self):
        return self.loss in CLASSIFICATION_LOSSES

    def decision_function(self, X):
        """w·x + b for every row of X (scipy.sparse or dense, n_features columns)."""
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise MpisgdError(
                f"X has {X.shape[-1] if X.ndim else 0} features, but the model expects "
                f"{self.n_features}"
            )
        return np.asarray(X @ self.coef, dtype=np.float64).ravel() + self.intercept

    def predict(self, X):
        """Classifiers: the label of sign(w·x + b) (meta["classes"] = [label of −1,
        label of +1] when present, else ±1; 0 goes to −1). Regressors: w·x + b."""
        p = self.decision_function(X)
        if not self.is_classifier:
            return p
        classes = self.meta.get("classes")
        if classes is None:
            return np.where(p > 0, 1.0, -1.0)
        return np.asarray(classes)[(p > 0).astype(np.intp)]

    def loss_and_error(self, X, y, loss_param=None):
        """(mean loss, error rate) on X with labels y in ±1 (classification) or real."""
        from mpisgd.kernels.losses import DEFAULT_PARAM

        if loss_param is None:
            loss_param = self.meta.get("loss_param", DEFAULT_PARAM.get(self.loss, 0.0))
        p = self.decision_function(X)
        total, n_err = loss_error_sums(LOSSES[self.loss], p, np.asarray(y, np.float64),
                                       float(loss_param))
        m = max(len(p), 1)
        return total / m, n_err / m

    def save(self, path):
        """Write the model to ``path`` (HDF5) atomically: temp file, then rename."""
        import h5py

        path = os.fspath(path)
        try:
            meta_json = json.dumps(self.meta, sort_keys=True)
        except TypeError as exc:
            raise MpisgdError(f"{path}: model meta is not JSON-serializable: {exc}") from None
        with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["loss"] = self.loss
            f.attrs["intercept"] = self.intercept
            f.attrs["n_features"] = self.n_features
            f.attrs["meta_json"] = meta_json
            f.create_dataset("coef", data=self.coef)
            for key, value in self.meta.items():
                if key not in RESERVED and isinstance(value, (str, bool, int, float)):
                    f.attrs[key] = value

    @classmethod
    def load(cls, path):
        """Read a model written by ``save``; errors name the file."""
        import h5py

        path = os.fspath(path)
        if not os.path.exists(path):
            raise MpisgdError(f"{path}: no such model file")
        try:
            f = h5py.File(path, "r")
        except OSError as exc:
            raise MpisgdError(f"{path}: not an HDF5 model file ({exc})") from None
        with f:
            if f.attrs.get("format") != FORMAT:
                raise MpisgdError(f"{path}: not an mpisgd model file (no format={FORMAT!r})")
            version = int(f.attrs.get("format_version", -1))
            if version != FORMAT_VERSION:
                raise MpisgdError(
                    f"{path}: model format version {version} is not supported "
                    f"(this mpisgd reads version {FORMAT_VERSION})"
                )
            try:
                coef = f["coef"][...]
                intercept = float(f.attrs["intercept"])
                loss_name = str(f.attrs["loss"])
                n_features = int(f.attrs["n_features"])
                meta = json.loads(f.attrs["meta_json"])
            except (KeyError, ValueError) as exc:
                raise MpisgdError(f"{path}: damaged model file ({exc})") from None
        if coef.shape != (n_features,):
            raise MpisgdError(
                f"{path}: coef has shape {coef.shape} but n_features is {n_features}"
            )
        try:
            return cls(coef, intercept, loss_name, meta)
        except MpisgdError as exc:
            raise MpisgdError(f"{path}: {exc}") from None
