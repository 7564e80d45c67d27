#!/usr/bin/env bash
# Packaging check: `pip install .` into a fresh virtual environment, without
# extras, gives a working package: the estimator imports and fits, and the
# CLI runs `fit` and `eval`. Usage: .ci/install_check.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --upgrade pip
"$tmp/venv/bin/python" -m pip install -q .
cd "$tmp"  # away from the source tree: the installed package, not ./mpisgd
NUMBA_NUM_THREADS=1 "$tmp/venv/bin/python" - <<'PY'
import numpy as np
from mpisgd import SGDClassifier
X = np.array([[0.0, 1.0], [1.0, 0.0]] * 20)
y = np.array([0, 1] * 20)
assert (SGDClassifier(random_state=0).fit(X, y).predict(X) == y).all()
PY
printf '1 1:1\n-1 2:1\n1 1:0.5\n-1 2:2\n' > tiny.svm
NUMBA_NUM_THREADS=1 "$tmp/venv/bin/mpisgd" fit tiny.svm -o tiny.h5 --epochs 2 >/dev/null
NUMBA_NUM_THREADS=1 "$tmp/venv/bin/mpisgd" eval tiny.h5 tiny.svm | grep -q "error="
echo ".ci/install_check.sh: pip install . (no extras) gives a working SGDClassifier and mpisgd fit/eval"
