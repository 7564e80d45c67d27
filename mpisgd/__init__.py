"""mpisgd: communication-efficient distributed online learning of sparse
linear models (sparse SGD/ASGD/CASGD kernels, dynamic model
synchronization over MPI, and an in-process simulator of many learners)."""

__version__ = "0.1.0"

# Lazy exports: ``import mpisgd`` stays light (no numba, no scikit-learn).
_LAZY = {
    "SGDClassifier": "mpisgd.estimator",
    "SGDRegressor": "mpisgd.estimator",
    "LinearModel": "mpisgd.model",
    "load_model": "mpisgd.model",
    "OnlineKMeans": "mpisgd.kmeans",
}
__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'mpisgd' has no attribute {name!r}")
