#!/usr/bin/env bash
# Create the separate venv in which ORT's training build generates the ONNX
# reference fixtures of tests/data/onnx/ (see tests/data/onnx/README.md).
#
#   scripts/ort_fixtures/setup_venv.sh [VENV_DIR]     (default: venv-ort beside the repository)
#
# onnxruntime-training-cpu 1.19.2 needs numpy<2 and Python 3.11 wheels, which is
# why it is not installed into the project's own venv.  torch is not installed:
# generate.py registers an empty `onnxruntime.training.optim` module before
# importing onnxruntime.training, which is all `artifacts` and the training api
# need.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/../.." && pwd)"
VENV="${1:-$REPO/../venv-ort}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet \
    "onnxruntime-training-cpu==1.19.2" "numpy<2" "onnx==1.16.2"
"$VENV/bin/python" - <<'PY'
import numpy, onnx, onnxruntime
print("numpy", numpy.__version__, "onnx", onnx.__version__,
      "onnxruntime", onnxruntime.__version__)
PY
