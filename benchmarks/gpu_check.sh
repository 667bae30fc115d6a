#!/usr/bin/env bash
# GPU check on a device machine: build and install daskwp, run the GPU tests, print the
# throughput / parity table (benchmarks/gpu_check.py). Meant to finish in under 6 minutes.
#
# Usage (from anywhere):  bash benchmarks/gpu_check.sh [DATA_DIR]
#   DATA_DIR   folder with corpus/ and vocab/ laid out as shared/data (default: .gpudata in
#              the repository, then $DASKWP_SHARED_DATA, then ../shared/data).
# Offline: build requirements and test tools missing from the machine are installed from
# the wheels in .whl/ (fetch them first: benchmarks/fetch_gpu_wheels.sh). Nothing is
# downloaded. Results also go to $OUT/gpu_check.json and $OUT/gpu_check.log when $OUT is set.
# Environment: GPU_CHECK_FAST=1 shrinks the large benchmark inputs; GPU_CHECK_CPU_ONLY=1
# is a dry run of everything but the GPU (the GPU tests then skip).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
START=$SECONDS
OUT_DIR="${OUT:-$REPO/.gpucheck-out}"
mkdir -p "$OUT_DIR"
exec > >(tee "$OUT_DIR/gpu_check.log") 2>&1

say() { printf '\n=== [%3ds] %s\n' "$((SECONDS - START))" "$*"; }

# ---- data -----------------------------------------------------------------------------
DATA="${1:-}"
for cand in "$DATA" "$REPO/.gpudata" "${DASKWP_SHARED_DATA:-}" "$REPO/../shared/data"; do
  if [[ -n "$cand" && -d "$cand/corpus" && -d "$cand/vocab" ]]; then DATA="$(cd "$cand" && pwd)"; break; fi
done
if [[ -z "$DATA" || ! -d "$DATA/corpus" ]]; then
  echo "gpu_check: no data folder with corpus/ and vocab/ (give one as the first argument)" >&2
  exit 2
fi
export DASKWP_SHARED_DATA="$DATA"
say "data: $DATA ($(find "$DATA/corpus" -type f | wc -l) corpus files)"

# ---- python environment ---------------------------------------------------------------
# The machine is a throwaway: missing packages go into the current Python environment
# (PEP 668 "externally managed" markers are overridden), never fetched from a network.
PY="${PYTHON:-python3}"
export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$PY" - <<'EOF'
import sys, platform
print("python", sys.version.split()[0], platform.machine())
for m in ("numpy", "pyarrow", "pandas", "cupy", "torch", "tokenizers"):
    try:
        mod = __import__(m)
        print(f"  {m:10s} {getattr(mod, '__version__', '?')}")
    except Exception as e:
        print(f"  {m:10s} MISSING ({type(e).__name__})")
EOF
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "(no nvcc: fine, NVRTC is used)"

say "offline wheels"
# module:package pairs; a package is installed from .whl/ only when its module is missing.
NEED=()
for pair in scikit_build_core:scikit-build-core nanobind:nanobind pathspec:pathspec \
            packaging:packaging dask:dask yaml:pyyaml toolz:toolz cloudpickle:cloudpickle \
            fsspec:fsspec partd:partd locket:locket click:click pytest:pytest pluggy:pluggy \
            iniconfig:iniconfig pygments:pygments; do
  mod="${pair%%:*}"; pkg="${pair##*:}"
  "$PY" -c "import $mod" >/dev/null 2>&1 || NEED+=("$pkg")
done
"$PY" -c "import sys; sys.exit(sys.version_info < (3, 12))" || {
  "$PY" -c "import importlib_metadata" >/dev/null 2>&1 || NEED+=(importlib_metadata zipp); }
"$PY" -c "import sys; sys.exit(sys.version_info < (3, 11))" || {
  "$PY" -c "import tomli" >/dev/null 2>&1 || NEED+=(tomli exceptiongroup typing_extensions); }
cmake_ok=0
if command -v cmake >/dev/null; then
  "$PY" - "$(cmake --version | head -1 | awk '{print $3}')" <<'EOF' && cmake_ok=1 || true
import sys
v = tuple(int(x) for x in sys.argv[1].split(".")[:2] if x.isdigit())
sys.exit(0 if v >= (3, 18) else 1)
EOF
fi
[[ $cmake_ok == 1 ]] || NEED+=(cmake)
command -v ninja >/dev/null || "$PY" -c "import ninja" >/dev/null 2>&1 || NEED+=(ninja)
if ((${#NEED[@]})); then
  echo "installing from .whl/: ${NEED[*]}"
  "$PY" -m pip install -q --no-index --find-links "$REPO/.whl" --no-deps "${NEED[@]}"
else
  echo "all build and test requirements present"
fi

say "build + install daskwp (editable, no build isolation)"
command -v c++ >/dev/null || command -v g++ >/dev/null || { echo "no C++ compiler" >&2; exit 3; }
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PY" -m pip install -q --no-index --no-deps \
  --no-build-isolation -e "$REPO"
"$PY" -c "import daskwp, daskwp._ext; print('daskwp', daskwp.__version__, 'extension', daskwp._ext.__file__)"

say "NVRTC compile check + GPU tests"
"$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py -k "(nvrtc and compute_90) or digest or include or implementation" -rs
"$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py -m gpu -rs \
  --junitxml="$OUT_DIR/gpu_tests.xml"

say "benchmark table"
BENCH_ARGS=(--data "$DATA" --json "$OUT_DIR/gpu_check.json")
if [[ "${GPU_CHECK_FAST:-0}" == 1 ]]; then BENCH_ARGS+=(--big-mb 64 --huge-doc-mb 16 --repeat 2); fi
# Dry run without a GPU (checks everything else): GPU_CHECK_CPU_ONLY=1
if [[ "${GPU_CHECK_CPU_ONLY:-0}" == 1 ]]; then BENCH_ARGS+=(--cpu-only); fi
"$PY" benchmarks/gpu_check.py "${BENCH_ARGS[@]}"

say "done"
