# The two commands of the README:
#   make demo   runs the main job on built-in data
#   make test   runs the whole test suite (serial, then under mpiexec at 2 and 3 ranks)
# Both create or refresh the virtual environment .venv from pyproject.toml.

PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
MPIEXEC := $(VENV)/bin/mpiexec
STAMP   := $(VENV)/.installed
# pytest exits 5 when it collects nothing; that is not a failure of a partial run.
PYTEST_OK := || [ $$? -eq 5 ]

.PHONY: venv demo test test-serial test-mpi bench reproduce clean venv-mpi bench-network

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,plot]'
	touch $@

demo: $(STAMP)
	$(PY) -m mpisgd demo

# The serial run also fills numba's cache, so the MPI ranks never race to compile.
test: test-serial test-mpi

test-serial: $(STAMP)
	$(PY) -m pytest -q

test-mpi: $(STAMP)
	$(MPIEXEC) -n 2 $(PY) -m pytest -q --only-mpi -p no:cacheprovider $(PYTEST_OK)
	$(MPIEXEC) -n 3 $(PY) -m pytest -q --only-mpi -p no:cacheprovider $(PYTEST_OK)

# Full-size benchmarks (tens of minutes; results and how to read them in bench/README.md).
bench: $(STAMP)
	NUMBA_NUM_THREADS=1 $(PY) bench/bench_kernels.py
	NUMBA_NUM_THREADS=1 $(PY) bench/bench_data.py
	NUMBA_NUM_THREADS=1 $(PY) bench/bench_mpi.py

clean:
	rm -rf $(VENV) runs build *.egg-info
	find . -name __pycache__ -prune -exec rm -rf {} +

# Kamp et al. 2014 and beyond, through the simulator (docs/REPRODUCTION.md):
# results, tables and figures under runs/reproduce.
reproduce: $(STAMP)
	NUMBA_NUM_THREADS=1 $(PY) bench/reproduce.py --out runs/reproduce --jobs 2

# Debian's Open MPI and .venv-mpi with mpi4py built against it: the README's
# "Using a cluster's MPI" lines, as CI runs them (root; a few minutes the first time).
venv-mpi:
	bash .ci/system_mpi.sh

# Allreduce and ping-pong over two network namespaces, static vs dynamic across them
# (root, after venv-mpi; a few minutes).
bench-network: $(STAMP) venv-mpi
	NUMBA_NUM_THREADS=1 $(PY) bench/bench_network.py
