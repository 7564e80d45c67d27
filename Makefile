# The two commands of the README:
#   make demo   runs the main job on built-in data
#   make test   runs the whole test suite (serial, then under mpiexec at 2 and 3 ranks,
#               and the default mode's invariants at 11)
# Both create or refresh the virtual environment .venv from pyproject.toml.

PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
MPIEXEC := $(VENV)/bin/mpiexec
STAMP   := $(VENV)/.installed
# pytest exits 5 when it collects nothing; that is not a failure of a partial run.
PYTEST_OK := || [ $$? -eq 5 ]
# -ra: the reason of every skip (and failure) in the summary.
PYTEST  := $(PY) -m pytest -q -ra
# Under mpiexec (the tests marked mpi only): a failure on one rank fails the test on
# every rank (tests/conftest.py), and the first failure ends the run (-x); a test
# still running after MPI_TEST_TIMEOUT s ends its rank, and so the job (pytest-timeout's
# thread method); a job still running after MPI_JOB_TIMEOUT s is killed.
MPI_TEST_TIMEOUT ?= 300
MPI_JOB_TIMEOUT  ?= 1800
mpi_pytest = timeout -k 10 $(MPI_JOB_TIMEOUT) $(MPIEXEC) -n $(1) $(PYTEST) $(2) -x --only-mpi -m mpi \
	-p no:cacheprovider --timeout $(MPI_TEST_TIMEOUT) --timeout-method thread $(PYTEST_OK)

.PHONY: venv demo test test-serial test-mpi test-properties test-slurm bench reproduce clean venv-mpi bench-network

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

# SERIAL_ARGS: more pytest arguments (.ci/run: --ignore=tests/test_properties.py).
SERIAL_ARGS ?=
test-serial: $(STAMP)
	$(PYTEST) $(SERIAL_ARGS)

test-mpi: $(STAMP)
	$(call mpi_pytest,2)
	$(call mpi_pytest,3)
	$(call mpi_pytest,11,tests/test_async.py)  # relayed results and commands (wire.RELAY_ABOVE + 3 ranks)

# The property tests alone at CI's budget, 10,000 hypothesis cases per decoder (the "ci"
# profile of tests/conftest.py; `make test` runs them at the environment's: "dev", 1,000,
# unless CI=true). .ci/run runs this beside `make test`, whose serial part then leaves them out.
test-properties: $(STAMP)
	HYPOTHESIS_PROFILE=ci $(PYTEST) -p no:cacheprovider --durations=0 tests/test_properties.py

# The SLURM tests alone (a one-node cluster of their own; most of their minutes are spent
# waiting for a job's time limit, so .ci/run runs this beside `make test`, whose serial
# part then leaves them out).
test-slurm: $(STAMP)
	$(PYTEST) -p no:cacheprovider --durations=5 tests/test_slurm.py

# Full-size benchmarks (tens of minutes; what each measures: bench/README.md; results: docs/RESULTS.md).
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
	NUMBA_NUM_THREADS=1 $(PY) bench/reproduce/reproduce.py --out runs/reproduce --jobs 2

# Debian's Open MPI and .venv-mpi with mpi4py built against it: the README's
# "Using a cluster's MPI" lines, as CI runs them (root; a few minutes the first time).
venv-mpi:
	bash .ci/system_mpi.sh

# Allreduce and ping-pong over two network namespaces, static vs dynamic across them
# (root, after venv-mpi; a few minutes).
bench-network: $(STAMP) venv-mpi
	NUMBA_NUM_THREADS=1 $(PY) bench/bench_network.py
