#!/usr/bin/env bash
# a9a (UCI Adult, LIBSVM binarised): 32,561 train / 16,281 test rows, 123 binary features,
# labels ±1. a9a.t never uses feature 123, so n_features is fixed at 123 for both splits.
# Output: $OUT/a9a/train/a9a-train-0000k.h5 (SHARDS shards, round-robin) and
# $OUT/a9a/test/a9a-test-00000.h5; a second run replaces them (--overwrite).
source "$(dirname "$0")/_common.sh"
need "$DATA/a9a/a9a.bz2"; need "$DATA/a9a/a9a.t.bz2"
$MPISGD prep "$DATA/a9a/a9a.bz2" --out "$OUT/a9a/train" --name a9a --split-name train --overwrite \
    --shards "$SHARDS" --n-features 123 --zero-based false "$@"
$MPISGD prep "$DATA/a9a/a9a.t.bz2" --out "$OUT/a9a/test" --name a9a --split-name test --overwrite \
    --shards 1 --n-features 123 --zero-based false "$@"
