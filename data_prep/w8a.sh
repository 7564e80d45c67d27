#!/usr/bin/env bash
# w8a (Platt's web data): 49,749 train / 14,951 test rows, 300 binary features, labels ±1
# (3 % positive; about 8 % of rows have no features, which is valid).
# Output: $OUT/w8a/train/w8a-train-0000k.h5 (SHARDS shards) and $OUT/w8a/test/w8a-test-00000.h5.
source "$(dirname "$0")/_common.sh"
need "$DATA/w8a/w8a.bz2"; need "$DATA/w8a/w8a.t.bz2"
$MPISGD prep "$DATA/w8a/w8a.bz2" --out "$OUT/w8a/train" --name w8a --split-name train --overwrite \
    --shards "$SHARDS" --n-features 300 --zero-based false "$@"
$MPISGD prep "$DATA/w8a/w8a.t.bz2" --out "$OUT/w8a/test" --name w8a --split-name test --overwrite \
    --shards 1 --n-features 300 --zero-based false "$@"
