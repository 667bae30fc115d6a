#!/usr/bin/env bash
# Makes .venv-tf: a separate interpreter with TensorFlow Text for the TF Text figures of
# cpu_bench.py (TensorFlow is ~600 MB and pins its own numpy/protobuf, so it stays out of
# the project's .venv). cpu_bench.py finds it by itself. Run from anywhere:
#   bash benchmarks/setup_tf.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-tf
.venv-tf/bin/pip install -q tensorflow-text numpy pyarrow
.venv-tf/bin/python -c "import tensorflow_text as t; print('tensorflow-text', t.__version__)"
