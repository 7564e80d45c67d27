#!/usr/bin/env bash
# Runs the README's "Using a cluster's MPI" lines, verbatim: Debian's Open MPI,
# a second virtual environment .venv-mpi with mpi4py built from source against
# it (no mpich wheel), and a 2-rank `mpirun` of a short training job. CI runs
# this before `make test` (tests/test_system_mpi.py and tests/test_netns.py use
# .venv-mpi); `make venv-mpi` runs it by hand. Idempotent: a second run only
# checks and re-runs the short job.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive NUMBA_NUM_THREADS=1
# Open MPI refuses root unless told twice (CI runs as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The lines between the marker and the end of its code block.
block=$(awk '/<!-- cluster-mpi:/ {on=1; next} on && /^```sh/ {next} on && /^```/ {exit} on {print}' README.md)
if [ -z "$block" ]; then
    echo ".ci/system_mpi.sh: no cluster-mpi block in README.md" >&2
    exit 1
fi
rm -rf runs/cluster-mpi   # the block's --out, from an earlier run
start=$SECONDS
bash -euo pipefail -x -c "$block"
test -s runs/cluster-mpi/report.json
echo ".ci/system_mpi.sh: README's cluster-MPI lines passed in $((SECONDS - start)) s"
