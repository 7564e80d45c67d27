"""mpisgd: communication-efficient distributed online learning of sparse
linear models (sparse SGD/ASGD/CASGD kernels, dynamic model
synchronization over MPI, and an in-process simulator of many learners)."""

__version__ = "0.1.0"
