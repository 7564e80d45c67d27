# Sourced by every job script in jobs/ (see docs/CLUSTER.md). Not a job itself.
#
# In:  MPISGD_ROOT (the checkout, found by the job script), the SLURM_*
#      variables of the allocation (or of jobs/local.sh), and the optional
#      MPISGD_VENV, MPISGD_RUNS, MPISGD_LAUNCHER, MPISGD_MPIEXEC,
#      MPISGD_SRUN_MPI, MPISGD_WARM.
# Out: PY, NTASKS, JOB_TAG, OUT (created) and the functions mpisgd_launch,
#      mpisgd_command, mpisgd_train_requeueable, mpisgd_warm, default_data.

set -euo pipefail

die() { echo "${SLURM_JOB_NAME:-$(basename "$0")}: error: $*" >&2; exit 2; }

MPISGD_ROOT=$(cd "$MPISGD_ROOT" && pwd)
MPISGD_VENV=${MPISGD_VENV:-$MPISGD_ROOT/.venv}
PY=$MPISGD_VENV/bin/python
[ -x "$PY" ] || die "no Python at $PY: run 'make venv' in $MPISGD_ROOT, or set MPISGD_VENV"

# One numba (and BLAS) thread per rank: the ranks are the parallelism.
export NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1

# The tasks of this allocation: SLURM_TASKS_PER_NODE (such as "4(x2),3") is
# set afresh at every start of the job, while SLURM_NTASKS keeps the count
# given at submission across a requeue (a job requeued onto fewer tasks, or
# submitted with --nodes=MIN-MAX --ntasks-per-node=C, gets what is free).
tasks_of() {
    local total=0 part n x parts
    IFS=, read -ra parts <<<"$1"
    for part in "${parts[@]}"; do
        n=${part%%(*} x=1
        [[ $part == *"(x"* ]] && { x=${part#*(x}; x=${x%)}; }
        total=$((total + n * x))
    done
    echo "$total"
}
if [ -n "${SLURM_TASKS_PER_NODE:-}" ]; then
    NTASKS=$(tasks_of "$SLURM_TASKS_PER_NODE")
else
    NTASKS=${SLURM_NTASKS:-1}
fi
if [ -n "${SLURM_ARRAY_JOB_ID:-}" ]; then
    JOB_TAG=${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}
else
    JOB_TAG=${SLURM_JOB_ID:?not inside a SLURM job: submit with sbatch, or run jobs/local.sh}
fi
OUT=${MPISGD_RUNS:-$MPISGD_ROOT/runs}/$JOB_TAG
# Fail here, before any rank starts, if the output directory cannot be written.
mkdir -p "$OUT" || die "cannot create the output directory $OUT"
probe=$(mktemp "$OUT/.write-test.XXXXXX" 2>/dev/null) || die "cannot write in the output directory $OUT"
rm -f "$probe"
# A job that ends without writing anything there leaves no empty directory behind.
trap 'rmdir "$OUT" 2>/dev/null || true' EXIT

# mpisgd_launch ARGS...: `mpisgd ARGS` on all NTASKS tasks of the allocation.
# MPISGD_LAUNCHER=mpiexec (default): the MPI's own launcher; the venv's MPICH
#   (hydra) starts its proxies through srun when it finds itself in a SLURM job.
# MPISGD_LAUNCHER=srun: srun --mpi=$MPISGD_SRUN_MPI (default pmi2; pmix for a
#   cluster MPI built with PMIx), for an mpi4py built against the cluster's MPI.
mpisgd_launch() {
    mpisgd_command "$@"
    "${CMD[@]}"
}

# mpisgd_command ARGS...: sets CMD to the command line of mpisgd_launch, and prints it.
mpisgd_command() {
    local launcher
    case "${MPISGD_LAUNCHER:-mpiexec}" in
        mpiexec) launcher=("${MPISGD_MPIEXEC:-$MPISGD_VENV/bin/mpiexec}" -n "$NTASKS") ;;
        srun) launcher=(srun --mpi="${MPISGD_SRUN_MPI:-pmi2}" --ntasks="$NTASKS") ;;
        *) die "MPISGD_LAUNCHER must be mpiexec or srun, not '$MPISGD_LAUNCHER'" ;;
    esac
    # `python -m mpi4py` turns an uncaught exception on any rank into MPI_Abort.
    CMD=("${launcher[@]}" "$PY" -m mpi4py -m mpisgd "$@")
    echo "+ ${CMD[*]}"
}

# mpisgd_train_requeueable ARGS...: `mpisgd train ARGS` that survives a time
# limit (docs/CLUSTER.md, "Time limits"). With `#SBATCH --signal=B:TERM@60`
# SLURM sends SIGTERM to this shell 60 s before the limit; it passes the signal
# to the launcher, which passes it to every rank; mpisgd checkpoints at its
# next poll and exits with 75. The job then requeues itself (`#SBATCH
# --requeue`), and the requeued job, finding a complete checkpoint in OUT,
# resumes from it (--resume OUT: the newest intact one), on the tasks it
# gets, as many as before or not (an elastic resume). A run that lost a rank
# or a node (mpiexec's exit code neither 0, 1 nor 2: 1 and 2 are mpisgd's
# errors, which a requeue would repeat) requeues the same way once it has a
# checkpoint, at most MAX_REQUEUES times (default 3, counted by SLURM's
# SLURM_RESTART_COUNT); a node failure that ends the whole job SLURM requeues
# itself (`--requeue`).
mpisgd_train_requeueable() {
    local resume=() pid rc=0 why=
    # The watchdog ends a stuck job within the 60 s lead of the time-limit signal.
    set -- --stop-grace "${STOP_GRACE:-45}" "$@"
    if compgen -G "$OUT/checkpoints/round-*/COMPLETE" >/dev/null; then
        resume=(--resume "$OUT")
        echo "mpisgd job $JOB_TAG: resuming from the checkpoints in $OUT/checkpoints"
    fi
    mpisgd_command train "$@" "${resume[@]}"
    "${CMD[@]}" &
    pid=$!
    trap 'echo "mpisgd job $JOB_TAG: SIGTERM, passed on to the ranks"; kill -TERM "$pid" 2>/dev/null || true' TERM
    # `wait` returns early (status > 128) when the trap runs: wait again until the launcher is gone.
    while :; do
        rc=0
        wait "$pid" || rc=$?
        kill -0 "$pid" 2>/dev/null || break
    done
    trap - TERM
    if [ "$rc" = 75 ]; then
        why="stopped after a checkpoint"
    elif [ "$rc" != 0 ] && [ "$rc" != 1 ] && [ "$rc" != 2 ] \
            && compgen -G "$OUT/checkpoints/round-*/COMPLETE" >/dev/null; then
        if [ "${SLURM_RESTART_COUNT:-0}" -lt "${MAX_REQUEUES:-3}" ]; then
            why="a rank or node lost (exit code $rc)"
        else
            echo "mpisgd job $JOB_TAG: a rank or node lost (exit code $rc); not requeued: requeued" \
                 "${SLURM_RESTART_COUNT:-0} times already (MAX_REQUEUES=${MAX_REQUEUES:-3})"
        fi
    fi
    if [ -n "$why" ] && [[ ${SLURM_JOB_ID:-} =~ ^[0-9]+$ ]]; then
        echo "mpisgd job $JOB_TAG: $why; requeueing job $SLURM_JOB_ID to go on from its newest intact checkpoint"
        scontrol requeue "$SLURM_JOB_ID"
    fi
    return "$rc"
}

# default_data ARGS...: DATA=(--synthetic disjunction) unless ARGS name data
# (a SHARD file or --synthetic), then DATA=().
# shellcheck disable=SC2034  # DATA is for the job script that sources this file
default_data() {
    DATA=(--synthetic disjunction)
    local arg
    for arg in "$@"; do
        case "$arg" in --synthetic|--synthetic=*|*.h5|*.hdf5) DATA=() ;; esac
    done
}

# mpisgd_warm: fill numba's on-disk cache with one tiny serial run, so that
# the ranks load the compiled kernels instead of all compiling (and writing)
# them at once. MPISGD_WARM=0 skips it.
mpisgd_warm() {
    [ "${MPISGD_WARM:-1}" = 0 ] && return 0
    local dir
    dir=$(mktemp -d "$OUT/.warm.XXXXXX")
    echo "+ warm-up: numba cache"
    "$PY" -m mpisgd train --synthetic disjunction --rounds 64 --quiet --out "$dir" >/dev/null
    rm -rf "$dir"
}

echo "mpisgd job $JOB_TAG: $NTASKS task(s) on ${SLURM_JOB_NODELIST:-$(hostname)}, output $OUT"
echo "mpisgd job $JOB_TAG: $("$PY" -m mpisgd --version), launcher ${MPISGD_LAUNCHER:-mpiexec}, started $(date -u +%FT%TZ)"
