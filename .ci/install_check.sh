#!/usr/bin/env bash
# Packaging check: `pip install .` into a fresh virtual environment, without
# extras, gives a working package: the estimator imports and fits, the CLI
# runs `fit`, `eval` and `predict`, and `mpisgd demo` (shortened) exits 0
# without matplotlib, saying how to get its figures. Usage: .ci/install_check.sh [PYTHON]
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
NUMBA_NUM_THREADS=1 "$tmp/venv/bin/mpisgd" predict tiny.h5 tiny.svm -o tiny.csv 2>/dev/null
[ "$(head -n 1 tiny.csv)" = "label,score" ] && [ "$(wc -l < tiny.csv)" = 5 ]
if "$tmp/venv/bin/python" -c "import matplotlib" 2>/dev/null; then
    echo ".ci/install_check.sh: matplotlib came with a plain pip install: the demo's no-figures path goes untested" >&2
    exit 1
fi
NUMBA_NUM_THREADS=1 "$tmp/venv/bin/mpisgd" demo --ranks 2 --rounds 300 --out demo --quiet > demo.txt
grep -q "figures skipped: matplotlib is not installed (pip install 'mpisgd\[plot\]'" demo.txt
echo ".ci/install_check.sh: pip install . (no extras) gives a working SGDClassifier, mpisgd fit/eval/predict and demo"
