#!/usr/bin/env bash
# Prepare, here (with a network), what benchmarks/gpu_check.sh needs on a device machine
# that has none: wheels in .whl/ and the data in .gpudata/ (both git-ignored), then check
# that they travel: the device tool carries the working tree plus the `carry` paths, 64 MiB
# in all.
#
# Usage, from anywhere:  bash benchmarks/fetch_gpu_wheels.sh [DATA_DIR]
#   DATA_DIR  folder with corpus/ and vocab/ (default: $DASKWP_SHARED_DATA, ../shared/data);
#             its corpus/ and vocab/ are copied into .gpudata/ (nothing else of it).
# Then:  run(command="bash benchmarks/gpu_check.sh", carry=[".gpudata", ".whl"])
#
# The device image (docs in the device tool's KINDS.md) has Python 3.12, CuPy, PyTorch,
# numpy, pandas, pyarrow, HF tokenizers, cuda-core, nvidia-ml-py, msgpack, psutil, jinja2,
# scikit-build-core, nanobind, cmake, ninja and pytest, but no dask, distributed or
# dask-cuda. gpu_check.sh installs a wheel from .whl/ only when its module does not import,
# so the fallbacks below cost carry space, not install time. WITH_CMAKE=1 adds the cmake
# wheel (~30 MB; the image has cmake).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
mkdir -p .git/info
for p in /.whl/ /.gpudata/; do
  grep -qx "$p" .gitignore 2>/dev/null || grep -qx "$p" .git/info/exclude 2>/dev/null \
    || echo "$p" >> .git/info/exclude
done

# ---- data ------------------------------------------------------------------------------
SRC="${1:-}"
for cand in "$SRC" "${DASKWP_SHARED_DATA:-}" "$REPO/../shared/data"; do
  if [[ -n "$cand" && -d "$cand/corpus" && -d "$cand/vocab" ]]; then SRC="$(cd "$cand" && pwd)"; break; fi
done
if [[ -n "$SRC" && -d "$SRC/corpus" ]]; then
  rm -rf .gpudata && mkdir -p .gpudata
  cp -r "$SRC/corpus" "$SRC/vocab" .gpudata/
  [[ -f "$SRC/MANIFEST.md" ]] && cp "$SRC/MANIFEST.md" .gpudata/
  echo "data: $SRC -> .gpudata ($(find .gpudata -type f | wc -l) files)"
else
  echo "data: none found (give DATA_DIR); .gpudata not made" >&2
fi

# ---- wheels ----------------------------------------------------------------------------
rm -rf .whl && mkdir -p .whl
common=(--no-deps --only-binary=:all: --implementation cp -d .whl
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform any)
PYV=3.12   # the device image's python3
# Build (when the image lacks them): scikit-build-core + nanobind (+ ninja).
# Runtime: dask, distributed and their pure-Python needs, pyyaml. Tests: pytest.
# Distributed path: dask-cuda (its cuda-core and nvidia-ml-py are in the image;
# nvidia-ml-py is fetched as a fallback). Anchors: nanotoken (benchmark only).
python3 -m pip download "${common[@]}" --python-version "$PYV" \
  scikit-build-core==1.1.2 nanobind==3.1.0 pathspec packaging ninja \
  dask==2026.8.0 distributed==2026.8.0 cloudpickle fsspec partd locket toolz click \
  tornado zict tblib sortedcontainers msgpack psutil jinja2 markupsafe urllib3 pyyaml \
  pytest pluggy iniconfig pygments \
  dask-cuda==26.10.0 nvidia-ml-py nanotoken==0.1.0
if [[ "${WITH_CMAKE:-0}" == 1 ]]; then
  python3 -m pip download "${common[@]}" --python-version "$PYV" cmake
fi

# ---- what travels ----------------------------------------------------------------------
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
w=$(du -sb .whl | cut -f1)
d=$(du -sb .gpudata 2>/dev/null | cut -f1 || echo 0)
t=$( (git ls-files -z; git ls-files -z --others --exclude-standard) \
     | xargs -0 -r du -cb 2>/dev/null | awk '/total$/ { s += $1 } END { print s + 0 }')
total=$((w + d + t))
echo "wheels $(mib "$w") MiB ($(ls .whl | wc -l) files), data $(mib "$d") MiB, tree $(mib "$t") MiB:" \
     "$(mib "$total") MiB of the 64 MiB carry limit"
if ((total > 64 * 1048576)); then
  echo "too large to travel: drop WITH_CMAKE or data" >&2
  exit 1
fi
