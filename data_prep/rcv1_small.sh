#!/usr/bin/env bash
# The real RCV1-v2 sample shipped with Vowpal Wabbit (CCAT vs rest): 1,000 train / 500 test
# rows, 47,236 TF-IDF features (rows already L2-normalized), labels ±1. Read from the
# original VW files (one namespace, numeric features); the LIBSVM copies next to them
# convert to the same shards. Smoke tests and examples only: too small for benchmarks.
source "$(dirname "$0")/_common.sh"
D="$DATA/rcv1_ccat_subset"
need "$D/rcv1_small.vw.bz2"; need "$D/rcv1_small_test.vw.bz2"
$MPISGD prep "$D/rcv1_small.vw.bz2" --out "$OUT/rcv1_small/train" --name rcv1_small \
    --split-name train --overwrite --shards "$SHARDS" --n-features 47236 --zero-based false "$@"
$MPISGD prep "$D/rcv1_small_test.vw.bz2" --out "$OUT/rcv1_small/test" --name rcv1_small \
    --split-name test --overwrite --shards 1 --n-features 47236 --zero-based false "$@"
