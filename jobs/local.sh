#!/bin/bash
# Run a job script of jobs/ here, without SLURM: the same script, the same
# output layout, launched with the venv's mpiexec.
#
#   jobs/local.sh [-n NTASKS] [-a ARRAY] JOB.sbatch [ARGS...]
#
# NTASKS and ARRAY (e.g. 0-5, 0,2,4, 0-10:2; a %limit suffix is ignored)
# default to the script's own `#SBATCH --ntasks=` and `#SBATCH --array=`
# lines. Array tasks run one after another; the exit code is the highest of
# theirs, as with `sbatch --wait`. Sets SLURM_JOB_ID (local-<time>-<pid>),
# SLURM_NTASKS, SLURM_SUBMIT_DIR, SLURM_JOB_NAME and, for an array,
# SLURM_ARRAY_JOB_ID, SLURM_ARRAY_TASK_ID/MIN/MAX/COUNT; outputs go to
# runs/<that id> as in a real job. Environment variables reach the job as
# with sbatch (e.g. `PROTOCOL=static jobs/local.sh jobs/train.sbatch`).
set -euo pipefail

usage() { sed -n '5p' "$0" | sed 's/^# *//' >&2; exit 2; }

ntasks='' array=''
while getopts "n:a:h" opt; do
    case "$opt" in
        n) ntasks=$OPTARG ;;
        a) array=$OPTARG ;;
        *) usage ;;
    esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || usage
script=$1
shift
[ -f "$script" ] || { echo "local.sh: no job script $script" >&2; exit 2; }

# Defaults from the script's header, as sbatch reads them.
header() { sed -n "s/^#SBATCH --$1=\([^ ]*\).*/\1/p" "$script" | tail -n 1; }
ntasks=${ntasks:-$(header ntasks)}
ntasks=${ntasks:-1}
array=${array:-$(header array)}
name=$(header job-name)

SLURM_JOB_ID=local-$(date +%Y%m%d-%H%M%S)-$$
export SLURM_JOB_ID
export SLURM_NTASKS=$ntasks SLURM_NPROCS=$ntasks
export SLURM_SUBMIT_DIR=$PWD SLURM_JOB_NAME=${name:-$(basename "$script")}
export MPISGD_ROOT=${MPISGD_ROOT:-$(cd "$(dirname "$0")/.." && pwd)}
# No scheduler here: hydra (mpiexec) starts the ranks as local processes.
export HYDRA_LAUNCHER=fork HYDRA_RMK=user MPISGD_LAUNCHER=mpiexec

if [ -z "$array" ]; then
    exec bash "$script" "$@"
fi

# Expand an array spec into task ids.
tasks=()
IFS=, read -r -a parts <<< "${array%%%*}"
for part in "${parts[@]}"; do
    if [[ $part =~ ^([0-9]+)-([0-9]+)(:([0-9]+))?$ ]]; then
        for ((i = BASH_REMATCH[1]; i <= BASH_REMATCH[2]; i += ${BASH_REMATCH[4]:-1})); do tasks+=("$i"); done
    elif [[ $part =~ ^[0-9]+$ ]]; then
        tasks+=("$part")
    else
        echo "local.sh: cannot read the array spec '$array'" >&2
        exit 2
    fi
done
sorted=$(printf '%s\n' "${tasks[@]}" | sort -n)
export SLURM_ARRAY_JOB_ID=$SLURM_JOB_ID SLURM_ARRAY_TASK_COUNT=${#tasks[@]}
SLURM_ARRAY_TASK_MIN=$(head -n 1 <<< "$sorted")
SLURM_ARRAY_TASK_MAX=$(tail -n 1 <<< "$sorted")
export SLURM_ARRAY_TASK_MIN SLURM_ARRAY_TASK_MAX
worst=0
for task in "${tasks[@]}"; do
    echo "local.sh: array task $task of ${SLURM_ARRAY_JOB_ID}"
    rc=0
    SLURM_ARRAY_TASK_ID=$task bash "$script" "$@" || rc=$?
    [ "$rc" -gt "$worst" ] && worst=$rc
done
exit "$worst"
