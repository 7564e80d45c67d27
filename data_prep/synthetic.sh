#!/usr/bin/env bash
# The synthetic streams of docs/ALGORITHMS.md §4 as one shard per learner (row t = round t):
#   disjunction: n = 100, k = 512 learners, T = 25,000 rounds, drift probability 0.0002
#   neuralnet:   n = 150, k = 1024 learners, T = 2,500 rounds (dense ±1 rows: 3.1 GB at float32)
# The simulator and the MPI runner can also generate these streams in memory (same rows,
# no files): use the shards only to run from disk. Set K/T/SEED to shrink or vary them.
source "$(dirname "$0")/_common.sh"
SEED="${SEED:-0}"
$MPISGD prep --synthetic disjunction --features 100 --learners "${K:-512}" \
    --rounds "${T:-25000}" --seed "$SEED" --out "$OUT/disjunction-s$SEED" --overwrite "$@"
$MPISGD prep --synthetic neuralnet --features 150 --learners "${K_NN:-1024}" \
    --rounds "${T_NN:-2500}" --seed "$SEED" --dtype float32 --out "$OUT/neuralnet-s$SEED" --overwrite "$@"
