"""numba kernels: no MPI, no I/O, no Python objects, nothing allocated per step."""
