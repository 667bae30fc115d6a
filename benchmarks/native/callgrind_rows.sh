#!/usr/bin/env bash
# Instructions of the core per corpus row of benchmarks/cpu_bench.py (its files and
# vocabulary), options off and offsets in bytes / chars, cold and warm memo: callgrind over
# core_bench.cpp (one thread, run_pass only), docs/design.md §2.9's cost figures.
#
#   benchmarks/native/callgrind_rows.sh OUT_DIR [DATA_DIR] [ROW...]
#
# ROW: en_ewt books latin ruel arhe hith cjk logs (default: all). Writes OUT_DIR/rows.tsv
# (row, mode, memo, instructions, conditional-branch mispredictions, then the ids / offsets
# checksums) and prints each row's ratio to its options-off run and its mispredictions per
# KB of input (callgrind's branch model, --branch-sim=yes). Minutes per row (valgrind);
# never a timing.
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${1:?usage: callgrind_rows.sh OUT_DIR [DATA_DIR] [ROW...]}"
DATA="${2:-${DASKWP_SHARED_DATA:-$REPO/../shared/data}}"
shift $(( $# >= 2 ? 2 : 1 ))
ROWS="${*:-en_ewt books latin ruel arhe hith cjk logs}"
PY="$REPO/.venv/bin/python"
[ -x "$PY" ] || PY=python3
mkdir -p "$OUT"
g++ -O3 -g -march=x86-64-v2 -std=c++17 -I"$REPO/daskwp/kernels" \
  "$REPO/benchmarks/native/core_bench.cpp" "$REPO/daskwp/kernels/vocab_builder.cpp" \
  -o "$OUT/core_bench"
for v in bert-base-uncased:--lowercase bert-base-multilingual-cased:--no-lowercase; do
  [ -f "$OUT/${v%%:*}/vocab.blob" ] || "$PY" "$REPO/benchmarks/native/dump_blobs.py" \
    "$OUT/${v%%:*}" "$DATA/vocab/${v%%:*}/vocab.txt" "${v##*:}"
done
C="$DATA/corpus"
files() {
  case $1 in
    en_ewt) echo "$C/en_ewt.txt" ;;
    books) echo "$C/en_book_moby_dick.txt $C/en_book_pride_and_prejudice.txt" ;;
    latin) echo "$C/multi/de.txt $C/multi/es.txt $C/multi/fr.txt $C/multi/tr.txt $C/multi/vi.txt" ;;
    ruel) echo "$C/multi/ru.txt $C/multi/el.txt" ;;
    arhe) echo "$C/multi/ar.txt $C/multi/he.txt" ;;
    hith) echo "$C/multi/hi.txt $C/multi/th.txt" ;;
    cjk) echo "$C/multi/zh.txt $C/multi/ja.txt $C/multi/ko.txt" ;;
    logs) ls "$C"/logs/*.log | sort ;;
    *) echo "unknown row $1" >&2; exit 2 ;;
  esac
}
: > "$OUT/rows.tsv"
for row in $ROWS; do
  # cpu_bench.py's read_lines: non-empty lines, no CR.
  # shellcheck disable=SC2046
  cat $(files "$row") | tr -d '\r' | grep -v '^$' > "$OUT/$row.txt"
  case $row in en_ewt | books | logs) V=bert-base-uncased ;; *) V=bert-base-multilingual-cased ;; esac
  for mode in off bytes chars; do
    for memo in cold warm; do
      envs=()
      [ "$mode" != off ] && envs+=("DASKWP_CORE_BENCH_OFFSETS=$mode")
      [ "$memo" = warm ] && envs+=("DASKWP_CORE_BENCH_WARM=1")
      f="$OUT/$row.$mode.$memo.callgrind"
      env "${envs[@]}" valgrind --tool=callgrind --branch-sim=yes --callgrind-out-file="$f" \
        --toggle-collect='run_pass*' "$OUT/core_bench" "$OUT/$V/vocab.blob" \
        "$OUT/$V/norm.blob" "$OUT/$row.txt" 1 > "$f.log" 2>&1
      # events Ir Bc Bcm Bi Bim: instructions and conditional mispredictions
      ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
      bcm=$(awk '/^(summary|totals):/ {print $4; exit}' "$f")
      sums=$(grep -o 'offsets [0-9a-f]*\|ids [0-9a-f]*' "$f.log" | tr '\n' ' ')
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$row" "$mode" "$memo" "$ir" "$bcm" \
        "$(stat -c %s "$OUT/$row.txt")" "$sums" >> "$OUT/rows.tsv"
    done
  done
done
awk -F'\t' '{k=$1" "$3; if ($2=="off") off[k]=$4;
  printf "%-7s %-5s %-4s %12d  %.2fx  %6.1f mispredictions/KB\n", $1, $2, $3, $4, $4/off[k],
         1000 * $5 / $6}' "$OUT/rows.tsv"
