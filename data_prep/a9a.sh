#!/usr/bin/env bash
# a9a (UCI Adult, LIBSVM binarised): 32,561 train / 16,281 test rows, 123 binary features,
# labels ±1. a9a.t never uses feature 123, so n_features is fixed at 123 for both splits.
# Output: $OUT/a9a/a9a-train-0000k.h5 (SHARDS shards, round-robin) and a9a-test-00000.h5.
source "$(dirname "$0")/_common.sh"
need "$DATA/a9a/a9a.bz2"; need "$DATA/a9a/a9a.t.bz2"
$MPISGD prep "$DATA/a9a/a9a.bz2" --out "$OUT/a9a" --name a9a --split-name train \
    --shards "$SHARDS" --n-features 123 --zero-based false "$@"
$MPISGD prep "$DATA/a9a/a9a.t.bz2" --out "$OUT/a9a" --name a9a --split-name test \
    --shards 1 --n-features 123 --zero-based false "$@"
