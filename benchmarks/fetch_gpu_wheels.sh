#!/usr/bin/env bash
# Fetch into .whl/ (git-ignored) the wheels benchmarks/gpu_check.sh installs offline on a
# device machine (it has CuPy, PyTorch, numpy, pandas, pyarrow and tokenizers, no network).
# Run here, from the repository root, before `run(... carry=[".gpudata", ".whl"])`.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || grep -qx '/.whl/' .gitignore || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
common=(--no-deps --only-binary=:all: --implementation cp -d .whl
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64 --platform any)
# Build: scikit-build-core + nanobind (+ cmake/ninja in case the machine lacks them).
# Import: dask and its pure-Python needs, pyyaml. Tests: pytest. Python 3.10 extras last.
python3 -m pip download "${common[@]}" --python-version 3.12 \
  scikit-build-core==1.1.2 nanobind==3.1.0 pathspec packaging cmake ninja \
  dask==2026.8.0 cloudpickle fsspec partd locket toolz click 'importlib_metadata<9' zipp \
  pytest pluggy iniconfig pygments
for v in 3.10 3.11 3.12 3.13; do
  python3 -m pip download "${common[@]}" --python-version "$v" pyyaml==6.0.4
done
python3 -m pip download "${common[@]}" --python-version 3.10 tomli exceptiongroup typing_extensions
du -sh .whl
