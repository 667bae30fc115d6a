#!/usr/bin/env bash
# Full AddressSanitizer + UBSan run of the native core (minutes; the pytest version,
# tests/test_sanitizers.py, runs a sample in under a minute).
#
#   tests/sanitize.sh [DATA_DIR] [RANDOM_DOCS]
#   tests/sanitize.sh --extension [PYTEST ARGS...]
#
# DATA_DIR: the shared data folder (default: $DASKWP_SHARED_DATA, else ../shared/data).
# Builds tests/native/asan_driver.cpp with -fsanitize=address,undefined into
# build/sanitizers/full/, dumps the compiled blobs of every vocabulary under DATA_DIR/vocab
# (and of the bundled one) with four normalizer flag combinations, and runs every line of
# every corpus (and each corpus file as one document) plus RANDOM_DOCS random byte strings
# (default 20000) through every pair. Exit status 0 and an "OK ..." line when clean; a
# sanitizer report and a non-zero status otherwise.
#
# Python: the repository's virtual environment (.venv) when present, else python3; it only
# writes the blobs (the sanitized process is the C++ driver, no LD_PRELOAD needed).
#
# --extension: builds the Python extension itself with DASKWP_SANITIZE=address,undefined
# (cmake, into build/asan-ext; the installed extension is not touched), stages a copy of the
# package with it under build/asan-pkg (plus a sitecustomize.py that disables the editable
# install's import hook, so PYTHONPATH wins), and runs pytest (default: the bad-input,
# core-case, window and hypothesis tests) with the sanitizer runtimes preloaded. nvcc
# crashes under the preloaded runtime, so the nvcc tests are deselected.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$REPO/.venv/bin/python"
[ -x "$PY" ] || PY=python3

if [ "${1:-}" = "--extension" ]; then
  shift
  cmake -S "$REPO" -B "$REPO/build/asan-ext" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DDASKWP_SANITIZE=address,undefined -DPython_EXECUTABLE="$PY" >/dev/null
  cmake --build "$REPO/build/asan-ext" -j"$(nproc)"
  STAGE="$REPO/build/asan-pkg"
  rm -rf "$STAGE" && mkdir -p "$STAGE/daskwp"
  # The whole package (its subpackages too), then the sanitized extension in place of any.
  cp -r "$REPO/daskwp/." "$STAGE/daskwp/"
  find "$STAGE/daskwp" -name '__pycache__' -prune -exec rm -rf {} + 2>/dev/null || true
  rm -f "$STAGE"/daskwp/_ext*.so
  cp "$REPO"/build/asan-ext/_ext*.so "$STAGE/daskwp/"
  printf '%s\n' 'import sys' \
    'sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()' \
    '                    and "editable" not in type(f).__module__.lower()]' \
    > "$STAGE/sitecustomize.py"
  if [ $# -eq 0 ]; then
    set -- "$REPO/tests/test_bad_input.py" "$REPO/tests/test_core_cases.py" \
        "$REPO/tests/test_windows.py" "$REPO/tests/test_hypothesis.py" -k "not nvcc and not gpu"
  fi
  CC_="${CC:-gcc}"
  export PYTHONPATH="$STAGE"
  export LD_PRELOAD="$("$CC_" -print-file-name=libasan.so) $("$CC_" -print-file-name=libubsan.so)"
  export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  cd "$STAGE"  # not the repository root: its daskwp/ must not shadow the staged one
  "$PY" -c "import daskwp._ext as e; assert e.__file__.startswith('$STAGE'), e.__file__"
  exec "$PY" -m pytest -p no:cacheprovider -q "$@"
fi

DATA="${1:-${DASKWP_SHARED_DATA:-$REPO/../shared/data}}"
RANDOM_DOCS="${2:-20000}"
CXX="${CXX:-g++}"
OUT="$REPO/build/sanitizers/full"
mkdir -p "$OUT"

FLAGS=(-std=c++17 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined
       -fno-sanitize-recover=all -Wall -Wextra)
echo "building $OUT/asan_driver with $CXX ${FLAGS[*]}"
"$CXX" "${FLAGS[@]}" -I"$REPO/daskwp/kernels" -c "$REPO/tests/native/asan_driver.cpp" \
    -o "$OUT/asan_driver.o" &
"$CXX" "${FLAGS[@]}" -I"$REPO/daskwp/kernels" -c "$REPO/daskwp/kernels/vocab_builder.cpp" \
    -o "$OUT/vocab_builder.o" &
wait %1 && wait %2
"$CXX" "${FLAGS[@]}" "$OUT/asan_driver.o" "$OUT/vocab_builder.o" -o "$OUT/asan_driver"

echo "writing blobs and the manifest"
cd "$REPO"
"$PY" - "$OUT" "$DATA" "$RANDOM_DOCS" <<'EOF'
import sys
from pathlib import Path

import daskwp
from daskwp.core.normalizer import norm_blob

out, data, n_random = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
lines = []
vocabs = [("bundled", daskwp.Vocabulary.default())]
if (data / "vocab").is_dir():
    for d in sorted((data / "vocab").iterdir()):
        if (d / "vocab.txt").is_file():
            vocabs.append((d.name, daskwp.Vocabulary.from_file(d / "vocab.txt")))
            lines.append(f"vocabtxt {d / 'vocab.txt'}")
for name, v in vocabs:
    (out / f"{name}.vocab.blob").write_bytes(v.blob)
    lines.append(f"vocab {out / f'{name}.vocab.blob'}")
flags = [(True, True, True, True), (True, True, False, False), (False, False, True, True),
         (False, True, False, True)]
for k, f in enumerate(flags):
    (out / f"norm{k}.blob").write_bytes(norm_blob(*f))
    lines.append(f"norm {out / f'norm{k}.blob'}")
if (data / "corpus").is_dir():
    for p in sorted((data / "corpus").rglob("*")):
        if p.is_file() and p.suffix in (".txt", ".log", ".json") and \
                not p.name.upper().startswith("LICENSE"):
            lines.append(f"corpus {p}")
else:
    print(f"note: no corpus folder under {data}; random documents only", file=sys.stderr)
lines.append(f"corpus {Path(daskwp.__file__).parent / 'data' / 'sample.txt'}")
lines.append(f"random {n_random} 1")
(out / "manifest.txt").write_text("\n".join(lines) + "\n")
print(f"{len(vocabs)} vocabularies, {len(flags)} flag combinations")
EOF

echo "running (this takes minutes)"
ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1" \
UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$OUT/asan_driver" "$OUT/manifest.txt"
