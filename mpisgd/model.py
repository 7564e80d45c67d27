"""A trained linear model p(x) = w·x + b, and its HDF5 file.

One linear function (binary classification, regression): ``coef`` has shape
(n_features,) and ``intercept`` is a float. One-versus-rest over K ≥ 3
classes: ``coef`` (K, n_features), ``intercept`` (K,), ``meta["classes"]``
the K labels; p_c(x) = w_c·x + b_c and the predicted class is the argmax.

``preprocessing`` records what was done to the rows before they reached the
learner (``mpisgd prep`` shard attributes, ``mpisgd fit --normalize``):
``normalize`` ("l2" or "none"), ``zero_based_input``, ``n_features``,
``source``, ``label_mapping``, ``vw_hash_bits`` (VW feature names hashed
into 2^b features; 0 or absent: none). ``preprocess`` applies it to new rows.

The contract: ``decision_function``, ``predict`` and ``evaluate`` take rows
as the input file holds them (e.g. ``sklearn.datasets.load_svmlight_file``
of the test file, with the model's ``n_features`` columns) and apply
``preprocess`` themselves, so ``load_model(path).predict(X)`` scores X the
way the training rows were seen. Rows already preprocessed (those of shards
``prep --normalize`` wrote) are passed with ``preprocessed=True``.

File layout (format version 2): dataset ``coef``; root attributes ``format``
= "mpisgd-linear-model", ``format_version``, ``loss``, ``intercept`` (scalar
or (K,) array), ``n_features``, ``preprocessing`` (JSON), ``meta_json`` (the
whole ``meta`` dict as JSON, read back exactly) and, for people reading the
file with h5dump, every scalar ``meta`` entry (λ as ``lambda``,
``schedule``, ``algorithm``, ...) as a root attribute of its own unless its
name is one of the above. Version 1 files (no ``preprocessing``: whether
their rows were normalized is unknown) are refused.
"""

import json
import os

import numpy as np
import scipy.sparse as sp
from numba import njit

from mpisgd.atomic import atomic_path
from mpisgd.errors import MpisgdError
from mpisgd.kernels.losses import CLASSIFICATION_LOSSES, LOSSES, loss

FORMAT = "mpisgd-linear-model"
FORMAT_VERSION = 2
RESERVED = ("format", "format_version", "loss", "intercept", "n_features", "preprocessing",
            "meta_json")
NORMALIZATIONS = ("none", "l2")


def normalize_rows(X):
    """A copy of X (CSR) with every nonzero row scaled to unit L2 norm, as
    ``mpisgd prep --normalize`` does: x ← x / ‖x‖₂ (zero rows stay)."""
    X = sp.csr_matrix(X, dtype=np.float64, copy=True)
    s = np.asarray(X.multiply(X).sum(axis=1)).ravel()  # ‖x‖² per row
    inv = np.where(s > 0.0, 1.0 / np.sqrt(np.where(s > 0.0, s, 1.0)), 1.0)
    X.data *= np.repeat(inv, np.diff(X.indptr))
    return X


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
    """coef: float64 (n_features,) or (K, n_features) one-versus-rest;
    intercept: float or (K,); loss: a name of mpisgd.kernels.losses.LOSSES;
    meta: JSON-serializable dict (λ, schedule, algorithm, classes, ...);
    preprocessing: dict (see the module docstring; {}: rows used as given)."""

    def __init__(self, coef, intercept, loss, meta=None, preprocessing=None):
        coef = np.ascontiguousarray(coef, dtype=np.float64)
        intercept = np.asarray(intercept, dtype=np.float64)
        if coef.ndim not in (1, 2) or intercept.shape != coef.shape[:-1]:
            raise MpisgdError(
                f"LinearModel: coef (n_features,) takes a scalar intercept, coef (K, n_features) "
                f"K intercepts; got coef {coef.shape} and intercept {intercept.shape}"
            )
        if not (np.all(np.isfinite(coef)) and np.all(np.isfinite(intercept))):
            raise MpisgdError("LinearModel: coef and intercept must be finite")
        if loss not in LOSSES:
            raise MpisgdError(f"LinearModel: unknown loss {loss!r}; known: {', '.join(LOSSES)}")
        self.meta = dict(meta or {})
        if coef.ndim == 2:
            classes = self.meta.get("classes") or []
            if loss not in CLASSIFICATION_LOSSES or coef.shape[0] < 3 or len(classes) != coef.shape[0]:
                raise MpisgdError(
                    f"LinearModel: coef of shape {coef.shape} is one-versus-rest: it needs a "
                    f"classification loss and meta['classes'] holding its {coef.shape[0]} (≥ 3) labels"
                )
        self.coef = coef
        self.intercept = float(intercept) if coef.ndim == 1 else intercept
        self.loss = loss
        self.preprocessing = dict(preprocessing or {})
        normalize = self.preprocessing.setdefault("normalize", "none")
        if normalize not in NORMALIZATIONS:
            raise MpisgdError(
                f"LinearModel: preprocessing normalize={normalize!r}; known: {', '.join(NORMALIZATIONS)}"
            )

    @property
    def n_features(self):
        return self.coef.shape[-1]

    @property
    def is_classifier(self):
        return self.loss in CLASSIFICATION_LOSSES

    @property
    def one_vs_rest(self):
        return self.coef.ndim == 2

    def preprocess(self, X, where="X"):
        """Rows as the learner saw them: CSR float64 with the model's n_features,
        L2-normalized when the training rows were."""
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise MpisgdError(
                f"{where} has {X.shape[-1] if X.ndim else 0} features, but the model expects "
                f"{self.n_features}"
            )
        X = sp.csr_matrix(X, dtype=np.float64)
        return normalize_rows(X) if self.preprocessing["normalize"] == "l2" else X

    def decision_function(self, X, preprocessed=False):
        """w·x + b for every row x of ``preprocess(X)`` (X scipy.sparse or dense,
        n_features columns, rows as the input file holds them; with
        ``preprocessed``, X is taken as given): (m,), or (m, K) one-versus-rest."""
        if not preprocessed:
            X = self.preprocess(X)
        elif X.ndim != 2 or X.shape[1] != self.n_features:
            raise MpisgdError(
                f"X has {X.shape[-1] if X.ndim else 0} features, but the model expects "
                f"{self.n_features}"
            )
        return np.asarray(X @ self.coef.T, dtype=np.float64) + self.intercept

    def predict(self, X, preprocessed=False):
        """Classifiers: the label of sign(w·x + b) (meta["classes"] = [label of −1,
        label of +1] when present, else ±1; 0 goes to −1), or of the largest
        w_c·x + b_c one-versus-rest. Regressors: w·x + b. X and
        ``preprocessed`` as in ``decision_function``."""
        return self.labels_of(self.decision_function(X, preprocessed))

    def labels_of(self, p):
        """The predicted labels of scores ``p`` (``decision_function``'s)."""
        if not self.is_classifier:
            return p
        classes = self.meta.get("classes")
        if self.one_vs_rest:
            return np.asarray(classes)[np.argmax(p, axis=1)]
        if classes is None:
            return np.where(p > 0, 1.0, -1.0)
        return np.asarray(classes)[(p > 0).astype(np.intp)]

    def targets(self, labels, where="labels"):
        """Labels as the learner saw them: ±1 for a binary classifier (through
        meta["classes"] when present), a (m, K) ±1 matrix one-versus-rest, the
        values for a regressor. A label the model does not know is an error
        naming ``where``."""
        labels = np.asarray(labels)
        if not self.is_classifier:
            return np.asarray(labels, np.float64)
        classes = self.meta.get("classes") or [-1.0, 1.0]
        known = np.isin(labels, np.asarray(classes))
        if not known.all():
            shown = np.unique(labels[~known]).tolist()[:10]
            raise MpisgdError(f"{where}: labels {shown} are not among the model's classes {classes}")
        if self.one_vs_rest:
            return np.where(labels[:, None] == np.asarray(classes)[None, :], 1.0, -1.0)
        return np.where(labels == classes[1], 1.0, -1.0)

    def evaluate(self, X, labels, where="data", preprocessed=False):
        """Score rows (as in ``decision_function``) against their labels:
        {"examples", "loss": mean ℓ (one-versus-rest: Σ over the K binary
        problems), "error": error rate (classifiers; one-versus-rest: argmax ≠
        label), "cost": loss + λ/2 ‖w‖² (+ λ/2 b² with regularize_bias) when λ is known}."""
        from mpisgd.kernels.losses import DEFAULT_PARAM

        y = self.targets(labels, where)
        param = float(self.meta.get("loss_param") or DEFAULT_PARAM.get(self.loss, 0.0))
        p = self.decision_function(X, preprocessed)
        m = max(p.shape[0], 1)
        total, n_err = loss_error_sums(LOSSES[self.loss], p.ravel(), y.ravel(), param)
        out = {"examples": int(p.shape[0]), "loss": total / m}
        if self.one_vs_rest:
            n_err = int(np.sum(np.argmax(p, axis=1) != np.argmax(y, axis=1)))
        if self.is_classifier:
            out["error"] = n_err / m
        lam = self.meta.get("lambda", self.meta.get("lam"))
        if lam is not None:
            reg = float(np.sum(self.coef * self.coef))
            if self.meta.get("regularize_bias"):
                reg += float(np.sum(np.square(self.intercept)))
            out["cost"] = out["loss"] + 0.5 * float(lam) * reg
        return out

    def save(self, path):
        """Write the model to ``path`` (HDF5) atomically: temp file, then rename."""
        import h5py

        path = os.fspath(path)
        try:
            meta_json = json.dumps(self.meta, sort_keys=True)
            preprocessing_json = json.dumps(self.preprocessing, sort_keys=True)
        except TypeError as exc:
            raise MpisgdError(f"{path}: model meta is not JSON-serializable: {exc}") from None
        with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["loss"] = self.loss
            f.attrs["intercept"] = self.intercept
            f.attrs["n_features"] = self.n_features
            f.attrs["preprocessing"] = preprocessing_json
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
                why = (" (version 1 does not record how the training rows were preprocessed: "
                       "train the model again)" if version == 1 else "")
                raise MpisgdError(
                    f"{path}: model format version {version} is not supported "
                    f"(this mpisgd reads version {FORMAT_VERSION}){why}"
                )
            try:
                coef = f["coef"][...]
                intercept = f.attrs["intercept"]
                loss_name = str(f.attrs["loss"])
                n_features = int(f.attrs["n_features"])
                preprocessing = json.loads(f.attrs["preprocessing"])
                meta = json.loads(f.attrs["meta_json"])
            except (KeyError, ValueError) as exc:
                raise MpisgdError(f"{path}: damaged model file ({exc})") from None
        if coef.ndim not in (1, 2) or coef.shape[-1] != n_features:
            raise MpisgdError(
                f"{path}: coef has shape {coef.shape} but n_features is {n_features}"
            )
        try:
            return cls(coef, intercept, loss_name, meta, preprocessing)
        except MpisgdError as exc:
            raise MpisgdError(f"{path}: {exc}") from None


def load_model(path):
    """The model saved at ``path`` by ``mpisgd fit``, ``mpisgd train`` or
    ``LinearModel.save``. Its ``predict``/``decision_function`` take rows as the
    input file holds them and apply the recorded preprocessing (L2
    normalization) themselves: ``load_model(p).predict(X_test)``."""
    return LinearModel.load(path)
