# Shared settings of the recipes (sourced, not run).
#   MPISGD   the command (default: the repo's .venv, else `mpisgd` on PATH);
#            for a parallel conversion: MPISGD="mpiexec -n 4 python -m mpi4py -m mpisgd"
#   DATA     the raw data (default: ../shared/data next to the repo)
#   OUT      where shards go (default: runs/data in the repo)
#   SHARDS   number of training shards (default 4: one per learner/rank)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${MPISGD:-}" ]; then
    if [ -x "$ROOT/.venv/bin/mpisgd" ]; then MPISGD="$ROOT/.venv/bin/mpisgd"; else MPISGD=mpisgd; fi
fi
DATA="${DATA:-$ROOT/../shared/data}"
OUT="${OUT:-$ROOT/runs/data}"
SHARDS="${SHARDS:-4}"
need() { [ -f "$1" ] || { echo "recipe: missing input $1 (see ../shared/data/README.md)" >&2; exit 1; }; }
