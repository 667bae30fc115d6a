#!/usr/bin/env bash
# The device check, as ONE command on a machine with a GPU (docs/gpu.md says what it should
# show): build and import daskwp, the GPU tests of the suite, then benchmarks/gpu_check.py
# (NVRTC compile time and kernel attributes; parity GPU == CPU on every corpus x vocabulary
# and option; throughput on device-resident text and end to end with a per-stage
# breakdown; CPU anchors on the same machine: daskwp, HF tokenizers, nanotoken; the
# distributed path on a dask_cuda.LocalCUDACluster over Parquet, read back and compared
# with the CPU job). Everything is offline: wheels from .whl/, data from .gpudata/.
#
# Prepare here:  bash benchmarks/fetch_gpu_wheels.sh        (.whl/ and .gpudata/)
# On the device: bash benchmarks/gpu_check.sh [DATA_DIR]    carry=[".gpudata", ".whl"]
#   DATA_DIR   folder with corpus/ and vocab/ (default: .gpudata, $DASKWP_SHARED_DATA,
#              ../shared/data, tests/data)
# Environment:
#   GPU_CHECK_FAST=1      smaller inputs: the whole check in under 6 minutes on an H200
#   GPU_CHECK_CPU_ONLY=1  dry run without a GPU: every step that needs no device; the device
#                         steps on the test suite's emulated CUDA backend (exit 0 when green)
#   GPU_CHECK_REBUILD=1   build daskwp even when it already imports from this checkout
#   GPU_CHECK_ARGS="..."  more arguments for gpu_check.py (e.g. "--skip cluster")
#   GPU_CHECK_PY_TIMEOUT  seconds gpu_check.py may run (default 300 with FAST, else 1800)
#   GPU_CHECK_TESTS       the test paths (space-separated) the gpu-marked tests are taken
#                         from (default tests: the whole suite; tests/test_gpu_check.py's dry
#                         run names two files, not to collect the suite for tests that skip)
#   OUT                   results folder (default .gpucheck-out): gpu_check.log,
#                         gpu_check.json, gpu_check.md, gpu_tests.xml
#   PYTHON                interpreter (default python3)
# Exit status: 0 when the tests pass and parity holds, 1 otherwise, 2/3 for setup errors.
# The last line is the summary:
#   gpu_check: parity ok|FAILED, GPU <x> GB/s, <y>x daskwp CPU (<n> cores)
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
START=$SECONDS
OUT_DIR="${OUT:-$REPO/.gpucheck-out}"
mkdir -p "$OUT_DIR"
exec > >(tee "$OUT_DIR/gpu_check.log") 2>&1
FAST="${GPU_CHECK_FAST:-0}"
CPU_ONLY="${GPU_CHECK_CPU_ONLY:-0}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpucheck.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

say() { printf '\n=== [%3ds] %s\n' "$((SECONDS - START))" "$*"; }

# ---- data -----------------------------------------------------------------------------
DATA="${1:-}"
for cand in "$DATA" "$REPO/.gpudata" "${DASKWP_SHARED_DATA:-}" "$REPO/../shared/data" \
            "$REPO/tests/data"; do
  if [[ -n "$cand" && -d "$cand/corpus" && -d "$cand/vocab" ]]; then DATA="$(cd "$cand" && pwd)"; break; fi
done
if [[ -z "$DATA" || ! -d "$DATA/corpus" ]]; then
  echo "gpu_check: no data folder with corpus/ and vocab/ (give one as the first argument)" >&2
  exit 2
fi
export DASKWP_SHARED_DATA="$DATA"
say "data: $DATA ($(find "$DATA/corpus" -type f | wc -l) corpus files); fast=$FAST cpu_only=$CPU_ONLY"

# ---- python environment ---------------------------------------------------------------
# The device machine is a throwaway: missing packages go into the current environment
# (PEP 668 markers overridden), only from .whl/, never from a network.
PY="${PYTHON:-python3}"
export PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$PY" - <<'EOF'
import sys, platform
print("python", sys.version.split()[0], platform.machine(), sys.executable)
for m in ("numpy", "pyarrow", "pandas", "cupy", "torch", "tokenizers", "dask",
          "distributed", "dask_cuda", "nanotoken"):
    try:
        mod = __import__(m)
        print(f"  {m:12s} {getattr(mod, '__version__', '?')}")
    except Exception as e:
        print(f"  {m:12s} MISSING ({type(e).__name__})")
EOF
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "(no nvcc: fine, NVRTC is used)"
echo "CPU: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GB", $2/1e6}' /proc/meminfo) RAM"

built=0
if [[ "${GPU_CHECK_REBUILD:-0}" != 1 ]] && "$PY" - "$REPO" <<'EOF' >/dev/null 2>&1
import sys, pathlib, daskwp, daskwp._ext
sys.exit(0 if pathlib.Path(daskwp.__file__).resolve().is_relative_to(pathlib.Path(sys.argv[1])) else 1)
EOF
then built=1; fi

say "offline wheels (.whl/)"
# module:package pairs; a package is installed only when its module does not import.
REQUIRED=(dask:dask distributed:distributed yaml:pyyaml toolz:toolz cloudpickle:cloudpickle
          fsspec:fsspec partd:partd locket:locket click:click packaging:packaging
          tornado:tornado zict:zict tblib:tblib sortedcontainers:sortedcontainers
          msgpack:msgpack psutil:psutil jinja2:jinja2 markupsafe:markupsafe urllib3:urllib3
          pytest:pytest pluggy:pluggy iniconfig:iniconfig pygments:pygments)
((built)) || REQUIRED+=(scikit_build_core:scikit-build-core nanobind:nanobind pathspec:pathspec)
OPTIONAL=(dask_cuda:dask-cuda pynvml:nvidia-ml-py nanotoken:nanotoken)
need=() optional=() unavailable=()
have_wheel() { ls "$REPO/.whl/" 2>/dev/null | grep -qi "^$(echo "$1" | tr '-' '_')-"; }
for pair in "${REQUIRED[@]}"; do
  "$PY" -c "import ${pair%%:*}" >/dev/null 2>&1 || need+=("${pair##*:}")
done
for pair in "${OPTIONAL[@]}"; do
  if ! "$PY" -c "import ${pair%%:*}" >/dev/null 2>&1; then
    if have_wheel "${pair##*:}"; then optional+=("${pair##*:}"); else unavailable+=("${pair##*:}"); fi
  fi
done
if ((!built)); then
  cmake_ok=0
  if command -v cmake >/dev/null; then
    v="$(cmake --version | head -1 | awk '{print $3}')"
    [[ "$(printf '%s\n3.18\n' "$v" | sort -V | head -1)" == 3.18 ]] && cmake_ok=1
  fi
  ((cmake_ok)) || "$PY" -c "import cmake" >/dev/null 2>&1 || need+=(cmake)
  command -v ninja >/dev/null || "$PY" -c "import ninja" >/dev/null 2>&1 || need+=(ninja)
fi
if [[ "$CPU_ONLY" == 1 ]]; then
  # The dry run installs nothing into this (shared, persistent) environment.
  ((${#need[@]})) && echo "dry run: not installing required ${need[*]} (the device would)"
  ((${#optional[@]})) && echo "dry run: not installing optional ${optional[*]} (the device would)"
  true
elif ((${#need[@]})); then
  echo "installing (required): ${need[*]}"
  "$PY" -m pip install -q --no-index --find-links "$REPO/.whl" --no-deps "${need[@]}" || {
    echo "gpu_check: required packages missing and not in .whl/: ${need[*]}" \
         "(run benchmarks/fetch_gpu_wheels.sh where there is a network)" >&2; exit 3; }
else
  echo "all required packages present"
fi
if [[ "$CPU_ONLY" != 1 ]] && ((${#optional[@]})); then
  echo "installing (optional): ${optional[*]}"
  "$PY" -m pip install -q --no-index --find-links "$REPO/.whl" --no-deps "${optional[@]}" \
    || echo "(optional install failed; the steps that use them say so)"
fi
((${#unavailable[@]})) && echo "optional, not importable and no wheel (skipped cleanly): ${unavailable[*]}"

say "build + import daskwp"
t0=$SECONDS
build_rc=0
if ((built)); then
  echo "daskwp and its extension already import from this checkout (GPU_CHECK_REBUILD=1 rebuilds)"
else
  command -v c++ >/dev/null || command -v g++ >/dev/null || { echo "no C++ compiler" >&2; exit 3; }
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PY" -m pip install -q --no-index --no-deps \
    --no-build-isolation -e "$REPO" || build_rc=$?
fi
"$PY" -c "import daskwp, daskwp._ext; print('daskwp', daskwp.__version__, 'extension', daskwp._ext.__file__)" \
  || { echo "gpu_check: daskwp does not import (build rc $build_rc)" >&2; exit 3; }
build_s=$((SECONDS - t0))

say "GPU tests: NVRTC compile of the CuPy source, then pytest -m gpu ${GPU_CHECK_TESTS:-tests}"
t0=$SECONDS
tests_rc=0
# Caps keep a hung test from spending the device's time (FAST: the whole run stays inside
# one 10-minute device call).
if [[ "$FAST" == 1 ]]; then t_nvrtc=90 t_gpu=180; else t_nvrtc=300 t_gpu=900; fi
timeout "$t_nvrtc" "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py -rs \
  -k "(nvrtc and compute_90) or digest or include or implementation" || tests_rc=$?
# -m gpu selects the gpu-marked tests everywhere, tests/test_backends.py's "gpu" backend
# parameter included; without a device they skip, with the reason.
read -ra gpu_paths <<< "${GPU_CHECK_TESTS:-tests}"
gpu_rc=0
timeout "$t_gpu" "$PY" -m pytest -q -p no:cacheprovider "${gpu_paths[@]}" -m gpu -rs \
  --junitxml="$OUT_DIR/gpu_tests.xml" || gpu_rc=$?
((gpu_rc == 5)) && gpu_rc=0   # none selected is not a failure
((gpu_rc)) && tests_rc=$gpu_rc
tests_s=$((SECONDS - t0))

say "gpu_check.py"
"$PY" - "$WORK/shell.json" "$OUT_DIR/gpu_tests.xml" "$build_s" "$built" "$build_rc" \
  "$tests_rc" "$tests_s" <<'EOF'
import json, sys
import xml.etree.ElementTree as ET
out, xml, build_s, built, build_rc, tests_rc, tests_s = sys.argv[1:]
t = {"rc": int(tests_rc), "seconds": int(tests_s)}
try:
    root = ET.parse(xml).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    for k in ("tests", "failures", "errors", "skipped"):
        t[k] = sum(int(s.get(k, 0)) for s in suites)
except Exception as e:
    t["junit"] = f"unreadable: {e}"
json.dump({"build": {"seconds": int(build_s), "already_built": built == "1",
                     "rc": int(build_rc)}, "gpu_tests": t}, open(out, "w"))
EOF
ARGS=(--data "$DATA" --out "$OUT_DIR" --extra-json "$WORK/shell.json")
[[ "$FAST" == 1 ]] && ARGS+=(--fast)
[[ "$CPU_ONLY" == 1 ]] && ARGS+=(--cpu-only)
# shellcheck disable=SC2206
[[ -n "${GPU_CHECK_ARGS:-}" ]] && ARGS+=(${GPU_CHECK_ARGS})
# A last resort against a hang: the JSON is rewritten after every section, so what was
# measured before the limit still comes back.
limit="${GPU_CHECK_PY_TIMEOUT:-$([[ "$FAST" == 1 ]] && echo 300 || echo 1800)}"
check_rc=0
timeout -s INT -k 20 "$limit" "$PY" benchmarks/gpu_check.py "${ARGS[@]}" || check_rc=$?
((check_rc == 124)) && echo "gpu_check.py stopped after $limit s (GPU_CHECK_PY_TIMEOUT)"

say "done: build ${build_s} s, tests ${tests_s} s (rc $tests_rc), gpu_check.py rc $check_rc"
"$PY" - "$OUT_DIR/gpu_check.json" <<'EOF' || true
import json, sys
R = json.load(open(sys.argv[1]))
t = R.get("gpu_tests", {})
print(f"gpu tests: {t.get('tests', '?')} selected, {t.get('failures', '?')} failed, "
      f"{t.get('errors', '?')} errors, {t.get('skipped', '?')} skipped (rc {t.get('rc')})")
print("results:", sys.argv[1], "and gpu_check.md beside it")
print(R["summary"]["line"])
EOF
if ((tests_rc || check_rc)); then exit 1; fi
exit 0
