#!/usr/bin/env bash
# The seeded RCV1-scale synthetic set (mpisgd.data.synthetic.rcv1_like, seed $SEED):
# 781,265 train / 23,149 test rows, 47,152 features, about 72 non-zeros per row,
# written as LIBSVM text and converted into SHARDS train shards and one test shard.
# Text: about 1.1 GB; shards: about 0.7 GB (float64). Takes a few minutes.
# N_TRAIN / N_TEST shrink it (for a quick try).
source "$(dirname "$0")/_common.sh"
SEED="${SEED:-0}"
mkdir -p "$OUT/rcv1_like"
PY="$(dirname "$(command -v "${MPISGD%% *}")")/python"
[ -x "$PY" ] || PY=python3
"$PY" - "$OUT/rcv1_like" "$SEED" "${N_TRAIN:-781265}" "${N_TEST:-23149}" <<'PYEOF'
import os, sys
from mpisgd.data.libsvm import write_svmlight
from mpisgd.data.synthetic import rcv1_like
out, seed, n_train, n_test = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
Xtr, ytr, Xte, yte = rcv1_like(n_train, n_test, 47152, seed=seed)
write_svmlight(os.path.join(out, "train.svm"), Xtr, ytr)
write_svmlight(os.path.join(out, "test.svm"), Xte, yte)
PYEOF
$MPISGD prep "$OUT/rcv1_like/train.svm" --out "$OUT/rcv1_like/train" --name rcv1_like \
    --split-name train --overwrite --shards "$SHARDS" --n-features 47152 --zero-based false "$@"
$MPISGD prep "$OUT/rcv1_like/test.svm" --out "$OUT/rcv1_like/test" --name rcv1_like \
    --split-name test --overwrite --shards 1 --n-features 47152 --zero-based false "$@"
